"""Doubt from a damaged log (§8.6 step 2): the ledger cross-checked against every other record that names calls.

A log cut at a record boundary looks whole on its own, and a call whose ``started`` was cut off looks as if it
never ran: resume would run it again. So the ledger is never the only witness. The records beside it say what it
once held: the store's mark of the last durable record, the trace, the approvals a person gave, the restart
checkpoint's pending calls; and inside the log, the assistant messages that asked for calls, the before-states of
the files they write, and the holes in its sequence. When any of them shows the log lost records, every call
they name whose ledger record is missing or behind ``started`` is treated as ``uncertain``: it may have run.
Never as not started; it is re-run only when its policy allows re-running after doubt, or a person says so.
A store's mark is the last checkpoint it indexed after an fsync: every ``started`` is written with a checkpoint
after it, so a cut that lost one leaves the log ending before the mark.

Pure: the runtime gathers the witnesses (``restart.doubt``); this module judges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from safepoint.core.ledger import NEVER_RAN
from safepoint.core.run_view import DOUBT_REASON, RunView
from safepoint.records import ToolCall, ToolLedgerEntry

DOUBT_DECISION_REASON = DOUBT_REASON  # defined where the view's fold notes the calls it marks


@dataclass(frozen=True)
class Witnesses:
    """What the records kept beside the log say about it."""

    log_mark: int = 0  # the highest log seq a record beside the log says was durable (0: none says)
    traced: frozenset[str] = frozenset()  # calls the trace saw start or finish
    approved: frozenset[str] = frozenset()  # calls a person approved or denied (the ledger had them planned)
    pending: tuple[str, ...] = ()  # the calls the restart checkpoint names as pending


@dataclass(frozen=True)
class Doubt:
    reasons: tuple[str, ...] = ()  # how the log is known to be damaged (empty: it is not)
    calls: Mapping[str, tuple[ToolCall, str]] = field(default_factory=dict)  # in doubt, input known: call, step_id
    lost: tuple[str, ...] = ()  # in doubt, and the log lost what they were (tool and input unknown)

    @property
    def damaged(self) -> bool:
        return bool(self.reasons)


def _asked(view: RunView) -> dict[str, tuple[ToolCall, int, str]]:
    """Every call an assistant message asked for, on any branch: call id -> (call, log seq, step id)."""
    steps = sorted((at.seq, at.checkpoint.step) for at in view.checkpoints)
    asked: dict[str, tuple[ToolCall, int, str]] = {}
    step, index = 1, 0
    for seq, message in sorted(view.message_records.items()):
        while index < len(steps) and steps[index][0] < seq:  # one walk over both: linear in the log
            step = steps[index][1] or 1
            index += 1
        for call in message.tool_calls:
            asked.setdefault(call.call_id, (call, seq, f"step_{step}"))
    return asked


def find_doubt(view: RunView, witnesses: Witnesses) -> Doubt:
    ledger = view.current  # read only here: not a copy of every entry
    reasons: list[str] = []
    tail_lost = witnesses.log_mark > view.last_seq
    if tail_lost:
        reasons.append(
            f"the log ends at record {view.last_seq} but record {witnesses.log_mark} was durable: records were cut "
            "off its end"
        )
    reasons += [
        f"record {a} is missing or unreadable" if a == b else f"records {a}..{b} are missing or unreadable"
        for a, b in view.lost_seqs
    ]

    def behind(call_id: str) -> bool:
        entry = ledger.get(call_id)
        return entry is None or entry.status in NEVER_RAN

    for call_id in sorted(witnesses.traced):
        if behind(call_id):
            reasons.append(f"the trace saw call {call_id} run, the ledger does not")
    for call_id in sorted(witnesses.approved):
        if call_id not in ledger:
            reasons.append(f"call {call_id} was approved or denied, the ledger does not know it")
    if not reasons:
        return Doubt()
    asked = _asked(view)  # every message and checkpoint: only for a log known damaged, never on an ordinary resume
    last_hole = max((b for _, b in view.lost_seqs), default=0)

    def lost_after(seq: int) -> bool:
        """Could a record of the call written after ``seq`` (its ``started``) be among the lost ones?"""
        return tail_lost or last_hole > seq

    named = [
        *ledger,
        *asked,
        *view.befores,  # a file tool's before-state is written with its planned record: it names the call too
        *sorted(witnesses.traced),
        *sorted(witnesses.approved),
        *witnesses.pending,
    ]
    calls: dict[str, tuple[ToolCall, str]] = {}
    lost: list[str] = []
    for call_id in dict.fromkeys(named):
        if not behind(call_id):
            continue
        entry = ledger.get(call_id)
        if entry is not None and entry.compensates is not None:
            continue  # safepoint's own calls are settled by the commands that made them
        if entry is None and call_id in view.abandoned:
            continue  # asked for on a branch a restore_session left behind: never to run on this one
        witnessed = call_id in witnesses.traced or (entry is None and call_id in witnesses.approved)
        if entry is not None:
            suspect = lost_after(view.ledger_seqs.get(call_id, 0))
        elif call_id in asked:
            suspect = lost_after(asked[call_id][1])
        else:
            # Named only by the restart checkpoint, which is written before the turn's message is durable: after
            # an ordinary crash its calls are in no record at all. Only a log cut short makes that a loss.
            suspect = tail_lost
        if not (witnessed or suspect):
            continue  # nothing was lost after it: it never started (the ordinary crash before `started`)
        if entry is not None:
            calls[call_id] = (ToolCall(call_id=call_id, tool=entry.tool_name, args=dict(entry.input)), entry.step_id)
        elif call_id in asked:
            call, _, step_id = asked[call_id]
            calls[call_id] = (call, step_id)
        else:
            lost.append(call_id)
    return Doubt(reasons=tuple(reasons), calls=calls, lost=tuple(lost))


def doubted_entry(entry: ToolLedgerEntry) -> ToolLedgerEntry:
    """The ledger state a doubtful call is given: ``started`` (it may have run), saying why."""
    return msgspec.structs.replace(entry, status="started", decision_reason=DOUBT_DECISION_REASON)


def assumed_entry(call: ToolCall, step_id: str, run_id: str) -> ToolLedgerEntry:
    """A doubtful call the ledger lost entirely, as a report shows it before its tool classifies it: the cautious
    defaults (an undeclared tool is assumed unsafe to repeat)."""
    return ToolLedgerEntry(
        call_id=call.call_id,
        step_id=step_id,
        tool_name=call.tool,
        input_hash="",
        status="started",
        risk_level="high",
        idempotency="non_idempotent",
        replay_policy="ask",
        run_id=run_id,
        input=call.args,
        decision_reason=DOUBT_DECISION_REASON,
    )
