"""``safepoint demo``: a scripted coding agent, killed with SIGKILL mid-run, resumed (nothing is sent twice), then
its files rolled back while the user's edit is kept; then a call waiting for approval survives a kill of its agent
and, once approved, runs exactly once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule

from safepoint.api import Safepoint
from safepoint.api import open as open_safepoint
from safepoint.cli import render
from safepoint.cli.common import plain
from safepoint.cli.plain import status_table
from safepoint.errors import ExitCode
from safepoint.records import RollbackFiles

SCENARIO = {
    "task": "Add a slugify helper with a test, tell the team, and note it in the changelog.",
    "model": "scripted-v1",
    "turns": [
        {
            "text": "I will write the helper and its test.",
            "tool_calls": [
                {
                    "tool": "write_file",
                    "args": {
                        "path": "textutil.py",
                        "content": "import re\n\n\ndef slugify(text):\n"
                        "    return re.sub(r'[^a-z0-9]+', '-', text.lower()).strip('-')\n",
                    },
                },
                {
                    "tool": "write_file",
                    "args": {
                        "path": "test_textutil.py",
                        "content": "from textutil import slugify\n\nassert slugify('Hello, World!') == "
                        "'hello-world'\nprint('1 passed')\n",
                    },
                },
            ],
        },
        {
            "text": "Run the test.",
            "tool_calls": [{"tool": "run_command", "args": {"command": "python3 test_textutil.py"}}],
        },
        {
            "text": "Tests pass; telling the team.",
            "tool_calls": [
                {
                    "tool": "send_notification",
                    "args": {"to": "#dev", "message": "slugify() landed, tests pass"},
                }
            ],
        },
        {
            "text": "Recording the change.",
            "tool_calls": [
                {"tool": "write_file", "args": {"path": "CHANGELOG.md", "content": "- add slugify()\n"}},
                {"tool": "list_files", "args": {}},
            ],
        },
        {"text": "Done: slugify() added and tested, team notified, changelog updated."},
    ],
}


DEPLOY = {
    "task": "Ship the release: announce the deploy once it is approved.",
    "model": "scripted-v1",
    "turns": [
        {
            "text": "Announcing the deploy (this needs your approval).",
            "tool_calls": [{"tool": "send_notification", "args": {"to": "#ops", "message": "deploying v1.2"}}],
        },
        {"text": "Announced."},
    ],
}


def _safepoint(args: list[str], env: dict[str, str], *, quiet: bool = False) -> subprocess.Popen[bytes]:
    out = subprocess.DEVNULL if quiet else None
    return subprocess.Popen([sys.executable, "-m", "safepoint", *args], env=env, stdout=out)


def _wait_payload(sp: Safepoint, run_id: str, ready: Callable[[dict[str, Any], int], bool]) -> dict[str, Any]:
    """The run's approval-wait payload once ``ready(payload, writer generation)`` holds."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        checkpoint = sp.restart_checkpoint(run_id)
        if checkpoint is not None and checkpoint.mode == "tool_approval_wait" and checkpoint.payload_json:
            payload: dict[str, Any] = json.loads(checkpoint.payload_json)
            generation = json.loads(checkpoint.execution_config_json or "{}").get("generation", 0)
            if ready(payload, generation):
                return payload
        time.sleep(0.05)
    raise TimeoutError(f"run {run_id} never reached its approval wait")


def _approval_part(console: Console, base: str, workspace: str, env: dict[str, str]) -> bool:
    """Part two: a high-risk call waits for a person; the agent dies while it waits; the wait survives."""
    scenario = os.path.join(base, "deploy.json")
    with open(scenario, "w") as handle:
        json.dump(DEPLOY, handle, indent=2)
    outbox = env["SAFEPOINT_OUTBOX"]
    before = _lines(outbox)
    console.print(
        "\n[bold]5.[/bold] A second run, with `--approval high`: its notification is high-risk, so it waits for "
        "`safepoint approve deploy call_1`. We kill the agent while it waits."
    )
    args = ["--workspace", workspace]
    first = _safepoint(["run", scenario, *args, "--run-id", "deploy", "--approval", "high"], env, quiet=True)
    sp = open_safepoint(workspace=workspace)
    started = _wait_payload(sp, "deploy", lambda p, g: True)
    waited = _wait_payload(sp, "deploy", lambda p, g: p["timeout_remaining_ms"] < started["timeout_remaining_ms"])
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    console.print(
        f"[red]killed the agent[/red] while call_1 waited ({waited['timeout_remaining_ms'] / 1000:.1f} s left)"
    )
    console.print(render.recovery_panel("deploy", plain(sp.explain("deploy", probe_workspace=False).recovery)))
    console.print("[bold]6.[/bold] `safepoint resume deploy`: the same wait goes on, with the time it had left.")
    resumed = _safepoint(["resume", "deploy", *args], env, quiet=True)
    again = _wait_payload(sp, "deploy", lambda p, g: g >= 2)
    same = again["wait_started_at_ms"] == started["wait_started_at_ms"]
    console.print(
        f"wait started at the same moment: {same}; time left {again['timeout_remaining_ms'] / 1000:.1f} s "
        "(not a fresh 600 s). Now `safepoint approve deploy call_1`."
    )
    sp.approve("deploy", "call_1")
    code = resumed.wait()
    sent = _lines(outbox) - before
    verdict = "[green]sent once[/green]" if sent == 1 else f"[red]sent {sent} times[/red]"
    console.print(Panel(f"run deploy: exit code {code}\nannouncement: {verdict}", title="after approval"))
    return code == 0 and sent == 1 and same


def _lines(path: str) -> int:
    try:
        with open(path) as handle:
            return len(handle.read().splitlines())
    except FileNotFoundError:
        return 0


def run_demo(console: Console, *, keep: bool = False) -> ExitCode:
    base = tempfile.mkdtemp(prefix="safepoint-demo-")
    workspace = os.path.join(base, "workspace")
    os.mkdir(workspace)
    outbox = os.path.join(base, "outbox.jsonl")  # outside the workspace: an external effect
    scenario = os.path.join(base, "scenario.json")
    marker = os.path.join(base, "paused")
    with open(scenario, "w") as handle:
        json.dump(SCENARIO, handle, indent=2)
    env = {**os.environ, "SAFEPOINT_OUTBOX": outbox}
    run_id = "demo"
    console.print(Rule("safepoint demo"))
    console.print(f"workspace: {workspace}\noutbox (outside the workspace): {outbox}\n")
    console.print(
        "[bold]1.[/bold] The agent starts. We will kill it with SIGKILL right after it has sent the "
        "notification and before it could record that it did: the worst moment."
    )
    crash_env = {
        **env,
        "SAFEPOINT_FAILPOINT": "after_tool:send_notification",
        "SAFEPOINT_FAILPOINT_ACTION": f"pause:{marker}",
    }
    child = _safepoint(["run", scenario, "--workspace", workspace, "--run-id", run_id], crash_env)
    deadline = time.monotonic() + 120
    while not os.path.exists(marker):
        if child.poll() is not None or time.monotonic() > deadline:
            console.print("[red]the agent ended before reaching the crash point[/red]")
            return ExitCode.FAILED
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    console.print(f"[red]killed agent process {child.pid} with SIGKILL[/red] (exit {child.returncode})\n")

    sp = open_safepoint(workspace=workspace)
    console.print("[bold]2.[/bold] `safepoint status` and `safepoint explain demo` after the crash:")
    console.print(status_table(sp.status(run_id), colour=False), markup=False, highlight=False, end="")
    console.print(render.explain_view(plain(sp.explain(run_id))))

    console.print("\n[bold]3.[/bold] `safepoint resume demo`: the run continues from its latest complete checkpoint.")
    resumed = _safepoint(["resume", run_id, "--workspace", workspace], env)
    code = resumed.wait()
    console.print()
    with open(outbox) as handle:
        sent = handle.read().splitlines()
    files = sorted(f for f in os.listdir(workspace) if not f.startswith("."))
    [row] = sp.status(run_id)
    verdict = "[green]sent once[/green]" if len(sent) == 1 else f"[red]sent {len(sent)} times[/red]"
    console.print(
        Panel(
            f"run status: {row.status} (resume exit code {code})\n"
            f"notification: {verdict}\n"
            f"workspace files: {', '.join(files)}",
            title="after resume",
        )
    )
    console.print(render.ledger_table(plain(sp.ledger(run_id))))

    first = sp.checkpoints(run_id)[0].checkpoint_id
    console.print(
        "\n[bold]4.[/bold] You edit CHANGELOG.md, then ask for the files as they were before the run: "
        f"`safepoint rollback demo --to {first}` (its first checkpoint)."
    )
    changelog = os.path.join(workspace, "CHANGELOG.md")
    with open(changelog, "a") as handle:
        handle.write("- your own note, written after the agent\n")
    plan = sp.recover(run_id, RollbackFiles(checkpoint_id=first))
    data = plain(plan) | {"dry_run": False}
    console.print(render.rollback_view(data | {"run_id": run_id}))
    left = sorted(f for f in os.listdir(workspace) if not f.startswith("."))
    with open(changelog) as handle:
        kept = "your own note" in handle.read()
    console.print(
        Panel(
            f"workspace files: {', '.join(left)}\n"
            "your edit to CHANGELOG.md: "
            + ("[green]kept (a conflict for you to resolve)[/green]" if kept else "[red]lost[/red]"),
            title="after rollback_files",
        )
    )
    approval_ok = _approval_part(console, base, workspace, env)
    if keep:
        console.print(f"kept {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    passed = code == 0 and len(sent) == 1 and row.status == "completed" and kept and approval_ok
    return ExitCode.OK if passed else ExitCode.FAILED
