"""Earlier fixes, held through a whole run (issue 9 §2, §3): a ``write_file`` path no filesystem takes is a tool
failure, never a traceback, also when a crash left the call started; ``apply_patch`` with a zero-context hunk
edits only the line it states, never the nearest identical one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from safepoint.errors import ExitCode
from tests.conftest import cli_env, safepoint_in_process

LONG_PATHS = ["a" * 300, "dir/" + "b" * 256 + "/f.txt", "é" * 128 + ".txt"]


def _run(tmp_path: Path, turns: list[dict[str, Any]], **env: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": turns}))
    if not env:
        return ws, safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r")
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", tmp_path / "s.json", "-w", ws, "--run-id", "r"],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return ws, done


def _said(ws: Path) -> dict[str, str]:
    history = json.loads(safepoint_in_process("history", "r", "-w", ws, "--json").stdout)
    return {m["tool_call_id"]: m["content"] for m in history if m["role"] == "tool"}


def _statuses(ws: Path) -> dict[str, str]:
    rows = json.loads(safepoint_in_process("ledger", "r", "-w", ws, "--json").stdout)
    return {row["call_id"]: row["status"] for row in rows}


def test_a_write_file_path_over_255_bytes_is_a_tool_failure(tmp_path):
    calls = [{"tool": "write_file", "args": {"path": path, "content": "x"}} for path in LONG_PATHS]
    ws, done = _run(tmp_path, [{"text": "writing", "tool_calls": calls}, {"text": "done"}])
    assert done.returncode == ExitCode.OK and "Traceback" not in done.stderr, done.stderr
    said = _said(ws)
    for index in range(1, len(LONG_PATHS) + 1):
        assert "bytes, over the 255 a file name may have" in said[f"call_{index}"], said
        assert "\n" not in said[f"call_{index}"]
    assert set(_statuses(ws).values()) == {"failed"}
    assert sorted(p.name for p in ws.iterdir()) == [".agent-runtime"]


@pytest.mark.parametrize("point", ["after_started", "after_tool"])
def test_a_crash_during_a_write_to_a_too_long_path_resumes_without_a_traceback(tmp_path, point):
    calls = [{"tool": "write_file", "args": {"path": LONG_PATHS[0], "content": "x"}}]
    ws, crashed = _run(
        tmp_path,
        [{"text": "writing", "tool_calls": calls}, {"text": "done"}],
        SAFEPOINT_FAILPOINT=f"{point}:write_file",
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    # The probe knows a path the workspace refuses was never written: the call is re-run (and fails again, in one
    # line) without asking anyone.
    done = safepoint_in_process("resume", "r", "-w", ws)
    assert "Traceback" not in done.stderr and done.returncode == ExitCode.OK, done.stderr
    assert _statuses(ws)["call_1"] == "failed"
    assert "bytes, over the 255 a file name may have" in _said(ws)["call_1"]
    again = safepoint_in_process("resume", "r", "-w", ws)
    assert again.returncode == ExitCode.OK and "nothing to resume" in again.stdout
    assert sorted(p.name for p in ws.iterdir()) == [".agent-runtime"]


def test_apply_patch_with_a_zero_context_hunk_edits_only_the_stated_line(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.py").write_text("x = 1\nkeep\nx = 1\n")
    second = "--- a/f.py\n+++ b/f.py\n@@ -3 +3 @@\n-x = 1\n+x = 2\n"  # `diff -U0` of a change to line 3
    off_by_one = "--- a/f.py\n+++ b/f.py\n@@ -2 +2 @@\n-keep\n+KEEP\n-x = 1\n"  # line 2 is `keep`, not `x = 1`
    wrong_line = "--- a/f.py\n+++ b/f.py\n@@ -2 +2 @@\n-x = 1\n+x = 3\n"  # stated at line 2, where it is not
    calls = [{"tool": "apply_patch", "args": {"patch": p}} for p in (second, wrong_line, off_by_one)]
    ws, done = _run(tmp_path, [{"text": "patching", "tool_calls": calls}, {"text": "done"}])
    assert done.returncode == ExitCode.OK, done.stderr
    assert (ws / "f.py").read_text() == "x = 1\nkeep\nx = 2\n", "the patch edited another line than it states"
    statuses = _statuses(ws)
    assert statuses == {"call_1": "succeeded", "call_2": "failed", "call_3": "failed"}, (statuses, _said(ws))
