"""What every part's checks share: sample records, and failing with a message that names the broken promise.

Checks raise ``AssertionError`` (not pytest's): the suite runs wherever ``safepoint`` is installed.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from safepoint.errors import StaleGenerationError
from safepoint.protocol import RecoveryOwnerTerminalEvent, RuntimeRestartCheckpoint
from safepoint.records import Claim, LogRecord
from safepoint.store.base import Store
from safepoint.store.ownership import now

StoreFactory = Callable[..., Store]
Check = Callable[[StoreFactory], None]


def record(seq: int, text: str = "x", kind: str = "event") -> LogRecord:
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq, gen=0)


def fail(message: str) -> None:
    raise AssertionError(message)


def refused(what: str, action: Callable[[], object], error: type[Exception] = StaleGenerationError) -> None:
    try:
        action()
    except error:
        return
    fail(f"{what} must raise {error.__name__}")


def restart_checkpoint(run_id: str, turn: int = 1) -> bytes:
    """An encoded restart checkpoint, as the runtime writes one."""
    return msgspec.json.encode(
        RuntimeRestartCheckpoint(
            agent_id=run_id,
            mode="reaction_loop",
            payload_json=f'{{"payload_kind":"reaction_loop","turn":{turn}}}',
            created_at=1_700_000_000_000,
            updated_at=1_700_000_000_000 + turn,
            recovery_class="root",
            recovery_owner_id=run_id,
            execution_config_json='{"generation":1,"model":"m"}',
        )
    )


def terminal_event(
    claim: Claim, store: Store, event_type: str = "closed", payload: str | None = None
) -> RecoveryOwnerTerminalEvent:
    owner = store.owner(claim.run_id)
    if owner is None:
        raise AssertionError("the run has no owner after a claim")
    return RecoveryOwnerTerminalEvent(
        recovery_class=owner.recovery_class,
        owner_id=owner.owner_id,
        generation=claim.generation,
        event_type=event_type,
        created_at=now(),
        payload_json=payload,
    )
