"""Is the process that owns a run still alive? On this machine: its pid and start time (a recycled pid is not
mistaken for it). Elsewhere: a heartbeat younger than the lease, on the store's clock.

"This machine" is not a hostname, which containers and cloned VMs share: the host an owner records is
``hostname@machine#start`` where ``machine`` digests the kernel's boot id and the pid namespace, so two containers
called ``worker`` never judge each other's pids (rejected: the hostname alone, under which a container could find
the other's pid "dead" and take a live run over, or "alive" and never recover a dead one).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safepoint.records import OwnerState

OWNER_LEASE_SECONDS = 30.0  # an owner on another host is presumed alive this long after its heartbeat
# The store's time while a store judges an owner (a database sets it to its own clock for the claim it checks).
STORE_CLOCK: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("store_clock", default=None)


@contextlib.contextmanager
def store_clock(at: datetime | None) -> Iterator[None]:
    token = STORE_CLOCK.set(at)
    try:
        yield
    finally:
        STORE_CLOCK.reset(token)


@functools.cache
def machine_id() -> str:
    """A short digest of this kernel's boot and this pid namespace: what makes pids comparable."""
    parts = []
    for path in ("/proc/sys/kernel/random/boot_id",):
        with contextlib.suppress(OSError), open(path) as handle:
            parts.append(handle.read().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12] if parts else ""


def this_host() -> str:
    """The host part an owner record carries (before ``#start``)."""
    ident = machine_id()
    return f"{socket.gethostname()}@{ident}" if ident else socket.gethostname()


def on_this_host(state: OwnerState) -> bool:
    """Whether the owner's pid is one this process can judge: same hostname, same boot, same pid namespace. A
    record written before the machine was recorded (a bare hostname) is judged by its hostname, as it was."""
    host = state.host.rpartition("#")[0]
    return host == this_host() if "@" in host else host == socket.gethostname()


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


# This process's start time, by pid: it cannot change while the process lives, and a claim put it in every owner
# record it wrote by reading /proc (about 20 us of a claim's client CPU). Keyed by pid: a forked child is another
# process, with its own start time (rejected: ``functools.cache``, which a child would inherit as its own).
_own_start: tuple[int, str] | None = None


def own_start_time() -> str:
    """``process_start_time`` of this process, read once per process."""
    global _own_start
    pid = os.getpid()
    cached = _own_start
    if cached is None or cached[0] != pid:
        cached = _own_start = (pid, process_start_time(pid))
    return cached[1]


def process_is_alive(pid: int, start_time: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not start_time:
        return True
    current = own_start_time() if pid == os.getpid() else process_start_time(pid)
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


def owner_alive(state: OwnerState, at: datetime | None = None) -> bool:
    """Same machine: the recorded process still runs (pid and start time match). Elsewhere: a heartbeat younger
    than the lease, judged at ``at`` (default: the store's clock when one is set, else this host's)."""
    if on_this_host(state):
        return process_is_alive(state.pid, state.host.rpartition("#")[2])
    heartbeat = datetime.fromisoformat(state.heartbeat_at)
    now = at or STORE_CLOCK.get() or datetime.now(UTC)
    return (now - heartbeat).total_seconds() < OWNER_LEASE_SECONDS
