"""Entry point behind experiments/train.py: dispatch on the policy interface, write the report."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Any, Iterator

import jax

import ml_collections
import numpy as np

from meowjax.eval import passk, report
from meowjax import sharding
from meowjax.runtime import console, multihost, plugins, preemption, workdir_lock
from meowjax.envs import game_sets
from meowjax.trainers import data
from meowjax.trainers.loop import AgentTrainer


def provenance(c: ml_collections.ConfigDict) -> dict[str, Any]:
    """What a result needs to be traced: the config name and seed, the source commit (and
    whether the tree had uncommitted changes; None outside a git checkout), the CPU, and the
    difficulty name of each held-out set."""
    src = os.path.dirname(os.path.abspath(__file__))

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"config": c.name, "seed": int(c.seed), "commit": git("rev-parse", "HEAD"),
            "dirty": None if status is None else bool(status), "cpu": _cpu_name(),
            "eval_split": c.games.eval_split,
            "difficulties": {s: game_sets.set_difficulty(c, s) for s in game_sets.HELD_OUT}}


def _cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _passkt(d: dict[str, Any]) -> passk.PassKTResult:
    return passk.PassKTResult(ks=tuple(d["ks"]), ts=tuple(d["ts"]), mode=d["mode"],
                              mean_KT=np.asarray(d["mean"]), low_KT=np.asarray(d["ci_low"]),
                              high_KT=np.asarray(d["ci_high"]), n_tasks=d["n_tasks"],
                              min_samples=d["min_samples"], alpha=d.get("alpha", 0.05))


def write_run_report(c: ml_collections.ConfigDict, workdir: str, out: dict[str, Any],
                     seconds: float) -> str:
    """report.md + results.json, led by RL's paired gain on every held-out difficulty and the
    held-out learning curve; evals.json: every evaluation's numbers, each game's greedy outcome
    included (`per_game`), and the learning curve's points (`curve`)."""
    evals = out["evals"]
    with open(os.path.join(workdir, "evals.json"), "w", encoding="utf-8") as f:
        json.dump(report._jsonable(evals), f, indent=1)
    start, final = evals.get("start", {}), evals.get("final", {})
    names = {split: f"{game_sets.set_difficulty(c, split)} ({data.set_role(c, split)})"
             for split in game_sets.HELD_OUT}
    rows, paired = [], []
    for split in game_sets.HELD_OUT:
        for tag, label in (("start", "starting policy (after SFT)"), ("final", "after RL")):
            e = evals.get(tag, {}).get(split)
            if e:
                rows.append(report.SuccessRow(f"{names[split]}: {label}", e["wins"], e["n"]))
        before = start.get(split, {}).get("per_game")
        after = final.get(split, {}).get("per_game")
        if before and after and set(before) == set(after):
            ids = sorted(before)
            paired.append(report.PairedGain(names[split], [before[i] for i in ids],
                                            [after[i] for i in ids]))
    sections = []
    if paired:
        sections.append(report.PairedGainTable(
            "RL's gain by difficulty (greedy success on the same held-out games before and after "
            "RL; 'gain' when the whole 95% interval is above 0)", paired, show_rates=True))
    by_type = _task_type_section(evals, names)
    if by_type is not None:
        sections.append(by_type)
    records = _metric_records(workdir)
    curve = _rl_curve_section(evals, records, game_sets.set_difficulty(c, "curve"))
    if curve is not None:
        sections.append(curve)
    sections += [
        report.TextSection("Run", (
            f"config `{c.name}`, estimator `{c.rl.estimator}`, interface `{c.policy.interface}`, "
            f"model preset `{c.model.preset}`; SFT demonstrations {out['plan']['sft_demos']}, "
            f"RL episodes {out['plan']['rl_episodes']} ({out['rl_iters']} iterations) on "
            f"{data.rl_pool_words(c)} ({data.task_repeats(c, out['rl_iters'])}); "
            f"wall time {seconds / 60:.1f} min. Greedy evaluation, one episode per game, "
            f"turn budget {c.turns.eval_max_turns}.")),
        report.SuccessTable("Success on held-out games (95% Wilson intervals)", rows),
    ]
    cycles = _cycle_section(evals, names)
    if cycles is not None:
        sections.append(cycles)
    if out.get("phase_s"):
        sections.append(_phase_section(out["phase_s"], seconds))
    sections += _comparison_sections(evals, game_sets.set_difficulty(c, c.eval.sampled_split))
    sections += _curve_sections(records)
    path = report.write_report(workdir, f"meowjax run: {c.name}", sections)
    return str(path)


def _task_type_section(evals: dict[str, Any], names: dict[str, str]) -> Any | None:
    """RL's paired gain by task type on each held-out set whose games have one (ALFWorld's),
    like GiGPO's ALFWorld table; None where no set has task types."""
    start, final = evals.get("start", {}), evals.get("final", {})
    rows = []
    for split, name in names.items():
        before, after = start.get(split, {}), final.get(split, {})
        types = before.get("task_type")
        if not types or set(before.get("per_game", {})) != set(after.get("per_game", {})):
            continue
        for kind in sorted(set(types.values())):
            ids = sorted(i for i, k in types.items() if k == kind)
            rows.append(report.PairedGain(f"{name}: {kind}", [before["per_game"][i] for i in ids],
                                          [after["per_game"][i] for i in ids]))
    if not rows:
        return None
    return report.PairedGainTable("Success by task type (greedy, the same held-out games before "
                                  "and after RL)", rows, show_rates=True)


def _metric_records(workdir: str) -> list[dict[str, Any]]:
    """metrics.jsonl's records ([] where the run wrote none)."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _rl_curve_section(evals: dict[str, Any], records: list[dict[str, Any]],
                      difficulty: str) -> Any | None:
    """The held-out learning curve (``evals["curve"]``, Wilson intervals) with the rollout
    success by iteration (smoothed); None where the run has no curve."""
    points = evals.get("curve")
    if not points:
        return None
    held_out = ([p["iteration"] for p in points], [p["success"] for p in points],
                [p["ci_low"] for p in points], [p["ci_high"] for p in points])
    rollout = [r["rollout/success"] for r in records if "rollout/success" in r]
    return report.RLCurve(
        f"Learning curve: greedy success on {points[0]['n']} held-out {difficulty} games by RL "
        "iteration", held_out, (list(range(1, len(rollout) + 1)), rollout) if rollout else None)


def _cycle_section(evals: dict[str, Any], names: dict[str, str]) -> Any | None:
    """The greedy episodes lost, and of them those that ended repeating one or two actions
    (``lost_in_cycle``), before and after RL; None where no evaluation counted them."""
    rows = []
    for split, name in names.items():
        cells = []
        for tag in ("start", "final"):
            e = evals.get(tag, {}).get(split) or {}
            lost = e.get("n", 0) - e.get("wins", 0)
            cells.append(f"{e['lost_in_cycle']} of {lost}" if "lost_in_cycle" in e else "n/a")
        if cells != ["n/a", "n/a"]:
            rows.append([name, *cells])
    if not rows:
        return None
    return report.TextSection(
        "Greedy episodes lost in a loop (the last four actions repeat one or two actions)",
        report.markdown_table(["games", "starting policy", "after RL"], rows))


# Phases of a run, in order: (key of ``phase_s``, label).
_PHASES = (
    ("games", "games: generated, or loaded from data/games (this start)"),
    ("sft", "SFT"),
    ("rl_rollout", "RL rollouts (episodes played, greedy baselines included)"),
    ("rl_update", "RL updates (old log-probs, advantages, update steps)"),
    ("evaluation", "evaluation (starting policy and after RL)"),
    ("compile", "of which XLA compiling and tracing (this start; inside the phases above)"),
)


def _phase_section(phase_s: dict[str, float], seconds: float) -> Any:
    """Seconds and share of the wall time of each phase (the trainer's ``phase_s``; SFT, RL and
    evaluation add up over restarts)."""
    rows = [[label, f"{phase_s[k]:.1f}", f"{phase_s[k] / 60:.1f}",
             f"{100 * phase_s[k] / seconds:.0f}%" if seconds > 0 else "n/a"]
            for k, label in _PHASES if k in phase_s]
    rows.append(["wall time of this start (set-up and report included)", f"{seconds:.1f}",
                 f"{seconds / 60:.1f}", "100%"])
    return report.TextSection("Time by phase", report.markdown_table(
        ["phase", "seconds", "minutes", "share of wall"], rows))


# Per-turn diagnostics shown before and after RL: (key, label).
_DIAGNOSTICS = (
    ("first_action_progress", "first action makes progress (share of episodes)"),
    ("validity", "action validity (valid turns / turns)"),
    ("progress_rate", "progress turns (expert plan got shorter) / turns"),
    ("recovery_invalid", "recovery after an invalid action (won / episodes with one)"),
    ("recovery_no_progress", "recovery after a useless action (won / episodes with one)"),
    ("plan_done", "share of the expert plan completed"),
)


def _comparison_sections(evals: dict[str, Any], difficulty: str) -> list[Any]:
    """Pass@(K,T) and per-turn diagnostics of the sampled held-out episodes, starting policy and
    after RL side by side (the start needs ``eval.sample_start``)."""
    start, final = evals.get("start", {}), evals.get("final", {})
    out = []
    for tag, e in (("start", start), ("final", final)):
        if "pass_at_k_t" in e:
            out.append(report.PassKTSection(f"Pass@(K,T) {tag}, held-out ({difficulty})",
                                            _passkt(e["pass_at_k_t"])))
    if "pass_at_k_t" in start and "pass_at_k_t" in final:
        out.append(report.PassKTComparison(
            f"Pass@(K,T) before and after RL, held-out ({difficulty})",
            _passkt(start["pass_at_k_t"]), _passkt(final["pass_at_k_t"]),
            ("starting policy", "after RL")))
    d0, d1 = start.get("diagnostics"), final.get("diagnostics")
    if d0 and d1:
        fmt = lambda v: "n/a" if v is None or v != v else f"{v:.3f}"  # noqa: E731 (NaN)
        diff = lambda a, b: "n/a" if a is None or b is None or a != a or b != b else f"{b - a:+.3f}"  # noqa: E731
        rows = [[label, fmt(d0[k]), fmt(d1[k]), diff(d0[k], d1[k])] for k, label in _DIAGNOSTICS]
        rows.append(["episodes (sampled)", str(d0["episodes"]), str(d1["episodes"]), ""])
        out.append(report.TextSection(
            f"Per-turn diagnostics before and after RL, held-out ({difficulty}, sampled episodes)",
            report.markdown_table(["quantity", "starting policy", "after RL", "difference"], rows)))
        t = len(d0["success_by_turn"])
        out.append(report.BudgetCurves(f"Won within t turns before and after RL ({difficulty})", {
            "starting policy": (list(range(1, t + 1)), d0["success_by_turn"], None, None),
            "after RL": (list(range(1, t + 1)), d1["success_by_turn"], None, None)},
            metric="share of sampled episodes won"))
    return out


# Learning curves from metrics.jsonl: (section title, metric axis, x axis, {label: key}, which
# value is best).
_CURVES = (
    ("SFT loss", "loss", "SFT step", {"SFT loss": "sft/loss"}, False),
    ("RL rollouts: success and return by iteration", "rate / return", "RL iteration",
     {"rollout success": "rollout/success", "rollout return": "rollout/return"}, True),
    ("RL: KL to the starting policy and entropy by iteration", "nats", "RL iteration",
     {"KL to the starting policy": "pg/kl_ref", "entropy": "pg/entropy"}, None),
)


def _curve_sections(records: list[dict[str, Any]]) -> list[Any]:
    """The SFT loss by step and the RL curves by iteration (one RL record per iteration) from
    metrics.jsonl's ``records``."""
    out = []
    for title, metric, xlabel, keys, higher_is_better in _CURVES:
        curves = {}
        for label, key in keys.items():
            vals = [r[key] for r in records if key in r]
            if vals:
                curves[label] = (np.arange(1, len(vals) + 1), np.asarray(vals, np.float64))
        if curves:
            out.append(report.LearningCurves(title, curves, metric=metric, xlabel=xlabel,
                                             higher_is_better=higher_is_better))
    return out


@contextlib.contextmanager
def stop_all_on_peer_failure(workdir: str) -> Iterator[None]:
    """Several processes: an error here (typically a collective that broke because another
    process died) ends this process at once with a message saying so, instead of waiting in
    ``jax.distributed``'s exit barrier for the dead peer's heartbeat timeout and aborting. A
    process stuck outside a collective is stopped by the coordination service after
    ``distributed.heartbeat_timeout_s``."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 (every failure ends the whole run the same way)
        if not multihost.is_multiprocess():
            raise
        traceback.print_exc()
        print(f"[{multihost.process_tag()}] stopping: {type(e).__name__}: {str(e)[:500]}\n"
              "If another process of this run died, that is the cause: see its log. Rerun the "
              f"same command on every process to resume from the last checkpoint in {workdir}.",
              file=sys.stderr, flush=True)
        os._exit(multihost.PEER_FAILURE_STATUS)


def run(c: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) the run of ``c`` in ``workdir`` and writes its report.

    Starts ``jax.distributed`` when ``c.distributed`` asks for it (every process runs this with
    its own ``process_id``). Holds the workdir's lock throughout (``runtime.workdir_lock``: a
    second run on it raises WorkdirBusy; process 0's lock stands for the run) and the SIGTERM
    handler from game generation on (``runtime.preemption``: a SIGTERM raises Preempted once
    the state is saved; with several processes, all of them save and stop together). Process 0
    writes the report."""
    t0 = time.time()
    plugins.import_plugins(c.imports)   # before anything looks up a registered name
    sharding.maybe_initialize_distributed(c.distributed)
    if multihost.is_multiprocess():
        console.tag_lines(multihost.process_tag())
        console.info("%d processes, %d devices (%d here)", jax.process_count(),
                     jax.device_count(), jax.local_device_count())
    lock = workdir_lock.hold(workdir) if jax.process_index() == 0 else contextlib.nullcontext()
    with stop_all_on_peer_failure(workdir):
        with lock, multihost.stop_together(), preemption.on_sigterm():
            if jax.process_index() == 0:   # the code and machine of this start
                os.makedirs(workdir, exist_ok=True)
                with open(os.path.join(workdir, "provenance.json"), "w", encoding="utf-8") as f:
                    json.dump(provenance(c), f, indent=1)
            out = AgentTrainer(c, workdir).run()
        if jax.process_index() != 0:
            return out
        path = write_run_report(c, workdir, out, time.time() - t0)
    with open(path, encoding="utf-8") as f:
        print(f.read())
    console.info("report: %s (wall time %.1f min)", path, (time.time() - t0) / 60)
    return out
