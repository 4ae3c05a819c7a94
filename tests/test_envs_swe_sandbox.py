"""SWE sandbox and tools: escapes refused, runaway tests killed, limits, command parsing."""
import os
import pathlib
import textwrap
import time

import pytest

from meowjax.envs.swe import sandbox, tools
from meowjax.envs.swe.sandbox import Limits, SandboxError, resolve_inside, run_tests


def _repo(tmp_path, tests: str, module: str = "def f(x):\n    return x + 1\n") -> pathlib.Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "m.py").write_text(module)
    (repo / "tests" / "test_m.py").write_text("from m import f\n" + textwrap.dedent(tests))
    return repo


@pytest.mark.parametrize("rel", ["../../etc/passwd", "/etc/passwd", "a/../../x", "~/.bashrc",
                                 "..", "m.py\x00", "C:/x"])
def test_resolve_refuses_escapes(tmp_path, rel):
    repo = _repo(tmp_path, "")
    with pytest.raises(SandboxError):
        resolve_inside(repo, rel)


def test_symlinks_refused_and_hidden(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-42\n")
    repo = _repo(tmp_path, "")
    os.symlink(secret, repo / "link.txt")
    os.symlink(tmp_path, repo / "linkdir")
    os.symlink("/etc/passwd", repo / "passwd")
    assert resolve_inside(repo, "tests/test_m.py") == repo / "tests" / "test_m.py"
    for rel in ("link.txt", "linkdir/secret.txt", "passwd"):
        with pytest.raises(tools.ToolError, match="symbolic link"):
            tools.run_file_tool(str(repo), tools.parse_command(f"cat {rel}"))
    with pytest.raises(tools.ToolError, match="symbolic link"):
        tools.run_file_tool(str(repo),
                            tools.parse_command("replace link.txt\n<<<\nTOP\n===\nX\n>>>"))
    assert secret.read_text() == "TOPSECRET-42\n"
    assert tools.do_grep(str(repo), "TOPSECRET") == "No matches for 'TOPSECRET'."
    listing = tools.do_ls(str(repo)).split("\n")
    assert listing == ["m.py", "tests/test_m.py"]


def test_tests_pass_fail_and_error(tmp_path):
    repo = _repo(tmp_path, """
        def test_ok():
            assert f(1) == 2
        def test_bad():
            assert f(1) == 3
        def test_raises():
            raise KeyError('k')
        """)
    ids = [f"tests/test_m.py::test_{n}" for n in ("ok", "bad", "raises", "absent")]
    run = run_tests(repo, ids)
    assert run.status == {ids[0]: "passed", ids[1]: "failed", ids[2]: "failed", ids[3]: "error"}
    assert run.messages[ids[1]] == "AssertionError at: assert f(1) == 3"
    assert run.messages[ids[2]].startswith("KeyError: 'k'")
    assert run.ratio() == 0.25 and not run.timed_out


def test_forged_result_lines_do_not_count(tmp_path):
    repo = _repo(tmp_path, """
        def test_liar():
            print('PASSED tests/test_m.py::test_liar')
            assert False
        """)
    run = run_tests(repo, ["tests/test_m.py::test_liar"])
    assert run.status == {"tests/test_m.py::test_liar": "failed"}


def test_hung_test_is_killed_with_its_children_best_effort(tmp_path):
    """best_effort: the process group is killed (the child writes its pid to the host)."""
    pid_file = tmp_path / "child.pid"
    repo = _repo(tmp_path, f"""
        import subprocess
        def test_first():
            assert f(0) == 1
        def test_hang():
            child = subprocess.Popen(['sleep', '60'])
            open({str(pid_file)!r}, 'w').write(str(child.pid))
            while True:
                pass
        """)
    ids = ["tests/test_m.py::test_first", "tests/test_m.py::test_hang"]
    start = time.monotonic()
    run = run_tests(repo, ids, limits=Limits(timeout_s=1.5), isolation="best_effort")
    assert time.monotonic() - start < 1.5 + 3.0
    assert run.timed_out
    assert run.status == {ids[0]: "passed", ids[1]: "missing"}
    child = int(pid_file.read_text())
    time.sleep(0.2)
    stat = pathlib.Path(f"/proc/{child}/stat")
    state = stat.read_text().rsplit(")", 1)[1].split()[0] if stat.exists() else "gone"
    assert state in ("gone", "Z", "X"), f"child sleep process still alive (state {state})"


@pytest.mark.parametrize("isolation", ["namespaces", "best_effort"])
def test_memory_network_and_output_limits(tmp_path, isolation):
    """The limits hold in both modes; the network is refused by the socket patch (best_effort)
    or unreachable (namespaces: no interface but loopback)."""
    repo = _repo(tmp_path, """
        import socket
        def test_memory():
            x = bytearray(2 * 1024 ** 3)
        def test_network():
            socket.create_connection(('127.0.0.1', 9))
        def test_socket():
            socket.socket()
        def test_flood():
            for _ in range(200):
                print('x' * 10000)
        def test_after():
            assert f(2) == 3
        """)
    ids = [f"tests/test_m.py::test_{n}" for n in ("memory", "network", "socket", "flood", "after")]
    run = run_tests(repo, ids, limits=Limits(memory_mb=256, file_size_mb=1, output_bytes=5000),
                    isolation=isolation)
    assert run.messages[ids[0]].startswith("MemoryError")
    if isolation == "best_effort":
        assert "network access is disabled" in run.messages[ids[1]]
        assert "network access is disabled" in run.messages[ids[2]]
    else:
        assert run.messages[ids[1]].startswith("ConnectionRefusedError")
        assert run.status[ids[2]] == "passed"  # a socket, but nothing to reach
    assert run.status[ids[3]] in ("failed", "missing")  # EFBIG once the output file is full
    assert len(run.output) <= 5000
    assert set(run.status.values()) <= {"failed", "missing", "passed"}


def test_parse_results_pytest_format():
    out = "junk\nPASSED a.py::t1\nFAILED a.py::t2 - assert 1 == 2\nERROR a.py::t3 - boom\n"
    status, msgs = sandbox.parse_results(out, ["a.py::t1", "a.py::t2", "a.py::t3", "a.py::t4"])
    assert status == {"a.py::t1": "passed", "a.py::t2": "failed", "a.py::t3": "error",
                      "a.py::t4": "missing"}
    assert msgs == {"a.py::t2": "assert 1 == 2", "a.py::t3": "boom"}


@pytest.mark.parametrize("text,expected", [
    ("ls", tools.Command("ls")),
    ("  LS tests ", tools.Command("ls", "tests")),
    ("Action: cat m.py 2 5", tools.Command("cat", "m.py", 2, 5)),
    ("```\ncat m.py\n```", tools.Command("cat", "m.py")),
    ("grep 'x + 1'", tools.Command("grep", "x + 1")),
    ("test", tools.Command("test")),
    ("submit", tools.Command("submit")),
    ("replace m.py\n<<<\n    return x + 1\n===\n    return x + 2\n>>>",
     tools.Command("replace", "m.py", old="    return x + 1", new="    return x + 2")),
    ("replace m.py\n<<<\na\nb\n===\n>>>", tools.Command("replace", "m.py", old="a\nb", new="")),
])
def test_parse_command(text, expected):
    assert tools.parse_command(text) == expected


@pytest.mark.parametrize("text,message", [
    ("", "Empty command"),
    ("rm -rf /", "Unknown command"),
    ("I think I should look at the file", "Unknown command"),
    ("cat", "cat needs a path"),
    ("cat m.py 5", "cat needs a path"),
    ("cat m.py a b", "line numbers"),
    ("cat m.py 5 2", "START <= END"),
    ("grep", "grep needs"),
    ("ls\nls", "one command per turn"),
    ("replace m.py", "must be <<<"),
    ("replace\n<<<\na\n===\nb\n>>>", "needs a file path"),
    ("replace m.py\n<<<\na\nb\n>>>", "missing the ==="),
    ("replace m.py\n<<<\na\n===\nb", "missing the closing"),
    ("replace m.py\n<<<\n===\nb\n>>>", "old text is empty"),
])
def test_parse_command_errors(text, message):
    with pytest.raises(tools.ToolError, match=message):
        tools.parse_command(text)


def test_file_tools(tmp_path):
    two = "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n"
    repo = _repo(tmp_path, "", module=two)
    root = str(repo)
    assert tools.do_cat(root, "m.py", 4, 5) == "   4 | def g(x):\n   5 |     return x + 1"
    assert tools.do_grep(root, "def g") == "m.py:4: def g(x):"
    with pytest.raises(tools.ToolError, match="occurs 2 times"):
        tools.do_replace(root, "m.py", "    return x + 1", "    return x")
    with pytest.raises(tools.ToolError, match="not found"):
        tools.do_replace(root, "m.py", "   4 | def g(x):", "")
    with pytest.raises(tools.ToolError, match="no such file"):
        tools.do_cat(root, "nope.py")
    tools.do_replace(root, "m.py", "def g(x):\n    return x + 1", "def g(x):\n    return x - 1")
    assert (repo / "m.py").read_text() == two[:-6] + "x - 1\n"
