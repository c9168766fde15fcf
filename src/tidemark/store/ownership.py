"""Who may write a run: the ownership rules both backends apply under their own lock (a flock, a row lock)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

from tidemark.errors import RunLockedError, StaleGenerationError
from tidemark.store.base import Claim, OwnerState
from tidemark.store.liveness import owner_alive, process_start_time


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def next_owner(run_id: str, current: OwnerState | None, owner_id: str, *, takeover: bool) -> OwnerState:
    """The owner record a claim writes: the next generation, for this process. A live owner is refused unless
    the claim is a takeover."""
    if current and not current.released and not takeover and owner_alive(current):
        raise RunLockedError(
            f"run {run_id!r} is owned by live process {current.pid} on {current.host} "
            f"(generation {current.generation}); wait for it, or pass --takeover to fence it off"
        )
    claimed = now()
    return OwnerState(
        owner_id=owner_id,
        generation=(current.generation if current else 0) + 1,
        pid=os.getpid(),
        host=f"{socket.gethostname()}#{process_start_time(os.getpid())}",
        claimed_at=claimed,
        heartbeat_at=claimed,
    )


def check_current(claim: Claim, current: OwnerState | None) -> OwnerState:
    """The owner record, if ``claim`` is still the run's current generation; a stale writer is refused."""
    if current is None or current.generation != claim.generation or current.released:
        newer = current.generation if current else "none"
        raise StaleGenerationError(
            f"run {claim.run_id!r}: this process writes as generation {claim.generation} but the run is now "
            f"at generation {newer}; it was taken over, so this process stops without writing"
        )
    return current


def stuck_lock(run_id: str) -> RunLockedError:
    return RunLockedError(
        f"run {run_id!r}: another process holds the run's lock in the middle of a write and does not let go "
        "(stopped with SIGSTOP?); end that process, then take over"
    )
