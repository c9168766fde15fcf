"""The PostgreSQL store against a real, throwaway server: the conformance suite, damage detection, the runtime on
top of it in one process, and a real ``safepoint`` process killed mid-run and resumed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import msgspec
import psycopg
import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.engine.tools import ToolContext
from safepoint.errors import StoreError
from safepoint.records import LogRecord
from safepoint.standins.scenario import parse_scenario
from safepoint.store.conformance import CONFORMANCE_CHECKS, check_id, restart_checkpoint, terminal_event
from safepoint.store.postgres import PostgresStore
from safepoint.store.url import open_store

from .conftest import cli_env, database_names


@pytest.fixture
def make_store(pg_server):
    stores = []

    def make(existing=None):
        url = existing.url if existing is not None else pg_server.create_database(f"t{next(database_names)}")
        store = PostgresStore(url)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=check_id)
def test_conformance(check, make_store):
    check(make_store)


def _rec(seq, text="x", kind="event"):
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq)


def test_a_damaged_row_is_reported_as_corrupt_and_a_gap(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a"), _rec(2, "bbbb"), _rec(3, "c")])
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute("SELECT line FROM safepoint.log WHERE run_id = 'r' AND seq = 2").fetchone()
        assert row is not None and b"bbbb" in row[0]
        conn.execute(
            "UPDATE safepoint.log SET line = %s WHERE run_id = 'r' AND seq = 2", (row[0].replace(b"bbbb", b"bxbb"),)
        )
    read = make_store(store).read_log("r")
    assert [r.seq for r in read.records] == [1, 3]
    assert sorted((p.kind, p.position) for p in read.problems) == [("corrupt", 2), ("gap", 3)]


def test_runs_are_listed_oldest_first_and_a_bad_run_id_is_refused(make_store):
    from safepoint.errors import ConfigError, RunNotFoundError

    store = make_store()
    for run_id in ("zz", "aa", "mm"):
        store.create_run(run_id, b"{}")
    assert store.list_runs() == ["zz", "aa", "mm"]
    with pytest.raises(ConfigError, match="not valid"):
        store.create_run("../escape", b"{}")
    with pytest.raises(RunNotFoundError, match="not found"):
        store.read_log("nope")


def _sql(store, query, params=()):
    """Run SQL on the store's database from outside, as a person (or another program) would."""
    with psycopg.connect(store.url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def _damage(store, table, where, old, new):
    (line,) = _sql(store, f"SELECT line FROM safepoint.{table} WHERE {where}")[0]
    assert old in line
    _sql(store, f"UPDATE safepoint.{table} SET line = %s WHERE {where}", (line.replace(old, new),))


def test_a_restart_checkpoint_fills_the_seed_columns_and_a_wrong_checksum_reads_as_not_intact(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.upsert_restart_checkpoint(claim, restart_checkpoint("r", 3))
    row = _sql(
        store,
        "SELECT agent_id, mode, payload_json, updated_at, recovery_class, recovery_owner_id "
        "FROM safepoint.runtime_restart_checkpoints",
    )
    assert row == [("r", "reaction_loop", '{"payload_kind":"reaction_loop","turn":3}', 1_700_000_000_003, "root", "r")]
    _sql(store, "UPDATE safepoint.runtime_restart_checkpoints SET checksum = repeat('0', 64)")
    read = make_store(store).read_restart_checkpoint("r")
    assert read is not None and not read.intact and "checksum" in read.detail
    assert read.data == restart_checkpoint("r", 3)  # handed over for the report, never loaded


def test_a_restart_checkpoint_row_whose_columns_were_changed_reads_as_not_intact(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.upsert_restart_checkpoint(claim, restart_checkpoint("r"))
    _sql(store, "UPDATE safepoint.runtime_restart_checkpoints SET mode = 'tool_approval_wait'")
    read = store.read_restart_checkpoint("r")
    assert read is not None and not read.intact and "disagree" in read.detail


def test_an_undecodable_descriptor_is_kept_byte_for_byte(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.upsert_restart_checkpoint(claim, b"\x00not json")
    assert _sql(store, "SELECT mode, payload_json FROM safepoint.runtime_restart_checkpoints") == [("", None)]
    read = store.read_restart_checkpoint("r")
    assert read is not None and read.intact and read.data == b"\x00not json"


def test_the_recovery_owner_row_is_the_seeds_and_its_columns_are_the_truth(make_store):
    from safepoint.errors import StaleGenerationError
    from safepoint.protocol import TERMINAL_STATUS_RESTART
    from safepoint.records import RecoveryIdentity

    store = make_store()
    store.create_run("parent", b"{}")
    store.create_run("child", b"{}")
    assert _sql(store, "SELECT recovery_class, owner_id, generation FROM safepoint.recovery_owners ORDER BY 2") == [
        ("root", "child", 0),
        ("root", "parent", 0),
    ]
    identity = RecoveryIdentity(recovery_class="subagent", owner_id="parent/c1", agent_id="child", message_id="m")
    claim = store.claim("child", "me", identity=identity)
    rows = _sql(
        store,
        "SELECT recovery_class, owner_id, generation, agent_id, message_id, terminal_at FROM safepoint.recovery_owners "
        "WHERE agent_id = 'child'",
    )
    assert rows == [("subagent", "parent/c1", 1, "child", "m", None)]
    # The seed's own close (§5.1) is seen by the store, and a generation raised in the row fences the holder.
    _sql(
        store,
        "UPDATE safepoint.recovery_owners SET terminal_at = now(), terminal_status = %s "
        "WHERE recovery_class = 'subagent' AND owner_id = 'parent/c1'",
        (TERMINAL_STATUS_RESTART,),
    )
    owner = store.owner("child")
    assert owner is not None and owner.terminal_at is not None and owner.terminal_status == TERMINAL_STATUS_RESTART
    _sql(store, "UPDATE safepoint.recovery_owners SET generation = generation + 1 WHERE agent_id = 'child'")
    with pytest.raises(StaleGenerationError):
        store.upsert_restart_checkpoint(claim, restart_checkpoint("child"))


def test_a_recovery_owner_answers_for_one_agent_only(make_store):
    from safepoint.records import RecoveryIdentity

    store = make_store()
    for run_id in ("a", "b"):
        store.create_run(run_id, b"{}")
    shared = {"recovery_class": "subagent", "owner_id": "parent/c1"}
    store.claim("a", "me", identity=RecoveryIdentity(agent_id="a", **shared))
    with pytest.raises(StoreError, match="already answers for another run"):
        store.claim("b", "me", identity=RecoveryIdentity(agent_id="b", **shared))
    assert store.owner("b") is None  # the failed claim left nothing behind
    assert store.claim("b", "me").generation == 1


def test_terminal_events_are_the_seeds_rows_unique_by_key(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    event = terminal_event(claim, store, "closed", '{"a":1}')
    assert store.record_terminal_event(claim, event)
    assert not store.record_terminal_event(claim, event)
    rows = _sql(
        store,
        "SELECT recovery_class, owner_id, generation, event_type, payload_json "
        "FROM safepoint.recovery_owner_terminal_events",
    )
    assert rows == [("root", "r", 1, "closed", '{"a":1}')]
    assert store.terminal_events("r") == [event]  # created_at reads back as written


def test_a_damaged_control_row_is_skipped_and_keeps_its_position(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    for n in range(3):
        store.post_control("r", b'{"n":%d}' % n)
    _damage(store, "control", "position = 2", b'{"n":1}', b'{"n":7}')
    assert store.read_control("r") == [(1, b'{"n":0}'), (3, b'{"n":2}')]
    assert store.post_control("r", b'{"n":3}') == 4


def test_a_control_post_does_not_wait_for_the_owner_row(make_store):
    """A sender gets through while the owner is stuck mid-transaction on its row (a cancel is wanted most then)."""
    store = make_store()
    store.create_run("r", b"{}")
    store.claim("r", "me")
    with psycopg.connect(store.url) as conn:
        conn.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")
        conn.execute("SELECT 1 FROM safepoint.runs WHERE run_id = 'r' FOR KEY SHARE")  # as a log insert holds it
        assert make_store(store).post_control("r", b'{"type":"cancel"}') == 1
        conn.rollback()


def test_a_claim_facing_a_writer_stuck_on_the_owner_row_says_so(make_store, monkeypatch):
    """The lock timeout reaches the claim as RunLockedError (exit 5, "end that process"), not a generic error."""
    from safepoint.errors import RunLockedError
    from safepoint.store import postgres

    monkeypatch.setattr(postgres, "CLAIM_LOCK_TIMEOUT", 0.3)
    store = make_store()
    store.create_run("r", b"{}")
    store.claim("r", "me")
    with psycopg.connect(store.url) as conn:
        conn.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")  # stopped mid-write
        with pytest.raises(RunLockedError, match="does not let go"):
            make_store(store).claim("r", "other", takeover=True)
        conn.rollback()
    assert make_store(store).claim("r", "other", takeover=True).generation == 2


def test_a_damaged_schedule_is_an_error(make_store):
    from safepoint.errors import CorruptRecordError

    store = make_store()
    store.put_schedule("nightly", b'{"cron":"0 3 * * *"}')
    _damage(store, "schedules", "job_id = 'nightly'", b"0 3", b"0 4")
    with pytest.raises(CorruptRecordError, match="nightly"):
        store.list_schedules()


def test_the_url_opens_a_postgres_store_and_an_unreachable_server_is_one_line(pg_url):
    store = open_store(pg_url.replace("postgresql://", "postgres://"))
    assert isinstance(store, PostgresStore)
    store.close()
    with socket_closed_port() as port:
        dead = open_store(f"postgresql://u:secret@127.0.0.1:{port}/db")
        with pytest.raises(StoreError) as info:
            dead.list_runs()
    message = str(info.value)
    assert "\n" not in message and "secret" not in message and "cannot open PostgreSQL store" in message


class socket_closed_port:
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        return port

    def __exit__(self, *exc: object) -> None:
        return None


# ------------------------------------------------------------------------------------------- the runtime on it


class Crash(BaseException):
    """Stands in for a process dying inside a tool: no outcome is recorded."""


def scenario(*turns, task="t"):
    return parse_scenario(json.dumps({"task": task, "turns": list(turns)}).encode())


def test_a_scripted_run_completes_on_postgres(fresh_url, workspace):
    tm = safepoint.open(fresh_url, workspace=str(workspace))
    script = scenario(
        {"tool_calls": [{"tool": "write_file", "args": {"path": "pkg/a.py", "content": "x = 1\n"}}]},
        {"tool_calls": [{"tool": "read_file", "args": {"path": "pkg/a.py"}}, {"tool": "list_files", "args": {}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "echo made > b.txt"}}]},
        {"text": "done"},
    )
    try:
        run = tm.start(script.task, run_id="r", model=script.model)
        with run:
            status = tm.run_agent(run, safepoint.ScriptedProvider(script))
        assert status == "completed"
        assert (workspace / "pkg" / "a.py").read_text() == "x = 1\n"
        assert (workspace / "b.txt").read_text() == "made\n"
        assert not any(p.name.startswith(".agent-runtime") for p in workspace.iterdir())  # nothing stored locally
        view = load_view(tm.store, "r")
        assert [e.status for e in view.ledger.values()] == ["succeeded"] * 4
        assert [e.tool_name for e in view.ledger.values()] == ["write_file", "read_file", "list_files", "run_command"]
        assert {p.path for p in view.patches} == {"pkg/a.py", "b.txt"}
        assert view.status == "completed"
        assert tm.store.list_runs() == ["r"]
        read = tm.store.read_log("r")
        assert not read.problems and [r.seq for r in read.records] == list(range(1, len(read.records) + 1))
    finally:
        tm.close()


def test_a_run_resumes_after_an_in_process_crash_on_postgres(fresh_url, workspace, outbox):
    tm = safepoint.open(fresh_url, workspace=str(workspace))
    runs = []

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
    def lookup(ctx: ToolContext) -> str:
        runs.append("lookup")
        if len(runs) == 1:
            raise Crash
        return "found"

    try:
        run = tm.start("t", tools=[lookup], run_id="r")
        run.call("write_file", {"path": "a.txt", "content": "one\n"}, call_id="c0")
        with pytest.raises(Crash):
            run.call("lookup", {}, call_id="c1")
        assert load_view(tm.store, "r").ledger["c1"].status == "started"
        run.session.store.release(run.session.claim)  # the "dead" process's lock goes away
        resumed = tm.resume("r", tools=[lookup])
        with resumed:
            assert resumed.call("lookup", {}, call_id="c1") == "found"
            resumed.call("write_file", {"path": "a.txt", "content": "two\n"}, call_id="c2")
        assert runs == ["lookup", "lookup"]
        ledger = load_view(tm.store, "r").ledger
        assert {call_id: entry.status for call_id, entry in ledger.items()} == {
            "c0": "succeeded",
            "c1": "succeeded",
            "c2": "succeeded",
        }
        assert (workspace / "a.txt").read_text() == "two\n"
        assert tm.store.owner("r") is not None and tm.store.owner("r").generation == 2
    finally:
        tm.close()


# ----------------------------------------------------------------------------------------- a real process


def test_a_killed_cli_run_resumes_from_postgres_without_sending_twice(fresh_url, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outbox = tmp_path / "outbox.jsonl"
    script = tmp_path / "scenario.json"
    script.write_text(
        json.dumps(
            {
                "task": "write, tell the team, write again",
                "turns": [
                    {"tool_calls": [{"tool": "write_file", "args": {"path": "notes.txt", "content": "a\n"}}]},
                    {"tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": "ready"}}]},
                    {"tool_calls": [{"tool": "write_file", "args": {"path": "notes.txt", "content": "b\n"}}]},
                    {"text": "done"},
                ],
            }
        )
    )
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    store = ["--store", fresh_url]

    def safepoint_cli(*args: str, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = dict(env, SAFEPOINT_FAILPOINT=failpoint) if failpoint else env
        return subprocess.run(
            [sys.executable, "-m", "safepoint", *args],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    started = time.monotonic()
    killed = safepoint_cli(
        "run", str(script), "--workspace", str(workspace), "--run-id", "r", *store, "--json",
        failpoint="after_tool:send_notification",
    )  # fmt: skip
    assert killed.returncode == -9, f"exit {killed.returncode}: {killed.stderr[-2000:]}"
    assert len(outbox.read_text().splitlines()) == 1  # sent, but the outcome never reached the ledger
    assert (workspace / "notes.txt").read_text() == "a\n"

    resumed = safepoint_cli("resume", "r", "--workspace", str(workspace), *store, "--json")
    assert resumed.returncode == 0, f"exit {resumed.returncode}: {resumed.stderr[-2000:]}"
    assert json.loads(resumed.stdout.splitlines()[-1])["status"] == "completed"
    assert len(outbox.read_text().splitlines()) == 1
    assert (workspace / "notes.txt").read_text() == "b\n"

    ledger = safepoint_cli("ledger", "r", "--workspace", str(workspace), *store, "--json")
    assert ledger.returncode == 0, ledger.stderr
    rows = json.loads(ledger.stdout)
    assert [row["tool_name"] for row in rows] == ["write_file", "send_notification", "write_file"]
    assert all(row["status"] != "started" for row in rows)
    assert time.monotonic() - started < 30
