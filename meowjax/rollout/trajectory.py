"""The one trajectory record both action interfaces produce (host-side, no device arrays).

Per turn: the observation the action was taken in, the action text sent to the environment, the
turn's reward, whether the environment rejected the action, the sampled log-prob of the action
(the sum over its tokens for free text) and a state key (a stable hash of that observation,
which step-level estimators such as GiGPO group on). Plus the interface's payload: the scoring
interface keeps per turn its packed candidate row and the chosen index (`ScoredTurn`); free text
keeps the episode's token arrays (`meowjax.rollout.episodes.Episode`).

Estimator inputs, reports and per-turn diagnostics read these fields, never the payloads'.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np


def state_key(observation: str) -> int:
    """A stable non-negative int32 hash of an observation (the same text -> the same key in
    every process; Python's `hash` is salted per process)."""
    digest = hashlib.blake2b(observation.strip().encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


@dataclasses.dataclass(frozen=True)
class TurnRecord:
    observation: str
    action: str
    reward: float
    invalid: bool
    logp: float
    state_key: int


@dataclasses.dataclass
class Trajectory:
    """One episode. `info` holds truncated / env_failure / overflow flags (bool).

    `payload`: the interface's own record (see the module docstring)."""

    task_id: str
    group_id: int
    turns: list[TurnRecord]
    won: bool
    success_turn: int | None
    info: dict[str, Any]
    payload: Any = None

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def invalid_count(self) -> int:
        return int(sum(t.invalid for t in self.turns))

    @property
    def actions(self) -> list[str]:
        return [t.action for t in self.turns]

    @property
    def truncated(self) -> bool:
        """The turn budget (not the game) ended the episode."""
        return bool(self.info.get("truncated", False))

    @property
    def overflow(self) -> bool:
        return bool(self.info.get("overflow", False))

    @property
    def env_failure(self) -> bool:
        """The environment's worker died or hung: the episode ended without the game's say."""
        return bool(self.info.get("env_failure", False))


def make_turn(observation: str, action: str, reward: float, invalid: bool,
              logp: float) -> TurnRecord:
    return TurnRecord(observation, action, float(reward), bool(invalid), float(logp),
                      state_key(observation))


def turn_logp_sums(sample_logp_L: np.ndarray, loss_mask_L: np.ndarray,
                   turn_end_L: np.ndarray) -> list[float]:
    """Per agent turn, the sum of its sampled tokens' log-probs (token layout: a turn's tokens
    are the masked ones up to and including its `turn_end`)."""
    out, acc = [], 0.0
    for lp, m, e in zip(sample_logp_L, loss_mask_L, turn_end_L):
        if m:
            acc += float(lp)
        if e:
            out.append(acc)
            acc = 0.0
    return out


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """The ``rollout/*`` summary of a set of episodes: success and return per episode, turns
    per episode, and the shares of invalid turns, overflowing episodes (a row cut at the length
    budget) and episodes cut by a dead or hung env worker."""
    if not trajs:
        raise ValueError("rollout_metrics needs at least one episode.")
    n_turns = sum(e.num_turns for e in trajs)
    return {
        "rollout/success": float(np.mean([e.won for e in trajs])),
        "rollout/return": float(np.mean([e.total_reward for e in trajs])),
        "rollout/episode_turns": n_turns / len(trajs),
        "rollout/invalid_rate": sum(e.invalid_count for e in trajs) / max(1, n_turns),
        "rollout/overflow_rate": float(np.mean([e.overflow for e in trajs])),
        "rollout/env_failure_rate": float(np.mean([e.env_failure for e in trajs])),
    }
