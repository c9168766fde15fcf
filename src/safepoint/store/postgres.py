"""The PostgreSQL store: the file store's contract on a shared database (``postgresql://...``).

The schema and its versioned migrations are in ``safepoint.store.postgres_schema``.

Only what differs from the file store lives here: ownership and the fenced writes are ``FencedStore``'s, this
module supplies its critical section and the SQL of each write (the ``_txn`` hooks take the open connection).

Fencing: ``claim`` and every write lock the run's ``recovery_owners`` row (``SELECT ... FOR UPDATE``) for one
short transaction and compare generations, like the file store's flock; the lock dies with the transaction, so a
killed writer never blocks a takeover. The row is made with the run (as ``('root', run_id)``, generation 0) so
there is always one to lock; the first claim gives it the run's recovery identity. ``generation`` and the other
seed columns are the truth (the seed's own SQL, e.g. §5.1's close, works on them); ``holder_state`` adds only who
holds the run now. ``durable=False`` commits with ``synchronous_commit = off``. Liveness of an owner is the file
store's rule (same host: pid and start time; elsewhere: a heartbeat younger than the lease).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from safepoint.errors import (
    CorruptRecordError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from safepoint.protocol import RecoveryOwnerTerminalEvent, RuntimeRestartCheckpoint
from safepoint.records import Claim, LogProblem, LogRead, LogRecord, OwnerState, RecoveryIdentity, StoredDescriptor
from safepoint.store.crypt import check_key, check_not_orphaned, read_marker
from safepoint.store.fenced import FencedStore, fork_error
from safepoint.store.framing import check_line, check_one_line, frame, read_records
from safepoint.store.names import check_job_id, check_run_id, mask_passwords, safe_url
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT, stuck_lock
from safepoint.store.postgres_blobs import PostgresBlobs
from safepoint.store.postgres_schema import LATEST, SCHEMA, SchemaChange, ensure_schema

CONNECT_TIMEOUT = 10  # seconds to reach the server before giving up with a one-line error
_record_encoder = msgspec.json.Encoder()
_checkpoint_decoder = msgspec.json.Decoder(RuntimeRestartCheckpoint)
_SEED_OWNER = "recovery_class, owner_id, generation, agent_id, message_id, active_at, terminal_at, terminal_status"
_SEED_CHECKPOINT = (
    "mode, payload_json, created_at, updated_at, recovery_class, recovery_owner_id, execution_config_json"
)
_UPSERT_CHECKPOINT = ", ".join(
    f"{column} = EXCLUDED.{column}" for column in (*_SEED_CHECKPOINT.split(", "), "descriptor", "checksum")
)
_SEED_EVENT = "recovery_class, owner_id, generation, event_type, created_at, payload_json"


def _one_line(exc: BaseException, url: str) -> str:
    text = mask_passwords(str(exc), url).strip().splitlines()  # libpq may quote the URL, or a piece of it
    return text[0] if text else type(exc).__name__


Connection = psycopg.Connection[tuple[object, ...]]


def migrate(url: str, *, to: int = LATEST) -> SchemaChange:
    """Bring the database at ``url`` to schema version ``to`` (default: this safepoint's), in one transaction; the
    library form of ``safepoint db migrate``. A database already there is left as it is."""
    shown = safe_url(url)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn, conn.transaction():
            return ensure_schema(conn, shown, upgrade=True, to=to)
    except psycopg.Error as exc:
        raise StoreError(f"cannot migrate PostgreSQL store {shown}: {_one_line(exc, url)}") from None


class PostgresStore(PostgresBlobs, FencedStore[Connection]):
    def __init__(self, url: str, *, pool_size: int = 4, migrate: bool = False) -> None:
        """``migrate``: upgrade a database at an older schema version when opening it (a fresh one is always set
        up; see ``safepoint.store.postgres_schema`` for why an upgrade is not automatic)."""
        self.url = url
        self.shown = safe_url(url)
        self._migrate = migrate
        self._pool_size = pool_size
        self._pool: ConnectionPool | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        self._opening = threading.Lock()

    # connections ------------------------------------------------------------------------------------------
    def _open_pool(self) -> ConnectionPool:
        with self._opening:
            if self._pool is not None:
                return self._pool
            try:  # one plain connection first: its failure says why (the pool's would only time out)
                with (
                    psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn,
                    conn.transaction(),
                ):
                    ensure_schema(conn, self.shown, upgrade=self._migrate)
                    if not self.sealed:  # an encrypted store opened without its key stops here, in one line
                        marker = self._encryption_txn(conn)
                        check_key(None if marker is None else read_marker(marker, self.shown), None, self.shown)
                        if marker is None:
                            first = conn.execute(f"SELECT run_id, header FROM {SCHEMA}.runs LIMIT 1").fetchone()
                            header = check_line(_bytes(first[1]).removesuffix(b"\n")) if first else None
                            check_not_orphaned(header, None, self.shown)
            except psycopg.Error as exc:
                raise StoreError(f"cannot open PostgreSQL store {self.shown}: {_one_line(exc, self.url)}") from None
            self._pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
                timeout=CONNECT_TIMEOUT * 3,
                # A connection the server dropped (a restart) is replaced, not handed out to fail.
                check=ConnectionPool.check_connection,
                name=POOL_NAME,
                open=True,
            )
            # A store dropped without ``close()`` (a session's reference cycles keep it until the collector runs)
            # still closes its pool; the finalizer holds the pool, so the pool is never garbage itself.
            self._closer = weakref.finalize(self, _close_pool, self._pool)
            return self._pool

    @contextlib.contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[Connection]:
        """A connection inside one transaction; database failures become one-line ``StoreError``s."""
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn, conn.transaction():
                if not durable:
                    conn.execute("SET LOCAL synchronous_commit = off")
                yield conn
        except pg_errors.LockNotAvailable:
            raise  # a lock_timeout the caller set, and turns into its own message (a stuck owner, a stuck sender)
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL store {self.shown}: {_one_line(exc, self.url)}") from None

    @contextlib.contextmanager
    def _pool_connection(self) -> Iterator[Connection]:
        """A connection of the pool outside any transaction (a session-level lock is held on it)."""
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn:
                yield conn
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL store {self.shown}: {_one_line(exc, self.url)}") from None

    def _require_run(self, conn: Connection, run_id: str) -> None:
        if conn.execute(f"SELECT 1 FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,)).fetchone() is None:
            raise self._not_found(run_id)

    def _not_found(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(f"run {run_id!r} not found in store {self.shown}; list runs with `safepoint status`")

    # runs -------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, header: bytes) -> None:
        check_run_id(run_id)
        with self._tx() as conn:
            created = conn.execute(
                f"INSERT INTO {SCHEMA}.runs (run_id, header) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (run_id, frame(header)),
            ).fetchone()
            if created is None:
                raise RunExistsError(f"run {run_id!r} already exists in {self.shown}; pick another --run-id")
            if not self.sealed and (marker := self._encryption_txn(conn)) is not None:
                # Made encrypted since this process opened it (record_encryption waits for this insert, or this
                # insert for it): the transaction rolls back.
                check_key(read_marker(marker, self.shown), None, self.shown)
            # The owner row every claim and write locks; its identity is the first claim's to set.
            conn.execute(
                f"INSERT INTO {SCHEMA}.recovery_owners (recovery_class, owner_id, generation, agent_id) "
                "VALUES ('root', %s, 0, %s)",
                (run_id, run_id),
            )

    def run_header(self, run_id: str) -> bytes:
        with self._tx() as conn:
            row = conn.execute(f"SELECT header FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"run {run_id!r} not found in store {self.shown}; list runs with `safepoint status`")
        payload = check_line(_bytes(row[0]).removesuffix(b"\n"))
        if payload is None:
            raise CorruptRecordError(
                f"header of run {run_id!r} (in {self.shown}) fails its checksum; the run cannot be read"
            )
        return payload

    def list_runs(self) -> list[str]:
        with self._tx() as conn:
            rows = conn.execute(f"SELECT run_id FROM {SCHEMA}.runs ORDER BY created_at, run_id").fetchall()
        return [str(row[0]) for row in rows]

    # ownership --------------------------------------------------------------------------------------------
    def _lock_owner(self, conn: Connection, run_id: str) -> OwnerState | None:
        """Lock the run's owner row for this transaction and return the owner it records."""
        row = conn.execute(
            f"SELECT {_SEED_OWNER}, holder_state FROM {SCHEMA}.recovery_owners WHERE agent_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        if row is None:
            self._require_run(conn, run_id)
            raise StoreError(
                f"run {run_id!r} in {self.shown} has no recovery owner row: the run was made by an older safepoint "
                "(its schema had an owners table) or the store was edited by hand"
            )
        return _owner_state(row)

    def _write_owner(self, conn: Connection, run_id: str, state: OwnerState) -> None:
        conn.execute(
            f"UPDATE {SCHEMA}.recovery_owners SET recovery_class = %s, owner_id = %s, generation = %s, "
            "message_id = %s, active_at = %s::timestamptz, terminal_at = %s::timestamptz, terminal_status = %s, "
            "holder_state = %s WHERE agent_id = %s",
            (
                state.recovery_class,
                state.owner_id,
                state.generation,
                state.message_id,
                state.active_at,
                state.terminal_at,
                state.terminal_status,
                _record_encoder.encode(state),
                run_id,
            ),
        )

    def owner(self, run_id: str) -> OwnerState | None:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT {_SEED_OWNER}, holder_state FROM {SCHEMA}.recovery_owners WHERE agent_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else _owner_state(row)

    # the critical section FencedStore builds on ---------------------------------------------------------------
    @contextlib.contextmanager
    def _owner_section(
        self, run_id: str, *, claiming: bool = False, durable: bool = True
    ) -> Iterator[tuple[Connection, OwnerState | None]]:
        with self._tx(durable=durable) as conn:
            if claiming:
                self._require_run(conn, run_id)
                # An append in progress holds the row for milliseconds; one stopped mid-transaction holds it
                # until its connection dies: wait a while, then say so (the file store's CLAIM_LOCK_TIMEOUT).
                conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
            yield conn, self._lock_owner(conn, run_id)

    def _write_owner_txn(self, handle: Connection, run_id: str, state: OwnerState) -> None:
        self._write_owner(handle, run_id, state)

    def claim(
        self,
        run_id: str,
        holder: str,
        *,
        takeover: bool = False,
        identity: RecoveryIdentity | None = None,
        reopen: bool = False,
    ) -> Claim:
        check_run_id(run_id)
        try:
            return super().claim(run_id, holder, takeover=takeover, identity=identity, reopen=reopen)
        except pg_errors.LockNotAvailable:
            raise stuck_lock(run_id) from None
        except pg_errors.UniqueViolation:  # only a first claim sets (recovery_class, owner_id)
            kept = identity or RecoveryIdentity(owner_id=run_id, agent_id=run_id)
            raise StoreError(
                f"run {run_id!r}: recovery owner {kept.recovery_class}/{kept.owner_id} already answers for another "
                f"run in {self.shown}; each agent has its own recovery owner"
            ) from None

    def _delete_run_txn(self, handle: Connection, run_id: str) -> None:
        # One transaction: the terminal events (keyed by the recovery owner, not the run), then the run's row,
        # whose foreign keys take its log, owner, restart checkpoint, control, artifacts and trace with it.
        handle.execute(
            f"DELETE FROM {SCHEMA}.recovery_owner_terminal_events e USING {SCHEMA}.recovery_owners o "
            "WHERE o.agent_id = %s AND e.recovery_class = o.recovery_class AND e.owner_id = o.owner_id",
            (run_id,),
        )
        handle.execute(f"DELETE FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,))

    def _after_delete(self, run_id: str) -> None:
        scratch = self.scratch_dir(run_id)
        if scratch is not None:  # this host's folder of the run's writes in flight
            shutil.rmtree(os.path.dirname(scratch), ignore_errors=True)

    # the log ----------------------------------------------------------------------------------------------
    def _log_end_txn(self, handle: Connection, claim: Claim) -> int:
        row = handle.execute(f"SELECT coalesce(max(seq), 0) FROM {SCHEMA}.log WHERE run_id = %s", (claim.run_id,))
        found = row.fetchone()
        return _int(found[0]) if found is not None else 0

    def _append_txn(self, handle: Connection, claim: Claim, records: Sequence[LogRecord], *, durable: bool) -> None:
        # ``durable`` is the transaction's (synchronous_commit, set by the section): nothing to do per insert.
        try:
            with handle.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {SCHEMA}.log (run_id, seq, line) VALUES (%s, %s, %s)",
                    [(claim.run_id, record.seq, frame(_record_encoder.encode(record))) for record in records],
                )
        except pg_errors.UniqueViolation:  # two writers of one generation raced past the check
            raise fork_error(claim.run_id, records[0].seq, None) from None

    def read_log(self, run_id: str) -> LogRead:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                f"SELECT seq, line FROM {SCHEMA}.log WHERE run_id = %s ORDER BY seq", (run_id,)
            ).fetchall()
        lines: list[tuple[int, bytes | LogProblem]] = []
        for seq_value, line in rows:
            seq = _int(seq_value)
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            damaged = LogProblem(kind="corrupt", position=seq, detail="checksum does not match")
            lines.append((seq, damaged if payload is None else payload))
        return read_records(lines, row_seqs=True)

    # the restart checkpoint -------------------------------------------------------------------------------
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
        return [str(row[0]) for row in rows]

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

    # the control channel ----------------------------------------------------------------------------------
    def post_control(self, run_id: str, data: bytes, *, after: int | None = None) -> int:
        check_one_line("a control record", data)
        try:
            with self._tx() as conn:
                # The run's row orders the posts (NO KEY UPDATE: the log's inserts, which share-lock it for their
                # foreign key, go on meanwhile); not the owner row, so a sender never waits for the owner.
                conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                locked = conn.execute(
                    f"SELECT 1 FROM {SCHEMA}.runs WHERE run_id = %s FOR NO KEY UPDATE", (run_id,)
                ).fetchone()
                if locked is None:
                    raise self._not_found(run_id)
                if after is not None:  # under the row lock above: no post comes between this and the insert
                    last = conn.execute(
                        f"SELECT coalesce(max(position), 0) FROM {SCHEMA}.control WHERE run_id = %s", (run_id,)
                    ).fetchone()
                    if last is None or _int(last[0]) != after:
                        return 0
                row = conn.execute(
                    f"INSERT INTO {SCHEMA}.control (run_id, position, line) SELECT %s, coalesce(max(position), 0) + 1, "
                    f"%s FROM {SCHEMA}.control WHERE run_id = %s RETURNING position",
                    (run_id, frame(data), run_id),
                ).fetchone()
        except pg_errors.LockNotAvailable:
            raise StoreError(
                f"run {run_id!r}: another process holds the run's control lock in the middle of a post and does not "
                "let go (stopped with SIGSTOP?); end that process and post again"
            ) from None
        if row is None:
            raise StoreError(f"run {run_id!r}: the control post returned no position")
        return _int(row[0])

    def read_control(self, run_id: str) -> list[tuple[int, bytes]]:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                f"SELECT position, line FROM {SCHEMA}.control WHERE run_id = %s ORDER BY position", (run_id,)
            ).fetchall()
        found = []
        for position, line in rows:
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            if payload is not None:  # a damaged row keeps its position and is skipped, like the file store's line
                found.append((_int(position), payload))
        return found

    # schedules --------------------------------------------------------------------------------------------
    def put_schedule(self, job_id: str, data: bytes | None) -> None:
        check_job_id(job_id)
        with self._tx() as conn:
            if data is None:
                conn.execute(f"DELETE FROM {SCHEMA}.schedules WHERE job_id = %s", (job_id,))
            else:
                conn.execute(
                    f"INSERT INTO {SCHEMA}.schedules (job_id, line) VALUES (%s, %s) "
                    "ON CONFLICT (job_id) DO UPDATE SET line = EXCLUDED.line",
                    (job_id, frame(data)),
                )

    def list_schedules(self) -> dict[str, bytes]:
        with self._tx() as conn:
            rows = conn.execute(f"SELECT job_id, line FROM {SCHEMA}.schedules ORDER BY job_id").fetchall()
        found = {}
        for job_id, line in rows:
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            if payload is None:
                raise CorruptRecordError(
                    f"schedule {job_id!r} (in {self.shown}) fails its checksum; write it again or delete it"
                )
            found[str(job_id)] = payload
        return found

    # artifacts and trace ----------------------------------------------------------------------------------
    def _put_artifact_txn(self, handle: Connection, run_id: str, filename: str, digest: str, data: bytes) -> None:
        handle.execute(
            f"INSERT INTO {SCHEMA}.artifacts (run_id, name, sha256, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (run_id, filename, digest, data),
        )

    def _artifact_bytes(self, run_id: str, filename: str) -> bytes | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            row = conn.execute(
                f"SELECT data FROM {SCHEMA}.artifacts WHERE run_id = %s AND name = %s", (run_id, filename)
            ).fetchone()
        return None if row is None else _bytes(row[0])

    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        if not lines:
            return
        try:
            with self._tx(durable=False) as conn, conn.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {SCHEMA}.trace (run_id, line) VALUES (%s, %s)",
                    [(run_id, frame(line)) for line in lines],
                )
        except pg_errors.ForeignKeyViolation:
            raise RunNotFoundError(
                f"run {run_id!r} not found in store {self.shown}; list runs with `safepoint status`"
            ) from None

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(f"SELECT line FROM {SCHEMA}.trace WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()
        for (line,) in rows:
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            if payload is not None:
                yield payload

    # encryption at rest: the record of it (the sealing is safepoint.store.sealed's) ---------------------------
    def _encryption_txn(self, conn: Connection) -> bytes | None:
        row = conn.execute(f"SELECT value FROM {SCHEMA}.settings WHERE name = 'encryption'").fetchone()
        if row is None:
            return None
        payload = check_line(_bytes(row[0]).removesuffix(b"\n"))
        if payload is None:
            raise CorruptRecordError(f"the encryption record of store {self.shown} fails its checksum; restore it")
        return payload

    def encryption_record(self) -> bytes | None:
        with self._tx() as conn:
            return self._encryption_txn(conn)

    def record_encryption(self, data: bytes) -> None:
        with self._tx() as conn:
            # Runs and schedules wait while the record is written: none may slip in unencrypted meanwhile.
            conn.execute(f"LOCK TABLE {SCHEMA}.runs, {SCHEMA}.schedules IN SHARE ROW EXCLUSIVE MODE")
            # Framed lines: the payload starts at byte 10, a sealed one with 'sp1:'.
            held = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.runs WHERE substring(header FROM 10 FOR 4) <> 'sp1:'::bytea) "
                f"OR EXISTS (SELECT 1 FROM {SCHEMA}.schedules WHERE substring(line FROM 10 FOR 4) <> 'sp1:'::bytea)"
            ).fetchone()
            if held is not None and held[0]:
                return  # a plain run came first: the caller finds no record and a store that is not empty
            conn.execute(
                f"INSERT INTO {SCHEMA}.settings (name, value) VALUES ('encryption', %s) ON CONFLICT DO NOTHING",
                (frame(data),),
            )

    def first_run_header(self) -> tuple[str, bytes] | None:
        with self._tx() as conn:
            row = conn.execute(f"SELECT run_id FROM {SCHEMA}.runs LIMIT 1").fetchone()
        return None if row is None else (str(row[0]), self.run_header(str(row[0])))

    def holds_runs(self) -> bool:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.runs) OR EXISTS (SELECT 1 FROM {SCHEMA}.schedules)"
            ).fetchone()
        return bool(row and row[0])

    def scratch_dir(self, run_id: str) -> str | None:
        """This machine's folder for the run's writes in flight and the commands its owner started (both are
        about processes on this host, so they live here, not in the database): a claim on this host kills what
        a crashed owner left running, as with the file store."""
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        store = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return os.path.join(state, "safepoint", store, check_run_id(run_id), "tmp")

    def close(self) -> None:
        self._pool = None
        if self._closer is not None:
            self._closer()  # closes the pool once, now (a finalizer runs at most once)


POOL_NAME = "safepoint"  # its threads are named "safepoint-worker-N" and "safepoint-scheduler"


def _close_pool(pool: ConnectionPool) -> None:
    """Close a pool whose store is closed or gone. The collector may run this in one of the pool's own threads
    (any thread that allocates runs it), which cannot join itself: the close is then handed to a thread of its
    own. Rejected: leaving the pool to its ``__del__``, which the collector or the last reference dropped by a
    worker's task runs in that worker ("cannot join current thread", on stderr, and the pool's threads left)."""
    if threading.current_thread().name.startswith(f"{pool.name}-"):
        threading.Thread(target=pool.close, name="pool-closer", daemon=True).start()
    else:
        pool.close()


def _iso(value: object) -> str:
    """A timestamptz as ``ownership.now()`` writes it (UTC, microseconds), so it reads back as it was stored."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    raise StoreError(f"expected a timestamp from the database, got {type(value).__name__}")


def _owner_state(row: tuple[object, ...]) -> OwnerState | None:
    """The owner a ``recovery_owners`` row records: the seed's columns over the holder fields, or None before the
    first claim."""
    recovery_class, owner_id, generation, agent_id, message_id, active_at, terminal_at, terminal_status, held = row
    if held is None:
        return None
    fields: dict[str, Any] = msgspec.json.decode(_bytes(held))
    fields.update(
        recovery_class=recovery_class,
        owner_id=owner_id,
        generation=generation,
        agent_id=agent_id,
        message_id=message_id,
        active_at=_iso(active_at),
        terminal_at=None if terminal_at is None else _iso(terminal_at),
        terminal_status=terminal_status,
    )
    try:
        return msgspec.convert(fields, OwnerState)
    except msgspec.ValidationError as exc:
        raise CorruptRecordError(f"recovery owner of run {agent_id!r} cannot be read: {exc}") from None


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


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise StoreError(f"expected bytes from the database, got {type(value).__name__}")


def _int(value: object) -> int:
    if isinstance(value, int):
        return value
    raise StoreError(f"expected an integer from the database, got {type(value).__name__}")
