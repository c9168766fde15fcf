"""The daemon's workers (issue 11 §1, §7): a worker has the store URL (by its environment), but the commands of the
run it resumes get neither it nor a credential, except those the daemon was given with ``--pass-env``; the
daemon's log never shows the store's password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import cli_env

TIMEOUT = 120.0
PASSWORD = "pg-Daemon-Planted-7741"
OPENAI = "sk-proj-" + "D4e5F6g7H8i9J0k1L2m3" * 3


def _cli(workspace: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "safepoint", *args, "--workspace", str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_resumed_runs_commands_get_only_what_the_daemon_passes(tmp_path, workspace, fresh_url):
    url = fresh_url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)
    scenario = {
        "task": "env",
        "model": "scripted-v1",
        "turns": [
            {"text": "", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
            {"text": "", "tool_calls": [{"tool": "run_command", "args": {"command": "env > env.out"}}]},
            {"text": "done"},
        ],
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    env = cli_env(SAFEPOINT_STORE=url, OPENAI_API_KEY=OPENAI, DEPLOY_TOKEN="dep-tok-1234567890", BUILD_SECRET="b" * 12)
    crash = {**env, "SAFEPOINT_FAILPOINT": "after_outcome:write_file"}
    crashed = _cli(workspace, "run", str(path), "--run-id", "r", env=crash)
    assert crashed.returncode == -9, crashed.stderr
    daemon = _cli(workspace, "daemon", "--once", "--json", "--pass-env", "DEPLOY_TOKEN", env=env)
    assert daemon.returncode == 0, daemon.stderr
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.strip()]
    assert any(e["event"] == "worker_exited" and e.get("status") == "completed" for e in events), events
    assert PASSWORD not in daemon.stdout + daemon.stderr
    names = {line.partition("=")[0] for line in (workspace / "env.out").read_text().splitlines() if "=" in line}
    assert "DEPLOY_TOKEN" in names
    assert not names & {"SAFEPOINT_STORE", "OPENAI_API_KEY", "BUILD_SECRET"}
    assert PASSWORD not in (workspace / "env.out").read_text()
