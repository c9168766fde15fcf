"""The PostgreSQL store's marks of which runs reference each blob (``store.blob_refs``): a row per (blob, run) in
``blob_refs``, deleted with its run (a foreign key, ``ON DELETE CASCADE``: the run's deletion and the drop of its
marks are one transaction), and a ``settings`` row ``blob_refs`` once the marks are complete (set by the migration
that made the table when no blob was stored yet, else by the first ``forget`` or ``gc`` that reads every run).

A mark is committed before the log group that references the blob is appended (``PostgresStore.append``), so a
committed reference always has a committed mark; a crash between leaves a mark that keeps a blob, never the
reverse.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import psycopg

from safepoint.core.blobs import check_name
from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresBlobRefs:
    """``BlobReferences`` over the ``blob_refs`` table; the PostgreSQL store mixes it in."""

    if TYPE_CHECKING:  # the store's own

        def _tx(self, *, durable: bool = True) -> contextlib.AbstractContextManager[Connection]: ...

    def note_blob_refs(self, run_id: str, names: Sequence[str]) -> None:
        if not names:
            return
        wanted = sorted({check_name(name) for name in names})
        with self._tx() as conn:
            # The blobs' time of writing moves to now, as the file store's does (``FileBlobRefs._touch_blobs``: a
            # copied record's blob is kept by a gc that read its clock before), in the mark's statement.
            conn.execute(
                f"WITH touched AS (UPDATE {SCHEMA}.blobs SET created_at = now() WHERE name = ANY(%s) "
                f"AND NOT quarantined) INSERT INTO {SCHEMA}.blob_refs (name, run_id) SELECT unnest(%s::text[]), %s "
                "ON CONFLICT DO NOTHING",
                (wanted, wanted, run_id),
            )

    def blob_referrers(self, names: Iterable[str]) -> dict[str, frozenset[str]] | None:
        wanted = [check_name(name) for name in names]
        with self._tx() as conn:
            if conn.execute(f"SELECT 1 FROM {SCHEMA}.settings WHERE name = 'blob_refs'").fetchone() is None:
                return None
            rows = conn.execute(
                f"SELECT name, run_id FROM {SCHEMA}.blob_refs WHERE name = ANY(%s)", (wanted,)
            ).fetchall()
        found: dict[str, set[str]] = {name: set() for name in wanted}
        for name, run_id in rows:
            found[str(name)].add(str(run_id))
        return {name: frozenset(runs) for name, runs in found.items()}

    def drop_blob_refs(self, run_id: str, names: Iterable[str]) -> None:
        with self._tx() as conn:
            conn.execute(
                f"DELETE FROM {SCHEMA}.blob_refs WHERE run_id = %s AND name = ANY(%s)",
                (run_id, [check_name(name) for name in names]),
            )

    def complete_blob_refs(self, refs: Mapping[str, Iterable[str]]) -> None:
        with self._tx() as conn, conn.cursor() as cursor:
            # Only runs still there: one deleted since it was read has no marks to keep.
            cursor.executemany(
                f"INSERT INTO {SCHEMA}.blob_refs (name, run_id) SELECT %s, run_id FROM {SCHEMA}.runs "
                "WHERE run_id = %s ON CONFLICT DO NOTHING",
                [(check_name(name), run_id) for name, runs in refs.items() for run_id in runs],
            )
            cursor.execute(
                f"INSERT INTO {SCHEMA}.settings (name, value) VALUES ('blob_refs', 'complete'::bytea) "
                "ON CONFLICT DO NOTHING"
            )
