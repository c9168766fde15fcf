"""A run as its log tells it: history, ledger, patches, checkpoints, decisions. Pure: records in, view out."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import msgspec

from safepoint.core.checkpoint_codec import expand as expand_checkpoint
from safepoint.core.history_codec import STORED_MESSAGE, HistoryDecoder, StoredMessage
from safepoint.core.large_values import has_references
from safepoint.core.ledger import FINISHED, apply_change
from safepoint.core.ledger_map import LedgerMap
from safepoint.core.message_list import MessageList
from safepoint.core.message_pack import PackedMessages
from safepoint.core.record_rows import decode as decode_row
from safepoint.core.record_rows import is_row, place_of
from safepoint.errors import CorruptRecordError
from safepoint.protocol import ControlSeen, RecoveryReport, SubagentSpawned
from safepoint.records import (
    RECORD_TYPES,
    Blob,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    FileBeforeState,
    FilePatchEntry,
    LedgerChange,
    LogProblem,
    LogRead,
    LogRecord,
    Message,
    MessageDictionary,
    Rewind,
    RunEvent,
    RunInfo,
    RunStatus,
    ToolLedgerEntry,
    WorkspaceState,
)

_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(kind_type) for kind, kind_type in RECORD_TYPES.items()
}
_decoders["message"] = STORED_MESSAGE  # plain or compressed (``core.history_codec``), made a Message below
# ``core.doubt.DOUBT_DECISION_REASON`` (that module reads views: importing it here would make a cycle)
DOUBT_REASON = "the run's log lost records after this call was asked for; it may have run"


@dataclass(frozen=True)
class CheckpointAt:
    """A checkpoint with what it needs to be restored: the history branch it points into."""

    checkpoint: Checkpoint
    seq: int
    branch: MessageList
    complete: bool
    why_incomplete: str = ""

    @property
    def history(self) -> MessageList:
        return self.branch[: self.checkpoint.history_len]


@dataclass(eq=False)
class RunView:
    info: RunInfo
    history: MessageList = field(default_factory=MessageList)
    ledger_entries: list[ToolLedgerEntry] = field(default_factory=list)
    patches: list[FilePatchEntry] = field(default_factory=list)
    checkpoints: list[CheckpointAt] = field(default_factory=list)
    decisions: dict[str, CallDecision] = field(default_factory=dict)
    events: list[RunEvent] = field(default_factory=list)
    blobs: dict[str, Blob] = field(default_factory=dict)
    conflicts: dict[str, CheckpointConflict] = field(default_factory=dict)  # path -> latest state
    workspace_states: list[WorkspaceState] = field(default_factory=list)  # git state at each session start
    abandoned: dict[str, int] = field(default_factory=dict)  # call id -> the branch (restore number) that left it
    restores: list[Rewind] = field(default_factory=list)
    befores: dict[str, list[FileBeforeState]] = field(default_factory=dict)  # call id -> paths it may change
    message_records: dict[int, Message] = field(default_factory=dict)  # log seq -> message (results point here)
    problems: list[LogProblem] = field(default_factory=list)
    last_seq: int = 0
    spawned: dict[str, SubagentSpawned] = field(default_factory=dict)  # call id -> the latest child it started
    recoveries: list[RecoveryReport] = field(default_factory=list)
    control_seen: dict[int, ControlSeen] = field(default_factory=dict)  # control position -> what was done
    context_epoch: int = 0  # context resets so far: a restart checkpoint written before one is void
    ledger_seqs: dict[str, int] = field(default_factory=dict)  # call id -> seq of its latest ledger record
    lost_seqs: list[tuple[int, int]] = field(default_factory=list)  # seq ranges the log skips (lost or unreadable)
    # What the fold keeps so a resume asks about the open state only (issue 10 §3), never every entry or message:
    current: dict[str, ToolLedgerEntry] = field(default_factory=dict)  # call id -> its current entry (``ledger``)
    attempt_counts: dict[str, int] = field(default_factory=dict)  # call id -> `started` states (``core.ledger``)
    unsettled: dict[str, int] = field(default_factory=dict)  # call id -> ordinal, while its state is not finished
    open_starts: dict[str, int] = field(default_factory=dict)  # unsettled call -> `started` since it last finished
    reopened: dict[str, dict[str, Any]] = field(default_factory=dict)  # a call open again -> input said since
    # step -> (ordinal, call id) of the calls not packed in a snapshot's ``LedgerMap`` (``recent_calls`` asks both)
    step_calls: dict[int, list[tuple[int, str]]] = field(default_factory=dict, compare=False)
    doubted: dict[str, None] = field(default_factory=dict)  # calls a state of which was marked doubted
    messages_len: int = 0  # the conversation's length over every branch: the highest message seq + 1
    ref_messages: dict[int, Message] = field(default_factory=dict)  # log seq -> a message holding blob references
    latest_complete: CheckpointAt | None = None
    after_latest: list[CheckpointAt] = field(default_factory=list)  # the checkpoints after it (incomplete ones)

    def __eq__(self, other: object) -> bool:
        """Field by field, whichever way each was read (a ``PastView`` equals the view the whole log gives)."""
        if not isinstance(other, RunView):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(RunView) if f.compare)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq is

    @property
    def assistant_turns(self) -> AssistantTurns:
        return AssistantTurns(self.history)

    @property
    def absorbed_submission_keys(self) -> tuple[str, ...]:
        return tuple(seen.key for seen in self.control_seen.values() if seen.type == "submission")

    @property
    def ledger(self) -> dict[str, ToolLedgerEntry]:
        """The current entry of every call (``core.ledger.fold`` of ``ledger_entries``, kept by the fold), in order
        of first appearance: a fresh dict each time (callers add to it)."""
        return self.current.copy()  # a snapshot's ``LedgerMap`` copies its changed part only

    @property
    def status(self) -> RunStatus:
        return self.events[-1].status if self.events else "running"

    def latest_complete_checkpoint(self) -> CheckpointAt | None:
        return self.latest_complete

    def checkpoint(self, checkpoint_id: str) -> CheckpointAt | None:
        latest = self.latest_complete
        if latest is not None and latest.checkpoint.checkpoint_id == checkpoint_id:
            return latest  # what a resume names: found without the whole list (``PastView`` reads it from the log)
        for at in self.checkpoints:
            if at.checkpoint.checkpoint_id == checkpoint_id:
                return at
        return None

    def add_checkpoint(self, at: CheckpointAt) -> None:
        self.checkpoints.append(at)

    def add_entry(self, entry: ToolLedgerEntry) -> None:
        self.ledger_entries.append(entry)

    def add_entries(self, entries: Iterable[ToolLedgerEntry]) -> None:
        """Entries a session recorded after the view was read, as the log now holds them (its later states)."""
        for entry in entries:
            note_entry(self, entry, self.current.get(entry.call_id))

    def recent_calls(self, first_step: int) -> list[str]:
        """The calls of steps ``first_step`` and later (by their step id's number), in order of first appearance."""
        return [call_id for _, call_id in sorted(self._from_step(first_step))]

    def _from_step(self, first_step: int) -> list[tuple[int, str]]:
        found = [pair for step, pairs in self.step_calls.items() if step >= first_step for pair in pairs]
        current = self.current
        if isinstance(current, LedgerMap):
            found += current.from_step(first_step)
            for call_id in current.shadowing():  # packed, then changed: its current entry says its step
                ordinal = current.ordinal(call_id)
                if ordinal is not None and step_of(current[call_id].step_id) >= first_step:
                    found.append((ordinal, call_id))
        return found

    def open_and_recent(self, first_step: int | None) -> list[str]:
        """The unsettled calls and, with ``first_step``, the calls of that step and later, in ledger order: what a
        resume plans (every other call is finished, so its recorded outcome is simply taken)."""
        found = dict(self.unsettled)
        if first_step is not None:
            found.update((call_id, ordinal) for ordinal, call_id in self._from_step(first_step))
        return sorted(found, key=found.__getitem__)


class AssistantTurns(Collection[int]):
    """The turns whose assistant message is on a branch, asked one turn at a time from the branch's end (the judge
    asks for the turn in flight: the last one), so a resume does not read every message of a branch held by
    reference (``core.message_list``). Turn numbers never go down along a branch (a rewind cuts the branch and
    the next turn restarts from the checkpoint it returns to), so the search stops at an earlier turn. Counting or
    listing them reads every message."""

    def __init__(self, history: Sequence[Message]) -> None:
        self._history = history

    def __contains__(self, turn: object) -> bool:
        if not isinstance(turn, int):
            return False
        for message in reversed(self._history):
            if message.role == "assistant" and message.turn is not None:
                if message.turn == turn:
                    return True
                if message.turn < turn:
                    return False
        return False

    def _all(self) -> frozenset[int]:
        return frozenset(m.turn for m in self._history if m.role == "assistant" and m.turn is not None)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._all()))

    def __len__(self) -> int:
        return len(self._all())


_STEP_NUMBER = re.compile(r"step_(\d+)$")


def note_entry(view: RunView, body: ToolLedgerEntry, previous: ToolLedgerEntry | None) -> None:
    """Fold one ledger state (a change already applied) into the view: its entries and what a resume asks."""
    view.add_entry(body)
    call_id = body.call_id
    ordinal = view.unsettled.get(call_id)
    if body.status in FINISHED:
        view.reopened.pop(call_id, None)
    elif previous is not None and (previous.status in FINISHED or call_id in view.reopened):
        # open again after it finished: what the summary keeps of it starts over (``run_summary.observe``)
        said = view.reopened.get(call_id)
        view.reopened[call_id] = body.input if said is None or body.input else said
    if previous is None:
        ordinal = len(view.current)
        view.step_calls.setdefault(step_of(body.step_id), []).append((ordinal, call_id))
    else:
        if not body.input and previous.input:
            body = msgspec.structs.replace(body, input=previous.input)  # as ``core.ledger.fold``
        if body.step_id != previous.step_id:  # its place moves to its new step's calls (rare: a step id changed)
            old, new = view.step_calls.get(step_of(previous.step_id), []), step_of(body.step_id)
            pair = next((found for found in old if found[1] == call_id), None)
            if pair is not None:
                old.remove(pair)
                bisect.insort(view.step_calls.setdefault(new, []), pair)
    view.current[call_id] = body
    if body.status == "started":
        view.attempt_counts[call_id] = view.attempt_counts.get(call_id, 0) + 1
        view.open_starts[call_id] = view.open_starts.get(call_id, 0) + 1
    if body.status in FINISHED:
        view.unsettled.pop(call_id, None)
        view.open_starts.pop(call_id, None)
    elif ordinal is None:  # a finished call open again: its place among the calls of its first step
        pairs = view.step_calls.get(step_of(body.step_id), [])
        place = next((n for n, found in pairs if found == call_id), None)
        if place is None and isinstance(view.current, LedgerMap):
            place = view.current.ordinal(call_id)  # packed in a snapshot
        view.unsettled[call_id] = len(view.current) if place is None else place
    else:
        view.unsettled[call_id] = ordinal
    if body.decision_reason == DOUBT_REASON:
        view.doubted[call_id] = None


def step_of(step_id: str) -> int:
    """A step id's number (``step_12``: 12), 0 when it has none (``core.resume.step_number``)."""
    digits = step_id[5:]
    if step_id[:5] == "step_" and digits.isdecimal():  # as the pattern reads it (``\d``: a decimal digit), unsearched
        return int(digits)
    match = _STEP_NUMBER.search(step_id)
    return int(match.group(1)) if match else 0


class PastView(RunView):
    """A view read from a snapshot (``core.view_snapshot``): its every ledger state and every checkpoint, which
    only what goes over the whole run asks for (``explain``, ``gc``, rollback, the review page), are read from
    the log when first asked (``past``: those of the records the snapshot covers), and what came after is kept
    until then. A resume never asks: it works from the open state the fold keeps."""

    def __init__(self, *, past: Callable[[], tuple[list[ToolLedgerEntry], list[CheckpointAt]]], **fields: Any) -> None:
        self._past = past
        self._entries: list[ToolLedgerEntry] | None = None
        self._checkpoints: list[CheckpointAt] | None = None
        self._entries_after: list[ToolLedgerEntry] = []
        self._checkpoints_after: list[CheckpointAt] = []
        self.keep_after = True  # False: a writer's fold, only encoded again (``store.view_index``): never read
        super().__init__(**fields)

    def _load(self) -> None:
        entries, checkpoints = self._past()
        self._entries = [*entries, *self._entries_after]
        self._checkpoints = [*checkpoints, *self._checkpoints_after]

    @property  # a field of RunView, read lazily here
    def ledger_entries(self) -> list[ToolLedgerEntry]:
        if self._entries is None:
            self._load()
        assert self._entries is not None
        return self._entries

    @ledger_entries.setter
    def ledger_entries(self, value: list[ToolLedgerEntry]) -> None:
        self._entries_after = list(value)  # the dataclass's ``__init__``: what came after the snapshot

    @property  # as ``ledger_entries``
    def checkpoints(self) -> list[CheckpointAt]:
        if self._checkpoints is None:
            self._load()
        assert self._checkpoints is not None
        return self._checkpoints

    @checkpoints.setter
    def checkpoints(self, value: list[CheckpointAt]) -> None:
        self._checkpoints_after = list(value)

    def add_entry(self, entry: ToolLedgerEntry) -> None:
        if self._entries is not None:
            self._entries.append(entry)
        elif self.keep_after:
            self._entries_after.append(entry)

    def add_checkpoint(self, at: CheckpointAt) -> None:
        if self._checkpoints is not None:
            self._checkpoints.append(at)
        elif self.keep_after:
            self._checkpoints_after.append(at)


def build_view(info: RunInfo, log: LogRead) -> RunView:
    """Fold the log (``ViewFold``): the whole log read at once."""
    fold = ViewFold(RunView(info=info, problems=list(log.problems)))
    fold.feed(log.records)
    return fold.finish()


class ViewFold:
    """The fold of a log into a ``RunView``, resumable: its state after a prefix of the log (the view so far and
    what the fold carries between records) is what a snapshot keeps (``core.view_snapshot``), and feeding it the
    records after that prefix gives the view the whole log gives.

    A checkpoint counts as complete only if no damaged record precedes it on its branch and the history it points
    into is whole. Records after a damaged one still count as evidence (a `started` stays started). A resume that
    routed around the damage rewinds to a sound checkpoint: checkpoints after that rewind are sound again."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.damaged_at: int | None = None  # the last good seq before a hole, while the current branch is tainted
        self.expected = 1
        self.branch = MessageList(view.message_records)  # the current branch, as the log's seqs
        self.packed_messages: PackedMessages | None = None  # what the last snapshot of this fold packed
        self.dictionaries: dict[int, MessageDictionary] = {}  # seq -> the history's dictionaries met so far
        self.history = HistoryDecoder()
        self.current = view.current  # call id -> its latest state (what a LedgerChange applies to)

    def finish(self) -> RunView:
        self.view.history = self.branch
        return self.view

    def feed(self, records: Iterable[LogRecord]) -> None:
        view, info = self.view, self.view.info
        damaged_at, expected, branch, history, current = (
            self.damaged_at,
            self.expected,
            self.branch,
            self.history,
            self.current,
        )
        for record in records:
            if record.seq != expected:
                if record.seq > expected:
                    view.lost_seqs.append((expected, record.seq - 1))
                if damaged_at is None:
                    damaged_at = expected - 1
            expected = record.seq + 1
            view.last_seq = record.seq
            decoder = _decoders.get(record.kind)
            if decoder is None:
                view.problems.append(
                    LogProblem(kind="corrupt", position=record.seq, detail=f"unknown record kind {record.kind!r}")
                )
                continue
            try:
                if is_row(record.kind, record.body):  # a ledger state, a checkpoint, a message as a row (since rows)
                    body = decode_row(record.kind, record.body, place_of(info, record.seq))
                else:
                    body = decoder.decode(record.body)
                if isinstance(body, StoredMessage):
                    body = history.message(body)
                elif isinstance(body, MessageDictionary):
                    history.add_dictionary(record.seq, body)
                    self.dictionaries[record.seq] = body
                    continue
            except (msgspec.DecodeError, CorruptRecordError) as exc:
                view.problems.append(LogProblem(kind="corrupt", position=record.seq, detail=f"{record.kind}: {exc}"))
                view.lost_seqs.append((record.seq, record.seq))
                continue
            if isinstance(body, Message):
                view.message_records[record.seq] = body
                view.messages_len = max(view.messages_len, body.seq + 1)
                if body.content_ref is not None or any(has_references(call.args) for call in body.tool_calls):
                    view.ref_messages[record.seq] = body  # what a resume reads back (``engine.large_values``)
                if body.seq != len(branch):
                    view.problems.append(
                        LogProblem(
                            kind="gap",
                            position=record.seq,
                            detail=f"message {body.seq} follows {len(branch)} messages; history has a hole",
                        )
                    )
                    branch = branch[: body.seq] if body.seq < len(branch) else branch
                    if body.seq > len(branch):
                        continue
                branch.append_logged(record.seq, body)
            elif isinstance(body, ToolLedgerEntry | LedgerChange):
                if isinstance(body, LedgerChange):
                    previous = current.get(body.call_id)
                    if previous is None:
                        detail = f"ledger change of call {body.call_id!r} without an earlier state of it"
                        view.problems.append(LogProblem(kind="corrupt", position=record.seq, detail=detail))
                        view.lost_seqs.append((record.seq, record.seq))
                        continue
                    body = apply_change(previous, body)
                note_entry(view, body, current.get(body.call_id))
                view.ledger_seqs[body.call_id] = record.seq
            elif isinstance(body, FilePatchEntry):
                view.patches.append(body)
            elif isinstance(body, Checkpoint):
                body = expand_checkpoint(body, info.run_id, record.seq)  # the compact form on disk, whole again
                complete, why = True, ""
                if damaged_at is not None:
                    complete, why = False, f"a damaged record precedes it (after seq {damaged_at})"
                elif body.history_len > len(branch):
                    complete, why = False, f"points at {body.history_len} messages but only {len(branch)} exist"
                at = CheckpointAt(body, record.seq, branch, complete, why)
                view.add_checkpoint(at)
                if complete:
                    view.latest_complete, view.after_latest = at, []
                else:
                    view.after_latest.append(at)
            elif isinstance(body, Blob):
                view.blobs[body.hash] = body
            elif isinstance(body, CallDecision):
                view.decisions[body.call_id] = body
            elif isinstance(body, RunEvent):
                view.events.append(body)
            elif isinstance(body, FileBeforeState):
                view.befores.setdefault(body.tool_call_id, []).append(body)
            elif isinstance(body, WorkspaceState):
                view.workspace_states.append(body)
            elif isinstance(body, CheckpointConflict):
                view.conflicts[body.path] = body
            elif isinstance(body, SubagentSpawned):
                view.spawned[body.call_id] = body
            elif isinstance(body, RecoveryReport):
                view.recoveries.append(body)
            elif isinstance(body, ControlSeen):
                view.control_seen[body.position] = body
            elif isinstance(body, Rewind):
                branch = branch[: body.history_len]
                if body.reason == "context_reset":
                    view.context_epoch += 1
                if body.reason == "restore_session":
                    view.restores.append(body)
                    for call_id in body.abandoned:
                        view.abandoned.setdefault(call_id, len(view.restores))
                if damaged_at is not None:  # only then is the target looked up (a snapshot's view reads the list)
                    target = view.checkpoint(body.checkpoint_id) if body.checkpoint_id else None
                    sound = (target is None and body.history_len == 0) or (target is not None and target.complete)
                    if sound:
                        damaged_at = None  # rebuilt from a sound point: what follows does not depend on the damage
        self.damaged_at, self.expected, self.branch = damaged_at, expected, branch
        self.view.history = branch
