"""The PostgreSQL store against a real, throwaway server: the conformance suite, damage detection, the runtime on
top of it in one process, and a real ``tidemark`` process killed mid-run and resumed."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import msgspec
import psycopg
import pytest

import tidemark
from tidemark.errors import StoreError
from tidemark.runtime.scenario import parse_scenario
from tidemark.runtime.session import load_view
from tidemark.runtime.tools import ToolContext
from tidemark.store.base import LogRecord
from tidemark.store.conformance import CONFORMANCE_CHECKS
from tidemark.store.postgres import PostgresStore
from tidemark.store.url import open_store

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


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.__name__)
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
        row = conn.execute("SELECT line FROM tidemark.log WHERE run_id = 'r' AND seq = 2").fetchone()
        assert row is not None and b"bbbb" in row[0]
        conn.execute(
            "UPDATE tidemark.log SET line = %s WHERE run_id = 'r' AND seq = 2", (row[0].replace(b"bbbb", b"bxbb"),)
        )
    read = make_store(store).read_log("r")
    assert [r.seq for r in read.records] == [1, 3]
    assert sorted((p.kind, p.position) for p in read.problems) == [("corrupt", 2), ("gap", 3)]


def test_runs_are_listed_oldest_first_and_a_bad_run_id_is_refused(make_store):
    from tidemark.errors import ConfigError, RunNotFoundError

    store = make_store()
    for run_id in ("zz", "aa", "mm"):
        store.create_run(run_id, b"{}")
    assert store.list_runs() == ["zz", "aa", "mm"]
    with pytest.raises(ConfigError, match="not valid"):
        store.create_run("../escape", b"{}")
    with pytest.raises(RunNotFoundError, match="not found"):
        store.read_log("nope")


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
    tm = tidemark.open(fresh_url, workspace=str(workspace))
    script = scenario(
        {"tool_calls": [{"tool": "write_file", "args": {"path": "pkg/a.py", "content": "x = 1\n"}}]},
        {"tool_calls": [{"tool": "read_file", "args": {"path": "pkg/a.py"}}, {"tool": "list_files", "args": {}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "echo made > b.txt"}}]},
        {"text": "done"},
    )
    try:
        run = tm.start(script.task, run_id="r", model=script.model)
        with run:
            status = tm.run_agent(run, tidemark.ScriptedProvider(script))
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
    tm = tidemark.open(fresh_url, workspace=str(workspace))
    runs = []

    @tidemark.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
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
    env = cli_env(TIDEMARK_OUTBOX=str(outbox))
    store = ["--store", fresh_url]

    def tidemark_cli(*args: str, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = dict(env, TIDEMARK_FAILPOINT=failpoint) if failpoint else env
        return subprocess.run(
            [sys.executable, "-m", "tidemark", *args],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    started = time.monotonic()
    killed = tidemark_cli(
        "run", str(script), "--workspace", str(workspace), "--run-id", "r", *store, "--json",
        failpoint="after_tool:send_notification",
    )  # fmt: skip
    assert killed.returncode == -9, f"exit {killed.returncode}: {killed.stderr[-2000:]}"
    assert len(outbox.read_text().splitlines()) == 1  # sent, but the outcome never reached the ledger
    assert (workspace / "notes.txt").read_text() == "a\n"

    resumed = tidemark_cli("resume", "r", "--workspace", str(workspace), *store, "--json")
    assert resumed.returncode == 0, f"exit {resumed.returncode}: {resumed.stderr[-2000:]}"
    assert json.loads(resumed.stdout)["status"] == "completed"
    assert len(outbox.read_text().splitlines()) == 1
    assert (workspace / "notes.txt").read_text() == "b\n"

    ledger = tidemark_cli("ledger", "r", "--workspace", str(workspace), *store, "--json")
    assert ledger.returncode == 0, ledger.stderr
    rows = json.loads(ledger.stdout)
    assert [row["tool_name"] for row in rows] == ["write_file", "send_notification", "write_file"]
    assert all(row["status"] != "started" for row in rows)
    assert time.monotonic() - started < 30
