"""Every recovery leaves a trace (issue 11 §6): each event family produced by a real scenario and read back with
``safepoint trace`` (in process) or ``Safepoint.trace``: a SIGKILLed run and its resume, on both stores; a
rollback that meets the user's edit, then its resolution; a restore; a compensation; a cancel settled by a
restart cleanup; a takeover and the stale owner's refused write; planted secrets that never reach the trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import safepoint
from safepoint import ToolContext
from safepoint.core.restart import CHECKED_ORDER
from safepoint.errors import StaleGenerationError
from tests.conftest import cli_env, safepoint_in_process
from tests.store_text import trace_lines

SECRET_KEY = "sk-proj-" + "Q7vX2mB9kLp4Rt8Wz1Yc6Hn3Jd5Fg0As"
SECRET_GH = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRET_ENV = "tok-" + "9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def _scenario(tmp_path: Path, final: str = "done") -> Path:
    path = tmp_path / "sc.json"
    turns: list[dict[str, Any]] = [
        {"text": "writing", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
        {"text": "telling", "tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": "hi"}}]},
        {"text": final},
    ]
    path.write_text(json.dumps({"task": "t", "turns": turns}))
    return path


def _crash(workspace: Path, scenario: Path, store: list[str], env: dict[str, str]) -> None:
    """`safepoint run` in a child process, SIGKILLed once send_notification is `started`."""
    crash = {**env, "SAFEPOINT_FAILPOINT": "after_started:send_notification"}
    child = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(scenario), "--run-id", "r", "-w", str(workspace), *store],
        env=crash,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr


def _events(workspace: Path, *args: str, store: list[str] = (), env: dict[str, str] | None = None) -> list[dict]:
    done = safepoint_in_process("trace", "r", "-w", workspace, "--json", *args, *store, env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _named(events: list[dict], name: str, generation: int | None = None) -> list[dict]:
    return [e for e in events if e["event"] == name and (generation is None or e["generation"] == generation)]


@pytest.fixture(params=["file", "postgres"])
def store(request) -> list[str]:
    if request.param == "file":
        return []
    return ["--store", request.getfixturevalue("fresh_url")]


def test_a_sigkilled_run_and_its_resume_leave_every_decision_in_the_trace(tmp_path, workspace, outbox, store):
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    _crash(workspace, _scenario(tmp_path), store, env)
    resumed = safepoint_in_process("resume", "r", "-w", workspace, *store, env=env)
    assert resumed.returncode == 0, resumed.stderr
    events = _events(workspace, store=store, env=env)
    first = [e for e in events if e["generation"] == 1]
    # The crashed attempt: what was written before the kill (its last batch is lost, never a record).
    assert first[0]["event"] == "run_claimed" and first[0]["data"]["takeover"] is False
    started = _named(events, "tool_started", 1)[0]["data"]
    assert started | {"step_id": "step_1"} == {
        "call_id": "call_1",
        "tool_name": "write_file",
        "attempt": 1,
        "step_id": "step_1",
        "idempotency": "conditional",
        "replay_policy": "auto",
        "risk_level": "low",
    }
    assert _named(events, "file_patch", 1)[0]["data"] == {"path": "a.txt", "call_id": "call_1", "op": "create"}
    assert _named(events, "tool_finished", 1)[0]["data"]["status"] == "succeeded"
    assert {"before_step", "tool_start", "tool_end", "after_step"} <= {
        e["data"]["kind"] for e in _named(events, "checkpoint", 1)
    }
    assert {e["data"]["mode"] for e in _named(events, "restart_checkpoint", 1)} == {"reaction_loop"}
    assert not _named(events, "run_released", 1)  # it never ended normally
    # The resume: the claim, the seven assertions with their results in order, the verdict, the plan, each
    # interrupted call's replay decision with its reason, what the runner did, the note, the end.
    assert _named(events, "run_claimed", 2)[0]["data"]["takeover"] is False
    assertions = _named(events, "recovery_assertion", 2)
    assert [e["data"]["assertion"] for e in assertions] == list(CHECKED_ORDER)
    assert {e["data"]["result"] for e in assertions} == {"passed"}
    verdict = _named(events, "recovery_verdict", 2)[0]["data"]
    assert (
        verdict["action"] == "resumed" and verdict["disposition"] == "Resumable" and verdict["mode"] == "reaction_loop"
    )
    plan = _named(events, "resume_plan", 2)[0]["data"]
    assert plan["checkpoint_id"].startswith("ckpt_") and plan["step"] == 2 and "latest complete" in plan["why"]
    decisions = {e["data"]["call_id"]: e["data"] for e in _named(events, "replay_decision", 2)}
    assert decisions["call_1"]["action"] == "take_outcome" and decisions["call_1"]["status"] == "succeeded"
    call_2 = decisions["call_2"]
    assert (call_2["action"], call_2["status"], call_2["replayable"]) == ("report_uncertain", "uncertain", False)
    assert (call_2["idempotency"], call_2["replay_policy"], call_2["tool_name"]) == (
        "non_idempotent",
        "never",
        "send_notification",
    )
    assert "not replayable" in call_2["why"]
    assert _named(events, "call_uncertain", 2)[0]["data"]["call_id"] == "call_2"
    note = _named(events, "recovery_note", 2)[0]["data"]
    assert note == {"checkpoint_id": plan["checkpoint_id"], "calls": 2}
    names = [e["event"] for e in events if e["generation"] == 2]
    assert names.index("recovery_verdict") < names.index("resume_plan") < names.index("recovery_note")
    assert names[-3:] == ["run_completed", "restart_checkpoint_deleted", "run_released"]
    # The timeline: one line per event, 80 columns, the two attempts told apart.
    text = safepoint_in_process("trace", "r", "-w", workspace, *store, env={**env, "COLUMNS": "80"})
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and len(lines) == len(events) + 1 and lines[0].startswith("-- 20")
    assert all(len(line) <= 80 for line in lines)
    assert any(" g1 tool_started       write_file(call_1) attempt=1" in line for line in lines)
    assert any(" g2 recovery_assertion passed partial_recovery_descriptor" in line for line in lines)
    # --call: only what concerns that call.
    about = _events(workspace, "--call", "call_2", store=store, env=env)
    assert {e["event"] for e in about} == {"replay_decision", "call_uncertain"}


def test_since_and_call_filter_and_errors_are_one_line(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "a.txt", "content": "1\n"}, call_id="c1")
        mark = run.checkpoint()
        run.call("read_file", {"path": "a.txt"}, call_id="c2")
    since = _events(workspace, "--since", mark)
    assert since[0]["event"] == "checkpoint" and since[0]["data"]["checkpoint_id"] == mark
    assert {e["data"].get("call_id") for e in since if e["event"] == "tool_started"} == {"c2"}
    assert _events(workspace, "--since", "1h") == _events(workspace)
    assert _events(workspace, "--since", "2999-01-01T00:00:00") == []
    nothing = safepoint_in_process("trace", "r", "-w", workspace, "--call", "c9")
    assert nothing.returncode == 0 and nothing.stdout == "run r: no trace events about c9\n"
    unknown = safepoint_in_process("trace", "nope", "-w", workspace)
    assert unknown.returncode == 4 and unknown.stderr.count("\n") == 1 and "nope" in unknown.stderr
    bad = safepoint_in_process("trace", "r", "-w", workspace, "--since", "last tuesday")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--since" in bad.stderr
    gone = safepoint_in_process("trace", "r", "-w", workspace, "--since", "ckpt_999999")
    assert gone.returncode == 2 and "ckpt_999999" in gone.stderr


def test_a_rollback_that_meets_the_users_edit_then_its_resolution(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "a.txt", "content": "agent\n"}, call_id="c1")
        run.call("write_file", {"path": "b.txt", "content": "agent\n"}, call_id="c2")
    (workspace / "b.txt").write_text("agent\nuser\n")  # the user's edit after the agent's
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["b.txt"]
    tm.resolve("r", "b.txt", "keep_user")
    events = tm.trace("r")
    planned = _data(events, "rollback_planned")
    assert planned == [{"checkpoint_id": start, "actions": 1, "conflicts": 1, "uncertain": 0, "unrestorable": 0}]
    conflict = _data(events, "conflict")
    assert conflict[0]["path"] == "b.txt" and conflict[0]["resolution"] == "pending"
    assert conflict[0]["expected_hash"] != conflict[0]["actual_hash"] and conflict[0]["actual_hash"].startswith("sha")
    actions = _data(events, "rollback_action")
    assert [(a["path"], a["action"]) for a in actions] == [("a.txt", "removed")]
    assert actions[0]["undoes"] == ["c1"] and actions[0]["call_id"].startswith("safepoint:rollback:")
    assert _data(events, "rollback_finished") == [{"checkpoint_id": start, "reverted": 1, "conflicts": 1}]
    resolved = _data(events, "conflict_resolved")
    assert resolved[0] | {"call_id": ""} == {"path": "b.txt", "resolution": "keep_user", "call_id": "", "clean": True}
    assert resolved[0]["call_id"].startswith("safepoint:resolve:")
    assert conflict[-1]["resolution"] == "keep_user"  # the conflict record as settled
    generations = sorted({e.generation for e in events})
    assert generations == [1, 2, 3]  # the run, the rollback's session, the resolution's session
    assert [e.data["takeover"] for e in events if e.event == "run_claimed"] == [False, False, False]


def _data(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == name]


def test_a_rollback_left_an_uncertain_change_says_which_and_why():
    from safepoint.core.rollback import RollbackPlan, UncertainChange, Unrestorable
    from safepoint.engine.actions import trace_rollback_plan

    traced: list[tuple[str, dict[str, Any]]] = []

    class Session:
        def trace(self, event: str, **data: Any) -> None:
            traced.append((event, data))

    plan = RollbackPlan(
        checkpoint_id="ckpt_000002",
        actions=[],
        conflicts=[],
        unrestorable=[Unrestorable(path="big.bin", call_id="c3", why="recorded by hash only")],
        uncertain=[UncertainChange(path="out.log", call_id="c4", why="changed while c4 ran")],
    )
    trace_rollback_plan(Session(), plan)  # type: ignore[arg-type]
    assert traced[1:] == [
        ("rollback_skipped", {"path": "big.bin", "call_id": "c3", "why": "recorded by hash only"}),
        ("rollback_skipped", {"path": "out.log", "call_id": "c4", "why": "changed while c4 ran"}),
    ]


def test_restore_and_compensation(workspace):
    issues: dict[str, str] = {}

    def close_issue(ctx: ToolContext, args: dict, result: str) -> str:
        issues[result] = "closed"
        return f"closed {result}"

    @safepoint.tool(
        idempotency="non_idempotent",
        replay_policy="never",
        risk_level="medium",
        compensator=close_issue,
        side_effects=("network",),
    )
    def create_issue(ctx: ToolContext, title: str) -> str:
        issues["ISSUE-1"] = "open"
        return "ISSUE-1"

    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[create_issue], run_id="r") as run:
        run.add_message("assistant", "first")
        start = run.checkpoint()
        run.call("create_issue", {"title": "x"}, call_id="c1")
    restored = tm.restore_session("r", start)
    tm.compensate("r", "c1", tools=[create_issue])
    events = tm.trace("r")
    session = _data(events, "session_restored")[0]
    assert session == {
        "checkpoint_id": start,
        "new_checkpoint_id": restored.checkpoint_id,
        "abandoned": ["c1"],
        "not_undone": ["c1"],
        "with_files": False,
    }
    assert _data(events, "compensation") == [
        {"call_id": "safepoint:compensate:c1", "compensates": "c1", "status": "succeeded"}
    ]
    started = [e for e in events if e.event == "tool_started" and e.data["call_id"] == "safepoint:compensate:c1"]
    assert started and started[0].data["tool_name"] == "compensate_create_issue"
    assert [e.event for e in tm.trace("r", call_id="c1")][-1] == "compensation"


def test_a_cancel_settled_by_a_restart_cleanup_traces_the_verdict_and_the_terminal_event(tmp_path, workspace, outbox):
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    _crash(workspace, _scenario(tmp_path), [], env)
    done = safepoint_in_process("cancel", "r", "-w", workspace, env=env)
    assert done.returncode == 0, done.stderr
    events = _events(workspace, env=env)
    closing = [e for e in events if e["generation"] == 2]
    assert [e["event"] for e in closing] == [
        "run_claimed",
        *["recovery_assertion"] * len(CHECKED_ORDER),
        "recovery_verdict",
        "owner_closed",
        "terminal_event",
        "restart_checkpoint_deleted",
        "run_released",
    ]
    verdict = closing[1 + len(CHECKED_ORDER)]["data"]
    assert (verdict["action"], verdict["disposition"], verdict["reason"]) == (
        "closed",
        "ReplayForbidden",
        "user_cancelled",
    )
    terminal = closing[-3]["data"]
    assert terminal == {
        "event_type": "closed_during_restart_recovery",
        "generation": 1,  # the generation whose work was interrupted
        "recorded": True,
        "reason": "user_cancelled",
        "recovery_class": "root",
        "owner_id": "r",
    }
    request = events[-1]
    assert request["event"] == "cancel_requested" and request["generation"] == 0  # a person, not an owner
    assert request["data"] == {"outcome": "closed", "whole_stream": False, "by": "user"}


def test_a_takeover_and_the_stale_owners_refused_write(workspace):
    tm = safepoint.open(workspace=str(workspace))
    stale = tm.start("t", run_id="r")
    stale.call("write_file", {"path": "a.txt", "content": "1\n"}, call_id="c1")
    with safepoint.open(workspace=str(workspace)).resume("r", takeover=True):
        pass  # a second process's resume fences the first off (here: the same process, a live owner)
    with pytest.raises(StaleGenerationError):
        stale.call("write_file", {"path": "b.txt", "content": "2\n"}, call_id="c2")
    stale.close()
    events = tm.trace("r")
    claims = [(e.generation, e.data["takeover"]) for e in events if e.event == "run_claimed"]
    assert claims == [(1, False), (2, True)]
    refused = [e for e in events if e.event == "fencing_refused"]
    assert [(e.generation, e.data) for e in refused] == [(1, {"what": "append", "current_generation": 2})]
    # What the stale owner staged with its refused records never happened, and it released nothing.
    after = events[events.index(refused[0]) :]
    assert [e.event for e in after] == ["fencing_refused"]
    assert not [e for e in events if e.generation == 1 and e.data.get("call_id") == "c2"]
    assert [e.generation for e in events if e.event == "run_released"] == [2]
    assert not (workspace / "b.txt").exists()


def test_a_stale_owners_refused_restart_checkpoint_write_is_traced(workspace):
    tm = safepoint.open(workspace=str(workspace))
    stale = tm.start("t", run_id="r")
    with safepoint.open(workspace=str(workspace)).resume("r", takeover=True):
        pass
    with pytest.raises(StaleGenerationError):
        stale.session.restart.delete()  # as a stale approval wait or loop step would
    stale.close()
    refused = [(e.generation, e.data) for e in tm.trace("r") if e.event == "fencing_refused"]
    assert refused == [(1, {"what": "restart_checkpoint", "current_generation": 2})]


def test_planted_secrets_never_reach_trace_json(tmp_path, workspace, outbox):
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox), MY_SERVICE_TOKEN=SECRET_ENV)
    scenario = tmp_path / "sc.json"
    turns = [
        {"text": "w", "tool_calls": [{"tool": "write_file", "args": {"path": f"{SECRET_GH}.txt", "content": "x\n"}}]},
        {"text": "r", "tool_calls": [{"tool": "read_file", "args": {"path": f"{SECRET_ENV}.md"}}]},
        {"text": f"done: the key is {SECRET_KEY} and {SECRET_ENV}"},
    ]
    scenario.write_text(json.dumps({"task": f"use {SECRET_KEY}", "turns": turns}))
    done = safepoint_in_process("run", scenario, "--run-id", "r", "-w", workspace, env=env)
    assert done.returncode == 0, done.stderr
    text = safepoint_in_process("trace", "r", "-w", workspace, "--json", env=env).stdout
    plain = safepoint_in_process("trace", "r", "-w", workspace, env=env).stdout
    for secret in (SECRET_KEY, SECRET_GH, SECRET_ENV):
        assert secret not in text and secret not in plain
        stored = (workspace / ".agent-runtime" / "runs" / "r" / "trace.jsonl").read_bytes()
        assert secret.encode() not in stored + b"\n".join(trace_lines(stored))  # batches expanded
    assert "[REDACTED:github_token].txt" in text  # the path is still there, without the token
    assert "[REDACTED:openai_key]" in text and "[REDACTED:credential_value]" in text


@pytest.mark.parametrize("request_", ["cancel", "reset"])
def test_a_live_owner_that_acts_on_a_cancel_or_a_reset_traces_its_own_close(workspace, request_):
    from safepoint.standins.scenario import parse_scenario

    script = parse_scenario(json.dumps({"task": "t", "turns": [{"text": "done"}]}).encode())
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start(script.task, run_id="r", model=script.model)
    outcome = tm.cancel("r") if request_ == "cancel" else tm.reset_context("r")
    assert outcome == "requested"  # this process owns the run: it acts at its next safe point
    with run:
        assert tm.run_agent(run, safepoint.ScriptedProvider(script)) == (
            "cancelled" if request_ == "cancel" else "closed"
        )
    events = tm.trace("r")
    reason = "user_cancelled" if request_ == "cancel" else "context_reset"
    assert _data(events, f"{request_}_requested")[0]["outcome"] == "requested"
    verdict = _data(events, "recovery_verdict")
    assert verdict == [
        {
            "action": "closed",
            "disposition": "ReplayForbidden",
            "reason": reason,
            "mode": None,
            "detail": verdict[0]["detail"],
        }
    ]
    assert _data(events, "owner_closed")[0]["terminal_status"]
    terminal = _data(events, "terminal_event")
    assert terminal == [{"event_type": reason, "generation": 1, "recorded": True, "reason": reason}]
    names = [e.event for e in events if e.generation == 1]
    assert names.index("recovery_verdict") < names.index("owner_closed") < names.index("terminal_event")
    assert f"run_{'cancelled' if request_ == 'cancel' else 'closed'}" in names
