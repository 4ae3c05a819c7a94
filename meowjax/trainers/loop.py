"""The agent trainer shared by both action interfaces: what a run is built from.

``AgentTrainer(c, workdir)`` builds one run: the mesh, the estimator and objective, the game
sets and expert demonstrations, the model (``setup_model``), the SFT rows, optimizers,
shardings and jitted steps. ``run()`` plays the schedule, read top to bottom in
``meowjax.trainers.schedule`` (SFT -> evaluation -> RL -> evaluation), one RL iteration in
``meowjax.trainers.rl_iteration`` (collect -> old terms -> advantages -> update -> replay).

What differs between interfaces lives in subclasses: the model and its per-unit terms
(``steps.Units``: a unit is a turn for the scoring interface, a token for free text), how expert
data becomes rows, how episodes are played (each returns ``rollout.trajectory.Trajectory``
records), and how trajectories become update rows laid out as the ``[E, X]`` matrices the
estimators read (X = turns or tokens). The losses are ``meowjax.rl.objective``'s, built into
jitted steps once, in ``meowjax.trainers.steps``.

Building, placing, saving and restoring the state, and what a SIGTERM saves:
``meowjax.trainers.train_state``.

Host randomness is ``np.random.default_rng([seed, phase, index])`` and device randomness
``jax.random.fold_in(key(seed), index)``, so a resumed run replays exactly what an uninterrupted
run does.
"""

from __future__ import annotations

import abc
import os
import time
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from meowjax.rl import estimators, objective
from meowjax.rollout import buckets, trajectory
from meowjax.sharding import make_mesh
from meowjax.runtime import checkpoint, metrics_log, multihost, placement
from meowjax.runtime.preemption import Preempted  # noqa: F401  (what a stopped run raises)
from meowjax.trainers import (data, estimator_inputs, optim, replay, returns, rl_iteration,
                              schedule, steps)
from meowjax.trainers.evaluation import Evaluation, sampled_tasks
from meowjax.trainers.rng import AUGMENT_RNG, host_rng
from meowjax.trainers.train_state import RL, SFT, TrainerState

class AgentTrainer(Evaluation, TrainerState, abc.ABC):
    """Owns one run. Subclasses fill in the interface-specific hooks below."""

    interface: str = ""
    needs_admissible: bool = False

    def __init__(self, c: ml_collections.ConfigDict, workdir: str, *, training: bool = True):
        """The agent of ``c`` (model, tokenizer, interface, placement on the mesh over every
        process's devices) and, with ``training``, the run's data and steps: game sets, expert
        demonstrations, the SFT rows, optimizers and jitted updates. ``training=False`` builds
        only what playing and evaluating a checkpoint need (see ``restore_policy``).

        Several processes (``runtime.multihost``): updates run SPMD on ``mesh``; each process
        plays its share of the episodes on ``rollout_mesh``, its own devices."""
        self.c, self.workdir, self.training = c, workdir, training
        self.check_config()
        self.mesh = make_mesh(c.mesh.axes, jax.devices(), field="config.mesh.axes")
        self.rollout_mesh = multihost.process_submesh(self.mesh)
        placement.check_batch_rows(self.mesh, self.batch_row_fields())
        note = multihost.idle_processes_note(c.rollout.tasks_per_iter, "rollout.tasks_per_iter")
        if training and note:
            logging.warning("%s", note)
        os.makedirs(workdir, exist_ok=True)
        self.spec = estimators.validate_estimator(c.rl.estimator)
        # Extra inputs the estimator reads, each from its registered provider (fails now).
        self.extra_inputs = estimators.extra_needs(self.spec.needs)
        if training:
            estimator_inputs.check_provided(self.spec)
        self.hp = estimators.estimator_hparams(c.rl.estimator, gamma=c.rl.gamma, lam=c.rl.lam,
                                               section=c.rl.get(c.rl.estimator))
        self.objective = objective.ObjectiveConfig.from_section(c.rl)
        # An estimator reading `baseline_B` (remax) gets each task's greedy return; with
        # rollout.greedy_member each group also trains on its task's greedy episode.
        self.needs_greedy = "baseline_B" in self.spec.needs
        self.greedy_member = bool(c.rollout.greedy_member)
        if self.needs_greedy and c.rollout.dynamic_draws:
            raise ValueError(f"rl.estimator={c.rl.estimator!r} compares each episode with its "
                             "task's greedy episode; rollout.dynamic_draws (which keeps groups "
                             "whose own returns differ) does not apply to it: set "
                             "rollout.dynamic_draws=0.")
        if c.rl.critic_warmup_iters and not self.spec.needs_critic:
            raise ValueError(f"rl.critic_warmup_iters={c.rl.critic_warmup_iters} fits a critic, "
                             f"and rl.estimator={c.rl.estimator!r} has none: set it to 0, or "
                             "choose an estimator with a critic (gae, turn_gae).")
        if c.rl.loss_norm not in returns.LOSS_NORMS:
            raise ValueError(f"rl.loss_norm={c.rl.loss_norm!r}; choose one of {returns.LOSS_NORMS}.")
        # Reference log-probs are computed only for a KL term (in the loss or in the rewards).
        self.needs_ref = self.objective.needs_ref
        self.plan = data.budget_plan(c) if training else {"sft_demos": 0, "rl_episodes": 0}
        with multihost.process_zero_first("games, tokenizer, weights"):   # shared files
            t_games = time.time()
            self.sets = data.game_sets(c) if training else {}
            self.games_s = time.time() - t_games   # generated, or loaded from the cache
            if training and c.eval.num_samples > 0:   # fails now, not after SFT
                sampled_tasks(self.sets.get(c.eval.sampled_split, []), c.eval.sampled_games)
            self.rename = data.task_renamer(c, self.sets) if training else None
            sft_tasks = self.sets["sft"][:self.plan["sft_demos"]] if training else []
            self.expert = data.expert_data(c, sft_tasks) if training else []
            self.setup_model()
        augmented = data.augmented_experts(c, self.expert, sft_tasks,
                                           host_rng(c.seed, AUGMENT_RNG)) if training else []
        self.sft_rows = self.make_sft_rows(self.expert + augmented)
        self.sft_lengths = [len(r["tokens"]) for r in self.sft_rows]   # SFT and replay batches
        per_iter = c.rollout.tasks_per_iter * c.rollout.group_size
        self.batch_rows = per_iter
        self.rl_iters = self.plan["rl_episodes"] // per_iter
        self.sft_steps = c.sft.epochs * -(-len(self.sft_rows) // c.sft.batch_rows)
        rl_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), self.rl_iters)
        if training and self.rl_iters:   # fails now, not after SFT
            replay.check_replay(len(self.sft_rows), c.rl.replay_steps, c.sft.batch_rows)
        rl_steps += c.rl.replay_steps * self.rl_iters   # they step the RL optimizer too
        # Without training the optimizers only give the checkpointed state its structure.
        self.sft_opt = optim.optimizer_from_config(c.sft, max(1, self.sft_steps))
        self.rl_opt = optim.optimizer_from_config(c.rl, rl_steps)
        warm = c.rl.critic_warmup_iters
        warm_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), warm) if warm else 0
        self.critic_opt = optim.optimizer_from_config(c.rl, rl_steps + warm_steps,
                                                      lr=c.rl.critic_lr)
        self.place = placement.Placement(self.mesh, self.cfg)
        self.rollout_place = placement.Placement(self.rollout_mesh, self.cfg)
        self.shardings = {phase: self.place.step_shardings(self._abstract_state(phase == RL), opt,
                                                           self.critic_opt)
                          for phase, opt in ((SFT, self.sft_opt), (RL, self.rl_opt))}
        self.setup_steps()
        self.ckpt = checkpoint.Checkpointer(workdir, c.checkpoint.max_to_keep, writer=training)
        self.shapes_seen: dict[str, set[tuple[int, ...]]] = {}
        if not training:
            return
        self.sft_step = steps.make_sft_step(
            self.units, self.sft_opt, objective.ObjectiveConfig(lm_coef=c.sft.lm_coef),
            shardings=self.shardings[SFT])
        self.pg_step = steps.make_pg_step(
            self.units, self.rl_opt, self.critic_opt, self.objective,
            temperature=c.policy.temperature, needs_critic=self.spec.needs_critic,
            shardings=self.shardings[RL])
        self.replay_step = steps.make_sft_step(
            self.units, self.rl_opt, objective.ObjectiveConfig(lm_coef=c.sft.lm_coef),
            shardings=self.shardings[RL], prefix="replay") if c.rl.replay_steps else None
        self.critic_step = steps.make_critic_step(
            self.units, self.critic_opt, self.objective,
            shardings=self.shardings[RL]) if c.rl.critic_warmup_iters else None
        self.old_terms = steps.make_old_terms(
            self.units, temperature=c.policy.temperature, needs_ref=self.needs_ref,
            needs_critic=self.spec.needs_critic)
        self.writer = metrics_log.MetricsWriter(workdir, enabled=jax.process_index() == 0)
        self.compile_clock = metrics_log.CompileClock()

    # ----- interface hooks -----------------------------------------------------------------
    def check_config(self) -> None:
        """Fails, before any work, on config fields this interface cannot honour."""

    def tokenizer_text(self) -> list[dict[str, Any]]:
        """Expert trajectories to train a game-text tokenizer on: the SFT demonstrations, or
        (pure RL) 20 SFT-split games' walkthroughs."""
        if self.expert:
            return self.expert
        if not self.training:
            raise FileNotFoundError(f"{self.workdir}/tokenizer is missing: a game-text model is "
                                    "evaluated with the tokenizer its run trained.")
        return data.expert_data(self.c, self.sets["sft"][:20])

    @abc.abstractmethod
    def setup_model(self) -> None:
        """Sets self.tok, self.cfg and the initial params factory ``self.init_params(key)``."""

    @abc.abstractmethod
    def setup_steps(self) -> None:
        """Sets self.units (``steps.Units``) and whatever jitted rollout function ``play`` uses."""

    def set_state_budget(self, on: bool) -> None:
        """Whether prompts state the turn budget from now on (``policy.state_budget``)."""
        if on:
            raise ValueError(f"the {self.interface!r} interface cannot state the turn budget in "
                             "its prompts (policy.state_budget is for interface 'score').")

    def set_forced_action(self, forced) -> None:
        """Every episode plays a given command at a given turn (the forced-action probe)."""
        if forced is not None:
            raise ValueError(f"the {self.interface!r} interface cannot force an action (the "
                             "forced-action probe is for interface 'score').")

    def batch_row_fields(self) -> dict[str, int]:
        """Config fields that fix a device batch's row count (each must divide the batch shards)."""
        return {"sft.batch_rows": self.c.sft.batch_rows,
                "rl.minibatch_rows": self.c.rl.minibatch_rows}

    @abc.abstractmethod
    def make_sft_rows(self, expert: list[dict[str, Any]]) -> list[dict[str, np.ndarray]]:
        ...

    @abc.abstractmethod
    def rows_per_iter_estimate(self) -> int:
        ...

    @abc.abstractmethod
    def play(self, params, pool, tasks, *, group_size: int, budgets: Sequence[int],
             rng: np.random.Generator, greedy: bool, key: jax.Array, temperature: float,
             offset: int = 0) -> list[trajectory.Trajectory]:
        """Episodes of ``tasks`` on this process's devices (``rollout_mesh``; ``params`` are the
        trainer's). ``tasks`` are items ``offset ...`` of the caller's list: group ids and each
        episode's sampling randomness follow the position in that list, not the process."""

    @abc.abstractmethod
    def update_rows(self, trajs) -> list[dict[str, np.ndarray]]:
        """Rows for old_terms / pg_step (with ``old_logp`` = the sampling log-probs)."""

    @abc.abstractmethod
    def layout(self, trajs, rows, per_row: Sequence[Any]) -> np.ndarray:
        """Per-row unit values (a scalar per turn row, an array per token row) as ``[E, X]``."""

    @abc.abstractmethod
    def matrices(self, trajs, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rewards_EX, mask_EX, turn_end_EX, state_key_EX) for the estimators."""

    @abc.abstractmethod
    def attach(self, trajs, rows, adv_EX, ret_EX) -> None:
        """Writes adv / ret from the ``[E, X]`` matrices into ``rows`` (in place)."""

    def row_units(self, x_U: np.ndarray, row: dict[str, np.ndarray]) -> np.ndarray:
        """One row's part of a ``[U]`` per-unit output of a packed batch (token rows: its
        length; the scoring interface overrides: one unit)."""
        return x_U[:len(row["tokens"])]

    def pack(self, rows, num_rows: int, purpose: str) -> dict[str, np.ndarray]:
        """Pads rows into a fixed shape; records the shape per purpose (compiles = shapes)."""
        batch = buckets.pack_rows(rows, length_buckets=self.c.rollout.length_buckets,
                                  num_rows=num_rows, pad_values=self.pad_values)
        self.shapes_seen.setdefault(purpose, set()).add(batch["tokens"].shape)
        return batch

    pad_values: dict[str, Any] = {}

    @property
    def min_rows(self) -> int:
        """Smallest rollout row bucket: a multiple of the batch shards (>= 4), so every bucket
        divides over the mesh."""
        shards = placement.batch_shards(self.mesh)
        return shards * -(-4 // shards)

    def update_batch_rows(self, num: int) -> int:
        """Rows an RL update (or pre-update) chunk of ``num`` real rows is padded to: a multiple
        of 2 x ``min_rows`` (8 on one device), at most ``rl.minibatch_rows``. Only an epoch's one
        partial chunk (the shortest rows, ``buckets.length_grouped_minibatches``) is smaller than
        ``rl.minibatch_rows``, so this adds a few small shapes and drops most weight-0 rows
        (benchmarks/padding.py)."""
        return buckets.row_multiple(num, self.c.rl.minibatch_rows, 2 * self.min_rows)

    # ----- the run: trainers.schedule (phases), trainers.rl_iteration (one iteration) -----
    def run(self) -> dict[str, Any]:
        """The whole schedule (``trainers.schedule.run``); its summary."""
        return schedule.run(self)

    def _rl_iteration(self, state, ref, pool, it, critic_only: bool = False):
        """One RL iteration (``trainers.rl_iteration.iteration``): the seam tests wrap."""
        return rl_iteration.iteration(self, state, ref, pool, it, critic_only)
