"""Shared fixtures: tiny TextWorld games generated once per test session."""
import pytest


@pytest.fixture(scope="session")
def tiny_games_dir(tmp_path_factory):
    """A games cache dir; trainers generate their tiny game sets into it on first use."""
    return str(tmp_path_factory.mktemp("games"))


# 8 fake CPU devices run their collectives as threads of one process; on a loaded 2-core machine
# one thread can miss XLA's 40 s rendezvous deadline and XLA aborts the process. Subprocess tests
# with a multi-device CPU mesh add these flags (a deadline, not a change of numerics).
CPU_COLLECTIVE_FLAGS = ("--xla_cpu_collective_call_terminate_timeout_seconds=1200 "
                        "--xla_cpu_collective_timeout_seconds=1200")
