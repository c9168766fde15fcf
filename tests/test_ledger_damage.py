"""A damaged log never makes a call that ran look as if it never started (issue 9 §3).

A run is killed (SIGKILL, a real child process) right after its non-idempotent call ran and before its outcome
was recorded. Its log is then cut at every record boundary and in the middle of every record, as a full disk, a
restored backup or a careless hand would leave it, and resumed. Whatever the cut, the call's effect is counted:
it happens once. A resume either closes the run (the turn that asked for the call is gone), waits for a person
(``--skip`` then finishes it without the call), or reports the call uncertain; never runs it again on its own.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from safepoint.core.doubt import Witnesses, find_doubt
from safepoint.core.run_view import build_view
from safepoint.errors import ExitCode
from safepoint.records import RECORD_KINDS, LogRead, LogRecord, Message, RunInfo, ToolCall, ToolLedgerEntry
from tests.conftest import cli_env, safepoint_in_process

RUN = "r"


def _scenario(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": "t",
        "turns": [
            {"text": "writing", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]},
            {"text": "the call", "tool_calls": [call]},
            {"text": "done"},
        ],
    }


APPEND = {"tool": "run_command", "args": {"command": "echo once >> effect.txt"}}  # non_idempotent, ask
NOTIFY = {"tool": "send_notification", "args": {"to": "#dev", "message": "hi"}}  # non_idempotent, never


def _effects(base: Path, tool: str) -> int:
    if tool == "run_command":
        path = base / "ws" / "effect.txt"
        return path.read_text().count("once") if path.exists() else 0
    path = base / "outbox.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _killed_run(base: Path, call: dict[str, Any]) -> Path:
    (base / "ws").mkdir(parents=True)
    (base / "s.json").write_text(json.dumps(_scenario(call)))
    env = cli_env(SAFEPOINT_FAILPOINT=f"after_tool:{call['tool']}", SAFEPOINT_OUTBOX=str(base / "outbox.jsonl"))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", base / "s.json", "-w", base / "ws", "--run-id", RUN, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert _effects(base, call["tool"]) == 1
    return base / "ws" / ".agent-runtime" / "runs" / RUN / "ledger.jsonl"


def _cuts(data: bytes) -> list[int]:
    bounds = [0] + [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    middles = [(a + b) // 2 for a, b in itertools.pairwise(bounds)]
    return sorted({*bounds, *middles})


@pytest.mark.parametrize("call", [APPEND, NOTIFY], ids=["run_command", "send_notification"])
def test_a_cut_log_never_reruns_a_call_that_must_not_repeat(tmp_path, call):
    original = tmp_path / "original"
    log = _killed_run(original, call)
    data = log.read_bytes()
    outcomes: dict[int, int] = {}
    for cut in _cuts(data):
        base = tmp_path / f"cut{cut}"
        shutil.copytree(original, base)
        (base / log.relative_to(original)).write_bytes(data[:cut])
        env = cli_env(SAFEPOINT_OUTBOX=str(base / "outbox.jsonl"))
        done = safepoint_in_process("resume", RUN, "-w", base / "ws", env=env)
        outcomes[cut] = done.returncode
        assert _effects(base, call["tool"]) == 1, f"cut at byte {cut} of {len(data)}: ran again ({done.stdout})"
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode == ExitCode.CLOSED:
            assert "missing_conversation" in done.stderr, done.stderr
            continue
        if done.returncode == ExitCode.WAITING_DECISION:
            done = safepoint_in_process("resume", RUN, "-w", base / "ws", "--skip", "call_2", env=env)
        assert done.returncode == ExitCode.OK, (cut, done.stdout, done.stderr)
        assert _effects(base, call["tool"]) == 1, f"cut at byte {cut}: ran again after --skip"
        ledger = json.loads(safepoint_in_process("ledger", RUN, "-w", base / "ws", "--json", env=env).stdout)
        assert {row["call_id"]: row["status"] for row in ledger}["call_2"] == "uncertain"
    # Every kind of answer was met: the cut log closed some runs, kept others for a person or reported the call.
    assert ExitCode.CLOSED in outcomes.values()
    assert set(outcomes.values()) - {ExitCode.CLOSED}


def test_the_recovery_note_says_the_log_was_damaged(tmp_path):
    original = tmp_path / "original"
    log = _killed_run(original, APPEND)
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    # the first message naming call_2 is the model's turn asking for it (its result comes after)
    assistant = next(i for i, line in enumerate(lines) if b'"call_2"' in line and b'"kind":"message"' in line)
    log.write_bytes(b"".join(lines[: assistant + 1]))  # the turn is kept, every record of its call is cut off
    before = json.loads(safepoint_in_process("explain", RUN, "-w", original / "ws", "--json").stdout)
    assert any("cut off its end" in p["detail"] for p in before["problems"]), before["problems"]
    assert [c["status"] for c in before["calls"] if c["call_id"] == "call_2"] == ["uncertain"], before["calls"]
    waiting = safepoint_in_process("resume", RUN, "-w", original / "ws")
    assert waiting.returncode == ExitCode.WAITING_DECISION, waiting.stderr
    assert "run_command(call_2)" in waiting.stderr
    explained = json.loads(safepoint_in_process("explain", RUN, "-w", original / "ws", "--json").stdout)
    call = next(c for c in explained["calls"] if c["call_id"] == "call_2")
    assert (call["status"], call["action"]) == ("uncertain", "wait_decision"), call
    done = safepoint_in_process("resume", RUN, "-w", original / "ws", "--skip", "call_2")
    assert done.returncode == ExitCode.OK, done.stderr
    history = json.loads(safepoint_in_process("history", RUN, "-w", original / "ws", "--json").stdout)
    note = next(m["content"] for m in history if m.get("name") == "recovery_note")
    assert "log was damaged" in note and "run_command(call_2)" in note, note
    assert _effects(original, "run_command") == 1


# the rule itself, without a disk ---------------------------------------------------------------------------------
def _record(seq: int, body: Any) -> LogRecord:
    return LogRecord(kind=RECORD_KINDS[type(body)], body=msgspec.Raw(msgspec.json.encode(body)), seq=seq, gen=1)


CALL = ToolCall(call_id="c1", tool="run_command", args={"command": "rm -rf build"})


def _planned(status: str = "planned") -> ToolLedgerEntry:
    return ToolLedgerEntry(
        call_id="c1",
        step_id="step_1",
        tool_name="run_command",
        input_hash="h",
        status=status,  # type: ignore[arg-type]  # a LedgerStatus, given as text by the cases
        risk_level="medium",
        idempotency="non_idempotent",
        replay_policy="ask",
    )


def _view(*bodies: Any, skip: frozenset[int] = frozenset()) -> Any:
    info = RunInfo(run_id="r", task="t", model="m", created_at="", workspace="")
    records = [_record(seq, body) for seq, body in enumerate(bodies, 1) if seq not in skip]
    return build_view(info, LogRead(records=records, problems=[]))


ASKED = Message(seq=0, role="assistant", content="", tool_calls=(CALL,))


def test_an_ordinary_crash_before_started_is_not_doubt():
    """The restart checkpoint names the call, the log holds only its turn (or nothing): nothing was lost, the
    call never started, and it runs normally."""
    for bodies in [(), (ASKED,), (ASKED, _planned())]:
        doubt = find_doubt(_view(*bodies), Witnesses(log_mark=len(bodies), pending=("c1",)))
        assert not doubt.damaged and not doubt.calls and not doubt.lost, bodies


@pytest.mark.parametrize(
    ("bodies", "witnesses", "skip"),
    [
        ((ASKED,), Witnesses(log_mark=4), frozenset()),  # records after the turn were cut off the end
        ((ASKED, _planned()), Witnesses(log_mark=3), frozenset()),  # `started` cut off
        ((ASKED, _planned()), Witnesses(traced=frozenset({"c1"})), frozenset()),  # the trace saw it run
        (
            (ASKED, _planned(), _planned("started"), Message(seq=1, role="user", content="go on")),
            Witnesses(),
            frozenset({3}),
        ),  # a hole after it
    ],
)
def test_a_call_behind_a_damaged_log_is_in_doubt(bodies, witnesses, skip):
    doubt = find_doubt(_view(*bodies, skip=skip), witnesses)
    assert doubt.damaged and "c1" in doubt.calls, doubt


def test_a_pending_call_lost_with_its_turn_is_lost_not_runnable():
    doubt = find_doubt(_view(), Witnesses(log_mark=3, pending=("c1",)))
    assert doubt.lost == ("c1",) and not doubt.calls


def test_an_approval_of_a_call_the_ledger_lost_is_damage():
    doubt = find_doubt(_view(ASKED), Witnesses(approved=frozenset({"c1"})))
    assert doubt.damaged and "c1" in doubt.calls
