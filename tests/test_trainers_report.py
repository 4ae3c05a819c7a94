"""The run report: starting policy and after RL side by side (Pass@(K,T), per-turn
diagnostics), the SFT loss by step and the RL curves by iteration."""
import json

import numpy as np

from configs import default
from meowjax.eval import passk
from meowjax.trainers import run


def _diag(first, validity, won_by_turn):
    return {"episodes": 8, "turns": 30, "validity": validity, "progress_rate": 0.5,
            "recovery_invalid": float("nan"), "episodes_with_invalid": 0,
            "recovery_no_progress": 0.25, "episodes_with_no_progress": 4,
            "first_action_progress": first, "plan_done": 0.6, "replay_disagreements": 0,
            "success_by_turn": won_by_turn, "validity_by_turn": [validity] * len(won_by_turn)}


def test_run_report_compares_start_and_after_rl(tmp_path):
    c = default.get_config("smoke=True")
    rng = np.random.default_rng(0)
    pk = {}
    for tag in ("start", "final"):
        recs = {f"g{i}": [{"won": bool(w), "success_turn": 3 if w else None}
                          for w in rng.uniform(size=4) < 0.5] for i in range(6)}
        pk[tag] = passk.estimate_pass_at_k_t(recs, [1, 2], [2, 4], n_boot=20).to_json()
    game = {"success": 0.5, "wins": 1, "n": 2, "per_game": {"a": True, "b": False}}
    evals = {"start": {"eval": dict(game, lost_in_cycle=1), "pass_at_k_t": pk["start"],
                       "diagnostics": _diag(0.25, 0.9, [0.0, 0.1, 0.3, 0.4])},
             "final": {"eval": game, "pass_at_k_t": pk["final"],
                       "diagnostics": _diag(0.5, 0.95, [0.0, 0.2, 0.5, 0.6])}}
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for step, loss in enumerate([3.0, 2.0, 1.5], 1):
            f.write(json.dumps({"step": step, "sft/loss": loss}) + "\n")
        for it, (s, kl) in enumerate([(0.5, 0.01), (0.75, 0.03)]):
            f.write(json.dumps({"step": 10 + 5 * it, "rollout/success": s, "rollout/return": s,
                                "pg/kl_ref": kl, "pg/entropy": 0.4}) + "\n")
    out = {"evals": evals, "plan": {"sft_demos": 3, "rl_episodes": 16}, "rl_iters": 2}
    md = open(run.write_run_report(c, str(tmp_path), out, 60.0)).read()
    diff = (np.asarray(pk["final"]["mean"]) - np.asarray(pk["start"]["mean"]))[1, 1]
    assert f"| K=2, T=4 | {pk['start']['mean'][1][1]:.3f} | {pk['final']['mean'][1][1]:.3f} | " \
           f"{diff:+.3f} |" in md
    assert "| first action makes progress (share of episodes) | 0.250 | 0.500 | +0.250 |" in md
    assert "| recovery after an invalid action (won / episodes with one) | n/a | n/a | n/a |" in md
    assert "| starting policy | 0.000 | 0.100 | 0.300 | 0.400 |" in md
    # Curves by RL iteration (1, 2), not by global step (10, 15); the SFT loss by SFT step.
    assert "| rollout success | 2 | 0.750 | 0.750 |" in md
    assert "| KL to the starting policy | 2 | 0.030 | 0.030 |" in md
    assert "| SFT loss | 3 | 1.500 | 1.500 |" in md
    assert "on 4 w2-o3-q4 training games (sample order: 4 draws, 1.0 per task)" in md
    # Lost greedy episodes that ended in a loop: counted at the start only here.
    assert "| w2-o3-q4 (SFT demonstrations and 4 of 4 RL games) | 1 of 1 | n/a |" in md
    # The report leads with RL's paired gain by difficulty (before, after, gain).
    first = md.split("\n## ")[1]
    assert first.startswith("RL's gain by difficulty")
    assert "| w2-o3-q4 (SFT demonstrations and 4 of 4 RL games) | 0.500 | 0.500 | +0.000 |" in first


def test_run_report_draws_the_held_out_learning_curve(tmp_path):
    c = default.get_config("smoke=True")
    game = {"success": 0.5, "wins": 1, "n": 2, "per_game": {"a": True, "b": False}}
    curve = [{"iteration": i, "wins": w, "n": 4, "success": w / 4, "ci_low": 0.0, "ci_high": 1.0}
             for i, w in ((0, 1), (2, 2), (4, 3))]
    evals = {"start": {"eval_hard": game}, "final": {"eval_hard": dict(game, per_game={
        "a": True, "b": True}, wins=2, success=1.0)}, "curve": curve}
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for it, s in enumerate([0.25, 0.5, 0.5, 1.0]):
            f.write(json.dumps({"step": 10 + it, "rollout/success": s}) + "\n")
    out = {"evals": evals, "plan": {"sft_demos": 3, "rl_episodes": 16}, "rl_iters": 4}
    md = open(run.write_run_report(c, str(tmp_path), out, 60.0)).read()
    sections = md.split("\n## ")
    assert sections[1].startswith("RL's gain by difficulty")
    assert "| w2-o4-q5 (never trained on) | 0.500 | 1.000 | +0.500 |" in sections[1]
    assert sections[2].startswith("Learning curve: greedy success on 4 held-out w2-o4-q5 games")
    assert "| 4 | 0.750 | [0.000, 1.000] |" in sections[2]
    assert (tmp_path / "plots").is_dir() and any((tmp_path / "plots").iterdir())
    res = json.load(open(tmp_path / "results.json"))
    rl_curve = [x for x in res["sections"] if x["type"] == "RLCurve"][0]
    assert rl_curve["held_out"]["success"] == [0.25, 0.5, 0.75]
    assert rl_curve["rollout"]["success"] == [0.25, 0.5, 0.5, 1.0]
