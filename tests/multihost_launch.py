"""Starting and reaping real training processes on one machine, for the multi-process tests.

Each process is ``python -m experiments.train`` with ``--config.distributed.*`` pointing at a
coordinator on 127.0.0.1 and its own ``--xla_force_host_platform_device_count`` CPU devices
(gloo collectives between processes). Every process leads its own process group (setsid), and
``Launch`` kills each group (the process and its env workers) when the block ends, however it ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Collectives of a loaded 2-core machine can be slow: a deadline, not a change of numerics.
CPU_COLLECTIVE_FLAGS = ("--xla_cpu_collective_call_terminate_timeout_seconds=1200 "
                        "--xla_cpu_collective_timeout_seconds=1200")
# Metrics that depend on the machine, not on the training: never compared.
UNCOMPARED = ("time/", "perf/", "mem/", "host/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """``num_processes`` processes of one run (one plain process when 1); a context manager.

    ``wait()`` returns each process's exit status (raising TimeoutError after ``timeout_s``);
    ``log(i)`` is process i's stdout + stderr."""

    def __init__(self, workdir: str, config: str, *, num_processes: int, devices: int,
                 flags: Sequence[str] = (), compile_cache: str = "", heartbeat_s: int = 10,
                 tag: str = "run"):
        self.workdir, self.procs, self.logs = workdir, [], []
        port = free_port()
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} "
                             + CPU_COLLECTIVE_FLAGS)
        for i in range(num_processes):
            cmd = [sys.executable, "-m", "experiments.train", f"--config={config}",
                   f"--workdir={workdir}", f"--compile_cache={compile_cache}", *flags]
            if num_processes > 1:
                cmd += [f"--config.distributed.coordinator_address=127.0.0.1:{port}",
                        f"--config.distributed.num_processes={num_processes}",
                        f"--config.distributed.process_id={i}",
                        f"--config.distributed.heartbeat_timeout_s={heartbeat_s}"]
            path = f"{workdir}.{tag}.p{i}.log"
            f = open(path, "w", encoding="utf-8")
            self.logs.append(path)
            self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))
            f.close()

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def kill(self, index: int | None = None, sig: int = signal.SIGKILL) -> None:
        """Signals process ``index``'s process group (all of them by default) if it still runs."""
        for i, p in enumerate(self.procs):
            if (index is None or i == index) and p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        if index is None:
            for p in self.procs:
                p.wait()

    def signal(self, index: int, sig: int) -> None:
        """Sends ``sig`` to process ``index`` alone (not its env workers)."""
        self.procs[index].send_signal(sig)

    def wait(self, timeout_s: float, indices: Sequence[int] | None = None) -> list[int]:
        deadline = time.time() + timeout_s
        out = []
        for i in (range(len(self.procs)) if indices is None else indices):
            left = max(0.1, deadline - time.time())
            try:
                out.append(self.procs[i].wait(left))
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"process {i} still runs after {timeout_s} s; its log ends:\n"
                                   + self.log(i)[-3000:]) from None
        return out

    def log(self, i: int) -> str:
        with open(self.logs[i], encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_for_file(self, path: str, timeout_s: float) -> None:
        """Waits until ``path`` exists (e.g. a committed checkpoint step folder)."""
        deadline = time.time() + timeout_s
        while not os.path.exists(path):
            if time.time() > deadline or any(p.poll() is not None for p in self.procs):
                raise TimeoutError(f"{path} did not appear; log of process 0:\n"
                                   + self.log(0)[-3000:])
            time.sleep(0.2)


def metrics(workdir: str, last: bool = True) -> list[dict[str, float]]:
    """metrics.jsonl of a run, the machine-dependent entries dropped; with ``last``, the last
    record of each step (a run killed after logging a step logs it again when it resumes)."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    rows = [{k: v for k, v in r.items() if not k.startswith(UNCOMPARED)} for r in rows]
    return sorted({r["step"]: r for r in rows}.values(), key=lambda r: r["step"]) if last else rows


def evals(workdir: str) -> dict:
    with open(os.path.join(workdir, "evals.json"), encoding="utf-8") as f:
        return json.load(f)


# The smoke runs' RL gradients are near zero (most groups are all-lose: no advantage), and
# Adam scales such a gradient up to a step of size lr whatever its rounding: a different
# all-reduce order (threads of one process vs gloo between processes) then moves the next
# step's KL / gradient norm at the 1e-5 level. Those are compared to an absolute 1e-3.
NEAR_ZERO = ("pg/approx_kl", "pg/kl_ref", "pg/grad_norm")


def assert_same_run(got_dir: str, want_dir: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Every logged loss and rollout metric of ``got_dir`` equals ``want_dir``'s (to float
    tolerance, step by step), and every evaluation outcome (each game's greedy result, success
    rates, Pass@(K,T)) is identical."""
    got, want = metrics(got_dir), metrics(want_dir)
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w), (g["step"], set(g) ^ set(w))
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=rtol,
                                       atol=1e-3 if k in NEAR_ZERO else atol,
                                       err_msg=f"{k} at step {w['step']}")
    assert evals(got_dir) == evals(want_dir)
