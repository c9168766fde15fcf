"""Who may write a run: the ownership rules both backends apply under their own lock (a flock, a row lock)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

from tidemark.errors import RunLockedError, StaleGenerationError
import msgspec

from tidemark.store.base import Claim, OwnerState, RecoveryIdentity
from tidemark.store.liveness import owner_alive, process_start_time


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def next_owner(
    run_id: str,
    current: OwnerState | None,
    holder: str,
    *,
    takeover: bool,
    identity: RecoveryIdentity | None = None,
    reopen: bool = False,
) -> OwnerState:
    """The owner record a claim writes: the next generation, held by this process. A live holder is refused
    unless the claim is a takeover. The recovery identity is the first claim's and never changes; the terminal
    state is kept unless the claim reopens the run."""
    if current and not current.released and not takeover and owner_alive(current):
        raise RunLockedError(
            f"run {run_id!r} is owned by live process {current.pid} on {current.host} "
            f"(generation {current.generation}); wait for it, or pass --takeover to fence it off"
        )
    claimed = now()
    if current is not None:
        kept = RecoveryIdentity(
            recovery_class=current.recovery_class,
            owner_id=current.owner_id,
            agent_id=current.agent_id,
            message_id=current.message_id,
        )
    else:
        kept = identity or RecoveryIdentity(owner_id=run_id, agent_id=run_id)
    terminal = current is not None and current.terminal_at is not None and not reopen
    return OwnerState(
        recovery_class=kept.recovery_class,
        owner_id=kept.owner_id,
        generation=(current.generation if current else 0) + 1,
        agent_id=kept.agent_id,
        message_id=kept.message_id,
        active_at=current.active_at if current is not None and not reopen else claimed,
        terminal_at=current.terminal_at if terminal and current else None,
        terminal_status=current.terminal_status if terminal and current else None,
        holder=holder,
        pid=os.getpid(),
        host=f"{socket.gethostname()}#{process_start_time(os.getpid())}",
        claimed_at=claimed,
        heartbeat_at=claimed,
        lease_ms=current.lease_ms if current else 30_000,
    )


def closed_owner(current: OwnerState, terminal_status: str) -> OwnerState:
    return msgspec.structs.replace(current, terminal_at=now(), terminal_status=terminal_status)


def claim_of(run_id: str, state: OwnerState) -> Claim:
    return Claim(run_id=run_id, holder=state.holder, generation=state.generation)


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
