"""Learning, not a pulse, on the code-repair env: RL teaches a free-text agent which fix to write.

``tests.learning_swe``'s task runs through the real ``SweEnv`` (command parsing, the repository
copy, the sandboxed grader at submit). A from-scratch tiny model is cloned from demonstrations
that teach the two-turn command format (``replace`` with its <<< === >>> blocks, then
``submit``) but fix to another operator than the one the held-out tasks' tests want; RL must
raise greedy held-out success from below 0.3 to above 0.8, so that a regression anywhere on the
code-repair path (parsing, grading, rewards at turn ends, the free-text rollout of multi-line
commands) fails CI. ``pytest -k learn`` selects it with the other learning tests.
"""
import pytest

from meowjax.envs import registry
from tests import learning_swe
from tests.test_learning import learning_config, run_learning


@pytest.fixture
def tiny_repair():
    registry.register_family(learning_swe.TINY_REPAIR)
    yield learning_swe.TINY_REPAIR
    registry.unregister_family(learning_swe.TINY_REPAIR.name)


def repair_config(games_dir: str, *, estimator: str = "rloo", rl_iters: int = 20):
    c = learning_config("generate", estimator, games_dir, rl_iters=rl_iters, sft_demos=32)
    c.unlock()
    c.name = f"learn_repair_{estimator}"
    c.env.update(dict(family="tiny_repair", reward_mode="sparse", num_workers=0))
    c.games.update(dict(num_eval_hard=0))
    # A replace command (its three blocks on their own lines) is many times the chest's two-word
    # commands; the turn-2 prompt holds the statement, the file list, the command and the env's
    # echo of the edited file.
    c.policy.update(dict(max_action_tokens=32))
    c.rollout.update(dict(length_buckets=(192, 256, 384)))
    c.lock()
    return c


@pytest.mark.slow
def test_free_text_agent_learns_to_repair_code(tiny_repair, tmp_path):
    c = repair_config(str(tmp_path / "tasks"))
    r = run_learning(c, str(tmp_path / "run"))
    assert r["greedy_start"] < 0.3 and r["final"] > 0.8, r
