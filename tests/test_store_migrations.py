"""PostgreSQL schema versions: a fresh database is set up, an up-to-date one is left alone, an older one is refused
until `safepoint db migrate` upgrades it (its data kept), and a newer one is always refused."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import psycopg
import pytest

from safepoint.errors import StoreError
from safepoint.records import LogRecord
from safepoint.store.conformance import restart_checkpoint
from safepoint.store.framing import frame
from safepoint.store.postgres import PostgresStore, migrate
from safepoint.store.postgres_schema import LATEST, MIGRATIONS

from .conftest import cli_env


def _sql(url, query, params=()):
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def _history(url):
    return [row[0] for row in _sql(url, "SELECT version FROM safepoint.schema_migrations ORDER BY version")]


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "safepoint", "db", "migrate", *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _rec(seq, text):
    return LogRecord(kind="event", body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq)


def _with_data(url):
    """A database at this version holding a claimed run with a log and a restart checkpoint."""
    store = PostgresStore(url)
    try:
        store.create_run("r", b'{"run_id":"r"}')
        claim = store.claim("r", "me")
        store.append(claim, [_rec(1, "a"), _rec(2, "b")])
        store.upsert_restart_checkpoint(claim, restart_checkpoint("r", 2))
        store.release(claim)
    finally:
        store.close()


def _at_version_1(url, *, with_version_table=True):
    """Undo migration 2 by hand: what a database made by the version-1 code looks like (before versioning, too)."""
    _sql(url, "DROP INDEX safepoint.runs_created_at")
    if with_version_table:
        _sql(url, "DELETE FROM safepoint.schema_migrations WHERE version > 1")
    else:
        _sql(url, "DROP TABLE safepoint.schema_migrations")


def _assert_data_kept(url):
    store = PostgresStore(url)
    try:
        assert store.run_header("r") == b'{"run_id":"r"}'
        read = store.read_log("r")
        assert [msgspec.json.decode(r.body)["text"] for r in read.records] == ["a", "b"] and not read.problems
        checkpoint = store.read_restart_checkpoint("r")
        assert checkpoint is not None and checkpoint.intact and checkpoint.data == restart_checkpoint("r", 2)
        owner = store.owner("r")
        assert owner is not None and owner.generation == 1 and owner.released
        assert store.claim("r", "again").generation == 2
    finally:
        store.close()


def test_migrations_are_numbered_one_by_one():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert LATEST == len(MIGRATIONS) >= 2


def test_a_fresh_database_is_set_up_when_opened(empty_url):
    store = PostgresStore(empty_url)
    try:
        assert store.list_runs() == []
    finally:
        store.close()
    assert _history(empty_url) == list(range(1, LATEST + 1))


def test_db_migrate_sets_up_a_fresh_database_then_is_a_no_op(empty_url):
    first = _cli("--store", empty_url, "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert (report["before"], report["after"], report["migrated"]) == (0, LATEST, True)
    assert len(report["applied"]) == LATEST
    again = migrate(empty_url)  # the library form
    assert (again.before, again.after, again.applied) == (LATEST, LATEST, [])
    assert _history(empty_url) == list(range(1, LATEST + 1))


def test_an_older_database_is_refused_until_migrated_and_keeps_its_data(empty_url):
    _with_data(empty_url)
    _at_version_1(empty_url)
    store = PostgresStore(empty_url)
    with pytest.raises(StoreError) as refused:
        store.list_runs()
    message = str(refused.value)
    assert "\n" not in message and "schema version 1" in message and "safepoint db migrate" in message
    assert _history(empty_url) == [1]  # refusing changed nothing

    done = _cli("--store", empty_url)
    assert done.returncode == 0, done.stderr
    assert f"schema version 1 -> {LATEST}" in done.stdout
    assert _history(empty_url) == list(range(1, LATEST + 1))
    assert _sql(empty_url, "SELECT 1 FROM pg_indexes WHERE indexname = 'runs_created_at'") == [(1,)]
    _assert_data_kept(empty_url)


def test_a_database_made_before_versioning_is_version_1_and_upgrades_when_allowed(empty_url):
    _with_data(empty_url)
    _at_version_1(empty_url, with_version_table=False)
    with pytest.raises(StoreError, match=r"schema version 1 .*safepoint db migrate"):
        PostgresStore(empty_url).list_runs()
    store = PostgresStore(empty_url, migrate=True)  # the library's opt-in: upgrade when opening
    try:
        assert store.list_runs() == ["r"]
    finally:
        store.close()
    assert _history(empty_url) == list(range(1, LATEST + 1))
    _assert_data_kept(empty_url)


def test_a_newer_database_is_refused_by_the_store_and_by_migrate(empty_url):
    _with_data(empty_url)
    _sql(empty_url, "INSERT INTO safepoint.schema_migrations (version, description) VALUES (%s, 'from the future')",
         (LATEST + 1,))  # fmt: skip
    with pytest.raises(StoreError) as refused:
        PostgresStore(empty_url, migrate=True).list_runs()
    message = str(refused.value)
    assert "\n" not in message and f"schema version {LATEST + 1}" in message and "safepoint db migrate" in message
    done = _cli("--store", empty_url)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "newer than this safepoint" in done.stderr
    assert "Traceback" not in done.stderr
    assert _history(empty_url) == [*range(1, LATEST + 1), LATEST + 1]


def test_db_migrate_on_a_file_store_says_there_is_nothing_to_migrate(tmp_path):
    done = _cli("--store", str(tmp_path / "store"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["migrated"] is False
    assert not (tmp_path / "store").exists()


def test_migration_9_drops_the_logs_foreign_key_under_any_name_and_keeps_the_data(empty_url):
    """From version 8 with a run in it: the log's foreign key goes (under the name migration 1 gave it, or another a
    person gave it), the data is kept, and a run deleted after
    leaves no log behind (``delete_run`` deletes it now, not the foreign key's cascade)."""
    assert migrate(empty_url, to=8).after == 8
    # The store opens only a schema at its own version: let it write this version-8 database as the latest would
    # (no summary: the columns a later migration adds are not there).
    _sql(empty_url, "INSERT INTO safepoint.schema_migrations (version, description) "
         "SELECT v, 'not yet' FROM generate_series(9, %s) v", (LATEST,))  # fmt: skip
    _with_data(empty_url)
    _sql(empty_url, "DELETE FROM safepoint.schema_migrations WHERE version >= 9")
    _sql(empty_url, "ALTER TABLE safepoint.log RENAME CONSTRAINT log_run_id_fkey TO named_by_hand")
    keys = "SELECT count(*) FROM pg_constraint WHERE conrelid = 'safepoint.log'::regclass AND contype = 'f'"
    assert _sql(empty_url, keys) == [(1,)]
    assert migrate(empty_url, to=9).applied == [f"9: {MIGRATIONS[8].description}"]
    assert _sql(empty_url, keys) == [(0,)]
    migrate(empty_url)  # and on to this code's version, to open it
    _assert_data_kept(empty_url)
    store = PostgresStore(empty_url)
    try:
        store.delete_run("r", force=True)
    finally:
        store.close()
    assert _sql(empty_url, "SELECT count(*) FROM safepoint.log") == [(0,)]


def test_migration_10_moves_each_runs_summary_onto_its_owner_row(empty_url):
    """From version 9 with runs in it: a current summary, a stale one (the log grew since) and a run with none. The
    summaries move onto the owner rows as they were (the stale one stays stale: read only while the log ends at its
    seq), run_summaries goes, and the next append with a summary writes it there."""
    assert migrate(empty_url, to=9).after == 9
    _sql(empty_url, "INSERT INTO safepoint.schema_migrations (version, description) "
         "SELECT v, 'not yet' FROM generate_series(10, %s) v", (LATEST,))  # fmt: skip
    _with_data(empty_url)  # no summary: what it wrote is the version-9 schema's
    _sql(empty_url, "DELETE FROM safepoint.schema_migrations WHERE version >= 10")
    # What the version-9 code wrote: a summary row per run, stamped with the log's end when written.
    _sql(empty_url, "INSERT INTO safepoint.run_summaries VALUES ('r', 2, %s)", (frame(b'{"status":"done"}'),))
    with psycopg.connect(empty_url, autocommit=True) as conn:
        for run_id, stamp in (("stale", 1), ("none", None)):
            conn.execute("INSERT INTO safepoint.runs (run_id, header) VALUES (%s, %s)", (run_id, frame(b"{}")))
            conn.execute(
                "INSERT INTO safepoint.recovery_owners (recovery_class, owner_id, generation, agent_id) "
                "VALUES ('root', %s, 0, %s)",
                (run_id, run_id),
            )
            for seq in (1, 2):
                conn.execute(
                    "INSERT INTO safepoint.log (run_id, seq, line) VALUES (%s, %s, %s)",
                    (run_id, seq, frame(msgspec.json.encode(_rec(seq, "x")))),
                )
            if stamp is not None:
                conn.execute("INSERT INTO safepoint.run_summaries VALUES (%s, %s, %s)", (run_id, stamp, frame(b"{}")))
    assert migrate(empty_url, to=10).applied == [f"10: {MIGRATIONS[9].description}"]
    assert _sql(empty_url, "SELECT to_regclass('safepoint.run_summaries')") == [(None,)]
    migrate(empty_url)  # and on to this code's version, to open it
    _assert_data_kept(empty_url)
    store = PostgresStore(empty_url)
    try:
        assert store.read_summary("r") == (2, b'{"status":"done"}')
        assert store.read_summary("stale") is None and store.read_summary("none") is None
        claim = store.claim("none", "me")
        store.append(claim, [_rec(3, "c")], summary=b'{"status":"running"}')
        assert store.read_summary("none") == (3, b'{"status":"running"}')
        store.append(claim, [_rec(4, "d")])  # without one: the kept summary is stale, so none is read
        assert store.read_summary("none") is None
    finally:
        store.close()
