"""The ledger machine: the tool ledger of one open run (§8.2), each change checked by ``core.ledger`` and staged in
the log. It plans, starts and finishes calls, records the decisions people and probes make about uncertain ones,
and counts attempts (a call's ``started`` entries): a decision settles one attempt, and a tool is told which
attempt it is (``ToolContext.attempt``).

It stages records only; the call runner decides when a group is committed (``started`` is durable before the tool
runs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from safepoint.core.hashing import idempotency_key, input_hash
from safepoint.core.ledger import FINISHED, change_of, check_transition, settle_after_crash
from safepoint.core.replay import ProbeResult, ReplayDecision, decide_replay
from safepoint.engine.log_writer import now
from safepoint.engine.tools import Tool
from safepoint.records import (
    CallDecision,
    LedgerDecision,
    LedgerStatus,
    ResultEncoding,
    ToolCall,
    ToolLedgerEntry,
)

Prober = Callable[[ToolLedgerEntry], ProbeResult | None]  # asks a tool's probe about an uncertain call


class LedgerMachine:
    def __init__(
        self,
        run_id: str,
        ledger: dict[str, ToolLedgerEntry],
        attempts: dict[str, int],
        decisions: dict[str, CallDecision],
        stage: Callable[[msgspec.Struct], int],
        open_calls: Iterable[str] | None = None,
    ) -> None:
        self.run_id = run_id
        self.entries = ledger  # the current entry of every call, in order of first appearance
        # the calls whose current state is not finished (``RunView.unsettled`` at open): what a resume looks at
        self.open: dict[str, None] = (
            dict.fromkeys(open_calls)
            if open_calls is not None
            else {c: None for c, e in ledger.items() if e.status not in FINISHED}
        )
        self.decisions = decisions
        self._attempts = attempts
        self._probes: dict[str, ProbeResult] = {}
        self._stage = stage  # the log writer's ``add``

    def get(self, call_id: str) -> ToolLedgerEntry | None:
        return self.entries.get(call_id)

    def record(self, entry: ToolLedgerEntry, *, logged_input: dict[str, Any] | None = None) -> ToolLedgerEntry:
        """Stage the call's next state; an invalid transition raises ``LedgerTransitionError`` (a bug)."""
        previous = self.entries.get(entry.call_id)
        check_transition(previous, entry)
        if entry.status == "started":
            self._attempts[entry.call_id] = self.attempts(entry.call_id) + 1
        self.entries[entry.call_id] = entry
        if entry.status in FINISHED:
            self.open.pop(entry.call_id, None)
        else:
            self.open[entry.call_id] = None
        if previous is not None:
            # A later state is logged as what changed (its input and the fields it keeps are not repeated: a
            # trivial call logged its whole entry three times); readers apply it (core.ledger.apply_change).
            self._stage(change_of(previous, entry))
            return entry
        logged = entry.input if logged_input is None else logged_input
        self._stage(entry if logged is entry.input else msgspec.structs.replace(entry, input=logged))
        return entry

    # the transitions the call runner makes -------------------------------------------------------------------
    def plan(self, tool: Tool, call: ToolCall, step_id: str, logged_input: dict[str, Any]) -> ToolLedgerEntry:
        found = tool.classify(call.args)
        planned = ToolLedgerEntry(
            call_id=call.call_id,
            step_id=step_id,
            tool_name=tool.name,
            input_hash=input_hash(call.args),
            status="planned",
            risk_level=found.risk_level,
            idempotency=found.idempotency,
            replay_policy=found.replay_policy,
            side_effects=found.side_effects,
            run_id=self.run_id,
            input=call.args,
            idempotency_key=idempotency_key(self.run_id, call.call_id),
            planned_at=now(),
            compensates=str(call.args.get("ledger_entry_id")) if tool.compensates else None,
        )
        return self.record(planned, logged_input=logged_input)

    def start(self, entry: ToolLedgerEntry) -> ToolLedgerEntry:
        return self.record(msgspec.structs.replace(entry, status="started", started_at=now()))

    def finish(
        self,
        entry: ToolLedgerEntry,
        status: LedgerStatus,
        result_ref: str | None,
        *,
        error: str | None = None,
        encoding: ResultEncoding | None = None,
        decision: LedgerDecision | None = None,
        reason: str | None = None,
    ) -> ToolLedgerEntry:
        return self.record(
            msgspec.structs.replace(
                entry,
                status=status,
                finished_at=now(),
                result_ref=result_ref,
                error=error,
                result_encoding=encoding,
                decision=decision or entry.decision,
                decision_reason=reason or entry.decision_reason,
            )
        )

    def settle(
        self, entry: ToolLedgerEntry, status: LedgerStatus, decision: LedgerDecision | None = None, reason: str = ""
    ) -> ToolLedgerEntry:
        """A state change without an outcome: approved, or an interrupted call made ``uncertain``."""
        if decision is None:
            return self.record(msgspec.structs.replace(entry, status=status))
        return self.record(msgspec.structs.replace(entry, status=status, decision=decision, decision_reason=reason))

    # decisions about uncertain calls ---------------------------------------------------------------------------
    def attempts(self, call_id: str) -> int:
        """How many times the call was started (a decision applies to one attempt only)."""
        return self._attempts.get(call_id, 0)

    def decide(self, call_id: str, decision: str, by: str = "user") -> None:
        record = CallDecision(
            call_id=call_id,
            decision=decision,  # type: ignore[arg-type]  # checked by the callers: --replay/--skip, a probe
            at=now(),
            by=by,
            attempt=self.attempts(call_id),
        )
        self.decisions[call_id] = record
        self._stage(record)

    def current_decision(self, call_id: str) -> CallDecision | None:
        decision = self.decisions.get(call_id)
        if decision is None or decision.attempt != self.attempts(call_id):
            return None  # made for an earlier attempt: a new crash needs a new decision
        return decision

    def probe(self, entry: ToolLedgerEntry, prober: Prober) -> ProbeResult | None:
        """Ask the tool's probe, once per resume, whether an uncertain call's effect already happened."""
        if entry.call_id in self._probes:
            return self._probes[entry.call_id]
        found = prober(entry)  # None: the call has no probe to ask (asked again: the tool may be registered later)
        if found is not None:
            self._probes[entry.call_id] = found
        return found

    def replay_decision(self, entry: ToolLedgerEntry, prober: Prober) -> ReplayDecision:
        settled = settle_after_crash(entry)
        decision = self.current_decision(entry.call_id)
        probe = self.probe(entry, prober) if decision is None and settled.status == "uncertain" else None
        return decide_replay(settled, decision=decision, probe=probe)
