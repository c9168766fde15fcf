"""The PostgreSQL store's view snapshot write (``core.view_snapshot``): the upload first, the fenced swap last.

A snapshot is megabytes. Written in the fenced section (the owner row ``FOR UPDATE``, then the upsert, then
COMMIT) the owner row stayed locked while the client adapted the bytes, the server received, compressed and
logged them and the commit flushed them: measured 77 ms for 1 MB and 231 ms for 4 MB, every append and heartbeat
of the run waiting behind it (``bench/snapshot_pause.py --store postgresql``: p99 432 ms for calls beside a
write). Now (migration 11):

1. **stage**: the snapshot is inserted as a row of its own (``view_snapshots``, keyed by run and by ``snapshot_id``,
   its checksum's first 8 bytes) in its own transaction, committed, without touching the owner row. Nobody reads it
   yet; a row of that key already there is left as it is (``DO NOTHING``: the same key is the same bytes), so a
   stale writer can never change the snapshot in use.
2. **swap**: one statement updates the owner row's ``view_snapshot`` (which row readers read) where the claim is
   still its generation and the run not released, as the append's statement does (``postgres_writes``): the row's
   lock is held for that small statement only, and a takeover committed before it makes it update nothing (READ
   COMMITTED re-checks the row it waited for), so a stale owner's snapshot is never the one read.
3. **cleanup**: after a swap, the run's other rows (the one replaced, a stale writer's staged one) are deleted in
   a transaction of their own, outside the owner row's lock. One that runs after a takeover may delete the new
   owner's row staged meanwhile: that write's swap then finds no row and fails (a cache: the next one writes it).

Lock order (no deadlock against ``delete_run``, a claim or an append): each of the three transactions waits for
one kind of lock only: the stage its new row and the run's row (the foreign key's KEY SHARE), the swap the owner
row, the cleanup the run's snapshot rows. ``delete_run`` takes the owner row, then the run's row, then (cascade)
the snapshot rows; a cycle needs a transaction holding one of those while waiting for an earlier one, which none
of the three does (``tests/test_pg_snapshot_swap.py`` runs them against each other on real connections).

Rejected: the one statement with the fencing read in a CTE (``FOR SHARE`` of the owner row, then the upsert): the
lock is then held while the server compresses, logs and flushes the bytes (21 ms for 1 MB, 52 ms for 4 MB
measured in autocommit); a stage and a copy into the row read (the copy writes the megabytes again under the
lock). A crash between the stage and the swap leaves a row nobody reads, deleted by the next swap's cleanup or
with the run.
"""

from __future__ import annotations

import psycopg

from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]

STAGE = (
    f"INSERT INTO {SCHEMA}.view_snapshots (run_id, snapshot_id, seq, data) VALUES (%s, %s, %s, %b) "
    "ON CONFLICT (run_id, snapshot_id) DO NOTHING"  # %b: the bytes sent as they are, not hex-escaped
)
SWAP = f"""
UPDATE {SCHEMA}.recovery_owners SET view_snapshot = %(id)s
 WHERE agent_id = %(run)s AND generation = %(gen)s AND NOT released
   AND EXISTS (SELECT 1 FROM {SCHEMA}.view_snapshots WHERE run_id = %(run)s AND snapshot_id = %(id)s)
RETURNING 1
"""
# The rows not read (the one the swap replaced, staged ones never swapped in): the owner row read, not locked.
CLEANUP = f"""
DELETE FROM {SCHEMA}.view_snapshots v
 WHERE v.run_id = %(run)s AND v.snapshot_id IS DISTINCT FROM
       (SELECT o.view_snapshot FROM {SCHEMA}.recovery_owners o WHERE o.agent_id = %(run)s)
"""
# The snapshot read: the row the owner row names (a staged one is never read).
_READ = (
    f"SELECT {{columns}} FROM {SCHEMA}.recovery_owners o JOIN {SCHEMA}.view_snapshots v "
    "ON v.run_id = o.agent_id AND v.snapshot_id = o.view_snapshot WHERE o.agent_id = %s"
)
READ_SEQ = _READ.format(columns="v.seq")
READ_DATA = _READ.format(columns="v.data")


def snapshot_id(framed: bytes) -> int:
    """A framed snapshot's key among its run's rows: the first 8 bytes of its SHA-256 (in the frame's header), as
    a signed bigint. Equal keys are equal bytes (a collision in one run's few rows is not a concern)."""
    digest = framed.split(b" ", 2)[1]
    return int.from_bytes(bytes.fromhex(digest[:16].decode()), "big", signed=True)


def stage(conn: Connection, run_id: str, framed: bytes, seq: int) -> None:
    conn.execute(STAGE, (run_id, snapshot_id(framed), seq, framed))


def swap(conn: Connection, run_id: str, generation: int, key: int) -> bool:
    """Make the staged row ``key`` the run's snapshot if ``generation`` still owns the run; whether it did."""
    found = conn.execute(SWAP, {"id": key, "run": run_id, "gen": generation}).fetchone()
    return found is not None


def cleanup(conn: Connection, run_id: str) -> None:
    conn.execute(CLEANUP, {"run": run_id})
