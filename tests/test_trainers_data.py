"""What a run takes from its env family: game sets (the RL pool's difficulty mix, disjoint from
the held-out games), env specs, names, system prompt and augmentation."""
import numpy as np
import pytest

from meowjax.envs import families
from meowjax.envs.registry import EnvSpec
from meowjax.rollout import chat
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
    with pytest.raises(ValueError, match=r"num_train_hard=4 .* harder RL pool \(textworld\)"):
        data.game_sets(c)


def test_env_specs_and_pool_words_per_family():
    from configs import default, swe_tiny

    c = default.get_config()
    assert c.env.reward_mode == "process"
    assert data.env_spec(c, admissible=True) == EnvSpec(
        "textworld", dict(reward_mode="process", invalid_action_penalty=0.0, admissible=True,
                          compact=True), wrapper="process")
    c.unlock()
    c.env.reward_mode, c.games.num_train_hard = "sparse", 8
    assert data.env_spec(c, admissible=False) == EnvSpec(
        "textworld", dict(reward_mode="sparse", invalid_action_penalty=0.0, admissible=False,
                          compact=True))
    assert data.rl_pool_words(c) == "64 w2-o3-q4 + 8 w3-o5-q6 training games"
    c.env.family = "alfworld"
    assert data.env_spec(c, admissible=True) == EnvSpec(
        "alfworld", dict(reward_mode="sparse", invalid_action_penalty=0.0, admissible=True))
    c = swe_tiny.get_config()
    assert data.env_spec(c, admissible=False) == EnvSpec(
        "swe", dict(reward=c.env.reward_mode, invalid_action_penalty=c.env.invalid_action_penalty,
                    sandbox="namespaces"))
    assert data.rl_pool_words(c) == f"{c.games.num_train} swe training tasks"


def test_system_prompt_and_augmentation_come_from_the_family():
    from configs import default, swe_tiny

    c = default.get_config("smoke=True")
    assert data.system_prompt(c) == chat.DEFAULT_INSTRUCTION
    assert data.system_prompt(swe_tiny.get_config()) == families.SWE_SYSTEM_PROMPT
    rng = np.random.default_rng(0)
    c.unlock()
    c.sft.augment_copies = 0
    assert data.augmented_experts(c, [{"objective": "x"}], [], rng) == []
    c.sft.augment_copies, c.env.family = 2, "swe"             # no augmentation for code repair
    assert data.augmented_experts(c, [{"objective": "x"}], [], rng) == []


def test_textworld_augmentation_renames_entities_consistently(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.games.update(dict(num_sft=2, num_train=0, num_eval=0, num_eval_hard=0))
    c.sft.augment_copies = 2
    tasks = data.game_sets(c)["sft"]
    expert = data.expert_data(c, tasks)
    assert len(expert) == len(tasks) == 2
    out = data.augmented_experts(c, expert, tasks, np.random.default_rng(0))
    assert len(out) == 4
    for ex in out:
        assert len(ex["actions"]) == len(ex["observations"]) - 1 == len(ex["admissible"])
    assert any(a["actions"] != e["actions"] for a, e in zip(out[::2], expert))


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
