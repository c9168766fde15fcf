"""A run as its log tells it: history, ledger, patches, checkpoints, decisions. Pure: records in, view out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from safepoint.core.checkpoint_codec import expand as expand_checkpoint
from safepoint.core.history_codec import STORED_MESSAGE, HistoryDecoder, StoredMessage
from safepoint.core.ledger import apply_change, fold
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


@dataclass(frozen=True)
class CheckpointAt:
    """A checkpoint with what it needs to be restored: the history branch it points into."""

    checkpoint: Checkpoint
    seq: int
    branch: list[Message]
    complete: bool
    why_incomplete: str = ""

    @property
    def history(self) -> list[Message]:
        return self.branch[: self.checkpoint.history_len]


@dataclass
class RunView:
    info: RunInfo
    history: list[Message] = field(default_factory=list)
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
    _folded: tuple[int, dict[str, ToolLedgerEntry]] | None = field(default=None, repr=False, compare=False)

    @property
    def assistant_turns(self) -> frozenset[int]:
        return frozenset(m.turn for m in self.history if m.role == "assistant" and m.turn is not None)

    @property
    def absorbed_submission_keys(self) -> tuple[str, ...]:
        return tuple(seen.key for seen in self.control_seen.values() if seen.type == "submission")

    @property
    def ledger(self) -> dict[str, ToolLedgerEntry]:
        """The current entry of every call: folded once per length of ``ledger_entries`` (entries are only ever
        appended), a fresh dict each time (callers add to it)."""
        cached = self._folded
        if cached is None or cached[0] != len(self.ledger_entries):
            cached = self._folded = (len(self.ledger_entries), fold(self.ledger_entries))
        return dict(cached[1])

    @property
    def status(self) -> RunStatus:
        return self.events[-1].status if self.events else "running"

    def latest_complete_checkpoint(self) -> CheckpointAt | None:
        for at in reversed(self.checkpoints):
            if at.complete:
                return at
        return None

    def checkpoint(self, checkpoint_id: str) -> CheckpointAt | None:
        for at in self.checkpoints:
            if at.checkpoint.checkpoint_id == checkpoint_id:
                return at
        return None


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
        self.branch: list[Message] = []
        self.dictionaries: dict[int, MessageDictionary] = {}  # seq -> the history's dictionaries met so far
        self.history = HistoryDecoder()
        self.current: dict[str, ToolLedgerEntry] = {}  # call id -> its latest state (what a LedgerChange applies to)

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
                branch.append(body)
            elif isinstance(body, ToolLedgerEntry | LedgerChange):
                if isinstance(body, LedgerChange):
                    previous = current.get(body.call_id)
                    if previous is None:
                        detail = f"ledger change of call {body.call_id!r} without an earlier state of it"
                        view.problems.append(LogProblem(kind="corrupt", position=record.seq, detail=detail))
                        view.lost_seqs.append((record.seq, record.seq))
                        continue
                    body = apply_change(previous, body)
                current[body.call_id] = body
                view.ledger_entries.append(body)
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
                view.checkpoints.append(CheckpointAt(body, record.seq, branch, complete, why))
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
                target = view.checkpoint(body.checkpoint_id) if body.checkpoint_id else None
                sound = (target is None and body.history_len == 0) or (target is not None and target.complete)
                if damaged_at is not None and sound:
                    damaged_at = None  # rebuilt from a sound point: what follows does not depend on the damage
        self.damaged_at, self.expected, self.branch = damaged_at, expected, branch
        self.view.history = branch
