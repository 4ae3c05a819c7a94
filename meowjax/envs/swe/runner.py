"""Stdlib-only test runner, executed as a script inside the sandbox subprocess.

Usage (cwd = the repository snapshot): ``python runner.py TEST_ID [TEST_ID ...]`` where a test id
is ``path/to/test_file.py::test_function``. Each test function is called with no arguments; it
passes unless it raises. One line per test goes to stdout, flushed immediately so that a test that
hangs still leaves the earlier results behind:

    <nonce>PASSED tests/test_x.py::test_a
    <nonce>FAILED tests/test_x.py::test_b - AssertionError at: assert f(1) == 2
    <nonce>ERROR tests/test_x.py::test_c - ImportError: ...

(the same words pytest's ``-rA`` summary uses, so one parser reads both). ``<nonce>`` is read from
the MEOWJAX_SWE_NONCE environment variable and removed from the environment before any code under
test runs, so the code under test cannot easily forge result lines (best effort, not a security
boundary: the process's initial environment, /proc/self/environ, still holds it).

This file must not import anything from meowjax (it runs with only the stdlib in reach).
"""

import importlib.util
import os
import sys
import traceback


def _load(path: str, cache: dict):
    if path not in cache:
        name = "_swe_test_" + path.replace("/", "_").replace(".", "_")
        spec = importlib.util.spec_from_file_location(name, os.path.join(os.getcwd(), path))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load test file {path}")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - any failure to import is the tests' error
            cache[path] = e
        else:
            cache[path] = module
    return cache[path]


def _describe(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = frames[-1] if frames else None
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, AssertionError) and not str(e) and where is not None and where.line:
        text = f"{text} at: {where.line.strip()}"
    elif where is not None:
        text = f"{text} ({os.path.basename(where.filename)}:{where.lineno})"
    return " ".join(text.split())[:300]


def main(test_ids: list) -> int:
    nonce = os.environ.pop("MEOWJAX_SWE_NONCE", "")
    out = sys.stdout
    sys.path[0] = os.getcwd()  # the repo, not this file's folder
    cache: dict = {}
    failed = 0
    for test_id in test_ids:
        path, _, func_name = test_id.partition("::")
        try:
            module = _load(path, cache)
        except BaseException as e:  # noqa: BLE001
            module = e
        if isinstance(module, BaseException):
            out.write(f"{nonce}ERROR {test_id} - {_describe(module)}\n")
            out.flush()
            failed += 1
            continue
        func = getattr(module, func_name, None)
        if not callable(func):
            out.write(f"{nonce}ERROR {test_id} - no test function {func_name!r} in {path}\n")
            out.flush()
            failed += 1
            continue
        try:
            func()
        except (Exception, SystemExit) as e:
            out.write(f"{nonce}FAILED {test_id} - {_describe(e)}\n")
            failed += 1
        else:
            out.write(f"{nonce}PASSED {test_id}\n")
        out.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
