"""The PostgreSQL store's claim in one statement and one round trip, for the claims a supervisor makes most.

A claim locks the run's owner row, judges the owner it records and writes the next generation. Through the
explicit section that is two round trips: the locking read, the judgement in Python, then the write and COMMIT.
Here one statement raises the generation when the row needs no judgement (never claimed, or released: a queued
submission, a resumption, an approval) and returns the row as it was with the database's time: for ``claim`` the
UPDATE itself, filtered on a free row (no locking read before it: its lock was a WAL record of its own, about a
sixth of the claim's server CPU); for a supervisor's ``try_claim`` a CTE that locks the row first with ``FOR
UPDATE SKIP LOCKED`` (a row another claim holds is passed over, never waited for). One autocommit statement, one
round trip, sent
as the append is (libpq's prepared statement, ``postgres_writes.run_prepared``). Measured: the same CTE between
BEGIN, ``SET LOCAL`` and COMMIT in a psycopg pipeline was one round trip too, but about 700 us of client CPU (the
pipeline's many small reads and writes), a median of 8 ms under the bench's load of 8 writers.

A row held by an owner is returned unchanged, and the caller judges it in Python as before
(``ownership.next_owner``): a live owner refuses at once, with no further trip; a dead one (a crash, a lapsed
lease) takes the explicit section, whose rules (liveness by pid on this host, heartbeats on the database's clock)
stay in one place. Rejected: the liveness rule in SQL (a second copy of it, and a pid is only
judged on its own host).

What the statement writes is what ``next_owner`` computes: the caller passes the owner record a first claim would
write (``fresh``: holder, process, host, times, the identity it asked for); the statement keeps the row's
identity, generation and terminal state when it has an owner already, as ``next_owner`` does.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
import psycopg
from psycopg import pq

from safepoint.errors import CorruptRecordError
from safepoint.records import OwnerState
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT
from safepoint.store.postgres_schema import SCHEMA
from safepoint.store.postgres_writes import DB_NOW_ISO, STATEMENTS, run_prepared

_TEXT, _BOOL, _JSONB = 25, 16, 3802  # type oids

Connection = psycopg.Connection[tuple[object, ...]]
SEED_OWNER = "recovery_class, owner_id, generation, agent_id, message_id, active_at, terminal_at, terminal_status"


def _iso(column: str) -> str:
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""


def _next_owner(row: str, *, fresh_columns: bool = False) -> dict[str, str]:
    """What ``next_owner`` writes, as SQL over the owner row named ``row`` (never claimed when its holder_state is
    NULL; $2 whether the claim reopens, $3 the owner record a first claim writes, as JSON). ``fresh_columns``: a
    first claim's identity and time come from their own parameters ($5 to $8), so $3 is parsed only for a released
    row."""
    first = f"{row}.holder_state IS NULL"
    fresh_or_reopened = f"{first} OR $2"
    if fresh_columns:
        fresh = {"recovery_class": "$5", "owner_id": "$6", "message_id": "$7", "claimed_at": "$8::timestamptz"}
    else:
        fresh = {key: f"$3::jsonb ->> '{key}'" for key in ("recovery_class", "owner_id", "message_id")}
        fresh["claimed_at"] = "($3::jsonb ->> 'claimed_at')::timestamptz"
    return {
        "generation": f"CASE WHEN {first} THEN 1 ELSE {row}.generation + 1 END",
        "recovery_class": f"CASE WHEN {first} THEN {fresh['recovery_class']} ELSE {row}.recovery_class END",
        "owner_id": f"CASE WHEN {first} THEN {fresh['owner_id']} ELSE {row}.owner_id END",
        "message_id": f"CASE WHEN {first} THEN {fresh['message_id']} ELSE {row}.message_id END",
        "active_at": f"CASE WHEN {fresh_or_reopened} THEN {fresh['claimed_at']} ELSE {row}.active_at END",
        "terminal_at": f"CASE WHEN {fresh_or_reopened} THEN NULL ELSE {row}.terminal_at END",
        "terminal_status": f"CASE WHEN {fresh_or_reopened} THEN NULL ELSE {row}.terminal_status END",
        "lease_ms": f"CASE WHEN {first} THEN 30000 ELSE coalesce((convert_from({row}.holder_state, 'UTF8')::jsonb "
        "->> 'lease_ms')::bigint, 30000) END",
    }


def _owner_write(n: dict[str, str], first: str | None = None) -> str:
    """The SET list of a claim's update, from the new owner's values ``n`` (SQL expressions). ``first``: the
    condition under which the row was never claimed, whose record is the caller's ($3) as it stands but for the
    heartbeat, on the database's clock: sent in two pieces ($9 before the heartbeat's value, $10 after), joined
    around the database's time. Building it on the server (parsing $3, merging the new values, formatting the
    times) was more than half of a first claim's statement time (``pg_stat_statements``: 35 against 89 us)."""
    built = f"""convert_to(($3::jsonb || jsonb_build_object(
               'generation', {n["generation"]}, 'recovery_class', {n["recovery_class"]},
               'owner_id', {n["owner_id"]}, 'message_id', {n["message_id"]}, 'active_at', {_iso(n["active_at"])},
               'terminal_at', {_iso(n["terminal_at"])}, 'terminal_status', {n["terminal_status"]},
               'lease_ms', {n["lease_ms"]}, 'heartbeat_at', {DB_NOW_ISO}))::text, 'UTF8')"""
    if first is not None:
        built = f"CASE WHEN {first} THEN convert_to($9 || {DB_NOW_ISO} || $10, 'UTF8') ELSE {built} END"
    return f"""generation = {n["generation"]}, recovery_class = {n["recovery_class"]}, owner_id = {n["owner_id"]},
           message_id = {n["message_id"]}, active_at = {n["active_at"]}, terminal_at = {n["terminal_at"]},
           terminal_status = {n["terminal_status"]}, released = false,
           lease_until = clock_timestamp() + make_interval(secs => ({n["lease_ms"]}) / 1000.0),
           holder_state = {built}"""


def _judged(row: str) -> str:
    """The owner ``row`` records, as JSON ``OwnerState`` reads, for the caller to judge."""
    return f"""convert_from({row}.holder_state, 'UTF8')::jsonb || jsonb_build_object(
           'recovery_class', {row}.recovery_class, 'owner_id', {row}.owner_id, 'generation', {row}.generation,
           'agent_id', {row}.agent_id, 'message_id', {row}.message_id, 'active_at', {_iso(f"{row}.active_at")},
           'terminal_at', {_iso(f"{row}.terminal_at")}, 'terminal_status', {row}.terminal_status)"""


def claim_statement(skip_locked: bool) -> str:
    """The claim's statement ($1 the run, $2 whether it reopens, $3 the owner record a first claim writes, as JSON;
    $4 the lock timeout): the generation written (NULL when the row has an owner to judge), the owner the row
    recorded when there is one to judge (JSON, as ``OwnerState`` reads it; NULL when the generation was written:
    building it for nobody was about 40 of a claim's 290 us of server CPU) and the database's time. The lock
    timeout is set for this statement's own transaction (``set_config(..., true)``) in the filter that runs before
    the row is locked: an autocommit statement has no ``SET LOCAL`` before it.

    A claim that may wait (``claim``) is the UPDATE itself, filtered on a row nobody holds: it takes the row lock
    only to write, and a row that changed while it waited is judged again as it now is (READ COMMITTED re-checks
    the filter on the newest version). Rejected: the locking read before it (``FOR UPDATE``), which a supervisor's
    SKIP LOCKED claim needs: it writes the lock into the row, a WAL record of its own, before the update writes
    another, and waits for an append in flight on a row a live owner holds, only to refuse. When the update
    writes nothing, the row as this statement's snapshot saw it is returned to judge: held, the caller judges its
    owner (a live one refused, a dead one to the explicit section); free (a claim committed while this one
    waited), the caller hands the run to the explicit section, which locks and judges what is there now."""
    if not skip_locked:
        return f"""
WITH won AS (
    UPDATE {SCHEMA}.recovery_owners o
       SET {_owner_write(_next_owner("o", fresh_columns=True), first="o.holder_state IS NULL")}
     WHERE o.agent_id = $1 AND (o.holder_state IS NULL OR o.released)
       AND set_config('lock_timeout', $4, true) IS NOT NULL
    RETURNING o.generation
), cur AS (
    SELECT {SEED_OWNER}, holder_state, released FROM {SCHEMA}.recovery_owners WHERE agent_id = $1
)
SELECT won.generation,
       CASE WHEN won.generation IS NULL AND cur.holder_state IS NOT NULL AND NOT cur.released
            THEN {_judged("cur")} END,
       {DB_NOW_ISO}
  FROM cur LEFT JOIN won ON true
"""
    return f"""
WITH cur AS (
    SELECT {SEED_OWNER}, holder_state, released, holder_state IS NULL AS first
      FROM {SCHEMA}.recovery_owners
     WHERE agent_id = $1 AND set_config('lock_timeout', $4, true) IS NOT NULL FOR UPDATE SKIP LOCKED
), n AS (
    SELECT agent_id, {", ".join(f"{value} AS {name}" for name, value in _next_owner("cur").items())}
      FROM cur WHERE first OR released
), won AS (
    UPDATE {SCHEMA}.recovery_owners o
       SET {_owner_write({name: f"n.{name}" for name in _next_owner("n")})}
      FROM n WHERE o.agent_id = n.agent_id
    RETURNING o.generation
)
SELECT won.generation, CASE WHEN won.generation IS NULL THEN {_judged("cur")} END, {DB_NOW_ISO}
  FROM cur LEFT JOIN won ON true
"""


_NAMES = {False: b"safepoint_claim_4", True: b"safepoint_claim_skip_locked_3"}
STATEMENTS[_NAMES[False]] = (claim_statement(False), (_TEXT, _BOOL, _TEXT, *(_TEXT,) * 7))
STATEMENTS[_NAMES[True]] = (claim_statement(True), (_TEXT, _BOOL, _JSONB, _TEXT))
_HEARTBEAT = b'"heartbeat_at":"'
_record_encoder = msgspec.json.Encoder()


def _around_heartbeat(record: bytes) -> tuple[bytes, bytes]:
    """``record`` (an encoded ``OwnerState``) cut around its heartbeat's value: what comes before it (its key and
    opening quote included) and what comes after (the closing quote on). A time is an ISO string: no quote in it."""
    start = record.index(_HEARTBEAT) + len(_HEARTBEAT)
    return record[:start], record[record.index(b'"', start) :]


class Found(msgspec.Struct, frozen=True):
    """What the claim's statement returned: the generation it wrote (None: the row has an owner to judge), the
    owner the row recorded when there is one to judge (None before a first claim, and when it wrote the generation)
    and the database's time."""

    generation: int | None
    current: OwnerState | None
    at: datetime


def claim_row(conn: Connection, run_id: str, fresh: OwnerState, *, reopen: bool, skip_locked: bool) -> Found | None:
    """Run the claim's statement (autocommit: its own transaction, one round trip) for ``fresh``, the owner record
    a first claim writes; None when no row was locked (no such run, or ``skip_locked`` and another transaction
    holds it)."""
    record = _record_encoder.encode(fresh)
    params: list[bytes | None] = [run_id.encode(), b"t" if reopen else b"f", record]
    params.append(f"{int(CLAIM_LOCK_TIMEOUT * 1000)}ms".encode())
    if not skip_locked:
        params += [fresh.recovery_class.encode(), fresh.owner_id.encode()]
        params += [None if fresh.message_id is None else fresh.message_id.encode(), fresh.claimed_at.encode()]
        params += _around_heartbeat(record)
    result = run_prepared(conn, _NAMES[skip_locked], params, (0,) * len(params), pq.ExecStatus.TUPLES_OK)
    if result.ntuples == 0:
        return None
    generation, current, at = (result.get_value(0, i) for i in range(3))
    try:
        return Found(
            generation=None if generation is None else int(generation),
            current=None if current is None else msgspec.json.decode(current, type=OwnerState),
            at=datetime.fromisoformat((at or b"").decode()),
        )
    except (ValueError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(f"recovery owner of run {run_id!r} cannot be read: {exc}") from None
