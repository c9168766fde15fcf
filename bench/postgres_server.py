"""The server's CPU and WAL per append and per claim, one backend at a time, against schema 9's statements.

``bench/postgres.py`` measures the store under 8 writers, where the server's CPU is one of several costs shared by
2 cores; this isolates it: one connection per database, ``synchronous_commit`` off for the session (the CPU, not
the wait for the disk), the backend's own CPU read from ``/proc/<pid>/stat`` (its clock ticks: hence thousands of
statements a round), and the WAL each statement writes (``pg_current_wal_insert_lsn()`` around a round). In one
throwaway server, side by side and alternating round by round:

* ``append``: the store's append statement (two lines of ~300 bytes and the run's summary, which rides on the
  owner row's update since migration 10), and ``append_schema9``: schema 9's statement, verbatim, on a database
  that has its ``run_summaries`` table back (the summary upserted into its own row);
* ``claim``: the claim of a run nobody holds (the UPDATE itself, the owner record built by the client), and
  ``claim_schema9``: schema 9's statement (a ``FOR UPDATE`` read, then the update, the record built on the
  server);
* ``floor``: a raw one-row ``INSERT`` per statement, the floor ``bench/postgres.py`` compares against.

Printed per kind: ``cpu_us`` and ``wal_bytes`` per statement (medians over the rounds; ``_rounds`` each round's
CPU), and the ratios of now to schema 9. (The log's foreign key, dropped by migration 9, was measured by this
bench's earlier version: about 80 of 225 us per append.)

Run: ``.venv/bin/python bench/postgres_server.py [--statements 3000] [--rounds 4]``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from postgres import SUMMARY, TICKS, group

Connection = psycopg.Connection[tuple[object, ...]]
TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK

# Schema 9's append with a summary (postgres_writes before migration 10), verbatim but for its prepared name.
APPEND_SCHEMA9 = """
WITH o AS (
    UPDATE safepoint.recovery_owners SET last_seq = $4
     WHERE agent_id = $1 AND generation = $2 AND NOT released AND last_seq = $3
    RETURNING agent_id
), ins AS (
    INSERT INTO safepoint.log (run_id, seq, line) SELECT o.agent_id, $3 + u.n, u.line
      FROM o, unnest($5::bytea[]) WITH ORDINALITY AS u(line, n)
    RETURNING 1
), s AS (
    INSERT INTO safepoint.run_summaries (run_id, log_seq, line) SELECT o.agent_id, $4, $6 FROM o
    ON CONFLICT (run_id) DO UPDATE SET log_seq = excluded.log_seq, line = excluded.line
)
SELECT count(*) FROM ins
"""
RUN_SUMMARIES = (
    "CREATE TABLE safepoint.run_summaries (run_id text PRIMARY KEY REFERENCES safepoint.runs ON DELETE CASCADE, "
    "log_seq bigint NOT NULL, line bytea NOT NULL)"
)


def backend_cpu(conn: Connection) -> float:
    with open(f"/proc/{conn.info.backend_pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wal_position(conn: Connection) -> int:
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
    return int(row[0]) if row is not None else 0


def per_statement(conn: Connection, count: int, one: Callable[[int], None]) -> tuple[float, float]:
    """Microseconds of the backend's CPU and bytes of WAL per call of ``one`` (its argument: 0..count-1)."""
    wal, start = wal_position(conn), backend_cpu(conn)
    for i in range(count):
        one(i)
    cpu = (backend_cpu(conn) - start) / count * 1e6
    return cpu, (wal_position(conn) - wal) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=3000, help="per round and kind")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    from tests import pgserver

    from safepoint.store import postgres_writes
    from safepoint.store.framing import frame
    from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT, next_owner
    from safepoint.store.postgres import PostgresStore, migrate
    from safepoint.store.postgres_claims import claim_row, claim_statement
    from safepoint.store.postgres_writes import run_prepared

    n, rounds = args.statements, args.rounds
    postgres_writes.STATEMENTS[b"bench_append_schema9"] = (
        APPEND_SCHEMA9,
        postgres_writes.STATEMENTS[b"safepoint_append_summary_2"][1],
    )
    # Schema 9's claim is the SKIP LOCKED claim's statement with a plain FOR UPDATE (the same CTE).
    claim_types = (25, 16, 3802, 25)
    schema9_claim = claim_statement(True).replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE")
    postgres_writes.STATEMENTS[b"bench_claim_schema9"] = (schema9_claim, claim_types)
    server = pgserver.start()
    conns: dict[str, Connection] = {}
    try:
        claims = {}
        for name in ("now", "schema9"):
            url = server.create_database(name)
            migrate(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, tag text, line bytea)")
                if name == "schema9":
                    conn.execute(RUN_SUMMARIES)
            store = PostgresStore(url, pool_size=1)
            for i in range(200):  # other runs' rows around the writer's, as in a store in use
                store.create_run(f"r{i}", b"{}")
                other = store.claim(f"r{i}", "bench")
                store.append(other, group(1, other.generation), summary=SUMMARY)
            for i in range(n * rounds + 50):
                store.create_run(f"free{i}", b"{}")
            store.create_run("w", b"{}")
            claims[name] = store.claim("w", "bench")
            store.close()
            conns[name] = psycopg.connect(url, autocommit=True)
            conns[name].execute("SET synchronous_commit = off")
        encoder = msgspec.json.Encoder()
        summary = frame(SUMMARY)
        seqs = dict.fromkeys(conns, 1)
        freed = dict.fromkeys(conns, 0)
        lock_timeout = f"{int(CLAIM_LOCK_TIMEOUT * 1000)}ms".encode()

        def appends(name: str, count: int) -> tuple[float, float]:
            conn, claim = conns[name], claims[name]
            statement = b"safepoint_append_summary_2" if name == "now" else b"bench_append_schema9"
            expected = psycopg.pq.ExecStatus.COMMAND_OK if name == "now" else psycopg.pq.ExecStatus.TUPLES_OK

            def one(_: int) -> None:
                seq = seqs[name]
                lines = [frame(encoder.encode(record)) for record in group(seq, claim.generation)]
                numbers = [postgres_writes._INT8_BYTES.pack(v) for v in (claim.generation, seq - 1, seq + 1)]
                params = [claim.run_id.encode(), *numbers, postgres_writes.bytea_array(lines), summary]
                run_prepared(conn, statement, params, (0, 1, 1, 1, 1, 1), expected)
                seqs[name] = seq + 2

            return per_statement(conn, count, one)

        def claims_of_free_runs(name: str, count: int) -> tuple[float, float]:
            ids = [f"free{freed[name] + i}" for i in range(count)]
            freed[name] += count
            fresh = [next_owner(run_id, None, "bench", takeover=False) for run_id in ids]
            encoded = [msgspec.json.encode(state) for state in fresh]

            def one(i: int) -> None:
                if name == "now":
                    now = claim_row(conns[name], ids[i], fresh[i], reopen=False, skip_locked=False)
                    assert now is not None and now.generation == 1
                    return
                params = [ids[i].encode(), b"f", encoded[i], lock_timeout]
                found = run_prepared(conns[name], b"bench_claim_schema9", params, (0, 0, 0, 0), TUPLES_OK)
                assert found.get_value(0, 0) == b"1"

            return per_statement(conns[name], count, one)

        def floor(count: int) -> tuple[float, float]:
            conn = conns["now"]
            line = b"x" * 300

            def one(_: int) -> None:
                conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", ("f", line), prepare=True)

            return per_statement(conn, count, one)

        kinds: dict[str, Callable[[int], tuple[float, float]]] = {
            "append": lambda count: appends("now", count),
            "append_schema9": lambda count: appends("schema9", count),
            "claim": lambda count: claims_of_free_runs("now", count),
            "claim_schema9": lambda count: claims_of_free_runs("schema9", count),
            "floor": floor,
        }
        for kind, measure in kinds.items():  # prepared, cached
            measure(50 if kind.startswith("claim") else 200)
        seen: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
        for _ in range(rounds):
            for kind, measure in kinds.items():
                seen[kind].append(measure(n))
        report: dict[str, Any] = {"statements_per_round": n, "load": os.getloadavg()[0]}
        for kind, values in seen.items():
            report[kind] = {
                "cpu_us": round(statistics.median(v[0] for v in values), 1),
                "wal_bytes": round(statistics.median(v[1] for v in values), 1),
                "cpu_us_rounds": [round(v[0], 1) for v in values],
            }
        for kind in ("append", "claim"):
            ratios = [a[0] / b[0] for a, b in zip(seen[kind], seen[f"{kind}_schema9"], strict=True)]
            report[f"{kind}_vs_schema9"] = round(statistics.median(ratios), 2)
        report["append_vs_floor"] = round(report["append"]["cpu_us"] / report["floor"]["cpu_us"], 2)
    finally:
        for conn in conns.values():
            conn.close()
        server.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
