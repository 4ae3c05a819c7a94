"""eval.sampled_games: which held-out games the sampled evaluation (Pass@(K,T), per-turn
diagnostics) plays. `pytest -k sampled_games`; the default smoke run checks it end to end."""
import pytest

from meowjax.eval.held_out import sampled_tasks


def test_sampled_games_takes_the_first_games_or_all():
    tasks = [f"game{i}" for i in range(5)]
    assert sampled_tasks(tasks, 0) == tasks
    assert sampled_tasks(tasks, 2) == ["game0", "game1"]
    assert sampled_tasks(tasks, 5) == tasks


@pytest.mark.parametrize("num, words", [(-1, "must be >= 0"), (6, "holds 5 games")])
def test_sampled_games_refuses_what_the_split_cannot_give(num, words):
    with pytest.raises(ValueError, match=words):
        sampled_tasks(list(range(5)), num)
