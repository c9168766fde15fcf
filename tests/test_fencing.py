"""Promise 6 with real processes: no two processes ever act for one run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from safepoint.engine.session import load_view
from safepoint.store.url import open_store

from .conftest import cli_env


def scenario(tmp_path, command):
    path = tmp_path / "sc.json"
    path.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [
                    {"tool_calls": [{"tool": "run_command", "args": {"command": command}}]},
                    {"tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": "done"}}]},
                    {"text": "done"},
                ],
            }
        )
    )
    return path


@pytest.fixture(params=["file", "postgres"])
def store(request):
    """Both stores: the file store (the default) and PostgreSQL (a fresh database on a throwaway server)."""
    if request.param == "file":
        return []
    return ["--store", request.getfixturevalue("fresh_url")]


def safepoint(workspace, *args, env, store=()):
    return subprocess.Popen(
        [sys.executable, "-m", "safepoint", *args, "--workspace", str(workspace), *store],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_stopped_owner_taken_over_is_refused_every_write_when_it_wakes(tmp_path, store):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outbox = tmp_path / "outbox.jsonl"
    marker = tmp_path / "started"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    owner = safepoint(
        workspace, "run", str(scenario(tmp_path, f"touch {marker}; sleep 2")), "--run-id", "r", env=env, store=store
    )
    wait_for(marker)
    owner.send_signal(signal.SIGSTOP)  # a zombie: alive, holding nothing, about to write
    refused = safepoint(workspace, "resume", "r", env=env, store=store)
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 5 and "--takeover" in err  # its owner is alive: resume says so
    takeover = safepoint(workspace, "resume", "r", "--takeover", "--skip", "call_1", env=env, store=store)
    _, err = takeover.communicate(timeout=60)
    assert takeover.returncode == 0, err
    opened = open_store(store[1] if store else "file:" + str(workspace / ".agent-runtime"))
    records_before_wake = len(opened.read_log("r").records)
    owner.send_signal(signal.SIGCONT)
    _, err = owner.communicate(timeout=60)
    assert owner.returncode == 6 and "taken over" in err  # the stale owner stops with a clear error
    assert len(opened.read_log("r").records) == records_before_wake  # and wrote nothing more
    assert outbox.read_text().count("\n") == 1
    assert load_view(opened, "r").status == "completed"
    opened.close()  # a PostgreSQL store's pool is closed by whoever opened it


def test_two_resumes_at_once_exactly_one_proceeds(tmp_path, store):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    crash = cli_env(SAFEPOINT_OUTBOX=str(outbox), SAFEPOINT_FAILPOINT="before_started:run_command")
    first = safepoint(workspace, "run", str(scenario(tmp_path, "sleep 1")), "--run-id", "r", env=crash, store=store)
    first.communicate(timeout=60)
    assert first.returncode == -9
    both = [safepoint(workspace, "resume", "r", env=env, store=store) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in both]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 5], results  # one resumed the run, the other was told a live process owns it
    opened = open_store(store[1] if store else "file:" + str(workspace / ".agent-runtime"))
    view = load_view(opened, "r")
    opened.close()  # a PostgreSQL store's pool is closed by whoever opened it
    assert sum(1 for e in view.events if e.detail.startswith("resumed")) == 1
    assert outbox.read_text().count("\n") == 1
