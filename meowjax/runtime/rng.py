"""The run's host randomness: one numpy stream per phase, ``default_rng([seed, stream, ...])``.

Every host draw of a run (minibatch order, the RL iteration's tasks and budgets, entity renames,
demonstration augmentation and replay, evaluation) comes from ``host_rng(seed, STREAM, k)``
with the phase's stream id and its counter (epoch, iteration), never from a shared generator,
so a run resumed at any checkpoint draws what an uninterrupted run draws.
"""

from __future__ import annotations

import numpy as np

SFT_RNG = 1        # SFT minibatches, per epoch
COLLECT_RNG = 2    # an RL iteration's tasks, budgets and sampling draws
SHUFFLE_RNG = 3    # an RL iteration's update minibatches
AUGMENT_RNG = 7    # expert-demonstration augmentation, at set-up
EVAL_RNG = 9       # evaluations (agents.base.Player)
RENAME_RNG = 12    # an RL iteration's entity renames
REPLAY_RNG = 13    # an RL iteration's replayed demonstration minibatches


def host_rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])
