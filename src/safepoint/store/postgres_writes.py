"""The PostgreSQL store's lean write path: a fenced write in one statement, one round trip, on a pooled connection.

A tool call writes its log twice (its ``started`` group, then its ``finished`` group). Through the generic section
(BEGIN, the owner row ``FOR UPDATE``, ``max(seq)``, the INSERT, COMMIT, and a pool check before each) that was
about a dozen round trips per call, CPU-bound on the client. Here an append is one prepared statement in
autocommit: a CTE that updates the owner row only if the claim is still its generation, the run is not released
and the log ends where the caller says (``last_seq``), and inserts the records only if that row was updated. The
UPDATE takes the row lock a claim takes, so a takeover waits for the append or the append for the takeover, and a
stale or out-of-order append inserts nothing (READ COMMITTED re-checks the updated row). Rejected: a stored
function (the same locks, plus a migration step per change) and the client-side ``max(seq)`` (a read per append).

When the statement inserts nothing, the caller takes the slow, explicit path, which says why (stale, forked,
released, gone) or finds the records already there: a connection lost after the server committed but before the
reply is retried, and the retry must not fail on its own write.

Heartbeats and leases are on the database's clock (``clock_timestamp()``, not ``now()``, which is the
transaction's start): hosts' clocks never meet, so a skewed host neither reaps a live owner nor keeps a dead one.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from safepoint.records import Claim
from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]

# The database's time as ``ownership.now()`` writes it (UTC ISO with microseconds), so both read back alike.
DB_NOW_ISO = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""

APPEND = f"""
WITH o AS (
    UPDATE {SCHEMA}.recovery_owners SET last_seq = %(end)s
     WHERE agent_id = %(run)s AND generation = %(gen)s AND NOT released AND last_seq = %(before)s
    RETURNING agent_id
)
INSERT INTO {SCHEMA}.log (run_id, seq, line)
SELECT o.agent_id, u.seq, u.line FROM o, unnest(%(seqs)s::bigint[], %(lines)s::bytea[]) AS u(seq, line)
"""

# The same, when the group carries the run's summary (``store.base.RunLog.read_summary``): written by the same
# statement, only if the records were (it selects from the owner row the UPDATE matched), so a summary never
# describes a log its group did not reach.
APPEND_WITH_SUMMARY = f"""
WITH o AS (
    UPDATE {SCHEMA}.recovery_owners SET last_seq = %(end)s
     WHERE agent_id = %(run)s AND generation = %(gen)s AND NOT released AND last_seq = %(before)s
    RETURNING agent_id
), ins AS (
    INSERT INTO {SCHEMA}.log (run_id, seq, line)
    SELECT o.agent_id, u.seq, u.line FROM o, unnest(%(seqs)s::bigint[], %(lines)s::bytea[]) AS u(seq, line)
    RETURNING 1
), s AS (
    INSERT INTO {SCHEMA}.run_summaries (run_id, log_seq, line) SELECT o.agent_id, %(end)s, %(summary)s FROM o
    ON CONFLICT (run_id) DO UPDATE SET log_seq = excluded.log_seq, line = excluded.line
)
SELECT count(*) FROM ins
"""

# A heartbeat renews the lease and the heartbeat time the owner record shows, both on the database's clock.
HEARTBEAT = f"""
UPDATE {SCHEMA}.recovery_owners
   SET holder_state = convert_to(jsonb_set(convert_from(holder_state, 'UTF8')::jsonb, '{{heartbeat_at}}',
                                           to_jsonb({DB_NOW_ISO}))::text, 'UTF8'),
       lease_until = clock_timestamp() + make_interval(
           secs => coalesce((convert_from(holder_state, 'UTF8')::jsonb ->> 'lease_ms')::bigint, 30000) / 1000.0)
 WHERE agent_id = %(run)s AND generation = %(gen)s AND NOT released
RETURNING 1
"""


def append(
    conn: Connection,
    claim: Claim,
    first_seq: int,
    lines: Sequence[bytes],
    *,
    durable: bool,
    summary: bytes | None = None,
) -> bool:
    """Insert ``lines`` at ``first_seq``... if ``claim`` is current and the log ends just before: one round trip.
    ``summary`` (a framed line) is kept with them by the same statement. False when nothing was inserted (the
    caller's slow path says why)."""
    params: dict[str, object] = {
        "run": claim.run_id,
        "gen": claim.generation,
        "before": first_seq - 1,
        "end": first_seq + len(lines) - 1,
        "seqs": list(range(first_seq, first_seq + len(lines))),
        "lines": list(lines),
    }
    statement = APPEND if summary is None else APPEND_WITH_SUMMARY
    if summary is not None:
        params["summary"] = summary
    if durable:
        return _inserted(conn.execute(statement, params, prepare=True), summary is not None) == len(lines)
    # Not durable: synchronous_commit off for this transaction only. BEGIN, SET LOCAL, the statement and COMMIT
    # go in one pipeline (one round trip), not as four.
    with conn.pipeline():
        conn.execute("BEGIN")
        conn.execute("SET LOCAL synchronous_commit = off")
        cursor = conn.execute(statement, params, prepare=True)
        conn.execute("COMMIT")
    return _inserted(cursor, summary is not None) == len(lines)


def _inserted(cursor: psycopg.Cursor[tuple[object, ...]], counted: bool) -> int:
    """Rows the append inserted: the INSERT's row count, or the count the summary's statement selects."""
    if not counted:
        return cursor.rowcount
    row = cursor.fetchone()
    return int(row[0]) if row is not None and isinstance(row[0], int) else 0


def heartbeat(conn: Connection, claim: Claim) -> bool:
    """Renew the claim's heartbeat and lease (the owner's ``lease_ms``) on the database's clock; False if the claim
    is no longer current."""
    found = conn.execute(HEARTBEAT, {"run": claim.run_id, "gen": claim.generation}, prepare=True).fetchone()
    return found is not None
