"""Process reward: expert-plan progress on a real generated TextWorld game, and the tracker."""
import pytest

from meowjax.envs import process_reward as pr
from meowjax.envs import registry, textworld_games
from meowjax.envs.base import EnvError
from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec


@pytest.fixture(scope="module")
def game(tiny_games_dir):
    spec = textworld_games.GameSetSpec(kind="custom", world_size=1, nb_objects=2, quest_length=2,
                                       split="valid", num_games=1)
    return textworld_games.generate_games(spec, tiny_games_dir, workers=1)[0]


@pytest.mark.parametrize("replan", [True, False])
def test_walkthrough_steps_each_get_progress_useless_actions_get_zero(game, replan):
    env = pr.ProcessRewardEnv(inner_family="textworld", reward_mode="process", replan=replan,
                              compact=True)
    try:
        reset = env.reset(game, max_turns=20)
        plan = reset.walkthrough
        assert reset.info["plan_source"] == ("replan" if replan else "prefix")
        assert reset.info["plan_remaining"] == len(plan) >= 2
        useless = env.step("inventory")                 # valid, but no progress
        assert useless.reward == 0.0 and not useless.info["progress"]
        assert useless.info["plan_remaining"] == len(plan)
        nonsense = env.step("xyzzy the frobnicator")     # invalid
        assert nonsense.info["invalid"] and nonsense.reward == 0.0
        rewards = []
        for t, action in enumerate(plan):
            res = env.step(action)
            assert res.info["progress"], action
            assert res.info["plan_remaining"] == len(plan) - t - 1
            rewards.append(res.reward)
        assert rewards == pytest.approx([1.0 / len(plan)] * len(plan))
        assert sum(rewards) == pytest.approx(1.0) and res.won and res.done
        assert res.info["outcome_reward"] == 1.0
    finally:
        env.close()


def test_out_of_order_plan_step_gets_zero_under_prefix_matching(game):
    env = pr.ProcessRewardEnv(inner_family="textworld", replan=False)
    try:
        plan = env.reset(game, max_turns=20).walkthrough
        res = env.step(plan[1])                           # skipping the plan's first command
        assert res.reward == 0.0 and res.info["plan_remaining"] == len(plan)
    finally:
        env.close()


def test_sparse_and_dense_modes_keep_logging_the_process_signal(game):
    for mode in ("sparse", "dense"):
        env = pr.ProcessRewardEnv(inner_family="textworld", reward_mode=mode)
        try:
            plan = env.reset(game, max_turns=20).walkthrough
            steps = [env.step(a) for a in plan]
        finally:
            env.close()
        assert [s.info["process_reward"] for s in steps] == pytest.approx(
            [1.0 / len(plan)] * len(plan))
        if mode == "sparse":
            assert [s.reward for s in steps] == [0.0] * (len(plan) - 1) + [1.0]
        else:
            assert [s.reward for s in steps] == [s.info["score_gain"] for s in steps]
            assert sum(s.reward for s in steps) > 0


@pytest.mark.parametrize("num_workers", [0, 1])
def test_process_wrapper_through_an_env_pool(game, num_workers):
    dense = EnvSpec("textworld", dict(reward_mode="dense"))
    assert registry.reward_spec(dense, "dense") == dense
    kwargs = dict(reward_mode="process", admissible=True, invalid_action_penalty=-0.1)
    spec = registry.reward_spec(EnvSpec("textworld", kwargs), "process")
    assert spec == EnvSpec("textworld", kwargs, wrapper="process")
    assert registry.reward_spec(spec, "process") == spec            # wrapped once
    pool = EnvPool(spec, num_workers=num_workers)
    try:
        (reset,) = pool.reset([game], [10])
        assert reset.admissible
        (bad,) = pool.step(["xyzzy"])
        assert bad.reward == pytest.approx(-0.1)
        (good,) = pool.step([reset.walkthrough[0]])
        assert good.reward == pytest.approx(1.0 / len(reset.walkthrough))
    finally:
        pool.close()


def test_tracker_numbers_and_errors():
    tr = pr.ExpertPlanTracker(["open box", "take key", "unlock door"])
    assert tr.step("Open   BOX").reward == pytest.approx(1 / 3)            # normalised match
    assert tr.step("take key", invalid=True).reward == 0.0                 # rejected by the game
    assert tr.step("unlock door").reward == 0.0                            # not the next step
    assert tr.step("take key").remaining == 1
    # Replanning: undoing progress is negative; the episode sum telescopes.
    rp = pr.ExpertPlanTracker(None, policy_commands=["a", "b", "c", "d"])
    got = [rp.step("x", policy_commands=p).reward for p in (["b", "c", "d"], ["b", "c", "d"],
                                                            ["z", "b", "c", "d"], ["c", "d"], [])]
    assert got == pytest.approx([0.25, 0.0, -0.25, 0.5, 0.5])
    assert sum(got) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="policy_commands after every step"):
        rp.step("x")
    with pytest.raises(ValueError, match="no walkthrough"):
        pr.ExpertPlanTracker(None)
    assert pr.plan_progress_reward(3, 3, 0) == 0.0
    with pytest.raises(ValueError, match="reward mode"):
        pr.turn_reward("shaped", won=True, score_gain=0.0, process=0.0)
    with pytest.raises(EnvError, match="must be <= 0"):
        pr.ProcessRewardEnv(invalid_action_penalty=0.5)
