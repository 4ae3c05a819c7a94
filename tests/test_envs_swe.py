"""SWE env: generated tasks are valid, the expert wins, rewards match hand-computed values."""
import ast
import json
import pathlib
import pickle
import shutil
import textwrap

import pytest

from meowjax.envs.base import EnvError, Task, TextEnv
from meowjax.envs.registry import EnvSpec, make_env
from meowjax.envs.swe import mutate, sandbox, spec, swegym, tasks
from meowjax.envs.swe.env import SweEnv

SEEDS = {1: (0, 1), 2: (0, 1), 3: (0,)}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("swe_tasks")
    made = {tier: tasks.generate_tasks(out, tier, "train", len(seeds))
            for tier, seeds in SEEDS.items()}
    return out, made


def test_generated_tasks_are_valid(generated, tmp_path):
    out, made = generated
    for tier, tier_tasks in made.items():
        for task in tier_tasks:
            st = spec.read_task(task)
            n_modules, n_buggy, fix_lines = tasks.TIERS[tier]
            assert len(st.test_files) == n_modules and st.fail_to_pass and st.pass_to_pass
            before = sandbox.run_tests(st.repo_dir, list(st.all_tests))
            assert set(before.not_passed) == set(st.fail_to_pass), task.task_id
            assert set(before.passed) == set(st.pass_to_pass), task.task_id
            edits = st.edits()
            assert len({e.path for e in edits}) == n_buggy
            fixed_dir = tmp_path / task.task_id.replace("/", "_")
            shutil.copytree(st.repo_dir, fixed_dir)
            for e in edits:
                p = fixed_dir / e.path
                p.write_text(spec.apply_edit(p.read_text(), e))
            for path in {e.path for e in edits}:
                buggy, fixed = (pathlib.Path(d, path).read_text() for d in (st.repo_dir, fixed_dir))
                assert tasks._fix_size(buggy, fixed) == fix_lines, (task.task_id, path)
            after = sandbox.run_tests(fixed_dir, list(st.all_tests))
            assert after.not_passed == [], task.task_id
            assert st.problem_statement.count("tests/test_") >= min(len(st.fail_to_pass), 1)


def test_generation_is_deterministic_and_split_by_seed(generated, tmp_path):
    out, made = generated
    again = tasks.generate_task(tmp_path, 2, 1)
    first = made[2][1]
    assert again.task_id == first.task_id == "swe/t2/train/1"
    assert (pathlib.Path(again.path, "task.json").read_text()
            == pathlib.Path(first.path, "task.json").read_text())
    for f in pathlib.Path(first.path, "repo").rglob("*.py"):
        rel = f.relative_to(first.path)
        assert pathlib.Path(again.path, rel).read_text() == f.read_text()
    assert tasks.split_of_seed(5) == "train" and tasks.split_of_seed(300_001) == "test"
    with pytest.raises(EnvError, match="outside split"):
        tasks.generate_task(tmp_path, 1, 5, split="test")
    tasks.main(["--out", str(out), "--tier", "1", "--num", "2"])  # reuses the folders
    listed = tasks.load_tasks(out, split="train", tier=1)
    assert [t.task_id for t in listed] == ["swe/t1/train/0", "swe/t1/train/1"]
    assert len(tasks.load_tasks(out)) == sum(len(s) for s in SEEDS.values())
    with pytest.raises(EnvError, match="generate tasks first"):
        tasks.load_tasks(tmp_path / "nothing")


@pytest.mark.parametrize("mode", ["sparse", "ratio", "dense"])
def test_expert_trajectory_wins(generated, mode):
    _, made = generated
    env = make_env(EnvSpec("swe", {"reward": mode}))
    assert isinstance(env, TextEnv)
    for task in (made[1][0], made[3][0]):
        reset = env.reset(task, max_turns=10)
        assert reset.info["system_prompt"] == SweEnv.SYSTEM_PROMPT
        st = spec.read_task(task)
        assert reset.walkthrough == spec.expert_actions(st) == spec.expert_actions(task)
        assert reset.walkthrough[0].startswith("cat ")
        assert reset.walkthrough[-2:] == ["test", "submit"]
        total = 0.0
        for action in reset.walkthrough:
            step = env.step(action)
            assert not step.info["invalid"], step.observation
            total += step.reward
        assert step.done and step.won and not step.info["truncated"]
        assert step.info["tests_passed"] == step.info["tests_total"] == len(st.all_tests)
        expected = 1.0 - len(st.pass_to_pass) / len(st.all_tests) if mode == "dense" else 1.0
        assert total == pytest.approx(expected)
    env.close()


def _handmade(tmp_path) -> Task:
    """Two broken functions (2 FAIL_TO_PASS tests each) and one correct one (2 PASS_TO_PASS)."""
    repo = tmp_path / "hand" / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(textwrap.dedent("""\
        def add(a, b):
            return a - b

        def mul(a, b):
            return a + b

        def neg(a):
            return -a
        """))
    (repo / "tests" / "test_calc.py").write_text(textwrap.dedent("""\
        from calc import add, mul, neg
        def test_add_1():
            assert add(1, 2) == 3
        def test_add_2():
            assert add(0, 5) == 5
        def test_mul_1():
            assert mul(2, 3) == 6
        def test_mul_2():
            assert mul(4, 0) == 0
        def test_neg_1():
            assert neg(2) == -2
        def test_neg_2():
            assert neg(0) == 0
        """))
    ids = lambda *n: [f"tests/test_calc.py::test_{x}" for x in n]  # noqa: E731
    record = {"instance_id": "hand/calc", "problem_statement": "add and mul are wrong.",
              "FAIL_TO_PASS": ids("add_1", "add_2", "mul_1", "mul_2"),
              "PASS_TO_PASS": ids("neg_1", "neg_2"), "test_files": ["tests/test_calc.py"],
              "patch": spec.make_patch({"calc.py": (repo / "calc.py").read_text()}, {
                  "calc.py": (repo / "calc.py").read_text().replace("a - b", "a + b", 1)
                  .replace("return a + b\n\ndef neg", "return a * b\n\ndef neg")})}
    (repo.parent / "task.json").write_text(json.dumps(record))
    return Task("hand/calc", str(repo.parent), "swe")


FIX_ADD = "replace calc.py\n<<<\n    return a - b\n===\n    return a + b\n>>>"


@pytest.mark.parametrize("mode,rewards", [
    ("sparse", [0.0, 0.0, 0.0]),
    ("ratio", [0.0, 0.0, 4 / 6]),
    ("dense", [0.0, 4 / 6 - 2 / 6, 0.0]),
])
def test_half_fixed_rewards(tmp_path, mode, rewards):
    env = SweEnv(reward=mode)
    reset = env.reset(_handmade(tmp_path), max_turns=5)
    assert reset.info["score"] == pytest.approx(2 / 6)
    steps = [env.step(a) for a in (FIX_ADD, "test", "submit")]
    assert [s.reward for s in steps] == pytest.approx(rewards)
    assert "Ran 6 tests: 4 passed, 2 failed." in steps[1].observation
    assert "FAILED tests/test_calc.py::test_mul_1 - AssertionError at: assert mul(2, 3) == 6" \
        in steps[1].observation
    last = steps[-1]
    assert last.done and not last.won
    assert (last.info["fail_to_pass_passed"], last.info["pass_to_pass_passed"]) == (2, 2)
    assert last.info["score"] == pytest.approx(4 / 6)


def test_edited_tests_do_not_fool_the_grader(tmp_path):
    env = SweEnv(reward="dense")
    env.reset(_handmade(tmp_path), max_turns=5)
    cheat = "replace tests/test_calc.py\n<<<\n    assert mul(2, 3) == 6\n===\n    pass\n>>>"
    rewards = [env.step(a).reward for a in (FIX_ADD, cheat, "test")]
    assert rewards == pytest.approx([0.0, 0.0, 5 / 6 - 2 / 6])
    last = env.step("submit")
    assert last.reward == pytest.approx(4 / 6 - 5 / 6) and not last.won
    assert sum(rewards) + last.reward == pytest.approx(4 / 6 - 2 / 6)


def test_escapes_hangs_and_bad_actions_are_observations(tmp_path):
    env = SweEnv(reward="ratio", test_timeout_s=1.5, invalid_action_penalty=-0.1)
    env.reset(_handmade(tmp_path), max_turns=20)
    (pathlib.Path(env.repo) / "link.py").symlink_to("/etc/passwd")
    for action in ("cat ../../etc/passwd", "cat /etc/passwd", "cat link.py", "ls ..",
                   "grep", "frobnicate", "replace calc.py\n<<<\nnot there\n===\nx\n>>>"):
        step = env.step(action)
        assert step.observation.startswith("Error: "), action
        assert step.info["invalid"] and step.reward == pytest.approx(-0.1) and not step.done
    assert env.step("grep root:").observation == "No matches for 'root:'."
    hang = "replace calc.py\n<<<\ndef neg(a):\n===\ndef neg(a):\n    while True:\n        pass\n>>>"
    assert not env.step(hang).info["invalid"]
    step = env.step("test")
    assert step.info["timed_out"] and "[Killed: the tests ran longer than 1.5 s" in step.observation
    assert not step.info["invalid"]


def test_truncation_and_step_after_done(tmp_path):
    env = SweEnv(reward="sparse")
    env.reset(_handmade(tmp_path), max_turns=2)
    assert not env.step("ls").done
    last = env.step("cat calc.py 1 2")
    assert last.done and not last.won and last.info["truncated"] and last.reward == 0.0
    assert last.info["turn"] == 2
    with pytest.raises(EnvError, match="finished episode"):
        env.step("ls")
    repo = env.repo
    env.close()
    assert not pathlib.Path(repo).exists()


def test_env_options_and_bad_task(tmp_path):
    with pytest.raises(EnvError, match="reward mode"):
        make_env(EnvSpec("swe", {"reward": "shaped"}))
    with pytest.raises(EnvError, match="invalid_action_penalty"):
        SweEnv(invalid_action_penalty=0.5)
    env = pickle.loads(pickle.dumps(EnvSpec("swe", {"reward": "sparse"})))
    assert make_env(env).reward_mode == "sparse"
    with pytest.raises(EnvError, match="task.json not found"):
        SweEnv().reset(Task("x", str(tmp_path), "swe"), 5)


def test_swegym_records_with_pytest(tmp_path):
    repo = tmp_path / "repos" / "acme__lib-1"
    (repo / "tests").mkdir(parents=True)
    (repo / "lib.py").write_text(
        "def double(x):\n    return x + x + 1\n\n\ndef half(x):\n    return x / 2\n")
    (repo / "tests" / "test_lib.py").write_text(
        "from lib import double, half\n\n\ndef test_double():\n    assert double(3) == 6\n\n\n"
        "def test_half():\n    assert half(3) == 1.5\n")
    patch = ("diff --git a/lib.py b/lib.py\nindex 1111111..2222222 100644\n--- a/lib.py\n"
             "+++ b/lib.py\n@@ -1,2 +1,2 @@\n def double(x):\n-    return x + x + 1\n"
             "+    return x + x\n")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({
        "instance_id": "acme__lib-1", "problem_statement": "double is off by one",
        "FAIL_TO_PASS": json.dumps(["tests/test_lib.py::test_double"]),
        "PASS_TO_PASS": ["tests/test_lib.py::test_half"], "patch": patch,
        "test_env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, "base_commit": "abc"}) + "\n")
    [task] = swegym.load_swegym_records(records)
    assert task.task_id == "swegym/acme__lib-1" and task.family == "swe"
    pickle.dumps(task)
    env = SweEnv(reward="ratio", test_timeout_s=60)
    reset = env.reset(task, max_turns=6)
    assert reset.walkthrough == ["cat lib.py", "replace lib.py\n<<<\n    return x + x + 1\n===\n"
                                 "    return x + x\n>>>", "test", "submit"]
    steps = [env.step(a) for a in reset.walkthrough]
    assert steps[-1].won and steps[-1].reward == 1.0
    assert steps[-2].info["tests_passed"] == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instance_id": "missing-repo", "problem_statement": "x",
                               "FAIL_TO_PASS": ["t.py::t"]}) + "\n")
    with pytest.raises(EnvError, match="does not exist"):
        swegym.load_swegym_records(bad)


def test_patch_to_edits_multi_file():
    patch = ("--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 3\n c = 4\n"
             "@@ -10,2 +10,3 @@\n p = 0\n+q = 1\n r = 2\n"
             "--- a/pkg/y.py\n+++ b/pkg/y.py\n@@ -4 +4 @@\n--- old\n+--- new\n")
    assert spec.patch_to_edits(patch) == [
        spec.Edit("x.py", "a = 1\nb = 2\nc = 4", "a = 1\nb = 3\nc = 4"),
        spec.Edit("x.py", "p = 0\nr = 2", "p = 0\nq = 1\nr = 2"),
        spec.Edit("pkg/y.py", "-- old", "--- new"),
    ]
    before = {"x.py": "a = 1\nb = 2\nc = 4\n"}
    assert spec.patch_to_edits(spec.make_patch(before, {"x.py": "a = 1\nb = 5\nc = 4\n"})) == [
        spec.Edit("x.py", "a = 1\nb = 2\nc = 4", "a = 1\nb = 5\nc = 4")]


@pytest.mark.parametrize("kind,variant,expected", [
    ("operator", 0, "return (a + b) * 2 - 1"),
    ("swap_operands", 0, "return 1 - a * b * 2"),
    ("comparison", 0, "if a <= b and (not c):"),
    ("off_by_one", 0, "return a * b * 3 - 1"),
    ("off_by_one", 1, "return a * b * 1 - 1"),
    ("swap_args", 0, "return max(b, a)"),
    ("boolean", 0, "if a < b or not c:"),
    ("negation", 0, "if a < b and c:"),
])
def test_mutations(kind, variant, expected):
    src = ("def f(a, b, c):\n    if a < b and not c:\n        return max(a, b)\n"
           "    return a * b * 2 - 1\n")
    tree = ast.parse(src)
    found = [m for m in mutate.find_mutations(tree, ["f"])
             if m.kind == kind and m.variant == variant]
    outs = {ast.unparse(mutate.apply_mutations(tree, [m])[0]) for m in found}
    assert any(expected in o for o in outs), outs
    assert ast.unparse(tree) == ast.unparse(ast.parse(src))  # original untouched
    branch = [m for m in mutate.find_mutations(tree, ["f"]) if m.kind == "missing_branch"]
    assert ast.unparse(mutate.apply_mutations(tree, branch)[0]) == \
        "def f(a, b, c):\n    return a * b * 2 - 1"
