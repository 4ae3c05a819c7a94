"""The report writer: report.md tables, results.json numbers and valid PNG plots."""
import json

import numpy as np
import pytest

from meowjax.eval import passk, report, stats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# 12 games: 5 won by both, 1 lost by RL, 4 won only after RL, 2 lost by both.
PAIR_BEFORE = [1] * 5 + [1] + [0] * 4 + [0] * 2
PAIR_AFTER = [1] * 5 + [0] + [1] * 4 + [0] * 2


def _records(rng, n_tasks=5, n=6, t_max=8):
    return {
        f"t{i}": [
            {"won": w, "success_turn": int(rng.integers(1, t_max + 1)) if w else None}
            for w in rng.uniform(size=n) < rng.uniform()
        ]
        for i in range(n_tasks)
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    rng = np.random.default_rng(0)
    workdir = tmp_path_factory.mktemp("run")
    res_fixed = passk.estimate_pass_at_k_t(_records(rng), [1, 2, 4], [2, 4, 8], n_boot=200)
    res_mix = passk.estimate_pass_at_k_t(_records(rng), [1, 2, 4], [2, 4, 8], n_boot=200)
    sections = [
        report.SuccessTable("Success", [report.SuccessRow("ppo", 7, 10), report.SuccessRow("grpo", 3, 10)]),
        report.PairedGainTable("Gain", [report.PairedGain("rl", PAIR_BEFORE, PAIR_AFTER)]),
        report.MeanTable("Seeds", {"ppo": [0.6, 0.7, 0.8], "rloo": [0.5, 0.5, 0.6]}),
        report.PassKTSection("Pass@(K,T) ppo", res_fixed),
        report.LearningCurves("Learning curves", {"ppo": ([0, 10, 20], [0.1, 0.4, 0.7]), "grpo": ([0, 10, 20], [0.1, 0.2, 0.3])}),
        report.BudgetCurves("Budget", report.budget_curves_from_pass_at_k_t({"fixed": res_fixed, "budgetmix": res_mix})),
        report.TextSection("Notes", "Tiny smoke run."),
    ]
    path = report.write_report(workdir, "Smoke eval", sections)
    return workdir, path, res_fixed, res_mix


def test_report_markdown_has_expected_rows(written):
    workdir, path, res, _ = written
    assert path == workdir / "report.md"
    md = path.read_text()
    assert md.startswith("# Smoke eval\n")
    for heading in ["## Success", "## Gain", "## Seeds", "## Pass@(K,T) ppo", "## Learning curves", "## Budget", "## Notes"]:
        assert heading in md
    low, high = stats.wilson_interval(7, 10)
    assert f"| ppo | 0.700 | [{low:.3f}, {high:.3f}] | 10 |" in md
    assert "| K \\ T | T=2 | T=4 | T=8 |" in md
    cell = f"{res.mean_KT[1, 2]:.3f} [{res.low_KT[1, 2]:.3f}, {res.high_KT[1, 2]:.3f}]"
    assert any(line.startswith("| K=2 |") and line.rstrip(" |").endswith(cell) for line in md.splitlines())
    assert "Mode: `single_run`: one run per episode at T_max" in md and "5 tasks, at least 6 episodes per task" in md
    assert "| variant | T=2 | T=4 | T=8 |" in md
    assert "| ppo | 20 | 0.700 | 0.700 |" in md
    assert "Tiny smoke run." in md
    gain, low, high = stats.paired_difference_interval(PAIR_BEFORE, PAIR_AFTER)
    assert gain == pytest.approx(3 / 12)
    verdict = "gain" if low > 0 else "within the interval"
    assert f"| rl | +0.250 | [{low:.3f}, {high:.3f}] | 4 | 1 | 12 | {verdict} |" in md


def test_results_json_has_same_numbers(written):
    workdir, _, res, res_mix = written
    data = json.loads((workdir / "results.json").read_text())
    assert data["title"] == "Smoke eval"
    by_title = {s["title"]: s for s in data["sections"]}
    assert by_title["Success"]["rows"][0]["success_rate"] == pytest.approx(0.7)
    assert by_title["Success"]["rows"][1]["ci_low"] == pytest.approx(stats.wilson_interval(3, 10)[0])
    pkt = by_title["Pass@(K,T) ppo"]
    assert pkt["type"] == "PassKTSection" and pkt["mode"] == "single_run"
    np.testing.assert_allclose(pkt["mean"], res.mean_KT)
    np.testing.assert_allclose(by_title["Budget"]["curves"]["budgetmix"]["values"], res_mix.mean_KT[0])
    assert by_title["Seeds"]["rows"][0]["mean"] == pytest.approx(0.7)
    row = by_title["Gain"]["rows"][0]
    assert (row["games_gained"], row["games_lost"], row["n_games"]) == (4, 1, 12)
    assert row["ci_low"] == pytest.approx(stats.paired_difference_interval(PAIR_BEFORE, PAIR_AFTER)[1])


def test_plots_are_valid_pngs(written):
    workdir, _, _, _ = written
    pngs = sorted((workdir / "plots").glob("*.png"))
    assert [p.name for p in pngs] == ["budget.png", "learning_curves.png", "pass_at_k_t_ppo.png"]
    md = (workdir / "report.md").read_text()
    for p in pngs:
        data = p.read_bytes()
        assert data[:8] == PNG_SIGNATURE
        assert len(data) > 5_000, f"{p.name} is suspiciously small ({len(data)} bytes)"
        assert f"](plots/{p.name})" in md


def test_nan_becomes_null_and_bad_sections_fail(tmp_path):
    curves = {"a": ([1, 2], [0.5, float("nan")], None, None)}
    report.write_report(tmp_path, "nan", [report.BudgetCurves("b", curves)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["sections"][0]["curves"]["a"]["values"] == [0.5, None]
    with pytest.raises(TypeError, match="unknown report section"):
        report.write_report(tmp_path, "x", [object()])
    with pytest.raises(ValueError, match="no K=3"):
        report.budget_curves_from_pass_at_k_t(
            {"v": passk.estimate_pass_at_k_t({"a": [{"won": True, "success_turn": 1}]}, [1], [1], n_boot=10)}, k=3
        )


def test_pass_at_k_t_comparison_and_curve_extremes(tmp_path):
    rng = np.random.default_rng(1)
    before = passk.estimate_pass_at_k_t(_records(rng), [1, 2], [2, 4], n_boot=50)
    after = passk.estimate_pass_at_k_t(_records(rng), [1, 2], [2, 4], n_boot=50)
    path = report.write_report(tmp_path, "Compare", [
        report.PassKTComparison("Before and after", before, after, ("SFT", "RL")),
        report.LearningCurves("Loss", {"sft": ([1, 2, 3], [3.0, 1.0, 2.0])}, metric="loss",
                              xlabel="SFT step", higher_is_better=False),
        report.LearningCurves("KL", {"kl": ([1, 2], [0.5, 0.2])}, metric="nats",
                              higher_is_better=None)])
    md = path.read_text()
    cell = (f"| K=2, T=4 | {before.mean_KT[1, 1]:.3f} | {after.mean_KT[1, 1]:.3f} | "
            f"{after.mean_KT[1, 1] - before.mean_KT[1, 1]:+.3f} |")
    assert "| cell | SFT | RL | difference |" in md and cell in md
    assert "| sft | 3 | 2.000 | 1.000 |" in md  # best loss = the smallest
    assert "| run | last step | last nats | largest nats |" in md and "| kl | 2 | 0.200 | 0.500 |" in md
    numbers = json.loads((tmp_path / "results.json").read_text())["sections"][0]
    np.testing.assert_allclose(numbers["difference"], after.mean_KT - before.mean_KT)
    assert (tmp_path / numbers["plot"]).read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match="grids differ"):
        report.write_report(tmp_path, "Bad", [report.PassKTComparison(
            "x", before, passk.estimate_pass_at_k_t(_records(rng), [1], [2, 4], n_boot=10))])


def test_moving_mean_matches_a_loop():
    from meowjax.eval import plots
    rng = np.random.default_rng(3)
    y = rng.uniform(size=17)
    for window in (1, 3, 5, 40):
        want = [np.mean(y[max(0, i - window + 1):i + 1]) for i in range(len(y))]
        np.testing.assert_allclose(plots.moving_mean(y, window), want, rtol=1e-12)
    with pytest.raises(ValueError, match="window"):
        plots.moving_mean(y, 0)
