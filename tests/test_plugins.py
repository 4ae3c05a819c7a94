"""Plugins from the command line (`--config.imports`): a module outside meowjax registers an
advantage estimator, an environment family, a policy loss and an action interface, and
`experiments/train.py` trains with all four by name. `pytest -k plugins`."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from meowjax.runtime import plugins

PLUGIN = textwrap.dedent('''
    """A user's plugin: each registration leaves a mark when meowjax uses it."""
    import dataclasses
    import os

    from meowjax.envs import families, registry
    from meowjax.rl import estimators, policy_losses
    from meowjax.trainers import interfaces

    MARKS = os.environ["PLUGIN_MARKS"]


    def mark(what):
        with open(os.path.join(MARKS, what), "a") as f:
            f.write(what + "\\n")


    _RLOO = estimators.ESTIMATORS["rloo"]


    def leave_one_out(inputs, hp):
        mark("estimator")   # at trace time: once per compiled shape
        return _RLOO.fn(inputs, hp)


    estimators.register_estimator(dataclasses.replace(_RLOO, name="my_rloo", fn=leave_one_out))
    registry.register_family(dataclasses.replace(families.TEXTWORLD, name="my_textworld"))
    _CISPO = policy_losses.get_policy_loss("cispo")


    def my_cispo(*args, **kwargs):
        mark("policy_loss")   # at trace time
        return _CISPO.fn(*args, **kwargs)


    policy_losses.register_policy_loss(dataclasses.replace(_CISPO, name="my_cispo", fn=my_cispo))


    _SCORE = interfaces.get_interface("score")


    def sft_rows(agent, expert):
        mark("interface")
        return _SCORE.sft_rows(agent, expert)


    interfaces.register_interface(dataclasses.replace(_SCORE, name="my_score", sft_rows=sft_rows))
''')


def test_plugins_module_names_and_errors():
    assert plugins.module_names("") == []
    assert plugins.module_names("a.b, c") == ["a.b", "c"]
    with pytest.raises(ValueError, match="empty module name"):
        plugins.module_names("a,,b")
    with pytest.raises(ImportError, match="'no_such_plugin_mod' does not import.*PYTHONPATH"):
        plugins.import_plugins("no_such_plugin_mod")


@pytest.mark.slow
def test_plugins_train_through_the_entry_point(tiny_games_dir, tmp_path):
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "my_meowjax_plugin.py").write_text(PLUGIN)
    marks = tmp_path / "marks"
    marks.mkdir()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PLUGIN_MARKS=str(marks),
               PYTHONPATH=os.pathsep.join([str(tmp_path / "plugin"), repo]))
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "experiments.train", "--config=configs/default.py:smoke=True",
           "--config.imports=my_meowjax_plugin", "--config.rl.estimator=my_rloo",
           "--config.env.family=my_textworld", "--config.policy.interface=my_score",
           "--config.rl.policy_loss=my_cispo",
           f"--config.games.cache_dir={tiny_games_dir}", f"--workdir={workdir}",
           "--compile_cache="]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(os.listdir(marks)) == ["estimator", "interface", "policy_loss"]
    evals = json.load(open(workdir / "evals.json"))
    assert evals["final"]["eval"]["n"] == 3   # trained and evaluated to the end
    report = open(workdir / "report.md").read()
    assert "estimator `my_rloo`, interface `my_score`" in report
