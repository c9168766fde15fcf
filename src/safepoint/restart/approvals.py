"""Waiting for a person to approve a high-risk call (seed 003 §2.1, ``RuntimeRestartToolApprovalWait``).

The wait is durable: its restart checkpoint is written when it begins and refreshed with the time left, so a
restart continues it with the remaining timeout instead of a fresh one (or none). An approval counts only for the
input it was given for: ``safepoint approve`` reads the call's ``input_hash`` from the ledger and the wait checks it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from safepoint.engine import failpoints, shutdown
from safepoint.errors import Interrupted
from safepoint.protocol import Approval, RuntimeRestartToolApprovalWait
from safepoint.records import ToolCall, ToolLedgerEntry
from safepoint.restart import stops
from safepoint.restart.checkpoint import now_ms
from safepoint.restart.judge import controls, mark_seen

if TYPE_CHECKING:
    from safepoint.engine.session import RunSession

POLL_SECONDS = 0.05
PERSIST_SECONDS = 1.0  # how often the time left is written: a restart loses at most this much of the wait


@dataclass(frozen=True)
class AwaitApproval:
    """A request, from the call driver, to wait for a person's decision on ``entry`` before it runs."""

    call: ToolCall
    entry: ToolLedgerEntry


@dataclass(frozen=True)
class ApprovalOutcome:
    approved: bool
    why: str
    wait: RuntimeRestartToolApprovalWait


def needs_approval(session: RunSession, entry: ToolLedgerEntry, tool_needs: bool) -> bool:
    if entry.status != "planned":
        return False  # approved already (durably), or it has run: never asked twice
    return tool_needs or (session.info.approval == "high" and entry.risk_level == "high")


def wait_for_approval(session: RunSession, request: AwaitApproval) -> ApprovalOutcome:
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
            return ApprovalOutcome(record.approved, why, msgspec.structs.replace(wait, timeout_remaining_ms=left))
        if shutdown.requested():
            raise Interrupted(f"stopped while call {call.call_id} waited for approval; the wait resumes on restart")
        expires = session.info.grant_expires_at_ms
        if expires is not None and now_ms() >= expires:
            return ApprovalOutcome(False, "the grant this subagent runs under expired while it waited", wait)
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            timeout = session.info.approval_timeout_s
            return ApprovalOutcome(False, f"no approval within {timeout:.0f} s", wait)
        if time.monotonic() - persisted >= PERSIST_SECONDS:
            wait = msgspec.structs.replace(wait, timeout_remaining_ms=int(left_s * 1000))
            session.restart.write(wait)
            persisted = time.monotonic()
        time.sleep(POLL_SECONDS)
