"""The console: RL iteration lines, third-party INFO kept off it, every metric still on file."""

import json
import logging

import pytest
from absl import logging as absl_logging

from meowjax.runtime import console, metrics_log


@pytest.fixture
def verbosity():
    """Sets absl's verbosity for one test and restores it after."""
    old = absl_logging.get_verbosity()
    yield absl_logging.set_verbosity
    absl_logging.set_verbosity(old)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self.addFilter(console.QuietThirdParty())

    def emit(self, record):
        self.records.append(record)


def test_rl_line_from_a_metrics_dict():
    m = {"rollout/success": 0.5, "rollout/return": 0.375, "pg/kl_ref": 0.0123,
         "pg/approx_kl": 4.5e-5, "pg/entropy": 0.7125, "time/rollout_s": 25.04,
         "time/update_s": 6.2, "pg/grad_norm": 3.0, "perf/rss_gib": 1.0}
    line = console.rl_line(3, 10, m, eta="ETA 03:37")
    assert line == ("RL 3/10: success 0.500, return 0.375, kl_ref 0.0123, approx_kl 4.5e-05, "
                    "entropy 0.713, 31.2 s (rollout 25.0 + update 6.2), ETA 03:37")
    # No KL term in the run (kl_ref is 0): only the update's approximate KL.
    assert "kl_ref" not in console.rl_line(1, 2, {**m, "pg/kl_ref": 0.0})


def test_eval_line():
    r = {"eval w2-o3-q4": {"wins": 2, "n": 3, "success": 2 / 3}}
    pk = {"ks": [1, 2], "ts": [2, 4], "mean": [[0.1, 0.25], [0.2, 0.5]]}
    assert console.eval_line("final evaluation", r, 12.34, pass_at_k_t=pk) == (
        "final evaluation: eval w2-o3-q4 2/3 won (0.667), Pass@(1,4) 0.250, Pass@(2,4) 0.500, "
        "in 12.3 s")


def test_orbax_info_is_off_at_default_verbosity_and_on_at_1(verbosity):
    handler = _Collect()
    orbax = logging.getLogger("orbax.checkpoint._src.test_console")
    ours = logging.getLogger("meowjax.test_console")
    for lg in (orbax, ours):
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False
    # orbax mostly logs through absl.logging: logger "absl", judged by the calling file.
    via_absl = logging.LogRecord("absl", logging.INFO, "/x/site-packages/orbax/checkpoint/a.py",
                                 1, "Queuing deletion of steps", None, None)
    try:
        verbosity(absl_logging.INFO)
        orbax.info("Scheduling D2H of 62 prioritized jax.Array.")
        orbax.warning("a real problem")
        ours.info("SFT: 4/4 steps")
        handler.handle(via_absl)
        assert [r.getMessage() for r in handler.records] == ["a real problem", "SFT: 4/4 steps"]
        handler.records.clear()
        verbosity(1)
        orbax.info("Scheduling D2H of 62 prioritized jax.Array.")
        orbax.debug("third-party DEBUG waits for verbosity 2")
        handler.handle(via_absl)
        assert [r.getMessage() for r in handler.records] == [
            "Scheduling D2H of 62 prioritized jax.Array.", "Queuing deletion of steps"]
    finally:
        for lg in (orbax, ours):
            lg.removeHandler(handler)
            lg.propagate = True
            lg.setLevel(logging.NOTSET)


def test_absl_calls_from_our_files_are_ours():
    ours = logging.LogRecord("absl", logging.INFO, console.__file__, 1, "phase", None, None)
    theirs = logging.LogRecord("absl", logging.INFO, logging.__file__, 1, "x", None, None)
    assert console.is_ours(ours) and not console.is_ours(theirs)


def test_metrics_writer_keeps_every_scalar_when_the_console_is_quiet(tmp_path, caplog,
                                                                     verbosity):
    verbosity(absl_logging.INFO)
    caplog.set_level(logging.DEBUG)
    w = metrics_log.MetricsWriter(str(tmp_path))
    w.write(1, {"sft/loss": 2.5, "sft/grad_norm": 1.0, "perf/rss_gib": 0.8})
    w.write(2, {"eval/eval_success": 0.5}, log=False)
    assert not [r for r in caplog.records if "step 1" in r.getMessage()]
    verbosity(1)
    w.write(3, {"sft/loss": 2.0})
    w.write(4, {"sft/loss": 1.5}, log=False)
    w.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert lines == ["step 3: sft/loss=2"]
    recs = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert recs == [{"step": 1, "sft/loss": 2.5, "sft/grad_norm": 1.0, "perf/rss_gib": 0.8},
                    {"step": 2, "eval/eval_success": 0.5}, {"step": 3, "sft/loss": 2.0},
                    {"step": 4, "sft/loss": 1.5}]


def test_progress_off_a_terminal_is_a_plain_line(caplog, verbosity):
    verbosity(absl_logging.INFO)
    caplog.set_level(logging.INFO)
    with console.Progress("SFT", 10, "step", initial=2, plain_every_s=0.0) as bar:
        assert bar.bar is None  # pytest's stderr is not a terminal
        bar.update(1, loss=2.345678)
        bar.update(7)  # the last step: the phase line says it, not a progress line
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SFT")]
    assert len(lines) == 1 and lines[0].startswith("SFT: 3/10 (30%) [")
    assert "loss=2.346" in lines[0] and "step" in lines[0]
    assert bar.eta() == ""


def test_install_is_idempotent(verbosity):
    handler = absl_logging.get_absl_handler()
    writer = handler.python_handler
    filters, emit = list(handler.filters), writer.__dict__.get("emit")
    try:
        console.install()
        console.install()
        assert sum(isinstance(f, console.QuietThirdParty) for f in handler.filters) == 1
        assert "emit" in writer.__dict__  # log lines clear and redraw open progress bars
    finally:
        handler.filters[:] = filters
        if emit is None:
            writer.__dict__.pop("emit", None)
        else:
            writer.emit = emit
