"""Learning, not a pulse: every (interface, estimator) pair raises held-out success on a task.

The task is ``tests.learning_env``'s chest (open it, then take the object the goal names) and
the model a from-scratch tiny preset. After a fixed budget of RL episodes, greedy held-out
success must be above 0.8, and at the start of RL below 0.3:

- scoring (``policy.interface="score"``): pure RL from random weights (no demonstrations). A
  random model's greedy choice is an arbitrary but fixed candidate ordering, right on a
  seed-dependent share of games, so the start is the sampled policy's success (the policy RL
  trains, near chance), which must also end above 0.8;
- free text (``"generate"``): a short SFT on demonstrations that teach the command format but
  not which object to take (their goals name a random object; the target is taken half as often
  as each other name), then RL, which must make the model write "take <the object named in the
  goal>" token by token. The start is greedy (the cloned policy takes another name).

All fourteen runs share one model size, row shapes and the suite's persistent XLA cache, so later runs
load the programs earlier ones compiled. ``pytest -k learn`` selects them; the suite runs seed 0,
``MEOWJAX_LEARN_SEED=1 pytest -k learn`` another seed.
"""
import json
import os

import pytest

from configs import default
from meowjax import rl
from meowjax.envs import registry
from meowjax.trainers.loop import AgentTrainer
from tests import learning_env

ESTIMATORS = ("gae", "turn_gae", "grpo", "rloo", "gigpo", "remax", "rft")
EPISODES_PER_ITER = 32


def learning_config(interface: str, estimator: str, games_dir: str, *, rl_iters: int,
                    sft_demos: int = 0):
    c = default.get_config("smoke=True")
    c.unlock()
    c.name = f"learn_{interface}_{estimator}"
    c.seed = int(os.environ.get("MEOWJAX_LEARN_SEED", "0"))
    c.model.vocab_size = 1024   # whole words: every object name is one token
    c.env.update(dict(family="chest", reward_mode="sparse", num_workers=0))
    c.games.update(dict(cache_dir=games_dir, num_train=256, num_sft=max(sft_demos, 32),
                        num_eval=40, num_eval_hard=4, eval_split="valid"))
    total = rl_iters * EPISODES_PER_ITER + sft_demos * c.budget.sft_demo_cost
    c.budget.update(dict(total_episodes=total,
                         sft_share=sft_demos * c.budget.sft_demo_cost / total))
    c.rollout.update(dict(tasks_per_iter=8, group_size=4, length_buckets=(128, 192, 256)))
    c.turns.update(dict(max_turns=2, eval_max_turns=2))
    c.policy.update(dict(temperature=1.0, history=False))
    c.sft.update(dict(epochs=12, batch_rows=8, lr=1e-2, warmup_steps=2, augment_copies=0,
                      lm_coef=0.0))
    c.rl.update(dict(estimator=estimator, epochs=2, minibatch_rows=32, lr=3e-3, critic_lr=3e-3,
                     warmup_steps=2, lr_schedule="constant", kl_coef=0.0))
    c.eval.update(dict(every_iters=0, num_samples=0, sample_start=False, pass_ks=(1,),
                       pass_ts=(2,)))
    if interface == "score":
        c.eval.update(dict(num_samples=4, sample_start=True))
    c.checkpoint.update(dict(every_iters=1000, max_to_keep=1))
    if interface == "generate":
        c.policy.update(dict(interface="generate", window=None, max_action_tokens=6))
        # A KL anchor to the SFT policy keeps the command format while RL changes the name (it
        # was needed while the value head started random: gae scattered the format within 3
        # iterations without it).
        c.rl.update(dict(minibatch_rows=16, kl_coef=0.1))
        if rl.ESTIMATORS[estimator].needs_critic:
            # The critic lags the policy: after a drop in success its values still expect wins,
            # every sampled action gets a negative advantage, and the format goes. At 3e-3 token
            # GAE collapsed late (0.88 -> 0.0 rollout success) on one seed of three; at 1e-3
            # three seeds rose steadily to 1.0 greedy.
            c.rl.update(dict(lr=1e-3))
        # 30 epochs over the demonstrations: with 12 the cloned policy still mixed the two turns'
        # commands ("opentake lamp") in about half of its greedy episodes.
        c.sft.update(dict(epochs=30))
    c.lock()
    return c


@pytest.fixture
def chest():
    registry.register_family(learning_env.CHEST)
    yield learning_env.CHEST
    registry.unregister_family(learning_env.CHEST.name)


def run_learning(c, workdir):
    trainer = AgentTrainer(c, workdir)
    out = trainer.run()
    start, final = out["evals"]["start"], out["evals"]["final"]
    # Sampled success: Pass@1 at the 2-turn budget over num_samples episodes per game.
    sampled = lambda e: e["pass_at_k_t"]["mean"][0][0] if "pass_at_k_t" in e else None
    with open(f"{workdir}/metrics.jsonl", encoding="utf-8") as f:
        curve = [round(r["rollout/success"], 2) for r in map(json.loads, f)
                 if "rollout/success" in r]
    return dict(greedy_start=start["eval"]["success"], sampled_start=sampled(start),
                final=final["eval"]["success"], sampled_final=sampled(final), curve=curve)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_scoring_interface_learns_the_chest(chest, estimator, tmp_path):
    c = learning_config("score", estimator, str(tmp_path / "games"), rl_iters=12)
    r = run_learning(c, str(tmp_path / "run"))
    # A from-scratch model's greedy choice is one arbitrary candidate ordering, right on a
    # seed-dependent share of games (0.0, 0.475 and 1.0 seen); its sampled policy, the one RL
    # trains, is near uniform (chance 0.1). So the sampled policy must rise, and the greedy
    # one end right.
    assert r["sampled_start"] < 0.3 and r["sampled_final"] > 0.8 and r["final"] > 0.8, r


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_free_text_interface_learns_to_write_the_named_object(chest, estimator, tmp_path):
    c = learning_config("generate", estimator, str(tmp_path / "games"), rl_iters=20,
                        sft_demos=32)
    r = run_learning(c, str(tmp_path / "run"))
    assert r["greedy_start"] < 0.3 and r["final"] > 0.8, r
