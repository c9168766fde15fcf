"""The recovery protocol (seed 003) with real processes: approval waits, submissions, cancel/reset/successor,
visible output, subagents and the self-healing prompt, and each recovery assertion produced by a real fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import msgspec
import pytest

from safepoint.engine.session import load_view
from safepoint.protocol import (
    SELF_HEALING,
    SELF_HEALING_PROMPT,
    TERMINAL_STATUS_RESTART,
    Approval,
    ExecutionConfig,
    RuntimeRestartCheckpoint,
)
from safepoint.store.base import Store
from safepoint.store.url import open_store

from .conftest import cli_env, safepoint_in_process

NOTIFY = {"tool": "send_notification", "args": {"to": "#ops", "message": "deploy"}}


def scenario(tmp_path: Path, turns: list[dict[str, Any]], name: str = "sc.json", **extra: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"task": "the task", "turns": turns, **extra}))
    return str(path)


class Cli:
    def __init__(self, tmp_path: Path, store: list[str] | None = None) -> None:
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir(exist_ok=True)
        self.outbox = tmp_path / "outbox.jsonl"
        self.store_args = store or []
        self.url = store[1] if store else "file:" + str(self.workspace / ".agent-runtime")
        self._store: Store | None = None

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(SAFEPOINT_OUTBOX=str(self.outbox), **extra)

    def start(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "safepoint", *args, "--workspace", str(self.workspace), *self.store_args],
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A command run to its end. In this process when what it does is the point; in a fresh child when the
        test sets environment (a fault point kills the process that hits it; some settings are read at import)."""
        if not env:
            return safepoint_in_process(*args, "--workspace", self.workspace, *self.store_args, env=self.env())
        process = self.start(*args, **env)
        out, err = process.communicate(timeout=120)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def store(self) -> Store:
        """One store handle for the test's reads, closed when the test is done with this helper (an unclosed
        PostgreSQL pool would be collected from its own worker thread)."""
        if self._store is None:
            self._store = open_store(self.url)
            weakref.finalize(self, self._store.close)
        return self._store

    def sent(self) -> int:
        return self.outbox.read_text().count("\n") if self.outbox.exists() else 0

    def checkpoint(self, run_id: str) -> RuntimeRestartCheckpoint | None:
        stored = self.store().read_restart_checkpoint(run_id)
        if stored is None:
            return None
        assert stored.intact, stored.detail
        return msgspec.json.decode(stored.data, type=RuntimeRestartCheckpoint)

    def payload(self, run_id: str) -> dict[str, Any]:
        checkpoint = self.checkpoint(run_id)
        assert checkpoint is not None and checkpoint.payload_json is not None
        result: dict[str, Any] = json.loads(checkpoint.payload_json)
        return result

    def explain(self, run_id: str) -> dict[str, Any]:
        done = self("explain", run_id, "--json")
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result


def wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def waiting_for_approval(cli: Cli, run_id: str) -> bool:
    try:
        checkpoint = cli.checkpoint(run_id)
    except Exception:
        return False
    return checkpoint is not None and checkpoint.mode == "tool_approval_wait"


def terminal_reasons(cli: Cli, run_id: str) -> list[str]:
    return [json.loads(e.payload_json or "{}")["reason"] for e in cli.store().terminal_events(run_id)]


def assert_closed(cli: Cli, run_id: str, reason: str) -> None:
    """§5: terminal status, a terminal event with the reason, the restart checkpoint gone, the run closed."""
    store = cli.store()
    owner = store.owner(run_id)
    assert owner is not None and owner.terminal_at is not None
    assert reason in terminal_reasons(cli, run_id)
    assert store.read_restart_checkpoint(run_id) is None
    view = load_view(store, run_id)
    assert view.status in ("closed", "cancelled")
    report = view.recoveries[-1]
    found = report.failed or getattr(report.disposition, "reason", None)
    assert found == reason, report


def crashed_run(cli: Cli, tmp_path: Path, run_id: str = "r", point: str = "after_tool:send_notification") -> None:
    """A run killed after its notification went out but before the outcome was recorded."""
    sc = scenario(tmp_path, [{"text": "go", "tool_calls": [NOTIFY]}, {"text": "done"}], name=f"{run_id}.json")
    done = cli("run", sc, "--run-id", run_id, SAFEPOINT_FAILPOINT=point)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert cli.checkpoint(run_id) is not None


# approvals (§2.1) ---------------------------------------------------------------------------------------------------
def test_an_approval_wait_survives_a_restart_with_its_remaining_timeout_and_the_tool_runs_once(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"text": "deploying", "tool_calls": [NOTIFY]}, {"text": "done"}])
    first = cli.start("run", sc, "--run-id", "r", "--approval", "high", "--approval-timeout", "300")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    started = cli.payload("r")
    assert not started.get("dispatched_before_restart", False)  # nothing was sent
    wait_until(lambda: cli.payload("r")["timeout_remaining_ms"] < started["timeout_remaining_ms"], "time to pass")
    before_kill = cli.payload("r")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert cli.sent() == 0  # nothing was dispatched without an approval

    second = cli.start("resume", "r")
    wait_until(lambda: json.loads(cli.checkpoint("r").execution_config_json or "{}").get("generation") == 2, "resume")
    resumed = cli.payload("r")
    assert resumed["wait_started_at_ms"] == before_kill["wait_started_at_ms"]  # the same wait goes on
    assert resumed["timeout_remaining_ms"] <= before_kill["timeout_remaining_ms"]  # with the time it had left
    assert cli("approve", "r", "call_1").returncode == 0
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert cli.sent() == 1  # approved once, dispatched once
    entry = load_view(cli.store(), "r").ledger["call_1"]
    assert entry.status == "succeeded" and entry.decision == "approved"
    assert entry.decision_reason and entry.decision_reason.startswith("approved by user")
    assert cli.checkpoint("r") is None  # the run completed: no work in flight


def test_a_denied_call_never_runs_and_the_model_is_told(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok", "expect_in_context": ["not run: denied"]}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("deny", "r", "call_1", "--reason", "not today").returncode == 0
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert cli.sent() == 0
    entry = load_view(cli.store(), "r").ledger["call_1"]
    assert entry.status == "failed" and "not today" in (entry.error or "")
    again = cli("approve", "r", "call_1")  # nothing waits any more
    assert again.returncode != 0 and "does not wait for approval" in again.stderr


def test_an_approval_counts_only_for_the_input_it_was_given_for(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high", "--approval-timeout", "3")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    forged = Approval(call_id="call_1", input_hash="sha256:" + "0" * 64, approved=True, at="2026-01-01T00:00:00+00:00")
    cli.store().post_control("r", msgspec.json.encode(forged))
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert cli.sent() == 0  # the approval for another input was ignored; the wait timed out
    entry = load_view(cli.store(), "r").ledger["call_1"]
    assert entry.status == "failed" and "no approval within 3 s" in (entry.error or "")


def test_a_call_dispatched_before_the_restart_is_not_dispatched_again(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start(
        "run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="after_tool:send_notification"
    )
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("approve", "r", "call_1").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL and cli.sent() == 1
    assert cli.payload("r")["dispatched_before_restart"] is True
    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr  # no second wait: the approval was durable
    assert cli.sent() == 1  # and no second dispatch
    assert load_view(cli.store(), "r").ledger["call_1"].status == "uncertain"


# submissions (§2.2) ---------------------------------------------------------------------------------------------------
def test_a_submission_is_admitted_once_per_key_and_its_overrides_survive_a_restart(tmp_path):
    cli = Cli(tmp_path)
    write = {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}}
    sc = scenario(tmp_path, [{"text": "hello"}, {"tool_calls": [write]}, {"text": "done"}])
    assert cli("run", sc, "--run-id", "r").returncode == 0
    for _ in range(2):  # a client retrying the same submission
        assert cli("submit", "r", "now write a.txt", "--key", "k1", "--tools-allowed", "read_file").returncode == 0
    crashed = cli("resume", "r", SAFEPOINT_FAILPOINT="submission_admitted")
    assert crashed.returncode == -signal.SIGKILL
    payload = cli.payload("r")
    assert payload["payload_kind"] == "queued_submission" and payload["submission_key"] == "k1"
    assert payload["tools_allowed_override"] == ["read_file"] and payload["absorbed_submission_keys"] == ["k1"]
    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    view = load_view(cli.store(), "r")
    users = [m.content for m in view.history if m.role == "user"]
    assert users == ["the task", "now write a.txt"]  # admitted once, though submitted twice and crashed once
    entry = view.ledger["call_1"]
    assert entry.status == "failed" and "not granted" in (entry.error or "")  # the override outlived the crash
    assert not (cli.workspace / "a.txt").exists()


# cancel, reset, successor, model switch, agent closed (§4.1) ------------------------------------------------------
def test_cancelling_a_dead_run_closes_it_with_user_cancelled(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    done = cli("cancel", "r")
    assert done.returncode == 0 and "cancelled" in done.stdout
    assert_closed(cli, "r", "user_cancelled")
    again = cli("resume", "r")  # closed stays closed: nothing is claimed or recorded again
    assert again.returncode == 9 and "is closed" in again.stderr and "--successor-of r" in again.stderr
    assert len(cli.store().terminal_events("r")) == 1
    assert cli.sent() == 1


def test_cancelling_a_live_run_stops_it_at_its_next_safe_point(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("cancel", "r").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == 10
    assert_closed(cli, "r", "user_cancelled")
    assert cli.sent() == 0


def test_a_whole_stream_cancel_reaches_the_subagents(tmp_path):
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_started:send_notification")
    assert crashed.returncode == -signal.SIGKILL
    assert cli("cancel", "p", "--whole-stream").returncode == 0
    assert_closed(cli, "p", "user_cancelled_whole_stream")
    assert_closed(cli, "p.call_1", "user_cancelled_whole_stream")  # the subagent first, while its parent stood
    resumed = cli("resume", "p.call_1")
    assert resumed.returncode == 9 and "is closed" in resumed.stderr  # closed stays closed


def test_a_context_reset_voids_the_work_in_flight(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    assert cli("reset", "r").returncode == 0
    assert_closed(cli, "r", "context_reset")


def test_an_accepted_successor_means_the_old_run_is_never_resumed(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path, "old")
    sc = scenario(tmp_path, [{"text": "taking over"}], name="new.json")
    assert cli("run", sc, "--run-id", "new", "--successor-of", "old").returncode == 0
    resumed = cli("resume", "old")
    assert resumed.returncode == 9 and "successor_accepted" in resumed.stderr
    assert_closed(cli, "old", "successor_accepted")
    assert cli.sent() == 1


def test_resuming_with_another_model_does_not_replay_the_interrupted_work(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    resumed = cli("resume", "r", "--model", "another-model")
    assert resumed.returncode == 9 and "model_switch" in resumed.stderr
    assert_closed(cli, "r", "model_switch")


def test_a_run_closed_before_its_cleanup_finished_is_agent_closed(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="closing")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("cancel", "r").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL  # killed after the run's close was logged, before its cleanup
    assert cli.checkpoint("r") is not None
    resumed = cli("resume", "r")
    assert resumed.returncode == 9 and "agent_closed" in resumed.stderr
    assert_closed(cli, "r", "agent_closed")


# visible output and the self-healing prompt (§4.1, §5) -------------------------------------------------------------
def test_streamed_text_forbids_replay_and_the_parent_gets_the_self_healing_prompt(tmp_path):
    cli = Cli(tmp_path)
    child = {
        "task": "summarise",
        "turns": [
            {"text": "Here is the summary you asked for.", "streamed": True, "tool_calls": [NOTIFY]},
            {"text": "ok"},
        ],
    }
    spawn = {"tool": "spawn_subagent", "args": {"task": "summarise", "scenario": child}}
    sc = scenario(
        tmp_path,
        [
            {"tool_calls": [spawn]},
            {"text": "checking what it produced", "expect_in_context": [SELF_HEALING_PROMPT]},
        ],
    )
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="visible_output")
    assert crashed.returncode == -signal.SIGKILL
    # the user saw the start of the child's answer (whole words: an unfinished word is held until it can be redacted)
    assert "Here is the " in crashed.stdout
    assert cli.payload("p.call_1")["visible_output_started"] is True
    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    assert "Here is the su" not in resumed.stdout  # never streamed twice
    assert_closed(cli, "p.call_1", "visible_output_started")
    assert cli.store().owner("p.call_1").terminal_status == TERMINAL_STATUS_RESTART  # type: ignore[union-attr]
    parent = load_view(cli.store(), "p")
    healing = [m for m in parent.history if m.name == SELF_HEALING]
    assert len(healing) == 1 and healing[0].content.startswith(SELF_HEALING_PROMPT)
    assert parent.ledger["call_1"].status == "failed" and cli.sent() == 0
    recovery = cli.explain("p")["recovery"]
    child_report = recovery["subagents"][0]
    assert child_report["status"] == "closed"
    assert child_report["recovery"]["recoveries"][-1]["disposition"]["reason"] == "visible_output_started"
    assert child_report["recovery"]["self_healing_prompt"] == SELF_HEALING_PROMPT


def test_a_root_run_that_streamed_shows_its_user_the_same_through_status_and_explain(tmp_path):
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"text": "Streaming an answer to you now.", "streamed": True}])
    crashed = cli("run", sc, "--run-id", "r", SAFEPOINT_FAILPOINT="visible_output")
    assert crashed.returncode == -signal.SIGKILL
    resumed = cli("resume", "r")
    assert resumed.returncode == 9 and "visible_output_started" in resumed.stderr
    assert_closed(cli, "r", "visible_output_started")
    status = json.loads(cli("status", "r", "--json").stdout)
    assert status["status"] == "closed" and status["terminal_status"] == TERMINAL_STATUS_RESTART
    recovery = cli.explain("r")["recovery"]
    assert recovery["self_healing_prompt"] == SELF_HEALING_PROMPT
    assert recovery["recoveries"][-1]["disposition"] == {
        "disposition": "ReplayForbidden",
        "reason": "visible_output_started",
        "detail": "turn 1 was already streaming to the user when the run stopped",
    }


# the seven assertions (§3), each from a real fault ------------------------------------------------------------------
def rewrite_checkpoint(cli: Cli, run_id: str, **changes: Any) -> None:
    """Replace the stored restart checkpoint as a foreign or older writer would have left it."""
    store = cli.store()
    checkpoint = cli.checkpoint(run_id)
    assert checkpoint is not None
    config = changes.pop("config", None)
    if config is not None:
        old = msgspec.json.decode(checkpoint.execution_config_json or "{}", type=ExecutionConfig)
        changes["execution_config_json"] = msgspec.json.encode(msgspec.structs.replace(old, **config)).decode()
    claim = store.claim(run_id, "test")
    store.upsert_restart_checkpoint(claim, msgspec.json.encode(msgspec.structs.replace(checkpoint, **changes)))
    store.release(claim)


def resume_fails(cli: Cli, run_id: str, reason: str) -> None:
    resumed = cli("resume", run_id)
    assert resumed.returncode == 9, resumed.stderr
    assert f"({reason}:" in resumed.stderr
    assert_closed(cli, run_id, reason)
    assert cli.sent() <= 1  # nothing ran again


def test_partial_recovery_descriptor(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    path = cli.workspace / ".agent-runtime" / "runs" / "r" / "restart_checkpoint.json"
    path.write_bytes(path.read_bytes()[:-40])  # a torn write: cut short
    explained = cli.explain("r")["recovery"]
    assert explained["restart_checkpoint"]["intact"] is False
    assert explained["if_restarted_now"]["failed"] == "partial_recovery_descriptor"
    resume_fails(cli, "r", "partial_recovery_descriptor")


def test_invalid_recovery_descriptor(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    rewrite_checkpoint(cli, "r", config={"descriptor_version": 99})  # written by a newer safepoint
    resume_fails(cli, "r", "invalid_recovery_descriptor")


def test_missing_conversation(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    (cli.workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl").write_bytes(b"")  # the history was purged
    resume_fails(cli, "r", "missing_conversation")


def test_invalid_structural_owner_identity(tmp_path):
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_tool:send_notification")
    assert crashed.returncode == -signal.SIGKILL
    import shutil

    shutil.rmtree(cli.workspace / ".agent-runtime" / "runs" / "p")  # the parent was deleted: an orphan
    resume_fails(cli, "p.call_1", "invalid_structural_owner_identity")


def test_recovery_identity_mismatch(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    rewrite_checkpoint(cli, "r", recovery_owner_id="someone-else")
    resume_fails(cli, "r", "recovery_identity_mismatch")


def test_invalid_durable_owner_identity(tmp_path):
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    store = cli.store()
    claim = store.claim("r", "reaper")  # closed the owner, then died before deleting the checkpoint
    store.close_owner(claim, "Closed by a reaper that crashed.")
    store.release(claim)
    resume_fails(cli, "r", "invalid_durable_owner_identity")


def test_invalid_inherited_execution_authority(tmp_path):
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child, "expires_in_s": 0.5}}
    sc = scenario(
        tmp_path,
        [{"tool_calls": [spawn]}, {"text": "redoing only what is missing", "expect_in_context": [SELF_HEALING_PROMPT]}],
    )
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_tool:send_notification")
    assert crashed.returncode == -signal.SIGKILL and cli.sent() == 1
    expires = load_view(cli.store(), "p").spawned["call_1"].grant_expires_at_ms
    assert expires is not None
    wait_until(lambda: time.time() * 1000 > expires + 50, "the grant to expire")
    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    assert_closed(cli, "p.call_1", "invalid_inherited_execution_authority")
    assert any(m.name == SELF_HEALING for m in load_view(cli.store(), "p").history)
    assert cli.sent() == 1


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_restart_recovery_closes_the_same_way_on_both_stores(tmp_path, kind, request):
    store = [] if kind == "file" else ["--store", request.getfixturevalue("fresh_url")]
    cli = Cli(tmp_path, store)
    crashed_run(cli, tmp_path)
    resumed = cli("resume", "r", "--model", "m2")
    assert resumed.returncode == 9 and "model_switch" in resumed.stderr
    assert_closed(cli, "r", "model_switch")
    assert os.environ.get("SAFEPOINT_FAILPOINT") is None
