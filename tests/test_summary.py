"""A run's summary beside its log (issue 10 §3): ``status`` reads summaries, not logs, and never trusts one the log
contradicts.

Each status row a summary gives is compared with the row the log gives (``_status_row_of_log``, the old reading):
after a real SIGKILL (a call left waiting for a decision), a resume and a finish; and a summary made stale (a group
appended without one, a last record damaged, a log cut short, a summary torn) sends ``status`` back to the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest

import safepoint
from safepoint import report
from safepoint.engine.tools import tool
from safepoint.errors import DecisionNeeded
from safepoint.records import LogRecord
from tests.conftest import cli_env

SCENARIO = {
    "task": "t",
    "turns": [
        {"text": "writing", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]},
        {"text": "appending", "tool_calls": [{"tool": "run_command", "args": {"command": "echo once >> effect.txt"}}]},
        {"text": "done"},
    ],
}


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx: Any, n: int = 0) -> str:
    return "ok"


def _crashed(tmp_path: Path) -> Path:
    """A run killed right after its non-idempotent command ran: call_2 waits for --replay/--skip."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "s.json").write_text(json.dumps(SCENARIO))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", tmp_path / "s.json", "-w", ws, "--run-id", "r", "--json"],
        env=cli_env(SAFEPOINT_FAILPOINT="after_tool:run_command"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return ws


def _no_log_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(run_id: str) -> None:
        raise AssertionError(f"status read the log of {run_id}")

    monkeypatch.setattr(store, "read_log", refuse)


def _same_as_the_log(store: Any, run_id: str) -> safepoint.results.RunSummary:
    assert report.stored_summary(store, run_id) is not None, "the run keeps no summary"
    row = report.status_row(store, run_id)
    assert row == report._status_row_of_log(store, run_id)
    return row


def test_status_reads_the_summary_of_a_killed_run_and_says_what_its_log_says(tmp_path, monkeypatch):
    ws = _crashed(tmp_path)
    with closing(safepoint.open(workspace=str(ws))) as tm:
        row = _same_as_the_log(tm.store, "r")
        assert (row.status, row.calls) == ("waiting_decision", 2)
        with monkeypatch.context() as patch:
            _no_log_reads(tm.store, patch)
            assert [r.status for r in tm.status()] == ["waiting_decision"]
            assert tm.status("r")[0] == row
        with pytest.raises(DecisionNeeded):
            tm.resume("r")
        assert _same_as_the_log(tm.store, "r").status == "waiting_decision"
        run = tm.resume("r", skip=["call_2"])
        run.finish("completed")
        assert _same_as_the_log(tm.store, "r").status == "completed"


def test_status_over_a_store_reads_no_log(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    with closing(safepoint.open(workspace=str(ws))) as tm:
        for index in range(12):
            run = tm.start(f"task {index}", tools=[noop], run_id=f"r{index:02d}")
            for n in range(index):
                run.call("noop", {"n": n}, call_id=f"c{n}")
            if index % 3 == 0:
                run.finish("completed")
            elif index % 3 == 1:
                run.finish("failed", "it broke")
            run.close()
        expected = [report._status_row_of_log(tm.store, f"r{index:02d}") for index in range(12)]
        _no_log_reads(tm.store, monkeypatch)
        assert tm.status() == expected
        assert [r.calls for r in expected] == list(range(12))
        assert [r.status for r in expected[:3]] == ["completed", "failed", "interrupted"]


def _one_run(tmp_path: Path, **open_options: Any) -> tuple[safepoint.Safepoint, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    tm = safepoint.open(workspace=str(ws), **open_options)
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(3):
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.finish("completed")
    run.close()
    return tm, ws / ".agent-runtime" / "runs" / "r"


def test_a_group_appended_without_a_summary_makes_status_read_the_log(tmp_path):
    tm, _ = _one_run(tmp_path)
    with closing(tm):
        assert report.stored_summary(tm.store, "r") is not None
        claim = tm.store.claim("r", "another writer", takeover=True)
        end = report.load_view(tm.store, "r").last_seq
        tm.store.append(
            claim, [LogRecord(kind="event", body=msgspec.Raw(b'{"status":"failed","at":"x"}'), seq=end + 1)]
        )
        assert tm.store.read_summary("r") is None
        assert tm.status("r")[0].status == "failed"  # the log's word, not the summary's "completed"


@pytest.mark.parametrize("damage", ["flip the last record", "cut the last record", "cut a whole record", "tear"])
def test_a_log_changed_under_its_summary_is_read_instead(tmp_path, damage):
    tm, run_dir = _one_run(tmp_path)
    with closing(tm):
        log = run_dir / "ledger.jsonl"
        data = log.read_bytes()
        last = data.rfind(b"\n", 0, len(data) - 1) + 1
        stat = os.stat(log)
        if damage == "flip the last record":
            changed = data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
        elif damage == "cut the last record":
            changed = data[:-5] + b"\n"
        elif damage == "cut a whole record":
            changed = data[:last]
        else:
            changed = data + b'12345678 {"kind":'
        log.write_bytes(changed)
        if damage == "flip the last record":  # the same size and, on a coarse clock, the same time
            os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert tm.store.read_summary("r") is None
        row = tm.status("r")[0]
        assert row == report._status_row_of_log(tm.store, "r")
        if damage != "cut a whole record":
            assert row.problems == 1


def test_a_torn_or_damaged_summary_is_not_read(tmp_path):
    tm, run_dir = _one_run(tmp_path)
    with closing(tm):
        path = run_dir / "summary.json"
        good = path.read_bytes()
        for bad in (good[:-7], good.replace(b'"completed"', b'"completeD"'), good + good, b""):
            path.write_bytes(bad)
            assert tm.store.read_summary("r") is None
            assert tm.status("r")[0].status == "completed"  # from the log


def test_an_encrypted_store_seals_the_summary_to_its_place_in_the_log(tmp_path):
    key = "a1" * 32
    tm, run_dir = _one_run(tmp_path, key=key)
    with closing(tm):
        path = run_dir / "summary.json"
        older = path.read_bytes()
        assert b"completed" not in older and b"calls" not in older
        assert _same_as_the_log(tm.store, "r").status == "completed"
        # An older summary under the newer stamp: the stamp checks out, the seal does not.
        claim = tm.store.claim("r", "w", takeover=True)
        end = report.load_view(tm.store, "r").last_seq
        tm.store.append(
            claim,
            [LogRecord(kind="event", body=msgspec.Raw(b'{"status":"completed","at":"x"}'), seq=end + 1)],
            summary=b"{}",
        )
        newer = path.read_bytes().split(b"\n")
        path.write_bytes(newer[0] + b"\n" + older.split(b"\n")[1] + b"\n")
        assert tm.store.inner.read_summary("r") is not None  # framed and stamped right
        assert tm.store.read_summary("r") is None  # but sealed for another seq


def test_postgres_status_reads_summaries_and_sees_a_group_without_one(fresh_url, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    with closing(safepoint.open(fresh_url, workspace=str(ws))) as tm:
        for index in range(3):
            run = tm.start("t", tools=[noop], run_id=f"r{index}")
            for n in range(index + 2):
                run.call("noop", {"n": n}, call_id=f"c{n}")
            if index:
                run.finish("completed")
            run.close()
        expected = [report._status_row_of_log(tm.store, f"r{index}") for index in range(3)]
        with monkeypatch.context() as patch:
            _no_log_reads(tm.store, patch)
            assert tm.status() == expected
        claim = tm.store.claim("r1", "another writer", takeover=True)
        end = report.load_view(tm.store, "r1").last_seq
        failed = msgspec.Raw(b'{"status":"failed","at":"x"}')
        tm.store.append(claim, [LogRecord(kind="event", body=failed, seq=end + 1)])
        assert tm.store.read_summary("r1") is None
        assert tm.status("r1")[0].status == "failed"
