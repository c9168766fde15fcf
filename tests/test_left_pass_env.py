"""What the user passes by name (``--pass-env``) reaches every command of every run that works for them, and nothing
else does (issue 11 §1): an occurrence a daemon's worker fires (``schedule fire``), a call replayed while a run is
resumed (before, the name was set only after the replay ran), and a subagent's commands, first run or resumed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import safepoint

from .conftest import cli_env, safepoint_in_process
from .test_daemon import daemon_once, of, wait_until, write_scenario

TIMEOUT = 120
PASSED = {"DEPLOY_TOKEN": "dep-tok-1234567890"}
WITHHELD = {"BUILD_SECRET": "b" * 12, "OPENAI_API_KEY": "sk-proj-" + "W1x2Y3z4" * 4}


def _names(path: Path) -> set[str]:
    return {line.partition("=")[0] for line in path.read_text().splitlines() if "=" in line}


def _env_call(out: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": f"env > {out}"}}


def test_an_occurrence_a_daemon_fires_gets_what_the_daemon_passes(tmp_path, workspace):
    env = cli_env(**PASSED, **WITHHELD)
    sc = write_scenario(tmp_path, [{"tool_calls": [_env_call("fired.env")]}, {"text": "ok"}])
    added = safepoint_in_process("schedule", "add", "tick", sc, "--cron", "* * * * * *", "--workspace", workspace)
    assert added.returncode == 0, added.stderr
    fired: list[dict[str, Any]] = []

    def daemon_fired() -> bool:  # the first occurrence after the job's creation is at most a second away
        fired.extend(of(daemon_once(workspace, "--pass-env", "DEPLOY_TOKEN", env=env), "worker_exited"))
        return bool(fired)

    wait_until(daemon_fired, "a fired occurrence")
    assert (fired[0]["kind"], fired[0]["status"]) == ("fire", "completed"), fired
    names = _names(workspace / "fired.env")
    assert "DEPLOY_TOKEN" in names and not names & {*WITHHELD, "SAFEPOINT_STORE"}


def test_schedule_fire_passes_exactly_what_it_names(tmp_path, workspace):
    sc = write_scenario(tmp_path, [{"tool_calls": [_env_call("fire.env")]}, {"text": "ok"}])
    yearly = "0 0 1 1 *"
    assert safepoint_in_process("schedule", "add", "y", sc, "--cron", yearly, "--workspace", workspace).returncode == 0
    from safepoint.supervisor import schedule

    at = schedule.latest_occurrence(yearly, schedule.now_ms())
    done = safepoint_in_process(
        "schedule", "fire", "y", "--at", at, "--pass-env", "DEPLOY_TOKEN", "--workspace", workspace,
        env=cli_env(**PASSED, **WITHHELD),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = _names(workspace / "fire.env")
    assert "DEPLOY_TOKEN" in names and not names & set(WITHHELD)


def test_a_command_replayed_on_resume_gets_what_the_resume_passes(tmp_path, workspace):
    sc = write_scenario(tmp_path, [{"tool_calls": [_env_call("replayed.env")]}, {"text": "ok"}])
    crashed = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(sc), "--run-id", "r", "--workspace", str(workspace)],
        env=cli_env(SAFEPOINT_FAILPOINT="after_started:run_command", **PASSED, **WITHHELD),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert not (workspace / "replayed.env").exists()
    resumed = safepoint_in_process(
        "resume", "r", "--replay", "call_1", "--pass-env", "DEPLOY_TOKEN", "--workspace", workspace,
        env=cli_env(**PASSED, **WITHHELD),
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    names = _names(workspace / "replayed.env")
    assert "DEPLOY_TOKEN" in names and not names & set(WITHHELD)


def test_a_subagents_commands_get_what_its_parent_was_given(workspace, monkeypatch):
    for name, value in {**PASSED, **WITHHELD}.items():
        monkeypatch.setenv(name, value)
    child = {"task": "look", "turns": [{"tool_calls": [_env_call("child.env")]}, {"text": "seen"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "look", "tools": ["run_command"], "scenario": child}}
    script = safepoint.standins.scenario.parse_scenario(
        json.dumps({"task": "t", "turns": [{"tool_calls": [spawn]}, {"text": "done"}]}).encode()
    )
    sp = safepoint.open(workspace=str(workspace))
    try:
        with sp.start(script.task, run_id="p", model=script.model, pass_env=["DEPLOY_TOKEN"]) as run:
            assert sp.run_agent(run, safepoint.ScriptedProvider(script)) == "completed"
    finally:
        sp.close()
    names = _names(workspace / "child.env")
    assert "DEPLOY_TOKEN" in names and not names & set(WITHHELD)
