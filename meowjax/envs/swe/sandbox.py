"""A throwaway copy of a repository, safe path resolution, and tests run in a sandbox.

Agent *tool actions* (ls/cat/grep/replace) run no code and only touch files inside the episode's
copy: absolute paths, ``..`` components, NUL bytes and any symlink on the way are refused, and
the resolved real path must lie under the copy's root. Code (the tests, and the code they
import) runs in one of two modes, ``run_tests(..., isolation=...)``:

"namespaces" (default; :mod:`isolation` and :mod:`jail`). The command runs in its own user,
mount, PID, network, IPC and UTS namespaces, created by util-linux ``unshare``:
  * Files: a minimal root on a tmpfs; read-only binds of /usr (and /bin, /lib... or their
    merged-/usr links), ld.so.cache, and the interpreter's prefixes, stdlib and site-packages;
    /dev/{null,zero,full,random,urandom}; a /proc of its own PID namespace; a stub /etc. The
    host's home, /tmp, the project and everything else are simply absent (the old root is
    detached after ``pivot_root``).
  * Writes: /workspace (a copy of the repository, unpacked inside), /tmp and /dev/shm share one
    tmpfs of ``Limits.workspace_mb``; nothing written there reaches the host, including the
    repository copy the run started from.
  * Privileges: no capabilities, no_new_privs, read-only mounts that cannot be remounted (a
    nested user namespace only gets locked copies). Under a root host it runs as uid 65534.
  * Network: only a loopback interface of its own; the host's ports are unreachable.
  * Processes: PID 1 is our init; when the command exits (or the time limit kills the sandbox)
    every process inside is killed. RLIMIT_NPROC (``Limits.processes``, threads included)
    bounds fork bombs; RLIMIT_AS, RLIMIT_FSIZE and the wall-clock limit as below.
  Not isolated: the kernel itself (no seccomp filter; a kernel bug is an escape), CPU time
  beyond the wall-clock limit, total memory (RLIMIT_AS is per process: up to processes x
  memory_mb), and the interpreter's files are readable. If namespaces cannot be created here,
  :class:`SandboxUnavailable` says why and how to fix it.

"best_effort" (trusted code only). A subprocess (``sys.executable``) of this user in a new
process session, with a wall-clock limit (the whole group is SIGKILLed), RLIMIT_AS, RLIMIT_FSIZE
(bounds output and each file written), no core dumps, stdin closed, a scrubbed environment (HOME
in a temp dir, proxies pointing at a closed port) and a ``sitecustomize`` that replaces
``socket.socket``/``create_connection``/``getaddrinfo`` with functions that raise. The code
runs with this user's privileges: it can read files outside the copy, undo the socket patch
(e.g. via ``_socket``), spawn processes that leave the process group, and write anywhere this
user can; it runs in the repository folder itself.

In both modes only the first ``output_bytes`` of output are read back, and per-test results
come from the runner's lines (stdlib runner: prefixed by a nonce) or pytest's ``-rA`` summary.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

from meowjax.envs.swe import isolation as isolation_lib
from meowjax.envs.swe.isolation import Limits, SandboxUnavailable  # noqa: F401 - part of this API

RUNNER = str(pathlib.Path(__file__).with_name("runner.py"))
IGNORED = shutil.ignore_patterns("__pycache__", ".git", "*.pyc")
ISOLATION_MODES = ("namespaces", "best_effort")

_SITECUSTOMIZE = '''"""meowjax SWE sandbox: no network for code under test (best effort)."""
import socket as _socket


def _refuse(*args, **kwargs):
    raise OSError("network access is disabled in the meowjax SWE sandbox")


class _NoSocket(_socket.socket):
    def __init__(self, *args, **kwargs):
        _refuse()


_socket.socket = _NoSocket
_socket.create_connection = _refuse
_socket.getaddrinfo = _refuse
'''

_RESULT_RE = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)(?: - (.*))?$")


class SandboxError(ValueError):
    """A refused action (path outside the sandbox, symlink, missing file); shown to the agent."""


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Outcome of running a list of test ids.

    status: test id -> "passed" | "failed" | "error" | "missing" (not reported, e.g. killed).
    messages: test id -> one-line failure description (failed/error only).
    timed_out: the run hit ``Limits.timeout_s`` and its process group was killed.
    returncode: the runner's exit status (negative: killed by that signal).
    output: the first ``Limits.output_bytes`` of stdout+stderr, decoded.
    """

    status: dict[str, str]
    messages: dict[str, str]
    timed_out: bool
    returncode: int
    output: str
    duration_s: float

    @property
    def passed(self) -> list[str]:
        return [t for t, s in self.status.items() if s == "passed"]

    @property
    def not_passed(self) -> list[str]:
        return [t for t, s in self.status.items() if s != "passed"]

    def ratio(self) -> float:
        """Fraction of the requested tests that passed (1.0 for an empty request)."""
        return len(self.passed) / len(self.status) if self.status else 1.0


def resolve_inside(root: str | os.PathLike, rel: str) -> pathlib.Path:
    """``root/rel`` if it stays inside ``root`` without following any symlink; else SandboxError."""
    rel = rel.strip()
    if not rel or rel == ".":
        return pathlib.Path(root)
    if "\x00" in rel:
        raise SandboxError("path contains a NUL byte")
    if rel.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:", rel):
        raise SandboxError(f"absolute paths are not allowed ({rel!r}); use a path relative to the "
                           "repository root, e.g. 'src/module.py'")
    parts = pathlib.PurePosixPath(rel).parts
    if ".." in parts:
        raise SandboxError(f"'..' is not allowed in paths ({rel!r}); stay inside the repository")
    path = pathlib.Path(root)
    for part in parts:
        if part == ".":
            continue
        path = path / part
        if path.is_symlink():
            raise SandboxError(f"{rel!r} goes through a symbolic link; links are not followed")
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise SandboxError(f"{rel!r} is outside the repository")
    return path


def copy_repo(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copies a repository snapshot; symlinks are copied as links (and later refused)."""
    shutil.copytree(src, dst, symlinks=True, ignore=IGNORED, dirs_exist_ok=True)


def _set_limits(limits: Limits):
    def preexec() -> None:
        mem = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        fsize = limits.file_size_mb * 2**20
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return preexec


def parse_results(output: str, test_ids: list[str], nonce: str = "") -> tuple[dict, dict]:
    """Reads PASSED/FAILED/ERROR lines (runner or ``pytest -rA``) into status and messages.

    Only lines starting with ``nonce`` count. An id reported both passed and not passed counts as
    not passed; ids never reported are "missing".
    """
    status = {t: "missing" for t in test_ids}
    messages: dict[str, str] = {}
    for line in output.splitlines():
        if not line.startswith(nonce):
            continue
        m = _RESULT_RE.match(line[len(nonce):].rstrip())
        if not m or m.group(2) not in status:
            continue
        word, test_id, msg = m.groups()
        new = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error"}[word]
        if status[test_id] in ("failed", "error") and new == "passed":
            continue
        status[test_id] = new
        if msg:
            messages[test_id] = msg
    return status, messages


def _env(home: str, extra_env: dict[str, str] | None, nonce: str) -> dict[str, str]:
    """The scrubbed environment of the code under test (proxies point at a closed port)."""
    dead = "http://127.0.0.1:9"
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home,
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "http_proxy": dead, "https_proxy": dead, "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
            "no_proxy": "", **(extra_env or {}), "MEOWJAX_SWE_NONCE": nonce}


def _argv(command: list[str] | None, runner: str) -> list[str]:
    if command is None:
        return [sys.executable, "-s", runner]
    return [sys.executable if c in ("python", "python3") else c for c in command]


def _run_best_effort(repo_dir, argv, env, limits: Limits, out, tmp: str) -> tuple[int, bool]:
    """A limited subprocess of this user (see the module docstring for what that leaves open)."""
    site_dir = os.path.join(tmp, "site")
    os.makedirs(site_dir)
    with open(os.path.join(site_dir, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE)
    proc = subprocess.Popen(argv, cwd=repo_dir, stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, env={**env, "PYTHONPATH": site_dir},
                            start_new_session=True, preexec_fn=_set_limits(limits))
    timed_out = False
    try:
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    isolation_lib.kill_group(proc.pid)  # also reaps stray children of a finished run
    proc.wait()
    return proc.returncode, timed_out


def run_tests(repo_dir: str | os.PathLike, test_ids: list[str], command: list[str] | None = None,
              limits: Limits = Limits(), extra_env: dict[str, str] | None = None,
              isolation: str = "namespaces") -> RunResult:
    """Runs ``test_ids`` in ``repo_dir`` in a limited subprocess and parses the per-test results.

    command: argv prefix to which the test ids are appended; None = the stdlib runner
      (``[sys.executable, runner.py]``). Words "python"/"python3" become ``sys.executable``.
    extra_env: added to the scrubbed environment (e.g. PYTEST_DISABLE_PLUGIN_AUTOLOAD=1).
    isolation: "namespaces" (runs on a copy of ``repo_dir`` inside :mod:`isolation`'s sandbox;
      raises SandboxUnavailable where namespaces cannot be created) or "best_effort" (runs in
      ``repo_dir`` itself, as this user: trusted code only).
    """
    if isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation={isolation!r}; use one of {ISOLATION_MODES}")
    nonce = "@" + secrets.token_hex(8) + "@" if command is None else ""
    ids = list(test_ids)
    with tempfile.TemporaryDirectory(prefix="meowjax-swe-run-") as tmp:
        out_path = os.path.join(tmp, "output.txt")
        start = time.monotonic()
        with open(out_path, "wb") as out:
            if isolation == "namespaces":
                runner_inside = "/opt/meowjax/runner.py"
                files = {runner_inside: pathlib.Path(RUNNER).read_text()}
                returncode, timed_out = isolation_lib.run(
                    repo_dir, _argv(command, runner_inside) + ids, _env("/tmp", extra_env, nonce),
                    limits, out, files)
            else:
                returncode, timed_out = _run_best_effort(
                    repo_dir, _argv(command, RUNNER) + ids, _env(tmp, extra_env, nonce), limits,
                    out, tmp)
        duration = time.monotonic() - start
        with open(out_path, "rb") as f:
            output = f.read(limits.output_bytes).decode("utf-8", "replace")
    status, messages = parse_results(output, ids, nonce)
    return RunResult(status, messages, timed_out, returncode, output, duration)
