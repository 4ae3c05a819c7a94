"""SWE sandbox, namespaces mode: hostile test code fails inside and leaves the host unchanged.

Each test plants hostile code as a test of a tiny repository, runs it with ``run_tests``, and
checks the outcome reported from inside (the error the code got) *and* the host (the file, the
listener, the process table). A control run in best_effort mode shows the attack is real.
"""
import os
import pathlib
import secrets
import socket
import sys
import textwrap
import threading
import time

import pytest

from meowjax.envs.base import EnvError
from meowjax.envs.swe import isolation
from meowjax.envs.swe.env import SweEnv
from meowjax.envs.swe.sandbox import Limits, run_tests

PROJECT = pathlib.Path(__file__).resolve().parents[1]


def _repo(tmp_path, tests: str) -> pathlib.Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "m.py").write_text("def f(x):\n    return x + 1\n")
    (repo / "tests" / "test_h.py").write_text(textwrap.dedent(tests))
    return repo


def _ids(*names):
    return [f"tests/test_h.py::{n}" for n in names]


def _pids_with(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker`` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes()
            state = pathlib.Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


@pytest.fixture
def project_secret():
    """A secret file in the project folder (removed afterwards)."""
    path = PROJECT / f".sandbox-secret-{secrets.token_hex(4)}"
    path.write_text("PROJECT-SECRET-73\n")
    yield path
    path.unlink()


def test_sandbox_cannot_read_host_files(tmp_path, project_secret):
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-41\n")
    repo = _repo(tmp_path, f"""
        import os
        def test_tmp():
            print(open({str(secret)!r}).read())
        def test_project():
            print(open({str(project_secret)!r}).read())
        def test_project_source():
            open({str(PROJECT / "meowjax" / "envs" / "swe" / "sandbox.py")!r}).read()
        def test_home():
            assert sorted(os.listdir({os.path.expanduser("~")!r})) == ["ok"], \\
                sorted(os.listdir({os.path.expanduser("~")!r}))
        def test_etc():
            assert sorted(os.listdir("/etc")) == ["ok"], sorted(os.listdir("/etc"))
        """)
    ids = _ids("test_tmp", "test_project", "test_project_source", "test_home", "test_etc")
    run = run_tests(repo, ids)
    for test_id in ids[:3]:
        assert run.status[test_id] == "failed"
        assert run.messages[test_id].startswith("FileNotFoundError"), run.messages[test_id]
    assert "HOST-SECRET" not in run.output and "PROJECT-SECRET" not in run.output
    home = run.messages[ids[3]]  # only the path to an interpreter kept in the home, if any
    assert home.startswith("AssertionError: [") and ".bashrc" not in home, home
    etc = run.messages[ids[4]]
    assert "passwd" in etc and "shadow" not in etc and "hostname" not in etc, etc


def test_sandbox_writes_stay_inside(tmp_path):
    outside = tmp_path / "planted" / "owned.txt"
    prefix_file = pathlib.Path(sys.prefix, "sandbox-owned.txt")
    repo = _repo(tmp_path, f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def test_host_path():
            os.makedirs({str(outside.parent)!r})
            open({str(outside)!r}, "w").write("x")   # lands in the sandbox's tmpfs
        def test_interpreter():
            open({str(prefix_file)!r}, "w").write("x")
        def test_remount():
            MS_REMOUNT, MS_BIND = 32, 4096
            for flags in (MS_REMOUNT | MS_BIND, MS_REMOUNT):
                if libc.mount(None, {sys.prefix!r}.encode(), None, flags, None) == 0:
                    raise AssertionError("remounted the interpreter writable")
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        def test_nested_namespace():
            CLONE_NEWUSER, CLONE_NEWNS, MS_REMOUNT, MS_BIND = 0x10000000, 0x20000, 32, 4096
            assert libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0, ctypes.get_errno()
            if libc.mount(None, {sys.prefix!r}.encode(), None, MS_REMOUNT | MS_BIND, None) == 0:
                open({str(prefix_file)!r}, "w").write("x")
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        def test_workspace():
            open("new_file.txt", "w").write("x")
        def test_capabilities():
            status = open("/proc/self/status").read()
            assert "CapEff:\\t0000000000000000" in status and "NoNewPrivs:\\t1" in status
        """)
    ids = _ids("test_host_path", "test_interpreter", "test_remount", "test_capabilities",
               "test_workspace", "test_nested_namespace")  # the last one gains namespace caps
    run = run_tests(repo, ids)
    assert run.status[ids[0]] == "passed" and not outside.parent.exists()
    assert run.messages[ids[1]].startswith("OSError: [Errno 30] Read-only file system")
    assert run.messages[ids[2]].startswith("PermissionError: [Errno 1] Operation not permitted")
    assert run.status[ids[3]] == "passed", run.messages.get(ids[3])
    assert run.status[ids[4]] == "passed" and not (repo / "new_file.txt").exists()
    assert run.messages[ids[5]].startswith("PermissionError: [Errno 1] Operation not permitted")
    assert not prefix_file.exists()


@pytest.fixture
def listener():
    """A host TCP listener on loopback; yields (port, accepted-within-0.5-s function)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)

    def accepted() -> bool:
        try:
            server.accept()[0].close()
            return True
        except socket.timeout:
            return False
    yield server.getsockname()[1], accepted
    server.close()


def _network_tests(port: int) -> str:
    return f"""
        import ctypes, os, socket, struct, _socket
        def test_raw_socket():
            _socket.socket().connect(("127.0.0.1", {port}))
        def test_ctypes():
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.socket(2, 1, 0)
            addr = struct.pack("HH4s8x", 2, socket.htons({port}), bytes([127, 0, 0, 1]))
            if libc.connect(fd, addr, len(addr)) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        def test_outside():
            _socket.socket().connect(("192.0.2.1", 80))
        def test_loopback_inside():
            server = _socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            _socket.socket().connect(server.getsockname())
        """


def test_sandbox_no_network_but_loopback(tmp_path, listener):
    port, accepted = listener
    repo = _repo(tmp_path, _network_tests(port))
    ids = _ids("test_raw_socket", "test_ctypes", "test_outside", "test_loopback_inside")
    run = run_tests(repo, ids)
    assert run.messages[ids[0]].startswith("ConnectionRefusedError")
    assert run.messages[ids[1]].startswith("ConnectionRefusedError")
    assert run.messages[ids[2]].startswith("OSError: [Errno 101] Network is unreachable")
    assert run.status[ids[3]] == "passed"
    assert not accepted()
    control = run_tests(repo, ids[1:2], isolation="best_effort")  # the attack is real
    assert control.status[ids[1]] == "passed" and accepted()


def _watch(marker: str, seen: list, stop: threading.Event) -> threading.Thread:
    """Records the largest number of host processes carrying ``marker`` until ``stop``."""
    def loop():
        while not stop.is_set():
            seen.append(len(_pids_with(marker)))
            time.sleep(0.05)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def _run_watched(marker: str, *args, **kwargs):
    seen, stop = [], threading.Event()
    thread = _watch(marker, seen, stop)
    try:
        run = run_tests(*args, **kwargs)
    finally:
        stop.set()
        thread.join()
    return run, max(seen, default=0)


def test_sandbox_kills_processes_left_behind(tmp_path):
    marker = "sandbox-orphan-" + secrets.token_hex(4)
    repo = _repo(tmp_path, f"""
        import os, subprocess, sys, time
        def test_daemon():
            if os.fork() == 0:   # double fork + setsid(): leaves the process group
                os.setsid()
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                                  {marker!r}])
                os._exit(0)
            os.wait()
            time.sleep(0.3)
        """)
    run, seen = _run_watched(marker, repo, _ids("test_daemon"))
    assert run.status == {_ids("test_daemon")[0]: "passed"} and seen >= 1
    assert _pids_with(marker) == []


def test_sandbox_hung_test_and_child_killed_at_timeout(tmp_path):
    marker = "sandbox-hang-" + secrets.token_hex(4)
    repo = _repo(tmp_path, f"""
        import subprocess, sys
        def test_first():
            pass
        def test_hang():
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", {marker!r}],
                             start_new_session=True)
            while True:
                pass
        """)
    ids = _ids("test_first", "test_hang")
    start = time.monotonic()
    run, seen = _run_watched(marker, repo, ids, limits=Limits(timeout_s=1.5))
    assert time.monotonic() - start < 1.5 + 2.0
    assert run.timed_out and run.status == {ids[0]: "passed", ids[1]: "missing"}
    assert seen >= 1 and _pids_with(marker) == []


def test_sandbox_fork_bomb_is_bounded(tmp_path):
    name = "test_bomb_" + secrets.token_hex(4)  # in every bomb process's command line
    repo = _repo(tmp_path, f"""
        import os, time
        def {name}():
            while True:
                try:
                    os.fork()
                except OSError as e:
                    os.write(1, f"FORK-REFUSED {{e.errno}}\\n".encode())
                    time.sleep(60)
        """)
    start = time.monotonic()
    run, seen = _run_watched(name, repo, _ids(name), limits=Limits(timeout_s=2.0, processes=24))
    assert time.monotonic() - start < 2.0 + 2.0
    assert run.timed_out and "FORK-REFUSED 11" in run.output  # EAGAIN: the limit bit
    assert 1 <= seen <= 24
    assert _pids_with(name) == []


def test_sandbox_disk_fill_is_bounded(tmp_path):
    repo = _repo(tmp_path, """
        import os
        def test_fill():
            chunk = b"x" * 2 ** 20
            written = 0
            for i in range(1000):
                for folder in (".", "/tmp", "/dev/shm"):
                    try:
                        with open(os.path.join(folder, f"fill{i}"), "wb") as f:
                            f.write(chunk)
                    except OSError as e:
                        raise OSError(e.errno, f"{e.strerror} after {written} MiB") from None
                    written += 1
        """)
    run = run_tests(repo, _ids("test_fill"), limits=Limits(workspace_mb=8, file_size_mb=2))
    message = run.messages[_ids("test_fill")[0]]
    assert message.startswith("OSError: [Errno 28] No space left on device after"), message
    assert int(message.split(" after ")[1].split()[0]) <= 8
    assert sorted(p.name for p in repo.rglob("*")) == ["m.py", "test_h.py", "tests"]


@pytest.mark.parametrize("command", [None, ["python", "-m", "pytest", "-rA", "-q", "-p",
                                            "no:cacheprovider"]])
def test_sandbox_reports_like_best_effort(tmp_path, command):
    """A normal suite gives the same per-test results in both modes (stdlib runner, pytest)."""
    repo = _repo(tmp_path, """
        from m import f
        def test_ok():
            assert f(1) == 2
        def test_bad():
            assert f(1) == 3
        def test_raises():
            raise KeyError('k')
        """)
    ids = _ids("test_ok", "test_bad", "test_raises") + ([] if command else _ids("test_absent"))
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    isolated = run_tests(repo, ids, command, extra_env=env)
    plain = run_tests(repo, ids, command, extra_env=env, isolation="best_effort")
    assert isolated.status == plain.status
    assert isolated.messages == plain.messages
    assert isolated.status[ids[0]] == "passed", isolated.output
    assert isolated.status[ids[1]] == isolated.status[ids[2]] == "failed"


def test_sandbox_mode_refused_where_namespaces_fail(monkeypatch, caplog):
    monkeypatch.setattr(isolation, "_AVAILABLE", {})
    monkeypatch.setattr(isolation, "UNSHARE_FLAGS", ("--no-such-namespace-flag",))
    with pytest.raises(EnvError) as err:
        SweEnv(sandbox="namespaces")
    text = str(err.value)
    assert "cannot create namespaces with unshare" in text and "no-such-namespace-flag" in text
    assert "unprivileged_userns_clone" in text and "sandbox='best_effort'" in text
    with caplog.at_level("WARNING"):
        assert SweEnv(sandbox="best_effort").sandbox == "best_effort"
    assert "best_effort mode" in caplog.text and "trusted code only" in caplog.text
    with pytest.raises(EnvError, match="not a sandbox mode"):
        SweEnv(sandbox="docker")
    with pytest.raises(ValueError, match="isolation='docker'"):
        run_tests(".", [], isolation="docker")


def test_sandbox_workspace_too_large_is_a_clear_error(tmp_path):
    repo = _repo(tmp_path, "def test_ok():\n    pass\n")
    (repo / "big.bin").write_bytes(b"x" * 3 * 2**20)
    with pytest.raises(isolation.SandboxUnavailable, match=r"raise Limits.workspace_mb"):
        run_tests(repo, _ids("test_ok"), limits=Limits(workspace_mb=2))
    assert run_tests(repo, _ids("test_ok"), limits=Limits(workspace_mb=8)).passed == _ids("test_ok")
