"""The PostgreSQL store's restart checkpoints (seed 003 §1.2: the seed's columns beside the descriptor and its
checksum, one row per agent) and terminal events (§1.3: at most one per key). A mixin of ``PostgresStore``, whose
fenced sections (``FencedStore``) call the ``_txn`` methods inside their transaction."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable

import msgspec
import psycopg

from safepoint.protocol import RecoveryOwnerTerminalEvent, RuntimeRestartCheckpoint
from safepoint.records import StoredDescriptor
from safepoint.store.postgres_schema import SCHEMA
from safepoint.store.postgres_values import as_bytes as _bytes
from safepoint.store.postgres_values import as_int as _int
from safepoint.store.postgres_values import as_iso as _iso

Connection = psycopg.Connection[tuple[object, ...]]

_checkpoint_decoder = msgspec.json.Decoder(RuntimeRestartCheckpoint)
_SEED_CHECKPOINT = (
    "mode, payload_json, created_at, updated_at, recovery_class, recovery_owner_id, execution_config_json"
)
_UPSERT_CHECKPOINT = ", ".join(
    f"{column} = EXCLUDED.{column}" for column in (*_SEED_CHECKPOINT.split(", "), "descriptor", "checksum")
)
_SEED_EVENT = "recovery_class, owner_id, generation, event_type, created_at, payload_json"


class PostgresRestartCheckpoints:
    _tx: Callable[..., contextlib.AbstractContextManager[Connection]]  # PostgresStore's transaction
    _require_run: Callable[[Connection, str], None]
    _own_runs: Callable[[Connection, list[str]], list[str]]

    def _put_restart_checkpoint_txn(self, handle: Connection, run_id: str, data: bytes) -> None:
        handle.execute(
            f"INSERT INTO {SCHEMA}.runtime_restart_checkpoints "
            f"(agent_id, {_SEED_CHECKPOINT}, descriptor, checksum) VALUES ({', '.join(['%s'] * 10)}) "
            f"ON CONFLICT (agent_id) DO UPDATE SET {_UPSERT_CHECKPOINT}",
            (run_id, *_checkpoint_columns(data), data, hashlib.sha256(data).hexdigest()),
        )

    def read_restart_checkpoint(self, run_id: str) -> StoredDescriptor | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            row = conn.execute(
                f"SELECT {_SEED_CHECKPOINT}, descriptor, checksum FROM {SCHEMA}.runtime_restart_checkpoints "
                "WHERE agent_id = %s",
                (run_id,),
            ).fetchone()
        if row is None:
            return None
        data = _bytes(row[7])
        if hashlib.sha256(data).hexdigest() != row[8]:
            return StoredDescriptor(data=data, intact=False, detail="checksum does not match")
        # The seed's columns are written from the descriptor; a row whose columns say otherwise was changed
        # after it was written (by hand, or half an update), so neither side can be trusted.
        if tuple(row[:7]) != _checkpoint_columns(data, updated_at=row[3]):
            return StoredDescriptor(data=data, intact=False, detail="the row's columns disagree with its descriptor")
        return StoredDescriptor(data=data, intact=True)

    def _delete_restart_checkpoint_txn(self, handle: Connection, run_id: str) -> None:
        handle.execute(f"DELETE FROM {SCHEMA}.runtime_restart_checkpoints WHERE agent_id = %s", (run_id,))

    def list_restart_checkpoints(self) -> list[str]:
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT c.agent_id FROM {SCHEMA}.runtime_restart_checkpoints c "
                f"JOIN {SCHEMA}.runs r ON r.run_id = c.agent_id ORDER BY r.created_at, r.run_id"
            ).fetchall()
            return self._own_runs(conn, [str(row[0]) for row in rows])

    # terminal events --------------------------------------------------------------------------------------
    def _add_terminal_event_txn(self, handle: Connection, run_id: str, event: RecoveryOwnerTerminalEvent) -> bool:
        recorded = handle.execute(
            f"INSERT INTO {SCHEMA}.recovery_owner_terminal_events ({_SEED_EVENT}) "
            "VALUES (%s, %s, %s, %s, %s::timestamptz, %s) ON CONFLICT DO NOTHING RETURNING 1",
            (
                event.recovery_class,
                event.owner_id,
                event.generation,
                event.event_type,
                event.created_at,
                event.payload_json,
            ),
        ).fetchone()
        return recorded is not None

    def terminal_events(self, run_id: str) -> list[RecoveryOwnerTerminalEvent]:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                f"SELECT e.recovery_class, e.owner_id, e.generation, e.event_type, e.created_at, e.payload_json "
                f"FROM {SCHEMA}.recovery_owner_terminal_events e JOIN {SCHEMA}.recovery_owners o "
                "ON o.recovery_class = e.recovery_class AND o.owner_id = e.owner_id WHERE o.agent_id = %s "
                "ORDER BY e.created_at, e.generation, e.event_type",
                (run_id,),
            ).fetchall()
        return [
            RecoveryOwnerTerminalEvent(
                recovery_class=str(recovery_class),
                owner_id=str(owner_id),
                generation=_int(generation),
                event_type=str(event_type),
                created_at=_iso(created_at),
                payload_json=None if payload_json is None else str(payload_json),
            )
            for recovery_class, owner_id, generation, event_type, created_at, payload_json in rows
        ]


def _checkpoint_columns(data: bytes, *, updated_at: object = None) -> tuple[object, ...]:
    """The seed's columns for a descriptor. One that does not decode is still stored byte for byte (judging it is
    recovery's job: invalid_recovery_descriptor); its NOT NULL columns then say only that: mode '' and the time
    it was written (``updated_at``, when reading one back)."""
    try:
        checkpoint = _checkpoint_decoder.decode(data)
    except msgspec.DecodeError:
        written = updated_at if updated_at is not None else int(time.time() * 1000)
        return ("", None, written, written, None, None, None)
    return (
        checkpoint.mode,
        checkpoint.payload_json,
        checkpoint.created_at,
        checkpoint.updated_at,
        checkpoint.recovery_class,
        checkpoint.recovery_owner_id,
        checkpoint.execution_config_json,
    )
