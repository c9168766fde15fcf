"""Runs for the review page's tests (``test_ui_*``): hostile text everywhere a page shows it, a large diff, two
conflicts (one under a hostile name), and an approval wait whose process died (the wait goes on, unattended)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import safepoint
from safepoint.records import ToolCall

from .conftest import PY, cli_env, read_until

SCRIPT_TAG = "<script>alert('x')</script>"
HOSTILE_NAME = "\"><script>alert('name')</script>.txt"
BIDI = "read\u202etxt.exe"


def hostile_run(ws: Path) -> None:
    """Run ``hostile``: model text, a task, a file name and a diff that carry markup, a bidi override, and a
    file of 3,000 lines (its diff is capped on the page)."""
    sp = safepoint.open(workspace=str(ws))
    try:
        with sp.start(f"task {SCRIPT_TAG}", run_id="hostile") as run:
            calls = [
                ToolCall(call_id="c1", tool="write_file", args={"path": HOSTILE_NAME, "content": f"{SCRIPT_TAG}\n"}),
                ToolCall(call_id="c2", tool="write_file", args={"path": "big.txt", "content": "x\n" * 3000}),
                ToolCall(call_id="c3", tool="write_file", args={"path": BIDI, "content": "b\n"}),
            ]
            run.add_message("assistant", f"model says {SCRIPT_TAG} & <b>bold</b> {BIDI}", tool_calls=calls)
            for call in calls:
                run.call(call.tool, dict(call.args), call_id=call.call_id)
            run.checkpoint()
            run.add_message("assistant", "done")
            run.checkpoint()
    finally:
        sp.close()


def conflicted_run(ws: Path) -> None:
    """Run ``conflicted``: the agent changed two files, the user edited both since, and a rollback left both as
    conflicts (``f.txt`` and one under a hostile name)."""
    (ws / "f.txt").write_text("line1\nline2\nline3\n")
    sp = safepoint.open(workspace=str(ws))
    try:
        with sp.start("t", run_id="conflicted") as run:
            start = run.checkpoint()
            run.call("write_file", {"path": "f.txt", "content": "line1\nAGENT\nline3\n"}, call_id="w1")
            run.call("write_file", {"path": HOSTILE_NAME + ".2", "content": "agent\n"}, call_id="w2")
        (ws / "f.txt").write_text("line1\nAGENT\nline3\nuser tail\n")
        (ws / (HOSTILE_NAME + ".2")).write_text(f"agent\n{SCRIPT_TAG}\n")
        plan = sp.rollback_files("conflicted", start)
        assert len(plan.conflicts) == 2 and "f.txt" in {c.path for c in plan.conflicts}
    finally:
        sp.close()


def waiting_run(ws: Path, tmp: Path, run_id: str = "waiting") -> None:
    """Run ``waiting``: a high-risk call waits for approval; its process is killed (the wait goes on)."""
    notify = {"tool": "send_notification", "args": {"to": "a@b.c", "message": SCRIPT_TAG}}
    script = {"task": "t", "turns": [{"text": "sending", "tool_calls": [notify]}, {"text": "sent"}]}
    (tmp / f"{run_id}.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp / "outbox"))
    args = [PY, "-m", "safepoint", "run", str(tmp / f"{run_id}.json"), "-w", str(ws), "--run-id", run_id]
    running = subprocess.Popen(
        [*args, "--approval", "high"], cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        read_until(running, "deny:")
    finally:
        running.kill()
        running.communicate(timeout=60)


PAY_TOOL = """
import safepoint

@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="medium")
def pay(ctx, amount: int) -> str:
    return "paid"
"""


def uncertain_run(ws: Path, tmp: Path, run_id: str = "crashed") -> None:
    """Run ``crashed``: its process was killed right after ``pay`` (non-idempotent, replay policy ``ask``) ran,
    before its outcome was recorded: the call is uncertain and waits for a person's decision."""
    (tmp / "ui_pay_tools.py").write_text(PAY_TOOL)
    script = {"task": "t", "turns": [{"tool_calls": [{"tool": "pay", "args": {"amount": 5}}]}, {"text": "done"}]}
    (tmp / f"{run_id}.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_FAILPOINT="after_tool:pay")
    args = [PY, "-m", "safepoint", "run", f"{run_id}.json", "-w", str(ws), "--run-id", run_id]
    crashed = subprocess.run(
        [*args, "--tools", "ui_pay_tools:pay"], cwd=tmp, env=env, capture_output=True, text=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr
