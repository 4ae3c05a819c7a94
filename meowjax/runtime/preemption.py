"""SIGTERM (preemption, ``kill``, a time limit) becomes a clean stop that keeps the work.

While the handler is installed (``on_sigterm``), a SIGTERM raises ``Preempted`` at once where
stopping loses nothing that a rerun does not redo exactly (game generation, evaluation, a
rollout: the state is unchanged by them), and waits for the end of a ``deferred`` section where
stopping half-way would lose or tear the state (an update step donates the old state's buffers;
a checkpoint save). Code in a deferred section polls ``requested()`` at its own boundaries.

In a multi-process run (``lockstep``) a SIGTERM is only recorded: the trainer's processes agree
on it at their step boundaries and all stop there together.

The trainer saves its last consistent state when ``Preempted`` reaches it; the entry point
(experiments/train.py) prints one line and exits with ``EXIT_STATUS``; rerunning the same
command resumes.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator

# EX_TEMPFAIL (sysexits.h): "a temporary failure; the user is invited to retry". Distinct from the
# 143 (128 + SIGTERM) of a process killed before it could save.
EXIT_STATUS = 75


class Preempted(BaseException):
    """SIGTERM arrived: the state was saved; rerun the same command to resume.

    A BaseException, as KeyboardInterrupt is: raised from the handler at any point, it must not
    be swallowed by an ``except Exception`` on its way up (``logging`` catches and prints every
    Exception raised while it writes a line)."""


class _Stop:
    """The process's one SIGTERM state (a signal handler is process-wide too)."""

    def __init__(self):
        self.requested = False
        self.defer = 0
        self.installed = 0
        self.lockstep = False


_STOP = _Stop()


def _handle(signum, frame) -> None:
    del signum, frame
    _STOP.requested = True
    if not _STOP.defer and not _STOP.lockstep:
        raise Preempted("SIGTERM")


def requested() -> bool:
    return _STOP.requested


def request() -> None:
    """What the handler records (tests use it to stop a run at a chosen point)."""
    _STOP.requested = True


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """Installs the handler for the block (nesting-safe: the outermost one restores the old
    handler); a fresh block starts with no request pending."""
    old = None
    if not _STOP.installed:
        _STOP.requested, _STOP.defer = False, 0
        old = signal.signal(signal.SIGTERM, _handle)
    _STOP.installed += 1
    try:
        yield
    finally:
        _STOP.installed -= 1
        if not _STOP.installed:
            signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section that must finish: a SIGTERM inside it only sets ``requested()``."""
    _STOP.defer += 1
    try:
        yield
    finally:
        _STOP.defer -= 1


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """A section inside a deferred one where stopping at once loses nothing (a rollout before
    its update); raises at entry if a SIGTERM is already pending."""
    if _STOP.lockstep:   # processes stop together, at the trainer's agreed points only
        yield
        return
    saved, _STOP.defer = _STOP.defer, 0
    try:
        if _STOP.requested and _STOP.installed:
            raise Preempted("SIGTERM")
        yield
    finally:
        _STOP.defer = saved


@contextlib.contextmanager
def lockstep() -> Iterator[None]:
    """A multi-process run: processes must stop at the same point of the program (a save is a
    collective), so a SIGTERM only records the request, nowhere raises, and the trainer agrees
    on stopping at its step boundaries (``runtime.multihost.any_process``)."""
    saved, _STOP.lockstep = _STOP.lockstep, True
    try:
        yield
    finally:
        _STOP.lockstep = saved
