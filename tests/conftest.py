"""Shared fixtures: tiny TextWorld games generated once per test session."""
import pytest


@pytest.fixture(scope="session")
def tiny_games_dir(tmp_path_factory):
    """A games cache dir; trainers generate their tiny game sets into it on first use."""
    return str(tmp_path_factory.mktemp("games"))
