"""What to do with each tool call found in the ledger after a crash (§8.6 steps 5-6, §8.7).

The rule, in order: a call that never started runs normally; a finished call's outcome is taken from the ledger
and never re-run; an ``uncertain`` call is re-run only when a person asked for it, when its probe shows the effect
did not happen, or when its idempotency and replay policy *for that input* allow it. High-risk calls are never
re-run automatically, whatever their policy.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from safepoint.core.ledger import FINISHED, NEVER_RAN
from safepoint.records import CallDecision, ToolLedgerEntry

ReplayAction = Literal["run", "take_outcome", "rerun", "wait_decision", "report_uncertain", "skip"]
ProbeResult = Literal["done", "not_done", "unknown"]


class ReplayDecision(msgspec.Struct, frozen=True, kw_only=True):
    action: ReplayAction
    replayable: bool  # could this call, with this input, be re-run without asking anyone if it were uncertain?
    why: str


def auto_replayable(entry: ToolLedgerEntry) -> bool:
    """The call's own property (idempotency, policy and risk for its input), whatever its status now."""
    return entry.replay_policy == "auto" and entry.idempotency != "non_idempotent" and entry.risk_level != "high"


def decide_replay(
    entry: ToolLedgerEntry | None,
    *,
    decision: CallDecision | None = None,
    probe: ProbeResult | None = None,
) -> ReplayDecision:
    if entry is None or entry.status in NEVER_RAN:
        replayable = entry is None or auto_replayable(entry)
        return ReplayDecision(action="run", replayable=replayable, why="never started (no `started` in the ledger)")
    replayable = auto_replayable(entry)

    def outcome(action: ReplayAction, why: str) -> ReplayDecision:
        return ReplayDecision(action=action, replayable=replayable, why=why)

    if entry.status in FINISHED:
        return outcome("take_outcome", f"{entry.status}: its recorded outcome is used, it is not run again")
    label = f"{entry.idempotency}/{entry.replay_policy}, risk {entry.risk_level}"
    if decision is not None and decision.decision == "replay":
        return outcome("rerun", f"uncertain; {decision.by} chose to replay it")
    if decision is not None and decision.decision == "skip":
        return outcome("skip", f"uncertain; {decision.by} chose not to replay it")
    if probe == "done":
        return outcome("take_outcome", "uncertain; its probe shows the effect already happened")
    if probe == "not_done":
        return outcome("rerun", "uncertain; its probe shows the effect did not happen")
    if probe == "unknown" and entry.replay_policy != "never":
        # The probe could not verify the call's condition (someone changed what it acts on): a person decides.
        return outcome("wait_decision", f"uncertain, and its probe cannot tell ({label}): --replay or --skip")
    if entry.replay_policy == "never":
        return outcome(
            "report_uncertain",
            f"uncertain and not replayable ({label}): not re-run; the model is told the outcome is unknown",
        )
    if replayable:
        return outcome("rerun", f"uncertain but safe to repeat ({label})")
    return outcome("wait_decision", f"uncertain and may have taken effect ({label}): waiting for --replay or --skip")
