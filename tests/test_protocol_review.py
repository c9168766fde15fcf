"""Regression tests for the defects a review of the recovery protocol proved, each its proof's scenario with real
processes (real crashes, real approvals, real cancels), asserting what must happen instead."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from safepoint.engine.session import load_view
from safepoint.protocol import SELF_HEALING, TERMINAL_STATUS_RESTART
from safepoint.restart.inbox import CANCELLED_STATUS

from .test_protocol import (
    NOTIFY,
    Cli,
    assert_closed,
    crashed_run,
    scenario,
    terminal_reasons,
    wait_until,
    waiting_for_approval,
)

DONE = {"text": "done"}
RUN_ID = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}$")


def generation(cli: Cli, run_id: str) -> int:
    checkpoint = cli.checkpoint(run_id)
    assert checkpoint is not None
    result: int = json.loads(checkpoint.execution_config_json or "{}").get("generation", 0)
    return result


def assistant_texts(cli: Cli, run_id: str) -> list[str]:
    return [m.content for m in load_view(cli.store(), run_id).history if m.role == "assistant"]


def ends_without_dispatching(cli: Cli, run_id: str, process: subprocess.Popen[str]) -> None:
    """The waiting run's process ends by itself, no approval given; an approval that comes later (from a second
    approver who did not see the stop, say) and a later resume still dispatch nothing."""
    _, err = process.communicate(timeout=60)
    assert cli.sent() == 0, err
    cli("approve", run_id, "call_1")  # accepted or refused: either way nothing may run now
    resumed = cli("resume", run_id)
    assert resumed.returncode == 9 and "is closed" in resumed.stderr, resumed.stderr
    assert cli.sent() == 0


# H1: a submission admitted after completion, crash in its step --------------------------------------------------
def test_a_submission_to_a_completed_run_is_answered_after_a_crash_in_its_step(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"text": "hello"}, {"tool_calls": [NOTIFY], "expect_in_context": ["notify ops"]}, DONE])
    assert cli("run", sc, "--run-id", "r").returncode == 0
    assert cli("submit", "r", "notify ops", "--key", "k1").returncode == 0
    crashed = cli("resume", "r", SAFEPOINT_FAILPOINT="after_model")
    assert crashed.returncode == -signal.SIGKILL
    assert load_view(cli.store(), "r").status != "completed"  # it answers new input: not a finished run
    assert cli.checkpoint("r") is not None

    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    assert "completed already" not in resumed.stdout and "nothing to resume" not in resumed.stdout
    view = load_view(cli.store(), "r")
    assert view.status == "completed"
    assert [m.content for m in view.history if m.role == "user"] == ["the task", "notify ops"]  # admitted once
    assert assistant_texts(cli, "r")[-1] == "done"  # answered
    notifications = [e for e in view.ledger.values() if e.tool_name == "send_notification"]
    assert len(notifications) == 1 and notifications[0].status == "succeeded"  # answered once
    assert cli.sent() == 1
    assert cli.checkpoint("r") is None

    again = cli("resume", "r")  # nothing is left to answer: a second resume does not answer it again
    assert again.returncode == 0 and "completed already" in again.stdout, again.stderr
    assert cli.sent() == 1


def test_the_daemon_answers_a_submission_whose_step_crashed_instead_of_deleting_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"text": "hello"}, {"tool_calls": [NOTIFY], "expect_in_context": ["notify ops"]}, DONE])
    assert cli("run", sc, "--run-id", "r").returncode == 0
    assert cli("submit", "r", "notify ops", "--key", "k1").returncode == 0
    assert cli("resume", "r", SAFEPOINT_FAILPOINT="after_model").returncode == -signal.SIGKILL
    daemon = cli("daemon", "--once", "--json")
    assert daemon.returncode == 0, daemon.stderr
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.startswith("{")]
    assert not [e for e in events if e["event"] == "cleaned"], events  # not taken for a finished run's leftover
    view = load_view(cli.store(), "r")
    assert view.status == "completed" and assistant_texts(cli, "r")[-1] == "done"
    assert [m.content for m in view.history if m.role == "user"] == ["the task", "notify ops"]
    assert cli.sent() == 1 and cli.checkpoint("r") is None


def test_a_submission_admitted_by_a_live_run_is_not_lost_by_a_crash_in_the_step_that_answers_it(tmp_path: Path) -> None:
    """The same loss without a completed run: admitted at a step's start, killed before that step's checkpoint."""
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok", "expect_in_context": ["also this"]}, DONE])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high", SAFEPOINT_FAILPOINT="after_model@2")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("submit", "r", "also this", "--key", "k1").returncode == 0
    assert cli("approve", "r", "call_1").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL  # the model answered the submission; nothing of that step is durable
    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    view = load_view(cli.store(), "r")
    assert [m.content for m in view.history if m.role == "user"] == ["the task", "also this"]
    assert view.status == "completed" and cli.sent() == 1


# H2: a streamed turn with a call, killed before the call started --------------------------------------------------
def test_a_streamed_turn_with_a_call_is_not_streamed_again_after_a_crash_before_the_call(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    shown = "I am notifying ops now."
    sc = scenario(tmp_path, [{"text": shown, "streamed": True, "tool_calls": [NOTIFY]}, {"text": "done"}])
    crashed = cli("run", sc, "--run-id", "r", SAFEPOINT_FAILPOINT="before_started:send_notification")
    assert crashed.returncode == -signal.SIGKILL
    assert shown in crashed.stdout  # the user saw the turn
    assert cli.sent() == 0

    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    assert shown not in resumed.stdout  # never streamed twice
    view = load_view(cli.store(), "r")
    assert [m.content for m in view.message_records.values() if m.role == "assistant" and shown in m.content] == [
        shown
    ]  # the model was not asked for that turn again, on any branch
    entry = view.ledger["call_1"]  # never started before the crash: carried out now, once
    assert entry.status == "succeeded" and cli.sent() == 1
    assert view.status == "completed" and assistant_texts(cli, "r")[-1] == "done"


# H3: reset / successor while a call waits for approval --------------------------------------------------------------
@pytest.mark.parametrize("how", ["reset", "successor"])
def test_a_reset_or_a_successor_ends_an_approval_wait_and_nothing_is_sent(tmp_path: Path, how: str) -> None:
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "done"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    if how == "reset":
        assert cli("reset", "r").returncode == 0
        reason = "context_reset"
    else:
        new = scenario(tmp_path, [{"text": "I took over"}], name="new.json")
        taken = cli("run", new, "--run-id", "new", "--successor-of", "r")
        assert taken.returncode == 0, taken.stderr
        reason = "successor_accepted"
    ends_without_dispatching(cli, "r", run)
    assert run.returncode == 9
    assert cli.sent() == 0  # the voided call was never dispatched
    entry = load_view(cli.store(), "r").ledger["call_1"]
    assert entry.started_at is None and entry.status != "succeeded"
    assert_closed(cli, "r", reason)
    assert terminal_reasons(cli, "r") == [reason]


# H4: whole-stream cancel of a live parent whose child waits for approval -------------------------------------------
def test_a_whole_stream_cancel_of_a_live_parent_stops_its_waiting_child(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    run = cli.start("run", sc, "--run-id", "p", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "p.call_1"), "the child's approval wait")
    assert cli("cancel", "p", "--whole-stream").returncode == 0
    ends_without_dispatching(cli, "p.call_1", run)
    assert run.returncode == 10
    assert cli.sent() == 0  # the child dispatched nothing
    entry = load_view(cli.store(), "p.call_1").ledger["call_1"]
    assert entry.started_at is None and entry.status != "succeeded"
    assert_closed(cli, "p.call_1", "user_cancelled_whole_stream")
    assert terminal_reasons(cli, "p.call_1") == ["user_cancelled_whole_stream"]
    assert_closed(cli, "p", "user_cancelled_whole_stream")
    assert terminal_reasons(cli, "p") == ["user_cancelled_whole_stream"]
    resumed = cli("resume", "p.call_1")
    assert resumed.returncode == 9 and "is closed" in resumed.stderr


# H5: nested subagents ------------------------------------------------------------------------------------------------
def test_a_child_cannot_grant_its_own_child_a_tool_it_does_not_hold(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    grandchild = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "gc done"}]}
    spawn_gc = {
        "tool": "spawn_subagent",
        "args": {"task": "notify", "tools": ["send_notification"], "scenario": grandchild},
    }
    child = {"task": "delegate", "turns": [{"tool_calls": [spawn_gc]}, {"text": "child done"}]}
    spawn_c = {
        "tool": "spawn_subagent",
        "args": {"task": "delegate", "tools": ["read_file", "spawn_subagent"], "scenario": child},
    }
    sc = scenario(tmp_path, [{"tool_calls": [spawn_c]}, {"text": "parent done"}])
    done = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="before_started:send_notification")
    assert done.returncode == 0, done.stderr  # never got as far as a notification
    assert cli.sent() == 0
    store = cli.store()
    assert load_view(store, "p.call_1").info.tools_allowed == ("read_file", "spawn_subagent")
    spawn = load_view(store, "p.call_1").ledger["call_1"]
    assert spawn.status == "failed" and "send_notification" in (spawn.error or "")
    assert "p.call_1.call_1" not in store.list_runs()  # no grandchild was created
    assert load_view(store, "p.call_1").spawned == {}
    assert {k: v.child_run_id for k, v in load_view(store, "p").spawned.items()} == {"call_1": "p.call_1"}


def test_a_nested_subagent_is_recorded_by_its_own_parent_and_survives_a_restart(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    (cli.workspace / "notes.txt").write_text("the notes\n")
    read = {"tool": "read_file", "args": {"path": "notes.txt"}}
    grandchild = {"task": "read", "turns": [{"tool_calls": [read]}, {"text": "gc done: the notes"}]}
    spawn_gc = {"tool": "spawn_subagent", "args": {"task": "read", "tools": ["read_file"], "scenario": grandchild}}
    child = {
        "task": "delegate",
        "turns": [{"tool_calls": [spawn_gc]}, {"text": "child done", "expect_in_context": ["gc done: the notes"]}],
    }
    spawn_c = {
        "tool": "spawn_subagent",
        "args": {"task": "delegate", "tools": ["read_file", "spawn_subagent"], "scenario": child},
    }
    sc = scenario(tmp_path, [{"tool_calls": [spawn_c]}, {"text": "parent done", "expect_in_context": ["child done"]}])
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_tool:read_file")  # in the grandchild
    assert crashed.returncode == -signal.SIGKILL
    store = cli.store()
    assert {k: v.child_run_id for k, v in load_view(store, "p").spawned.items()} == {"call_1": "p.call_1"}
    assert {k: v.child_run_id for k, v in load_view(store, "p.call_1").spawned.items()} == {"call_1": "p.call_1.call_1"}
    assert load_view(store, "p.call_1").spawned["call_1"].tools_allowed == ("read_file",)

    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    grand = load_view(store, "p.call_1.call_1")
    assert grand.status == "completed" and grand.info.parent_run_id == "p.call_1" and not grand.recoveries[-1].failed
    assert load_view(store, "p.call_1").status == "completed"
    parent = load_view(store, "p")
    assert parent.status == "completed" and parent.ledger["call_1"].status == "succeeded"
    assert any(m.role == "tool" and "child done" in m.content for m in parent.history)  # the parent got its answer
    assert assistant_texts(cli, "p")[-1] == "parent done"
    for run_id in ("p", "p.call_1", "p.call_1.call_1"):
        assert terminal_reasons(cli, run_id) == []


# H6: `submit --model` then a plain resume -----------------------------------------------------------------------------
def test_a_plain_resume_after_a_submission_with_another_model_is_no_model_switch(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    notify2 = {"tool": "send_notification", "args": {"to": "#ops", "message": "second"}}
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"tool_calls": [notify2]}, {"text": "done"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the first approval wait")
    assert cli("submit", "r", "also tell #ops", "--key", "k1", "--model", "m2").returncode == 0
    assert cli("approve", "r", "call_1").returncode == 0
    wait_until(lambda: waiting_for_approval(cli, "r") and cli.payload("r")["call_id"] != "call_1", "the second wait")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert cli.sent() == 1
    waiting = cli.payload("r")["call_id"]

    resumed = cli.start("resume", "r")  # no --model: nobody switched models across the crash
    wait_until(
        lambda: resumed.poll() is not None or (cli.checkpoint("r") is not None and generation(cli, "r") == 2),
        "the resumed wait",
    )
    assert resumed.poll() is None, resumed.communicate(timeout=30)  # it waits again: not closed for model_switch
    assert cli("approve", "r", waiting).returncode == 0
    _, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert "model_switch" not in err
    assert terminal_reasons(cli, "r") == []
    view = load_view(cli.store(), "r")
    assert view.status == "completed" and view.ledger[waiting].status == "succeeded"
    assert cli.sent() == 2


# M2: a closed run stays closed, with its first reason -------------------------------------------------------------
def test_resuming_a_closed_run_again_records_nothing_and_changes_nothing(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    first = cli("resume", "r", "--model", "m2")
    assert first.returncode == 9 and "model_switch" in first.stderr
    store = cli.store()
    owner = store.owner("r")
    assert owner is not None and owner.terminal_at is not None
    before = load_view(store, "r")
    for _ in range(3):
        again = cli("resume", "r")
        assert again.returncode == 9 and "is closed" in again.stderr, again.stderr
    after = store.owner("r")
    assert after is not None
    assert (after.terminal_at, after.terminal_status) == (owner.terminal_at, TERMINAL_STATUS_RESTART)
    assert len(store.terminal_events("r")) == 1
    assert terminal_reasons(cli, "r") == ["model_switch"]
    view = load_view(store, "r")
    assert len(view.recoveries) == len(before.recoveries) == 1
    assert sum(1 for e in view.events if e.status == "closed") == 1
    assert_closed(cli, "r", "model_switch")


def test_resuming_a_cancelled_run_leaves_it_cancelled(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"tool_calls": [NOTIFY]}, {"text": "ok"}])
    run = cli.start("run", sc, "--run-id", "r", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the approval wait")
    assert cli("cancel", "r").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == 10
    owner = cli.store().owner("r")
    assert owner is not None and owner.terminal_status == CANCELLED_STATUS == "Cancelled by the user."
    resumed = cli("resume", "r")
    assert resumed.returncode == 9 and "is closed" in resumed.stderr
    after = cli.store().owner("r")
    assert after is not None and (after.terminal_at, after.terminal_status) == (owner.terminal_at, CANCELLED_STATUS)
    view = load_view(cli.store(), "r")
    assert view.status == "cancelled" and len(view.recoveries) == 1
    assert terminal_reasons(cli, "r") == ["user_cancelled"]
    status = json.loads(cli("status", "r", "--json").stdout)
    # The record keeps "Cancelled by the user."; status shows who cancelled and when (issue 9 §4).
    assert status["status"] == "cancelled" and status["terminal_status"].startswith("cancelled by user at ")
    assert cli.sent() == 0


KILLER = """
import os, signal, sys
from safepoint.store.file_store import FileStore
when, method = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
original = getattr(FileStore, method)
def killing(self, *args, **kwargs):
    if when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
    return result
setattr(FileStore, method, killing)
from safepoint.cli.app import main
sys.argv[0] = "safepoint"
main()
"""


def killed_at(cli: Cli, when: str, method: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI, SIGKILLed right before or after its first call of a store method: a crash no failpoint names."""
    return subprocess.run(
        [sys.executable, "-c", KILLER, when, method, *args, "--workspace", str(cli.workspace)],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("recovery", ["resume", "daemon"])
@pytest.mark.parametrize(
    ("when", "method"), [("before", "close_owner"), ("after", "close_owner"), ("after", "record_terminal_event")]
)
def test_a_restart_cleanup_cut_short_is_finished_for_its_original_reason(
    tmp_path: Path, recovery: str, when: str, method: str
) -> None:
    cli = Cli(tmp_path)
    crashed_run(cli, tmp_path)
    killed = killed_at(cli, when, method, "resume", "r", "--model", "m2")  # closing it for model_switch
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert cli.store().read_restart_checkpoint("r") is not None  # the cleanup is not finished

    if recovery == "resume":
        finished = cli("resume", "r")  # no --model: this recovery alone would find no model_switch
        assert finished.returncode == 9, finished.stderr
    else:
        finished = cli("daemon", "--once", "--json")
        assert finished.returncode == 0, finished.stderr
    assert_closed(cli, "r", "model_switch")
    assert terminal_reasons(cli, "r") == ["model_switch"]  # one event, with the reason that started the cleanup
    owner = cli.store().owner("r")
    assert owner is not None and owner.terminal_status == TERMINAL_STATUS_RESTART
    view = load_view(cli.store(), "r")
    assert view.status == "closed" and len(view.recoveries) == 1
    status = json.loads(cli("status", "r", "--json").stdout)
    assert status["status"] == "closed" and status["terminal_status"] == TERMINAL_STATUS_RESTART
    again = cli("resume", "r")
    assert again.returncode == 9 and "is closed" in again.stderr
    assert terminal_reasons(cli, "r") == ["model_switch"]
    assert cli.sent() == 1


# M3: a child cancelled live and killed while closing ---------------------------------------------------------------
def test_the_parents_resume_finishes_a_childs_close_cut_short(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    run = cli.start("run", sc, "--run-id", "p", "--approval", "high", SAFEPOINT_FAILPOINT="closing")
    # The restart checkpoint is written just after the wait shows in the ledger: under load a cancel can come
    # between the two, and a close before any checkpoint leaves none to find (a different case than this one).
    wait_until(
        lambda: waiting_for_approval(cli, "p.call_1") and cli.checkpoint("p.call_1") is not None,
        "the child's approval wait",
    )
    assert cli("cancel", "p.call_1").returncode == 0
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL  # the child's close is logged, its cleanup is not done
    assert cli.checkpoint("p.call_1") is not None

    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    store = cli.store()
    owner = store.owner("p.call_1")
    assert owner is not None and owner.terminal_at is not None  # the child's cleanup was finished
    assert store.read_restart_checkpoint("p.call_1") is None
    assert len(store.terminal_events("p.call_1")) == 1
    assert load_view(store, "p.call_1").status in ("closed", "cancelled")
    parent = load_view(store, "p")
    assert len([m for m in parent.history if m.name == SELF_HEALING]) == 1
    assert parent.ledger["call_1"].status == "failed" and parent.status == "completed"
    assert cli.sent() == 0


# M4, M5: restore -----------------------------------------------------------------------------------------------------
def test_resume_after_restore_continues_the_restored_branch(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    write = {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}}
    shown = "Streaming the summary now."
    sc = scenario(tmp_path, [{"tool_calls": [write]}, {"text": shown, "streamed": True}])
    crashed = cli("run", sc, "--run-id", "r", SAFEPOINT_FAILPOINT="visible_output")
    assert crashed.returncode == -signal.SIGKILL
    assert cli.payload("r")["visible_output_started"] is True
    listed = json.loads(cli("checkpoints", "r", "--json").stdout)
    target = [c for c in listed if c["kind"] == "after_step"][-1]["checkpoint_id"]  # before the streamed turn
    restored = cli("restore", "r", "--to", target)
    assert restored.returncode == 0, restored.stderr
    checkpoint = cli.checkpoint("r")
    assert checkpoint is None or not json.loads(checkpoint.payload_json or "{}").get("visible_output_started")

    resumed = cli("resume", "r")
    assert resumed.returncode == 0, resumed.stderr  # the branch the user asked for goes on
    assert "visible_output_started" not in resumed.stderr
    assert terminal_reasons(cli, "r") == []
    owner = cli.store().owner("r")
    assert owner is not None and owner.terminal_at is None
    assert load_view(cli.store(), "r").status == "completed"
    assert assistant_texts(cli, "r")[-1] == shown


def test_a_subagent_can_be_spawned_on_a_restored_branch(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    child = {"task": "sub", "turns": [{"text": "sub done"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "sub", "scenario": child}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done", "expect_in_context": ["sub done"]}])
    assert cli("run", sc, "--run-id", "p").returncode == 0
    target = json.loads(cli("checkpoints", "p", "--json").stdout)[0]["checkpoint_id"]
    assert cli("restore", "p", "--to", target).returncode == 0
    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    view = load_view(cli.store(), "p")
    branch_calls = [cid for cid in view.ledger if cid != "call_1"]
    assert len(branch_calls) == 1, view.ledger.keys()
    call_id = branch_calls[0]
    entry = view.ledger[call_id]
    assert entry.tool_name == "spawn_subagent" and entry.status == "succeeded", entry.error
    child_id = view.spawned[call_id].child_run_id
    assert RUN_ID.match(child_id) and child_id != "p.call_1"
    spawned = load_view(cli.store(), child_id)
    assert (
        spawned.status == "completed" and spawned.info.parent_run_id == "p" and spawned.info.parent_call_id == call_id
    )
    assert view.status == "completed"


# M6: a grant that expires while the child runs ---------------------------------------------------------------------
def test_a_child_whose_grant_expired_while_it_ran_dispatches_nothing(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child, "expires_in_s": 4}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    run = cli.start("run", sc, "--run-id", "p", "--approval", "high")
    wait_until(lambda: waiting_for_approval(cli, "p.call_1"), "the child's approval wait")
    expires = load_view(cli.store(), "p").spawned["call_1"].grant_expires_at_ms
    assert expires is not None
    wait_until(lambda: time.time() * 1000 > expires + 50, "the grant to expire")
    cli("approve", "p.call_1", "call_1")  # too late: the authority it would run under is gone
    _, err = run.communicate(timeout=60)
    assert run.returncode is not None, err
    assert cli.sent() == 0
    entry = load_view(cli.store(), "p.call_1").ledger["call_1"]
    assert entry.started_at is None and entry.status == "failed"
    assert "expired" in (entry.error or "")


def test_a_child_whose_grant_expired_during_a_long_call_dispatches_nothing_after_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    sleep = {"tool": "run_command", "args": {"command": "sleep 3"}}
    child = {"task": "notify", "turns": [{"tool_calls": [sleep]}, {"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child, "expires_in_s": 1.5}}
    sc = scenario(tmp_path, [{"tool_calls": [spawn]}, {"text": "done"}])
    done = cli("run", sc, "--run-id", "p")  # the grant ends while `sleep` runs; the next step may do nothing
    assert done.returncode is not None, done.stderr
    assert cli.sent() == 0
    entry = load_view(cli.store(), "p.call_1").ledger["call_2"]
    assert entry.tool_name == "send_notification" and entry.started_at is None and entry.status == "failed"


# M7: a child waiting for a decision ------------------------------------------------------------------------------
def test_a_child_waiting_for_a_decision_makes_its_parent_wait_and_then_answers_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    command = {"tool": "run_command", "args": {"command": "echo x > f.txt"}}
    child = {"task": "write f", "turns": [{"tool_calls": [command]}, {"text": "child result: f.txt written"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "write f", "scenario": child}}
    sc = scenario(
        tmp_path, [{"tool_calls": [spawn]}, {"text": "parent done", "expect_in_context": ["child result: f.txt"]}]
    )
    crashed = cli("run", sc, "--run-id", "p", SAFEPOINT_FAILPOINT="after_started:run_command")
    assert crashed.returncode == -signal.SIGKILL

    waiting = cli("resume", "p")
    assert waiting.returncode == 3, (waiting.stdout, waiting.stderr)  # the parent waits with its child
    assert "p.call_1" in waiting.stderr
    store = cli.store()
    assert load_view(store, "p.call_1").status == "waiting_decision"
    parent = load_view(store, "p")
    assert parent.status != "completed" and parent.ledger["call_1"].status not in ("failed", "succeeded")

    decided = cli("resume", "p.call_1", "--replay", "call_1")
    assert decided.returncode == 0, decided.stderr
    assert load_view(store, "p.call_1").status == "completed"
    resumed = cli("resume", "p")
    assert resumed.returncode == 0, resumed.stderr
    parent = load_view(store, "p")
    assert parent.status == "completed" and parent.ledger["call_1"].status == "succeeded"
    assert any(m.role == "tool" and "child result: f.txt written" in m.content for m in parent.history)
    assert assistant_texts(cli, "p")[-1] == "parent done"
    assert (cli.workspace / "f.txt").read_text() == "x\n"
