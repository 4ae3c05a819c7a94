"""The multi-seed record: paired gains per difficulty from the runs' own files, hand-checked."""
import json

import numpy as np
import pytest

from meowjax.eval import seed_summary, stats


def _write_run(d, seed, before, after, split="eval_hard"):
    d.mkdir()
    ids = [f"g{i}" for i in range(len(before))]
    evals = {"start": {split: {"per_game": dict(zip(ids, before))}},
             "final": {split: {"per_game": dict(zip(ids, after))}}}
    prov = {"seed": seed, "commit": "abc1234", "cpu": "test cpu", "eval_split": "test",
            "difficulties": {"eval": "w2-o3-q4", "eval_hard": "w3-o5-q6",
                             "eval_transfer": "w4-o6-q8"}}
    (d / "evals.json").write_text(json.dumps(evals))
    (d / "provenance.json").write_text(json.dumps(prov))
    return str(d)


def test_seed_summary_records_paired_gains_and_the_mean_over_seeds(tmp_path):
    # seed 1: 2 of 4 -> 4 of 4 (gain +0.5); seed 0: 1 of 4 -> 2 of 4 (+0.25).
    runs = [_write_run(tmp_path / "a", 1, [1, 1, 0, 0], [1, 1, 1, 1]),
            _write_run(tmp_path / "b", 0, [1, 0, 0, 0], [1, 1, 0, 0])]
    rec = seed_summary.summarize(runs)
    assert [r["seed"] for r in rec["seeds"]] == [0, 1]   # ordered by seed
    d = rec["seeds"][1]["rl_difficulty"]
    assert (d["name"], d["games"], d["before"], d["after"]) == ("w3-o5-q6", 4, 0.5, 1.0)
    gain, low, high = stats.paired_difference_interval([1, 1, 0, 0], [1, 1, 1, 1])
    assert (d["gain"], d["ci_low"], d["ci_high"]) == (pytest.approx(0.5), low, high)
    assert "base_difficulty" not in rec["seeds"][0]
    m = rec["mean_gain"]["rl_difficulty"]
    # mean 0.375, sd 0.1768, t(0.975, 1) = 12.706: half-width 12.706 * 0.1768 / sqrt(2) = 1.588
    assert m["mean"] == pytest.approx(0.375) and m["seeds"] == 2
    assert m["ci_high"] - m["mean"] == pytest.approx(12.7062 * np.std([0.25, 0.5], ddof=1)
                                                     / np.sqrt(2), rel=1e-4)
    # MDE: (t(0.975, 1) + t(0.8, 1)) * 0.1768 / sqrt(2) = (12.7062 + 1.3764) * 0.125 = 1.7603
    assert m["mde_80"] == pytest.approx(1.7603, abs=1e-3)
    # Two-stage bootstrap: every resample's mean lies in [0, 1] (per-game gains are 0 or 1)
    # and the interval holds the mean, narrower than the 2-seed t interval.
    assert 0.0 <= m["two_stage_low"] < m["mean"] < m["two_stage_high"] <= 1.0
    assert m["two_stage_high"] - m["two_stage_low"] < m["ci_high"] - m["ci_low"]
    # Per-game SD pooled about each seed's mean: seed 1 diffs (0,0,1,1) mean .5, seed 0
    # (0,1,0,0) mean .25: squares 4 x .25 + (3 x .0625 + .5625) = 1.75 over 8 - 2 dof.
    assert m["game_sd"] == pytest.approx(np.sqrt(1.75 / 6))


def test_seed_summary_refuses_unfinished_runs_and_repeated_seeds(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a finished run"):
        seed_summary.summarize([str(tmp_path / "empty")])
    runs = [_write_run(tmp_path / "a", 0, [1, 0], [1, 1]), _write_run(tmp_path / "b", 0, [0], [1])]
    with pytest.raises(ValueError, match="share a seed"):
        seed_summary.summarize(runs)
    with pytest.raises(ValueError, match="same non-empty set of games"):
        seed_summary.difficulty_record("x", {"a": True}, {"b": True})
