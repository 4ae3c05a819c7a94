"""One run per workdir: a second process started on the same workdir stops before touching it.

Two runs writing one workdir would interleave checkpoints (each resuming from the other's) and
append to one metrics file. The lock is ``fcntl.flock`` on ``<workdir>/.lock``: the kernel drops
it when the holder exits, however it exits, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from typing import Iterator

LOCK_FILE = ".lock"


class WorkdirBusy(RuntimeError):
    """Another process holds the workdir's lock."""


@contextlib.contextmanager
def hold(workdir: str) -> Iterator[None]:
    """Holds ``<workdir>/.lock`` for the block; WorkdirBusy at once if another process has it.
    The file keeps the holder's pid, for the message."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise WorkdirBusy(
                f"Another run (pid {holder}) is using the workdir {workdir}; wait for it to end, "
                "stop it (SIGTERM saves its state), or pass another --workdir.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock
