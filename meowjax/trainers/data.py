"""Host-side data for a run: the budget split, the RL stream's tasks and budgets, renames,
augmentation and expert trajectories (the game sets and env spec: ``envs.game_sets``)."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import ml_collections
import numpy as np
from absl import logging

from meowjax.envs import registry
from meowjax.envs.base import Task
from meowjax.envs.game_sets import env_spec
from meowjax.envs.registry import make_env


def budget_plan(c: ml_collections.ConfigDict) -> dict[str, int]:
    """The SFT -> RL split of one budget counted in RL episodes.

    sft_demos = share * total / demo_cost   (one demonstration costs demo_cost episodes),
    rl_episodes = (1 - share) * total.
    Checked before any game is built: the demonstrations fit games.num_sft, and an RL
    iteration's rollout.tasks_per_iter distinct tasks fit the RL pool (games.num_train +
    games.num_train_hard).
    """
    b, g = c.budget, c.games
    if not 0.0 <= b.sft_share <= 1.0:
        raise ValueError(f"budget.sft_share={b.sft_share} must be in [0, 1].")
    demos = int(round(b.sft_share * b.total_episodes / b.sft_demo_cost))
    if demos > g.num_sft:
        raise ValueError(f"The budget asks for {demos} SFT demonstrations but games.num_sft="
                         f"{g.num_sft}; raise games.num_sft or lower budget.sft_share.")
    rl_episodes = int(round((1 - b.sft_share) * b.total_episodes))
    pool = g.num_train + g.num_train_hard
    if rl_episodes and c.rollout.tasks_per_iter > pool:
        raise ValueError(
            f"rollout.tasks_per_iter={c.rollout.tasks_per_iter} distinct tasks per RL iteration, "
            f"but the RL pool has {pool} (games.num_train={g.num_train} + games.num_train_hard="
            f"{g.num_train_hard}); lower rollout.tasks_per_iter or raise games.num_train.")
    return {"sft_demos": demos, "rl_episodes": rl_episodes}


def rl_update_steps(c: ml_collections.ConfigDict, rows_per_rollout: int, rl_iters: int) -> int:
    """The RL phase's update steps, for the learning-rate schedule (an estimate where the rows
    of an episode vary, e.g. one row per turn):

        rows  = ceil(rows_per_rollout * E / (N * G)),   E = N * G (+ N with greedy_member)
        steps = iterations * epochs * ceil(rows / minibatch_rows)

    ``rows_per_rollout``: the trainer's estimate of the update rows of one iteration's N x G
    sampled episodes (N = rollout.tasks_per_iter, G = rollout.group_size). With
    ``rollout.greedy_member`` each task's greedy episode joins the update too.
    """
    sampled = c.rollout.tasks_per_iter * c.rollout.group_size
    episodes = sampled + (c.rollout.tasks_per_iter if c.rollout.greedy_member else 0)
    rows = -(-rows_per_rollout * episodes // sampled)
    return max(1, rl_iters * c.rl.epochs * -(-rows // c.rl.minibatch_rows))


TASK_ORDERS = ("stream", "sample")


def iteration_tasks(pool: list[Task], it: int, n: int, seed: int, order: str,
                    rng: np.random.Generator) -> list[Task]:
    """The n distinct tasks of RL iteration ``it`` (``rollout.task_order``).

    "stream": the pool is walked in passes, each a fresh seeded permutation cut into
      ipp = floor(P / n) iterations; iteration it takes slice (it mod ipp) of pass
      floor(it / ipp). No task repeats before the pass ends, so with P >= iterations * n no task
      is seen twice in the run; a smaller pool is covered evenly.
    "sample": n tasks drawn without replacement from ``rng`` every iteration, independently of
      the others (tasks repeat across iterations at random).
    """
    if order == "sample":
        return list(rng.choice(pool, size=n, replace=False))
    if order != "stream":
        raise ValueError(f"rollout.task_order={order!r}; use one of {TASK_ORDERS}.")
    per_pass = len(pool) // n
    if per_pass == 0:
        raise ValueError(f"rollout.tasks_per_iter={n} exceeds the RL pool of {len(pool)} tasks.")
    passes, slot = divmod(it, per_pass)
    perm = np.random.default_rng([seed, 11, passes]).permutation(len(pool))
    return [pool[j] for j in perm[slot * n:(slot + 1) * n]]


def budgets_for(c: ml_collections.ConfigDict, n: int, rng: np.random.Generator) -> list[int]:
    """Per-episode turn budgets: BudgetMix draws each one from ``turns.budget_mix``."""
    if len(c.turns.budget_mix):
        return [int(b) for b in rng.choice(np.asarray(c.turns.budget_mix), size=n)]
    return [int(c.turns.max_turns)] * n


def task_renamer(c: ml_collections.ConfigDict, sets: dict[str, list[Task]]
                 ) -> Callable[[list[Task], np.random.Generator], list[Task]]:
    """tasks, rng -> the tasks, each with probability ``rollout.rename_prob`` shown with fresh
    entity names (the family's ``renamer``, names from the RL pool and the SFT games): RL on the
    same games then sees many surface forms, as SFT's ``sft.augment_copies`` does."""
    prob = float(c.rollout.rename_prob)
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"rollout.rename_prob={prob} must be in [0, 1].")
    if prob == 0.0:
        return lambda tasks, rng: tasks
    family = registry.get_family(c.env.family)
    if family.renamer is None:
        raise ValueError(f"rollout.rename_prob={prob}, but env.family={family.name!r} cannot "
                         "rename its tasks' entities; set it to 0.")
    rename = family.renamer(sets["train"] + sets["sft"])
    return lambda tasks, rng: [rename(t, rng) if rng.random() < prob else t for t in tasks]


def task_repeats(c: ml_collections.ConfigDict, iterations: int) -> str:
    """How often an RL task is played in the run, in words for the log and the report."""
    pool = c.games.num_train + c.games.num_train_hard
    need = iterations * c.rollout.tasks_per_iter
    if c.rollout.task_order == "stream" and need <= pool:
        return f"stream order: {need} distinct tasks, none repeated"
    return f"{c.rollout.task_order} order: {need} draws, {need / max(pool, 1):.1f} per task"


def set_role(c: ml_collections.ConfigDict, name: str) -> str:
    """What training saw of held-out set ``name``'s difficulty, in words: "SFT demonstrations and
    80 of 320 RL games", "240 of 320 RL games", "never trained on"."""
    g = c.games
    pool = g.num_train + g.num_train_hard
    sft = budget_plan(c)["sft_demos"] if name == "eval" else 0
    rl = {"eval": g.num_train, "eval_hard": g.num_train_hard}.get(name, 0)
    parts = (["SFT demonstrations"] if sft else []) + ([f"{rl} of {pool} RL games"] if rl else [])
    return " and ".join(parts) or "never trained on"


def rl_pool_words(c: ml_collections.ConfigDict) -> str:
    """The RL task pool in words, e.g. "64 w2-o3-q4 + 8 w3-o5-q6 training games"."""
    return registry.get_family(c.env.family).rl_pool(c)


def augmented_experts(c: ml_collections.ConfigDict, expert: list[dict[str, Any]],
                      tasks: list[Task], rng: np.random.Generator) -> list[dict[str, Any]]:
    """``sft.augment_copies`` augmented copies of the expert trajectories (TextWorld: entity
    names swapped); [] when the family has no augmentation or the count is 0."""
    augment = registry.get_family(c.env.family).augment
    if augment is None or c.sft.augment_copies <= 0:
        return []
    return augment(expert, tasks, c.sft.augment_copies, rng)


def expert_data(c: ml_collections.ConfigDict, tasks: list[Task]) -> list[dict[str, Any]]:
    """Replays each game's walkthrough, recording observations and admissible commands.

    Returns per game: objective, observations (t = 0..n), actions (n), rewards (n),
    admissible (the commands admissible before each action).
    """
    env = make_env(env_spec(c, admissible=True))
    out = []
    try:
        for task in tasks:
            reset = env.reset(task, max_turns=10_000)
            obs, adm, acts, rews = [reset.observation], [list(reset.admissible or [])], [], []
            for action in reset.walkthrough or []:
                res = env.step(action)
                acts.append(action)
                rews.append(float(res.reward))
                obs.append(res.observation)
                adm.append(list(res.info.get("admissible") or []))
                if res.done:
                    break
            if not (acts and res.won):  # noqa: F821 (res is bound when acts is non-empty)
                logging.warning("walkthrough of %s does not win; skipped", task.task_id)
                continue
            out.append(dict(objective=reset.objective, observations=obs, actions=acts,
                            rewards=rews, admissible=adm[:len(acts)]))
    finally:
        env.close()
    return out
