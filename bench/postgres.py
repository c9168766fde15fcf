"""What the PostgreSQL store costs per ledger transition, with 1, 4 and 8 worker processes, against its floor.

A ledger transition is one fenced append of a group of records (a tool call makes two: its ``started`` group and
its ``finished`` group). Each worker process opens its own store and appends groups of two records of ~300 bytes,
with the run's summary (~250 bytes, as the engine's writer keeps one with every group), to its own run as fast as
it can for ``--seconds``; every tenth transition it also claims a run nobody holds (the
claim latency, under the load of everyone's writes). Beside it, in the same run and against the same server:

* ``floor``: the same number of processes, each doing a raw ``INSERT ... COMMIT`` of one row per transition
  through psycopg (autocommit: one round trip and one commit), which is what a durable transition cannot beat;
* ``statement``: the store's one append statement on a bare connection (no pool, no store object), to tell
  what the store's own layers add;
* ``file_store``: the file store's cost per transition (one process, the same groups, fsync'd).

Printed (one JSON object on stdout): per process count, ``transitions_per_s``, append latency (``append_ms``:
median, p99), claim latency (``claim_ms``: median, p99), the floor's ``transitions_per_s`` and the ratio
``vs_floor`` (store / floor); and ``file_store.append_ms``. The machine is shared, so absolute figures swing with
its load; what a change is judged by is ``vs_floor`` and the cost per transition, which the load does not change
much: ``client_cpu_us`` (the worker's ``process_time``), ``server_cpu_us`` (its backends' CPU, from
``/proc/<pid>/stat``, when the server runs on this machine), ``wal_bytes`` (the WAL the server wrote per
transition: ``pg_current_wal_insert_lsn()`` around each phase); ``hot_updates``, the share of the owner row's
updates (the appends', which keep the summary too, and the claims') that were HOT (no index entry written:
``pg_stat_user_tables``); and ``round_trips`` of one append and of one claim (counted from libpq's protocol
trace, in the bench's own process); ``claim_client_cpu``, a first claim's client CPU with this process's start
time read once against read at every claim (``claim_client_cpu``); ``create_and_claim``, a new run and its
first claim in two commits against one (``create_claimed_run``).

Each process count runs the three kinds side by side ``--rounds`` times (the shared machine's load moves between
phases): rates are the rounds' medians, ``vs_floor`` the median of each round's ratio (``vs_floor_rounds``).

Run: ``.venv/bin/python bench/postgres.py`` (a throwaway server is started when ``--url`` is not given; about
two minutes), or ``--seconds 1 --rounds 1 --procs 1,8`` for a quick look.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
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
SUMMARY = msgspec.json.encode({"status": "running", "calls": 12, "last": "write_file", "note": "s" * 180})
CLAIMS_PER_PROC = 40
CLAIM_EVERY = 10
TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu(url: str, app: str) -> dict[int, float]:
    """CPU seconds so far of each server process serving connections named ``app`` (empty when the server's
    processes cannot be read here)."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))]
    found = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def with_app(url: str, app: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={app}"


def costs(url: str, app: str, before: dict[int, float], cpu0: float, out: dict[str, Any]) -> dict[str, Any]:
    after = backend_cpu(url, app)
    out["client_cpu_s"] = time.process_time() - cpu0
    out["server_cpu_s"] = sum(v - before.get(pid, 0.0) for pid, v in after.items()) if after else None
    return out


def group(seq: int, gen: int) -> list[LogRecord]:
    return [LogRecord(kind="ledger", body=BODY, seq=seq + i, gen=gen) for i in range(2)]


def summary_ms(ns: list[int]) -> dict[str, float]:
    values = sorted(v / 1e6 for v in ns)
    return {"median": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


def store_worker(url: str, tag: str, seconds: float, barrier: Any, out: Any) -> None:
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(with_app(url, tag), pool_size=1)
    for i in range(CLAIMS_PER_PROC):
        store.create_run(f"{tag}-c{i}", b"{}")
    run_id = f"{tag}-w"
    store.create_run(run_id, b"{}")
    claim = store.claim(run_id, "bench")
    seq = 1
    for _ in range(20):  # warm up: prepared statements, caches
        store.append(claim, group(seq, claim.generation), summary=SUMMARY)
        seq += 2
    before = backend_cpu(url, tag)
    barrier.wait()
    cpu0 = time.process_time()
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
        store.append(claim, group(seq, claim.generation), summary=SUMMARY)
        appends.append(time.perf_counter_ns() - t0)
        seq += 2
    out.put(costs(url, tag, before, cpu0, {"claims": claims, "appends": appends}))
    store.close()


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
    summary = frame(SUMMARY)
    with psycopg.connect(with_app(url, tag), autocommit=True) as conn:

        def one() -> None:
            nonlocal seq
            lines = [frame(encoder.encode(record)) for record in group(seq, claim.generation)]
            assert postgres_writes.append(conn, claim, seq, lines, durable=True, summary=summary)
            seq += 2

        for _ in range(20):
            one()
        before = backend_cpu(url, tag)
        barrier.wait()
        cpu0 = time.process_time()
        appends: list[int] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            one()
            appends.append(time.perf_counter_ns() - t0)
        out.put(costs(url, tag, before, cpu0, {"claims": [], "appends": appends}))


def floor_worker(url: str, tag: str, seconds: float, barrier: Any, out: Any) -> None:
    line = b"x" * 300
    with psycopg.connect(with_app(url, tag), autocommit=True) as conn:
        for _ in range(20):
            conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", (tag, line), prepare=True)
        before = backend_cpu(url, tag)
        barrier.wait()
        cpu0 = time.process_time()
        appends: list[int] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            conn.execute("INSERT INTO bench_floor (tag, line) VALUES (%s, %s)", (tag, line), prepare=True)
            appends.append(time.perf_counter_ns() - t0)
        out.put(costs(url, tag, before, cpu0, {"claims": [], "appends": appends}))


def round_trips(url: str) -> dict[str, float]:
    """Round trips of one append and of one claim, counted from libpq's protocol trace of the store's connections
    (a Sync or a simple Query sent is one wait for the server), over 20 of each."""
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1)
    store.create_run("trips-w", b"{}")
    claim = store.claim("trips-w", "bench")
    for i in range(20):
        store.create_run(f"trips-c{i}", b"{}")
    seq = 1
    for _ in range(10):
        store.append(claim, group(seq, claim.generation), summary=SUMMARY)
        seq += 2
    pool, held = store._pool, store._held
    assert pool is not None and held is not None and held._conn is not None
    with pool.connection() as other:
        conns = [held._conn, other]
    counted: dict[str, float] = {}
    with tempfile.TemporaryFile("w+") as trace:
        for what in ("append", "claim"):
            trace.seek(0)
            trace.truncate()
            for conn in conns:
                conn.pgconn.trace(trace.fileno())
            for i in range(20):
                if what == "append":
                    store.append(claim, group(seq, claim.generation), summary=SUMMARY)
                    seq += 2
                else:
                    store.claim(f"trips-c{i}", "bench")
            for conn in conns:
                conn.pgconn.untrace()
            trace.seek(0)
            sent = [f[3].split()[0] for f in (line.split("\t") for line in trace) if f[1:2] == ["F"]]
            waits = sum(
                1
                for i, k in enumerate(sent)
                if k in ("Sync", "Query") or (k == "Flush" and sent[i - 1 : i] != ["Sync"])
            )
            counted[what] = waits / 20
    store.close()
    return counted


def claim_client_cpu(url: str, rounds: int = 6, claims: int = 150) -> dict[str, Any]:
    """A first claim's client CPU (``process_time`` per claim, one process, the bench's own), with this process's
    start time read once (``liveness.own_start_time``, the code) and read from /proc at every claim (as before
    it was cached: the cache emptied before each claim), alternating in ``rounds`` rounds; medians and the ratio."""
    from safepoint.store import liveness
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1)
    runs = iter(range(10**9))
    seen: dict[str, list[float]] = {"cached": [], "reread": []}
    for r in range(rounds):
        for mode in ("cached", "reread") if r % 2 == 0 else ("reread", "cached"):
            names = [f"cpu-{next(runs)}" for _ in range(claims)]
            for name in names:
                store.create_run(name, b"{}")
            cpu0 = time.process_time()
            for name in names:
                if mode == "reread":
                    liveness._own_start = None
                store.claim(name, "bench")
            seen[mode].append((time.process_time() - cpu0) / claims * 1e6)
    store.close()
    cached, reread = (statistics.median(seen[m]) for m in ("cached", "reread"))
    return {
        "cached_us": round(cached, 1),
        "reread_us": round(reread, 1),
        "cached_over_reread": round(cached / reread, 3),
    }


def create_and_claim(url: str, rounds: int = 6, runs: int = 100) -> dict[str, Any]:
    """A new run and its first claim: ``create_run`` then ``claim`` (two commits) against ``create_claimed_run``
    (one), alternating in ``rounds`` rounds, one process; the medians of each round's median (ms) and the ratio."""
    from safepoint.store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=1)
    names = iter(range(10**9))
    seen: dict[str, list[float]] = {"two_commits": [], "one_commit": []}
    for r in range(rounds):
        for mode in ("two_commits", "one_commit") if r % 2 == 0 else ("one_commit", "two_commits"):
            times = []
            for _ in range(runs):
                name = f"new-{next(names)}"
                t0 = time.perf_counter()
                if mode == "one_commit":
                    store.create_claimed_run(name, b"{}", "bench")
                else:
                    store.create_run(name, b"{}")
                    store.claim(name, "bench")
                times.append(time.perf_counter() - t0)
            seen[mode].append(statistics.median(times) * 1000)
    store.close()
    two, one = (statistics.median(seen[m]) for m in ("two_commits", "one_commit"))
    return {"two_commits_ms": round(two, 3), "one_commit_ms": round(one, 3), "one_over_two": round(one / two, 3)}


PHASE_COSTS: dict[str, dict[str, Any]] = {}  # per phase name: what one transition cost (``phase`` fills it)


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
    with psycopg.connect(url, autocommit=True) as conn:
        barrier.wait()
        wal_before = wal_position(conn)  # after the workers' warm-up, a moment into their timed loops
        started = time.perf_counter()
        results = [out.get(timeout=120 + seconds) for _ in workers]
        wall = time.perf_counter() - started
        wal_bytes = wal_position(conn) - wal_before
    for worker in workers:
        worker.join()
    appends = [v for r in results for v in r["appends"]]
    claims = [v for r in results for v in r["claims"]]
    per = max(len(appends), 1)
    server = [r["server_cpu_s"] for r in results]
    PHASE_COSTS[name] = {
        "client_cpu_us": round(sum(r["client_cpu_s"] for r in results) / per * 1e6, 1),
        "server_cpu_us": None if None in server else round(sum(server) / per * 1e6, 1),
        # What the server logged while the phase ran (the store's claims too), over the transitions timed.
        "wal_bytes": round(wal_bytes / per, 1),
    }
    return len(appends) / max(wall, seconds), appends, claims


def wal_position(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The server's WAL insert position, in bytes."""
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
    return int(row[0]) if row is not None else 0


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
            store.append(claim, group(seq, claim.generation), summary=SUMMARY)
            appends.append(time.perf_counter_ns() - t0)
            seq += 2
        store.close()
    return {"append_ms": summary_ms(appends), "transitions_per_s": round(len(appends) / seconds, 1)}


def table_updates(url: str) -> dict[str, tuple[int, int]]:
    """Updates so far of the tables every append updates: (all, HOT). A HOT update writes no index entry."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = 'safepoint' "
            "AND relname = 'recovery_owners'"
        ).fetchall()
    return {str(name): (int(upd), int(hot)) for name, upd, hot in rows}


def hot_share(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, float | None]:
    shares: dict[str, float | None] = {}
    for name, (upd, hot) in after.items():
        upd0, hot0 = before.get(name, (0, 0))
        shares[name] = round((hot - hot0) / (upd - upd0), 3) if upd > upd0 else None
    return shares


def median_costs(seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Each cost's median over the rounds (None when a server's processes could not be read)."""
    found: dict[str, Any] = {}
    for key in seen[0]:
        values = [s[key] for s in seen if s[key] is not None]
        found[key] = round(statistics.median(values), 1) if values else None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway server)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="store, statement and floor phases, side by side")
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
        with psycopg.connect(url, autocommit=True) as conn:
            found = conn.execute("SELECT max(version) FROM safepoint.schema_migrations").fetchone()
        report["schema_version"] = found[0] if found else None
        report["round_trips"] = round_trips(url)
        report["claim_client_cpu"] = claim_client_cpu(url)
        report["create_and_claim"] = create_and_claim(url)
        for procs in (int(p) for p in args.procs.split(",")):
            rates: dict[str, list[float]] = {"store": [], "stmt": [], "floor": []}
            latencies: dict[str, list[int]] = {"store": [], "stmt": [], "floor": [], "claims": []}
            costs_seen: dict[str, list[dict[str, Any]]] = {"store": [], "stmt": [], "floor": []}
            updates = table_updates(url)
            for r in range(args.rounds):  # the three side by side, again: the machine's load moves in between
                for kind, target in (("store", store_worker), ("stmt", statement_worker), ("floor", floor_worker)):
                    rate, appends, claims = phase(target, url, procs, args.seconds, f"{kind}{r}")
                    rates[kind].append(rate)
                    latencies[kind] += appends
                    latencies["claims"] += claims
                    costs_seen[kind].append(PHASE_COSTS[f"{kind}{r}"])
            ratios = [store / floor for store, floor in zip(rates["store"], rates["floor"], strict=True)]
            report[f"procs_{procs}"] = {
                "transitions_per_s": round(statistics.median(rates["store"]), 1),
                "append_ms": summary_ms(latencies["store"]),
                "claim_ms": summary_ms(latencies["claims"]),
                "statement_transitions_per_s": round(statistics.median(rates["stmt"]), 1),
                "statement_ms": summary_ms(latencies["stmt"]),
                "floor_transitions_per_s": round(statistics.median(rates["floor"]), 1),
                "floor_ms": summary_ms(latencies["floor"]),
                "vs_floor": round(statistics.median(ratios), 2),
                "vs_floor_rounds": [round(ratio, 2) for ratio in ratios],
                "per_transition": {kind: median_costs(seen) for kind, seen in costs_seen.items()},
                "hot_updates": hot_share(updates, table_updates(url)),
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
