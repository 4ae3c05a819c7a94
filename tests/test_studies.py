"""The studies: one cell end to end at smoke size (JSON written, a rerun skips it), the
results document from hand-made fixture cells (tests/fixtures/studies) with numbers checked by
hand, and the study statistics."""
import json
import math
import os
import re
import shutil

import numpy as np
import pytest

from meowjax.eval import stats, study_cells, studies_report
from meowjax.eval import study_stats as ss

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "studies")
T_975_1 = 12.706204736174698     # Student's t, 97.5% quantile, 1 degree of freedom (tables)


def test_studies_seed_interval_is_students_t_by_hand():
    mean, low, high = ss.seed_interval([0.75, 0.5])
    half = T_975_1 * np.std([0.75, 0.5], ddof=1) / math.sqrt(2)       # 12.706 * 0.125
    assert (mean, low, high) == pytest.approx((0.625, 0.625 - half, 0.625 + half))
    assert low == pytest.approx(-0.96328, abs=1e-5)
    assert ss.seed_interval([0.4])[0] == 0.4 and math.isnan(ss.seed_interval([0.4])[1])
    assert all(math.isnan(v) for v in ss.seed_interval([]))


def test_studies_verdict_rule_and_curve_area():
    assert ss.verdict(0.01, 0.2, +1) == ss.MATCHES
    assert ss.verdict(0.01, 0.2, -1) == ss.CONTRADICTS
    assert ss.verdict(-0.3, -0.1, -1) == ss.MATCHES
    assert ss.verdict(-0.1, 0.2, +1) == ss.NOISE
    assert ss.verdict(math.nan, math.nan, +1) == ss.NOISE
    assert ss.verdict(0.1, 0.2, +1, complete=False) == ss.MISSING
    # (4 x 0.5 + 4 x 0.625 + 2 x 0.75) / 10
    assert ss.area_under_curve([0, 4, 8, 10], [0.5, 0.5, 0.75, 0.75]) == pytest.approx(0.6)
    assert ss.area_under_curve([0], [0.3]) == 0.3
    assert ss.area_under_curve([0, 5, 10], [0.2, None, 0.4]) == pytest.approx(0.3)


def test_studies_seed_means_average_each_seeds_cells_first():
    recs = [{"seed": 0, "v": 0.2}, {"seed": 0, "v": 0.4}, {"seed": 1, "v": 0.9},
            {"seed": 2, "v": None}, {"seed": 1, "v": 0.5}]
    assert study_cells.seed_means(recs, lambda r: r["v"]) == pytest.approx([0.3, 0.7])


def test_studies_pooled_paired_concatenates_the_seeds_games():
    groups = [([1, 1, 0, 0], [1, 1, 1, 0]), ([1, 0, 1, 0], [1, 0, 1, 0])]
    gain, low, high, n = ss.pooled_paired(groups)
    want = stats.paired_difference_interval([1, 1, 0, 0, 1, 0, 1, 0], [1, 1, 1, 0, 1, 0, 1, 0])
    assert n == 8 and gain == pytest.approx(1 / 8) and (gain, low, high) == pytest.approx(want)


# The arms the fixture cells belong to (the report's sections read each question's arms from
# the cells it is given; these are the earlier schedule's full grids).
FIXTURE_ARMS = {
    "algos": [f"{e} / {r}" for e in ("gae", "turn_gae", "grpo", "rloo", "gigpo")
              for r in ("sparse", "dense", "process")],
    "sft_share": [f"sft {s:g}" for s in (0.0, 0.25, 0.5, 0.75, 1.0)],
    "budget": ["fixed T=12", "budgetmix", "budgetmix stated"],
}


def expected(seeds):
    return {study: [(arm, list(seeds)) for arm in arms] for study, arms in FIXTURE_ARMS.items()}


def row(md: str, first_cell: str) -> list[str]:
    """The cells of the first table row starting with ``| first_cell |``."""
    m = re.search(r"^\| " + re.escape(first_cell) + r" \|(.*)\|$", md, re.M)
    assert m, f"no row {first_cell!r}"
    return [c.strip() for c in m.group(1).split("|")]


def test_studies_report_from_fixture_cells(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(FIXTURES, results)
    doc = tmp_path / "results.md"
    studies_report.write_document(str(results), str(doc), expected([0, 1, 2]))
    md = doc.read_text()
    # Q1: success after RL of gae / sparse over seeds 0, 1 (0.75, 0.5): 0.625 +- 12.706 * 0.125.
    assert row(md, "gae / sparse") == ["2/3", "0.500 [0.500, 0.500]", "0.625 [-0.963, 2.213]",
                                       "0.500 [-0.771, 1.771]"]   # areas 0.6 and 0.4
    assert row(md, "grpo / dense")[0] == "not run yet"
    # Seeds 0-2 expected, 2 run: the finding waits for the third.
    assert row(md, "success: gae / sparse − rloo / sparse")[-1] == "not run yet"
    # Q2: share 0.25 vs 0 on the same 4 games: won [1,1,1,0] vs [1,0,0,0] -> +0.5.
    g, lo, hi = stats.paired_difference_interval([1, 0, 0, 0], [1, 1, 1, 0])
    assert row(md, "sft 0.25")[-1] == f"{g:+.3f} [{lo:.3f}, {hi:.3f}] (n=4)" and g == 0.5
    assert row(md, "sft 0.5")[0] == "not run yet"
    # SFT then RL (share 0.75) vs SFT alone (share 1), per difficulty: id won [1,1,1,1] vs
    # [1,1,1,0] (+0.25), harder [1,1,0,0] vs [0,0,0,0] (+0.5); one seed of three: not run yet.
    for label, a, b, gain in (("success", [1, 1, 1, 1], [1, 1, 1, 0], 0.25),
                              ("success (harder)", [1, 1, 0, 0], [0, 0, 0, 0], 0.5)):
        g, lo, hi = stats.paired_difference_interval(b, a)
        assert row(md, f"{label}: sft 0.75 − sft 1")[-2:] == [
            f"{g:+.3f} [{lo:.3f}, {hi:.3f}] (n=4)", "not run yet"] and g == gain
    # Q3: the fixed arm's grid start -> end (mean of the two tasks), and its heatmaps.
    assert row(md, "K=1")[:2] == ["0.250 → 0.500", "0.500 → 1.000"]
    assert (results / "plots" / "q3_fixed_T_12_unstated_gain.png").exists()
    assert "### budgetmix (not run yet)" in md and "### fixed T=12 (1/3 seeds)" in md
    # Q4: Δ first action over gae / sparse seeds: +0.05, 0.0 -> +0.025 +- 12.706 * 0.025.
    half = T_975_1 * 0.025
    assert row(md, "gae / sparse")[0] == "2/3"
    assert f"+0.025 [{-half + 0.025:.3f}, {half + 0.025:.3f}]" in md
    # Q5: gae's gain on w4-o6-q8 per game, averaged over the two cells that played it: one
    # game gained in one of its two cells (0.5), three never moved -> mean 0.125 over 4 games.
    cells = study_cells.load_cells(str(results))["algos"]["gae / sparse"]
    assert sorted(study_cells.game_mean_gains(list(cells.values()), "harder")) == [0, 0, 0, 0.5]
    g, lo, hi, n = ss.paired_mean_interval([0.5, 0, 0, 0])
    assert f"{g:+.3f} [{lo:.3f}, {hi:.3f}] (n=4)" in row(md, "gae") and g == 0.125
    for name in ("q1_curves_sparse.png", "q4_recovery_bars.png"):
        assert (results / "plots" / name).exists(), name
    assert "](results/plots/q1_curves_sparse.png)" in md
    assert md.count("<!-- prose:") == 6


def test_studies_findings_with_every_seed_and_prose_survives(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(FIXTURES, results)
    doc = tmp_path / "results.md"
    studies_report.write_document(str(results), str(doc), expected([0, 1]))
    md = doc.read_text()
    # gae - rloo per seed: 0.75 - 0.5, 0.5 - 0.5 -> +0.125 +- 12.706 * 0.125: within noise.
    r = row(md, "success: gae / sparse − rloo / sparse")
    g, lo, hi = stats.paired_difference_interval([1, 1, 0, 0, 1, 0, 1, 0], [1, 1, 1, 0, 1, 0, 1, 0])
    assert r == ["PPO ahead of RLOO", "+0.125 [-1.463, 1.713] (n=2 seeds)",
                 f"{g:+.3f} [{lo:.3f}, {hi:.3f}] (n=8)", "within noise"]
    doc.write_text(md.replace("<!-- prose:q1 -->\n_Prose to be written once the cells have run: "
                              "what the numbers show._", "<!-- prose:q1 -->\nPPO and RLOO tie."))
    studies_report.write_document(str(results), str(doc), expected([0, 1]))
    assert "<!-- prose:q1 -->\nPPO and RLOO tie.\n<!-- /prose:q1 -->" in doc.read_text()


def test_studies_report_names_a_broken_cell_file(tmp_path):
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json is not a study cell record"):
        studies_report.load_cells(str(tmp_path))


@pytest.mark.slow
def test_studies_one_smoke_cell_end_to_end_then_skipped(tiny_games_dir, tmp_path, monkeypatch):
    """BudgetMix with the budget stated, at smoke size, through the runner: training, the three
    held-out difficulties, the learning curve and both Pass@(K,T) modes for the start and end
    policies, one JSON; rerun skips."""
    from experiments import studies
    arm = "budgetmix stated"
    knobs = dict(studies.STUDIES["budget"].arms)[arm]
    smoke = studies.Study("smoke", ((arm, knobs),), grids=True)
    monkeypatch.setitem(studies.STUDIES, "smoke", smoke)
    kw = dict(smoke=True, workdir=str(tmp_path / "runs"), results_dir=str(tmp_path / "results"),
              games_dir=tiny_games_dir)
    path = studies.run_cell("smoke", arm, knobs, 0, **kw)
    assert path == str(tmp_path / "results" / "smoke" / "budgetmix-stated-s0.json")
    rec = json.load(open(path))
    assert rec["schema"] == studies.SCHEMA == 2
    assert rec["config"]["policy"]["state_budget"] is True
    assert rec["config"]["turns"]["budget_mix"] == [2, 4, 6]   # smoke: capped at 6 turns
    assert re.fullmatch(r"[0-9a-f]{40}", rec["commit"]) and rec["wall_s"]["total"] > 0
    roles = {s["role"]: (name, s) for name, s in rec["splits"].items()}
    assert sorted(roles) == ["hard", "harder", "id"] and roles["harder"][0] == "w2-o3-q5"
    for name, s in roles.values():
        assert len(s["start"]["per_game"]) == s["start"]["n"] == len(s["end"]["per_game"]) > 0
    c = rec["config"]
    for mode, want in (("unstated", "single_run"), ("stated", "per_budget")):
        for tag in ("start", "end"):
            g = rec["passkt"][mode][tag]
            assert g["mode"] == want and g["ks"] == [1, 2] and g["ts"] == [2, 4, 6]
            assert len(g["per_task"]) == c["games"]["num_eval_hard"]   # the sampled split
            np.testing.assert_allclose(np.mean(list(g["per_task"].values()), 0), g["mean"])
    curve = rec["curve"]
    assert curve["iteration"][0] == 0 and curve["iteration"][-1] == rec["rl_iters"] > 0
    assert len(curve["curve"]) == len(curve["iteration"]) and curve["curve_games"] == 2
    assert len(curve["rollout_success"]) == rec["rl_iters"]
    assert rec["diagnostics"]["end"]["episodes"] == c["games"]["num_eval_hard"] * 2
    assert studies.run_cell("smoke", arm, knobs, 0, **kw) is None          # done: skipped


def test_studies_learning_curve_takes_the_trainers_points_and_each_iteration_once(tmp_path):
    """RL iterations 1-4 at steps 4-7, iteration 3 written twice, as a resumed run does (the
    later record counts); curve points at iterations 0, 2, 4, the point of 2 twice (a SIGTERM
    cut it: the later counts)."""
    from experiments import studies
    lines = [{"step": s, "sft/loss": 1.0} for s in (1, 2, 3)]
    lines += [{"step": 3 + i, "rollout/success": 0.1 * i} for i in (1, 2, 3)]
    lines += [{"step": 6, "rollout/success": 0.35}, {"step": 7, "rollout/success": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    point = lambda i, s: {"iteration": i, "success": s, "n": 4}   # noqa: E731
    evals = {"curve": [point(0, 0.25), point(2, 0.0), point(2, 0.5), point(4, 0.75)]}
    curve = studies.learning_curve(str(tmp_path), evals, 4)
    assert curve["iteration"] == [0, 2, 4] and curve["curve"] == [0.25, 0.5, 0.75]
    assert curve["curve_games"] == 4 and curve["rl_iters"] == 4
    assert curve["rollout_success"] == pytest.approx([0.1, 0.2, 0.35, 0.5])
    # (2 x 0.375 + 2 x 0.625) / 4
    assert study_cells.auc({"curve": curve}) == pytest.approx(0.5)


def _ref_params(c, workdir, training=False):
    """The params RL started from (the checkpoint's ``ref``) of the run in ``workdir``, restored
    as an evaluation (or, ``training``, as the training run that resumes there)."""
    import jax
    from meowjax.trainers.registry import trainer_class
    trainer = trainer_class(c.policy.interface)(c, workdir, training=training)
    try:
        _, ref, meta = trainer.restore_state()
        return jax.device_get(ref), meta
    finally:
        trainer.ckpt.close()
        if training:
            trainer.writer.close()


@pytest.mark.slow
def test_studies_cells_of_a_seed_share_one_sft_run(tiny_games_dir, tmp_path, monkeypatch):
    """Two smoke cells of seed 0 that differ in estimator: the SFT runs once (one folder under
    _sft/, no SFT step in either cell's metrics), both start RL from its params (equal start
    evaluations, equal reference params), which are those of the same cell run with its own
    SFT; a config whose SFT differs fails on that start."""
    import jax
    from configs import study as study_config
    from experiments import studies
    from meowjax.trainers import shared_sft
    arms = (("rloo", (("estimator", "rloo"),)), ("grpo", (("estimator", "grpo"),)))
    monkeypatch.setitem(studies.STUDIES, "pair", studies.Study("pair", arms))
    monkeypatch.setitem(studies.STUDIES, "own", studies.Study("own", arms[:1], shared_sft=False))
    runs, results = tmp_path / "runs", tmp_path / "results"
    paths = studies.run_study("pair", seeds=[0], smoke=True, workdir=str(runs),
                              results_dir=str(results), games_dir=tiny_games_dir)
    own = studies.run_study("own", seeds=[0], smoke=True, workdir=str(runs),
                            results_dir=str(results), games_dir=tiny_games_dir)
    assert len(paths) == 2 and len(own) == 1
    assert json.load(open(own[0]))["sft"] == {"shared": False, "key": json.load(
        open(paths[0]))["sft"]["key"], "folder": str(runs / "own" / "rloo-s0")}
    recs = [json.load(open(p)) for p in paths]
    keys = os.listdir(runs / studies.SFT_DIR)
    assert len(keys) == 1 and [r["sft"]["key"] for r in recs] == keys * 2
    assert recs[0]["sft"]["wall_s"] > 0 and recs[1]["sft"]["wall_s"] == 0     # run once
    assert all(r["sft"]["shared"] and r["sft"]["folder"] == str(runs / "_sft" / keys[0])
               for r in recs)
    lines = lambda d: [json.loads(x) for x in open(d / "metrics.jsonl")]  # noqa: E731
    sft_folder = runs / "_sft" / keys[0]
    assert sum("sft/loss" in r for r in lines(sft_folder)) == recs[0]["sft"]["sft_steps"] > 0
    for cell in ("rloo-s0", "grpo-s0"):
        assert not any("sft/loss" in r for r in lines(runs / "pair" / cell))
    starts = [next(s["start"] for s in r["splits"].values() if s["role"] == "id")
              for r in recs + [json.load(open(own[0]))]]
    assert starts[0] == starts[1] == starts[2]
    ends = [next(s["end"] for s in r["splits"].values() if s["role"] == "id")
            for r in (recs[0], json.load(open(own[0])))]
    assert ends[0] == ends[1]     # rloo after RL: the shared start changes nothing
    configs = [study_config.get_config(studies.config_arg(k, 0, True)) for _, k in arms]
    for c in configs:
        c.unlock()
        c.games.cache_dir = tiny_games_dir
        c.lock()
    sft_state, _ = _ref_params(configs[0], str(sft_folder))
    for c, (arm, _) in zip(configs, arms):
        ref, meta = _ref_params(c, str(runs / "pair" / f"{arm}-s0"))
        assert meta["sft_key"] == keys[0] and meta["phase"] == "done"
        jax.tree.map(np.testing.assert_array_equal, ref, sft_state)
    ref, meta = _ref_params(configs[0], str(runs / "own" / "rloo-s0"))
    assert "sft_key" not in meta
    jax.tree.map(np.testing.assert_array_equal, ref, sft_state)     # the same SFT result
    # Another SFT (learning rate): seeding refuses, and a trainer resuming the seeded start fails.
    other = configs[0].copy_and_resolve_references()
    other.sft.lr = other.sft.lr * 2
    rec = shared_sft.read_record(str(sft_folder))
    with pytest.raises(ValueError, match="this config's SFT key is"):
        shared_sft.seed_workdir(other, rec, str(tmp_path / "fresh"))
    shared_sft.seed_workdir(configs[0], rec, str(tmp_path / "seeded"))
    with pytest.raises(ValueError, match=r"starts from a shared SFT of key .*sft\.lr"):
        _ref_params(other, str(tmp_path / "seeded"), training=True)
    # The record names the folder it was read from: a moved shared SFT (or one written from
    # another working directory) still seeds.
    moved = tmp_path / "moved_sft"
    shutil.copytree(sft_folder, moved)
    shutil.rmtree(sft_folder)
    rec = shared_sft.read_record(str(moved))
    assert rec["folder"] == str(moved)
    assert shared_sft.seed_workdir(configs[0], rec, str(tmp_path / "seeded_from_moved"))
    assert shared_sft.has_checkpoint(str(tmp_path / "seeded_from_moved"))


def test_studies_two_stage_bootstrap_resamples_seeds_then_games():
    # Two seeds whose games all agree: only the seed stage varies, theta* in {0, 0.5, 1}.
    mean, low, high = ss.two_stage_bootstrap([[1.0, 1.0, 1.0], [0.0, 0.0]], num=2000)
    assert mean == 0.5 and (low, high) == (0.0, 1.0)
    # One seed: a plain bootstrap of its games; the interval of a 0/1 mean of 0.5 over 100
    # games is about 0.5 +- 1.96 * 0.05.
    mean, low, high = ss.two_stage_bootstrap([[1.0, 0.0] * 50], num=4000)
    assert mean == 0.5 and low == pytest.approx(0.40, abs=0.02) and high == pytest.approx(0.60, abs=0.02)
    # Identical seeds: the seed stage adds nothing, the width is the games' alone (pooled
    # 300 games: half-width ~ 1.96 * 0.5 / sqrt(300) = 0.057); wider than the pooled pairs'
    # interval once the seeds differ.
    same = [[1.0, 0.0] * 50] * 3
    _, low, high = ss.two_stage_bootstrap(same)
    assert (high - low) / 2 == pytest.approx(0.057, abs=0.01)
    apart = [[1.0] * 60 + [0.0] * 40, [1.0] * 40 + [0.0] * 60, [1.0] * 50 + [0.0] * 50]
    _, low2, high2 = ss.two_stage_bootstrap(apart)
    assert high2 - low2 > high - low + 0.05
    assert all(math.isnan(v) for v in ss.two_stage_bootstrap([[], []]))


def test_studies_minimal_detectable_effect_by_hand():
    # 5 seeds, s = 0.05: t(0.975, 4) = 2.7764, t(0.8, 4) = 0.9410 -> 3.7174 * 0.05 / sqrt(5).
    vals = [0.10, 0.10 + 0.05 * math.sqrt(2), 0.10 - 0.05 * math.sqrt(2), 0.10, 0.10]
    assert np.std(vals, ddof=1) == pytest.approx(0.05)
    assert ss.minimal_detectable_effect(vals) == pytest.approx(3.7174 * 0.05 / math.sqrt(5),
                                                               abs=1e-4)
    assert math.isnan(ss.minimal_detectable_effect([0.1]))
    # The plan: 5 seeds x 200 games, between-seed SD 0.02, per-game SD 0.5:
    # s = sqrt(0.0004 + 0.25 / 200) = 0.040620 -> 3.7174 * 0.040620 / sqrt(5) = 0.06753.
    assert ss.design_mde(0.02, 0.5, 5, 200) == pytest.approx(0.06753, abs=1e-4)
    # More seeds buy more than more games once the between-seed SD dominates.
    assert ss.design_mde(0.05, 0.5, 10, 100) < ss.design_mde(0.05, 0.5, 5, 400)
    with pytest.raises(ValueError, match=">= 2 seeds"):
        ss.design_mde(0.02, 0.5, 1, 200)
