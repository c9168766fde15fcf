"""OpenTelemetry spans of a run, built from its stored trace (``pip install 'safepoint[otel]'``).

::

    from safepoint.integrations.otel import export_run
    export_run(sp, "r1")                                   # the global tracer provider, or:
    export_run(sp, "r1", tracer_provider=provider, context=parent)  # under a span of your own

**Why an export of the stored trace, not live spans.** A live sink fed by the log writer would give spans as the
run goes, but the runs safepoint exists for are the ones that crash: a SIGKILLed process never ends its spans, so
an exporter never sends them, and the picture a user most needs (what the crashed attempt was doing, then what the
resume decided) would have a hole exactly there. The stored trace holds both attempts, each line with its writer's
generation, so the export draws them side by side and ends the crashed attempt's open call as ``uncertain``. It
also keeps the OpenTelemetry SDK off the tool call's path (a run costs nothing more with the extra installed) and
works on either store, for a run of this process or of any other. The cost: spans appear when you export (after a
run, after a resume, or periodically from a supervisor), and a crash loses the last unwritten trace batch (see
``engine.log_writer``); a call whose ``tool_started`` was in that batch still gets its span in the crashed attempt
from the resume's replay decision, marked ``trace_lost``.

**The shape.** Names and attributes are the seeds' (``run_id``, ``call_id``, ``tool_name``, ``idempotency``,
``replay_policy``, ``status``, ``generation``, ``checkpoint_id``, the assertion and reason names verbatim)::

    safepoint.run                 run_id, status (the run's last status in the trace), generations
      safepoint.attempt           one per generation that wrote the trace (a start, a resume, a takeover, a
                                  rollback or resolve session): generation, holder, takeover, end (released,
                                  fenced, crashed, or not_released for the last one: running, or killed);
                                  linked to the attempt before it
        safepoint.step            one per agent step of the attempt (before_step .. after_step; a resume opens
                                  the step it continues, resumed=true): step
          safepoint.tool_call     tool_started .. its outcome: call_id, tool_name, idempotency, replay_policy,
                                  risk_level, attempt, step_id, status (succeeded, failed, or uncertain when the
                                  attempt ended first)

Every other event (checkpoints, each recovery assertion and the verdict, the resume plan and each call's replay
decision, the recovery note, rollback actions, conflicts, resolutions, compensations, terminal events, fencing
refusals) is a span event on the innermost span it concerns: its call's span while that is open, else the step's,
else the attempt's; an event written without a claim (a cancel request) goes on the run's span.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from safepoint.core.trace_events import TraceEvent, event_time
from safepoint.errors import ConfigError

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Status, StatusCode, Tracer, TracerProvider
except ImportError:  # pragma: no cover - the extra is part of `dev`
    raise ConfigError(
        "OpenTelemetry is not installed: pip install 'safepoint[otel]' (opentelemetry-api and -sdk)"
    ) from None

__all__ = ["export_events", "export_run"]

_RUN_STATUSES = ("completed", "waiting_decision", "waiting_approval", "interrupted", "failed", "cancelled", "closed")
_ENDS_CALL = frozenset({"tool_finished"})
_NOT_EVENTS = frozenset({"tool_started", "tool_finished"})  # they are the call's span itself


class TraceSource(Protocol):
    """What the export reads a run from: ``safepoint.Safepoint`` is one."""

    def trace(self, run_id: str) -> list[TraceEvent]: ...


def export_run(
    source: TraceSource,
    run_id: str,
    *,
    tracer_provider: TracerProvider | None = None,
    context: Context | None = None,
) -> int:
    """Export the run's stored trace as spans; returns how many spans were made. ``context``: the parent of the
    run's span (default: a new trace)."""
    provider = tracer_provider or otel_trace.get_tracer_provider()
    return export_events(source.trace(run_id), provider.get_tracer("safepoint"), context=context)


def export_events(events: Sequence[TraceEvent], tracer: Tracer, *, context: Context | None = None) -> int:
    """The spans of one run's trace events (in the order they were written)."""
    if not events:
        return 0
    builder = _Builder(tracer, events, context)
    for event in events:
        builder.add(event)
    return builder.finish()


def _ns(event: TraceEvent, fallback: int) -> int:
    at = event_time(event)
    return int(at.timestamp() * 1e9) if isinstance(at, datetime) else fallback


def attributes(data: dict[str, Any]) -> dict[str, Any]:
    """An event's fields as OpenTelemetry attributes: primitives as they are, lists as lists of strings, anything
    else as JSON text; a missing value (None) is left out."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[key] = value
        elif isinstance(value, list | tuple):
            out[key] = [str(v) for v in value]
        else:
            out[key] = json.dumps(value, separators=(",", ":"), default=str)
    return out


@dataclass
class _Attempt:
    generation: int
    span: Span
    last_ns: int
    step: Span | None = None
    calls: dict[str, Span] = field(default_factory=dict)
    end: str = ""


class _Builder:
    def __init__(self, tracer: Tracer, events: Sequence[TraceEvent], context: Context | None) -> None:
        self.tracer = tracer
        self.run_id = events[0].run_id
        self.first_ns = _ns(events[0], 0)
        self.last_ns = self.first_ns
        self.run = tracer.start_span(
            "safepoint.run", context, attributes={"run_id": self.run_id}, start_time=self.first_ns
        )
        self.run_context = otel_trace.set_span_in_context(self.run)
        self.attempts: dict[int, _Attempt] = {}
        self.status = ""
        self.spans = 1
        self.drawn: set[str] = set()  # calls that have a span in some attempt

    def _attempt(self, event: TraceEvent, at: int) -> _Attempt:
        attempt = self.attempts.get(event.generation)
        if attempt is None:
            before = [a for g, a in self.attempts.items() if g < event.generation]
            links = [Link(max(before, key=lambda a: a.generation).span.get_span_context())] if before else []
            span = self.tracer.start_span(
                "safepoint.attempt",
                self.run_context,
                attributes={"run_id": self.run_id, "generation": event.generation},
                links=links,
                start_time=at,
            )
            attempt = self.attempts[event.generation] = _Attempt(event.generation, span, at)
            self.spans += 1
        attempt.last_ns = max(attempt.last_ns, at)
        return attempt

    def _child(self, name: str, parent: Span, attributes: dict[str, Any], at: int) -> Span:
        self.spans += 1
        return self.tracer.start_span(
            name, otel_trace.set_span_in_context(parent), attributes=attributes, start_time=at
        )

    def add(self, event: TraceEvent) -> None:
        at = _ns(event, self.last_ns)
        self.last_ns = max(self.last_ns, at)
        name, data = event.event, event.data
        if name.startswith("run_") and name[4:] in _RUN_STATUSES:
            self.status = name[4:]
        if event.generation == 0:  # written without a claim (a person's cancel or reset)
            self.run.add_event(name, attributes(data), timestamp=at)
            return
        attempt = self._attempt(event, at)
        call_id = data.get("call_id") if isinstance(data.get("call_id"), str) else None
        if name == "run_claimed":
            attempt.span.set_attributes(attributes(data))
        elif name == "run_released":
            attempt.end = attempt.end or "released"
        elif name == "fencing_refused":
            attempt.end = "fenced"
        elif name == "checkpoint" and data.get("kind") == "before_step":
            self._end_step(attempt, at)
            attempt.step = self._child("safepoint.step", attempt.span, self._step_attributes(event), at)
        elif name == "resume_plan":
            self._end_step(attempt, at)
            step = {**self._step_attributes(event), "resumed": True}
            attempt.step = self._child("safepoint.step", attempt.span, step, at)
        elif name == "tool_started" and call_id is not None:
            parent = attempt.step or attempt.span
            attrs = {"run_id": self.run_id, "generation": event.generation, **attributes(data)}
            attempt.calls[call_id] = self._child("safepoint.tool_call", parent, attrs, at)
            self.drawn.add(call_id)
        elif name == "replay_decision" and call_id is not None and data.get("status") == "uncertain":
            self._lost_call(event, call_id)
        if name not in _NOT_EVENTS:
            self._target(attempt, call_id).add_event(name, attributes(data), timestamp=at)
        if name in _ENDS_CALL and call_id is not None and call_id in attempt.calls:
            span = attempt.calls.pop(call_id)
            status = str(data.get("status", ""))
            span.set_attribute("status", status)
            span.set_status(Status(StatusCode.OK if status == "succeeded" else StatusCode.ERROR))
            span.end(end_time=at)
        if name == "checkpoint" and data.get("kind") == "after_step":
            self._end_step(attempt, at)

    def _step_attributes(self, event: TraceEvent) -> dict[str, Any]:
        return attributes({"run_id": self.run_id, "generation": event.generation, "step": event.data.get("step")})

    def _target(self, attempt: _Attempt, call_id: str | None) -> Span:
        if call_id is not None and call_id in attempt.calls:
            return attempt.calls[call_id]
        return attempt.step or attempt.span

    def _end_step(self, attempt: _Attempt, at: int) -> None:
        if attempt.step is not None:
            attempt.step.end(end_time=at)
            attempt.step = None

    def _lost_call(self, event: TraceEvent, call_id: str) -> None:
        """A resume found the call uncertain: the attempt before it started it. If that attempt's trace lost the
        call's start (the batch a crash did not write), its span is drawn there, ending where that trace ends."""
        earlier = [a for g, a in self.attempts.items() if g < event.generation]
        if not earlier:
            return
        if call_id in self.drawn:
            return  # its span is there already (open in the crashed attempt, it ends as uncertain with it)
        crashed = max(earlier, key=lambda a: a.generation)
        self.drawn.add(call_id)
        attrs = {
            "run_id": self.run_id,
            "generation": crashed.generation,
            "call_id": call_id,
            "trace_lost": True,
            **attributes({k: event.data.get(k) for k in ("tool_name", "idempotency", "replay_policy")}),
        }
        crashed.calls[call_id] = self._child(
            "safepoint.tool_call", crashed.step or crashed.span, attrs, crashed.last_ns
        )

    def finish(self) -> int:
        newest = max(self.attempts, default=0)
        for generation, attempt in sorted(self.attempts.items()):
            end = attempt.end or ("not_released" if generation == newest else "crashed")
            for span in attempt.calls.values():
                # The attempt ended before the call's outcome was recorded: the seed's `uncertain`.
                span.set_attribute("status", "uncertain")
                span.set_status(Status(StatusCode.ERROR, "the attempt ended before the call's outcome was recorded"))
                span.end(end_time=attempt.last_ns)
            attempt.calls.clear()
            self._end_step(attempt, attempt.last_ns)
            attempt.span.set_attribute("end", end)
            if end == "crashed":
                attempt.span.set_status(Status(StatusCode.ERROR, "the process ended without releasing the run"))
            elif end == "fenced":
                attempt.span.set_status(Status(StatusCode.ERROR, "fenced off: a newer owner took the run over"))
            attempt.span.end(end_time=attempt.last_ns)
        self.run.set_attributes({"status": self.status or "unknown", "generations": len(self.attempts)})
        self.run.end(end_time=self.last_ns)
        return self.spans
