"""Helpers the attack tests share: a workspace's files as bytes, and a scenario of commands run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import cli_env


def tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agent-runtime"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = handle.read()
    return out


def run_in_a_fresh_process(tmp_path, workspace, commands, **env):
    """`safepoint run` of run_command calls, in a child process as a user runs it: the capture misses a renamed
    folder in the first session a process opens (a later session in the same process catches it)."""
    turns = [{"tool_calls": [{"tool": "run_command", "args": {"command": c}}]} for c in commands]
    script = tmp_path / "scenario.json"
    script.write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "done"}]}))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
