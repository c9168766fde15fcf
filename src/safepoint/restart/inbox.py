"""What a live run takes from its control channel between steps (seed 003 §2.2, §4.1, §5):

- a cancel stops the run (``user_cancelled``, or ``user_cancelled_whole_stream`` for it and everything below);
- a context reset or an accepted successor voids the work in flight (``context_reset``, ``successor_accepted``);
- a subtask that stopped during a restart puts the self-healing prompt in this run's context, at high priority;
- a submission is admitted as the next user message, once per ``submission_key``: the restart checkpoint holds it
  (``RuntimeRestartQueuedSubmission``) from admission until its message is durable in the history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from safepoint.engine import failpoints
from safepoint.errors import RunCancelled, WorkVoided
from safepoint.protocol import (
    SELF_HEALING,
    ControlRecord,
    ControlSeen,
    RecoveryOwnerTerminalEvent,
    RecoveryReport,
    ReplayForbidden,
    ReplayForbiddenReason,
    RuntimeRestartQueuedSubmission,
    Submission,
    SubtaskStopped,
)
from safepoint.records import RunStatus
from safepoint.restart import stops
from safepoint.restart.judge import controls, person_detail, redacted, stop_prompt, tell_parent, unhandled
from safepoint.store.ownership import now

if TYPE_CHECKING:
    from safepoint.core.run_view import RunView
    from safepoint.engine.session import RunSession
    from safepoint.store.base import Store

CANCELLED_STATUS = "Cancelled by the user."
VOIDED_STATUS = "Closed: its work was voided ({reason})."


@dataclass(frozen=True)
class Overrides:
    """What the latest admitted submission asked for; it holds for the turns that answer it."""

    override_system_prompt: str | None = None
    append_system_prompt: str | None = None
    requested_model: str | None = None
    tools_allowed_override: tuple[str, ...] | None = None

    def system(self, base: str) -> str:
        system = self.override_system_prompt if self.override_system_prompt is not None else base
        return f"{system}\n\n{self.append_system_prompt}" if self.append_system_prompt else system

    def allows(self, tool: str, session: RunSession) -> bool:
        granted = session.info.tools_allowed
        if granted is not None and tool not in granted:
            return False
        expires = session.info.grant_expires_at_ms
        if expires is not None and time.time_ns() // 1_000_000 >= expires:
            return False  # an expired grant allows nothing (at a restart: invalid_inherited_execution_authority)
        return self.tools_allowed_override is None or tool in self.tools_allowed_override


def _unhandled(session: RunSession) -> list[tuple[int, ControlRecord]]:
    return unhandled(session.store, session.info.run_id, session.control_seen)


def absorbed_keys(session: RunSession) -> tuple[str, ...]:
    return tuple(s.key for s in session.control_seen.values() if s.type == "submission")


def overrides(session: RunSession) -> Overrides:
    latest = max((p for p, s in session.control_seen.items() if s.type == "submission"), default=None)
    if latest is None:
        return Overrides()
    record = dict(controls(session.store, session.info.run_id)).get(latest)
    if not isinstance(record, Submission):
        return Overrides()
    return Overrides(
        override_system_prompt=record.override_system_prompt,
        append_system_prompt=record.append_system_prompt,
        requested_model=record.requested_model,
        tools_allowed_override=record.tools_allowed_override,
    )


def pending_submissions(store: Store, view: RunView) -> list[Submission]:
    """Submissions a run has not admitted yet (read without owning the run)."""
    keys = set(view.absorbed_submission_keys)
    return [
        r
        for _, r in unhandled(store, view.info.run_id, view.control_seen)
        if isinstance(r, Submission) and r.submission_key not in keys
    ]


def has_submissions(session: RunSession) -> bool:
    keys = set(absorbed_keys(session))
    return any(isinstance(r, Submission) and r.submission_key not in keys for _, r in _unhandled(session))


def _seen(session: RunSession, position: int, kind: str, key: str = "") -> None:
    session.add_record(ControlSeen(position=position, type=kind, at=now(), key=key))


def admit(session: RunSession, position: int, submission: Submission) -> None:
    """Admit one submission: durable in the restart checkpoint first, then as a user message (exactly once)."""
    keys = absorbed_keys(session)
    if submission.submission_key in keys:
        _seen(session, position, "submission_duplicate", submission.submission_key)
        session.commit()
        return
    session.restart.write(
        RuntimeRestartQueuedSubmission(
            submission_key=submission.submission_key,
            text=submission.text,
            absorbed_submission_keys=(*keys, submission.submission_key),
            override_system_prompt=submission.override_system_prompt,
            append_system_prompt=submission.append_system_prompt,
            requested_model=submission.requested_model,
            reasoning_strength_override=submission.reasoning_strength_override,
            tools_allowed_override=submission.tools_allowed_override,
        )
    )
    failpoints.hit("submission_admitted")
    session.add_message("user", submission.text, name=f"submission:{submission.submission_key}")
    _seen(session, position, "submission", submission.submission_key)
    # In the same fsync, a checkpoint that holds the message: a resume restores the conversation to it, never to
    # one before it (the key is absorbed, so a rewind past the message would lose the submission for good).
    session.pending = []
    session.checkpoint("before_step")
    session.commit()
    session.trace("submission_admitted", key=submission.submission_key)


def take_controls(session: RunSession) -> None:
    found = controls(session.store, session.info.run_id)
    stops.raise_if_stopped(session, found)
    for position, record in found:
        if position in session.control_seen:
            continue
        if isinstance(record, SubtaskStopped):
            inject_self_healing(session, record)
            _seen(session, position, "subtask_stopped", record.child_run_id)
            session.commit()
        elif isinstance(record, Submission):
            admit(session, position, record)


def inject_self_healing(session: RunSession, stopped: SubtaskStopped) -> None:
    """The seed's prompt, verbatim, plus which subtask it is about; the context builder puts it in the system
    region, ahead of the conversation."""
    if any(m.name == SELF_HEALING and stopped.child_run_id in m.content for m in session.history):
        return
    session.add_message(
        "system",
        f"{stopped.prompt}\n(subtask: run {stopped.child_run_id}, started by call {stopped.call_id}; "
        f"stopped because: {stopped.reason})",
        name=SELF_HEALING,
    )


def finish_closed(
    session: RunSession,
    reason: ReplayForbiddenReason,
    detail: str,
    *,
    status: RunStatus,
    terminal_status: str,
) -> None:
    """Close a live run's work for good: the same steps as a restart cleanup (§5), done by the owner itself."""
    disposition = ReplayForbidden(reason=reason, detail=detail)
    session.add_record(
        RecoveryReport(
            at=now(),
            generation=session.claim.generation,
            assertions=(),
            disposition=disposition,
            detail=detail,
            action="closed",
        )
    )
    session.event(status, f"{terminal_status} ({reason}: {detail})")
    failpoints.hit("closing")
    store, claim, info = session.store, session.claim, session.info
    store.close_owner(claim, terminal_status)
    session.trace("owner_closed", terminal_status=terminal_status)
    recorded = store.record_terminal_event(
        claim,
        RecoveryOwnerTerminalEvent(
            recovery_class=info.recovery_class,
            owner_id=info.owner_id,
            generation=claim.generation,
            event_type=reason,
            created_at=now(),
            payload_json=redacted(session.log.redactor, {"reason": reason, "detail": detail}).decode(),
        ),
    )
    session.trace("terminal_event", event_type=reason, generation=claim.generation, recorded=recorded, reason=reason)
    if info.parent_run_id is not None and info.parent_call_id is not None:
        tell_parent(store, info.parent_run_id, info.run_id, info.parent_call_id, reason, stop_prompt(reason, detail))
        session.trace("parent_told", parent_run_id=info.parent_run_id, call_id=info.parent_call_id, reason=reason)
    session.restart.delete()  # last: while it exists, a restart finishes this close


def close_cancelled(session: RunSession, exc: RunCancelled) -> None:
    request = exc.request
    if exc.position is not None:
        _seen(session, exc.position, "cancel")
    if request.whole_stream:
        for position, record in _unhandled(session):
            if isinstance(record, Submission):
                _seen(session, position, "submission_dropped", record.submission_key)
    if request.whole_stream:
        from safepoint.restart.control import settle_subagents

        settle_subagents(session.store, session.info.run_id)
    reason: ReplayForbiddenReason = "user_cancelled_whole_stream" if request.whole_stream else "user_cancelled"
    finish_closed(
        session,
        reason,
        person_detail(request),
        status="cancelled",
        terminal_status=CANCELLED_STATUS,
    )


def close_voided(session: RunSession, exc: WorkVoided) -> None:
    _seen(session, exc.position, exc.reason)
    finish_closed(
        session, exc.reason, exc.detail, status="closed", terminal_status=VOIDED_STATUS.format(reason=exc.reason)
    )
