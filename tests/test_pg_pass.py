"""Issue 14 §2: a supervisor pass over 100,000 finished runs and 100 open ones costs what the 100 open ones cost.
Counted, not timed: the rows the pass query reads (its plan, from EXPLAIN ANALYZE) and the runs a daemon's pass
looks at."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from safepoint.store.postgres import PASS_RUNS, POST_MARGIN_S, PostgresStore
from safepoint.supervisor.daemon import Daemon, DaemonOptions

from .conftest import database_names

FINISHED = 100_000
OPEN = 100


@pytest.fixture(scope="module")
def crowded(pg_server):
    """A store of FINISHED released runs (some posted to long ago) and OPEN held ones, made in bulk by SQL (once:
    neither test changes it)."""
    fresh_url = pg_server.create_database(f"t{next(database_names)}")
    store = PostgresStore(fresh_url)
    store.list_runs()  # the schema
    with psycopg.connect(fresh_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO safepoint.runs (run_id, header, control_at) SELECT 'done-' || g, '\\x00'::bytea, "
            "CASE WHEN g %% 10 = 0 THEN clock_timestamp() - interval '1 day' END FROM generate_series(1, %s) g",
            (FINISHED,),
        )
        conn.execute(
            "INSERT INTO safepoint.recovery_owners (recovery_class, owner_id, generation, agent_id, released) "
            "SELECT 'root', 'done-' || g, 1, 'done-' || g, true FROM generate_series(1, %s) g",
            (FINISHED,),
        )
        conn.execute(
            "INSERT INTO safepoint.runs (run_id, header) SELECT 'open-' || g, '\\x00'::bytea "
            "FROM generate_series(1, %s) g",
            (OPEN,),
        )
        conn.execute(
            "INSERT INTO safepoint.recovery_owners (recovery_class, owner_id, generation, agent_id) "
            "SELECT 'root', 'open-' || g, 0, 'open-' || g FROM generate_series(1, %s) g",
            (OPEN,),
        )
        conn.execute("ANALYZE safepoint.runs")
        conn.execute("ANALYZE safepoint.recovery_owners")
    yield store
    store.close()  # (left open, its pool's threads outlived the module and retried a stopped server at exit)
    store.close()


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def test_the_pass_query_reads_only_open_rows_through_indexes(crowded):
    with psycopg.connect(crowded.url, autocommit=True) as conn:
        since = conn.execute("SELECT clock_timestamp() - interval '5 seconds'").fetchone()[0]
        for args in ((since, POST_MARGIN_S), (None, POST_MARGIN_S)):
            row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {PASS_RUNS}", args).fetchone()
            plan = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
            scans = _scans(plan)
            assert {scan["Relation Name"] for scan in scans} == {"recovery_owners", "runs"}
            for scan in scans:
                assert scan["Node Type"] != "Seq Scan", scan
                read = scan["Actual Rows"] * scan["Actual Loops"] + scan.get("Rows Removed by Filter", 0)
                limit = OPEN if args[0] is not None else OPEN + FINISHED // 10  # the first pass: every post ever
                assert read <= limit, (scan["Relation Name"], read)
    assert len(crowded.pass_runs(since)) == OPEN


def test_a_daemon_pass_looks_at_the_open_runs_only(crowded, tmp_path, monkeypatch):
    looked: list[str] = []
    real_owner = crowded.owner

    def owner(run_id: str):
        looked.append(run_id)
        return real_owner(run_id)

    monkeypatch.setattr(crowded, "owner", owner)
    daemon = Daemon(crowded, DaemonOptions(workspace=str(tmp_path), once=True), lambda record: None)
    daemon.last_pass = crowded.clock()  # a pass after the first one
    daemon.tick()
    assert sorted(set(looked)) == sorted(f"open-{g}" for g in range(1, OPEN + 1))
    assert len(looked) == OPEN
