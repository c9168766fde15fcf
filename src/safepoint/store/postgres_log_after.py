"""The PostgreSQL store's reads of a run's log by position (``store.log_after``): rows are keyed by seq, so the
read after a position is an index range scan, and the row at the position is checked to be the record named
(its line's checksum), not only a row with that seq. And the run's view snapshot (``core.view_snapshot``): the row
of ``view_snapshots`` its owner row names, staged, then swapped in fenced (``postgres_snapshots``), deleted with
its run."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import psycopg

from safepoint.errors import RunNotFoundError, StoreError
from safepoint.records import Claim, LogProblem, LogRead, OwnerState
from safepoint.store import postgres_snapshots
from safepoint.store.framing import check_line, read_records
from safepoint.store.log_after import START, LogPosition, frame_snapshot, line_position, unframe_snapshot
from safepoint.store.postgres_schema import SCHEMA
from safepoint.store.postgres_values import as_bytes, as_int

Connection = psycopg.Connection[tuple[object, ...]]


def log_position(conn: Connection, run_id: str) -> LogPosition:
    """The last intact record's position (START when none is)."""
    rows = conn.execute(
        f"SELECT seq, line FROM {SCHEMA}.log WHERE run_id = %s ORDER BY seq DESC LIMIT 16", (run_id,)
    ).fetchall()
    for seq, line in rows:  # a damaged last row is skipped, as the file store skips a damaged last line
        found = line_position(as_bytes(line).removesuffix(b"\n"), 0)
        if found is not None and found.seq == as_int(seq):
            return found
    return START


def read_log_after(conn: Connection, run_id: str, after: LogPosition) -> LogRead | None:
    if after.seq:
        row = conn.execute(
            f"SELECT line FROM {SCHEMA}.log WHERE run_id = %s AND seq = %s", (run_id, after.seq)
        ).fetchone()
        found = None if row is None else line_position(as_bytes(row[0]).removesuffix(b"\n"), 0)
        if found is None or (found.seq, found.check) != (after.seq, after.check):
            return None
    rows = conn.execute(
        f"SELECT seq, line FROM {SCHEMA}.log WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after.seq)
    ).fetchall()
    lines: list[tuple[int, bytes | LogProblem]] = []
    for seq_value, line in rows:
        seq = as_int(seq_value)
        payload = check_line(as_bytes(line).removesuffix(b"\n"))
        lines.append(
            (
                seq,
                LogProblem(kind="corrupt", position=seq, detail="checksum does not match")
                if payload is None
                else payload,
            )
        )
    return read_records(lines, row_seqs=True, first=after.seq + 1)


class PostgresLogReads:
    """Mixed into ``PostgresStore``."""

    if TYPE_CHECKING:  # the store's own

        def _tx(self, *, durable: bool = True) -> contextlib.AbstractContextManager[Connection]: ...

        def _require_run(self, conn: Connection, run_id: str) -> None: ...

        def _not_found(self, run_id: str) -> RunNotFoundError: ...

        # FencedStore's, typed as ``@contextmanager`` types it (mypy compares the two definitions).
        def _fenced(
            self, claim: Claim, *, durable: bool = True
        ) -> contextlib._GeneratorContextManager[tuple[Connection, OwnerState]]: ...

    def log_position(self, run_id: str) -> LogPosition | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            return log_position(conn, run_id)

    def read_log_after(self, run_id: str, after: LogPosition) -> LogRead | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            return read_log_after(conn, run_id, after)

    def put_view_snapshot(self, claim: Claim, data: bytes, *, seq: int) -> None:
        """Staged, then swapped in fenced, then the rows replaced deleted (``postgres_snapshots``): the owner row is
        locked for the swap's small statement only, never while the snapshot's bytes travel or reach the disk."""
        try:
            with self._tx() as conn:
                self._put_view_snapshot_txn(conn, claim.run_id, data, seq)
        except psycopg.errors.ForeignKeyViolation:  # the run was deleted (its owner row with it)
            raise self._not_found(claim.run_id) from None
        key = postgres_snapshots.snapshot_id(frame_snapshot(data, seq))
        if not self._swap_view_snapshot(claim, key):
            with self._fenced(claim):  # says why (stale, released, gone)
                pass
            raise StoreError(f"run {claim.run_id!r}: its view snapshot was removed before it could be used")
        with self._tx() as conn:
            postgres_snapshots.cleanup(conn, claim.run_id)

    def _put_view_snapshot_txn(self, handle: Connection, run_id: str, data: bytes, seq: int) -> None:
        postgres_snapshots.stage(handle, run_id, frame_snapshot(data, seq), seq)

    def _swap_view_snapshot(self, claim: Claim, key: int) -> bool:
        with self._tx() as conn:
            return postgres_snapshots.swap(conn, claim.run_id, claim.generation, key)

    def view_snapshot_seq(self, run_id: str) -> int | None:
        with self._tx() as conn:
            row = conn.execute(postgres_snapshots.READ_SEQ, (run_id,)).fetchone()
        return None if row is None else as_int(row[0])

    def read_view_snapshot(self, run_id: str) -> bytes | None:
        with self._tx() as conn:
            self._require_run(conn, run_id)
            row = conn.execute(postgres_snapshots.READ_DATA, (run_id,)).fetchone()
        return None if row is None else unframe_snapshot(as_bytes(row[0]))
