"""A resume reads its run's log once (issue 10 §3: it read and checksummed it three times, judging, opening and
repairing its tail), and reads it again when the log's end moved between that reading and its claim."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import pytest

import safepoint
from safepoint.engine.tools import tool


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx: Any, n: int = 0) -> str:
    return "ok"


def _left_open(tmp_path: Any) -> safepoint.Safepoint:
    ws = tmp_path / "ws"
    ws.mkdir()
    tm = safepoint.open(workspace=str(ws))
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(20):
        if n % 5 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.close()  # as a crash leaves it: no finish
    return tm


def _counting_reads(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = store.read_log

    def counted(run_id: str) -> Any:
        reads.append(run_id)
        return real(run_id)

    monkeypatch.setattr(store, "read_log", counted)
    return reads


def test_a_resume_reads_the_log_once(tmp_path, monkeypatch):
    tm = _left_open(tmp_path)
    with closing(tm):
        reads = _counting_reads(tm.store, monkeypatch)
        run = tm.resume("r", tools=[noop])
        assert reads == ["r"]
        assert run.call("noop", {"n": 99}, call_id="after") == "ok"
        run.finish("completed")
        assert tm.status("r")[0].calls == 21


def test_a_log_that_moved_before_the_claim_is_read_again(tmp_path, monkeypatch):
    tm = _left_open(tmp_path)
    with closing(tm):
        reads = _counting_reads(tm.store, monkeypatch)
        monkeypatch.setattr(tm.store, "read_summary", lambda run_id: None)  # the end cannot be vouched for
        run = tm.resume("r", tools=[noop])
        assert reads == ["r", "r"]
        run.finish("completed")
        assert tm.status("r")[0].status == "completed"
