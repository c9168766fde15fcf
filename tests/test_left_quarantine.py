"""A blob fsck quarantines does not stop the run (issue 11 §5): the calls that depend on it become what they are
(uncertain; their file versions missing), the rest of the run continues, rollback of those files says why it
spares them, the recovery note says what was lost, and the evidence stays in quarantine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli_env, safepoint_in_process

LINES = "".join(f"line {i}\n" for i in range(2000))
CHANGED = LINES.replace("line 1000\n", "CHANGED\n")


def _crashed(tmp_path: Path, turns: list[dict[str, object]], point: str) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text(LINES)
    scenario = tmp_path / "sc.json"
    scenario.write_text(json.dumps({"task": "t", "turns": turns}))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(scenario), "--workspace", str(ws), "--run-id", "r"],
        env=cli_env(SAFEPOINT_FAILPOINT=point),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return ws


def _damage_blob(ws: Path, which: int) -> None:
    """Two bits of the ``which``-th blob line flipped: past what fsck mends, so it is quarantined."""
    log = ws / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    lines = log.read_bytes().split(b"\n")
    at = [i for i, line in enumerate(lines) if b'"kind":"blob"' in line][which]
    damaged = bytearray(lines[at])
    damaged[len(damaged) // 2] ^= 0x21
    damaged[len(damaged) // 2 + 7] ^= 0x10
    lines[at] = bytes(damaged)
    log.write_bytes(b"\n".join(lines))


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return safepoint_in_process(*args, "--workspace", ws, env=cli_env())


def _repair(ws: Path) -> None:
    repaired = _cli(ws, "fsck", "r", "--repair")
    assert "moved to quarantine" in repaired.stdout, repaired.stdout
    kept = list((ws / ".agent-runtime" / "runs" / "r" / "quarantine").iterdir())
    assert any(p.name.endswith(".note") for p in kept) and len(kept) >= 2  # the evidence and why it was moved


# The log's blob lines of the crashed write, in order: the history message's large argument (the new content),
# a.txt's version before the write, and the ledger input's patch against that version.
LOST = {
    0: "the arguments of write_file(call_1) in the history",
    1: "a.txt (call_1)",
    2: "the arguments of write_file(call_1)",
}


@pytest.mark.parametrize("which", [0, 1, 2], ids=["history-arguments", "before-version", "ledger-patch"])
def test_a_call_in_flight_whose_blob_was_quarantined_is_uncertain_and_the_run_goes_on(tmp_path, which):
    """The interrupted write's history arguments, its file version before it, or its logged arguments (a patch)
    went to quarantine: the resume stopped on the missing content. Now the call is uncertain and waits for a
    person; replayed, it runs from whichever copy of its arguments is whole (the history's, or the ledger's proven
    by its input hash), its before-state is taken back from the file (proven by its hash), the note says what was
    lost, and a rollback puts the file back."""
    turns = [{"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": CHANGED}}]}, {"text": "ok"}]
    ws = _crashed(tmp_path, turns, "after_started:write_file")
    _damage_blob(ws, which)
    _repair(ws)
    if which == 0:
        # The ledger's copy is whole (its patch and base), so the probe looks and proves the write did not land:
        # it runs again by itself, from that copy (proven by its input hash), never from the note.
        resumed = _cli(ws, "resume", "r")
    else:
        asked = _cli(ws, "resume", "r")
        assert asked.returncode == 3, asked.stderr
        assert "waits for a decision on write_file(call_1)" in asked.stderr and "Traceback" not in asked.stderr
        resumed = _cli(ws, "resume", "r", "--replay", "call_1")
    assert resumed.returncode == 0, resumed.stderr
    said = " ".join(resumed.stdout.replace("│", " ").split())
    assert f"the store no longer has content those records kept: {LOST[which]}" in said, said
    assert (ws / "a.txt").read_text() == CHANGED
    first = json.loads(_cli(ws, "checkpoints", "r", "--json").stdout)[0]["checkpoint_id"]
    assert _cli(ws, "rollback", "r", "--to", first).returncode == 0
    assert (ws / "a.txt").read_text() == LINES


def test_a_finished_calls_lost_file_version_is_spared_by_rollback_and_said_so(tmp_path):
    """The file version before a finished write is gone: the run resumes and completes; rollback reverts what it
    can (b.txt) and leaves a.txt, saying its version was recorded and lost (not "never captured")."""
    turns = [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "agent a\n"}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "b.txt", "content": "agent b\n"}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "true"}}]},
        {"text": "done"},
    ]
    ws = _crashed(tmp_path, turns, "after_started:run_command")
    _damage_blob(ws, 0)  # a.txt's content before the agent's write (small arguments: no blob of their own)
    _repair(ws)
    resumed = _cli(ws, "resume", "r")
    assert resumed.returncode == 0, resumed.stderr
    said = " ".join(resumed.stdout.replace("│", " ").split())
    assert "the store no longer has content those records kept: a.txt (call_1)" in said, said
    first = json.loads(_cli(ws, "checkpoints", "r", "--json").stdout)[0]["checkpoint_id"]
    rolled = _cli(ws, "rollback", "r", "--to", first, "--json")
    assert rolled.returncode == 0, rolled.stderr
    plan = json.loads(rolled.stdout)
    assert [a["path"] for a in plan["actions"]] == ["b.txt"] and not (ws / "b.txt").exists()
    [spared] = plan["unrestorable"]
    assert spared["path"] == "a.txt" and "the store no longer has it" in spared["why"], spared
    assert (ws / "a.txt").read_text() == "agent a\n"
