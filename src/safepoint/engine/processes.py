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
import select
import signal
import time

from safepoint.durable import write_private
from safepoint.engine.reaper import descendants
from safepoint.store.liveness import process_is_alive, process_start_time

_PREFIX = "proc-"
_FREEZE_ROUNDS = 50  # passes of SIGSTOP over a tree that keeps forking before it is killed anyway
_DEATH_SECONDS = 10.0  # at most, for a killed process to be gone (normally at once)


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
    """Kill ``pid`` and every process below it, and return once they are dead. The tree is frozen first (SIGSTOP
    until no new process shows up), then killed: killing the top first would hand its orphans to init, out of
    reach. Dead on return, not merely signalled: a process SIGKILL has reached still finishes the system call it
    is in (a write into the run's control channel), so an approval wait that begins after a sweep must find its
    leftovers gone (rejected: returning at once, which made "none alive when the wait begins" hold only when the
    kernel was quick)."""
    frozen: set[int] = set()
    for _ in range(_FREEZE_ROUNDS):
        found = {pid, *descendants(pid)} - frozen
        if not found:
            break
        for member in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGSTOP)
        frozen |= found
    handles = _handles(frozen)  # taken while they are stopped: a handle pins its process, never a reused pid
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the group too (where /proc is not there to list the tree)
        for member in frozen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGKILL)
        _wait_dead(handles)
    finally:
        for fd in handles.values():
            os.close(fd)


def _handles(pids: set[int]) -> dict[int, int]:
    """A pidfd per live process (Linux 5.3+): it becomes readable when the process has exited."""
    opener = getattr(os, "pidfd_open", None)
    handles: dict[int, int] = {}
    if opener is None:
        return handles
    for member in pids:
        with contextlib.suppress(OSError):  # gone already, or not ours to watch
            handles[member] = opener(member)
    return handles


def _wait_dead(handles: dict[int, int]) -> None:
    """Until every process behind ``handles`` has exited: an event from the kernel, not a poll of /proc. Bounded
    (``_DEATH_SECONDS``) only for a process stuck in an uninterruptible sleep (a hung network mount), which the
    pending SIGKILL keeps from running any more of its own code."""
    if not handles:
        return
    poller = select.poll()
    for fd in handles.values():
        poller.register(fd, select.POLLIN)
    left = len(handles)
    deadline = time.monotonic() + _DEATH_SECONDS
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        for fd, _ in poller.poll(remaining * 1000):
            poller.unregister(fd)
            left -= 1


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
