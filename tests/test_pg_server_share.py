"""The server's share of a transition (issue 14, migration 9): an append inserts the log's lines without a foreign
key check (which locked the run's row once per line), its update of the owner row, which keeps the run's summary
too (migration 10), stays HOT (no index on a column an append or a heartbeat changes), long lines and summaries are
compressed with lz4, and deleting a run still leaves no row of it in any table, now that the log is deleted by
``delete_run`` itself."""

from __future__ import annotations

import re
import threading

import msgspec
import psycopg
import pytest
from psycopg import sql as pg_sql

from safepoint.errors import RunNotFoundError, StaleGenerationError, StoreError
from safepoint.records import LogRecord
from safepoint.store.conformance import restart_checkpoint
from safepoint.store.postgres import PostgresStore

from .conftest import database_names

# What an append or a heartbeat changes on each row it updates: an index on any of them makes that update non-HOT.
CHANGED_BY_WRITES = {"recovery_owners": {"last_seq", "lease_until", "holder_state", "summary_seq", "summary"}}


def rec(seq: int, text: str = "x", gen: int = 1) -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq, gen=gen)


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def url(pg_server):
    return pg_server.create_database(f"t{next(database_names)}")


@pytest.fixture
def store(url):
    made = PostgresStore(url, pool_size=1)
    yield made
    made.close()


def test_the_log_has_no_foreign_key_no_trigger_and_one_index(store, url):
    store.create_run("r", b"{}")  # the schema is made on first use
    keys = sql(url, "SELECT conname FROM pg_constraint WHERE conrelid = 'safepoint.log'::regclass AND contype = 'f'")
    assert keys == []
    # Internal triggers are how a foreign key is checked; a user trigger would run per line as well.
    assert sql(url, "SELECT tgname FROM pg_trigger WHERE tgrelid = 'safepoint.log'::regclass") == []
    indexes = sql(url, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'safepoint' AND tablename = 'log'")
    assert [row[0].split(" USING ")[1] for row in indexes] == ["btree (run_id, seq)"]


@pytest.mark.parametrize("table", sorted(CHANGED_BY_WRITES))
def test_the_rows_every_append_updates_can_be_updated_hot(store, url, table):
    """HOT (no index entry written, the row's page pruned of its previous version) needs no index on a column the
    update changes. Measured at 8 writers (``bench/postgres.py``, ``hot_updates``): all the appends' updates are
    HOT at the default fillfactor; a fillfactor of 80 changed nothing, so the tables keep the default."""
    store.create_run("r", b"{}")
    # The definition names every column an index holds, in its key, its expressions or its WHERE.
    for (definition,) in sql(url, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'safepoint' AND tablename = %s",
                             (table,)):  # fmt: skip
        named = set(re.findall(r"[a-z_]+", definition.split(" USING ", 1)[1]))
        assert not named & CHANGED_BY_WRITES[table], f"an append's update of {table} is not HOT: {definition}"


def test_an_append_does_not_lock_the_runs_row(store, url):
    """The foreign key took a KEY SHARE lock on the run's row for each line: an append then waited for anyone
    holding that row (here a FOR UPDATE) and wrote a lock into it, a WAL record per line."""
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    # The summary rides on the owner row (migration 10): no row of its own, so no check against runs either.
    store.append(claim, [rec(1, "a")], summary=b'{"status":"running"}')
    sql(url, f"ALTER DATABASE {pg_sql.Identifier(url.rsplit('/', 1)[1]).as_string()} SET lock_timeout = '3s'")
    other = PostgresStore(url, pool_size=1)  # its connections take the database's lock_timeout
    try:
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM safepoint.runs WHERE run_id = 'r' FOR UPDATE")
            other.append(claim, [rec(2, "b"), rec(3, "c")], summary=b'{"status":"running"}')
        assert [r.seq for r in other.read_log("r").records] == [1, 2, 3]
    finally:
        other.close()


def _rows_of(url: str, run_id: str) -> dict[str, int]:
    """Rows naming ``run_id`` in every table of the schema that has a run_id or agent_id column."""
    columns = sql(
        url,
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'safepoint' "
        "AND column_name IN ('run_id', 'agent_id') ORDER BY 1",
    )
    found = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table, column in columns:
            query = pg_sql.SQL("SELECT count(*) FROM safepoint.{} WHERE {} = %s").format(
                pg_sql.Identifier(str(table)), pg_sql.Identifier(str(column))
            )
            row = conn.execute(query, (run_id,)).fetchone()
            found[str(table)] = int(row[0]) if row else 0
    return found


def test_deleting_a_run_leaves_no_row_of_it_in_any_table(store, url):
    claims = {}
    for run_id in ("r", "kept"):
        store.create_run(run_id, b"{}")
        claims[run_id] = claim = store.claim(run_id, "me")
        store.append(claim, [rec(1, "a"), rec(2, "b")], summary=b'{"status":"running"}')
        store.post_control(run_id, b'{"type":"cancel"}')
        store.put_artifact(claim, "out.txt", b"out")
        store.upsert_restart_checkpoint(claim, restart_checkpoint(run_id, 2))
        store.trace(run_id, [b'{"event":"a"}'])
    before = _rows_of(url, "r")
    assert before["log"] == 2 and before["recovery_owners"] == 1
    assert store.read_summary("r") == (2, b'{"status":"running"}')  # on the owner row, deleted with it
    store.delete_run("r", claim=claims["r"])
    assert {table: n for table, n in _rows_of(url, "r").items() if n} == {}
    assert _rows_of(url, "kept") == before  # the other run keeps every row
    # A writer that still holds a claim of the deleted run inserts nothing.
    with pytest.raises((StoreError, RunNotFoundError, StaleGenerationError)):
        store.append(claims["r"], [rec(3, "late")])
    assert _rows_of(url, "r")["log"] == 0


def _waiting_on_locks(url: str, count: int) -> None:
    """Until ``count`` sessions of this database wait for a lock (the server says so: no sleep decides it)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
        "AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(query).fetchone()
            if row is not None and row[0] >= count:
                return
            conn.execute("SELECT pg_sleep(0.01)")


@pytest.mark.parametrize("first", ["append", "delete"])
def test_an_append_racing_a_delete_leaves_no_line_behind(url, first):
    """Without the foreign key's cascade, an append in flight when the run is deleted must still leave nothing: both
    queue on the owner row (held here), and whichever the server lets go first, the log ends empty."""
    writer, deleter = PostgresStore(url, pool_size=1), PostgresStore(url, pool_size=1)
    try:
        writer.create_run("r", b"{}")
        claim = writer.claim("r", "me")
        writer.append(claim, [rec(1, "a")], summary=b'{"status":"running"}')
        outcomes: dict[str, BaseException | None] = {}

        def run(name: str, action) -> threading.Thread:
            def body() -> None:
                try:
                    action()
                    outcomes[name] = None
                except BaseException as exc:  # the loser's refusal, checked below
                    outcomes[name] = exc

            thread = threading.Thread(target=body)
            thread.start()
            return thread

        actions = {
            "append": lambda: writer.append(claim, [rec(2, "b"), rec(3, "c")], summary=b'{"status":"running"}'),
            "delete": lambda: deleter.delete_run("r", force=True),
        }
        with psycopg.connect(url) as holder:
            holder.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")
            threads = [run(first, actions[first])]
            _waiting_on_locks(url, 1)
            second = "delete" if first == "append" else "append"
            threads.append(run(second, actions[second]))
            _waiting_on_locks(url, 2)
        for thread in threads:
            thread.join(60)
        assert outcomes["delete"] is None
        assert outcomes["append"] is None or isinstance(outcomes["append"], (StoreError, RunNotFoundError))
        assert {table: n for table, n in _rows_of(url, "r").items() if n} == {}
    finally:
        writer.close()
        deleter.close()


def test_a_long_log_line_and_summary_are_compressed_with_lz4_not_pglz(store, url):
    """A value over 2 KB is compressed on every insert; pglz took about twice lz4's server CPU (a 3 KB line: 93
    against 53 us; 5.5 KB of base64, which neither compresses: 108 against 58). Migration 10 sets lz4 where the
    server has it."""
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute("SET default_toast_compression = 'lz4'")
        except psycopg.errors.InvalidParameterValue:
            pytest.skip("this PostgreSQL was built without lz4")
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    words = " ".join(f"word{i % 97}" for i in range(600))  # about 5 KB that compresses, as tool output does
    store.append(claim, [rec(1, words)], summary=msgspec.json.encode({"status": "running", "detail": words}))
    found = sql(
        url,
        "SELECT (SELECT pg_column_compression(line) FROM safepoint.log WHERE run_id = 'r'), "
        "(SELECT pg_column_compression(summary) FROM safepoint.recovery_owners WHERE agent_id = 'r')",
    )
    assert found == [("lz4", "lz4")]
    assert [msgspec.json.decode(r.body)["text"] for r in store.read_log("r").records] == [words]
    summary = store.read_summary("r")
    assert summary is not None and msgspec.json.decode(summary[1])["detail"] == words
