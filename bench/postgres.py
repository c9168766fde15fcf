"""What the PostgreSQL store costs per ledger transition, with 1, 4 and 8 worker processes, against its floor.

A ledger transition is one fenced append of a group of records (a tool call makes two: its ``started`` group and
its ``finished`` group). Each worker process opens its own store and appends groups of two records of ~300 bytes
to its own run as fast as it can for ``--seconds``; every tenth transition it also claims a run nobody holds (the
claim latency, under the load of everyone's writes). Beside it, in the same run and against the same server:

* ``floor``: the same number of processes, each doing a raw ``INSERT ... COMMIT`` of one row per transition
  through psycopg (autocommit: one round trip and one commit), which is what a durable transition cannot beat;
* ``statement``: the store's one append statement on a bare connection (no pool, no store object), to tell
  what the store's own layers add;
* ``file_store``: the file store's cost per transition (one process, the same groups, fsync'd).

Printed (one JSON object on stdout): per process count, ``transitions_per_s``, append latency (``append_ms``:
median, p99), claim latency (``claim_ms``: median, p99), the floor's ``transitions_per_s`` and the ratio
``vs_floor`` (store / floor); and ``file_store.append_ms``.

Run: ``.venv/bin/python bench/postgres.py`` (a throwaway server is started when ``--url`` is not given; about
40 s), or ``--seconds 1 --procs 1,8`` for a quick look.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

import msgspec
import psycopg

from safepoint.records import LogRecord

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from measure import percentile

BODY = msgspec.Raw(msgspec.json.encode({"call_id": "c" * 24, "tool": "write_file", "note": "x" * 240}))
CLAIMS_PER_PROC = 40
CLAIM_EVERY = 10


def group(seq: int, gen: int) -> list[LogRecord]:
    return [LogRecord(kind="ledger", body=BODY, seq=seq + i, gen=gen) for i in range(2)]


def summary_ms(ns: list[int]) -> dict[str, float]:
    values = sorted(v / 1e6 for v in ns)
    return {"median": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


def store_worker(url: str, tag: str, seconds: float, barrier: Any, out: Any) -> None:
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1)
    for i in range(CLAIMS_PER_PROC):
        store.create_run(f"{tag}-c{i}", b"{}")
    run_id = f"{tag}-w"
    store.create_run(run_id, b"{}")
    claim = store.claim(run_id, "bench")
    seq = 1
    for _ in range(20):  # warm up: prepared statements, caches
        store.append(claim, group(seq, claim.generation))
        seq += 2
    barrier.wait()
    appends: list[int] = []
    claims: list[int] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        # A claim now and then, among the appends: its latency under the load of every process's writes.
        if len(appends) % CLAIM_EVERY == CLAIM_EVERY - 1 and len(claims) < CLAIMS_PER_PROC:
            t0 = time.perf_counter_ns()
            store.claim(f"{tag}-c{len(claims)}", "bench")
            claims.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        store.append(claim, group(seq, claim.generation))
        appends.append(time.perf_counter_ns() - t0)
        seq += 2
    store.close()
    out.put({"claims": claims, "appends": appends})


def statement_worker(url: str, tag: str, seconds: float, barrier: Any, out: Any) -> None:
    """The store's append statement on a bare connection (no pool, no store): what the store's layers add."""
    from safepoint.store import postgres_writes
    from safepoint.store.framing import frame
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1)
    store.create_run(f"{tag}-s", b"{}")
    claim = store.claim(f"{tag}-s", "bench")
    store.close()
    encoder = msgspec.json.Encoder()
    seq = 1
    with psycopg.connect(url, autocommit=True) as conn:

        def one() -> None:
            nonlocal seq
            lines = [frame(encoder.encode(record)) for record in group(seq, claim.generation)]
            assert postgres_writes.append(conn, claim, seq, lines, durable=True)
            seq += 2

        for _ in range(20):
            one()
        barrier.wait()
        appends: list[int] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            one()
            appends.append(time.perf_counter_ns() - t0)
    out.put({"claims": [], "appends": appends})


def floor_worker(url: str, tag: str, seconds: float, barrier: Any, out: Any) -> None:
    line = b"x" * 300
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(20):
            conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", (tag, line), prepare=True)
        barrier.wait()
        appends: list[int] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", (tag, line), prepare=True)
            appends.append(time.perf_counter_ns() - t0)
    out.put({"claims": [], "appends": appends})


def phase(target: Any, url: str, procs: int, seconds: float, name: str) -> tuple[float, list[int], list[int]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    workers = [
        ctx.Process(target=target, args=(url, f"{name}-{procs}-{i}-{os.getpid()}", seconds, barrier, out))
        for i in range(procs)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    results = [out.get(timeout=120 + seconds) for _ in workers]
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    appends = [v for r in results for v in r["appends"]]
    claims = [v for r in results for v in r["claims"]]
    return len(appends) / max(wall, seconds), appends, claims


def file_store_cost(seconds: float) -> dict[str, Any]:
    from safepoint.store.file_store import FileStore

    with tempfile.TemporaryDirectory() as folder:
        store = FileStore(os.path.join(folder, "store"))
        store.create_run("file-run", b"{}")
        claim = store.claim("file-run", "bench")
        seq, appends = 1, []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            store.append(claim, group(seq, claim.generation))
            appends.append(time.perf_counter_ns() - t0)
            seq += 2
        store.close()
    return {"append_ms": summary_ms(appends), "transitions_per_s": round(len(appends) / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway server)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--procs", default="1,4,8")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        from tests import pgserver

        server = pgserver.start()
        url = server.create_database("bench")
    try:
        from safepoint.store.postgres import migrate

        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, tag text, line bytea)")
        report: dict[str, Any] = {"seconds_per_phase": args.seconds, "cores": os.cpu_count()}
        report["load_before"] = os.getloadavg()[0]
        for procs in (int(p) for p in args.procs.split(",")):
            rate, appends, claims = phase(store_worker, url, procs, args.seconds, "store")
            statement_rate, statement_appends, _ = phase(statement_worker, url, procs, args.seconds, "stmt")
            floor_rate, floor_appends, _ = phase(floor_worker, url, procs, args.seconds, "floor")
            report[f"procs_{procs}"] = {
                "transitions_per_s": round(rate, 1),
                "append_ms": summary_ms(appends),
                "claim_ms": summary_ms(claims),
                "statement_transitions_per_s": round(statement_rate, 1),
                "statement_ms": summary_ms(statement_appends),
                "floor_transitions_per_s": round(floor_rate, 1),
                "floor_ms": summary_ms(floor_appends),
                "vs_floor": round(rate / floor_rate, 2),
            }
            print(f"[postgres] {procs} procs: {report[f'procs_{procs}']}", file=sys.stderr, flush=True)
        report["file_store"] = file_store_cost(args.seconds)
        report["load_after"] = os.getloadavg()[0]
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
