"""A run's summary: what ``status`` shows of it, kept beside its log so ``status`` need not read the log.

The summary is folded from the records a session stages (``SummaryFold.observe``), the same way ``build_view``
folds them from the log, and is written by the store with the log group it describes (``Store.append(...,
summary=...)``), stamped with the log's end. It is a cache, never a source of truth: a store hands it back only
while the log still ends where the stamp says (``Store.read_summary``), and whoever finds none, or a damaged or
stale one, reads the log as before. So a writer that appends without a summary (a restart's cleanup, a repair)
simply makes the next reader go to the log.

Only what is cheap to keep is kept: the run's status, its step and latest complete checkpoint, how many calls it
made, and the calls a resume would stop and ask a person about were its owner to die now (the ``started`` and
``uncertain`` ones, which are few at any time: finished calls never wait). A run whose log was damaged when the
session opened it folds nothing (its checkpoints' completeness depends on the damage: ``build_view`` decides
that), so its status is always read from its log.

Pure: records in, summary out.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from safepoint.core.ledger import FINISHED, apply_change, settle_after_crash
from safepoint.core.replay import decide_replay
from safepoint.core.resume import is_internal
from safepoint.core.run_view import RunView
from safepoint.protocol import RecoveryReport, ReplayForbidden
from safepoint.records import (
    CallDecision,
    Checkpoint,
    LedgerChange,
    Message,
    Rewind,
    RunEvent,
    RunStatus,
    ToolLedgerEntry,
)

SUMMARY_VERSION = 1
_OPEN = frozenset({"started", "uncertain"})  # the only statuses a resume may stop and ask about


class RunSummaryRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``status`` shows of a run, as of log record ``last_seq``."""

    version: int = SUMMARY_VERSION
    last_seq: int
    status: RunStatus = "running"  # the last RunEvent's (``running`` before the first)
    step: int = 0  # of the latest complete checkpoint
    checkpoint_id: str | None = None  # the latest complete checkpoint
    calls: int = 0  # distinct calls in the ledger
    problems: int = 0
    waiting: tuple[str, ...] = ()  # calls a resume would ask about, were the owner to die now
    closed_reason: str | None = None  # the last ``closed`` recovery's ReplayForbidden reason, if any
    closed_detail: str = ""
    at: str = ""  # when the group it describes was written


summary_encoder = msgspec.json.Encoder()
summary_decoder = msgspec.json.Decoder(RunSummaryRecord)


def decode_summary(data: bytes | None) -> RunSummaryRecord | None:
    """A stored summary, or None when there is none or it is not one this code reads (then: the log)."""
    if data is None:
        return None
    try:
        found = summary_decoder.decode(data)
    except msgspec.DecodeError:
        return None
    return found if found.version == SUMMARY_VERSION else None


class SummaryFold:
    """The summary's state, kept up to date with every record staged. ``enabled`` is false for a run whose log was
    damaged when opened, and after a refused append (what was staged and what is stored may then differ)."""

    def __init__(self) -> None:
        self.enabled = True
        self.status: RunStatus = "running"
        self.step = 0
        self.checkpoint_id: str | None = None
        self.known: Mapping[str, object] = {}  # the calls of the view it started from (``from_view``) ...
        self.known_count = 0  # ... how many they were then ...
        self.call_ids: set[str] = set()  # ... the calls observed since ...
        self.new_calls = 0  # ... and how many of those the view did not know (counted once each, as observed)
        self.problems = 0
        self.live: dict[str, ToolLedgerEntry] = {}  # call id -> current entry, until it is finished
        self.started: dict[str, int] = {}  # call id -> `started` entries so far (unfinished calls only)
        self.decisions: dict[str, CallDecision] = {}  # unfinished calls only
        self.closed_reason: str | None = None
        self.closed_detail = ""
        self.branch_len = 0  # messages on the current branch: a checkpoint pointing past them is not complete

    @classmethod
    def from_view(cls, view: RunView) -> SummaryFold:
        """From what the view's fold keeps of the open calls (``RunView.unsettled``), not from every entry: a call
        that finished is only counted."""
        fold = cls()
        if view.problems or view.lost_seqs:
            fold.enabled = False
            return fold
        fold.status = view.status
        fold.branch_len = len(view.history)
        latest = view.latest_complete_checkpoint()
        if latest is not None:
            fold.step, fold.checkpoint_id = latest.checkpoint.step, latest.checkpoint.checkpoint_id
        fold.known, fold.known_count = view.current, len(view.current)
        for call_id in view.unsettled:
            entry = view.current[call_id]
            if call_id in view.reopened:  # finished once: the summary's entry starts over from its reopening
                entry = msgspec.structs.replace(entry, input=view.reopened[call_id])
            if call_id in view.open_starts:
                fold.started[call_id] = view.open_starts[call_id]
            fold.live[call_id] = entry
        for decision in view.decisions.values():
            fold.observe(decision)
        for report in view.recoveries:
            fold.observe(report)
        return fold

    def observe(self, body: msgspec.Struct) -> None:
        """Fold one staged record (every kind may be given; the ones the summary does not keep are ignored)."""
        if isinstance(body, LedgerChange):
            previous = self.live.get(body.call_id)
            if previous is None:  # a change of a call it does not know: ``build_view`` reports it, so must the log
                self.enabled = False
                return
            body = apply_change(previous, body)
        if isinstance(body, ToolLedgerEntry):
            call_id = body.call_id
            if call_id not in self.call_ids:
                self.call_ids.add(call_id)
                self.new_calls += call_id not in self.known
            previous = self.live.get(call_id)
            if previous is not None and not body.input and previous.input:
                body = msgspec.structs.replace(body, input=previous.input)  # as ``core.ledger.fold``
            if body.status == "started":
                self.started[call_id] = self.started.get(call_id, 0) + 1
            if body.status in FINISHED:
                self.live.pop(call_id, None)
                self.started.pop(call_id, None)
                self.decisions.pop(call_id, None)
            else:
                self.live[call_id] = body
        elif isinstance(body, Message):
            if body.seq != self.branch_len:
                self.enabled = False  # a hole in the history: ``build_view`` reports it, so must the log
            self.branch_len += 1
        elif isinstance(body, Rewind):
            self.branch_len = min(self.branch_len, body.history_len)
        elif isinstance(body, Checkpoint):
            if body.history_len <= self.branch_len:  # else incomplete, as ``build_view`` judges it
                self.step, self.checkpoint_id = body.step, body.checkpoint_id
        elif isinstance(body, RunEvent):
            self.status = body.status
        elif isinstance(body, CallDecision):
            if body.call_id in self.live:
                self.decisions[body.call_id] = body
        elif isinstance(body, RecoveryReport) and body.action == "closed":
            forbidden = isinstance(body.disposition, ReplayForbidden)
            self.closed_reason = body.disposition.reason if isinstance(body.disposition, ReplayForbidden) else None
            self.closed_detail = body.detail if forbidden else ""

    def waiting(self) -> tuple[str, ...]:
        """The calls ``plan_resume`` would put in ``needs_decision`` for this run now (without probes)."""
        found = []
        for call_id, entry in self.live.items():
            if entry.status not in _OPEN:
                continue
            decision = self.decisions.get(call_id)
            if decision is not None and decision.attempt != self.started.get(call_id, 0):
                decision = None  # made for an earlier attempt
            action = decide_replay(settle_after_crash(entry), decision=decision).action
            if action == "wait_decision" and not is_internal(entry):
                found.append(call_id)
        return tuple(found)

    def snapshot(self, last_seq: int, at: str) -> RunSummaryRecord:
        return RunSummaryRecord(
            last_seq=last_seq,
            status=self.status,
            step=self.step,
            checkpoint_id=self.checkpoint_id,
            calls=self.known_count + self.new_calls,
            problems=self.problems,
            waiting=self.waiting(),
            closed_reason=self.closed_reason,
            closed_detail=self.closed_detail,
            at=at,
        )
