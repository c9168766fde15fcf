"""The PostgreSQL store's blobs (``store.base.Blobs``): one table, store-wide, a row per blob named by its content.

A ``put_blobs`` is one transaction (``INSERT ... ON CONFLICT DO UPDATE``): committed, every blob it was given is
durable, and a blob another run stored first is kept as it is (its bytes replaced when they went bad). Writers
and gc exclude each other with a session advisory lock (shared for a writer from its put to its log append,
exclusive for gc's removal), held on a connection of its own for the span: a transaction-scoped lock would end
with the put's transaction, before the append it must cover. A killed holder's session ends and its lock with it.
A damaged blob ``fsck`` sets aside is flagged ``quarantined`` and renamed aside (kept for a person, never deleted, no
longer served; its name free for the content stored again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from safepoint.core.blobs import check_name
from safepoint.errors import StoreError
from safepoint.store.base import BlobStat
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT
from safepoint.store.postgres_blob_refs import PostgresBlobRefs
from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]
_LOCK = "hashtext('safepoint blobs')"
# A quarantined row is flagged and renamed aside (``<name>@quarantined:<transaction>``), so its name is free for the
# good bytes when the content is stored again (a run writing that file again), and each damaged copy is kept.
# Rejected: flagging it under its own name, which kept the content lost after a writer stored it again.
_ASIDE = (
    f"UPDATE {SCHEMA}.blobs SET quarantined = true, name = name || '@quarantined:' || txid_current()::text "
    "WHERE name = %s RETURNING 1"
)


class PostgresBlobs(PostgresBlobRefs):
    """The ``Blobs`` part over the ``blobs`` table; the PostgreSQL store mixes it in."""

    shown: str

    if TYPE_CHECKING:  # the store's own

        def _tx(self, *, durable: bool = True) -> contextlib.AbstractContextManager[Connection]: ...

        def _pool_connection(self) -> contextlib.AbstractContextManager[Connection]: ...

    def put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        if not blobs:
            return 0
        with self._tx() as conn, conn.cursor() as cursor:
            written = 0
            # In name order, as the marks touch them (``note_blob_refs``): two writers lock shared rows in one order.
            for name, data in sorted(blobs, key=lambda pair: pair[0]):
                # Stored again: its time of writing moves to now, as a reference to it is on its way (blob_clock);
                # a row whose bytes went bad takes the good ones in hand (kept as is when equal: no rewrite).
                # A row quarantined under its own name (by a store before quarantine moved rows aside) keeps its
                # bytes, and is moved aside now so the good ones take the name.
                insert = (
                    f"INSERT INTO {SCHEMA}.blobs (name, data) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "created_at = now(), data = CASE WHEN blobs.quarantined OR blobs.data = EXCLUDED.data "
                    "THEN blobs.data ELSE EXCLUDED.data END RETURNING (xmax = 0), quarantined"
                )
                cursor.execute(insert, (check_name(name), data))
                row = cursor.fetchone()
                if row is not None and row[1]:
                    cursor.execute(_ASIDE, (name,))
                    cursor.execute(insert, (name, data))
                    row = cursor.fetchone()
                if row is not None and row[0]:  # inserted, not updated
                    written += len(data)
        return written

    def get_blob(self, name: str) -> bytes | None:
        with self._tx() as conn:
            row = conn.execute(
                f"SELECT data FROM {SCHEMA}.blobs WHERE name = %s AND NOT quarantined", (check_name(name),)
            ).fetchone()
        return None if row is None else _bytes(row[0])

    def list_blobs(self) -> dict[str, BlobStat]:
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT name, octet_length(data), extract(epoch FROM created_at)::float8 FROM {SCHEMA}.blobs "
                "WHERE NOT quarantined"
            ).fetchall()
        return {str(name): BlobStat(int(str(size)), float(str(at))) for name, size, at in rows}

    def blob_clock(self) -> float:
        """The server's transaction time: a writer's transaction begins after gc lets the lock go, so its
        ``now()`` is later."""
        with self._tx() as conn:
            row = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
        return float(str(row[0])) if row is not None else 0.0

    def delete_blobs(self, names: Sequence[str]) -> int:
        if not names:
            return 0
        with self._tx() as conn:
            row = conn.execute(
                f"WITH gone AS (DELETE FROM {SCHEMA}.blobs WHERE name = ANY(%s) AND NOT quarantined "
                "RETURNING octet_length(data) AS size) SELECT coalesce(sum(size), 0) FROM gone",
                ([check_name(name) for name in names],),
            ).fetchone()
        return 0 if row is None else int(str(row[0]))

    def quarantine_blob(self, name: str) -> bool:
        with self._tx() as conn:
            row = conn.execute(_ASIDE, (check_name(name),)).fetchone()
        return row is not None

    @contextlib.contextmanager
    def _advisory(self, shared: bool, stuck: str) -> Iterator[None]:
        suffix = "_shared" if shared else ""
        with self._pool_connection() as conn:
            try:
                conn.execute(f"SET lock_timeout = '{int(CLAIM_LOCK_TIMEOUT * 1000)}ms'")
                conn.execute(f"SELECT pg_advisory_lock{suffix}({_LOCK})")
            except pg_errors.LockNotAvailable:
                raise StoreError(stuck) from None
            finally:
                conn.execute("RESET lock_timeout")
            try:
                yield
            finally:
                conn.execute(f"SELECT pg_advisory_unlock{suffix}({_LOCK})")

    def blobs_shared(self) -> contextlib.AbstractContextManager[None]:
        return self._advisory(
            True,
            f"store {self.shown}: `safepoint gc` holds the blobs' lock and does not let go (stopped?); end it, then "
            "resume the run",
        )

    def blobs_exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self._advisory(
            False,
            f"store {self.shown}: a writer holds the blobs' lock between storing a blob and its log record and does "
            "not let go (stopped with SIGSTOP?); end it or try gc again later",
        )


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise StoreError(f"expected bytes from the database, got {type(value).__name__}")
