"""Config honesty: every field a config file sets is read on the path that config takes.

Each config's smoke variant runs end to end (`trainers.run.run`; the pod config also through
`experiments.launch_pod`'s setup and compile check) with an access-tracking config, and the test
fails naming any field the file sets (differs from `configs.common.base_config()`) that nothing
read. `pytest -k honesty` selects these checks (configs/default.py rides on the scoring pulse
test of tests/test_trainers.py). Fields that belong to another interface
fail the run instead (e.g. `policy.window` with free text): tested below too.
"""
import pytest

from meowjax.envs.alfworld_gen import TASK_TYPES
from meowjax.trainers import run
from tests import config_tracking, golden

# config run (smoke; "name:a=1" adds switches) -> the config files whose set fields that run must
# read. BudgetMix is the fixed-budget config plus `turns.budget_mix`: one run checks both.
# configs/default.py is checked by the scoring trainer's pulse test (tests/test_trainers.py) and
# configs/study.py by the trained cell of tests/conftest.py, runs the suite makes anyway.
RUNS = {"textworld_budgetmix": ("textworld_fixed_budget", "textworld_budgetmix"),
        "swe_tiny": ("swe_tiny",), "alfworld": ("alfworld",),
        "smollm2_textworld": ("smollm2_textworld",),
        "smollm2_textworld:hard_rl=True": ("smollm2_textworld",),
        "pod_qwen2p5_1p5b": ("pod_qwen2p5_1p5b",)}


@pytest.mark.slow
@pytest.mark.parametrize("run_name", sorted(RUNS))
def test_config_honesty_every_set_field_is_read(run_name, tiny_games_dir, tmp_path):
    name, _, args = run_name.partition(":")
    tracked = config_tracking.track(config_tracking.smoke_config(name, tiny_games_dir, args))
    run.run(tracked, str(tmp_path))
    if name == "pod_qwen2p5_1p5b":   # its pod path too: distributed start-up, compile check
        from experiments import launch_pod
        mesh, _ = launch_pod.setup(tracked)
        launch_pod.run_check(tracked, mesh)
    for checked in RUNS[run_name]:
        config_tracking.assert_honest(checked, tracked, args if checked == name else "")
    if name == "alfworld":
        _assert_success_by_task_type(tmp_path)


def _assert_success_by_task_type(workdir):
    """The ALFWorld run records each held-out game's task type, and its report tables success
    by type: six types in seen and in unseen rooms."""
    import json
    evals = json.load(open(workdir / "evals.json"))
    for split, room in (("eval", "test_seen"), ("eval_hard", "test_unseen")):
        for tag in ("start", "final"):
            types = evals[tag][split]["task_type"]
            assert set(types) == set(evals[tag][split]["per_game"])
            assert sorted(set(types.values())) == sorted(TASK_TYPES)
            assert all(f"/{room}/" in i for i in types)   # the set's own rooms
    report = (workdir / "report.md").read_text()
    assert "## Success by task type" in report
    assert report.count("ALFWorld test_unseen (never trained on): pick_") == 5


@pytest.mark.slow
def test_config_honesty_study(trained_cell):
    """configs/study.py: its smoke cell is trained once per test run (tests/conftest.py)."""
    config_tracking.assert_honest("study", trained_cell.tracked)


@pytest.mark.slow
def test_golden_record_study_cell(trained_cell):
    """The smoke study cell reproduces its frozen record game by game (tests/golden.py)."""
    golden.check(trained_cell.record, "study_cell")


def test_config_tracking_sees_unread_fields():
    """The checker itself: a field set and never read is reported; reading it clears it."""
    c = config_tracking.smoke_config("default", "/tmp/unused")
    tracked = config_tracking.track(c)
    assert "rl.kl_coef" in config_tracking.unread(c, tracked)
    _ = tracked.rl.kl_coef
    dict(tracked.model.overrides)
    assert "rl.kl_coef" not in config_tracking.unread(c, tracked)
    assert not any(f.startswith("model.overrides.") for f in config_tracking.unread(c, tracked))


@pytest.mark.parametrize("field", ["window", "history"])
def test_free_text_interface_refuses_scoring_fields(field, tmp_path):
    from meowjax.trainers.loop import AgentTrainer
    c = config_tracking.smoke_config("swe_tiny", str(tmp_path / "games"))
    c.unlock()
    setattr(c.policy, field, 1 if field == "window" else True)
    c.lock()
    with pytest.raises(ValueError, match="policy.window / policy.history"):
        AgentTrainer(c, str(tmp_path / "run"))


def test_free_text_interface_refuses_a_stated_budget(tmp_path):
    from meowjax.trainers.loop import AgentTrainer
    c = config_tracking.smoke_config("swe_tiny", str(tmp_path / "games"))
    c.unlock()
    c.policy.state_budget = True
    c.lock()
    with pytest.raises(ValueError, match="policy.state_budget is for policy.interface='score'"):
        AgentTrainer(c, str(tmp_path / "run"))
