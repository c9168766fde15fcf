"""Processes a tool started, so that a crashed owner's leftovers never run alongside its successor (promise 6).

A command runs in its own process group (so a timeout can kill all of it); that also means SIGKILL of the agent
leaves it running. Each group is noted in the run's scratch folder while it runs; whoever claims the run next
kills the groups still alive (matched by start time, so a recycled pid is never hit) before deciding anything.
Page-cache durability is enough here: after a power loss no process survives anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal

from safepoint.store.liveness import process_is_alive, process_start_time

_PREFIX = "proc-"


class ProcessNotes:
    def __init__(self, scratch: str | None) -> None:
        self.scratch = scratch

    def started(self, pid: int) -> None:
        if self.scratch is None:
            return
        with open(os.path.join(self.scratch, f"{_PREFIX}{pid}"), "w") as handle:
            handle.write(process_start_time(pid))

    def ended(self, pid: int) -> None:
        if self.scratch is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.scratch, f"{_PREFIX}{pid}"))


def kill_leftovers(scratch: str) -> list[int]:
    """Kill the process groups a previous owner of the run left running; returns their pids."""
    killed = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(scratch):
            if not name.startswith(_PREFIX):
                continue
            pid = int(name[len(_PREFIX) :])
            with open(os.path.join(scratch, name)) as handle:
                start = handle.read().strip()
            if process_is_alive(pid, start):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                    killed.append(pid)
    return killed
