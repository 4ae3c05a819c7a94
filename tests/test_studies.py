"""The studies: statistics checked by hand, study definitions, the report from hand-made cells
with its numbers computed by hand, the plan on the real definitions, and one cell (a study
defined here) end to end at smoke size."""
import json
import math
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

from meowjax.eval import study_cells, study_spec, studies_report
from meowjax.eval import study_stats as ss
from meowjax.eval.study_spec import Claim, Comparison, Study

T_975_1 = 12.706204736174698     # Student's t, 97.5% quantile, 1 degree of freedom (tables)
T_80_1 = 1.3763819204711736      # 80% quantile, 1 degree of freedom


def test_studies_seed_interval_is_students_t_by_hand():
    mean, low, high = ss.seed_interval([0.75, 0.5])
    half = T_975_1 * np.std([0.75, 0.5], ddof=1) / math.sqrt(2)       # 12.706 * 0.125
    assert (mean, low, high) == pytest.approx((0.625, 0.625 - half, 0.625 + half))
    assert low == pytest.approx(-0.96328, abs=1e-5)
    assert ss.seed_interval([0.4])[0] == 0.4 and math.isnan(ss.seed_interval([0.4])[1])
    assert all(math.isnan(v) for v in ss.seed_interval([]))


def test_studies_curve_area():
    # (4 x 0.5 + 4 x 0.625 + 2 x 0.75) / 10
    assert ss.area_under_curve([0, 4, 8, 10], [0.5, 0.5, 0.75, 0.75]) == pytest.approx(0.6)
    assert ss.area_under_curve([0], [0.3]) == 0.3
    assert ss.area_under_curve([0, 5, 10], [0.2, None, 0.4]) == pytest.approx(0.3)


def test_studies_definitions_refuse_unknown_arms_and_metrics():
    arms = study_spec.arms([("A", {"estimator": "rloo"}), ("B", {"estimator": "grpo"})])
    with pytest.raises(ValueError, match=r"names arms \['C'\]"):
        Study("s", "q", arms, comparisons=(Comparison("success", "A", "C"),))
    with pytest.raises(ValueError, match="choose one of"):
        Comparison("speed", "A", "B")
    with pytest.raises(ValueError, match="write pass@K,T"):
        Comparison("pass@1", "A", "B")
    with pytest.raises(ValueError, match="compares two arms"):
        Comparison("auc", "A")


def _split(role, start, end):
    ids = [f"g{i}" for i in range(len(start))]
    rec = lambda won: {"success": float(np.mean(won)), "n": len(won),   # noqa: E731
                       "per_game": dict(zip(ids, map(bool, won)))}
    return {"role": role, "start": rec(start), "end": rec(end)}


def _cell(study, arm, seed, end_hard, curve, start_hard=None, recovery=(0.2, 0.2)):
    start_hard = start_hard or [0] * len(end_hard)
    return {"schema": 2, "study": study, "arm": arm, "seed": seed, "commit": "f" * 40,
            "wall_s": {"total": 600.0}, "machine": {"cpus": 2, "loadavg_start": [2.0],
                                                    "loadavg_end": [2.5]},
            "config": {"budget": {"total_episodes": 3040}, "games": {"num_eval_hard": 8}},
            "splits": {"w2-o3-q4": _split("id", [1] * 4, [1] * 4),
                       "w3-o5-q6": _split("hard", start_hard, end_hard),
                       "w4-o6-q8": _split("harder", [0] * 4, [0] * 4)},
            "curve": {"iteration": [0, 5, 10], "curve": curve, "curve_games": 8,
                      "rl_iters": 10, "rollout_success": [0.5] * 10},
            "diagnostics": {"start": {"recovery_no_progress": recovery[0]},
                            "end": {"recovery_no_progress": recovery[1]}}}


TOY = Study("toy", "Q0 a toy question", study_spec.arms(
    [("A", {"estimator": "rloo"}), ("B", {"estimator": "grpo"}), ("C", {"estimator": "gigpo"})]),
    comparisons=(Comparison("success", "A", "B", "hard", Claim("A beats B", "a test", +1)),
                 Comparison("success", "A", None, "hard", Claim("RL helps", "a test", None)),
                 Comparison("success", "A", "C", "hard", Claim("A beats C", "a test", +1)),
                 Comparison("auc", "A", "B", "hard", None),
                 Comparison("diag:recovery_no_progress", "A", None, "hard", None)),
    seeds=(0, 1))


def _write_toy(results):
    """Seed 0 / 1, 8 games at the RL difficulty, every arm at 0 before RL. A ends on 6 / 7 of
    them, B on 3 / 5, C on none (RL inert). A - B per game: 3 / 2 of 8 -> 0.375, 0.25."""
    ends = {("A", 0): [1, 1, 1, 1, 1, 1, 0, 0], ("A", 1): [1, 1, 1, 1, 1, 1, 1, 0],
            ("B", 0): [1, 1, 1, 0, 0, 0, 0, 0], ("B", 1): [1, 1, 1, 1, 1, 0, 0, 0],
            ("C", 0): [0] * 8, ("C", 1): [0] * 8}
    curves = {"A": [0.2, 0.4, 0.6], "B": [0.2, 0.3, 0.4], "C": [0.2, 0.2, 0.2]}
    (results / "toy").mkdir(parents=True)
    for (arm, seed), end in ends.items():
        curve = [0.2, 0.2, 0.2] if (arm, seed) == ("B", 1) else curves[arm]
        rec = _cell("toy", arm, seed, end, curve, recovery=(0.2, 0.3 if seed == 0 else 0.4))
        (results / "toy" / f"{arm}-s{seed}.json").write_text(json.dumps(rec))


def row(md: str, first_cell: str) -> list[str]:
    """The cells of the first table row starting with ``| first_cell |``."""
    m = re.search(r"^\| " + re.escape(first_cell) + r" \|(.*)\|$", md, re.M)
    assert m, f"no row {first_cell!r}"
    return [c.strip() for c in m.group(1).split("|")]


def test_studies_report_from_hand_made_cells(tmp_path):
    results = tmp_path / "results"
    _write_toy(results)
    doc = tmp_path / "results.md"
    studies_report.write_document(str(results), str(doc), [TOY])
    md = doc.read_text()
    # Arms: A's success at the RL difficulty 0 -> (0.75 + 0.875) / 2; RL moved A, not C.
    a = row(md, "A")
    assert a[:2] == ["2/2", "1.000 → 1.000"] and a[2] == "0.000 → 0.812"
    assert a[5] == "yes" and row(md, "C")[5] == study_spec.INERT
    # A - B: per seed 0.375, 0.25 -> mean 0.3125, sd 0.0884: t half-width 12.706 * 0.0884 /
    # sqrt(2) = 0.7941; MDE (12.706 + 1.376) * 0.0884 / sqrt(2) = 0.8802; the t interval holds
    # 0, so the claim is neither met nor refuted.
    r = row(md, "success (hard): A − B")
    sd = np.std([0.375, 0.25], ddof=1)
    half, mde = T_975_1 * sd / math.sqrt(2), (T_975_1 + T_80_1) * sd / math.sqrt(2)
    assert r[0] == "“A beats B” (a test)"
    assert r[1] == f"+0.312 [{0.3125 - half:.3f}, {0.3125 + half:.3f}] (n=2 seeds)"
    assert r[3] == f"{mde:.3f}" == "0.880" and r[4] == "inconclusive at MDE 0.880"
    lo, hi = (float(x) for x in re.findall(r"-?\d\.\d+", r[2])[1:])
    assert 0 < lo < 0.3125 < hi          # the two-stage interval, games resampled: above 0
    # A's own RL gain: 0.75, 0.875 -> t [0.018, 1.607], both intervals above 0, no direction.
    r = row(md, "success (hard): A, after − before RL")
    assert r[0].endswith("no direction: the paper's text is not available)")
    assert r[1] == "+0.812 [0.018, 1.607] (n=2 seeds)" and r[4] == "above zero"
    assert row(md, "success (hard): A − C")[4] == study_spec.INERT
    # Curve areas: A 0.4 both seeds; B 0.3 and 0.2 -> per seed 0.1, 0.2: no per-game interval.
    r = row(md, "auc: A − B")
    half = T_975_1 * np.std([0.1, 0.2], ddof=1) / math.sqrt(2)
    assert r[1] == f"+0.150 [{0.15 - half:.3f}, {0.15 + half:.3f}] (n=2 seeds)" and r[2] == "n/a"
    # Recovery change: 0.1 and 0.2 -> mean 0.15, t holds 0.
    assert row(md, "diag:recovery_no_progress: A, after − before RL")[1].startswith("+0.150 [")
    assert "this table makes 5 comparisons" in md
    assert (results / "plots" / "toy_curves.png").exists()
    assert "](results/plots/toy_curves.png)" in md
    # Prose survives regeneration.
    doc.write_text(md.replace("<!-- prose:toy -->\n_Prose to be written once the cells have "
                              "run: what the numbers show._", "<!-- prose:toy -->\nA wins."))
    studies_report.write_document(str(results), str(doc), [TOY])
    assert "<!-- prose:toy -->\nA wins.\n<!-- /prose:toy -->" in doc.read_text()


def test_studies_report_with_a_missing_seed_and_a_broken_cell(tmp_path):
    results = tmp_path / "results"
    _write_toy(results)
    os.remove(results / "toy" / "B-s1.json")
    doc = tmp_path / "results.md"
    studies_report.write_document(str(results), str(doc), [TOY])
    md = doc.read_text()
    assert row(md, "B")[0] == "1/2" and row(md, "success (hard): A − B")[4] == "not run yet"
    assert row(md, "toy")[0] == "5/6"          # the scale table: cells done
    (results / "toy" / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json is not a study cell record"):
        studies_report.write_document(str(results), str(doc), [TOY])


def test_studies_words_readme_findings_and_prose_numbers_come_from_the_tables(tmp_path):
    """The README's findings are templated from the same numbers as the tables; prose quoting
    a number no table prints stops the report, naming it, and writes nothing."""
    from meowjax.eval import study_words
    results = tmp_path / "results"
    _write_toy(results)
    doc, readme = tmp_path / "results.md", tmp_path / "README.md"
    readme.write_text(f"# x\n\n{study_words.BEGIN}\nold\n{study_words.END}\n\ntail\n")
    studies_report.write_document(str(results), str(doc), [TOY], readme=str(readme))
    md, text = doc.read_text(), readme.read_text()
    line = text.split(study_words.BEGIN)[1].split(study_words.END)[0]
    assert "old" not in line and text.endswith("\n\ntail\n") and "(results.md)" in line
    # A's RL gain (+0.812, its two-stage interval) is the arms table's, and A's "above zero"
    # comparison is listed; A - B is inconclusive, as in the comparisons table.
    flat = " ".join(line.split())
    assert f"A {row(md, 'A')[4]}" in flat and "**Q0 a toy question** (`toy`, 3 of 3" in flat
    # Between arms: A - B inconclusive (success and curve area), A - C RL inert; within A: the
    # RL gain above zero, the recovery change inconclusive (the comparisons table's verdicts).
    assert row(md, "success (hard): A − B")[4].startswith("inconclusive")
    assert "Between arms: 2 inconclusive, 1 RL inert here." in flat
    assert "After − before RL: 1 above zero, 1 inconclusive (conclusive: success (hard))" in flat
    assert study_words.numbers(line) <= study_words.numbers(md)
    # Prose: a number the tables print passes; one they do not stops the report.
    good = md.replace("<!-- prose:toy -->\n_Prose to be written once the cells have run: what "
                      "the numbers show._", "<!-- prose:toy -->\nA gains +0.812.")
    doc.write_text(good)
    studies_report.write_document(str(results), str(doc), [TOY])
    doc.write_text(good.replace("A gains +0.812.", "A gains +0.81 and 0.777."))
    with pytest.raises(ValueError, match=r"prose:toy quotes 0.777, 0.81.*nothing was written"):
        studies_report.write_document(str(results), str(doc), [TOY])
    assert "A gains +0.81 and 0.777." in doc.read_text()            # left as it was
    assert study_words.numbers("x +0.131, -0.006, 1.5x v2.0 1.2.3 and 0.2.") == {
        "0.131", "-0.006", "0.2"}
    assert not study_words.write_findings(str(doc.parent / "results.md"), ["x"])   # no markers


def test_studies_readme_findings_are_what_the_report_writes_from_the_committed_cells(tmp_path):
    """The README's findings list is the report's, from docs/results/ as committed: rerun
    `python -m experiments.studies --report` after adding cells."""
    from experiments import studies
    from meowjax.eval import study_cells, study_words
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    copy = tmp_path / "README.md"
    shutil.copy(readme, copy)
    runner = studies.runner
    loaded = study_cells.load_cells(str(readme.parent / runner.RESULTS_DIR),
                                    list(studies.STUDIES))
    assert study_words.write_findings(str(copy), study_words.findings(loaded,
                                                                      runner.with_seeds()),
                                      runner.DOCUMENT)
    assert copy.read_text() == readme.read_text(), "rerun: python -m experiments.studies --report"


def test_studies_plan_on_the_real_definitions():
    from experiments import studies
    assert {"algos", "budget", "sft_share"} <= set(studies.STUDIES)
    text = studies.plan(sorted(studies.STUDIES))
    # SDs of the default run's five test seeds at the RL difficulty: a per-game SD s and the
    # seeds' spread of the gain beyond the games' share, b^2 = max(0, var(gains) - s^2 / 200);
    # 5 seeds x 200 games -> (2.776 + 0.941) * sqrt(b^2 + s^2 / 200) / sqrt(5).
    rec = json.load(open(studies.runner.SUMMARY))
    sd = rec["mean_gain"]["rl_difficulty"]["game_sd"]
    gains = [s["rl_difficulty"]["gain"] for s in rec["seeds"]]
    mean = sum(gains) / len(gains)
    b2 = max(0.0, sum((g - mean) ** 2 for g in gains) / (len(gains) - 1) - sd ** 2 / 200)
    assert f"per game {sd:.3f}, between seeds {math.sqrt(b2):.3f}" in text
    mde = 3.7174 * math.sqrt(b2 + sd ** 2 / 200) / math.sqrt(5)
    assert f"{mde:.3f} (5 seeds x 200 games)" in text
    assert "algos: Q1" in text and f"{len(studies.STUDIES['algos'].comparisons)} comparisons" in text


@pytest.mark.slow
def test_studies_one_smoke_cell_end_to_end_then_skipped(tiny_games_dir, tmp_path, monkeypatch):
    """BudgetMix with the budget stated, at smoke size, through the runner: training, the three
    held-out difficulties, the learning curve and both Pass@(K,T) modes for the start and end
    policies, one JSON; rerun skips."""
    from experiments import studies
    arm = "budgetmix stated"
    knobs = dict(studies.STUDIES["budget"].arms)[arm]
    smoke = Study("smoke", "Q smoke: a study defined here", ((arm, knobs),),
                  comparisons=(Comparison("pass@1,4", arm, None, "hard"),
                               Comparison("success", arm, None, "harder"),
                               Comparison("probe", arm, None, "hard")),
                  grids=True, seeds=(0,), probe=(1, "inventory"))
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
    for tag in ("start", "end"):   # the forced-action probe on the sampled games
        p = rec["probe"][tag]
        assert (p["turn"], p["command"]) == (1, "inventory")
        assert len(p["per_game"]) == c["games"]["num_eval_hard"] == p["n"]
    assert studies.run_cell("smoke", arm, knobs, 0, **kw) is None          # done: skipped
    # The report reads the study's definition and its one cell.
    doc = tmp_path / "results.md"
    studies_report.write_document(str(tmp_path / "results"), str(doc), [smoke])
    md = doc.read_text()
    assert "## Q smoke: a study defined here (study `smoke`)" in md
    assert row(md, arm)[0] == "1/1" and "Pass@(1,4)" in md
    r = row(md, f"pass@1,4 (hard): {arm}, after − before RL")
    assert r[1].endswith("(n=1 seeds)") and r[4] == "inconclusive at MDE n/a"
    assert row(md, f"probe (hard): {arm}, after − before RL")[1].endswith("(n=1 seeds)")


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
    as an evaluation (an agent alone) or, ``training``, as the training run that resumes there."""
    import jax
    if not training:
        from meowjax.agents.registry import agent_class
        ref, meta = agent_class(c.policy.interface)(c, workdir).restore_params(ref=True)
        return jax.device_get(ref), meta
    from meowjax.trainers.loop import AgentTrainer
    trainer = AgentTrainer(c, workdir)
    try:
        _, ref, meta = trainer.restore_state()
        return jax.device_get(ref), meta
    finally:
        trainer.ckpt.close()
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
    monkeypatch.setitem(studies.STUDIES, "pair", Study("pair", "two arms", arms))
    monkeypatch.setitem(studies.STUDIES, "own", Study("own", "one arm", arms[:1],
                                                      shared_sft=False))
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
