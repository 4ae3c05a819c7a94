"""The studies: one file per study in this package (its ``STUDY``, a
``meowjax.eval.study_spec.Study``: arms, seeds, comparisons and the claims they test), and the
runner that trains their cells and writes the report (``runner``; ``python -m
experiments.studies``). A new question is a new file here."""

import importlib
import pkgutil

from experiments.studies.runner import (RESULTS_DIR, SCHEMA, SFT_DIR, STUDIES, config_arg,
                                        cell_name, learning_curve, plan, run_cell, run_study,
                                        with_seeds)
from meowjax.eval.study_spec import Study

__all__ = ["RESULTS_DIR", "SCHEMA", "SFT_DIR", "STUDIES", "Study", "cell_name", "config_arg",
           "learning_curve", "plan", "run_cell", "run_study", "with_seeds"]


def _discover() -> dict[str, Study]:
    """Every ``STUDY`` of this package's modules, by name."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in ("runner", "__main__"):
            continue
        st = getattr(importlib.import_module(f"{__name__}.{info.name}"), "STUDY", None)
        if isinstance(st, Study):
            found[st.name] = st
    return found


STUDIES.update(_discover())
