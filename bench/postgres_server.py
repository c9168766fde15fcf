"""The server's CPU per append and per claim, one backend at a time, against the log with its old foreign key.

``bench/postgres.py`` measures the store under 8 writers, where the server's CPU is one of several costs shared by
2 cores; this isolates it: one connection per database, ``synchronous_commit`` off for the session (the CPU, not
the wait for the disk), the backend's own CPU read from ``/proc/<pid>/stat`` (its clock ticks: hence thousands of
statements a round). In one throwaway server, side by side and alternating round by round:

* ``append_us``: the store's append statement (two lines of ~300 bytes and the run's summary) on a database at
  this schema, and ``append_with_log_key_us`` on one whose log has the foreign key back as schema 1 made it
  (before migration 9), its ratio ``log_key_ratio``;
* ``claim_us``: the one-statement claim of a run nobody holds;
* ``floor_us``: a raw one-row ``INSERT`` per statement, the floor ``bench/postgres.py`` compares against.

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


def backend_cpu(conn: Connection) -> float:
    with open(f"/proc/{conn.info.backend_pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def per_statement(conn: Connection, count: int, one: Callable[[int], None]) -> float:
    """Microseconds of the backend's CPU per call of ``one`` (its argument: 0..count-1)."""
    start = backend_cpu(conn)
    for i in range(count):
        one(i)
    return (backend_cpu(conn) - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=3000, help="per round and kind")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    from tests import pgserver

    from safepoint.store import postgres_writes
    from safepoint.store.framing import frame
    from safepoint.store.ownership import next_owner
    from safepoint.store.postgres import PostgresStore, migrate
    from safepoint.store.postgres_claims import claim_row

    n, rounds = args.statements, args.rounds
    server = pgserver.start()
    conns: dict[str, Connection] = {}
    try:
        claims = {}
        for name in ("now", "with_log_key"):
            url = server.create_database(name)
            migrate(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, tag text, line bytea)")
                if name == "with_log_key":
                    conn.execute(
                        "ALTER TABLE safepoint.log ADD CONSTRAINT log_run_id_fkey FOREIGN KEY (run_id) "
                        "REFERENCES safepoint.runs ON DELETE CASCADE"
                    )
            store = PostgresStore(url, pool_size=1)
            for i in range(200):  # other runs' rows around the writer's, as in a store in use
                store.create_run(f"r{i}", b"{}")
                other = store.claim(f"r{i}", "bench")
                store.append(other, group(1, other.generation), summary=SUMMARY)
            if name == "now":
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
        freed = [0]

        def appends(name: str, count: int) -> float:
            conn, claim = conns[name], claims[name]

            def one(_: int) -> None:
                seq = seqs[name]
                lines = [frame(encoder.encode(record)) for record in group(seq, claim.generation)]
                assert postgres_writes.append(conn, claim, seq, lines, durable=True, summary=summary)
                seqs[name] = seq + 2

            return per_statement(conn, count, one)

        def claims_of_free_runs(count: int) -> float:
            ids = [f"free{freed[0] + i}" for i in range(count)]
            freed[0] += count
            fresh = [msgspec.json.encode(next_owner(run_id, None, "bench", takeover=False)) for run_id in ids]

            def one(i: int) -> None:
                found = claim_row(conns["now"], ids[i], fresh[i], reopen=False, skip_locked=False)
                assert found is not None and found.generation == 1

            return per_statement(conns["now"], count, one)

        def floor(count: int) -> float:
            conn = conns["now"]
            line = b"x" * 300

            def one(_: int) -> None:
                conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", ("f", line), prepare=True)

            return per_statement(conn, count, one)

        for name in conns:
            appends(name, 200)  # prepared, cached
        claims_of_free_runs(50)
        floor(200)
        seen: dict[str, list[float]] = {"append_us": [], "append_with_log_key_us": [], "claim_us": [], "floor_us": []}
        for _ in range(rounds):
            seen["append_us"].append(appends("now", n))
            seen["append_with_log_key_us"].append(appends("with_log_key", n))
            seen["claim_us"].append(claims_of_free_runs(n))
            seen["floor_us"].append(floor(n))
        report: dict[str, Any] = {"statements_per_round": n, "load": os.getloadavg()[0]}
        for key, values in seen.items():
            report[key] = round(statistics.median(values), 1)
            report[f"{key}_rounds"] = [round(v, 1) for v in values]
        ratios = [a / b for a, b in zip(seen["append_us"], seen["append_with_log_key_us"], strict=True)]
        report["log_key_ratio"] = round(statistics.median(ratios), 2)
        report["append_vs_floor"] = round(report["append_us"] / report["floor_us"], 2)
    finally:
        for conn in conns.values():
            conn.close()
        server.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
