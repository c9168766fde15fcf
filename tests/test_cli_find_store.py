"""The store is found as git finds its repository (issue 13, the CLI §5): from any subfolder of the workspace, walking
up to the folder holding `.agent-runtime`; the walk stops at the home folder and at a filesystem boundary;
--workspace still wins."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import safepoint.api
from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process

WRITE = {"tool": "write_file", "args": {"path": "a.txt", "content": "x\n"}}
SCRIPT = {"task": "t", "turns": [{"tool_calls": [WRITE]}, {"text": "ok"}]}


def _cli(cwd: Path, *args: object, **env: str) -> subprocess.CompletedProcess[str]:
    """The CLI called in process from ``cwd``: what is found from the current folder is the point, not the process."""
    return safepoint_in_process(*args, env=cli_env(**env), cwd=cwd)


@pytest.fixture
def ran(tmp_path):
    ws = tmp_path / "proj"
    deep = ws / "src" / "pkg" / "deep"
    deep.mkdir(parents=True)
    (tmp_path / "s.json").write_text(json.dumps(SCRIPT))
    done = _cli(ws, "run", tmp_path / "s.json", "--run-id", "r", "-q")
    assert done.returncode == 0, done.stderr
    return ws, deep


def test_every_command_finds_the_store_from_a_subfolder(ran):
    ws, deep = ran
    status = _cli(deep, "status", "--json")
    assert status.returncode == 0 and [row["run_id"] for row in json.loads(status.stdout)] == ["r"]
    assert _cli(deep, "ledger", "r", "--json").returncode == 0
    diff = _cli(deep, "diff", "r")
    assert diff.returncode == 0 and "+++ b/a.txt" in diff.stdout
    assert not (deep / ".agent-runtime").exists() and not (ws / "src" / ".agent-runtime").exists()
    resumed = _cli(deep, "resume", "r", "-q")
    assert resumed.returncode == 0, resumed.stderr  # completed already: nothing to resume, found all the same


def test_a_run_started_in_a_subfolder_belongs_to_the_workspace_above(ran, tmp_path):
    ws, deep = ran
    done = _cli(deep, "run", tmp_path / "s.json", "--run-id", "r2", "-q")
    assert done.returncode == 0, done.stderr
    assert (ws / "a.txt").exists() and not (deep / "a.txt").exists()  # the tools act in the workspace's root
    assert sorted(r["run_id"] for r in json.loads(_cli(ws, "status", "--json").stdout)) == ["r", "r2"]


def test_workspace_still_wins(ran):
    _, deep = ran
    status = _cli(deep, "status", "-w", deep)
    assert status.returncode == 0 and status.stdout.startswith("no runs in ")
    missing = _cli(deep, "ledger", "r", "-w", deep)
    assert missing.returncode == ExitCode.NOT_FOUND and missing.stderr.count("\n") == 1


def test_the_walk_stops_at_the_home_folder(ran):
    ws, deep = ran
    home = ws / "src"  # the home folder is below the workspace: what is above it is never looked at
    status = _cli(deep, "status", HOME=str(home))
    assert status.stdout.startswith("no runs in "), status.stdout
    assert str(deep) in status.stdout
    (home / ".agent-runtime").mkdir()  # a store in the home folder itself is found
    found = _cli(deep, "status", HOME=str(home))
    assert "no runs in file:" in found.stdout and f"{home / '.agent-runtime'};" in found.stdout, found.stdout


def test_the_walk_stops_at_a_filesystem_boundary(ran, monkeypatch):
    ws, deep = ran
    real_stat = os.stat
    boundary = str(ws / "src")

    def stat(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if str(path) == str(ws) or not str(path).startswith(boundary):
            return os.stat_result((*result[:2], result.st_dev + 1, *result[3:]))  # another device above
        return result

    assert safepoint.api.find_workspace(str(deep)) == str(ws)
    monkeypatch.setattr(os, "stat", stat)
    assert safepoint.api.find_workspace(str(deep)) is None


def test_nothing_found_is_the_current_folder(tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    assert safepoint.api.find_workspace(str(alone)) in (None, str(tmp_path))  # tmp may sit under a workspace
    status = _cli(alone, "status", HOME=str(alone))
    assert status.stdout.startswith("no runs in ") and str(alone) in status.stdout
