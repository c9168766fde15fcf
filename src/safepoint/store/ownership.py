"""Who may write a run: the ownership rules both backends apply under their own lock (a flock, a row lock)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import msgspec

from safepoint.errors import RunLockedError, StaleGenerationError, StoreError
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, OwnerState, RecoveryIdentity
from safepoint.store.liveness import own_start_time, owner_alive, this_host

# A claim waits this long for a write in progress to let go of the run's lock (a flock, a row lock); a writer
# stopped mid-write (SIGSTOP) would hold it forever, so past this the claim says so instead of hanging.
CLAIM_LOCK_TIMEOUT = 10.0
# Set by a supervisor for its worker: "RUN<TAB>HOLDER<TAB>GENERATION", the claim the worker takes the run from.
HANDOFF_ENV = "SAFEPOINT_HANDOFF"


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
    if takeover and not handed_over(run_id, current):
        takeover = False  # the claim this process was handed is gone: someone took the run since; never steal it
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
        if kept.agent_id != run_id:  # an agent is a run: the owner row is found by its agent_id
            raise StoreError(
                f"run {run_id!r}: the recovery identity names agent {kept.agent_id!r}; an agent's id is its run id"
            )
        if kept.recovery_class == "root" and kept.owner_id != run_id:
            # A root run answers for itself. This also keeps a run's owner key ('root', run id), which a database
            # reserves when the run is created, from being taken by another run's identity.
            raise StoreError(f"run {run_id!r}: a root run's owner_id is its own run id, not {kept.owner_id!r}")
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
        host=f"{this_host()}#{own_start_time()}",
        claimed_at=claimed,
        heartbeat_at=claimed,
        lease_ms=current.lease_ms if current else 30_000,
    )


def handed_over(run_id: str, current: OwnerState | None) -> bool:
    """Whether a takeover of ``run_id`` may go ahead in this process. A supervisor's worker is handed a run by
    the supervisor's claim (``HANDOFF_ENV``: run id, holder, generation) and takes over that claim only: a worker
    that stalled before its claim, and woke after another supervisor took the run, must not take it back."""
    handoff = os.environ.get(HANDOFF_ENV, "")
    handed_run, _, rest = handoff.partition("\t")
    if handed_run != run_id:
        return True  # not a hand-off (a person's --takeover), or another run's
    holder, _, generation = rest.partition("\t")
    return current is not None and current.holder == holder and str(current.generation) == generation


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


def check_event(run_id: str, event: RecoveryOwnerTerminalEvent, current: OwnerState) -> None:
    """A terminal event belongs to the run's own recovery owner: ``terminal_events(run_id)`` finds it by that owner
    (a database keys the events by owner, not by run), so an event naming another owner would be lost. Its
    ``created_at`` must be an ISO time with a zone: a database stores it as one, and a zoneless one would shift."""
    if (event.recovery_class, event.owner_id) != (current.recovery_class, current.owner_id):
        raise StoreError(
            f"run {run_id!r}: terminal event for owner {event.recovery_class}/{event.owner_id} but the run's "
            f"recovery owner is {current.recovery_class}/{current.owner_id}; record it under that owner's run"
        )
    try:
        zoned = datetime.fromisoformat(event.created_at).tzinfo is not None
    except ValueError:
        zoned = False
    if not zoned:
        raise StoreError(
            f"run {run_id!r}: terminal event created_at {event.created_at!r} is not an ISO time with a zone; "
            "use safepoint.store.ownership.now()"
        )


def event_key(event: RecoveryOwnerTerminalEvent) -> tuple[str, str, int, str]:
    """What makes a terminal event unique (seed 003 §1.3)."""
    return (event.recovery_class, event.owner_id, event.generation, event.event_type)


def stuck_lock(run_id: str) -> RunLockedError:
    return RunLockedError(
        f"run {run_id!r}: another process holds the run's lock in the middle of a write and does not let go "
        "(stopped with SIGSTOP?); end that process, then take over"
    )
