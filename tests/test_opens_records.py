"""A call's later ledger states are logged as what changed (issue 10 §5: each repeated the whole entry), read back
as the whole entries they were; logs written with whole entries still read the same."""

from __future__ import annotations

import os
from contextlib import closing
from typing import Any

import msgspec
import pytest

import safepoint
from safepoint.core.ledger import apply_change, change_of
from safepoint.core.run_view import build_view
from safepoint.engine.tools import tool
from safepoint.records import LogRead, LogRecord, RunInfo, ToolLedgerEntry

BASE = ToolLedgerEntry(
    call_id="c1",
    step_id="step_1",
    tool_name="deploy",
    input_hash="h",
    status="planned",
    risk_level="high",
    idempotency="non_idempotent",
    replay_policy="ask",
    side_effects=("network",),
    run_id="r",
    input={"to": "prod"},
    idempotency_key="k",
    planned_at="t0",
)


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx: Any, n: int = 0) -> str:
    return "ok"


@pytest.mark.parametrize(
    "new",
    [
        msgspec.structs.replace(BASE, status="started", started_at="t1"),
        msgspec.structs.replace(BASE, status="failed", finished_at="t2", error="boom", result_ref=None),
        msgspec.structs.replace(BASE, status="uncertain", decision="skip", decision_reason="a person"),
        msgspec.structs.replace(BASE, status="started", side_effects=(), risk_level="low", compensates="c0"),
    ],
)
def test_a_change_applied_to_its_previous_state_is_the_new_state(new):
    for previous in (BASE, msgspec.structs.replace(BASE, error="old", decision="probe", result_encoding="json")):
        target = msgspec.structs.replace(new, error=None) if previous.error and not new.error else new
        change = change_of(previous, target)
        assert apply_change(previous, change) == msgspec.structs.replace(target, input={})
        again = msgspec.json.decode(msgspec.json.encode(change), type=type(change))
        assert apply_change(previous, again) == msgspec.structs.replace(target, input={})


def _kinds(tm: safepoint.Safepoint, run_id: str) -> list[str]:
    return [r.kind for r in tm.store.read_log(run_id).records]


def test_later_states_are_changes_and_read_back_whole(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    with closing(safepoint.open(workspace=str(ws))) as tm:
        run = tm.start("t", tools=[noop], run_id="r")
        for n in range(20):
            run.call("noop", {"n": n}, call_id=f"c{n}")
        live = dict(run.session.calls.entries)
        run.close()
        kinds = _kinds(tm, "r")
        assert kinds.count("ledger") == 20 and kinds.count("ledger_change") == 40
        assert {e.call_id: e for e in tm.ledger("r")} == live
        changes = [r for r in tm.store.read_log("r").records if r.kind == "ledger_change"]
        assert all(b'"input"' not in bytes(r.body) and b'"tool_name"' not in bytes(r.body) for r in changes)
        log = os.path.join(tm.store.local_dir() or "", "runs", "r", "ledger.jsonl")
        per_call = os.path.getsize(log) / 20
        assert per_call < 1800, per_call  # 2,070 bytes with whole entries (bench/opens.py before this change)


def test_a_log_of_whole_entries_reads_as_before(tmp_path):
    info = RunInfo(run_id="r", task="t", model="m", created_at="t0", workspace=str(tmp_path))
    states = [BASE, msgspec.structs.replace(BASE, status="started", started_at="t1", input={})]
    records = [
        LogRecord(kind="ledger", body=msgspec.Raw(msgspec.json.encode(state)), seq=seq)
        for seq, state in enumerate(states, 1)
    ]
    view = build_view(info, LogRead(records=records, problems=[]))
    assert view.ledger_entries == states and view.ledger["c1"].input == {"to": "prod"} and not view.problems


def test_a_change_without_its_first_state_is_damage(tmp_path):
    info = RunInfo(run_id="r", task="t", model="m", created_at="t0", workspace=str(tmp_path))
    change = change_of(BASE, msgspec.structs.replace(BASE, status="started", started_at="t1"))
    records = [LogRecord(kind="ledger_change", body=msgspec.Raw(msgspec.json.encode(change)), seq=1)]
    view = build_view(info, LogRead(records=records, problems=[]))
    assert not view.ledger_entries and [p.kind for p in view.problems] == ["corrupt"] and view.lost_seqs == [(1, 1)]
