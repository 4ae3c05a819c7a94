"""Metrics to TensorBoard event files and to absl log lines (host side, at log steps only)."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np
from absl import logging
from tensorboard import summary as tb_summary


class MetricsWriter:
    """Writes scalars to ``workdir/tb`` (TensorBoard) and appends them to ``metrics.jsonl``."""

    def __init__(self, workdir: str):
        self.tb = tb_summary.Writer(os.path.join(workdir, "tb"))
        self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")

    def write(self, step: int, metrics: Mapping[str, Any], *, log: bool = True) -> None:
        clean = {k: float(np.asarray(v)) for k, v in metrics.items()}
        for k, v in clean.items():
            self.tb.add_scalar(k, v, step=step)
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        self.tb.flush()
        if log:
            logging.info("step %d: %s", step,
                         ", ".join(f"{k}={v:.4g}" for k, v in sorted(clean.items())))

    def close(self) -> None:
        self.tb.close()
        self.jsonl.close()
