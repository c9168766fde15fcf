"""The PostgreSQL store: the file store's contract on a shared database (``postgresql://...``).

Schema ``tidemark`` (made on first use, idempotent)::

    runs       run_id pk, header (framed line), created_at
    owners     run_id pk, generation, owner (encoded OwnerState; NULL until the first claim)
    log        (run_id, seq) pk, line: the same framed, checksummed line the file store writes
    artifacts  (run_id, name) pk, sha256, data
    trace      id bigserial, run_id, line (framed)

Only what differs from the file store lives here. Fencing: ``claim`` and every write lock the run's ``owners``
row (``SELECT ... FOR UPDATE``) for one short transaction and compare generations, like the file store's flock;
the lock dies with the transaction, so a killed writer never blocks a takeover. ``durable=False`` commits with
``synchronous_commit = off``. Liveness of an owner is the file store's rule (same host: pid and start time;
elsewhere: a heartbeat younger than the lease).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

import msgspec
import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from tidemark.errors import (
    CorruptRecordError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from tidemark.store.base import Claim, LogProblem, LogRead, LogRecord, OwnerState, Store
from tidemark.store.files import CLAIM_LOCK_TIMEOUT, check_run_id
from tidemark.store.framing import check_line, frame, read_records
from tidemark.store.ownership import check_current, next_owner, now, stuck_lock

SCHEMA = "tidemark"
CONNECT_TIMEOUT = 10  # seconds to reach the server before giving up with a one-line error
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_record_encoder = msgspec.json.Encoder()
_owner_decoder = msgspec.json.Decoder(OwnerState)

_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run_id text PRIMARY KEY,
    header bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.owners (
    run_id text PRIMARY KEY REFERENCES {SCHEMA}.runs ON DELETE CASCADE,
    generation bigint NOT NULL,
    owner bytea
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
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('tidemark schema'))")
                    conn.execute(_DDL.encode())
            except psycopg.Error as exc:
                raise StoreError(f"cannot open PostgreSQL store {self._shown}: {_one_line(exc)}") from None
            self._pool = ConnectionPool(
                self.url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
                timeout=CONNECT_TIMEOUT * 3,
                name="tidemark",
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
            raise RunNotFoundError(f"run {run_id!r} not found in store {self._shown}; list runs with `tidemark status`")

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
            conn.execute(f"INSERT INTO {SCHEMA}.owners (run_id, generation) VALUES (%s, 0)", (run_id,))

    def run_header(self, run_id: str) -> bytes:
        with self._tx() as conn:
            row = conn.execute(f"SELECT header FROM {SCHEMA}.runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            raise RunNotFoundError(f"run {run_id!r} not found in store {self._shown}; list runs with `tidemark status`")
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
        row = conn.execute(f"SELECT owner FROM {SCHEMA}.owners WHERE run_id = %s FOR UPDATE", (run_id,)).fetchone()
        if row is None:
            self._require_run(conn, run_id)
            raise StoreError(f"run {run_id!r} in {self._shown} has no owner row; the store was edited by hand")
        return None if row[0] is None else _owner_decoder.decode(_bytes(row[0]))

    def _write_owner(self, conn: psycopg.Connection[tuple[object, ...]], run_id: str, state: OwnerState) -> None:
        conn.execute(
            f"UPDATE {SCHEMA}.owners SET generation = %s, owner = %s WHERE run_id = %s",
            (state.generation, _record_encoder.encode(state), run_id),
        )

    def owner(self, run_id: str) -> OwnerState | None:
        with self._tx() as conn:
            row = conn.execute(f"SELECT owner FROM {SCHEMA}.owners WHERE run_id = %s", (run_id,)).fetchone()
        return None if row is None or row[0] is None else _owner_decoder.decode(_bytes(row[0]))

    def claim(self, run_id: str, owner_id: str, *, takeover: bool = False) -> Claim:
        check_run_id(run_id)
        try:
            with self._tx() as conn:
                self._require_run(conn, run_id)
                # An append in progress holds the row for milliseconds; one stopped mid-transaction holds it
                # until its connection dies: wait a while, then say so (the file store's CLAIM_LOCK_TIMEOUT).
                conn.execute(f"SET LOCAL lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                current = self._lock_owner(conn, run_id)
                state = next_owner(run_id, current, owner_id, takeover=takeover)
                self._write_owner(conn, run_id, state)
        except pg_errors.LockNotAvailable:
            raise stuck_lock(run_id) from None
        return Claim(run_id=run_id, owner_id=owner_id, generation=state.generation)

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
                f"run {run_id!r} not found in store {self._shown}; list runs with `tidemark status`"
            ) from None

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(f"SELECT line FROM {SCHEMA}.trace WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()
        for (line,) in rows:
            payload = check_line(_bytes(line).removesuffix(b"\n"))
            if payload is not None:
                yield payload

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


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
