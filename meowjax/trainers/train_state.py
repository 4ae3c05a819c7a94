"""The trainer's state: built and placed on the mesh, saved, restored, and what a SIGTERM saves.

A state is ``optim.TrainState`` (policy, optimizer, critic) placed with
``self.shardings[phase].state``; a checkpoint holds it with the reference policy and the
schedule's ``meta`` (phase, SFT step, RL iteration, evaluations).

What a SIGTERM saves: ``AgentTrainer`` marks the last consistent (state, reference, meta) after
every step that changes it (``_mark``); the handler (``meowjax.runtime.preemption``) only sets
a flag, and the schedule, at its next safe point, saves the marked triple unless it already is
(``_save_resume_point``) and stops. With several processes the flag is a collective
(``preempted``), so all of them save and stop at the same step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from absl import logging

from meowjax.models import value
from meowjax.runtime import console, multihost, placement, preemption
from meowjax.trainers import optim, sft_key

SFT, RL, DONE = "sft", "rl", "done"


class TrainerState:
    """Mixin of ``AgentTrainer``: reads its config, model, optimizers, shardings and
    checkpointer; owns ``self._resume``."""

    _resume = None

    def _new_state(self, params, rl: bool):
        vparams, vopt = {}, {}
        if rl and self.spec.needs_critic:
            # The critic starts from the policy's trunk (as after SFT) with a fresh head.
            vparams = value.init_value_params(self.cfg, jax.random.key(self.c.seed + 1), params)
            vopt = self.critic_opt.init(vparams)
        opt = self.rl_opt if rl else self.sft_opt
        return optim.TrainState(step=jnp.int32(0), params=params, opt_state=opt.init(params),
                                value_params=vparams, value_opt_state=vopt)

    def _abstract_state(self, rl: bool):
        return jax.eval_shape(lambda: self._new_state(self.init_params(jax.random.key(0)), rl))

    def _placed_state(self, params, rl: bool):
        """A fresh TrainState on its shardings, built by one compiled program (eagerly, every
        optimizer moment of a new shape was its own small compile)."""
        phase = RL if rl else SFT

        def new_state(p):
            return self._new_state(p, rl)

        new_state.__name__ = f"new_{phase}_state"   # its name in compile logs and counts
        return jax.jit(new_state, out_shardings=self.shardings[phase].state)(params)

    def _sft_state(self):
        params = self.place.params(multihost.host_params(
            self.init_params(jax.random.key(self.c.seed))))
        return self._placed_state(params, False)

    def _rl_state(self, params):
        return self._placed_state(params, True)

    def _save(self, state, ref, meta):
        meta["ckpt_index"] += 1
        self.ckpt.save(int(meta["ckpt_index"]), {"state": state, "ref": ref}, meta)

    def restore_state(self):
        """(state, ref, meta) from the newest checkpoint that loads (restored onto the mesh
        shardings), or a fresh start."""
        meta = {"phase": SFT, "sft_step": 0, "iteration": 0, "ckpt_index": 0, "evals": {}}
        if self.ckpt.latest_step() is None:
            state = self._sft_state()
            return state, state.params, meta

        def target_for(meta):
            phase = SFT if meta["phase"] == SFT else RL
            target = placement.with_shardings(self._abstract_state(phase == RL),
                                              self.shardings[phase].state)
            return {"state": target, "ref": target.params}

        # A damaged newest checkpoint falls back to the one before (a warning names it) and is
        # moved aside (an evaluation, ``Agent.restore_params``, never renames a run's files).
        restored, meta = self.ckpt.restore_newest(target_for)
        # RL from a shared SFT: it must be this config's.
        sft_key.check_meta(self.c, meta, self.ckpt.directory)
        logging.info("Resumed from checkpoint: phase %s, sft_step %d, iteration %d",
                     meta["phase"], meta["sft_step"], meta["iteration"])
        return restored["state"], restored["ref"], meta

    @property
    def preempted(self) -> bool:
        """A SIGTERM arrived (set by the handler; tests set it to stop at a chosen point). With
        several processes: on any of them (a collective: every process asks at the same points,
        so all save and stop at the same step)."""
        if multihost.any_process(preemption.requested()):
            preemption.request()
            return True
        return False

    @preempted.setter
    def preempted(self, value: bool) -> None:
        if value:
            preemption.request()

    def _mark(self, state, ref, meta, *, saved: bool = False) -> None:
        """Records the last consistent (state, ref, meta): what a SIGTERM saves. Its buffers
        stay valid until the next update step donates them, and every update step runs in a
        deferred section that ends with a new mark."""
        self._resume = (state, ref, dict(meta, evals=dict(meta["evals"])), saved)

    def _save_resume_point(self) -> None:
        if self._resume is None:   # stopped while restoring: the checkpoints are as they were
            return
        state, ref, meta, saved = self._resume
        if not saved:
            self._save(state, ref, meta)
            self._resume = (state, ref, meta, True)
        console.info("SIGTERM: state saved (phase %s, SFT step %d, RL iteration %d)",
                     meta["phase"], meta["sft_step"], meta["iteration"])
