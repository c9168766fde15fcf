"""Encryption at rest on the PostgreSQL store (issue 11 §3), against a real, throwaway server: the conformance
suite on the sealed store, a whole run with a crash, a resume and a rollback whose rows hold no byte of what it was
told, and a wrong, missing or unneeded key, a tampered row, a row moved between runs: each one line."""

from __future__ import annotations

import json
import zlib

import psycopg
import pytest

import safepoint
from safepoint.errors import ExitCode
from safepoint.records import LogRecord
from safepoint.store.conformance import CONFORMANCE_CHECKS, check_id, restart_checkpoint
from safepoint.store.postgres import PostgresStore
from safepoint.store.sealed import SealedStore
from safepoint.store.url import open_store

from .conftest import cli_env, database_names
from .test_encryption import KEY, OTHER, PLANTED, crashed_then_resumed, forms, key, one_line, with_key


@pytest.fixture
def make_store(pg_server):
    stores = []

    def make(existing=None):
        url = existing.url if existing is not None else pg_server.create_database(f"t{next(database_names)}")
        store = SealedStore(PostgresStore(url), key())
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=check_id)
def test_conformance_of_the_encrypted_postgres_store(check, make_store):
    check(make_store)


def rows(url: str) -> bytes:
    """Every row of every table of the store, as PostgreSQL prints it (a bytea as hex)."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'safepoint' ORDER BY 1"
            ).fetchall()
        ]
        found = []
        for table in tables:
            found += [str(row[0]) for row in conn.execute(f"SELECT t::text FROM safepoint.{table} t").fetchall()]
    return "\n".join(found).encode()


def test_a_run_crashed_resumed_and_rolled_back_leaves_no_byte_in_the_database(tmp_path, fresh_url):
    crashed_then_resumed(tmp_path, ["--store", fresh_url], cli_env(SAFEPOINT_KEY=KEY))
    stored = rows(fresh_url)
    assert b"\\x" in stored and b"encryption" in stored
    for name, text in PLANTED.items():
        for form in forms(text):
            assert form not in stored, f"{name} ({form!r}) is in the database"
    assert KEY.encode() not in stored
    assert key().key_id.encode().hex().encode() in stored  # the settings row names the key id, never the key


def test_the_same_run_unencrypted_shows_them_in_the_database(tmp_path, fresh_url):
    crashed_then_resumed(tmp_path, ["--store", fresh_url], with_key(None))
    stored = rows(fresh_url)
    assert any(form in stored for form in forms(PLANTED["text"]))


def test_the_seed_columns_keep_identity_and_times_and_the_payload_is_sealed(fresh_url):
    store = open_store(fresh_url, key())
    try:
        store.create_run("r", b"{}")
        claim = store.claim("r", "me")
        store.upsert_restart_checkpoint(claim, restart_checkpoint("r", 3))
        stored = store.read_restart_checkpoint("r")
        assert stored is not None and stored.intact and stored.data == restart_checkpoint("r", 3)
    finally:
        store.close()
    with psycopg.connect(fresh_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT mode, recovery_class, recovery_owner_id, updated_at, payload_json, execution_config_json "
            "FROM safepoint.runtime_restart_checkpoints WHERE agent_id = 'r'"
        ).fetchone()
    assert row is not None and row[:4] == ("reaction_loop", "root", "r", 1_700_000_000_003)
    assert row[4].startswith("sp1:") and row[5] is None and "turn" not in row[4]


@pytest.fixture
def two_runs(fresh_url):
    store = open_store(fresh_url, key())
    try:
        for run_id in ("a", "b"):
            store.create_run(run_id, b'{"run":"%s"}' % run_id.encode())
            claim = store.claim(run_id, "me")
            store.append(
                claim,
                [LogRecord(kind="event", body=b'{"n":%d}' % n, seq=n) for n in (1, 2, 3)],  # type: ignore[arg-type]
            )
            store.release(claim)
    finally:
        store.close()
    return fresh_url


def _line(url: str, run_id: str, seq: int) -> bytes:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT line FROM safepoint.log WHERE run_id = %s AND seq = %s", (run_id, seq)).fetchone()
    assert row is not None
    return bytes(row[0])


def _set_line(url: str, run_id: str, seq: int, line: bytes) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE safepoint.log SET line = %s WHERE run_id = %s AND seq = %s", (line, run_id, seq))


def test_the_key_wrong_missing_or_unneeded_is_one_line(two_runs, tmp_path, pg_server):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = ["--store", two_runs]
    missing = safepoint_cli("status", "-w", workspace, *store, env=with_key(None))
    one_line(missing, ExitCode.USAGE, "is encrypted", key().key_id)
    wrong = safepoint_cli("status", "-w", workspace, *store, env=with_key(OTHER))
    one_line(wrong, ExitCode.USAGE, "another key", key().key_id)
    assert safepoint_cli("fsck", "-w", workspace, *store, env=with_key()).returncode == ExitCode.OK
    other_url = pg_server.create_database(f"t{next(database_names)}")
    unencrypted = PostgresStore(other_url)
    try:
        unencrypted.create_run("p", b"{}")
    finally:
        unencrypted.close()
    refused = safepoint_cli("status", "-w", workspace, "--store", other_url, env=with_key())
    one_line(refused, ExitCode.USAGE, "is not encrypted")
    assert b"encryption" not in rows(other_url)


def safepoint_cli(*args, env):
    from .conftest import safepoint_in_process

    return safepoint_in_process(*args, env=env)


def test_a_tampered_row_and_a_row_moved_between_runs_fail_authentication(two_runs, tmp_path):
    line = _line(two_runs, "a", 2)
    record = json.loads(line[9:])
    body = record["body"]
    record["body"] = body[:-6] + ("A" if body[-6] != "A" else "B") + body[-5:]
    payload = json.dumps(record, separators=(",", ":")).encode()
    _set_line(two_runs, "a", 2, b"%08x %s\n" % (zlib.crc32(payload), payload))
    _set_line(two_runs, "b", 3, _line(two_runs, "a", 3))  # a's record, well framed, at the same seq of run b
    store = open_store(two_runs, key())
    try:
        read_a, read_b = store.read_log("a"), store.read_log("b")
    finally:
        store.close()
    assert [r.seq for r in read_a.records] == [1, 3] and [r.seq for r in read_b.records] == [1, 2]
    assert [(p.kind, p.position) for p in read_a.problems if "authentication" in p.detail] == [("corrupt", 2)]
    assert [(p.kind, p.position) for p in read_b.problems if "authentication" in p.detail] == [("corrupt", 3)]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    found = safepoint_cli("fsck", "-w", workspace, "--store", two_runs, "--json", env=with_key())
    assert found.returncode == ExitCode.DAMAGED, found.stderr
    problems = {(p["run_id"], p["where"]) for p in json.loads(found.stdout)["problems"]}
    assert {("a", "seq 2"), ("b", "seq 3")} <= problems, problems
    assert safepoint.open(two_runs, workspace=str(workspace), key=KEY).fsck("a").problems


def test_a_lost_settings_row_is_said_and_the_right_key_records_it_again(two_runs, tmp_path):
    with psycopg.connect(two_runs, autocommit=True) as conn:
        conn.execute("DELETE FROM safepoint.settings")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = safepoint_cli("fsck", "-w", workspace, "--store", two_runs, env=with_key(None))
    one_line(done, ExitCode.USAGE, "encryption record is missing")
    assert safepoint_cli("fsck", "-w", workspace, "--store", two_runs, env=with_key()).returncode == ExitCode.OK
    assert key().key_id.encode().hex().encode() in rows(two_runs)


def test_a_keyless_and_a_keyed_process_making_one_store_never_leave_it_half_encrypted(pg_server):
    from safepoint.errors import StoreKeyError

    url = pg_server.create_database(f"t{next(database_names)}")
    first = PostgresStore(url)
    try:
        first.create_run("plain", b"{}")
        first.record_encryption(b'{"cipher":"AES-256-GCM","key_id":"x","format":1}')  # as if it looked too early
        assert first.encryption_record() is None
    finally:
        first.close()
    url = pg_server.create_database(f"t{next(database_names)}")
    keyless = PostgresStore(url)
    try:
        assert keyless.list_runs() == []  # connected while the store was empty
        keyed = open_store(url, key())
        keyed.create_run("sealed", b"{}")
        keyed.close()
        with pytest.raises(StoreKeyError, match="is encrypted"):
            keyless.create_run("plain", b"{}")
        assert keyless.list_runs() == ["sealed"]
    finally:
        keyless.close()
