"""The trace's vocabulary: every event a run's trace may hold, its family and its fields, in one table.

A trace line is a ``TraceEvent``: ``event`` (a name of ``EVENTS``), ``at`` (ISO time, UTC), ``run_id``,
``generation`` (the writer's claim: the crashed attempt and the resume that followed it are told apart by it) and
``data`` (the event's fields, names from the seeds where they have one: ``call_id``, ``tool_name``,
``idempotency``, ``replay_policy``, ``checkpoint_id``, the seven assertions and the replay-forbidden reasons
verbatim). ``check`` refuses a name or a field the table does not hold, so a producer cannot drift from it (and
``tests/test_trace_events.py`` reads every ``.trace("...")`` call in the source against it).

What never goes in: file contents and model or tool text (an event names paths, hashes, ids and the seeds' reason
names; the few ``detail``/``why`` fields are safepoint's own sentences), and whatever is written still passes the
log writer's redactor. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from safepoint.errors import ConfigError, UnknownReferenceError
from safepoint.protocol import RecoveryReport, ReplayForbidden


class TraceEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a run's trace (``trace.jsonl`` or the trace table)."""

    event: str
    at: str
    run_id: str
    generation: int = 0  # 0: written before events carried it (or by a process holding no claim)
    data: dict[str, Any] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class EventSpec:
    family: str
    key: tuple[str, ...]  # the fields `safepoint trace` shows on the event's line, in order
    more: tuple[str, ...] = ()  # the other fields it may carry

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self.key + self.more)


_CALL = ("call_id", "tool_name")
_RUN_STATUSES = ("running", "waiting_decision", "waiting_approval", "completed", "failed", "interrupted")

EVENTS: Mapping[str, EventSpec] = {
    # the run and its owners (seed 003 §1: claims raise the generation; a stale writer is refused)
    "run_claimed": EventSpec("run", ("takeover", "holder")),
    "run_released": EventSpec("run", ()),
    "fencing_refused": EventSpec("run", ("what", "current_generation")),
    "leftovers_killed": EventSpec("run", ("pids",), ("call_id",)),
    "progress_observer_dropped": EventSpec("run", ("error",)),  # a Run.on_event observer that raised
    "snapshot_write_failed": EventSpec("run", ("error",)),  # the background view snapshot's writer (a cache)
    **{f"run_{status}": EventSpec("run", ("detail",)) for status in _RUN_STATUSES},
    # terminal (seed 003 §1.3, §5)
    "run_closed": EventSpec("terminal", ("detail",)),
    "run_cancelled": EventSpec("terminal", ("detail",)),
    "owner_closed": EventSpec("terminal", ("terminal_status",)),
    "terminal_event": EventSpec(
        "terminal", ("event_type", "generation", "recorded"), ("recovery_class", "owner_id", "reason")
    ),
    "parent_told": EventSpec("terminal", ("parent_run_id", "call_id", "reason")),
    "cancel_requested": EventSpec("control", ("outcome", "whole_stream", "by")),
    "reset_requested": EventSpec("control", ("outcome", "by")),
    "submission_admitted": EventSpec("control", ("key",)),
    # control records written while one of the run's commands ran: a stop obeyed, anything else not applied
    "control_during_command": EventSpec("control", ("position", "type", "detail")),
    "control_tampered": EventSpec("control", ("position", "type", "detail"), ("call_id",)),
    # checkpoints (seed 000 §8.3; the restart checkpoint of seed 003 §1.2)
    # A checkpoint not written again because the previous one holds the same state (a step's before_step right
    # after the last step's after_step, a call's tool_start right after the last call's tool_end) is still said,
    # with that previous checkpoint's id: the trace still marks every step's start and every call's.
    "checkpoint": EventSpec("checkpoint", ("checkpoint_id", "kind", "step")),
    "restart_checkpoint": EventSpec("checkpoint", ("mode",)),
    "restart_checkpoint_deleted": EventSpec("checkpoint", ()),
    # restart recovery (seed 003 §3-§4): each assertion with its result, then the verdict
    "recovery_assertion": EventSpec("recovery", ("assertion", "result"), ("detail",)),
    "recovery_verdict": EventSpec("recovery", ("action", "disposition", "reason"), ("mode", "detail")),
    # resume (seed 000 §8.6): where from, each call's replay decision, the note
    "resume_plan": EventSpec("recovery", ("checkpoint_id", "step"), ("why", "needs_decision", "drift", "damage")),
    "replay_decision": EventSpec(
        "recovery", ("call_id", "action", "status"), ("tool_name", "idempotency", "replay_policy", "replayable", "why")
    ),
    "call_decided": EventSpec("recovery", ("call_id", "decision")),
    "ledger_damaged": EventSpec("recovery", ("calls",)),
    "command_changes_recovered": EventSpec("recovery", ("call_id", "paths")),
    "settled_changes": EventSpec("recovery", ("call_id", "paths", "certain")),
    "recovery_note": EventSpec("recovery", ("checkpoint_id", "calls")),
    # tool calls (seed 000 §8.2)
    "tool_started": EventSpec(
        "call", ("call_id", "tool_name", "attempt"), ("step_id", "idempotency", "replay_policy", "risk_level")
    ),
    "tool_finished": EventSpec("call", ("call_id", "tool_name", "status")),
    "call_outcome_taken": EventSpec("call", ("call_id", "status"), ("tool_name", "why")),
    "call_uncertain": EventSpec("call", ("call_id", "action"), ("tool_name", "why")),
    "call_refused": EventSpec("call", _CALL, ("why",)),
    "call_cancelled": EventSpec("call", _CALL),  # an asyncio task cancelled while its tool ran: now uncertain
    "approval_answered": EventSpec("call", ("call_id", "decision")),
    "approval_ignored": EventSpec("call", ("call_id", "reason")),
    "file_patch": EventSpec("call", ("call_id", "path", "op")),
    # rollback_files, conflicts, restore_session, compensate_external_action (seed 000 §8.8-§8.9)
    "rollback_planned": EventSpec("rollback", ("checkpoint_id", "actions", "conflicts"), ("uncertain", "unrestorable")),
    "rollback_action": EventSpec("rollback", ("call_id", "path", "action"), ("undoes",)),
    "rollback_skipped": EventSpec("rollback", ("path", "why"), ("call_id",)),
    "rollback_finished": EventSpec("rollback", ("checkpoint_id", "reverted", "conflicts")),
    "conflict": EventSpec("rollback", ("path", "resolution"), ("expected_hash", "actual_hash", "agent_patch_ref")),
    "conflict_resolved": EventSpec("rollback", ("path", "resolution", "call_id"), ("clean",)),
    "session_restored": EventSpec(
        "rollback", ("checkpoint_id", "new_checkpoint_id"), ("abandoned", "not_undone", "with_files")
    ),
    "compensation": EventSpec("rollback", ("call_id", "compensates", "status")),
}

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(spec.family for spec in EVENTS.values()))
_FIELDS: dict[str, frozenset[str]] = {name: spec.fields for name, spec in EVENTS.items()}


def check(event: str, data: Mapping[str, Any]) -> None:
    """Refuse an event or a field the vocabulary does not hold (a producer's mistake, found by its tests)."""
    allowed = _FIELDS.get(event)
    if allowed is None:
        raise ValueError(f"trace event {event!r} is not in safepoint.core.trace_events.EVENTS")
    if not data.keys() <= allowed:
        extra = sorted(set(data) - allowed)
        raise ValueError(f"trace event {event!r} has no field(s) {extra}; its fields are {sorted(allowed)}")


def recovery_events(report: RecoveryReport) -> list[tuple[str, dict[str, Any]]]:
    """A restart recovery as trace events: each assertion it checked with its result (seed 003 §3, in the order
    checked), then the verdict: the disposition and its reason (the failed assertion, or the replay-forbidden
    reason), and what was done (``resumed`` or ``closed``)."""
    events: list[tuple[str, dict[str, Any]]] = []
    for name in report.assertions:
        if name == report.failed:
            events.append(("recovery_assertion", {"assertion": name, "result": "failed", "detail": report.detail}))
        else:
            events.append(("recovery_assertion", {"assertion": name, "result": "passed"}))
    disposition = report.disposition
    reason = report.failed or (disposition.reason if isinstance(disposition, ReplayForbidden) else None)
    verdict = {
        "action": report.action,
        "disposition": disposition.__struct_config__.tag if disposition is not None else None,
        "reason": reason,
        "mode": report.mode,
        "detail": report.detail,
    }
    events.append(("recovery_verdict", verdict))
    return events


# reading a trace ---------------------------------------------------------------------------------------------------
_decoder = msgspec.json.Decoder(TraceEvent)


def decode(line: bytes) -> TraceEvent | None:
    """A stored line as an event; None for one that does not decode (an older shape, a cut line)."""
    try:
        return _decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def names_call(event: TraceEvent, call_id: str) -> bool:
    """Is the event about ``call_id`` (its own call, the call it compensates or undoes, or one it lists)?"""
    data = event.data
    if call_id in (data.get("call_id"), data.get("compensates")):
        return True
    return any(isinstance(data.get(k), list) and call_id in data[k] for k in ("calls", "undoes", "abandoned"))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Since:
    """Where ``--since`` starts a timeline: at a time, or at a checkpoint's event."""

    at: datetime | None = None
    checkpoint_id: str | None = None


def parse_since(text: str, now: datetime) -> Since:
    """``2026-12-01T06:00:00`` (UTC unless it names a zone), ``10m`` / ``2h`` / ``90s`` / ``1d`` ago, or a
    checkpoint id (``ckpt_000012``)."""
    text = text.strip()
    if text.startswith("ckpt_"):
        return Since(checkpoint_id=text)
    match = _DURATION.fullmatch(text)
    if match is not None:
        return Since(at=now - timedelta(seconds=float(match.group(1)) * _UNIT[match.group(2)]))
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: give an ISO time (2026-12-01T06:00:00), a duration ago (90s, 10m, 2h, 1d) "
            "or a checkpoint id (ckpt_000012)"
        ) from None
    return Since(at=at if at.tzinfo is not None else at.replace(tzinfo=UTC))


def event_time(event: TraceEvent) -> datetime | None:
    try:
        at = datetime.fromisoformat(event.at)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def select(events: list[TraceEvent], *, call_id: str | None = None, since: Since | None = None) -> list[TraceEvent]:
    """The events of a timeline: in time order (each writer batches its events, so a fenced-off owner's last
    batch is written after its successor's first), from ``since`` on, about ``call_id`` when given."""
    events = sorted(events, key=lambda e: e.at)  # stable: events of one instant keep their written order
    if since is not None and since.checkpoint_id is not None:
        start = next(
            (
                i
                for i, e in enumerate(events)
                if e.event == "checkpoint" and e.data.get("checkpoint_id") == since.checkpoint_id
            ),
            None,
        )
        if start is None:
            run_id = events[0].run_id if events else "RUN_ID"
            raise UnknownReferenceError(
                f"--since {since.checkpoint_id}: no such checkpoint in the run's trace; "
                f"list them with `safepoint checkpoints {run_id}`"
            )
        events = events[start:]
    elif since is not None and since.at is not None:
        cut = since.at
        events = [e for e in events if (t := event_time(e)) is None or t >= cut]
    if call_id is not None:
        events = [e for e in events if names_call(e, call_id)]
    return events


def key_fields(event: TraceEvent) -> list[tuple[str, Any]]:
    """The fields a timeline line shows for the event: its key fields as the table orders them (every field, for
    an event the table does not know: an older trace)."""
    spec = EVENTS.get(event.event)
    if spec is None:
        return list(event.data.items())
    return [(name, event.data[name]) for name in spec.key if name in event.data]
