"""The OpenTelemetry export (``safepoint.integrations.otel``), offline, with the SDK's in-memory exporter: the
spans of a crashed and resumed run form one coherent tree; the base install never imports opentelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import safepoint
from safepoint.core.restart import CHECKED_ORDER
from safepoint.core.trace_events import TraceEvent
from safepoint.integrations.otel import export_events, export_run
from tests.conftest import cli_env, safepoint_in_process


@pytest.fixture
def exported():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


def test_a_crashed_and_resumed_run_is_one_tree_with_the_crashed_call_uncertain(tmp_path, workspace, outbox, exported):
    provider, exporter = exported
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    scenario = tmp_path / "sc.json"
    turns: list[dict[str, Any]] = [
        {"text": "w", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "1\n"}}]},
        {"text": "n", "tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": "hi"}}]},
        {"text": "done"},
    ]
    scenario.write_text(json.dumps({"task": "t", "turns": turns}))
    child = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(scenario), "--run-id", "r", "-w", str(workspace)],
        env={**env, "SAFEPOINT_FAILPOINT": "after_started:send_notification"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    assert safepoint_in_process("resume", "r", "-w", workspace, env=env).returncode == 0
    count = export_run(safepoint.open(workspace=str(workspace)), "r", tracer_provider=provider)
    spans = exporter.get_finished_spans()
    assert count == len(spans)
    [run] = _by_name(spans, "safepoint.run")
    assert run.parent is None and dict(run.attributes or {}) == {"run_id": "r", "status": "completed", "generations": 2}
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}  # one trace
    attempts = sorted(_by_name(spans, "safepoint.attempt"), key=lambda s: (s.attributes or {})["generation"])
    assert [_parent(a) for a in attempts] == [run.context.span_id] * 2
    crashed, resumed = attempts
    assert crashed.attributes["end"] == "crashed" and crashed.status.status_code == StatusCode.ERROR
    assert resumed.attributes["end"] == "released" and resumed.attributes["takeover"] is False
    assert [link.context.span_id for link in resumed.links] == [crashed.context.span_id]  # the resume, linked
    # The recovery's decisions are the resume's span events, with the seeds' names.
    assertions = [e for e in resumed.events if e.name == "recovery_assertion"]
    assert [e.attributes["assertion"] for e in assertions] == list(CHECKED_ORDER)
    verdict = next(e for e in resumed.events if e.name == "recovery_verdict")
    assert verdict.attributes["disposition"] == "Resumable" and verdict.attributes["action"] == "resumed"
    calls = {(s.attributes["call_id"], s.attributes["generation"]): s for s in _by_name(spans, "safepoint.tool_call")}
    written = calls[("call_1", 1)]
    assert {k: written.attributes[k] for k in ("tool_name", "idempotency", "replay_policy", "status")} == {
        "tool_name": "write_file",
        "idempotency": "conditional",
        "replay_policy": "auto",
        "status": "succeeded",
    }
    step = next(s for s in _by_name(spans, "safepoint.step") if s.context.span_id == _parent(written))
    assert step.attributes["step"] == 1 and _parent(step) == crashed.context.span_id
    assert [e.name for e in written.events] == ["file_patch"]
    # The call the kill interrupted: in the crashed attempt, ended uncertain (its start was in the lost batch).
    lost = calls[("call_2", 1)]
    assert lost.attributes["status"] == "uncertain" and lost.status.status_code == StatusCode.ERROR
    assert lost.attributes["tool_name"] == "send_notification" and lost.attributes["trace_lost"] is True
    assert lost.end_time <= crashed.end_time <= resumed.start_time
    resumed_step = next(s for s in _by_name(spans, "safepoint.step") if (s.attributes or {}).get("resumed"))
    assert resumed_step.attributes["step"] == 2 and _parent(resumed_step) == resumed.context.span_id
    assert [e.attributes["call_id"] for e in resumed_step.events if e.name == "call_uncertain"] == ["call_2"]


def _event(name: str, second: int, generation: int, **data: Any) -> TraceEvent:
    at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=second)
    return TraceEvent(event=name, at=at.isoformat(), run_id="r", generation=generation, data=data)


def test_an_open_call_of_a_crashed_attempt_ends_uncertain_and_a_fenced_attempt_says_so(exported):
    provider, exporter = exported
    events = [
        _event("run_claimed", 0, 1, takeover=False, holder="a"),
        _event("checkpoint", 1, 1, checkpoint_id="ckpt_000003", kind="before_step", step=1),
        _event("tool_started", 2, 1, call_id="c1", tool_name="pay", attempt=1, idempotency="non_idempotent"),
        _event("run_claimed", 5, 2, takeover=True, holder="b"),
        _event("fencing_refused", 6, 1, what="append", current_generation=2),
        _event("cancel_requested", 7, 0, outcome="requested", whole_stream=False, by="user"),
        _event("run_released", 8, 2),
    ]
    export_events(events, provider.get_tracer("t"))
    spans = exporter.get_finished_spans()
    [call] = _by_name(spans, "safepoint.tool_call")
    assert call.attributes["status"] == "uncertain" and "trace_lost" not in call.attributes
    attempts = {s.attributes["generation"]: s for s in _by_name(spans, "safepoint.attempt")}
    assert attempts[1].attributes["end"] == "fenced" and attempts[1].status.status_code == StatusCode.ERROR
    assert attempts[2].attributes["takeover"] is True and attempts[2].attributes["end"] == "released"
    assert call.end_time == attempts[1].end_time == _base_ns() + 6 * 10**9  # where its trace ends
    [run] = _by_name(spans, "safepoint.run")
    assert [e.name for e in run.events] == ["cancel_requested"]  # a person's request: on the run itself
    assert export_events([], provider.get_tracer("t")) == 0


def _base_ns() -> int:
    return int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1e9)


def test_the_base_install_never_imports_opentelemetry(workspace):
    code = (
        "import sys, safepoint\n"
        f"sp = safepoint.open(workspace={str(workspace)!r})\n"
        "with sp.start('t', run_id='r') as run:\n"
        "    run.call('write_file', {'path': 'a.txt', 'content': 'x'}, call_id='c1')\n"
        "assert sp.trace('r'), 'no trace'\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert loaded == [], loaded\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "try:\n"
        "    import safepoint.integrations.otel\n"
        "except safepoint.ConfigError as exc:\n"
        "    assert \"pip install 'safepoint[otel]'\" in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('imported without opentelemetry')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = safepoint_in_process("trace", "r", "-w", workspace)
    assert trace.returncode == 0 and "tool_started" in trace.stdout


def test_a_call_left_uncertain_over_several_resumes_is_drawn_once_where_it_started(exported):
    provider, exporter = exported
    decision = {"call_id": "c1", "status": "uncertain", "action": "wait_decision", "tool_name": "deploy"}
    events = [
        _event("tool_started", 1, 1, call_id="c1", tool_name="deploy", attempt=1),
        _event("replay_decision", 5, 2, **decision),  # a person must decide: the resume stops there
        _event("run_released", 6, 2),
        _event("replay_decision", 9, 3, **(decision | {"action": "rerun"})),
        _event("tool_started", 10, 3, call_id="c1", tool_name="deploy", attempt=2),
        _event("tool_finished", 11, 3, call_id="c1", tool_name="deploy", status="succeeded"),
    ]
    export_events(events, provider.get_tracer("t"))
    calls = _by_name(exporter.get_finished_spans(), "safepoint.tool_call")
    drawn = sorted((s.attributes["generation"], s.attributes["attempt"], s.attributes["status"]) for s in calls)
    assert drawn == [(1, 1, "uncertain"), (3, 2, "succeeded")]
