"""Shared fixtures: tiny TextWorld games generated once per pytest run (scope="session")."""
import shutil
import tempfile
import types

import pytest


def pytest_configure(config):
    """One persistent XLA compile cache for the whole run, in a fresh private folder: the many
    trainer runs of the suite compile the same tiny-model programs, and a later one loads them
    (the same executables: numerics unchanged). Before any test compiles anything."""
    from meowjax.runtime import xla_cache
    config.meowjax_xla_cache = xla_cache.enable(tempfile.mkdtemp(prefix="meowjax-tests-xla-"))


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "meowjax_xla_cache", ""), ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_games_dir(tmp_path_factory):
    """A games cache dir; trainers generate their tiny game sets into it on first use."""
    return str(tmp_path_factory.mktemp("games"))


@pytest.fixture(scope="session")
def trained_cell(tiny_games_dir, tmp_path_factory):
    """One smoke cell of configs/study.py trained to the end (SFT -> 2 RL iterations ->
    final evaluation) through an access-tracking config: workdir, config, tracked view."""
    from configs import study
    from meowjax.trainers import run
    from tests import config_tracking
    c = study.get_config("estimator=rloo,reward=sparse,sft_share=0.5,seed=0,smoke=True")
    c.unlock()
    c.games.cache_dir = tiny_games_dir
    c.lock()
    workdir = str(tmp_path_factory.mktemp("trained") / "rloo-sparse-s0")
    tracked = config_tracking.track(c)
    run.run(tracked, workdir)
    from tests import golden   # its record now, before any test adds files to the workdir
    return types.SimpleNamespace(workdir=workdir, config=c, tracked=tracked,
                                 record=golden.record(workdir))


# 8 fake CPU devices run their collectives as threads of one process; on a loaded 2-core machine
# one thread can miss XLA's 40 s rendezvous deadline and XLA aborts the process. Subprocess tests
# with a multi-device CPU mesh add these flags (a deadline, not a change of numerics).
CPU_COLLECTIVE_FLAGS = ("--xla_cpu_collective_call_terminate_timeout_seconds=1200 "
                        "--xla_cpu_collective_timeout_seconds=1200")
