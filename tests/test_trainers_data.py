"""What a run takes from its env family: game sets (the RL pool's difficulty mix, disjoint from
the held-out games), env specs, names, system prompt and augmentation."""
import numpy as np
import pytest

from meowjax.agents.text import system_prompt
from meowjax.envs import families, game_sets
from meowjax.envs.registry import EnvSpec
from meowjax.rollout import chat
from meowjax.trainers import data
from tests.test_trainers import tiny_config


def test_rl_pool_mixes_training_and_harder_games(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.games.update(dict(num_train=2, num_train_hard=1, num_sft=1))
    sets = game_sets.game_sets(c)
    assert [t.meta["difficulty"] for t in sets["train"]] == ["w1-o2-q2", "w1-o2-q2", "w1-o3-q3"]
    assert {t.split for t in sets["train"]} == {"train"}
    assert "train_hard" not in sets
    held_out = {t.task_id for t in sets["eval"] + sets["eval_hard"]}
    assert held_out and not held_out & {t.task_id for t in sets["train"] + sets["sft"]}
    # Without harder games the pool is the training difficulty only.
    c.games.num_train_hard = 0
    assert [t.meta["difficulty"] for t in game_sets.game_sets(c)["train"]] == ["w1-o2-q2"] * 2


def test_harder_rl_pool_is_textworld_only(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.env.family, c.games.num_train_hard = "swe", 4
    with pytest.raises(ValueError, match=r"num_train_hard=4 .* harder RL pool \(textworld\)"):
        game_sets.game_sets(c)


def test_env_specs_and_pool_words_per_family():
    from configs import default, swe_tiny

    c = default.get_config()
    assert c.env.reward_mode == "process"
    assert game_sets.env_spec(c, admissible=True) == EnvSpec(
        "textworld", dict(reward_mode="process", invalid_action_penalty=0.0, admissible=True,
                          compact=True), wrapper="process")
    c.unlock()
    c.env.reward_mode, c.games.num_train, c.games.num_train_hard = "sparse", 320, 8
    assert game_sets.env_spec(c, admissible=False) == EnvSpec(
        "textworld", dict(reward_mode="sparse", invalid_action_penalty=0.0, admissible=False,
                          compact=True))
    assert data.rl_pool_words(c) == "320 w2-o3-q4 + 8 w3-o5-q6 training games"
    c.env.family = "alfworld"
    assert game_sets.env_spec(c, admissible=True) == EnvSpec(
        "alfworld", dict(reward_mode="sparse", invalid_action_penalty=0.0, admissible=True))
    c = swe_tiny.get_config()
    assert game_sets.env_spec(c, admissible=False) == EnvSpec(
        "swe", dict(reward=c.env.reward_mode, invalid_action_penalty=c.env.invalid_action_penalty,
                    sandbox="namespaces"))
    assert data.rl_pool_words(c) == f"{c.games.num_train} swe training tasks"


def test_system_prompt_and_augmentation_come_from_the_family():
    from configs import default, swe_tiny

    c = default.get_config("smoke=True")
    assert system_prompt(c.env.family) == chat.DEFAULT_INSTRUCTION
    assert system_prompt(swe_tiny.get_config().env.family) == families.SWE_SYSTEM_PROMPT
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
    tasks = game_sets.game_sets(c)["sft"]
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

    assert game_sets.difficulty_name(default.get_config(), False) == "w2-o3-q4"
    assert game_sets.difficulty_name(default.get_config(), True) == "w3-o5-q6"
    c = swe_tiny.get_config()
    assert game_sets.difficulty_name(c, False) == "code-repair tier 1"
    assert game_sets.difficulty_name(c, True) == "code-repair tier 2"
    c.unlock()
    c.games.level = 3
    assert game_sets.difficulty_name(c, True) == "code-repair tier 3"     # there is no tier 4
    c.env.family, c.games.eval_split = "alfworld", "test"
    assert game_sets.difficulty_name(c, False) == "ALFWorld test_seen"
    assert game_sets.difficulty_name(c, True) == "ALFWorld test_unseen"   # never tuned on
    c.games.eval_split = "valid"
    assert game_sets.difficulty_name(c, False) == "ALFWorld valid_seen"
    assert game_sets.difficulty_name(c, True) == "ALFWorld valid_unseen"


def test_stream_task_order_repeats_no_task_until_the_pool_is_used():
    pool = [f"g{i}" for i in range(20)]
    drawn = [data.iteration_tasks(pool, it, 4, 0, "stream", None) for it in range(5)]
    flat = [t for tasks in drawn for t in tasks]
    assert sorted(flat) == sorted(pool)  # 5 iterations x 4 = the whole pool, each task once
    assert flat != pool  # a permutation, not the pool's order
    # A pool of 10 for 4 per iteration: 2 iterations per pass (2 tasks of each pass unused);
    # within an iteration tasks are distinct, and a pass never repeats a task.
    small = pool[:10]
    for it in range(12):
        tasks = data.iteration_tasks(small, it, 4, 0, "stream", None)
        assert len(set(tasks)) == 4
    for p in range(6):
        pass_tasks = [t for it in (2 * p, 2 * p + 1)
                      for t in data.iteration_tasks(small, it, 4, 0, "stream", None)]
        assert len(set(pass_tasks)) == 8
    # Another seed, another order; the same seed, the same order (resume replays it).
    assert data.iteration_tasks(pool, 0, 4, 1, "stream", None) != drawn[0]
    assert data.iteration_tasks(pool, 3, 4, 0, "stream", None) == drawn[3]
    # "sample": independent draws from the given generator, as before the stream order.
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    assert data.iteration_tasks(pool, 0, 4, 0, "sample", rng_a) == list(
        rng_b.choice(pool, size=4, replace=False))
    with pytest.raises(ValueError, match="rollout.task_order"):
        data.iteration_tasks(pool, 0, 4, 0, "shuffled", None)
    with pytest.raises(ValueError, match="exceeds the RL pool"):
        data.iteration_tasks(pool[:3], 0, 4, 0, "stream", None)


def test_rename_prob_renames_that_share_of_rl_tasks(tiny_games_dir):
    c = tiny_config(tiny_games_dir)
    c.unlock()
    c.games.update(dict(num_train=3, num_sft=2))
    sets = game_sets.game_sets(c)
    assert data.task_renamer(c, sets)(sets["train"], None) == sets["train"]  # rename_prob = 0
    c.rollout.rename_prob = 0.5
    rename = data.task_renamer(c, sets)
    rng = np.random.default_rng(0)
    drawn = [t for _ in range(40) for t in rename(sets["train"], rng)]
    share = np.mean(["rename" in t.meta for t in drawn])
    assert 0.35 < share < 0.65
    # A renamed task keeps its game and id (group baselines, per-game logs); only names change.
    one = next(t for t in drawn if "rename" in t.meta)
    assert one.task_id in {t.task_id for t in sets["train"]} and one.meta["rename"]
    c.rollout.rename_prob = 1.5
    with pytest.raises(ValueError, match="rename_prob"):
        data.task_renamer(c, sets)
    c.rollout.rename_prob = 1.0
    c.env.family = "swe"
    with pytest.raises(ValueError, match="cannot rename"):
        data.task_renamer(c, sets)


def test_rl_update_steps_count_the_greedy_member():
    from configs import default
    c = default.get_config()
    c.unlock()
    c.rollout.update(dict(tasks_per_iter=8, group_size=4))
    c.rl.update(dict(epochs=2, minibatch_rows=32))
    # 8 x 4 episodes of ~6 turn rows: 192 rows, 6 minibatches, 2 epochs, 40 iterations.
    assert data.rl_update_steps(c, 192, 40) == 40 * 2 * 6
    # The greedy episode of each task joins the update: 192 * 40 / 32 = 240 rows, 8 minibatches.
    c.rollout.greedy_member = True
    assert data.rl_update_steps(c, 192, 40) == 40 * 2 * 8
    assert data.rl_update_steps(c, 0, 0) == 1


def test_held_out_sets_are_named_by_difficulty_and_by_what_training_saw():
    from configs import default
    c = default.get_config()
    c.unlock()
    c.games.update(dict(num_train=80, num_train_hard=240))
    assert [game_sets.set_difficulty(c, s) for s in (*game_sets.HELD_OUT, "curve")] == [
        "w2-o3-q4", "w3-o5-q6", "w4-o6-q8", "w3-o5-q6"]
    demos = data.budget_plan(c)["sft_demos"]
    assert demos > 0
    assert data.set_role(c, "eval") == "SFT demonstrations and 80 of 320 RL games"
    assert data.set_role(c, "eval_hard") == "240 of 320 RL games"
    assert data.set_role(c, "eval_transfer") == "never trained on"
    c.games.num_train = 0
    assert data.set_role(c, "eval") == "SFT demonstrations"
