"""Words about the studies that come from their tables: templated findings for the README, and
a check that every number quoted in the results document's hand-written prose is one its
generated tables print.

    lines = findings(loaded, studies)                 # one templated item per study with cells
    write_findings("README.md", lines)                # between the README's findings markers
    check_prose(kept_prose, generated_text)           # ValueError naming an unbacked number

A number is a decimal as the tables print it (``0.131``, ``+0.131``, ``-0.006``); a leading
``+`` is ignored, so ``+0.131`` in prose is backed by ``0.131`` or ``+0.131`` in a table.
"""

from __future__ import annotations

import pathlib
import re
import textwrap
from typing import Mapping, Sequence

from meowjax.eval import study_spec as spec
from meowjax.eval.study_cells import Cells

NUMBER = re.compile(r"(?<![\w.])[+-]?\d+\.\d+(?!\w|\.\d)")   # "0.131." ends a sentence
BEGIN, END = "<!-- findings:studies -->", "<!-- /findings:studies -->"
CONCLUSIVE = ("agrees", "disagrees", "above zero", "below zero")


def numbers(text: str) -> set[str]:
    """The decimals of ``text``, a leading "+" dropped."""
    return {m.group(0).lstrip("+") for m in NUMBER.finditer(text)}


def unbacked(prose: Mapping[str, str], generated: str) -> dict[str, list[str]]:
    """Per prose block, the numbers it quotes that no generated part of the document prints."""
    have = numbers(generated)
    out = {}
    for key, text in prose.items():
        missing = sorted(numbers(text) - have)
        if missing:
            out[key] = missing
    return out


def check_prose(prose: Mapping[str, str], generated: str) -> None:
    """ValueError naming each prose block that quotes a number the tables do not print."""
    bad = unbacked(prose, generated)
    if bad:
        where = "; ".join(f"prose:{k} quotes {', '.join(v)}" for k, v in bad.items())
        raise ValueError(f"The results document's prose quotes numbers no table prints ({where}). "
                         "Quote each number as a table of the document prints it (e.g. +0.131), "
                         "or drop it; nothing was written.")


def _ci(res: spec.Result) -> str:
    lo, hi = (res.boot_low, res.boot_high) if res.boot_low == res.boot_low else (res.t_low,
                                                                                 res.t_high)
    return f"{res.mean:+.3f} [{lo:.3f}, {hi:.3f}]"


def _counts(results: Sequence[tuple[spec.Comparison, spec.Result]]) -> str:
    """ "2 agree, 1 inconclusive, 3 not run yet": the verdicts' counts, in a fixed order."""
    kinds = [r.verdict.split(" at MDE")[0] for _, r in results]
    order = ("agrees", "disagrees", "above zero", "below zero", "inconclusive", spec.INERT,
             spec.NOT_RUN)
    return ", ".join(f"{kinds.count(k)} {k}" for k in order if kinds.count(k))


def study_finding(st: spec.Study, cells: Cells) -> str | None:
    """One paragraph for ``st``: RL's gain at the RL difficulty of each arm with every seed run,
    then its comparisons' verdicts counted, between arms and within an arm (after - before
    RL), naming the metrics whose change is conclusive; None without cells."""
    if not any(cells.get(arm) for arm, _ in st.arms):
        return None
    gains = {arm: spec.rl_gain(arm, cells, st.seeds) for arm, _ in st.arms}
    full = [arm for arm, _ in st.arms if all(s in cells.get(arm, {}) for s in st.seeds)]
    text = f"**{st.question}** (`{st.name}`, {len(full)} of {len(st.arms)} arms at every seed)"
    if full:
        text += (": RL's gain at the RL difficulty [two-stage 95%] "
                 + ", ".join(f"{arm} {_ci(gains[arm])}" for arm in full))
    moved = {arm: spec.rl_moved(g) for arm, g in gains.items()} if st.inert_check else None
    results = [(cmp, spec.judge(cmp, cells, st.seeds, moved)) for cmp in st.comparisons]
    between = [(c, r) for c, r in results if c.b is not None]
    within = [(c, r) for c, r in results if c.b is None]
    for words, group in (("Between arms", between), ("After − before RL", within)):
        if not group:
            continue
        text += f". {words}: {_counts(group)}"
        sure = sorted({f"{c.metric} ({c.role})" for c, r in group if r.verdict in CONCLUSIVE})
        if sure:
            text += f" (conclusive: {', '.join(sure)})"
    return text + "."


def findings(loaded: Mapping[str, Cells], studies: Sequence[spec.Study]) -> list[str]:
    """The README's findings: one line per study with cells, in the studies' order."""
    return [line for st in studies
            if (line := study_finding(st, loaded.get(st.name, {}))) is not None]


def write_findings(readme: str, lines: Sequence[str], document: str = "docs/results.md") -> bool:
    """Replaces the text between the README's findings markers with ``lines`` (a list linking to
    ``document``); False, writing nothing, when the README has no markers."""
    path = pathlib.Path(readme)
    text = path.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        return False
    body = ("\n".join(textwrap.fill(f"- {line}", 100, subsequent_indent="  ") for line in lines)
            if lines else "- No study cell has run yet.")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    source = textwrap.fill(
        f"Written by `python -m experiments.studies --report` from the cells' records (test "
        f"games); [{document}]({document}) has the tables, intervals and verdict rule behind "
        "every figure.", 100)
    path.write_text(f"{head}{BEGIN}\n{body}\n\n{source}\n{END}{tail}", encoding="utf-8")
    return True
