"""The PostgreSQL store: the file store's contract on a shared database (``postgresql://...``).

Schema ``safepoint`` (made on first use, idempotent)::

    runs                            run_id pk, header (framed line), created_at
    recovery_owners                 seed 003 §1.1's columns, pk (recovery_class, owner_id), unique agent_id (the
                                    run), + holder_state (the encoded OwnerState; NULL until the first claim)
    runtime_restart_checkpoints     seed 003 §1.2's columns, pk agent_id, + descriptor (the bytes as written) and
                                    checksum (sha256 of them)
    recovery_owner_terminal_events  seed 003 §1.3's columns, pk (recovery_class, owner_id, generation, event_type)
    log                             (run_id, seq) pk, line: the same framed, checksummed line the file store writes
    control                         (run_id, position) pk, line (framed)
    schedules                       job_id pk, line (framed)
    artifacts                       (run_id, name) pk, sha256, data
    trace                           id bigserial, run_id, line (framed)

Only what differs from the file store lives here. Fencing: ``claim`` and every write lock the run's
``recovery_owners`` row (``SELECT ... FOR UPDATE``) for one short transaction and compare generations, like the
file store's flock; the lock dies with the transaction, so a killed writer never blocks a takeover. The row is
made with the run (as ``('root', run_id)``, generation 0) so there is always one to lock; the first claim gives
it the run's recovery identity. ``generation`` and the other seed columns are the truth (the seed's own SQL,
e.g. §5.1's close, works on them); ``holder_state`` adds only who holds the run now.
``durable=False`` commits with ``synchronous_commit = off``. Liveness of an owner is the file store's rule (same
host: pid and start time; elsewhere: a heartbeat younger than the lease).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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
from safepoint.store.base import Store
from safepoint.store.files import CLAIM_LOCK_TIMEOUT, check_job_id, check_one_line, check_run_id
from safepoint.store.framing import check_line, frame, read_records
from safepoint.store.ownership import (
    check_current,
    check_event,
    claim_of,
    closed_owner,
    next_owner,
    now,
    stuck_lock,
)

SCHEMA = "safepoint"
CONNECT_TIMEOUT = 10  # seconds to reach the server before giving up with a one-line error
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.-]")
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

_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run_id text PRIMARY KEY,
    header bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.recovery_owners (
    recovery_class text NOT NULL,
    owner_id text NOT NULL,
    generation bigint NOT NULL DEFAULT 1,
    agent_id text UNIQUE REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    message_id text,
    active_at timestamptz NOT NULL DEFAULT now(),
    terminal_at timestamptz,
    terminal_status text,
    holder_state bytea,
    PRIMARY KEY (recovery_class, owner_id)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.runtime_restart_checkpoints (
    agent_id text PRIMARY KEY REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    mode text NOT NULL,
    payload_json text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    recovery_class text,
    recovery_owner_id text,
    execution_config_json text,
    descriptor bytea NOT NULL,
    checksum text NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.recovery_owner_terminal_events (
    recovery_class text NOT NULL,
    owner_id text NOT NULL,
    generation bigint NOT NULL,
    event_type text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload_json text,
    PRIMARY KEY (recovery_class, owner_id, generation, event_type)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.control (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    position bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.schedules (
    job_id text PRIMARY KEY,
    line bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.log (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    seq bigint NOT NULL,
    line bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.artifacts (
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    name text NOT NULL,
    sha256 text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.trace (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    line bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS trace_run_id ON {SCHEMA}.trace (run_id, id);
"""


def safe_url(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class PostgresStore(Store):
    def __init__(self, url: str, *, pool_size: int = 4) -> None:
        self.url = url
        self._shown = safe_url(url)
        self._pool_size = pool_size
        self._pool: ConnectionPool | None = None
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
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('safepoint schema'))")
                    conn.execute(_DDL.encode())
            except psycopg.Error as exc:
                raise StoreError(f"cannot open PostgreSQL store {self._shown}: {_one_line(exc)}") from None
            self._pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
                timeout=CONNECT_TIMEOUT * 3,
                # A connection the server dropped (a restart) is replaced, not handed out to fail.
                check=ConnectionPool.check_connection,
                name="safepoint",
                open=True,
            )
            return self._pool

    @contextlib.contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """A connection inside one transaction; database failures become one-line ``StoreError``s."""
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn, conn.transaction():
                if not durable:
                    conn.execute("SET LOCAL synchronous_commit = off")
                yield conn
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL store {self._shown}: {_one_line(exc)}") from None

    def _require_run(self, conn: psycopg.Connection[tuple[object, ...]], run_id: str) -> None:
        if conn.execute(f"SELECT 1 FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,)).fetchone() is None:
            raise self._not_found(run_id)

    def _not_found(self, run_id: str) -> RunNotFoundError:
        return RunNotFoundError(f"run {run_id!r} not found in store {self._shown}; list runs with `safepoint status`")

    # runs -------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, header: bytes) -> None:
        check_run_id(run_id)
        with self._tx() as conn:
            created = conn.execute(
                f"INSERT INTO {SCHEMA}.runs (run_id, header) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (run_id, frame(header)),
            ).fetchone()
            if created is None:
                raise RunExistsError(f"run {run_id!r} already exists in {self._shown}; pick another --run-id")
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
            raise RunNotFoundError(
                f"run {run_id!r} not found in store {self._shown}; list runs with `safepoint status`"
            )
        payload = check_line(_bytes(row[0]).removesuffix(b"\n"))
        if payload is None:
            raise CorruptRecordError(
                f"header of run {run_id!r} (in {self._shown}) fails its checksum; the run cannot be read"
            )
        return payload

    def list_runs(self) -> list[str]:
        with self._tx() as conn:
            rows = conn.execute(f"SELECT run_id FROM {SCHEMA}.runs ORDER BY created_at, run_id").fetchall()
        return [str(row[0]) for row in rows]

    # ownership --------------------------------------------------------------------------------------------
    def _lock_owner(self, conn: psycopg.Connection[tuple[object, ...]], run_id: str) -> OwnerState | None:
        """Lock the run's owner row for this transaction and return the owner it records."""
        row = conn.execute(
            f"SELECT {_SEED_OWNER}, holder_state FROM {SCHEMA}.recovery_owners WHERE agent_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        if row is None:
            self._require_run(conn, run_id)
            raise StoreError(
                f"run {run_id!r} in {self._shown} has no recovery owner row: the run was made by an older safepoint "
                "(its schema had an owners table) or the store was edited by hand"
            )
        return _owner_state(row)

    def _write_owner(self, conn: psycopg.Connection[tuple[object, ...]], run_id: str, state: OwnerState) -> None:
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
            with self._tx() as conn:
                self._require_run(conn, run_id)
                # An append in progress holds the row for milliseconds; one stopped mid-transaction holds it
                # until its connection dies: wait a while, then say so (the file store's CLAIM_LOCK_TIMEOUT).
                conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                current = self._lock_owner(conn, run_id)
                state = next_owner(run_id, current, holder, takeover=takeover, identity=identity, reopen=reopen)
                self._write_owner(conn, run_id, state)
        except pg_errors.LockNotAvailable:
            raise stuck_lock(run_id) from None
        except pg_errors.UniqueViolation:  # only a first claim sets (recovery_class, owner_id)
            kept = identity or RecoveryIdentity(owner_id=run_id, agent_id=run_id)
            raise StoreError(
                f"run {run_id!r}: recovery owner {kept.recovery_class}/{kept.owner_id} already answers for another "
                f"run in {self._shown}; each agent has its own recovery owner"
            ) from None
        return claim_of(run_id, state)

    def close_owner(self, claim: Claim, terminal_status: str) -> None:
        with self._tx() as conn:
            current = self._check_generation(conn, claim)
            self._write_owner(conn, claim.run_id, closed_owner(current, terminal_status))

    def release(self, claim: Claim) -> None:
        with self._tx() as conn:
            current = self._lock_owner(conn, claim.run_id)
            if current is not None and current.generation == claim.generation:
                self._write_owner(
                    conn, claim.run_id, msgspec.structs.replace(current, released=True, heartbeat_at=now())
                )

    def heartbeat(self, claim: Claim) -> None:
        with self._tx() as conn:
            current = self._check_generation(conn, claim)
            self._write_owner(conn, claim.run_id, msgspec.structs.replace(current, heartbeat_at=now()))

    def _check_generation(self, conn: psycopg.Connection[tuple[object, ...]], claim: Claim) -> OwnerState:
        return check_current(claim, self._lock_owner(conn, claim.run_id))

    # the log ----------------------------------------------------------------------------------------------
    def append(self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True) -> None:
        if not records:
            return
        try:
            with self._tx(durable=durable) as conn:
                self._check_generation(conn, claim)
                row = conn.execute(
                    f"SELECT coalesce(max(seq), 0) FROM {SCHEMA}.log WHERE run_id = %s", (claim.run_id,)
                ).fetchone()
                last = _int(row[0]) if row is not None else 0
                if records[0].seq != last + 1:
                    raise _fork(claim.run_id, records[0].seq, last)
                with conn.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO {SCHEMA}.log (run_id, seq, line) VALUES (%s, %s, %s)",
                        [(claim.run_id, record.seq, frame(_record_encoder.encode(record))) for record in records],
                    )
        except pg_errors.UniqueViolation:  # two writers of one generation raced past the check
            raise _fork(claim.run_id, records[0].seq, None) from None

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
    def upsert_restart_checkpoint(self, claim: Claim, data: bytes) -> None:
        columns = _checkpoint_columns(data)
        with self._tx() as conn:
            self._check_generation(conn, claim)  # under the owner row's lock until commit: no stale upsert slips in
            conn.execute(
                f"INSERT INTO {SCHEMA}.runtime_restart_checkpoints "
                f"(agent_id, {_SEED_CHECKPOINT}, descriptor, checksum) VALUES ({', '.join(['%s'] * 10)}) "
                f"ON CONFLICT (agent_id) DO UPDATE SET {_UPSERT_CHECKPOINT}",
                (claim.run_id, *columns, data, hashlib.sha256(data).hexdigest()),
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

    def delete_restart_checkpoint(self, claim: Claim) -> None:
        with self._tx() as conn:
            self._check_generation(conn, claim)
            conn.execute(f"DELETE FROM {SCHEMA}.runtime_restart_checkpoints WHERE agent_id = %s", (claim.run_id,))

    def list_restart_checkpoints(self) -> list[str]:
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT c.agent_id FROM {SCHEMA}.runtime_restart_checkpoints c "
                f"JOIN {SCHEMA}.runs r ON r.run_id = c.agent_id ORDER BY r.created_at, r.run_id"
            ).fetchall()
        return [str(row[0]) for row in rows]

    # terminal events --------------------------------------------------------------------------------------
    def record_terminal_event(self, claim: Claim, event: RecoveryOwnerTerminalEvent) -> bool:
        with self._tx() as conn:
            check_event(claim.run_id, event, self._check_generation(conn, claim))
            recorded = conn.execute(
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
    def post_control(self, run_id: str, data: bytes) -> int:
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
                    f"schedule {job_id!r} (in {self._shown}) fails its checksum; write it again or delete it"
                )
            found[str(job_id)] = payload
        return found

    # artifacts and trace ----------------------------------------------------------------------------------
    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        safe = _ARTIFACT_NAME.sub("_", name)[:100] or "artifact"
        filename = f"{safe}.{digest[:16]}"
        with self._tx() as conn:
            self._check_generation(conn, claim)
            conn.execute(
                f"INSERT INTO {SCHEMA}.artifacts (run_id, name, sha256, data) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (claim.run_id, filename, digest, data),
            )
        return f"artifact:{filename}:sha256:{digest}"

    def get_artifact(self, run_id: str, ref: str) -> bytes:
        try:
            _, filename, _, digest = ref.split(":", 3)
        except ValueError:
            raise StoreError(f"{ref!r} is not an artifact ref (artifact:NAME:sha256:HEX)") from None
        with self._tx() as conn:
            self._require_run(conn, run_id)
            row = conn.execute(
                f"SELECT data FROM {SCHEMA}.artifacts WHERE run_id = %s AND name = %s", (run_id, filename)
            ).fetchone()
        if row is None:
            raise CorruptRecordError(f"artifact {filename} of run {run_id!r} is missing from {self._shown}")
        data = _bytes(row[0])
        if hashlib.sha256(data).hexdigest() != digest:
            raise CorruptRecordError(f"artifact {filename} of run {run_id!r} fails its checksum ({self._shown})")
        return data

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
                f"run {run_id!r} not found in store {self._shown}; list runs with `safepoint status`"
            ) from None

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(f"SELECT line FROM {SCHEMA}.trace WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()
        for (line,) in rows:
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            if payload is not None:
                yield payload

    def scratch_dir(self, run_id: str) -> str | None:
        """This machine's folder for the run's writes in flight and the commands its owner started (both are
        about processes on this host, so they live here, not in the database): a claim on this host kills what
        a crashed owner left running, as with the file store."""
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        store = hashlib.sha256(self.url.encode()).hexdigest()[:16]
        return os.path.join(state, "safepoint", store, check_run_id(run_id), "tmp")

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
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


def _fork(run_id: str, seq: int, last: int | None) -> StoreError:
    end = f"the log ends at {last}" if last is not None else "that seq is already in the log"
    return StoreError(
        f"run {run_id!r}: append at seq {seq} but {end}; "
        "another writer slipped in; resume the run to continue from what is stored"
    )
