"""Game sets of a run: the RL pool's difficulty mix, disjoint from the held-out games."""
import pytest

from meowjax.trainers import data
from tests.test_trainers import tiny_config


def test_rl_pool_mixes_training_and_harder_games(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.games.update(dict(num_train=2, num_train_hard=1, num_sft=1))
    sets = data.game_sets(c)
    assert [t.meta["difficulty"] for t in sets["train"]] == ["w1-o2-q2", "w1-o2-q2", "w1-o3-q3"]
    assert {t.split for t in sets["train"]} == {"train"}
    assert "train_hard" not in sets
    held_out = {t.task_id for t in sets["eval"] + sets["eval_hard"]}
    assert held_out and not held_out & {t.task_id for t in sets["train"] + sets["sft"]}
    # Without harder games the pool is the training difficulty only.
    c.games.num_train_hard = 0
    assert [t.meta["difficulty"] for t in data.game_sets(c)["train"]] == ["w1-o2-q2"] * 2


def test_harder_rl_pool_is_textworld_only(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.env.family, c.games.num_train_hard = "swe", 4
    with pytest.raises(ValueError, match="num_train_hard=4 is for TextWorld"):
        data.game_sets(c)


def test_difficulty_names_follow_the_env_family():
    """Reports name each family's own difficulty (a code-repair run's held-out tier is not a
    TextWorld "w2-o3-q4"), and the names match the sets game_sets builds."""
    from configs import default, swe_tiny

    assert data.difficulty_name(default.get_config(), False) == "w2-o3-q4"
    assert data.difficulty_name(default.get_config(), True) == "w3-o5-q6"
    c = swe_tiny.get_config()
    assert data.difficulty_name(c, False) == "code-repair tier 1"
    assert data.difficulty_name(c, True) == "code-repair tier 2"
    c.unlock()
    c.games.level = 3
    assert data.difficulty_name(c, True) == "code-repair tier 3"     # there is no tier 4
    c.env.family, c.games.eval_split = "alfworld", "test"
    assert data.difficulty_name(c, False) == "ALFWorld test"
    assert data.difficulty_name(c, True) == "ALFWorld valid_unseen"
    c.games.eval_split = "valid"
    assert data.difficulty_name(c, False) == "ALFWorld valid_seen"
