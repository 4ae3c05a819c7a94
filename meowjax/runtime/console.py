"""What a person watching a run sees: one line per phase, progress bars, one line per RL iteration.

Only the console is shaped here; every scalar of every step still goes to TensorBoard and
``metrics.jsonl`` (``runtime.metrics_log``). What reaches stderr, by absl verbosity:

- default (INFO, what the entry points set): our own INFO lines (phases, RL iterations,
  evaluations), WARNING and above from everyone, and progress bars with rate and ETA;
- ``--verbosity=1`` (``-v 1``): also third-party INFO (orbax's checkpoint internals, jax's backend
  probing, ...) and our DEBUG lines, among them every metric of every step;
- ``--verbosity=2``: also third-party DEBUG.

Progress bars are tqdm bars when stderr is a terminal. Otherwise (CI logs, ``2>&1 | tee``) a bar
is a plain log line at most every ``PLAIN_EVERY_S`` seconds, so a long phase shows where it is
and a short one shows only its phase line.
"""

from __future__ import annotations

import logging as py_logging
import os
import sys
import time
from typing import Any, Mapping

import tqdm
from absl import logging

PLAIN_EVERY_S = 60.0
_BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
# Records from these packages are ours: shown at INFO. Any other logger's INFO is third-party.
OURS = ("meowjax", "experiments", "configs", "benchmarks")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OUR_DIRS = tuple(os.path.join(_ROOT, d) + os.sep for d in OURS)


def is_ours(record: py_logging.LogRecord) -> bool:
    """absl.logging calls and bare ``logging.info`` (loggers "absl" / "root") are judged by the file
    that made the call (orbax logs through absl); named loggers by their top-level name."""
    if record.name in ("absl", "root"):
        return os.path.abspath(record.pathname).startswith(_OUR_DIRS)
    return record.name.partition(".")[0] in OURS


class QuietThirdParty(py_logging.Filter):
    """Drops third-party INFO below absl verbosity 1 and third-party DEBUG below verbosity 2; lets
    through WARNING and above, and everything of ours (the logger level decides the rest)."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        if record.levelno >= py_logging.WARNING or is_ours(record):
            return True
        need = 1 if record.levelno >= py_logging.INFO else 2
        return logging.get_verbosity() >= need


def install() -> None:
    """Called by the entry points: INFO unless ``--verbosity`` was given, the third-party filter on
    absl's handler, and log lines that clear and redraw any open progress bar instead of
    breaking it. Idempotent."""
    from absl import flags
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.INFO)
    handler = logging.get_absl_handler()
    if any(isinstance(f, QuietThirdParty) for f in handler.filters):
        return
    handler.addFilter(QuietThirdParty())
    writer = handler.python_handler  # what writes the lines that pass the filter
    emit = writer.emit

    def emit_around_bars(record):
        if tqdm.tqdm._instances:  # pylint: disable=protected-access
            with tqdm.tqdm.external_write_mode(file=sys.stderr):
                emit(record)
        else:
            emit(record)

    writer.emit = emit_around_bars


class _ProcessTag(py_logging.Filter):
    """Prefixes every line with the process that wrote it (``[process 1/4] ...``)."""

    def __init__(self, tag: str):
        super().__init__()
        self.tag = tag

    def filter(self, record: py_logging.LogRecord) -> bool:
        if not getattr(record, "meowjax_tagged", False):
            record.msg, record.meowjax_tagged = f"[{self.tag}] {record.msg}", True
        return True


def tag_lines(tag: str) -> None:
    """Multi-process runs: each log line says which process wrote it. Replaces an earlier tag."""
    handler = logging.get_absl_handler()
    for f in [f for f in handler.filters if isinstance(f, _ProcessTag)]:
        handler.removeFilter(f)
    handler.addFilter(_ProcessTag(tag))


def info(msg: str, *args: Any) -> None:
    """An INFO line attributed to the caller (absl skips this frame)."""
    logging.info(msg, *args)


logging.ABSLLogger.register_frame_to_skip(__file__, "info")


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class Progress:
    """A progress bar over ``total`` units of work, with rate and ETA; a context manager.

    ``update(n, **postfix)`` advances it (``postfix``: a few numbers shown beside it, e.g. the last
    logged loss). ``plain_every_s=None``: no plain lines when stderr is not a terminal (the caller
    prints its own line per unit, e.g. one per RL iteration)."""

    def __init__(self, desc: str, total: int, unit: str = "it", *, initial: int = 0,
                 plain_every_s: float | None = PLAIN_EVERY_S):
        self.desc, self.total, self.unit, self.initial = desc, total, unit, initial
        self.n, self.postfix, self.plain_every_s = initial, "", plain_every_s
        self.start = self.last_line = time.time()
        self.bar = (tqdm.tqdm(total=total, initial=initial, desc=desc, unit=unit,
                              file=sys.stderr, dynamic_ncols=True, mininterval=0.5, leave=False)
                    if sys.stderr.isatty() else None)

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.n += n
        if postfix:
            self.postfix = ", ".join(f"{k}={_fmt(v)}" for k, v in postfix.items())
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix_str(self.postfix, refresh=False)
            self.bar.update(n)
        elif (self.plain_every_s is not None and self.n < self.total
              and time.time() - self.last_line >= self.plain_every_s):
            self.last_line = time.time()
            info("%s", self.line())

    def line(self) -> str:
        """The bar as text, without the bar: "SFT: 30/100 (30%) [00:12<00:28, 2.5step/s, ...]"."""
        return tqdm.tqdm.format_meter(self.n, self.total, time.time() - self.start,
                                      prefix=self.desc, unit=self.unit, initial=self.initial,
                                      bar_format=_BAR_FORMAT, postfix=self.postfix or None)

    def eta(self) -> str:
        """"ETA 3:07" from the rate so far ("" before the first unit or after the last)."""
        done, left = self.n - self.initial, self.total - self.n
        if done <= 0 or left <= 0:
            return ""
        return "ETA " + tqdm.tqdm.format_interval((time.time() - self.start) / done * left)

    def elapsed(self) -> float:
        return time.time() - self.start

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rl_line(iteration: int, total: int, m: Mapping[str, float], eta: str = "") -> str:
    """One RL iteration: the latest held-out learning-curve success (``curve/success``, where the
    run has a curve), rollout success and return, KL (to the reference when the run has a KL
    term, and the approximate KL of the update), entropy, the TIS ratio and clipped (or masked)
    share where the run has truncated importance sampling, and seconds (rollout + update)."""
    parts = [f"RL {iteration}/{total}:"]
    for key, name, spec in (("curve/success", "held-out", ".3f"),
                            ("rollout/success", "success", ".3f"), ("rollout/return", "return", ".3g"),
                            ("pg/kl_ref", "kl_ref", ".3g"), ("pg/approx_kl", "approx_kl", ".2g"),
                            ("pg/entropy", "entropy", ".3g"),
                            ("pg/tis_ratio_mean", "tis_ratio", ".4g"),
                            ("pg/tis_clipped_share", "tis_clipped", ".2g"),
                            ("pg/tis_masked_share", "tis_masked", ".2g")):
        if key in m and not (key == "pg/kl_ref" and not m[key]):
            parts.append(f"{name} {float(m[key]):{spec}},")
    roll, upd = float(m.get("time/rollout_s", 0.0)), float(m.get("time/update_s", 0.0))
    parts.append(f"{roll + upd:.1f} s (rollout {roll:.1f} + update {upd:.1f})")
    if eta:
        parts[-1] += ","
        parts.append(eta)
    return " ".join(parts)


def eval_line(title: str, results: Mapping[str, Mapping[str, Any]], seconds: float,
              pass_at_k_t: Mapping[str, Any] | None = None) -> str:
    """One evaluation: ``results`` maps a split label to its ``outcomes.success_summary`` (games
    won / played, success); ``pass_at_k_t`` (``PassKTResult.to_json()``) adds Pass@(K,T_max) at
    the smallest and largest K."""
    parts = [f"{label} {r['wins']}/{r['n']} won ({r['success']:.3f})"
             for label, r in results.items()]
    if pass_at_k_t:
        ks, t = pass_at_k_t["ks"], pass_at_k_t["ts"][-1]
        for i in sorted({0, len(ks) - 1}):
            parts.append(f"Pass@({ks[i]},{t}) {float(pass_at_k_t['mean'][i][-1]):.3f}")
    return f"{title}: {', '.join(parts) or 'no games'}, in {seconds:.1f} s"
