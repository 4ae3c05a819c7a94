"""The agent trainer shared by both action interfaces: what a run is built from.

``AgentTrainer(c, workdir)`` builds one run: the mesh, the estimator and objective, the game
sets and expert demonstrations, its agent (the interface's: model, tokenizer, interface, play;
``meowjax.agents``), the SFT rows, optimizers, shardings and jitted steps. ``run()`` plays the
schedule, read top to bottom in ``meowjax.trainers.schedule`` (SFT -> evaluation -> RL ->
evaluation), one RL iteration in ``meowjax.trainers.rl_iteration`` (collect -> old terms ->
advantages -> update -> replay). Evaluations are ``meowjax.eval.held_out``'s, played through
the trainer's ``play`` (its agent's).

What differs between interfaces beyond the agent is a record of functions
(``trainers.interfaces.Interface``, chosen by ``policy.interface``): the per-unit terms
(``steps.Units``: a unit is a turn for the scoring interface, a token for free text), how expert
data becomes rows, and how trajectories become update rows laid out as the ``[E, X]`` matrices
the estimators read (X = turns or tokens). The losses are ``meowjax.rl.objective``'s, built into
jitted steps once, in ``meowjax.trainers.steps``.

Building, placing, saving and restoring the state, and what a SIGTERM saves:
``meowjax.trainers.train_state``.

Host randomness is ``np.random.default_rng([seed, phase, index])`` (``runtime.rng``) and device
randomness ``jax.random.fold_in(key(seed), index)``, so a resumed run replays exactly what an
uninterrupted run does.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from meowjax.agents.base import Player
from meowjax.envs import game_sets
from meowjax.eval import held_out
from meowjax.rl import estimators, objective
from meowjax.rollout import buckets, trajectory
from meowjax.runtime import checkpoint, metrics_log, multihost, placement
from meowjax.runtime.preemption import Preempted  # noqa: F401  (what a stopped run raises)
from meowjax.runtime.rng import AUGMENT_RNG, host_rng
from meowjax.sharding import make_mesh
from meowjax.trainers import (data, estimator_inputs, interfaces, optim, replay, returns,
                              rl_iteration, schedule, steps)
from meowjax.trainers.train_state import RL, SFT, TrainerState


class AgentTrainer(TrainerState, Player):
    """Owns one run: its interface's record (``iface``: ``trainers.interfaces``), its agent
    (built here) and what training it needs."""

    def __init__(self, c: ml_collections.ConfigDict, workdir: str):
        """The run of ``c``, built in four steps a reader can follow one at a time: the mesh
        and the RL objective (every config check that needs no data fails here), the data and
        the agent, the optimizers and their shardings, the jitted steps.

        Several processes (``runtime.multihost``): updates run SPMD on ``mesh``; each process
        plays its share of the episodes on ``rollout_mesh``, its own devices."""
        self.c, self.workdir = c, workdir
        self.iface = interfaces.get_interface(c.policy.interface)
        self.mesh = make_mesh(c.mesh.axes, jax.devices(), field="config.mesh.axes")
        placement.check_batch_rows(self.mesh, self.batch_row_fields())
        note = multihost.idle_processes_note(c.rollout.tasks_per_iter, "rollout.tasks_per_iter")
        if note:
            logging.warning("%s", note)
        os.makedirs(workdir, exist_ok=True)
        self._setup_objective()
        self._setup_data_and_agent()
        self._setup_optimizers()
        self._setup_jitted_steps()

    def _setup_objective(self) -> None:
        """The estimator (with its extra inputs' providers), its hyper-parameters and the
        policy objective; fails on combinations the run cannot honour."""
        c = self.c
        self.spec = estimators.validate_estimator(c.rl.estimator)
        # Extra inputs the estimator reads, each from its registered provider (fails now).
        self.extra_inputs = estimators.extra_needs(self.spec.needs)
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

    def _setup_data_and_agent(self) -> None:
        """The budget plan, the game sets, the expert demonstrations, the agent (its tokenizer
        trained on them when the model is a game-text one) and the SFT rows."""
        c = self.c
        self.plan = data.budget_plan(c)
        with multihost.process_zero_first("games, tokenizer, weights"):   # shared files
            t_games = time.time()
            self.sets = game_sets.game_sets(c)
            self.games_s = time.time() - t_games   # generated, or loaded from the cache
            if c.eval.num_samples > 0:   # fails now, not after SFT
                held_out.sampled_tasks(self.sets.get(c.eval.sampled_split, []),
                                       c.eval.sampled_games)
            self.rename = data.task_renamer(c, self.sets)
            sft_tasks = self.sets["sft"][:self.plan["sft_demos"]]
            self.expert = data.expert_data(c, sft_tasks)
            self.agent = self.iface.agent_cls(c, self.workdir, mesh=self.mesh,
                                             expert_text=self.tokenizer_text)
        self.tok, self.cfg, self.init_params = (self.agent.tok, self.agent.cfg,
                                                self.agent.init_params)
        self.place, self.rollout_place = self.agent.place, self.agent.rollout_place
        augmented = data.augmented_experts(c, self.expert, sft_tasks,
                                           host_rng(c.seed, AUGMENT_RNG))
        self.sft_rows = self.iface.sft_rows(self.agent, self.expert + augmented)
        self.sft_lengths = [len(r["tokens"]) for r in self.sft_rows]   # SFT and replay batches

    def _setup_optimizers(self) -> None:
        """Step counts, the SFT, RL and critic optimizers (their schedules span the run), and
        the shardings of each phase's state."""
        c = self.c
        self.rl_iters = self.plan["rl_episodes"] // self.batch_rows
        self.sft_steps = c.sft.epochs * -(-len(self.sft_rows) // c.sft.batch_rows)
        rl_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), self.rl_iters)
        if self.rl_iters:   # fails now, not after SFT
            replay.check_replay(len(self.sft_rows), c.rl.replay_steps, c.sft.batch_rows)
        rl_steps += c.rl.replay_steps * self.rl_iters   # they step the RL optimizer too
        self.sft_opt = optim.optimizer_from_config(c.sft, max(1, self.sft_steps))
        self.rl_opt = optim.optimizer_from_config(c.rl, rl_steps)
        warm = c.rl.critic_warmup_iters
        warm_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), warm) if warm else 0
        self.critic_opt = optim.optimizer_from_config(c.rl, rl_steps + warm_steps,
                                                      lr=c.rl.critic_lr)
        self.shardings = {phase: self.place.step_shardings(self._abstract_state(phase == RL), opt,
                                                           self.critic_opt)
                          for phase, opt in ((SFT, self.sft_opt), (RL, self.rl_opt))}

    def _setup_jitted_steps(self) -> None:
        """The interface's units, the checkpointer, and the jitted steps built once: SFT, PG
        update, replay, critic warm-up, old terms; the metrics writer."""
        c = self.c
        self.units = self.iface.units(self.agent)
        # rl.tis="auto": truncated importance sampling where the model computes in bf16.
        self.objective = self.objective.resolve_tis(self.cfg.dtype)
        self.ckpt = checkpoint.Checkpointer(self.workdir, c.checkpoint.max_to_keep)
        self.shapes_seen: dict[str, set[tuple[int, ...]]] = {}
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
        self.writer = metrics_log.MetricsWriter(self.workdir, enabled=jax.process_index() == 0)
        self.compile_clock = metrics_log.CompileClock()

    # ----- the agent -------------------------------------------------------------------------
    @property
    def interface(self) -> str:
        return self.iface.name

    @property
    def needs_admissible(self) -> bool:
        return self.iface.agent_cls.needs_admissible

    @property
    def pad_values(self) -> dict[str, Any]:
        return self.agent.pad_values

    @property
    def rollout_mesh(self):
        """This process's devices, where its episodes are played (the agent's)."""
        return self.agent.rollout_mesh

    @property
    def batch_rows(self) -> int:
        """Episodes in one rollout batch (the agent's: tasks_per_iter x group_size)."""
        return self.agent.batch_rows

    def play(self, params, pool, tasks, *, group_size: int, budgets: Sequence[int],
             rng: np.random.Generator, greedy: bool, key: jax.Array, temperature: float,
             offset: int = 0) -> list[trajectory.Trajectory]:
        """The agent's ``play`` (``agents.base.Agent.play``): every episode of the run, its
        rollouts and its evaluations, is played through here."""
        return self.agent.play(params, pool, tasks, group_size=group_size, budgets=budgets,
                               rng=rng, greedy=greedy, key=key, temperature=temperature,
                               offset=offset)

    def set_state_budget(self, on: bool) -> None:
        self.agent.set_state_budget(on)

    def set_forced_action(self, forced) -> None:
        self.agent.set_forced_action(forced)

    # ----- evaluation (eval.held_out, played through ``play``) --------------------------------
    def evaluate(self, params, pool, title: str, *, sampled: bool) -> dict[str, Any]:
        """``eval.held_out.held_out_sets`` on the run's held-out sets."""
        return held_out.held_out_sets(self, params, pool, self.sets, self.c, title,
                                      sampled=sampled)

    def curve_point(self, params, pool, iteration: int) -> dict[str, Any]:
        """``eval.held_out.curve_point`` on the run's curve games."""
        return held_out.curve_point(self, params, pool, self.sets["curve"], self.c, iteration)

    def _periodic_eval(self, state, pool, meta) -> None:
        """Evaluation every ``eval.every_iters`` RL iterations; its success rates go to the
        metrics at the iteration's step."""
        e = self.evaluate(state.params, pool, f"evaluation at RL iteration {meta['iteration']}",
                          sampled=False)
        self.writer.write(self.sft_steps + meta["iteration"],
                          {f"eval/{k}_success": v["success"] for k, v in e.items()
                           if "success" in v})
        meta["eval_due"] = False

    # ----- what the interface's record supplies (trainers.interfaces) --------------------------
    def tokenizer_text(self) -> list[dict[str, Any]]:
        """Expert trajectories to train a game-text tokenizer on: the SFT demonstrations, or
        (pure RL) 20 SFT-split games' walkthroughs."""
        return self.expert or data.expert_data(self.c, self.sets["sft"][:20])

    def batch_row_fields(self) -> dict[str, int]:
        """Config fields that fix a device batch's row count (each must divide the batch shards)."""
        return {"sft.batch_rows": self.c.sft.batch_rows,
                "rl.minibatch_rows": self.c.rl.minibatch_rows,
                **self.iface.batch_row_fields(self.c)}

    def rows_per_iter_estimate(self) -> int:
        return self.iface.rows_per_iter(self.c, self.batch_rows)

    def update_rows(self, trajs) -> list[dict[str, np.ndarray]]:
        """Rows for old_terms / pg_step (with ``old_logp`` = the sampling log-probs)."""
        return self.iface.update_rows(trajs)

    def layout(self, trajs, rows, per_row: Sequence[Any]) -> np.ndarray:
        """Per-row unit values (a scalar per turn row, an array per token row) as ``[E, X]``."""
        return self.iface.layout(trajs, rows, per_row)

    def matrices(self, trajs, rows) -> estimator_inputs.UnitMatrices:
        """The estimators' built-in ``[E, X]`` matrices of ``trajs`` (rows: ``update_rows``)."""
        return self.iface.matrices(trajs, rows)

    def attach(self, trajs, rows, adv_EX, ret_EX) -> None:
        """Writes adv / ret from the ``[E, X]`` matrices into ``rows`` (in place)."""
        self.iface.attach(trajs, rows, adv_EX, ret_EX)

    def row_units(self, x_U: np.ndarray, row: dict[str, np.ndarray]) -> np.ndarray:
        """One row's part of a ``[U]`` per-unit output of a packed batch."""
        return self.iface.row_units(x_U, row)

    def pack(self, rows, num_rows: int, purpose: str) -> dict[str, np.ndarray]:
        """Pads rows into a fixed shape; records the shape per purpose (compiles = shapes)."""
        batch = buckets.pack_rows(rows, length_buckets=self.c.rollout.length_buckets,
                                  num_rows=num_rows, pad_values=self.pad_values)
        self.shapes_seen.setdefault(purpose, set()).add(batch["tokens"].shape)
        return batch

    @property
    def min_rows(self) -> int:
        return self.agent.min_rows

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
