"""Runs a command in its own user, mount, PID, network, IPC and UTS namespaces (host side).

util-linux ``unshare`` creates the namespaces and starts :mod:`jail` (stdlib only) as PID 1 of
the new PID namespace; jail builds the root, drops privileges and runs the command. This module
writes jail's spec, packs the workspace into a tar file, maps the user ids and enforces the
wall-clock limit. Why these choices:

* A minimal root (tmpfs + read-only binds + ``pivot_root``) rather than tmpfs over a list of
  sensitive folders: only what is named is visible (default deny), so a folder we did not think
  of (a second home, /srv, /opt, /mnt, the project) cannot leak.
* One size-limited tmpfs holds the workspace, /tmp and /dev/shm: the total the code can write is
  bounded (RLIMIT_FSIZE bounds only one file), and nothing it writes reaches the host.
* The workspace arrives as a tar file descriptor, unpacked inside as the sandbox user: the files
  are its own whatever their owner on the host, and no host path is written.
* Under root the host maps the sandbox to uid/gid 65534 (nobody), not to root: files the host's
  root owns are then foreign inside (no capability applies to them), and RLIMIT_NPROC, which the
  kernel never enforces for uid 0, bounds fork bombs. Unprivileged users map their own uid.
* ``unshare`` rather than bubblewrap: util-linux is on every Debian/Ubuntu machine and our init
  does the mounts, so one code path runs (and is tested) everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time

JAIL = str(pathlib.Path(__file__).with_name("jail.py"))
UNSHARE_FLAGS = ("--user", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
                 "--kill-child", "--keep-caps")
NOBODY = 65534  # uid and gid of the sandbox when the host runs as root
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_BINDS = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime")
DEVICES = ("null", "zero", "full", "random", "urandom")
WORKSPACE = "/workspace"
STAGING = "/tmp"  # where jail mounts the new root before the pivot (exists, world-traversable)
ETC_FILES = {
    "/etc/passwd": "sandbox:x:0:0:sandbox:/tmp:/bin/sh\n",
    "/etc/group": "sandbox:x:0:\n",
    "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
}
FIX = ("Fix: allow unprivileged user namespaces (e.g. "
       "`sysctl -w kernel.unprivileged_userns_clone=1` or, on Ubuntu 24.04, "
       "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`), or "
       "run inside a container/VM that allows them; or, for trusted code only, set "
       "env.sandbox='best_effort' (SweEnv(sandbox='best_effort')).")


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits for one test run (seconds, MiB, bytes), in either mode of
    ``sandbox.run_tests``."""

    timeout_s: float = 10.0
    memory_mb: int = 1024           # per process (RLIMIT_AS)
    file_size_mb: int = 16          # per file, and the output (RLIMIT_FSIZE)
    output_bytes: int = 200_000
    processes: int = 64             # processes and threads together (namespaces mode)
    workspace_mb: int = 256         # workspace + /tmp tmpfs (namespaces mode)



class SandboxUnavailable(RuntimeError):
    """Namespaces cannot be created here; the message names the cause and the fix."""


def _nested(path: str, others: list[str]) -> bool:
    return any(path != o and path.startswith(o.rstrip("/") + "/") for o in others)


def interpreter_dirs() -> list[str]:
    """Folders the interpreter needs: prefixes, stdlib, site-packages (as the host spells them
    and resolved), minus those inside another; the project's own folders are not among them."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.abspath(sys.executable))}
    paths.update(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update([os.path.realpath(p) for p in paths])
    found = sorted(p for p in {os.path.abspath(p) for p in paths} if os.path.isdir(p))
    system = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    return [p for p in found if not _nested(p, found + system) and p not in system]


def root_layout() -> dict:
    """The read-only binds and symlinks of the sandbox's root (host path -> same path inside)."""
    binds, links = [], []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append([os.readlink(d), d])  # merged /usr: /bin -> usr/bin
        elif os.path.isdir(d):
            binds.append([d, d])
    binds += [[p, p] for p in ETC_BINDS if os.path.exists(p)]
    interpreter = interpreter_dirs()
    if "/" in interpreter:
        raise SandboxUnavailable(f"the interpreter {sys.executable} has / as a prefix; the "
                                 "sandbox would show the whole host. Use a Python installed "
                                 "under /usr, /opt or a virtual environment.")
    binds += [[os.path.realpath(p), p] for p in interpreter]
    return {"ro_binds": binds, "symlinks": links}


def pack_workspace(repo_dir: str | os.PathLike, into) -> None:
    """Writes ``repo_dir`` (no caches, no .git; symlinks as links) as a tar to a file object."""
    def keep(info: tarfile.TarInfo):
        name = os.path.basename(info.name)
        if name in ("__pycache__", ".git") or name.endswith(".pyc"):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info
    with tarfile.open(fileobj=into, mode="w:") as tar:
        tar.add(str(repo_dir), arcname=".", filter=keep)


def _sandbox_ids() -> tuple[int, int]:
    return (NOBODY, NOBODY) if os.geteuid() == 0 else (os.geteuid(), os.getegid())


def _write_id_maps(pid: int) -> None:
    """Maps inside id 0 to the sandbox ids; an unprivileged host may only map its own ids."""
    uid, gid = _sandbox_ids()
    proc = f"/proc/{pid}"
    if os.geteuid() != 0:
        pathlib.Path(proc, "setgroups").write_text("deny")
    pathlib.Path(proc, "gid_map").write_text(f"0 {gid} 1")
    pathlib.Path(proc, "uid_map").write_text(f"0 {uid} 1")


def kill_group(pid: int) -> None:
    """SIGKILL to process group ``pid``; a group already gone is not an error."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    """Host pids of ``pid``'s children (the sandbox's init, while unshare lives)."""
    try:
        text = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(c) for c in text.split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _end_sandbox(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Kills the sandbox and returns once every process inside it is gone.

    Killing unshare kills its init (``--kill-child``), and the kernel then kills the whole pid
    namespace, but asynchronously: a fork bomb's processes can outlive unshare's exit by a
    moment under load. The init only exits once the namespace is empty, so waiting for the init
    (not only for unshare) means nothing the tests started survives ``run``.
    """
    # Once unshare is reaped its pid may name another process: look for the init only before.
    inits = _children(proc.pid) if proc.returncode is None else []
    kill_group(proc.pid)
    for pid in inits:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    end = time.monotonic() + grace_s
    while any(_alive(pid) for pid in inits) and time.monotonic() < end:
        time.sleep(0.01)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def run(repo_dir: str | os.PathLike, argv: list[str], env: dict[str, str], limits, out,
        files: dict[str, str] | None = None) -> tuple[int, bool]:
    """Runs ``argv`` in ``/workspace`` (a copy of ``repo_dir``) inside fresh namespaces.

    limits: a :class:`Limits`; out: the file that receives stdout and stderr; files: extra
    files (inside path -> text) written into the root (the command's own copies). Returns
    (returncode, timed_out); returncode is the command's (negative: killed by that signal), or
    unshare's when the sandbox was killed at the time limit. Raises SandboxUnavailable when the
    namespaces or the root cannot be set up.
    """
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    if not os.access(unshare, os.X_OK):
        raise SandboxUnavailable("util-linux `unshare` was not found; install util-linux "
                                 "(apt-get install util-linux). " + FIX)
    deadline = time.monotonic() + limits.timeout_s
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    status_r, status_w = os.pipe()
    with tempfile.TemporaryDirectory(prefix="meowjax-jail-") as tmp:
        try:
            with tempfile.TemporaryFile(dir=tmp) as spec_file, \
                    tempfile.TemporaryFile(dir=tmp) as tar_file:
                pack_workspace(repo_dir, tar_file)
                tar_file.seek(0)
                fds = {"ready": ready_w, "go": go_r, "status": status_w, "tar": tar_file.fileno()}
                spec = {**root_layout(), "root": STAGING, "dev": DEVICES,
                        "files": {**ETC_FILES, **(files or {})}, "size_mb": limits.workspace_mb,
                        "fds": fds, "cwd": WORKSPACE, "argv": argv, "env": env,
                        "limits": {"memory_mb": limits.memory_mb,
                                   "file_size_mb": limits.file_size_mb,
                                   "processes": limits.processes}}
                spec_file.write(json.dumps(spec).encode())
                spec_file.seek(0)
                proc = subprocess.Popen(
                    [unshare, *UNSHARE_FLAGS, sys.executable, "-I", "-S", JAIL,
                     str(spec_file.fileno())],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
                    start_new_session=True, pass_fds=(*fds.values(), spec_file.fileno()))
        finally:
            for fd in (ready_w, go_r, status_w):
                os.close(fd)
        try:
            return _supervise(proc, ready_r, go_w, status_r, deadline, out)
        finally:
            _end_sandbox(proc)  # also ends a sandbox whose init we never released
            for fd in (ready_r, go_w, status_r):
                os.close(fd)


def _supervise(proc: subprocess.Popen, ready_r: int, go_w: int, status_r: int, deadline: float,
               out) -> tuple[int, bool]:
    """Handshake (id maps), then waits for the sandbox until ``deadline``."""
    ready, _, _ = select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))
    if not ready or os.read(ready_r, 1) != b"r":
        if not ready:  # too slow to even start: count it as a timeout
            return -signal.SIGKILL, True
        proc.wait()
        raise SandboxUnavailable(f"cannot create namespaces with unshare: {_tail(out)}. {FIX}")
    try:
        _write_id_maps(proc.pid)
    except OSError as e:
        raise SandboxUnavailable(f"cannot map user ids into the sandbox: {e}. {FIX}") from e
    os.write(go_w, b"g")
    timed_out = False
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _end_sandbox(proc)
    status = _read_all(status_r).decode("utf-8", "replace")
    if status.startswith("E"):
        raise SandboxUnavailable(f"cannot set up the sandbox: {status[1:]}. For trusted code "
                                 "only, env.sandbox='best_effort' runs without it.")
    if status and not timed_out:
        return os.waitstatus_to_exitcode(int(status)), False
    return proc.returncode, timed_out


def _tail(out) -> str:
    """The last 500 bytes the sandbox wrote to ``out`` (unshare's own error), on one line."""
    fd = out.fileno()
    size = os.fstat(fd).st_size
    text = os.pread(fd, 500, max(0, size - 500)).decode("utf-8", "replace")
    return " ".join(text.split()) or "no output"


_AVAILABLE: dict[str, str | None] = {}


def check_available() -> None:
    """Raises SandboxUnavailable unless an isolated run works here (tried once per process)."""
    if "error" not in _AVAILABLE:
        try:
            with tempfile.TemporaryDirectory() as repo, \
                    tempfile.TemporaryFile() as out:
                limits = Limits(timeout_s=60.0)
                code, timed_out = run(repo, [sys.executable, "-I", "-c", "pass"], {}, limits, out)
                if code != 0 or timed_out:
                    raise SandboxUnavailable(f"a trial run in the sandbox failed (exit status "
                                             f"{code}): {_tail(out)}. {FIX}")
            _AVAILABLE["error"] = None
        except SandboxUnavailable as e:
            _AVAILABLE["error"] = str(e)
    if _AVAILABLE["error"] is not None:
        raise SandboxUnavailable(_AVAILABLE["error"])


if __name__ == "__main__":  # `python -m meowjax.envs.swe.isolation`: can code run isolated here?
    try:
        check_available()
    except SandboxUnavailable as e:
        print(f"SWE sandbox: namespaces unavailable. {e}")
        sys.exit(1)
    print("SWE sandbox: user, mount, PID and network namespaces work here.")
