"""Demonstration replay during RL (``rl.replay_steps``): which rows each step takes, and that the
replayed steps hold the policy on the demonstrations while RL moves it. `pytest -k replay`."""
import json

import numpy as np
import pytest

from meowjax.rl import objective
from meowjax.trainers.replay import replay_minibatches
from meowjax.trainers.loop import AgentTrainer
from tests.test_trainers import tiny_config


def test_replay_minibatches_are_distinct_rows_of_similar_length():
    lengths = [int(x) for x in np.random.default_rng(0).integers(100, 400, size=50)]
    chunks = replay_minibatches(lengths, 3, 8, np.random.default_rng(1))
    assert [len(c) for c in chunks] == [8, 8, 8]
    picked = np.concatenate(chunks)
    assert len(set(picked.tolist())) == 24 and picked.max() < 50
    # Sorted by length before the cut: the chunks' length ranges do not interleave.
    spans = sorted((min(lengths[i] for i in c), max(lengths[i] for i in c)) for c in chunks)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    again = replay_minibatches(lengths, 3, 8, np.random.default_rng(1))
    assert all((a == b).all() for a, b in zip(chunks, again))   # the rng fixes the draw
    other = replay_minibatches(lengths, 3, 8, np.random.default_rng(2))
    assert any(set(a) != set(b) for a, b in zip(chunks, other))


def test_replay_minibatches_off_and_refusals():
    assert replay_minibatches([5, 6], 0, 8, np.random.default_rng(0)) == []
    with pytest.raises(ValueError, match="the run has 10: lower rl.replay_steps"):
        replay_minibatches([1] * 10, 2, 8, np.random.default_rng(0))
    with pytest.raises(ValueError, match="must be >= 0"):
        replay_minibatches([1] * 10, -1, 8, np.random.default_rng(0))


def _demo_nll(trainer, params) -> float:
    rows = trainer.sft_rows
    batch = trainer.place.batch(trainer.pack(rows, len(rows), "probe"))
    terms = trainer.units.policy_terms(params, batch, 1.0, with_lm=False)
    _, m = objective.sft_loss(terms, batch["row_weight"], objective.ObjectiveConfig())
    return float(m["sft/loss"])


@pytest.mark.slow
def test_replay_holds_the_policy_on_the_demonstrations(tiny_games_dir, tmp_path):
    """Two runs from the same SFT (same seed, same steps): RL alone, and RL with 2 replay steps
    an iteration. With replay the final policy's NLL of the demonstrations is lower, and each
    iteration logs its replay steps."""
    def run(replay_steps: int, name: str):
        c = tiny_config(tiny_games_dir, estimator="rloo", minibatch_rows=8, lr=3e-3,
                        lr_schedule="constant", replay_steps=replay_steps)
        c.unlock()
        c.sft.batch_rows = 2   # the tiny run has a handful of demonstration rows
        c.lock()
        trainer = AgentTrainer(c, str(tmp_path / name))
        return trainer, trainer.run()

    plain, out_plain = run(0, "plain")
    replayed, out_replay = run(2, "replay")
    assert plain.replay_step is None and "replay" not in plain.shapes_seen
    # The same SFT: both RL phases start from one policy.
    assert _demo_nll(plain, out_plain["ref"]) == pytest.approx(_demo_nll(replayed,
                                                                         out_replay["ref"]))
    start = _demo_nll(plain, out_plain["ref"])
    nll_plain = _demo_nll(plain, out_plain["state"].params)
    nll_replay = _demo_nll(replayed, out_replay["state"].params)
    assert nll_replay < nll_plain and nll_replay < start, (start, nll_plain, nll_replay)
    recs = [json.loads(l) for l in open(tmp_path / "replay" / "metrics.jsonl")]
    rl = [r for r in recs if "pg/policy_loss" in r]
    assert len(rl) == 2 and all(np.isfinite(r["replay/loss"]) for r in rl)
    # One compile per replay batch shape.
    assert replayed.replay_step._cache_size() == len(replayed.shapes_seen["replay"])
