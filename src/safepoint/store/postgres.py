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
store's rule (same machine: pid and start time; elsewhere: a heartbeat younger than the lease), judged on the
database's clock. The hot paths are leaner than the section: an append and a heartbeat are one statement each
(``postgres_writes``), so is a claim of a run nobody holds (``postgres_claims``; the section judges a held one);
connections are ``postgres_pool``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from safepoint.errors import (
    CorruptRecordError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StoreError,
)
from safepoint.records import Claim, LogProblem, LogRead, LogRecord, OwnerState, RecoveryIdentity
from safepoint.store import postgres_writes, trace_batches
from safepoint.store.blob_refs import referenced_names
from safepoint.store.crypt import check_key, check_not_orphaned, read_marker
from safepoint.store.fenced import FencedStore, fork_error
from safepoint.store.framing import check_line, check_one_line, frame, read_records
from safepoint.store.liveness import store_clock
from safepoint.store.names import check_job_id, check_run_id, mask_passwords, safe_url
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT, claim_of, next_owner, stuck_lock
from safepoint.store.postgres_blobs import PostgresBlobs
from safepoint.store.postgres_claims import claim_row
from safepoint.store.postgres_log_after import PostgresLogReads
from safepoint.store.postgres_pool import Held, check_if_idle, close_pool, listen, used
from safepoint.store.postgres_restart import PostgresRestartCheckpoints
from safepoint.store.postgres_schema import LATEST, SCHEMA, SchemaChange, ensure_schema
from safepoint.store.postgres_tenant import Tenant, check_tenant, own_runs
from safepoint.store.postgres_values import as_bytes as _bytes
from safepoint.store.postgres_values import as_int as _int
from safepoint.store.postgres_values import as_iso as _iso

CONNECT_TIMEOUT = 10  # seconds to reach the server before giving up with a one-line error
# A control post is looked at by passes for this long after its time: a post whose transaction committed after a
# pass began (it waited on a lock, up to CLAIM_LOCK_TIMEOUT) is still seen by the next one.
POST_MARGIN_S = 60.0
# What a supervisor pass reads: both halves are partial-index scans (tests/test_pg_pass.py reads their plan).
PASS_RUNS = (
    f"SELECT agent_id FROM {SCHEMA}.recovery_owners WHERE NOT released AND terminal_at IS NULL "
    f"UNION SELECT run_id FROM {SCHEMA}.runs WHERE control_at IS NOT NULL "
    "AND control_at > coalesce(%s::timestamptz - make_interval(secs => %s), '-infinity')"
)  # a pooled connection idle longer than this is checked before use (not one used just now)
_record_encoder = msgspec.json.Encoder()
_SEED_OWNER = "recovery_class, owner_id, generation, agent_id, message_id, active_at, terminal_at, terminal_status"


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


class PostgresStore(PostgresBlobs, PostgresRestartCheckpoints, PostgresLogReads, FencedStore[Connection]):
    def __init__(self, url: str, *, pool_size: int = 4, migrate: bool = False) -> None:
        """``migrate``: upgrade a database at an older schema version when opening it (a fresh one is always set
        up; see ``safepoint.store.postgres_schema`` for why an upgrade is not automatic)."""
        self.url = url
        self.shown = safe_url(url)
        self._migrate = migrate
        self._pool_size = pool_size
        self._pool: ConnectionPool | None = None
        self._held: Held | None = None  # the writer's own connection (``postgres_pool.Held``)
        self._closer: weakref.finalize[Any, Any] | None = None
        self._opening = threading.Lock()
        self._listener: Connection | None = None  # a supervisor's LISTEN connection (wait_for_work)
        self.tenant: Tenant | None = None  # restrict(): recover only runs of this recovery identity

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
                max_size=self._pool_size + 1,  # one of them held by the writer (``_held``)
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
                timeout=CONNECT_TIMEOUT * 3,
                # A connection the server dropped (a restart) is replaced, not handed out to fail; one used a moment
                # ago is not checked (rejected: a check on every checkout, one more round trip per write). The
                # one-statement writes retry a connection lost anyway (``_one_statement``).
                check=check_if_idle,
                name=POOL_NAME,
                open=True,
            )
            # A store dropped without ``close()`` (a session's reference cycles keep it until the collector runs)
            # still closes its pool; the finalizer holds the pool, so the pool is never garbage itself.
            self._held = Held(self._pool)
            self._closer = weakref.finalize(self, close_pool, self._pool, self._held)
            return self._pool

    @contextlib.contextmanager
    def _tx(self, *, durable: bool = True) -> Iterator[Connection]:
        """A connection inside one transaction; database failures become one-line ``StoreError``s."""
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn, used(conn), conn.transaction():
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
            self._create_run_txn(conn, run_id, header)

    def create_claimed_run(
        self, run_id: str, header: bytes, holder: str, *, identity: RecoveryIdentity | None = None
    ) -> Claim:
        """The run and its first owner in one commit (the claim's own commit and round trip saved)."""
        check_run_id(run_id)
        state = next_owner(run_id, None, holder, takeover=False, identity=identity)  # refuses a bad identity
        if self.tenant is not None:
            check_tenant(self.tenant, run_id, None, identity)
        try:
            with self._tx() as conn:
                self._create_run_txn(conn, run_id, header)
                self._write_owner(conn, run_id, state)
        except pg_errors.UniqueViolation:  # the identity answers for another run already: as ``claim`` says it
            self.create_run(run_id, header)
            return self.claim(run_id, holder, identity=identity)
        return claim_of(run_id, state)

    def _create_run_txn(self, conn: Connection, run_id: str, header: bytes) -> None:
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
    def _lock_owner(
        self, conn: Connection, run_id: str, *, skip_locked: bool = False
    ) -> tuple[OwnerState | None, datetime]:
        """Lock the run's owner row for this transaction; the owner it records and the database's time.
        ``skip_locked``: a row another transaction holds is not waited for (``_Busy``)."""
        row = conn.execute(
            f"SELECT {_SEED_OWNER}, holder_state, clock_timestamp() FROM {SCHEMA}.recovery_owners "
            f"WHERE agent_id = %s FOR UPDATE{' SKIP LOCKED' if skip_locked else ''}",
            (run_id,),
            prepare=True,
        ).fetchone()
        if row is None and skip_locked:
            self._require_run(conn, run_id)
            if conn.execute(f"SELECT 1 FROM {SCHEMA}.recovery_owners WHERE agent_id = %s", (run_id,)).fetchone():
                raise _Busy(run_id)
        if row is None:
            self._require_run(conn, run_id)
            raise StoreError(
                f"run {run_id!r} in {self.shown} has no recovery owner row: the run was made by an older safepoint "
                "(its schema had an owners table) or the store was edited by hand"
            )
        at = row[-1]
        if not isinstance(at, datetime):
            raise StoreError(f"expected a timestamp from the database, got {type(at).__name__}")
        return _owner_state(row[:-1]), at

    def clock(self) -> datetime:
        """The database's time: every host judges leases on it."""
        with self._tx() as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        if row is None or not isinstance(row[0], datetime):
            raise StoreError(f"PostgreSQL store {self.shown} did not say its time")
        return row[0]

    def _write_owner(self, conn: Connection, run_id: str, state: OwnerState) -> None:
        # The heartbeat and the lease are the database's time, whichever host writes (one clock).
        conn.execute(
            f"UPDATE {SCHEMA}.recovery_owners SET recovery_class = %s, owner_id = %s, generation = %s, "
            "message_id = %s, active_at = %s::timestamptz, terminal_at = %s::timestamptz, terminal_status = %s, "
            "holder_state = convert_to(jsonb_set(convert_from(%s, 'UTF8')::jsonb, '{heartbeat_at}', "
            f"to_jsonb({postgres_writes.DB_NOW_ISO}))::text, 'UTF8'), released = %s, "
            "lease_until = CASE WHEN %s THEN NULL ELSE clock_timestamp() + make_interval(secs => %s) END "
            "WHERE agent_id = %s",
            (
                state.recovery_class,
                state.owner_id,
                state.generation,
                state.message_id,
                state.active_at,
                state.terminal_at,
                state.terminal_status,
                _record_encoder.encode(state),
                state.released,
                state.released,
                state.lease_ms / 1000,
                run_id,
            ),
            prepare=True,
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
        self, run_id: str, *, claiming: bool = False, durable: bool = True, skip_locked: bool = False
    ) -> Iterator[tuple[Connection, OwnerState | None]]:
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn, used(conn):
                # Pipelined: BEGIN, the settings and the locking read in one round trip; the body's writes and
                # the COMMIT in one more (rejected: ``conn.transaction()``, a round trip for BEGIN on its own).
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        if not durable:
                            conn.execute("SET LOCAL synchronous_commit = off")
                        if claiming:
                            # An append in progress holds the row for milliseconds; one stopped mid-transaction
                            # holds it until its connection dies: wait a while, then say so (the file store's
                            # CLAIM_LOCK_TIMEOUT).
                            conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                        current, at = self._lock_owner(conn, run_id, skip_locked=skip_locked)
                        with store_clock(at):  # a claim judges the owner's heartbeat on the database's time
                            yield conn, current
                        conn.execute("COMMIT")
                except BaseException:
                    if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        conn.rollback()
                    raise
        except pg_errors.LockNotAvailable:
            raise
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL store {self.shown}: {_one_line(exc, self.url)}") from None

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
        self._check_tenant(run_id, identity)
        try:
            if not takeover:
                claimed = self._claim_in_one(run_id, holder, identity=identity, reopen=reopen, skip_locked=False)
                if claimed is not None:
                    return claimed
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
        # whose foreign keys take its owner, restart checkpoint, control, artifacts and trace with it, then its
        # log (no foreign key: migration 9). The owner row is locked (the section), so no append lands after.
        handle.execute(
            f"DELETE FROM {SCHEMA}.recovery_owner_terminal_events e USING {SCHEMA}.recovery_owners o "
            "WHERE o.agent_id = %s AND e.recovery_class = o.recovery_class AND e.owner_id = o.owner_id",
            (run_id,),
        )
        handle.execute(f"DELETE FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,))
        handle.execute(f"DELETE FROM {SCHEMA}.log WHERE run_id = %s", (run_id,))

    def _after_delete(self, run_id: str) -> None:
        scratch = self.scratch_dir(run_id)
        if scratch is not None:  # this host's folder of the run's writes in flight
            shutil.rmtree(os.path.dirname(scratch), ignore_errors=True)

    def restrict(self, tenant: Tenant) -> None:
        """Recover only runs of this recovery identity (``safepoint.store.postgres_tenant``)."""
        self.tenant = tenant

    def _check_tenant(self, run_id: str, identity: RecoveryIdentity | None) -> None:
        if self.tenant is not None:  # the identity never changes after the first claim: read before the lock
            check_tenant(self.tenant, run_id, self.owner(run_id), identity)

    def _own_runs(self, conn: Connection, run_ids: list[str]) -> list[str]:
        return run_ids if self.tenant is None else own_runs(conn, self.tenant, run_ids)

    def try_claim(self, run_id: str, holder: str) -> Claim | None:
        """A claim that never waits: ``FOR UPDATE SKIP LOCKED`` in the transaction that raises the generation, so
        supervisors racing for one run do not queue on its row: the one that locks it decides, the others move
        on (None), as they do when a live owner holds it."""
        check_run_id(run_id)
        self._check_tenant(run_id, None)
        try:
            claimed = self._claim_in_one(run_id, holder, identity=None, reopen=False, skip_locked=True)
            if claimed is not None:
                return claimed
            with self._owner_section(run_id, claiming=True, skip_locked=True) as (conn, current):
                state = next_owner(run_id, current, holder, takeover=False)
                self._write_owner_txn(conn, run_id, state)
        except (_Busy, RunLockedError):
            return None
        return claim_of(run_id, state)

    def _claim_in_one(
        self, run_id: str, holder: str, *, identity: RecoveryIdentity | None, reopen: bool, skip_locked: bool
    ) -> Claim | None:
        """A claim in one round trip (``postgres_claims``) when the row needs no judgement; a live owner refused
        at once (``RunLockedError``); None when the explicit section must decide (a dead owner, a row locked
        past SKIP LOCKED, no row)."""
        try:
            fresh = next_owner(run_id, None, holder, takeover=False, identity=identity)
        except StoreError:
            return None  # an identity the section judges (it applies to a first claim only)
        pool = self._pool or self._open_pool()
        try:
            with pool.connection() as conn, used(conn):
                found = claim_row(conn, run_id, fresh, reopen=reopen, skip_locked=skip_locked)
        except pg_errors.LockNotAvailable:
            raise
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            raise self._error(exc) from None
        if found is None:
            return None
        if found.generation is not None:
            return Claim(run_id=run_id, holder=holder, generation=found.generation)
        with store_clock(found.at):  # raises RunLockedError for a live owner, judged as always
            next_owner(run_id, found.current, holder, takeover=False, identity=identity, reopen=reopen)
        return None

    # the log ----------------------------------------------------------------------------------------------
    def append(
        self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True, summary: bytes | None = None
    ) -> None:
        """One statement in the common case (``postgres_writes.append``); the explicit section only when it
        inserted nothing, to say why or to find the records already written by a try whose reply was lost."""
        if not records:
            return
        if names := referenced_names(records, self.blob_name):  # committed before the group (store.blob_refs)
            self.note_blob_refs(claim.run_id, names)
        first = records[0].seq
        lines = [frame(_record_encoder.encode(record)) for record in records]
        if any(record.seq != first + i for i, record in enumerate(records)):
            raise fork_error(claim.run_id, first, None)
        tries: list[int] = []
        framed = None if summary is None else frame(summary)

        def one(conn: Connection) -> bool:
            tries.append(1)
            return postgres_writes.append(conn, claim, first, lines, durable=durable, summary=framed)

        try:
            done = self._one_statement(one)
        except pg_errors.UniqueViolation:  # the owner row's end was behind the log (edited by hand)
            done = False
        if done:
            return
        with self._fenced(claim, durable=durable) as (conn, _):
            last = self._log_end_txn(conn, claim)
            if first != last + 1:
                # Only after a lost reply: this very append may have committed. Otherwise the same records twice
                # are a second writer of this generation, refused like any fork.
                if len(tries) > 1 and self._written_txn(conn, claim.run_id, first, lines):
                    return
                raise fork_error(claim.run_id, first, last)
            self._append_txn(conn, claim, records, durable=durable)
            if summary is not None:
                self._put_summary_txn(conn, claim, records[-1].seq, summary)

    def _written_txn(self, conn: Connection, run_id: str, first: int, lines: Sequence[bytes]) -> bool:
        """Whether the log holds exactly ``lines`` from ``first`` on (each names its seq and generation)."""
        rows = conn.execute(
            f"SELECT line FROM {SCHEMA}.log WHERE run_id = %s AND seq BETWEEN %s AND %s ORDER BY seq",
            (run_id, first, first + len(lines) - 1),
        ).fetchall()
        return [_bytes(row[0]) for row in rows] == list(lines)

    def heartbeat(self, claim: Claim) -> None:
        if self._one_statement(lambda conn: postgres_writes.heartbeat(conn, claim)):
            return
        super().heartbeat(claim)  # the explicit section says why (stale, released, gone)

    def _one_statement(self, action: Callable[[Connection], _T]) -> _T:
        """``action`` on the writer's held connection (a lost one retried on another: ``postgres_pool.Held``)."""
        if self._held is None:
            self._open_pool()
        if self._held is None:  # closed by another thread meanwhile
            raise StoreError(f"PostgreSQL store {self.shown} is closed")
        return self._held.run(action, self._error)

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"PostgreSQL store {self.shown}: {_one_line(exc, self.url)}")

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
            # The end the one-statement append checks against (it was behind, or this is the first append).
            handle.execute(
                f"UPDATE {SCHEMA}.recovery_owners SET last_seq = %s WHERE agent_id = %s",
                (records[-1].seq, claim.run_id),
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

    # the run's summary: kept on the owner row (postgres_writes); a cache, read only while the log ends at its seq ----
    def _put_summary_txn(self, handle: Connection, claim: Claim, seq: int, summary: bytes) -> None:
        handle.execute(
            f"UPDATE {SCHEMA}.recovery_owners SET summary_seq = %s, summary = %s WHERE agent_id = %s",
            (seq, frame(summary), claim.run_id),
        )

    def read_summary(self, run_id: str) -> tuple[int, bytes] | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            row = conn.execute(
                f"SELECT o.summary_seq, o.summary, (SELECT coalesce(max(seq), 0) FROM {SCHEMA}.log "
                f"WHERE run_id = o.agent_id) FROM {SCHEMA}.recovery_owners o WHERE o.agent_id = %s",
                (run_id,),
            ).fetchone()
        if row is None or row[0] is None or row[1] is None or _int(row[0]) != _int(row[2]):
            return None  # none, or the log was appended to since without one
        payload = check_line(_bytes(row[1]).removesuffix(b"\n"))
        return None if payload is None else (_int(row[0]), payload)

    # the control channel ----------------------------------------------------------------------------------
    def post_control(self, run_id: str, data: bytes, *, after: int | None = None) -> int:
        check_one_line("a control record", data)
        try:
            with self._tx() as conn:
                # The run's row orders the posts (NO KEY UPDATE: a first summary's insert, which share-locks it for
                # its foreign key, goes on meanwhile); not the owner row, so a sender never waits for the owner.
                conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                # The UPDATE takes that very lock (no key changes) and says when input last came: a supervisor pass
                # reads the runs posted to lately, not every run.
                # The NOTIFY is delivered at COMMIT, with the post (never before it is there to read).
                locked = conn.execute(
                    f"UPDATE {SCHEMA}.runs SET control_at = clock_timestamp() WHERE run_id = %s "
                    f"RETURNING pg_notify('{WORK_CHANNEL}', run_id)",
                    (run_id,),
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

    def wait_for_work(self, timeout: float) -> bool:
        """LISTEN on the work channel, on a connection of its own (``postgres_pool.listen``)."""
        self._listener, woken = listen(self.url, self._listener, WORK_CHANNEL, timeout)
        return woken

    def pass_runs(self, since: datetime | None) -> list[str]:
        """Held owners (not released, not closed: live, hung or crashed work) and runs posted to since ``since``
        (less a margin for a post committed late), through partial indexes: a pass costs what is open, however
        many runs are finished. ``since`` None (a daemon's first pass): every run ever posted to, too."""
        with self._tx() as conn:
            rows = conn.execute(PASS_RUNS, (since, POST_MARGIN_S)).fetchall()
            return self._own_runs(conn, sorted(str(row[0]) for row in rows))

    def occurrence_runs(self, job_id: str, separator: str) -> list[str]:
        """The job's latest occurrence run: ids ``JOB<separator><digits>`` in byte order (occurrence times have 13
        digits until 2286, so the last in bytes is the latest), through an index, not over every run."""
        low = f"{job_id}{separator}0"
        high = f"{job_id}{separator}:"  # ':' follows '9'
        with self._tx() as conn:
            row = conn.execute(
                f'SELECT run_id FROM {SCHEMA}.runs WHERE run_id COLLATE "C" >= %s AND run_id COLLATE "C" < %s '
                f"AND substr(run_id, %s) ~ '^[0-9]+$' ORDER BY run_id COLLATE \"C\" DESC LIMIT 1",
                (low, high, len(low)),
            ).fetchone()
        return [] if row is None else [str(row[0])]

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
                conn.execute("SELECT pg_notify(%s, %s)", (WORK_CHANNEL, f"schedule:{job_id}"))

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
                    [(run_id, frame(line)) for line in trace_batches.pack(lines)],  # a batch: one compressed line
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
                yield from trace_batches.unpack(payload)

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
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(psycopg.Error):
                listener.close()
        self._pool = None
        self._held = None
        if self._closer is not None:
            self._closer()  # closes the pool once, now (a finalizer runs at most once)


WORK_CHANNEL = "safepoint_work"  # NOTIFY'd with a run id on a control post, "schedule:JOB" on a schedule's change
POOL_NAME = "safepoint"  # its threads are named "safepoint-worker-N" and "safepoint-scheduler"
_T = TypeVar("_T")


class _Busy(Exception):
    """The owner row is locked by another transaction (a claim or a write in progress): skipped, not waited for."""


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
