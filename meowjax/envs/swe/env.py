"""SweEnv: the code-repair environment behind the TextEnv protocol.

An episode: ``reset(task, max_turns)`` copies the task's buggy snapshot into a fresh temp folder
and shows the problem statement plus the file list; each ``step(action)`` runs one tool command
(see :data:`SweEnv.SYSTEM_PROMPT`). ``submit`` or the turn budget ends the episode.

Grading (at submit): a second temp copy of the agent's repository, with the task's test files
restored from the original snapshot, runs FAIL_TO_PASS + PASS_TO_PASS under the sandbox limits.
With n_pass of the N graded tests passing, ``won = (n_pass == N)`` and the reward modes are

  sparse: r_submit = 1{n_pass == N}; 0 on every other turn.
  ratio:  r_submit = n_pass / N  (the Practitioner's Guide's verified ratio reward); 0 otherwise.
  dense:  score s_t = passing fraction at the latest ``test`` run (or submit), starting from
          s_0 = |PASS_TO_PASS| / N; every ``test`` turn and the submit turn get r_t = s_t - s_{t-1}.
          The sum over an episode that submits is n_pass/N - s_0 (progress made), so re-running
          tests, or editing the tests to pass in the workspace, earns nothing in total.

Tests (``test``, ``submit``) run in the sandbox chosen by ``sandbox``: "namespaces" (the
default; the env refuses to start where it cannot run) or "best_effort" (trusted code only);
see :mod:`meowjax.envs.swe.sandbox`. The file tools (ls/cat/grep/replace) run no code.

Every mode adds ``invalid_action_penalty`` (<= 0) on turns whose command was malformed or
refused. An episode cut by the turn budget is not graded (reward 0 on that turn in sparse/ratio
mode; info["truncated"] = True). ``info`` carries score (s_t), turn, invalid, truncated, and on
test/submit turns tests_passed, tests_total, timed_out.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import tempfile

from absl import logging

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.swe import isolation, sandbox, spec, tools
from meowjax.envs.swe.sandbox import Limits  # the `sandbox` argument hides the module

REWARD_MODES = ("sparse", "ratio", "dense")


class SweEnv:
    """Multi-turn code repair with test-verified rewards (host-only, no JAX)."""

    SYSTEM_PROMPT = tools.SYSTEM_PROMPT

    def __init__(self, reward: str = "ratio", test_timeout_s: float = 10.0,
                 memory_limit_mb: int = 1024, max_observation_chars: int = 4000,
                 invalid_action_penalty: float = 0.0, tmp_root: str | None = None,
                 sandbox: str = "namespaces"):
        self.sandbox = _check_sandbox(sandbox)
        if reward not in REWARD_MODES:
            raise EnvError(f"reward={reward!r} is not a SWE reward mode; use one of {REWARD_MODES}")
        if invalid_action_penalty > 0:
            raise EnvError(f"invalid_action_penalty must be <= 0, got {invalid_action_penalty}")
        if test_timeout_s <= 0 or memory_limit_mb < 64 or max_observation_chars < 200:
            raise EnvError("need test_timeout_s > 0, memory_limit_mb >= 64 and "
                           "max_observation_chars >= 200")
        self.reward_mode = reward
        self.limits = Limits(timeout_s=test_timeout_s, memory_mb=memory_limit_mb)
        self.max_observation_chars = max_observation_chars
        self.invalid_action_penalty = invalid_action_penalty
        self.tmp_root = tmp_root
        self.task: spec.SweTask | None = None
        self._tmp: str | None = None
        self._done = True

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task, max_turns: int) -> ResetResult:
        if max_turns < 1:
            raise EnvError(f"max_turns must be >= 1, got {max_turns}")
        self.close()
        self.task = spec.read_task(task)
        self._tmp = tempfile.mkdtemp(prefix="meowjax-swe-", dir=self.tmp_root)
        sandbox.copy_repo(self.task.repo_dir, self.repo)
        self._turn, self._max_turns, self._done = 0, max_turns, False
        self._score = len(self.task.pass_to_pass) / len(self.task.all_tests)
        try:
            walkthrough = spec.expert_actions(self.task) if self.task.patch else None
        except (ValueError, OSError):
            walkthrough = None  # a patch we cannot express as replace edits
        observation = (f"{self.task.problem_statement}\n\nRepository files:\n"
                       f"{tools.do_ls(self.repo)}")
        return ResetResult(observation=self._cap(observation),
                           objective=self.task.problem_statement, max_score=1.0,
                           walkthrough=walkthrough,
                           info={"system_prompt": self.SYSTEM_PROMPT, "score": self._score,
                                 "task_id": self.task.task_id, "max_turns": max_turns})

    def step(self, action: str) -> StepResult:
        if self._done or self.task is None:
            raise EnvError("step() called on a finished episode; call reset(task, max_turns) first")
        self._turn += 1
        reward, won, done, invalid, extra = 0.0, False, False, False, {}
        try:
            cmd = tools.parse_command(action)
            if cmd.name == "test":
                run = sandbox.run_tests(self.repo, list(self.task.all_tests),
                                        self.task.test_command, self.limits,
                                        self.task.test_env, self.sandbox)
                observation = self._report(run)
                delta = self._advance(run.ratio())
                reward = delta if self.reward_mode == "dense" else 0.0
                extra = _counts(run)
            elif cmd.name == "submit":
                run = self.grade()
                won, done = not run.not_passed, True
                passed = set(run.passed)
                extra = {**_counts(run),
                         "fail_to_pass_passed": sum(t in passed for t in self.task.fail_to_pass),
                         "pass_to_pass_passed": sum(t in passed for t in self.task.pass_to_pass)}
                dense = self._advance(run.ratio())
                reward = {"sparse": float(won), "ratio": run.ratio(), "dense": dense}[
                    self.reward_mode]
                observation = (f"Submitted. The grader ran {len(run.status)} tests: "
                               f"{len(run.passed)} passed." + (" All tests pass." if won else ""))
            else:
                observation = tools.run_file_tool(self.repo, cmd)
        except tools.ToolError as e:
            observation, invalid = f"Error: {e}", True
            reward += self.invalid_action_penalty
        truncated = not done and self._turn >= self._max_turns
        if truncated:
            done = True
            observation += "\n[The turn budget is used up; the episode is over without a submit.]"
        self._done = done
        info = {"score": self._score, "turn": self._turn, "invalid": invalid,
                "truncated": truncated, **extra}
        return StepResult(self._cap(observation), float(reward), done, won, info)

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        self._done = True

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ helpers
    @property
    def repo(self) -> str:
        """The agent's working copy of the repository (valid between reset and close)."""
        if self._tmp is None:
            raise EnvError("no episode in progress; call reset(task, max_turns) first")
        return os.path.join(self._tmp, "repo")

    def grade(self) -> sandbox.RunResult:
        """Runs all task tests on a copy of the workspace with the original test files restored."""
        assert self.task is not None
        grade_dir = tempfile.mkdtemp(prefix="grade-", dir=self._tmp)
        try:
            sandbox.copy_repo(self.repo, grade_dir)
            for rel in self.task.test_files:
                src = pathlib.Path(self.task.repo_dir, rel)
                dst = pathlib.Path(grade_dir, rel)
                if dst.is_symlink() or dst.is_file():
                    dst.unlink()
                elif dst.is_dir():
                    shutil.rmtree(dst)
                if src.is_file() and not src.is_symlink():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
            return sandbox.run_tests(grade_dir, list(self.task.all_tests),
                                     self.task.test_command, self.limits,
                                     self.task.test_env, self.sandbox)
        finally:
            shutil.rmtree(grade_dir, ignore_errors=True)

    def _advance(self, score: float) -> float:
        """Sets the score to ``score``; returns the change (the dense reward)."""
        delta, self._score = score - self._score, score
        return delta

    def _report(self, run: sandbox.RunResult) -> str:
        lines = [f"Ran {len(run.status)} tests: {len(run.passed)} passed, "
                 f"{len(run.not_passed)} failed."]
        for test_id in run.not_passed:
            msg = run.messages.get(test_id)
            lines.append(f"{run.status[test_id].upper()} {test_id}" + (f" - {msg}" if msg else ""))
        if run.timed_out:
            lines.append(f"[Killed: the tests ran longer than {self.limits.timeout_s:g} s "
                         "(an infinite loop?). Tests not reported count as failed.]")
        elif run.returncode == -signal.SIGXFSZ:
            lines.append("[Killed: the tests wrote more than the output/file size limit.]")
        if not run.passed and not run.messages and run.output.strip():
            lines.append("Output:\n" + run.output.strip()[-1500:])
        return "\n".join(lines)

    def _cap(self, text: str) -> str:
        n = self.max_observation_chars
        if len(text) <= n:
            return text
        return text[:n] + f"\n... [{len(text) - n} more characters cut; use cat with a line range]"


def _check_sandbox(mode: str) -> str:
    """The sandbox mode, once we know it can run here; best_effort is said out loud."""
    if mode not in sandbox.ISOLATION_MODES:
        raise EnvError(f"sandbox={mode!r} is not a sandbox mode; use one of "
                       f"{sandbox.ISOLATION_MODES}")
    if mode == "best_effort":
        logging.warning("SWE sandbox: best_effort mode. Model-written code runs as this user "
                        "with only process limits: it can read your files, reach the network "
                        "and leave processes behind. Use it for trusted code only; "
                        "env.sandbox='namespaces' isolates it.")
        return mode
    try:
        isolation.check_available()
    except isolation.SandboxUnavailable as e:
        raise EnvError(f"env.sandbox='namespaces' cannot run here, so model-written code will "
                       f"not be run: {e}") from e
    return mode


def _counts(run: sandbox.RunResult) -> dict:
    return {"tests_passed": len(run.passed), "tests_total": len(run.status),
            "timed_out": run.timed_out}
