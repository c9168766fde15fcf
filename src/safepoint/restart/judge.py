"""Restart recovery with I/O (seed 003 §3-§6): gather the facts, let ``core.restart`` judge them, then either hand
the run back to be resumed or close it: terminal status, terminal event, restart checkpoint deleted, and the
self-healing prompt for whoever waits on the work.

The judging reads only; the closing writes under a fresh claim (a restart is a claim: the generation goes up), so
a process still holding the old generation is fenced off before anything is decided for it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from safepoint.core.redact import Redactor
from safepoint.core.restart import ParentFacts, RecoveryVerdict, RestartFacts, check_recovery
from safepoint.core.run_view import RunView
from safepoint.core.trace_events import recovery_events
from safepoint.engine.log_writer import header_redactor, stored_run_redactor, trace_now
from safepoint.errors import CorruptRecordError, RunNotFoundError
from safepoint.protocol import (
    SELF_HEALING_PROMPT,
    TERMINAL_STATUS_RESTART,
    CancelRequest,
    ContextResetRequest,
    ControlRecord,
    ControlSeen,
    RecoveryOwnerTerminalEvent,
    RecoveryReport,
    ReplayForbidden,
    SubtaskStopped,
    SuccessorAccepted,
)
from safepoint.records import RECORD_KINDS, Claim, LogRecord, RunEvent, RunInfo
from safepoint.restart.doubt import doubt_of
from safepoint.store.base import Store
from safepoint.store.ownership import now

_control_decoder = msgspec.json.Decoder(ControlRecord)
_header_decoder = msgspec.json.Decoder(RunInfo)
_encoder = msgspec.json.Encoder()

CLOSED_EVENT = "closed_during_restart_recovery"
REAPED_EVENT = "runtime_work_reap"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def redactor_of(store: Store, run_id: str) -> Redactor:
    """The run's redactor, for what is written without its session (a person's control record, a restart's own
    records): ``log_writer.stored_run_redactor``. Raises ``RunNotFoundError``."""
    return stored_run_redactor(store, run_id)


def redacted(redactor: Redactor, body: msgspec.Struct | dict[str, object]) -> bytes:
    """``body`` encoded as it may be kept: redacted by its structure (a record's exact fields, such as an
    approval's input hash or a path, as they are; every other string redacted: the store never sees a secret)."""
    if isinstance(body, msgspec.Struct):
        return _encoder.encode(redactor.record(body))
    return _encoder.encode(redactor.value(body))


def controls(store: Store, run_id: str) -> list[tuple[int, ControlRecord]]:
    """The run's control records that decode (one that does not is skipped: nobody can act on it)."""
    found = []
    for position, data in store.read_control(run_id):
        try:
            found.append((position, _control_decoder.decode(data)))
        except msgspec.DecodeError:
            continue
    return found


def unhandled(store: Store, run_id: str, seen: Mapping[int, object]) -> list[tuple[int, ControlRecord]]:
    """The control records not acted on yet (``seen``: the positions the run's log says were)."""
    return [(position, record) for position, record in controls(store, run_id) if position not in seen]


def _load(store: Store, run_id: str) -> RunView | None:
    from safepoint.engine.session import load_view

    try:
        return load_view(store, run_id)
    except (RunNotFoundError, CorruptRecordError):
        return None


def _parent_facts(store: Store, info: RunInfo) -> ParentFacts | None:
    if info.parent_run_id is None:
        return None
    parent = _load(store, info.parent_run_id)
    if parent is None:
        return ParentFacts(run_id=info.parent_run_id, exists=False)
    return ParentFacts(
        run_id=info.parent_run_id,
        exists=True,
        owner=store.owner(info.parent_run_id),
        parent_run_id=parent.info.parent_run_id,
        spawned=dict(parent.spawned),
        tools_allowed=parent.info.tools_allowed,
        grant_expires_at_ms=parent.info.grant_expires_at_ms,
        closed=parent.status in ("closed", "cancelled"),
    )


def ancestor_stream_cancel(store: Store, info: RunInfo) -> CancelRequest | None:
    """A whole-stream cancel sent to any ancestor reaches this run too. Only headers and control channels are
    read (a parent's whole log is not), so a live child can ask at every step."""
    parent_id, hops = info.parent_run_id, 0
    while parent_id is not None and hops < 32:
        try:
            header = _header_decoder.decode(store.run_header(parent_id))
            found = controls(store, parent_id)  # handled or not: a cancelled stream stays cancelled
        except (RunNotFoundError, CorruptRecordError, msgspec.DecodeError):
            return None  # a missing ancestor is the structural assertion's to report
        for _, record in found:
            if isinstance(record, CancelRequest) and record.whole_stream:
                return record
        parent_id, hops = header.parent_run_id, hops + 1
    return None


def conversation_len(view: RunView) -> int:
    """The longest the conversation ever was in the log: a rewind shortens the branch, not what was written."""
    return view.messages_len  # kept by the fold (the highest message seq + 1), not a pass over every message


@dataclass(frozen=True)
class Judged:
    facts: RestartFacts
    verdict: RecoveryVerdict
    view: RunView | None


def judge(
    store: Store,
    run_id: str,
    *,
    resuming_model: str | None = None,
    reaping: bool = False,
    reap_detail: str = "",
    at_ms: int | None = None,
    view: RunView | None = None,
) -> Judged:
    """Read everything recovery depends on and judge it. Writes nothing. ``view``: the run's log as the caller
    read it under its claim (the resume, which opens the run with the same reading); else it is read here."""
    descriptor = store.read_restart_checkpoint(run_id)
    view = view or _load(store, run_id)
    owner = store.owner(run_id) if view is not None else None
    pending = unhandled(store, run_id, view.control_seen) if view is not None else []
    cancel = next((r for _, r in reversed(pending) if isinstance(r, CancelRequest)), None)
    if view is not None and cancel is None:
        cancel = ancestor_stream_cancel(store, view.info)
    facts = RestartFacts(
        agent_id=run_id,
        now_ms=now_ms() if at_ms is None else at_ms,
        descriptor=descriptor,
        owner=owner,
        run_exists=view is not None,
        conversation_len=conversation_len(view) if view else 0,
        # Only work in flight can have lost its calls (and only then is the trace read).
        lost_calls=doubt_of(store, view).lost if view is not None and descriptor is not None else (),
        assistant_turns=view.assistant_turns if view else frozenset(),
        context_epoch=view.context_epoch if view else 0,
        recovery_class=view.info.recovery_class if view else "root",
        parent_run_id=view.info.parent_run_id if view else None,
        parent_call_id=view.info.parent_call_id if view else None,
        parent=_parent_facts(store, view.info) if view else None,
        scheduled=view.info.scheduled if view else None,
        closed=view is not None and view.status in ("closed", "cancelled"),
        cancel=cancel,
        reset=next((r for _, r in reversed(pending) if isinstance(r, ContextResetRequest)), None),
        successor=next((r for _, r in reversed(pending) if isinstance(r, SuccessorAccepted)), None),
        resuming_model=resuming_model,
        reaping=reaping,
        reap_detail=reap_detail,
    )
    return Judged(facts, check_recovery(facts), view)


def report_of(verdict: RecoveryVerdict, generation: int, action: str) -> RecoveryReport:
    return RecoveryReport(
        at=now(),
        generation=generation,
        assertions=verdict.checked,
        failed=verdict.failed,
        disposition=verdict.disposition,
        mode=verdict.checkpoint.mode if verdict.checkpoint else None,
        detail=verdict.detail
        if verdict.failed
        else (verdict.disposition.detail if isinstance(verdict.disposition, ReplayForbidden) else verdict.detail),
        action=action,  # type: ignore[arg-type]
    )


def close_after_restart(
    store: Store, claim: Claim, judged: Judged, *, event_type: str = CLOSED_EVENT
) -> RecoveryReport:
    """§5: terminal status, terminal event, the parent told, the restart checkpoint deleted.

    The order is the seed's except that the reason goes to the run's log first and the checkpoint is deleted
    last: every step is idempotent, and as long as the checkpoint exists the next recovery finishes the cleanup
    (keeping the first terminal status and the reason that started it: a cleanup cut short and repeated records
    nothing twice and never relabels why the run was closed)."""
    # The trace of the cleanup, written when it ends (or fails); the claim it runs under is its own attempt (a
    # reap fenced a hung owner off), and every caller lets that claim go as soon as the cleanup returns.
    claimed = {"holder": claim.holder} | ({"takeover": True} if event_type == REAPED_EVENT else {})
    events: list[tuple[str, dict[str, Any]]] = [("run_claimed", claimed)]
    try:
        return _close(store, claim, judged, event_type, events)
    finally:
        events.append(("run_released", {}))
        with contextlib.suppress(Exception):  # observability: never the reason a cleanup fails
            trace_now(store, claim.run_id, claim.generation, events)


def _close(
    store: Store, claim: Claim, judged: Judged, event_type: str, events: list[tuple[str, dict[str, Any]]]
) -> RecoveryReport:
    verdict, view = judged.verdict, judged.view
    previous = view.recoveries[-1] if view is not None and view.recoveries else None
    if previous is not None and previous.action == "closed" and previous.assertions:
        report = previous  # a restart cleanup cut short: finish it, for its own reason
    else:
        report = report_of(verdict, claim.generation, "closed")
        events += recovery_events(report)
    reason = report.failed or (report.disposition.reason if isinstance(report.disposition, ReplayForbidden) else "")
    if view is not None and report is not previous:
        _append(
            store,
            claim,
            view,
            [
                report,
                RunEvent(
                    status="closed",
                    at=now(),
                    detail=f"{TERMINAL_STATUS_RESTART} ({reason}: {report.detail})",
                    generation=claim.generation,
                ),
            ],
        )
    owner = store.owner(claim.run_id)
    if owner is not None and owner.terminal_at is None:
        store.close_owner(claim, TERMINAL_STATUS_RESTART)
        events.append(("owner_closed", {"terminal_status": TERMINAL_STATUS_RESTART}))
        owner = store.owner(claim.run_id)
    if owner is not None:
        # Keyed by the generation whose work was interrupted, so a repeated cleanup records nothing twice.
        interrupted = verdict.config.generation if verdict.config else report.generation
        recorded = store.record_terminal_event(
            claim,
            RecoveryOwnerTerminalEvent(
                recovery_class=owner.recovery_class,
                owner_id=owner.owner_id,
                generation=interrupted,
                event_type=event_type,
                created_at=now(),
                payload_json=redacted(
                    _redactor_of_view(store, claim.run_id, view),
                    {
                        "reason": reason,
                        "detail": report.detail,
                        "assertions": list(report.assertions),
                        "closed_by_generation": report.generation,
                    },
                ).decode(),
            ),
        )
        terminal = {"event_type": event_type, "generation": interrupted, "recorded": recorded, "reason": reason}
        events.append(
            ("terminal_event", {**terminal, "recovery_class": owner.recovery_class, "owner_id": owner.owner_id})
        )
    if view is not None and view.info.parent_run_id is not None and view.info.parent_call_id is not None:
        # A person's cancel or reset, settled by a restart recovery because nobody ran the child, is told as what
        # it was; only work a restart itself closed gets the seed's self-healing prompt.
        person = judged.facts.cancel if reason.startswith("user_cancelled") else judged.facts.reset
        prompt = (
            stop_prompt(reason, person_detail(person))
            if reason in BY_A_PERSON and person is not None
            else SELF_HEALING_PROMPT
        )
        tell_parent(store, view.info.parent_run_id, claim.run_id, view.info.parent_call_id, reason, prompt)
        events.append(
            (
                "parent_told",
                {"parent_run_id": view.info.parent_run_id, "call_id": view.info.parent_call_id, "reason": reason},
            )
        )
    store.delete_restart_checkpoint(claim)
    events.append(("restart_checkpoint_deleted", {}))
    return report


BY_A_PERSON: dict[str, str] = {  # the reasons a person gave a run's end: shown as what they did, not as a restart
    "user_cancelled": "cancelled",
    "user_cancelled_whole_stream": "cancelled",
    "context_reset": "closed",
}


def person_detail(request: CancelRequest | ContextResetRequest) -> str:
    """What a person did to a run, in the words status, explain and the parent's prompt use."""
    if isinstance(request, ContextResetRequest):
        return f"context reset by {request.by} at {request.at}"
    whole = ", with the whole stream it belongs to" if request.whole_stream else ""
    return f"cancelled by {request.by} at {request.at}{whole}"


def stop_prompt(reason: str, detail: str = "") -> str:
    """What a parent is told when its subtask was stopped by a person or the run's own owner; the seed's
    self-healing prompt is for work a restart closed."""
    why = {
        "user_cancelled": "was cancelled",
        "user_cancelled_whole_stream": "was cancelled, with everything it belongs to",
        "context_reset": "was stopped because its context was reset",
        "successor_accepted": "was stopped because another run took over its work",
    }.get(reason, f"was stopped ({reason})")
    if detail.startswith(("cancelled by ", "context reset by ")):
        why = f"was {detail}"  # the person and the time, as status shows them
    return (
        f"This subtask {why} and did not report a result. Its work may be partly done: check what it already "
        "produced before redoing anything, then redo or redelegate only what is actually missing."
    )


def tell_parent(
    store: Store, parent_run_id: str, child_run_id: str, call_id: str, reason: str, prompt: str = SELF_HEALING_PROMPT
) -> None:
    """Hand the parent the self-healing prompt; its next session puts it in the model's context at high priority."""
    with contextlib.suppress(RunNotFoundError):  # an orphan: nobody is left to tell
        for _, record in controls(store, parent_run_id):
            if isinstance(record, SubtaskStopped) and record.child_run_id == child_run_id:
                return  # told already (a repeated cleanup)
        stopped = SubtaskStopped(child_run_id=child_run_id, call_id=call_id, reason=reason, prompt=prompt, at=now())
        store.post_control(parent_run_id, redacted(redactor_of(store, parent_run_id), stopped))


def _redactor_of_view(store: Store, run_id: str, view: RunView | None) -> Redactor:
    return header_redactor(view.info, store) if view is not None else redactor_of(store, run_id)


def _append(store: Store, claim: Claim, view: RunView, bodies: list[msgspec.Struct]) -> None:
    """Records a restart writes to a run it holds no session of: redacted like the log writer's."""
    redactor = header_redactor(view.info, store)
    seq = view.last_seq
    records = []
    for body in bodies:
        seq += 1
        records.append(
            LogRecord(
                kind=RECORD_KINDS[type(body)],
                body=msgspec.Raw(redacted(redactor, body)),
                seq=seq,
                gen=claim.generation,
            )
        )
    store.append(claim, records)
    view.last_seq = seq


def mark_seen(position: int, record: ControlRecord, key: str = "") -> ControlSeen:
    return ControlSeen(position=position, type=type(record).__struct_config__.tag or "", at=now(), key=key)  # type: ignore[arg-type]
