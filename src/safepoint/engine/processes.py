"""Processes a tool started, so that a crashed owner's leftovers never run alongside its successor (promise 6).

A command runs under its own reaper process (``engine/reaper.py``): a child subreaper in its own process group, so
every process the command starts stays below it, even one that ``setsid``s or double-forks. That also means SIGKILL
of the agent leaves it running. Each reaper is noted in the run's scratch folder while it runs; whoever claims the
run next kills the trees still alive (matched by start time, so a recycled pid is never hit) before deciding
anything. Page-cache durability is enough here: after a power loss no process survives anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal

from safepoint.durable import write_private
from safepoint.engine.reaper import descendants
from safepoint.store.liveness import process_is_alive, process_start_time

_PREFIX = "proc-"
_FREEZE_ROUNDS = 50  # passes of SIGSTOP over a tree that keeps forking before it is killed anyway


_running: set[int] = set()  # the process groups of commands running in this process now


def running_groups() -> set[int]:
    """The commands this process runs now (their process groups): a Ctrl-C stops them (``engine.shutdown``)."""
    return set(_running)


class ProcessNotes:
    def __init__(self, scratch: str | None) -> None:
        self.scratch = scratch

    def started(self, pid: int) -> None:
        _running.add(pid)
        if self.scratch is None:
            return
        write_private(os.path.join(self.scratch, f"{_PREFIX}{pid}"), process_start_time(pid).encode())

    def ended(self, pid: int) -> None:
        _running.discard(pid)
        if self.scratch is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.scratch, f"{_PREFIX}{pid}"))


def kill_tree(pid: int) -> None:
    """Kill ``pid`` and every process below it. The tree is frozen first (SIGSTOP until no new process shows up),
    then killed: killing the top first would hand its orphans to init, out of reach."""
    frozen: set[int] = set()
    for _ in range(_FREEZE_ROUNDS):
        found = {pid, *descendants(pid)} - frozen
        if not found:
            break
        for member in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGSTOP)
        frozen |= found
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the group too (where /proc is not there to list the tree)
    for member in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)


def kill_leftovers(scratch: str) -> list[int]:
    """Kill the process trees a previous owner of the run left running; returns the pids of their tops."""
    killed = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(scratch):
            if not name.startswith(_PREFIX):
                continue
            pid = int(name[len(_PREFIX) :])
            with open(os.path.join(scratch, name)) as handle:
                start = handle.read().strip()
            if process_is_alive(pid, start):
                kill_tree(pid)
                killed.append(pid)
    return killed
