"""configs/default.py end to end at smoke size: greedy evaluation on the three held-out
difficulties, the held-out learning curve (its later points add no compile), the report led by
RL's paired gain by difficulty, and the seed record written from the run's own files."""
import json
import types

import pytest

from benchmarks.rollout import CompileCounter
from configs import default
from meowjax.agents.score import ScoreAgent
from meowjax.envs import game_sets
from meowjax.envs.pool import EnvPool
from meowjax.eval import held_out, seed_summary
from meowjax.trainers import run
from tests import config_tracking, golden


@pytest.fixture(scope="module")
def default_smoke(tiny_games_dir, tmp_path_factory):
    """configs/default.py at smoke size, trained to the end once for this module."""
    c = default.get_config("smoke=True")
    c.unlock()
    c.games.cache_dir = tiny_games_dir
    c.eval.sampled_games = 1   # the default samples the first 100 of its 200: here 1 of 2
    c.rl.replay_steps = 1      # the default replays 16 demonstration minibatches: here one
    c.lock()
    workdir = str(tmp_path_factory.mktemp("default") / "run")
    tracked = config_tracking.track(c)
    out = run.run(tracked, workdir)
    return types.SimpleNamespace(config=c, tracked=tracked, workdir=workdir, out=out,
                                 record=golden.record(workdir))


@pytest.mark.slow
def test_golden_record_default_smoke(default_smoke):
    """The default smoke run reproduces its frozen record game by game (tests/golden.py)."""
    golden.check(default_smoke.record, "default_smoke")


@pytest.mark.slow
def test_default_smoke_run_end_to_end(default_smoke):
    c, workdir, out = default_smoke.config, default_smoke.workdir, default_smoke.out
    config_tracking.assert_honest("default", default_smoke.tracked)   # every set field is read
    evals = out["evals"]
    for tag in ("start", "final"):
        for split, n in (("eval", 3), ("eval_hard", 2), ("eval_transfer", 2)):
            assert evals[tag][split]["n"] == n and len(evals[tag][split]["per_game"]) == n
    # Pass@(K,T) and the per-turn diagnostics come from the sampled episodes of the first
    # eval.sampled_games games of the RL difficulty (greedy success: all of them).
    assert c.eval.sampled_games == 1 and c.eval.num_samples == 2
    for tag in ("start", "final"):
        assert evals[tag]["pass_at_k_t"]["n_tasks"] == 1
        assert evals[tag]["diagnostics"]["episodes"] == 2
    # The curve: at the start of RL, every eval.curve_every iterations and at the last one.
    assert out["rl_iters"] == 5 and c.eval.curve_every == 2
    curve = evals["curve"]
    assert [p["iteration"] for p in curve] == [0, 2, 4, 5]
    assert all(p["n"] == 2 and p["wins"] == round(2 * p["success"]) for p in curve)
    recs = [json.loads(line) for line in open(f"{workdir}/metrics.jsonl")]
    assert [r["curve/success"] for r in recs if "curve/success" in r] == [
        p["success"] for p in curve]
    rl = [r for r in recs if "pg/policy_loss" in r]     # each iteration replayed its step
    assert len(rl) == 5 and all(r["replay/expert_prob"] > 0 for r in rl)
    assert json.load(open(f"{workdir}/evals.json"))["curve"] == curve

    md = open(f"{workdir}/report.md").read()
    first = md.split("\n## ")[1]
    assert first.startswith("RL's gain by difficulty")
    for split in game_sets.HELD_OUT:
        assert f"| {game_sets.set_difficulty(c, split)} (" in first
    assert md.split("\n## ")[2].startswith("Learning curve: greedy success on 2 held-out")

    prov = json.load(open(f"{workdir}/provenance.json"))
    assert prov["seed"] == 0 and prov["difficulties"]["eval_transfer"] == "w2-o3-q5"
    rec = seed_summary.summarize([workdir])["seeds"][0]
    for role, split in (("base_difficulty", "eval"), ("rl_difficulty", "eval_hard"),
                        ("transfer_difficulty", "eval_transfer")):
        assert rec[role]["before"] == evals["start"][split]["success"]
        assert rec[role]["after"] == evals["final"][split]["success"]

    # A fresh agent from the run's checkpoint (new jitted programs): the first curve point
    # compiles, later points with other weights add no compile, and the points replay the run's.
    agent = ScoreAgent(c, workdir)
    curve_games = game_sets.game_sets(c)["curve"]
    final_params, _ = agent.restore_params()
    with EnvPool(game_sets.env_spec(c, admissible=True), num_workers=1) as pool:
        with CompileCounter() as first_call:
            start_point = held_out.curve_point(agent, out["ref"], pool, curve_games, c, 0)
        with CompileCounter() as later:
            final_point = held_out.curve_point(agent, final_params, pool, curve_games, c, 5)
    assert sum(first_call.by_fn.values()) > 0
    assert sum(later.by_fn.values()) == 0, later.by_fn
    assert start_point == curve[0] and final_point == curve[-1]
