"""core.trace_events, the trace's vocabulary: one table of events and fields that every producer keeps to."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from safepoint.core.trace_events import (
    EVENTS,
    FAMILIES,
    TraceEvent,
    check,
    key_fields,
    parse_since,
    recovery_events,
    select,
)
from safepoint.errors import ConfigError, UnknownReferenceError
from safepoint.protocol import RECOVERY_FAILURE_REASONS, RecoveryReport, ReplayForbidden, Resumable

SRC = Path(__file__).resolve().parent.parent / "src" / "safepoint"


def _producers() -> list[tuple[str, str, list[str]]]:
    """Every ``X.trace("name", field=...)`` call in the source: (where, name, fields). The store's own
    ``trace(run_id, lines)`` takes lines already made (its conformance suite writes test lines)."""
    found = []
    for path in sorted(p for p in SRC.rglob("*.py") if p.parent.name not in ("store", "conformance")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("trace", "_trace", "_records_trace")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                where = f"{path.relative_to(SRC)}:{node.lineno}"
                found.append((where, node.args[0].value, [k.arg for k in node.keywords if k.arg is not None]))
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[1], ast.Dict):
                name, fields = node.elts
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value in EVENTS:
                    keys = [k.value for k in fields.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                    found.append((f"{path.relative_to(SRC)}:{node.lineno}", name.value, keys))
    return found


def test_every_producer_in_the_source_uses_the_vocabulary():
    producers = _producers()
    assert len(producers) > 40  # the check sees the producers (a parse that finds none would pass anything)
    wrong = [
        f"{where}: {name} {sorted(set(fields) - EVENTS[name].fields) if name in EVENTS else 'unknown event'}"
        for where, name, fields in producers
        if name not in EVENTS or not set(fields) <= EVENTS[name].fields
    ]
    assert wrong == []


def test_every_family_the_issue_names_has_events():
    assert set(FAMILIES) == {"run", "terminal", "control", "checkpoint", "recovery", "call", "rollback"}
    for name in ("checkpoint", "restart_checkpoint", "recovery_assertion", "recovery_verdict", "replay_decision"):
        assert name in EVENTS
    for name in ("rollback_planned", "rollback_action", "conflict", "conflict_resolved", "compensation"):
        assert name in EVENTS
    assert "session_restored" in EVENTS and "fencing_refused" in EVENTS and "terminal_event" in EVENTS


def test_an_unknown_event_or_field_is_refused():
    check("tool_finished", {"call_id": "c", "tool_name": "t", "status": "succeeded"})
    with pytest.raises(ValueError, match="not in"):
        check("tool_finsihed", {})
    with pytest.raises(ValueError, match=r"no field\(s\) \['content'\]"):
        check("file_patch", {"call_id": "c", "path": "a", "op": "create", "content": "secret text"})


def test_a_recovery_becomes_each_assertion_with_its_result_then_the_verdict():
    failed = RecoveryReport(
        at="t",
        generation=3,
        assertions=RECOVERY_FAILURE_REASONS[:4],
        failed=RECOVERY_FAILURE_REASONS[3],
        detail="its parent is gone",
        action="closed",
    )
    events = recovery_events(failed)
    assert [e for e, _ in events] == ["recovery_assertion"] * 4 + ["recovery_verdict"]
    assert [d["result"] for _, d in events[:4]] == ["passed", "passed", "passed", "failed"]
    assert events[3][1] == {
        "assertion": RECOVERY_FAILURE_REASONS[3],
        "result": "failed",
        "detail": "its parent is gone",
    }
    assert events[-1][1]["reason"] == RECOVERY_FAILURE_REASONS[3] and events[-1][1]["action"] == "closed"
    forbidden = RecoveryReport(
        at="t", generation=2, assertions=(), disposition=ReplayForbidden(reason="user_cancelled"), action="closed"
    )
    assert recovery_events(forbidden)[-1][1] | {"detail": ""} == {
        "action": "closed",
        "disposition": "ReplayForbidden",
        "reason": "user_cancelled",
        "mode": None,
        "detail": "",
    }
    resumed = RecoveryReport(at="t", generation=2, assertions=(), disposition=Resumable(), action="resumed")
    assert recovery_events(resumed)[-1][1]["disposition"] == "Resumable"


def _event(name: str, at: datetime, **data: object) -> TraceEvent:
    return TraceEvent(event=name, at=at.isoformat(), run_id="r", generation=1, data=dict(data))


def test_since_takes_a_time_a_duration_or_a_checkpoint():
    now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    assert parse_since("10m", now).at == now - timedelta(minutes=10)
    assert parse_since("1.5h", now).at == now - timedelta(minutes=90)
    assert parse_since("2026-12-01T05:00:00", now).at == datetime(2026, 12, 1, 5, 0, tzinfo=UTC)  # UTC by default
    assert parse_since("2026-12-01T07:00:00+02:00", now).at == datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
    assert parse_since("ckpt_000012", now).checkpoint_id == "ckpt_000012"
    with pytest.raises(ConfigError, match="ISO time"):
        parse_since("yesterday", now)
    t = [now + timedelta(seconds=i) for i in range(4)]
    events = [
        _event("tool_started", t[0], call_id="c1"),
        _event("checkpoint", t[1], checkpoint_id="ckpt_000003", kind="tool_start", step=1),
        _event("ledger_damaged", t[2], calls=["c1", "c2"]),
        _event("compensation", t[3], call_id="safepoint:compensate:c2", compensates="c2", status="succeeded"),
    ]
    assert select(events, since=parse_since("ckpt_000003", now)) == events[1:]
    assert select(events, since=parse_since("2026-12-01T06:00:02", now)) == events[2:]
    assert select(events, call_id="c2") == events[2:]  # named in a list, or as the call compensated
    assert select(events, call_id="c1") == [events[0], events[2]]
    with pytest.raises(UnknownReferenceError, match="ckpt_000099"):
        select(events, since=parse_since("ckpt_000099", now))


def test_a_line_shows_the_key_fields_in_the_tables_order():
    event = _event("tool_finished", datetime(2026, 12, 1, tzinfo=UTC), status="failed", tool_name="t", call_id="c")
    assert key_fields(event) == [("call_id", "c"), ("tool_name", "t"), ("status", "failed")]
    older = TraceEvent(event="gone_event", at="x", run_id="r", data={"a": 1})
    assert key_fields(older) == [("a", 1)]  # an event of an older trace: all its fields


def test_every_run_status_has_its_event():
    # RunSession.event traces f"run_{status}": the one producer whose name is built, checked here
    import typing

    from safepoint.records import RunStatus

    assert {f"run_{status}" for status in typing.get_args(RunStatus)} <= set(EVENTS)
