"""Waiting for a person to approve a high-risk call (seed 003 §2.1, ``RuntimeRestartToolApprovalWait``).

The wait is durable: its restart checkpoint is written when it begins and refreshed with the time left, so a
restart continues it with the remaining timeout instead of a fresh one (or none). An approval counts only for the
input it was given for: ``safepoint approve`` reads the call's ``input_hash`` from the ledger and the wait checks it.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Protocol

import msgspec

from safepoint.engine import failpoints, shutdown
from safepoint.engine.call_runner import ApprovalOutcome, AwaitApproval
from safepoint.engine.restart_writer import RestartWriter, now_ms
from safepoint.engine.session import RunSession
from safepoint.errors import Interrupted
from safepoint.protocol import Approval, ControlSeen, RuntimeRestartToolApprovalWait
from safepoint.records import Claim, RunInfo, RunStatus
from safepoint.restart import stops
from safepoint.restart.judge import controls, mark_seen
from safepoint.store.base import Store

POLL_SECONDS = 0.05
PERSIST_SECONDS = 1.0  # how often the time left is written: a restart loses at most this much of the wait


class ApprovalHost(Protocol):
    """What a wait reads and writes of its run (a ``RunSession`` is one)."""

    store: Store
    claim: Claim
    info: RunInfo
    restart: RestartWriter
    next_turn: int
    control_seen: dict[int, ControlSeen]

    def event(self, status: RunStatus, detail: str = "") -> None: ...

    def add_record(self, body: msgspec.Struct) -> int: ...

    def trace(self, event: str, **data: Any) -> None: ...


def attach(session: RunSession) -> RunSession:
    """Let the session's calls wait for a person's approval (the engine cannot: waiting is this layer's job)."""
    session.runner.approvals = functools.partial(wait_for_approval, session)
    return session


def wait_for_approval(session: ApprovalHost, request: AwaitApproval) -> ApprovalOutcome:
    call, entry = request.call, request.entry
    prior = session.restart.current
    if (
        isinstance(prior, RuntimeRestartToolApprovalWait)
        and prior.call_id == call.call_id
        and prior.input_hash == entry.input_hash
    ):
        wait = prior  # a restart: the same wait goes on with the time it had left
    else:
        wait = RuntimeRestartToolApprovalWait(
            call_id=call.call_id,
            tool_name=entry.tool_name,
            input_hash=entry.input_hash,
            wait_started_at_ms=now_ms(),
            timeout_remaining_ms=int(session.info.approval_timeout_s * 1000),
            producer_inference_request_id=f"{session.info.run_id}/turn{session.next_turn}",
            producer_inference_attempt_id=f"{session.info.run_id}/gen{session.claim.generation}",
        )
    session.restart.write(wait)
    session.event(
        "waiting_approval",
        f"call {call.call_id} ({entry.tool_name}, {entry.risk_level} risk) waits for "
        f"`safepoint approve {session.info.run_id} {call.call_id}` ({wait.timeout_remaining_ms / 1000:.0f} s left)",
    )
    failpoints.hit("approval_wait", entry.tool_name)
    deadline = time.monotonic() + wait.timeout_remaining_ms / 1000
    persisted = time.monotonic()
    ignored: set[int] = set()
    while True:
        found = controls(session.store, session.info.run_id)
        stops.raise_if_stopped(session, found)  # a cancel, a reset or a successor ends the wait: nothing is sent
        for position, record in found:
            if not isinstance(record, Approval) or record.call_id != call.call_id or position in ignored:
                continue
            if record.input_hash != entry.input_hash:
                ignored.add(position)
                session.trace("approval_ignored", call_id=call.call_id, reason="input hash differs")
                continue
            session.add_record(mark_seen(position, record, call.call_id))
            left = max(0, int((deadline - time.monotonic()) * 1000))
            verb = "approved" if record.approved else "denied"
            why = f"{verb} by {record.by} at {record.at}" + (f": {record.reason}" if record.reason else "")
            left_wait = msgspec.structs.replace(wait, timeout_remaining_ms=left)
            return ApprovalOutcome(record.approved, "approved" if record.approved else "denied", why, left_wait)
        if shutdown.requested():
            raise Interrupted(
                f"{shutdown.why()}: stopped while call {call.call_id} waited for approval; the wait resumes on restart"
            )
        expires = session.info.grant_expires_at_ms
        if expires is not None and now_ms() >= expires:
            return ApprovalOutcome(
                False, "grant_expired", "the grant this subagent runs under expired while it waited", wait
            )
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            timeout = session.info.approval_timeout_s
            return ApprovalOutcome(False, "timeout", f"no approval within {timeout:.0f} s", wait)
        if time.monotonic() - persisted >= PERSIST_SECONDS:
            wait = msgspec.structs.replace(wait, timeout_remaining_ms=int(left_s * 1000))
            session.restart.write(wait)
            persisted = time.monotonic()
        time.sleep(POLL_SECONDS)
