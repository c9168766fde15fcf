"""A command killed (a real SIGKILL) and run again: each file change is recorded once, with the right author.

The killed attempt's changes are recovered from its capture's journal as the call's, author uncertain (nothing
tells them from the user's in a window nobody watched); the re-run's are its own. When the re-run is killed too,
its changes are recovered as well, not learnt as the user's because an earlier attempt's were recovered already
(that left the re-run's edit out of every rollback: the file's chain had a gap, so rollback called it the user's
and left it). Rollback gives the checkpoint's bytes back exactly; a file the user edits afterwards is spared.

The kills are real children (``python -m safepoint``); the last resume, diff and rollback run in this process.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

import safepoint

from .conftest import cli_env, safepoint_in_process

BINARY = bytes(range(256)) * 4
# Edits (appends: a re-run changes the file again), creates a binary file, deletes one, rewrites a binary one.
COMMAND = "printf 'three\\n' >> notes.txt && printf 'x\\000y' > made.bin && rm -f gone.txt && printf raw > data.bin"


def _start(root: Path) -> dict[str, bytes]:
    ws = root / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\ntwo\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "data.bin").write_bytes(BINARY)
    git = ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)
    return _contents(ws)


def _contents(ws: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and ".agent-runtime" not in p.parts and ".git" not in p.parts
    }


def _args(root: Path) -> list[str]:
    return ["--workspace", str(root / "ws"), "--store", str(root / "store")]


def _killed(root: Path, *argv: str, point: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", *argv, *_args(root)],
        env=cli_env(SAFEPOINT_FAILPOINT=point),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def _run_killed(root: Path) -> None:
    script = root / "scenario.json"
    turns = [{"tool_calls": [{"tool": "run_command", "args": {"command": COMMAND}, "call_id": "c1"}]}, {"text": "ok"}]
    script.write_text(json.dumps({"task": "t", "turns": turns}))
    _killed(root, "run", str(script), "--run-id", "r", point="after_tool:run_command")


def _patches(root: Path) -> list[dict[str, Any]]:
    tm = safepoint.open(str(root / "store"), workspace=str(root / "ws"))
    try:
        return [msgspec.json.decode(bytes(r.body)) for r in tm.store.read_log("r").records if r.kind == "patch"]
    finally:
        tm.close()


def _recorded_once(patches: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per path, the call's changes: none twice, each from where the one before left the file (no gap)."""
    chains: dict[str, list[dict[str, Any]]] = {}
    for patch in patches:
        if patch["after_hash"] or patch.get("op") == "delete":
            chains.setdefault(patch["path"], []).append(patch)
    for path, chain in chains.items():
        steps = [(p["before_hash"], p["after_hash"]) for p in chain]
        assert len(set(steps)) == len(steps), (path, steps)  # a change recorded twice
        for previous, patch in itertools.pairwise(chain):
            assert patch["before_hash"] == previous["after_hash"], (path, steps)  # a change recorded by nobody
    return chains


def _rollback(root: Path, *, include_uncertain: bool) -> Any:
    tm = safepoint.open(str(root / "store"), workspace=str(root / "ws"))
    try:
        first = tm.checkpoints("r")[0].checkpoint_id
        return tm.rollback_files("r", first, include_uncertain=include_uncertain)
    finally:
        tm.close()


def test_a_rerun_after_a_kill_records_each_change_once_with_its_author(tmp_path):
    """Killed after the command ran, run again by a person's --replay: the killed attempt's changes are the call's,
    author uncertain; the re-run's second append is its own; nothing twice. `diff` shows both appends; rollback
    gives the checkpoint's bytes back, except a file the user edited afterwards, spared and listed."""
    start = _start(tmp_path)
    _run_killed(tmp_path)
    resumed = safepoint_in_process("resume", "r", "--replay", "c1", *_args(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    chains = _recorded_once(_patches(tmp_path))
    assert set(chains) == {"notes.txt", "made.bin", "gone.txt", "data.bin"}
    killed = [p for chain in chains.values() for p in chain if p.get("author_uncertain")]
    own = [p for chain in chains.values() for p in chain if not p.get("author_uncertain")]
    assert sorted(p["path"] for p in killed) == ["data.bin", "gone.txt", "made.bin", "notes.txt"]
    assert [p["path"] for p in own] == ["notes.txt"]  # the re-run changed only what the first attempt left
    shown = safepoint_in_process("diff", "r", *_args(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("+three") == 2, shown.stdout
    ws = tmp_path / "ws"
    (ws / "made.bin").write_bytes(b"the user's\n")  # after the run: the user's, not the call's
    plan = _rollback(tmp_path, include_uncertain=True)
    assert [c.path for c in plan.conflicts] == ["made.bin"]
    assert _contents(ws) == {**start, "made.bin": b"the user's\n"}


def test_a_rerun_killed_too_keeps_its_changes_the_calls(tmp_path):
    """The re-run is killed too (after its command ran): its changes are recovered as the call's, author uncertain
    (they were learnt as the user's, because the first attempt's had been recovered). A third attempt completes;
    each change is recorded once and rollback gives the checkpoint's bytes back exactly."""
    start = _start(tmp_path)
    _run_killed(tmp_path)
    _killed(tmp_path, "resume", "r", "--replay", "c1", point="after_tool:run_command")
    resumed = safepoint_in_process("resume", "r", "--replay", "c1", *_args(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "ws" / "notes.txt").read_text() == "one\ntwo\nthree\nthree\nthree\n"
    chains = _recorded_once(_patches(tmp_path))
    notes = [bool(p.get("author_uncertain")) for p in chains["notes.txt"]]
    assert notes == [True, True, False], chains["notes.txt"]  # two killed attempts, then the run that reported
    plan = _rollback(tmp_path, include_uncertain=True)
    assert not plan.conflicts, plan.conflicts
    assert _contents(tmp_path / "ws") == start


WRITER = """
import os

import safepoint


@safepoint.tool(idempotency="idempotent", replay_policy="auto", writes=lambda args: [args["path"], "made.txt"])
def stamp(ctx, path: str, text: str) -> str:
    with open(os.path.join(ctx.workspace.root, path), "w") as handle:
        handle.write(text)
    with open(os.path.join(ctx.workspace.root, "made.txt"), "w") as handle:
        handle.write("made\\n")
    return "stamped"
"""


def test_a_writer_rerun_killed_twice_records_its_change_once(tmp_path, monkeypatch):
    """A file writer with no probe (its policy re-runs it) is killed after it wrote, twice: the first re-run finds
    the attempt's bytes and records them as the call's, author uncertain; the second re-run found the same bytes
    and recorded that change again, from the first attempt's note, as certain. Now once, uncertain; the last run's
    own writes change nothing; rollback gives the checkpoint's bytes back."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("one\n")
    (tmp_path / "rtools.py").write_text(WRITER)
    turns = [
        {"tool_calls": [{"tool": "stamp", "args": {"path": "notes.txt", "text": "two\n"}, "call_id": "c1"}]},
        {"text": "ok"},
    ]
    (tmp_path / "scenario.json").write_text(json.dumps({"task": "t", "turns": turns}))
    args = [*_args(tmp_path), "--tools", "rtools:stamp"]
    for argv in (["run", "scenario.json", "--run-id", "r"], ["resume", "r"]):
        done = subprocess.run(
            [sys.executable, "-m", "safepoint", *argv, *args],
            cwd=tmp_path,
            env=cli_env(SAFEPOINT_FAILPOINT="after_tool:stamp"),
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    resumed = safepoint_in_process("resume", "r", *args)
    assert resumed.returncode == 0, resumed.stderr
    chains = _recorded_once(_patches(tmp_path))
    assert {path: [bool(p.get("author_uncertain")) for p in chain] for path, chain in chains.items()} == {
        "notes.txt": [True],
        "made.txt": [True],
    }
    plan = _rollback(tmp_path, include_uncertain=True)
    assert not plan.conflicts, plan.conflicts
    assert _contents(ws) == {"notes.txt": b"one\n"}
