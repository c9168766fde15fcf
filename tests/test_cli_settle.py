"""`safepoint settle RUN CALL --happened | --did-not-happen` (issue 13, the CLI §4): a person checked an uncertain call
by hand. Recorded as that person's decision (who, when) under the run's claim; after --happened the call is never
run again and its result says it was settled by a person; after --did-not-happen the resume runs it again without
asking when its policy allows. On both stores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from safepoint.errors import ExitCode

from .conftest import PY, cli_env, read_until, safepoint_in_process

TOOLS = """
import os, safepoint

@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="medium")
def pay(ctx, amount: int) -> str:
    with open(os.environ["PAID_LOG"], "a") as f:
        f.write(f"{amount}\\n")
    return "paid"

@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="medium")
def post(ctx, text: str) -> str:
    with open(os.environ["PAID_LOG"], "a") as f:
        f.write(f"post {text}\\n")
    return "posted"
"""


@pytest.fixture(params=["file", "postgres"])
def store(request):
    """The store options: the workspace's file store, or a fresh PostgreSQL database."""
    if request.param == "file":
        return []
    return ["--store", request.getfixturevalue("fresh_url")]


class Crashed:
    def __init__(self, tmp_path, store, tool: str, args: dict[str, object]) -> None:
        self.ws = tmp_path / "ws"
        self.ws.mkdir()
        (tmp_path / "settle_tools.py").write_text(TOOLS)
        self.paid = tmp_path / "paid.log"
        self.cwd = tmp_path
        self.store = store
        script = {"task": "t", "turns": [{"tool_calls": [{"tool": tool, "args": args}]}, {"text": "done"}]}
        (tmp_path / "s.json").write_text(json.dumps(script))
        self.tools = ["--tools", f"settle_tools:{tool}"]
        crashed = self.cli("run", "s.json", "--run-id", "r", *self.tools, SAFEPOINT_FAILPOINT=f"after_tool:{tool}")
        assert crashed.returncode == -9, crashed.stderr  # the tool ran; its outcome was never recorded
        assert self.paid.read_text().count("\n") == 1

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The kill at a fault point is a real child; what a person then does with the CLI is called in process
        (from the folder holding the tools' module, imported afresh as a new process would)."""
        if "SAFEPOINT_FAILPOINT" in env:
            return subprocess.run(
                [PY, "-m", "safepoint", *args, "-w", str(self.ws), *self.store],
                cwd=self.cwd,
                env=cli_env(PAID_LOG=str(self.paid), **env),
                capture_output=True,
                text=True,
                timeout=120,
            )
        sys.modules.pop("settle_tools", None)
        return safepoint_in_process(
            *args, "-w", self.ws, *self.store, env=cli_env(PAID_LOG=str(self.paid), **env), cwd=self.cwd
        )

    def ledger(self) -> dict[str, object]:
        rows = json.loads(self.cli("ledger", "r", "--json").stdout)
        return next(row for row in rows if row["call_id"] == "call_1")


def test_happened_settles_it_for_good_and_it_never_runs_again(tmp_path, store):
    run = Crashed(tmp_path, store, "pay", {"amount": 5})
    settled = run.cli("settle", "r", "call_1", "--happened", "--by", "alice")
    assert settled.returncode == 0, settled.stderr
    assert settled.stdout == "run r: call call_1 succeeded: settled by a person, never run again\n"
    entry = run.ledger()
    assert entry["status"] == "succeeded" and entry["decision"] == "settled"
    assert str(entry["decision_reason"]).startswith("settled by a person (alice, 20")
    resumed = run.cli("resume", "r", *run.tools)
    assert resumed.returncode == 0, resumed.stderr  # no decision asked for any more
    assert run.paid.read_text().count("\n") == 1  # never paid twice
    history = json.loads(run.cli("history", "r", "--json").stdout)
    told = [m["content"] for m in history if m["role"] == "tool"]
    assert len(told) == 1 and "a person (alice, " in told[0] and "checked that its effect happened" in told[0]
    again = run.cli("settle", "r", "call_1", "--did-not-happen")
    assert again.returncode == ExitCode.USAGE and again.stderr.count("\n") == 1 and "succeeded" in again.stderr


def test_did_not_happen_runs_it_again_at_the_resume_without_asking(tmp_path, store):
    run = Crashed(tmp_path, store, "pay", {"amount": 5})
    asked = run.cli("resume", "r", *run.tools)
    assert asked.returncode == ExitCode.WAITING_DECISION  # without the person's finding it waits
    settled = run.cli("settle", "r", "call_1", "--did-not-happen", "--by", "bob", "--json")
    assert settled.returncode == 0, settled.stderr
    assert json.loads(settled.stdout) == {
        "run_id": "r",
        "call_id": "call_1",
        "happened": False,
        "status": "uncertain",
        "outcome": "runs again at the next `safepoint resume r`, without asking",
    }
    resumed = run.cli("resume", "r", *run.tools)
    assert resumed.returncode == 0, resumed.stderr
    assert run.paid.read_text().count("\n") == 2  # run again, once
    entry = run.ledger()
    assert entry["status"] == "succeeded" and "bob" in str(entry["decision_reason"])


def test_did_not_happen_with_policy_never_is_told_to_the_model_not_run(tmp_path, store):
    run = Crashed(tmp_path, store, "post", {"text": "hello"})
    settled = run.cli("settle", "r", "call_1", "--did-not-happen")
    assert settled.returncode == 0, settled.stderr
    assert "failed: did not take effect" in settled.stdout
    resumed = run.cli("resume", "r", *run.tools)
    assert resumed.returncode == 0, resumed.stderr
    assert run.paid.read_text().count("\n") == 1  # its policy is never: not run again, even so
    entry = run.ledger()
    assert entry["status"] == "failed" and entry["decision"] == "settled"


def test_settle_refuses_what_it_cannot_settle_in_one_line(tmp_path):
    run = Crashed(tmp_path, [], "pay", {"amount": 5})
    neither = run.cli("settle", "r", "call_1")
    both = run.cli("settle", "r", "call_1", "--happened", "--did-not-happen")
    unknown = run.cli("settle", "r", "call_9", "--happened")
    for done in (neither, both, unknown):
        assert done.returncode == ExitCode.USAGE and done.stderr.count("\n") == 1, done.stderr
    assert "safepoint ledger r" in unknown.stderr
    no_run = run.cli("settle", "nope", "call_1", "--happened")
    assert no_run.returncode == ExitCode.NOT_FOUND


def test_settle_is_fenced_like_every_write(tmp_path):
    """A live owner holds the run: settle is refused (exit 5) unless --takeover fences it off first."""
    ws = tmp_path / "ws"
    ws.mkdir()
    notify = {"tool": "send_notification", "args": {"to": "a", "message": "m"}}
    script = {"task": "t", "turns": [{"tool_calls": [notify]}, {"text": "ok"}]}
    (tmp_path / "s.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    args = [
        PY,
        "-m",
        "safepoint",
        "run",
        str(tmp_path / "s.json"),
        "-w",
        str(ws),
        "--run-id",
        "r",
        "--approval",
        "high",
    ]
    with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as running:
        read_until(running, "deny:")
        locked = safepoint_in_process("settle", "r", "call_1", "--happened", "-w", ws, env=env)
        assert locked.returncode == ExitCode.LOCKED, locked.stderr
        running.kill()
        running.communicate(timeout=60)
