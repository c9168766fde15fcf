"""Is the process that owns a run still alive? pid plus start time, so a recycled pid is not mistaken for it."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safepoint.records import OwnerState

OWNER_LEASE_SECONDS = 30.0  # an owner on another host is presumed alive this long after its heartbeat


def process_start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` in clock ticks since boot ('' where /proc is not available)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else ""


def process_is_alive(pid: int, start_time: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not start_time:
        return True
    current = process_start_time(pid)
    if not current:
        return True
    # A zombie (killed, not yet reaped) still has its /proc entry; its state field says Z.
    return current == start_time and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state in (b"Z", b"X")


def owner_alive(state: OwnerState) -> bool:
    """Same host: the recorded process still runs (pid and start time match). Elsewhere: a fresh heartbeat."""
    host, _, start = state.host.rpartition("#")
    if host == socket.gethostname():
        return process_is_alive(state.pid, start)
    heartbeat = datetime.fromisoformat(state.heartbeat_at)
    return (datetime.now(UTC) - heartbeat).total_seconds() < OWNER_LEASE_SECONDS
