"""Evaluation surface: a tiny trained checkpoint evaluated end to end (CLI), exact Pass@(K,T) and
per-turn diagnostics for a scripted expert agent in both modes (the studies: test_studies.py)."""
import json
import math
import os
import sys

import numpy as np
import pytest

from configs import study
from meowjax.envs.textworld_env import TextWorldEnv
from meowjax.eval import passk, stats
from meowjax.rollout import trajectory
from meowjax.agents.base import Agent, Player
from meowjax.eval import evaluate
from meowjax.trainers.loop import AgentTrainer

CELL = "estimator=rloo,reward=sparse,sft_share=0.5,seed=0,smoke=True"


def cell_config(games_dir):
    c = study.get_config(CELL)
    c.unlock()
    c.games.cache_dir = games_dir
    c.lock()
    return c


@pytest.fixture(scope="module")
def trained(trained_cell):
    """One smoke study cell trained to the end (SFT -> 2 RL iterations -> final eval)."""
    return trained_cell.workdir


@pytest.mark.slow
def test_one_evaluation_path_trainer_and_evaluate_agree_game_by_game(trained, tiny_games_dir):
    """The trainer's final evaluation and eval.evaluate (the evaluate CLI's path) on the
    same checkpoint and seed play the same episodes: identical greedy per-game outcomes and an
    identical sampled Pass@(K,T) table."""
    c = cell_config(tiny_games_dir)
    final = json.load(open(os.path.join(trained, "evals.json")))["final"]
    policy = evaluate.load_policy(c, trained)
    # an agent alone: no trainer, so no training data built
    assert isinstance(policy.agent, Agent) and not isinstance(policy.agent, AgentTrainer)
    tasks = evaluate.named_tasks(c, "eval")
    ts = tuple(c.eval.pass_ts)
    assert max(ts) == c.turns.eval_max_turns
    r = evaluate.evaluate_policy(policy, tasks, ks=c.eval.pass_ks, ts=ts,
                                samples=c.eval.num_samples, mode="single_run", seed=c.seed)
    assert r.greedy["per_game"] == final["eval"]["per_game"]
    np.testing.assert_array_equal(r.pass_kt.mean_KT, np.asarray(final["pass_at_k_t"]["mean"]))


@pytest.mark.slow
def test_evaluate_cli_on_a_tiny_checkpoint_writes_the_report(trained, tiny_games_dir, monkeypatch):
    from absl import flags
    from experiments import evaluate as cli
    argv = ["evaluate", f"--config=configs/study.py:{CELL}", f"--workdir={trained}",
            f"--config.games.cache_dir={tiny_games_dir}", "--split=eval", "--ks=1,2",
            "--ts=2,4,6", "--samples=2", "--mode=single_run"]   # T_max: the trainer's budget
    if "hf_path" not in flags.FLAGS:
        cli.define_flags()
    monkeypatch.setattr(sys, "argv", argv)   # config_flags reads its overrides from sys.argv
    flags.FLAGS(argv)
    try:
        cli.main([])
    finally:
        flags.FLAGS.unparse_flags()
    out = os.path.join(trained, "eval_eval")
    md = open(os.path.join(out, "report.md")).read()
    for heading in ("## Success at T_max", "## Pass@(K,T) on eval", "## Per-turn diagnostics",
                    "| K \\ T | T=2 | T=4 | T=6 |", "Mode: `single_run`", "action validity"):
        assert heading in md, heading
    # The greedy episodes are the trainer's final ones (same checkpoint, same seed).
    g = json.load(open(os.path.join(trained, "evals.json")))["final"]["eval"]
    assert (f"{g['lost_in_cycle']} of its {g['n'] - g['wins']} lost games end in a loop"
            in " ".join(md.split()))
    assert sorted(os.listdir(os.path.join(out, "plots"))) == [
        "pass_at_k_t_on_eval.png", "success_and_action_validity_vs_turn_index.png"]
    results = json.load(open(os.path.join(out, "results.json")))
    types_ = [s["type"] for s in results["sections"]]
    assert types_ == ["TextSection", "SuccessTable", "PassKTSection", "TextSection", "BudgetCurves"]
    d = json.load(open(os.path.join(out, "diagnostics.json")))
    n = cell_config(tiny_games_dir).games.num_eval      # 2 sampled episodes per game
    assert d["n_tasks"] == n and len(d["traces"]) == 2 * n and d["mode"] == "single_run"
    # The table is what the recorded episodes say: recompute Pass@(K,T) and validity from traces.
    by_task = {}
    for tr in d["traces"]:
        by_task.setdefault(tr["task_id"], []).append(tr)
    np.testing.assert_allclose(d["pass_at_k_t"]["mean"],
                               passk.pass_at_k_t(by_task, (1, 2), (2, 4, 6)), atol=1e-12)
    turns = [t for tr in d["traces"] for t in tr["turns"]]
    assert d["diagnostics"]["validity"] == pytest.approx(
        1 - np.mean([t["invalid"] for t in turns]))
    assert d["diagnostics"]["replay_disagreements"] == 0
    assert os.listdir(os.path.join(out, "tb"))


@pytest.mark.slow
def test_run_report_pairs_the_same_games_before_and_after_rl(trained, tiny_games_dir):
    """The training run's own report: the paired RL-gain row is computed from the per-game
    outcomes both evaluations recorded (same task ids), not from the two rates alone."""
    results = json.load(open(os.path.join(trained, "results.json")))
    by_type = {s["type"]: s for s in results["sections"]}
    evals = json.load(open(os.path.join(trained, "evals.json")))
    start, final = evals["start"]["eval"], evals["final"]["eval"]
    assert set(start["per_game"]) == set(final["per_game"]) and len(start["per_game"]) == start["n"]
    ids = sorted(start["per_game"])
    before = [start["per_game"][i] for i in ids]
    after = [final["per_game"][i] for i in ids]
    row = by_type["PairedGainTable"]["rows"][0]
    gain, low, high = stats.paired_difference_interval(before, after)
    assert row["gain"] == pytest.approx(final["success"] - start["success"]) == pytest.approx(gain)
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert row["games_gained"] == sum(a and not b for a, b in zip(after, before))
    g = cell_config(tiny_games_dir).games   # the run section names the RL pool
    pool = f"iterations) on {g.num_train} w{g.world_size}-o{g.nb_objects}-q{g.quest_length} training games"
    assert pool in open(os.path.join(trained, "report.md")).read()


@pytest.mark.slow
def test_run_report_gives_the_time_of_each_phase(trained):
    """Games, SFT, RL rollouts and updates, evaluation and compiling, each with its seconds; the
    phases (compiling lies inside them) add up to at most the wall time."""
    md = open(os.path.join(trained, "report.md")).read()
    table = md.split("## Time by phase", 1)[1].split("\n## ", 1)[0]
    secs = {}
    for line in table.splitlines():
        cells = [x.strip() for x in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1].replace(".", "").isdigit():
            secs[cells[0].split(" ")[0].rstrip(":")] = float(cells[1])
    assert {"games", "SFT", "RL", "evaluation", "of", "wall"} <= set(secs), secs
    assert secs["SFT"] > 0 and secs["evaluation"] > 0 and secs["of"] > 0, secs
    phases = secs["games"] + secs["SFT"] + secs["evaluation"] + sum(
        float(line.split("|")[2]) for line in table.splitlines() if line.startswith("| RL "))
    assert 0 < phases <= secs["wall"] + 0.2, (phases, secs)


# -- a scripted expert agent: exact numbers -------------------------------------------------------
class ScriptedAgent(Player):
    """Plays the walkthrough, with j useless 'inventory' actions first in the j-th sample; the
    agents' own evaluation player (``Player.play_tasks``) drives it."""

    needs_admissible = False
    batch_rows = 8
    eval_temperature = 1.0
    rollout_mesh = None   # one process: the params are used as they are

    def __init__(self, c):
        self.c = c

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key, temperature,
             offset=0):
        slots = [t for t in tasks for _ in range(group_size)]
        resets = pool.reset(slots, budgets)
        scripts = [["inventory"] * (0 if greedy else i % group_size) + list(r.walkthrough)
                   for i, r in enumerate(resets)]
        eps = [trajectory.Trajectory(t.task_id, offset + i // group_size, [], False, None, {})
               for i, t in enumerate(slots)]
        done = [False] * len(eps)
        while not all(done):
            acts = [None if d else s[e.num_turns] for e, d, s in zip(eps, done, scripts)]
            for i, (e, a, r) in enumerate(zip(eps, acts, pool.step(acts))):
                if a is None:
                    continue
                e.turns.append(trajectory.make_turn("", a, r.reward, False, 0.0))
                if r.won:
                    e.won, e.success_turn = True, e.num_turns
                done[i] = r.done or e.num_turns >= len(scripts[i])
        return eps


def test_scripted_expert_gives_exact_pass_at_k_t_in_both_modes(tiny_games_dir):
    c = cell_config(tiny_games_dir)
    c.unlock()
    c.env.num_workers = 0
    tasks = evaluate.named_tasks(c, "eval")
    policy = evaluate.Policy(ScriptedAgent(c), None, "scripted expert")
    env = TextWorldEnv()
    lengths = {t.task_id: len(env.reset(t, 10).walkthrough) for t in tasks}
    env.close()
    ks, ts, n = (1, 2, 3), (2, 3, 4, 5, 6), 3
    # sample j wins at turn L + j when L + j <= T, so c_task(T) = #{j < n : L + j <= T}
    want = np.zeros((len(ks), len(ts)))
    for L in lengths.values():
        for a, k in enumerate(ks):
            for b, t in enumerate(ts):
                c_ = sum(L + j <= t for j in range(n))
                want[a, b] += (1 - math.comb(n - c_, k) / math.comb(n, k)) / len(lengths)
    results = {}
    for mode in ("single_run", "per_budget"):
        r = evaluate.evaluate_policy(policy, tasks, ks=ks, ts=ts, samples=n, mode=mode, name="eval")
        np.testing.assert_allclose(r.pass_kt.mean_KT, want, atol=1e-12)
        assert r.pass_kt.mode == mode and r.greedy["success"] == 1.0
        results[mode] = r
    d = evaluate.diagnostics(results["single_run"].traces, max(ts))
    total_plan = sum(lengths.values()) * n
    total_turns = sum(L + j for L in lengths.values() for j in range(n) if L + j <= max(ts))
    assert d["validity"] == 1.0 and d["plan_done"] == 1.0 and d["replay_disagreements"] == 0
    assert d["progress_rate"] == pytest.approx(total_plan / total_turns)
    assert d["recovery_no_progress"] == 1.0                 # every detour still won
    assert d["episodes_with_no_progress"] == len(tasks) * (n - 1)
    np.testing.assert_allclose(d["success_by_turn"][np.asarray(ts) - 1], want[0])
    with pytest.raises(ValueError, match="samples=1 < max"):
        evaluate.evaluate_policy(policy, tasks, ks=(1, 2), ts=(2,), samples=1)
    with pytest.raises(ValueError, match="w{world}"):
        evaluate.named_tasks(c, "textworld:w2o3q4:test")
    with pytest.raises(ValueError, match="Unknown game set"):
        evaluate.named_tasks(c, "jericho:zork")
