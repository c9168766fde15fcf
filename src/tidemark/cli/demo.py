"""``tidemark demo``: a scripted coding agent, killed with SIGKILL mid-run, resumed (nothing is sent twice), then
its files rolled back while the user's edit is kept."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import msgspec
from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule

from tidemark import inspect as reports
from tidemark.api import open as open_tidemark
from tidemark.cli import render
from tidemark.store.url import open_store

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


def _tidemark(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidemark", *args], env=env)


def run_demo(console: Console, *, keep: bool = False) -> int:
    base = tempfile.mkdtemp(prefix="tidemark-demo-")
    workspace = os.path.join(base, "workspace")
    os.mkdir(workspace)
    outbox = os.path.join(base, "outbox.jsonl")  # outside the workspace: an external effect
    scenario = os.path.join(base, "scenario.json")
    marker = os.path.join(base, "paused")
    with open(scenario, "w") as handle:
        json.dump(SCENARIO, handle, indent=2)
    env = {**os.environ, "TIDEMARK_OUTBOX": outbox}
    run_id = "demo"
    console.print(Rule("tidemark demo"))
    console.print(f"workspace: {workspace}\noutbox (outside the workspace): {outbox}\n")
    console.print(
        "[bold]1.[/bold] The agent starts. We will kill it with SIGKILL right after it has sent the "
        "notification and before it could record that it did: the worst moment."
    )
    crash_env = {
        **env,
        "TIDEMARK_FAILPOINT": "after_tool:send_notification",
        "TIDEMARK_FAILPOINT_ACTION": f"pause:{marker}",
    }
    child = _tidemark(["run", scenario, "--workspace", workspace, "--run-id", run_id], crash_env)
    deadline = time.monotonic() + 120
    while not os.path.exists(marker):
        if child.poll() is not None or time.monotonic() > deadline:
            console.print("[red]the agent ended before reaching the crash point[/red]")
            return 1
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    console.print(f"[red]killed agent process {child.pid} with SIGKILL[/red] (exit {child.returncode})\n")

    store = open_store("file:" + os.path.join(workspace, ".agent-runtime"))
    console.print("[bold]2.[/bold] `tidemark status` and `tidemark explain` after the crash:")
    console.print(render.status_table([reports.status_row(store, run_id)]))
    console.print(render.explain_view(reports.explain(store, run_id, workspace)))

    console.print("\n[bold]3.[/bold] `tidemark resume demo`: the run continues from its latest complete checkpoint.")
    resumed = _tidemark(["resume", run_id, "--workspace", workspace], env)
    code = resumed.wait()
    console.print()
    with open(outbox) as handle:
        sent = handle.read().splitlines()
    files = sorted(f for f in os.listdir(workspace) if not f.startswith("."))
    rows = reports.status_row(store, run_id)
    verdict = "[green]sent once[/green]" if len(sent) == 1 else f"[red]sent {len(sent)} times[/red]"
    console.print(
        Panel(
            f"run status: {rows['status']} (resume exit code {code})\n"
            f"notification: {verdict}\n"
            f"workspace files: {', '.join(files)}",
            title="after resume",
        )
    )
    console.print(render.ledger_table(reports.ledger_rows(store, run_id)))

    console.print(
        "\n[bold]4.[/bold] You edit CHANGELOG.md, then ask for the files as they were before the run: "
        "`tidemark rollback demo --to <first checkpoint>`."
    )
    changelog = os.path.join(workspace, "CHANGELOG.md")
    with open(changelog, "a") as handle:
        handle.write("- your own note, written after the agent\n")
    first = reports.checkpoint_rows(store, run_id)[0]["checkpoint_id"]
    plan = open_tidemark(store.url, workspace=workspace).rollback_files(run_id, first)
    data = msgspec.to_builtins(plan) | {"dry_run": False}
    console.print(render.rollback_view(data))
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
    if keep:
        console.print(f"kept {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if code == 0 and len(sent) == 1 and rows["status"] == "completed" and kept else 1
