"""The PostgreSQL store's lean write path: a fenced write in one statement, one round trip, on a pooled connection.

A tool call writes its log twice (its ``started`` group, then its ``finished`` group). Through the generic section
(BEGIN, the owner row ``FOR UPDATE``, ``max(seq)``, the INSERT, COMMIT, and a pool check before each) that was
about a dozen round trips per call, CPU-bound on the client. Here an append is one prepared statement in
autocommit: a CTE that updates the owner row only if the claim is still its generation, the run is not released
and the log ends where the caller says (``last_seq``), and inserts the records only if that row was updated (the
run's summary, when the group carries one, is written by that same update: migration 10). The
UPDATE takes the row lock a claim takes, so a takeover waits for the append or the append for the takeover, and a
stale or out-of-order append inserts nothing (READ COMMITTED re-checks the updated row). Rejected: a stored
function (the same locks, plus a migration step per change; measured as PL/pgSQL, about 10 % more server CPU
than the CTE) and the client-side ``max(seq)`` (a read per append).
The log has no foreign key to ``runs`` (migration 9): its check locked the run's row once per line inserted
(KEY SHARE, a WAL record each), measured at 80 us of the server's CPU per transition out of 225. Nothing is lost:
lines are inserted only under the run's owner row, and ``delete_run`` deletes the log holding that row's lock.

When the statement inserts nothing, the caller takes the slow, explicit path, which says why (stale, forked,
released, gone) or finds the records already there: a connection lost after the server committed but before the
reply is retried, and the retry must not fail on its own write.

The statement goes to the server as libpq's own prepared statement (``PGconn.exec_prepared``, psycopg's documented
libpq layer) with every parameter already in PostgreSQL's binary form: the records as one binary ``bytea[]``,
the numbers as 8 bytes. Measured per transition on this 2-core machine: psycopg's ``execute`` (its query
conversion and a text ``bytea[]`` whose 300-byte lines are hex-escaped in Python) cost about 270 us of client CPU,
this about 70 us, less than a raw ``INSERT`` through ``execute`` (about 100 us). Rejected: ``%b`` placeholders
through ``execute`` (about 250 us: the adaptation stays) and a ``VALUES`` row per record (a statement per group
size). The seqs are not sent: the statement numbers the lines from ``before`` (``WITH ORDINALITY``).

Heartbeats and leases are on the database's clock (``clock_timestamp()``, not ``now()``, which is the
transaction's start): hosts' clocks never meet, so a skewed host neither reaps a live owner nor keeps a dead one.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import cast

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

from safepoint.records import Claim
from safepoint.store.postgres_schema import SCHEMA

Connection = psycopg.Connection[tuple[object, ...]]

# The database's time as ``ownership.now()`` writes it (UTC ISO with microseconds), so both read back alike.
DB_NOW_ISO = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""

# {run} the run, {gen} the claim's generation, {before} the log's end before, {end} its end after, {lines} the
# framed lines (bytea[]), {summary} the summary: ``$n`` for libpq, ``%(name)s`` for psycopg (the rare non-durable
# append, whose BEGIN, SET LOCAL, statement and COMMIT go in one psycopg pipeline).
_OWNER_MOVES = f"""
    UPDATE {SCHEMA}.recovery_owners SET last_seq = {{end}}{{keep}}
     WHERE agent_id = {{run}} AND generation = {{gen}} AND NOT released AND last_seq = {{before}}
    RETURNING agent_id
"""
_APPEND = f"""
WITH o AS ({_OWNER_MOVES})
INSERT INTO {SCHEMA}.log (run_id, seq, line) SELECT o.agent_id, {{before}} + u.n, u.line
  FROM o, unnest({{lines}}::bytea[]) WITH ORDINALITY AS u(line, n)
"""
# When the group carries the run's summary (``store.base.RunLog.read_summary``), the owner row's update keeps it
# (migration 10): only if the records are inserted, so a summary never describes a log its group did not reach.
# Rejected: its own table (schema 5 to 9), whose upsert locked and updated a second row, a WAL record each: 20-30 %
# of the statement's server CPU on one backend (``bench/postgres_server.py``).
_KEEP_SUMMARY = ", summary_seq = {end}, summary = {summary}"
_NAMES = ("run", "gen", "before", "end", "lines", "summary")
_LIBPQ = {n: f"${i + 1}" for i, n in enumerate(_NAMES)}
APPEND = _APPEND.format(keep="", **_LIBPQ)
APPEND_WITH_SUMMARY = _APPEND.format(keep=_KEEP_SUMMARY.format(**_LIBPQ), **_LIBPQ)
_PSYCOPG = {n: f"%({n})s" for n in _NAMES}
_APPEND_PSYCOPG = _APPEND.format(keep="", **_PSYCOPG)
_APPEND_WITH_SUMMARY_PSYCOPG = _APPEND.format(keep=_KEEP_SUMMARY.format(**_PSYCOPG), **_PSYCOPG)
_TEXT, _INT8, _BYTEA, _BYTEA_ARRAY = 25, 20, 17, 1001  # type oids
# The statements run as libpq's prepared statements, by name: their SQL and parameter types (``postgres_claims``
# adds its own). A name is changed with its SQL (a connection prepares a name once).
STATEMENTS: dict[bytes, tuple[str, tuple[int, ...]]] = {
    b"safepoint_append_2": (APPEND, (_TEXT, _INT8, _INT8, _INT8, _BYTEA_ARRAY)),
    b"safepoint_append_summary_2": (APPEND_WITH_SUMMARY, (_TEXT, _INT8, _INT8, _INT8, _BYTEA_ARRAY, _BYTEA)),
}
_BINARY = (0, 1, 1, 1, 1, 1)  # the run id as text, the rest binary
_prepared: weakref.WeakKeyDictionary[Connection, set[bytes]] = weakref.WeakKeyDictionary()
_INT8_BYTES = struct.Struct("!q")
# A one-dimensional bytea[] without NULLs in the binary format: ndim, has-nulls, element type, length, lower bound.
_ARRAY_HEADER = struct.Struct("!iiIii")
_LENGTH = struct.Struct("!i")


def bytea_array(items: Sequence[bytes]) -> bytes:
    """``items`` as a binary ``bytea[]`` parameter."""
    parts = [_ARRAY_HEADER.pack(1, 0, _BYTEA, len(items), 1)]
    for item in items:
        parts.append(_LENGTH.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


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
    params: list[bytes] = [
        claim.run_id.encode(),
        _INT8_BYTES.pack(claim.generation),
        _INT8_BYTES.pack(first_seq - 1),
        _INT8_BYTES.pack(first_seq + len(lines) - 1),
        bytea_array(lines),
    ]
    name = b"safepoint_append_2"
    if summary is not None:
        name = b"safepoint_append_summary_2"
        params.append(summary)
    if not durable:
        return _append_not_durable(conn, claim, first_seq, lines, summary)
    result = run_prepared(conn, name, params, _BINARY[: len(params)], pq.ExecStatus.COMMAND_OK)
    return (result.command_tuples or 0) == len(lines)


def _append_not_durable(
    conn: Connection, claim: Claim, first_seq: int, lines: Sequence[bytes], summary: bytes | None
) -> bool:
    """Not durable: synchronous_commit off for this transaction only. BEGIN, SET LOCAL, the statement and COMMIT
    go in one psycopg pipeline (one round trip); rare (nothing on a tool call's path asks for it), so psycopg's
    adaptation is not worth avoiding here."""
    params = {"run": claim.run_id, "gen": claim.generation, "before": first_seq - 1, "lines": list(lines)}
    params.update(end=first_seq + len(lines) - 1, summary=summary)
    statement = _APPEND_PSYCOPG if summary is None else _APPEND_WITH_SUMMARY_PSYCOPG
    with conn.pipeline():
        conn.execute("BEGIN")
        conn.execute("SET LOCAL synchronous_commit = off")
        cursor = conn.execute(statement, params, prepare=True)
        conn.execute("COMMIT")
    return cursor.rowcount == len(lines)


def run_prepared(
    conn: Connection, name: bytes, params: Sequence[bytes | None], formats: Sequence[int], expected: pq.ExecStatus
) -> pq.abc.PGresult:
    """Run a prepared write (preparing it first on a connection that has not seen it) under the connection's
    lock; a failure is psycopg's exception for it, as ``execute`` raises (a lost connection an
    ``OperationalError``, so the pool drops it and the caller's retry takes another)."""
    pgconn = conn.pgconn
    with conn.lock:
        known = _prepared.setdefault(conn, set())
        if name not in known:
            sql, types = STATEMENTS[name]
            _check(conn, pgconn.prepare(name, sql.encode(), list(types)), pq.ExecStatus.COMMAND_OK)
            known.add(name)
        # None is SQL NULL: libpq takes it so, and psycopg's own execute sends it this way; the stub says bytes only.
        values = cast("Sequence[bytes]", params)
        try:
            return _check(conn, pgconn.exec_prepared(name, values, list(formats)), expected)
        except pg_errors.InvalidSqlStatementName:  # dropped under us (a DISCARD ALL by a pooler): prepared anew
            known.discard(name)
    return run_prepared(conn, name, params, formats, expected)


def _check(conn: Connection, result: pq.abc.PGresult, expected: pq.ExecStatus) -> pq.abc.PGresult:
    if result.status == expected:
        return result
    if conn.pgconn.status == pq.ConnStatus.BAD:  # the server went away: no SQLSTATE to map
        message = conn.pgconn.get_error_message() or result.get_error_message() or "connection lost"
        raise pg_errors.OperationalError(message.strip())
    raise pg_errors.error_from_result(result, encoding=conn.info.encoding)


def heartbeat(conn: Connection, claim: Claim) -> bool:
    """Renew the claim's heartbeat and lease (the owner's ``lease_ms``) on the database's clock; False if the claim
    is no longer current."""
    found = conn.execute(HEARTBEAT, {"run": claim.run_id, "gen": claim.generation}, prepare=True).fetchone()
    return found is not None
