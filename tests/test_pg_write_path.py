"""The PostgreSQL store's lean write path (issue 14 §5): a fenced append, a heartbeat and a claim are one round trip
each (a test fails if a change adds one); the fencing is in the statement; a reply lost after the commit is retried
without refusing its own write; the log's end kept on the owner row survives a hand edit and a migration from the
version before it."""

from __future__ import annotations

import os
import subprocess
import tempfile

import msgspec
import psycopg
import pytest
from psycopg import errors as pg_errors

from safepoint.errors import RunLockedError, StaleGenerationError, StoreError
from safepoint.records import LogRecord
from safepoint.store import postgres_pool, postgres_writes
from safepoint.store.postgres import PostgresStore, migrate
from safepoint.store.postgres_schema import LATEST

from .conftest import database_names


def rec(seq: int, text: str = "x", gen: int = 1) -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq, gen=gen)


def texts(store: PostgresStore, run_id: str) -> list[str]:
    read = store.read_log(run_id)
    assert not read.problems
    return [msgspec.json.decode(r.body)["text"] for r in read.records]


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]] | None:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


@pytest.fixture
def store(pg_server):
    made = PostgresStore(pg_server.create_database(f"t{next(database_names)}"), pool_size=1)
    yield made
    made.close()


def round_trips(store: PostgresStore, action) -> int:
    """How many times the client waited for the server during ``action`` (a Sync, a Flush or a simple Query sent),
    read from libpq's protocol trace of every connection the store has: the writer's held one and the pool's (a
    store of ``pool_size=1``: at most one besides; a connection opened during ``action`` fails the count)."""
    pool, held = store._pool, store._held
    assert pool is not None and held is not None
    conns = [held._conn] if held._conn is not None else []
    with pool.connection() as conn:
        conns.append(conn)
    opened = pool.get_stats().get("connections_num", 0)
    with tempfile.TemporaryFile("w+") as trace:
        for conn in conns:
            conn.pgconn.trace(trace.fileno())
        action()
        for conn in conns:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [fields[3].split()[0] for fields in (line.split("\t") for line in trace) if fields[1:2] == ["F"]]
    assert pool.get_stats().get("connections_num", 0) == opened, "a connection was opened: its trips are not counted"
    # A Flush right after a Sync asks for nothing new (psycopg's pipeline exit sends both): one wait, not two.
    return sum(
        1
        for i, kind in enumerate(sent)
        if kind in ("Sync", "Query") or (kind == "Flush" and (i == 0 or sent[i - 1] != "Sync"))
    )


def test_an_append_a_heartbeat_and_a_claim_are_one_round_trip_each(store, monkeypatch):
    # the idle check pings a connection unused for IDLE_CHECK_S (2 s): a loaded machine can pause that long between
    # two of these steps, and the ping is the pool's, not the write path's; the count here is the write path's
    monkeypatch.setattr(postgres_pool, "IDLE_CHECK_S", 3600.0)
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    for seq in range(1, 12, 2):  # past psycopg's prepare threshold, and the idle check's window is not reached
        store.append(claim, [rec(seq), rec(seq + 1)])
    store.heartbeat(claim)
    assert round_trips(store, lambda: store.append(claim, [rec(13), rec(14)])) == 1
    assert round_trips(store, lambda: store.append(claim, [rec(15)], durable=False)) == 1
    assert round_trips(store, lambda: store.heartbeat(claim)) == 1
    # The claim's statement is prepared once per connection (one more round trip, once): the first claim above may
    # have run on the connection the writer holds since, so one claim warms the pool's other connection first.
    store.create_run("w", b"{}")
    store.claim("w", "me")
    store.create_run("s", b"{}")
    assert round_trips(store, lambda: store.claim("s", "me")) == 1  # never claimed
    store.release(store.claim("s", "me", takeover=True))
    assert round_trips(store, lambda: store.claim("s", "me")) == 1  # released

    def refused() -> None:
        with pytest.raises(RunLockedError):
            store.claim("s", "other")

    assert round_trips(store, refused) == 1  # a live owner refuses without a second trip
    store.try_claim("s", "other")  # a statement's first use on a connection prepares it: one more trip, once
    assert round_trips(store, lambda: store.try_claim("s", "other")) == 1  # skipped: held by a live owner
    store.create_run("t", b"{}")
    found: list[object] = []
    assert round_trips(store, lambda: found.append(store.try_claim("t", "daemon"))) == 1
    assert found[0] is not None and found[0].generation == 1
    assert texts(store, "r")[-1] == "x" and len(texts(store, "r")) == 15


def test_the_fencing_is_in_the_statement_a_stale_or_released_writer_inserts_nothing(store):
    store.create_run("r", b"{}")
    old = store.claim("r", "me")
    store.append(old, [rec(1, "a")])
    new = store.claim("r", "other", takeover=True)
    with pytest.raises(StaleGenerationError):
        store.append(old, [rec(2, "stale", gen=old.generation)])
    # the statement alone, as a stale writer runs it: nothing inserted, the log's end unchanged
    with store._pool.connection() as conn:  # type: ignore[union-attr]
        assert not postgres_writes.append(conn, old, 2, [b"stale"], durable=True)
    store.append(new, [rec(2, "b", gen=new.generation)])
    store.release(new)
    with pytest.raises(StaleGenerationError):
        store.append(new, [rec(3, "after release", gen=new.generation)])
    with pytest.raises(StaleGenerationError):
        store.heartbeat(old)
    assert texts(store, "r") == ["a", "b"]


def test_a_reply_lost_after_the_commit_is_retried_and_its_own_write_is_not_a_fork(store, monkeypatch):
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [rec(1, "a")])
    real = postgres_writes.append
    calls = []

    def commit_then_lose_the_reply(conn, *args, **kwargs):
        calls.append(1)
        done = real(conn, *args, **kwargs)
        if len(calls) == 1:  # the server committed; the client never heard (a restart, a failover)
            raise pg_errors.AdminShutdown("terminating connection due to administrator command")
        return done

    monkeypatch.setattr(postgres_writes, "append", commit_then_lose_the_reply)
    store.append(claim, [rec(2, "b"), rec(3, "c")])
    assert len(calls) == 2
    assert texts(store, "r") == ["a", "b", "c"]
    # Without a lost reply, the same records twice are a second writer of this generation: refused.
    monkeypatch.setattr(postgres_writes, "append", real)
    with pytest.raises(StoreError, match="another writer slipped in"):
        store.append(claim, [rec(2, "b"), rec(3, "c")])


def test_a_log_end_edited_behind_or_ahead_of_the_log_is_corrected_by_the_next_append(store):
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [rec(1, "a"), rec(2, "b")])
    for wrong in (0, 1, 99):
        sql(store.url, "UPDATE safepoint.recovery_owners SET last_seq = %s WHERE agent_id = 'r'", (wrong,))
        seq = len(texts(store, "r")) + 1
        store.append(claim, [rec(seq, f"after {wrong}")])
        assert sql(store.url, "SELECT last_seq FROM safepoint.recovery_owners WHERE agent_id = 'r'") == [(seq,)]
    assert texts(store, "r") == ["a", "b", "after 0", "after 1", "after 99"]
    with pytest.raises(StoreError, match="another writer slipped in"):  # a gap is still refused
        store.append(claim, [rec(9, "gap")])


def test_migration_4_fills_the_log_end_and_released_from_what_is_stored(fresh_url):
    store = PostgresStore(fresh_url)
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [rec(1, "a"), rec(2, "b")])
    store.create_run("q", b"{}")
    store.release(store.claim("q", "me"))
    store.close()
    # What the version-3 code leaves: no such columns, no index, no version 4.
    sql(
        fresh_url,
        "ALTER TABLE safepoint.recovery_owners DROP COLUMN last_seq, DROP COLUMN released, DROP COLUMN lease_until",
    )
    sql(fresh_url, "DELETE FROM safepoint.schema_migrations WHERE version >= 4")
    assert migrate(fresh_url).after == LATEST
    rows = sql(
        fresh_url,
        "SELECT agent_id, last_seq, released, lease_until IS NOT NULL FROM safepoint.recovery_owners ORDER BY 1",
    )
    assert rows == [("q", 0, True, True), ("r", 2, False, True)]
    store = PostgresStore(fresh_url, pool_size=1)
    try:
        store.append(claim, [rec(3, "c")])
        assert texts(store, "r") == ["a", "b", "c"]
    finally:
        store.close()


def restart_server(server) -> None:
    """Stop the throwaway server (fast: its connections are cut) and start it again on the same port."""
    for args in (["stop", "-m", "fast"], ["-l", os.path.join(server.base, "server.log"), "-t", "30", "start"]):
        done = subprocess.run(
            [*server._as_user, "pg_ctl", "-D", server.data, "-w", *args],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def test_a_server_restart_is_ridden_out_by_the_next_append(tmp_path):
    from . import pgserver

    try:
        server = pgserver.start()
    except pgserver.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        store = PostgresStore(server.create_database("restart"), pool_size=1)
        store.create_run("r", b"{}")
        claim = store.claim("r", "me")
        store.append(claim, [rec(1, "a")])
        restart_server(server)
        store.append(claim, [rec(2, "b")])  # the pooled connection died with the server: retried, not failed
        store.heartbeat(claim)
        assert texts(store, "r") == ["a", "b"]
        store.close()
    finally:
        server.stop()


def test_two_threads_writing_at_once_share_the_store_one_on_the_held_connection(store):
    """The writer's held connection serves one thread at a time; another thread writing meanwhile (async tools,
    a heartbeat thread) takes a pooled connection instead of waiting, and both logs come out whole."""
    import threading

    for run in ("a", "b"):
        store.create_run(run, b"{}")
    claims = {run: store.claim(run, "me") for run in ("a", "b")}
    errors: list[BaseException] = []

    def write(run: str) -> None:
        try:
            for seq in range(1, 61, 2):
                store.append(claims[run], [rec(seq, f"{run}{seq}"), rec(seq + 1, f"{run}{seq + 1}")])
                store.heartbeat(claims[run])
        except BaseException as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(run,)) for run in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for run in ("a", "b"):
        assert texts(store, run) == [f"{run}{seq}" for seq in range(1, 61)]


@pytest.mark.parametrize("durable", [True, False])
def test_the_summary_is_written_with_its_group_on_either_path_and_only_with_it(store, durable):
    """The summary rides on the owner row's update (migration 10), in the durable prepared statement and in the
    non-durable pipeline alike; a stale writer's group and its summary are both refused, and a group without one
    leaves the kept summary stale (not read)."""
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [rec(1), rec(2)], durable=durable, summary=b'{"n":2}')
    assert store.read_summary("r") == (2, b'{"n":2}')
    newer = store.claim("r", "other", takeover=True)
    with pytest.raises(StaleGenerationError):
        store.append(claim, [rec(3)], durable=durable, summary=b'{"n":"stale"}')
    assert store.read_summary("r") == (2, b'{"n":2}')
    store.append(newer, [rec(3, gen=newer.generation)], durable=durable)
    assert store.read_summary("r") is None
    store.append(newer, [rec(4, gen=newer.generation)], durable=durable, summary=b'{"n":4}')
    assert store.read_summary("r") == (4, b'{"n":4}')
