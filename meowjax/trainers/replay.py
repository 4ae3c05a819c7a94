"""Demonstration replay during RL (``rl.replay_steps``): which SFT rows each replay step takes.

After each RL iteration's policy update the trainer takes ``rl.replay_steps`` SFT steps on the
RL state, through the RL optimizer, each on ``sft.batch_rows`` demonstration rows:

    L_replay = -agg_u log pi(expert u) + c_lm LM        (the SFT loss, tau = 1)

RL that plays games the demonstrations do not cover drifts on the games they do; the replayed
rows keep pulling the policy towards the expert there (the pretraining mix of PPO-ptx, as steps
of their own so that the RL update's batches keep their shapes and compiles).
"""

from __future__ import annotations

import numpy as np


def check_replay(num_rows: int, steps: int, batch_rows: int) -> None:
    """ValueError, naming the fix, when ``steps`` minibatches of ``batch_rows`` distinct rows
    cannot be drawn from ``num_rows`` demonstration rows."""
    if steps < 0 or batch_rows <= 0:
        raise ValueError(f"rl.replay_steps={steps} and sft.batch_rows={batch_rows}: both must be "
                         ">= 0 and batch_rows > 0.")
    if steps * batch_rows > num_rows:
        raise ValueError(f"rl.replay_steps={steps} x sft.batch_rows={batch_rows} = "
                         f"{steps * batch_rows} demonstration rows per RL iteration, but the run "
                         f"has {num_rows}: lower rl.replay_steps or sft.batch_rows, or add "
                         "demonstrations.")


def replay_minibatches(lengths: list[int], steps: int, batch_rows: int,
                       rng: np.random.Generator) -> list[np.ndarray]:
    """``steps`` minibatches of ``batch_rows`` distinct row indices into the SFT rows.

    ``steps * batch_rows`` rows are drawn without replacement, sorted by length and cut into
    consecutive minibatches (rows of one minibatch have similar lengths: little padding, few
    bucket shapes), handed out in a random order.
    """
    check_replay(len(lengths), steps, batch_rows)
    if steps == 0:
        return []
    want = steps * batch_rows
    picked = rng.choice(len(lengths), size=want, replace=False)
    picked = picked[np.argsort([lengths[i] for i in picked], kind="stable")]
    chunks = [picked[k * batch_rows:(k + 1) * batch_rows] for k in range(steps)]
    return [chunks[k] for k in rng.permutation(steps)]
