"""The PostgreSQL store's claim in one statement and one round trip, for the claims a supervisor makes most.

A claim locks the run's owner row, judges the owner it records and writes the next generation. Through the
explicit section that is two round trips: the locking read, the judgement in Python, then the write and COMMIT.
Here one CTE locks the row (``FOR UPDATE``, or ``SKIP LOCKED`` for a supervisor's ``try_claim``), raises the
generation when the row needs no judgement (never claimed, or released: a queued submission, a resumption, an
approval) and returns the row as it was with the database's time; BEGIN, ``SET LOCAL lock_timeout``, the statement
and COMMIT go in one pipeline, one round trip. A row held by an owner is returned unchanged, and the caller judges
it in Python as before (``ownership.next_owner``): a live owner refuses at once, with no further trip; a dead one
(a crash, a lapsed lease) takes the explicit section, whose rules (liveness by pid on this host, heartbeats on the
database's clock) stay in one place. Rejected: the liveness rule in SQL (a second copy of it, and a pid is only
judged on its own host).

What the statement writes is what ``next_owner`` computes: the caller passes the owner record a first claim would
write (``fresh``: holder, process, host, times, the identity it asked for); the statement keeps the row's
identity, generation and terminal state when it has an owner already, as ``next_owner`` does.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from safepoint.store.postgres_schema import SCHEMA
from safepoint.store.postgres_writes import DB_NOW_ISO

Connection = psycopg.Connection[tuple[object, ...]]
SEED_OWNER = "recovery_class, owner_id, generation, agent_id, message_id, active_at, terminal_at, terminal_status"


def _iso(column: str) -> str:
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""


def claim_statement(skip_locked: bool) -> str:
    """The claim's CTE: the row as it was (the seed's columns and ``holder_state``), the database's time, and the
    generation written (NULL when the row has an owner to judge)."""
    return f"""
WITH cur AS (
    SELECT {SEED_OWNER}, holder_state, released, holder_state IS NULL AS first
      FROM {SCHEMA}.recovery_owners WHERE agent_id = %(run)s FOR UPDATE{" SKIP LOCKED" if skip_locked else ""}
), n AS (
    SELECT agent_id,
           CASE WHEN first THEN 1 ELSE generation + 1 END AS generation,
           CASE WHEN first THEN %(class)s ELSE recovery_class END AS recovery_class,
           CASE WHEN first THEN %(owner)s ELSE owner_id END AS owner_id,
           CASE WHEN first THEN %(message)s ELSE message_id END AS message_id,
           CASE WHEN first OR %(reopen)s THEN %(claimed)s::timestamptz ELSE active_at END AS active_at,
           CASE WHEN first OR %(reopen)s THEN NULL ELSE terminal_at END AS terminal_at,
           CASE WHEN first OR %(reopen)s THEN NULL ELSE terminal_status END AS terminal_status,
           CASE WHEN first THEN 30000
                ELSE coalesce((convert_from(holder_state, 'UTF8')::jsonb ->> 'lease_ms')::bigint, 30000)
           END AS lease_ms
      FROM cur WHERE first OR released
), won AS (
    UPDATE {SCHEMA}.recovery_owners o
       SET generation = n.generation, recovery_class = n.recovery_class, owner_id = n.owner_id,
           message_id = n.message_id, active_at = n.active_at, terminal_at = n.terminal_at,
           terminal_status = n.terminal_status, released = false,
           lease_until = clock_timestamp() + make_interval(secs => n.lease_ms / 1000.0),
           holder_state = convert_to((%(fresh)s::jsonb || jsonb_build_object(
               'generation', n.generation, 'recovery_class', n.recovery_class, 'owner_id', n.owner_id,
               'message_id', n.message_id, 'active_at', {_iso("n.active_at")},
               'terminal_at', {_iso("n.terminal_at")}, 'terminal_status', n.terminal_status,
               'lease_ms', n.lease_ms, 'heartbeat_at', {DB_NOW_ISO}))::text, 'UTF8')
      FROM n WHERE o.agent_id = n.agent_id
    RETURNING o.generation
)
SELECT {SEED_OWNER}, holder_state, clock_timestamp(), (SELECT generation FROM won) FROM cur
"""


STATEMENTS = {skip: claim_statement(skip) for skip in (False, True)}


def claim_row(
    conn: Connection, params: dict[str, object], *, skip_locked: bool, lock_timeout_ms: int
) -> tuple[object, ...] | None:
    """Run the claim's statement in its own transaction, in one round trip: the row as it was, the database's
    time and the generation written (None: the row has an owner to judge), or None when no row was locked (no
    such run, or ``skip_locked`` and another transaction holds it)."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            if not skip_locked:
                # An append in progress holds the row for milliseconds; one stopped mid-transaction holds it until
                # its connection dies: wait a while, then say so (the file store's CLAIM_LOCK_TIMEOUT).
                conn.execute(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'")
            cursor = conn.execute(STATEMENTS[skip_locked], params, prepare=True)
            conn.execute("COMMIT")
        return cursor.fetchone()
    except BaseException:
        if not conn.broken and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        raise


def database_time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp from the database, got {type(value).__name__}")
    return value
