"""Rollback after a call whose outcome a resume settled without its after-state (a real SIGKILL after the tool ran,
or at a random moment): the probe finding its effect in place, a person's ``--skip`` or ``settle --happened``, a
command whose capture the kill cut. Whatever the call created, changed, deleted or renamed is recorded as its
change from the before-state noted durably before it ran, so a rollback to the first checkpoint puts the workspace
back byte for byte; a change whose author is unknown (someone wrote the file meanwhile) is never reverted
silently: rollback lists it (``uncertain``) and leaves it, and reverts it only when asked (``include_uncertain``).

The kill is a real child (``python -m safepoint run``); resume, settle and rollback run in this process.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import safepoint

from .conftest import cli_env, safepoint_in_process

BINARY = bytes(range(256)) * 4  # not text: kept whole, compressed


def _patch(path: str, old: list[str], new: list[str]) -> str:
    head = f"--- a/{path}\n" if old else "--- /dev/null\n"
    body = "".join(f"-{line}\n" for line in old) + "".join(f"+{line}\n" for line in new)
    return f"{head}+++ b/{path}\n@@ -1,{len(old)} +1,{len(new)} @@\n{body}"


def _remove_patch(path: str, old: list[str]) -> str:
    body = "".join(f"-{line}\n" for line in old)
    return f"--- a/{path}\n+++ /dev/null\n@@ -1,{len(old)} +0,0 @@\n{body}"


CALLS: dict[str, dict[str, Any]] = {
    "write_new": {"tool": "write_file", "args": {"path": "new/made.txt", "content": "made\n"}},
    "write_over": {"tool": "write_file", "args": {"path": "notes.txt", "content": "rewritten\n"}},
    "patch_edit_delete": {
        "tool": "apply_patch",
        "args": {"patch": _patch("notes.txt", ["one", "two"], ["one", "TWO"]) + _remove_patch("gone.txt", ["bye"])},
    },
    "patch_rename": {
        "tool": "apply_patch",
        "args": {"patch": "--- a/notes.txt\n+++ b/moved/notes.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"},
    },
    "command": {
        "tool": "run_command",
        "args": {"command": "printf 'x\\000y' > made.bin && rm gone.txt && printf 'raw' > data.bin"},
    },
}


def _workspace(root: Path) -> dict[str, bytes]:
    ws = root / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\ntwo\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "data.bin").write_bytes(BINARY)
    return _contents(ws)


def _contents(ws: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and ".agent-runtime" not in p.parts
    }


def _script(root: Path, *names: str) -> Path:
    turns: list[dict[str, Any]] = [{"tool_calls": [dict(CALLS[name], call_id=name)]} for name in names]
    script = root / "scenario.json"
    script.write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "done"}]}))
    return script


def _args(root: Path) -> list[str]:
    return ["--workspace", str(root / "ws"), "--store", str(root / "store")]


def _killed_at(root: Path, point: str, *names: str) -> None:
    run = [sys.executable, "-m", "safepoint", "run", str(_script(root, *names)), "--run-id", "r", *_args(root)]
    killed = subprocess.run(
        run, env=dict(cli_env(), SAFEPOINT_FAILPOINT=point), capture_output=True, timeout=120, check=False
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]


def _resume(root: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return safepoint_in_process("resume", "r", *options, *_args(root))


def _rollback(root: Path, *, include_uncertain: bool = False) -> Any:
    tm = safepoint.open(str(root / "store"), workspace=str(root / "ws"))
    try:
        first = tm.checkpoints("r")[0].checkpoint_id
        return tm.rollback_files("r", first, include_uncertain=include_uncertain)
    finally:
        tm.close()


@pytest.mark.parametrize("call", ["write_new", "write_over", "patch_edit_delete", "patch_rename"])
def test_a_call_its_probe_settled_is_rolled_back_whole(call, tmp_path):
    """Killed after the tool ran: the probe finds the effect in place; rollback undoes it (created, rewritten,
    edited, deleted) without asking: the probe vouches that the files hold the call's result."""
    start = _workspace(tmp_path)
    _killed_at(tmp_path, "after_tool", call)
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _contents(tmp_path / "ws") != start
    plan = _rollback(tmp_path)
    assert not plan.conflicts and not plan.uncertain
    assert _contents(tmp_path / "ws") == start


def test_a_command_the_kill_cut_is_rolled_back_when_asked(tmp_path):
    """A command killed after it ran (created a binary file, deleted one, rewrote a binary one): its capture is
    recovered as the call's with its author uncertain; after a person's --skip, rollback lists those changes and
    leaves them, and puts everything back when asked."""
    start = _workspace(tmp_path)
    _killed_at(tmp_path, "after_tool", "command")
    waiting = _resume(tmp_path)
    assert waiting.returncode != 0  # a command with effects waits for a person
    assert _resume(tmp_path, "--skip", "command").returncode == 0
    changed = _contents(tmp_path / "ws")
    plan = _rollback(tmp_path)
    assert {u.path for u in plan.uncertain} == {"made.bin", "gone.txt", "data.bin"}
    assert _contents(tmp_path / "ws") == changed
    _rollback(tmp_path, include_uncertain=True)
    assert _contents(tmp_path / "ws") == start


@pytest.mark.parametrize("how", ["skip", "settle"])
def test_a_file_the_user_wrote_meanwhile_is_spared_and_listed(how, tmp_path):
    """Killed after write_file created the file; the user writes it before the resume: the probe cannot tell, a
    person decides (--skip, or `settle --happened`). The file's creation is recorded with its author uncertain:
    rollback leaves the user's bytes and says so, never silently."""
    _workspace(tmp_path)
    _killed_at(tmp_path, "after_tool", "write_new")
    made = tmp_path / "ws" / "new" / "made.txt"
    assert made.read_text() == "made\n"
    made.write_text("the user's\n")
    assert _resume(tmp_path).returncode != 0  # the probe cannot tell: a person decides
    if how == "skip":
        assert _resume(tmp_path, "--skip", "write_new").returncode == 0
    else:
        settled = safepoint_in_process("settle", "r", "write_new", "--happened", *_args(tmp_path))
        assert settled.returncode == 0, settled.stderr
        assert _resume(tmp_path).returncode == 0
    plan = _rollback(tmp_path)
    assert [u.path for u in plan.uncertain] == ["new/made.txt"]
    assert made.read_text() == "the user's\n"


@pytest.mark.parametrize("seed", [3, 29])
def test_a_kill_at_a_random_moment_leaves_every_change_reversible(seed, tmp_path):
    """SIGKILL from outside at a random moment of a run that creates, rewrites, edits, deletes and runs a command;
    resumed (a command left uncertain is skipped by a person); rollback to the first checkpoint, uncertain changes
    included, gives the workspace back byte for byte."""
    start = _workspace(tmp_path)
    script = _script(tmp_path, "write_new", "patch_edit_delete", "command", "write_over")
    run = [sys.executable, "-m", "safepoint", "run", str(script), "--run-id", "r", *_args(tmp_path)]
    process = subprocess.Popen(run, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    made = tmp_path / "ws" / "new" / "made.txt"
    while not made.exists() and process.poll() is None:  # the run exists once its first call wrote
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0, 0.8))  # where the kill lands among the later calls
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=120)
    for _ in range(3):
        resumed = _resume(tmp_path)
        if resumed.returncode == 0:
            break
        if "command" not in resumed.stdout + resumed.stderr:
            pytest.fail(resumed.stderr)
        resumed = _resume(tmp_path, "--skip", "command")
    _rollback(tmp_path, include_uncertain=True)
    assert _contents(tmp_path / "ws") == start
