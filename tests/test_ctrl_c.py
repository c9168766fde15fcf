"""Ctrl-C is a clean stop, like SIGTERM (issue 9 §4): a message, exit 11, the running command stopped (its whole
process group), the call settled, the restart checkpoint kept, and ``resume`` continues the run.

Each case is a real ``safepoint run`` child and a real SIGINT while its command (a ``sleep`` with an argument no
other process has) runs; the sleep's absence is checked in /proc.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from safepoint.errors import ExitCode
from tests.conftest import cli_env, safepoint_in_process, wait_for


def _alive(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def _stderr_file(tmp_path: Path) -> int:
    return os.open(tmp_path / "stderr.txt", os.O_WRONLY | os.O_CREAT, 0o600)


def _start(tmp_path: Path, command: str) -> tuple[subprocess.Popen[str], Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    scenario = {
        "task": "t",
        "turns": [
            {
                "text": "working",
                "tool_calls": [
                    {"tool": "run_command", "args": {"command": command}},
                    {"tool": "write_file", "args": {"path": "second.txt", "content": "2"}},
                ],
            },
            {"text": "done"},
        ],
    }
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    stderr = _stderr_file(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "safepoint", "run", str(tmp_path / "s.json"), "-w", str(ws), "--run-id", "r"],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=stderr,  # a file: a test may read it while the run goes on
        start_new_session=True,  # its own group, like a terminal's foreground job: Ctrl-C may go to all of it
        text=True,
    )
    os.close(stderr)
    wait_for(lambda: (ws / "started.txt").exists() or process.poll() is not None, "the command to start", 60)
    assert process.poll() is None, process.communicate()
    return process, ws


def _check_stopped(process: subprocess.Popen[str], ws: Path, marker: str) -> str:
    out, _ = process.communicate(timeout=60)
    err = (ws.parent / "stderr.txt").read_text()
    assert process.returncode == ExitCode.INTERRUPTED, (process.returncode, out, err)
    assert "Traceback" not in err and "`safepoint resume r` continues it" in err, err
    wait_for(lambda: not _alive(marker), "the interrupted command's processes to be gone", 30)
    assert not (ws / "after.txt").exists() and not (ws / "second.txt").exists()
    ledger = json.loads(safepoint_in_process("ledger", "r", "-w", ws, "--json").stdout)
    assert [(row["call_id"], row["status"]) for row in ledger] == [("call_1", "failed")], ledger
    assert (ws / ".agent-runtime" / "runs" / "r" / "restart_checkpoint.json").exists(), "restart checkpoint lost"
    status = json.loads(safepoint_in_process("status", "r", "-w", ws, "--json").stdout)
    assert status["status"] == "interrupted", status
    resumed = safepoint_in_process("resume", "r", "-w", ws)
    assert resumed.returncode == ExitCode.OK, resumed.stderr
    assert (ws / "second.txt").read_text() == "2" and not (ws / "after.txt").exists()
    history = json.loads(safepoint_in_process("history", "r", "-w", ws, "--json").stdout)
    note = next(m["content"] for m in history if m.get("name") == "recovery_note")
    assert "stopped on purpose (Ctrl-C" in note, note
    return err


@pytest.mark.parametrize("to_group", [False, True], ids=["process", "terminal"])
def test_ctrl_c_stops_the_command_and_the_run_resumes(tmp_path, to_group):
    """A terminal sends Ctrl-C to the whole foreground group, not only to the agent: the same clean stop."""
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    process, ws = _start(tmp_path, f"echo started > started.txt; sleep {marker}; echo finished >> after.txt")
    if to_group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    err = _check_stopped(process, ws, marker)
    assert "Ctrl-C: stopping at the next safe point" in err


def test_a_second_ctrl_c_kills_a_command_that_ignores_the_first(tmp_path):
    marker = f"{random.randint(100, 999)}.{random.randint(1000, 9999)}"
    command = f"trap '' INT; echo started > started.txt; sleep {marker}; echo finished >> after.txt"
    process, ws = _start(tmp_path, command)
    process.send_signal(signal.SIGINT)
    said = tmp_path / "stderr.txt"
    wait_for(lambda: "press it again" in said.read_text(), "the first Ctrl-C to be taken")
    assert _alive(marker), "the command should ignore the first Ctrl-C"
    process.send_signal(signal.SIGINT)
    err = _check_stopped(process, ws, marker)
    assert "Ctrl-C again: commands killed" in err


def test_an_own_loop_stops_at_its_next_call(tmp_path):
    """``stop_at_safe_point_on_sigterm`` in an own loop: after Ctrl-C, no call starts; the run resumes later."""

    import safepoint
    from safepoint.api import stop_at_safe_point_on_sigterm
    from safepoint.engine import shutdown
    from safepoint.errors import Interrupted

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    sp = safepoint.open(workspace=str(tmp_path))
    try:
        stop_at_safe_point_on_sigterm()
        with sp.start("t", run_id="own") as run:
            assert run.call("write_file", {"path": "one.txt", "content": "1"}, call_id="c1") is not None
            os.kill(os.getpid(), signal.SIGINT)  # handled: a stop request, not KeyboardInterrupt
            assert shutdown.requested() and shutdown.why() == "Ctrl-C"
            with pytest.raises(Interrupted, match="Ctrl-C: stopped before calling write_file"):
                run.call("write_file", {"path": "two.txt", "content": "2"}, call_id="c2")
        shutdown.reset()
        with sp.resume("own") as run:
            run.call("write_file", {"path": "two.txt", "content": "2"}, call_id="c2")
    finally:
        shutdown.reset()
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sp.close()
    assert (tmp_path / "two.txt").read_text() == "2"
    assert [row.call_id for row in sp.ledger("own")] == ["c1", "c2"]
