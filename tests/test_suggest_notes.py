"""What the model is told of a call a person denied while its agent was down: it did not run (the recovery note
said "it has run now and failed" of a call that never ran, which reads as a failed send, not a refused one)."""

from __future__ import annotations

import msgspec

from safepoint.core.note import _outcome
from safepoint.core.replay import ReplayDecision
from safepoint.core.resume import CallReport
from safepoint.records import ToolLedgerEntry

DENIED = ToolLedgerEntry(
    call_id="call_1",
    step_id="step_1",
    tool_name="send_notification",
    input_hash="h",
    status="failed",
    risk_level="high",
    idempotency="non_idempotent",
    replay_policy="never",
    error="not run: denied by user",
)


def entry(**changed: object) -> ToolLedgerEntry:
    return msgspec.structs.replace(DENIED, **changed)


def test_a_call_denied_before_it_ran_is_told_it_did_not_run():
    said = _outcome(CallReport(entry(), ReplayDecision(action="run", replayable=True, why="")), {"call_1": "denied"})
    assert "did not run" in said and "has run now" not in said


def test_a_call_that_ran_after_the_resume_is_told_so():
    ran = entry(status="succeeded", started_at="2026-12-01T00:00:00+00:00", error=None)
    said = _outcome(CallReport(ran, ReplayDecision(action="run", replayable=True, why="")), {})
    assert "it has run now and succeeded" in said
