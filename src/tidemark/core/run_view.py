"""A run as its log tells it: history, ledger, patches, checkpoints, decisions. Pure: records in, view out."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from tidemark.core.ledger import fold
from tidemark.records import (
    RECORD_TYPES,
    Blob,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    FileBeforeState,
    FilePatchEntry,
    Message,
    Rewind,
    RunEvent,
    RunInfo,
    RunStatus,
    ToolLedgerEntry,
)
from tidemark.store.base import LogProblem, LogRead

_decoders = {kind: msgspec.json.Decoder(kind_type) for kind, kind_type in RECORD_TYPES.items()}


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
    befores: dict[str, list[FileBeforeState]] = field(default_factory=dict)  # call id -> paths it may change
    message_records: dict[int, Message] = field(default_factory=dict)  # log seq -> message (results point here)
    problems: list[LogProblem] = field(default_factory=list)
    last_seq: int = 0

    @property
    def ledger(self) -> dict[str, ToolLedgerEntry]:
        return fold(self.ledger_entries)

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
    """Fold the log. A checkpoint counts as complete only if no damaged record precedes it and the history it
    points into is whole; records after a damaged one still count as evidence (a `started` stays started)."""
    view = RunView(info=info, problems=list(log.problems))
    first_damage = _first_damage_seq(log)
    branch: list[Message] = []
    for record in log.records:
        view.last_seq = record.seq
        decoder = _decoders.get(record.kind)
        if decoder is None:
            view.problems.append(
                LogProblem(kind="corrupt", position=record.seq, detail=f"unknown record kind {record.kind!r}")
            )
            continue
        try:
            body = decoder.decode(record.body)
        except msgspec.DecodeError as exc:
            view.problems.append(LogProblem(kind="corrupt", position=record.seq, detail=f"{record.kind}: {exc}"))
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
        elif isinstance(body, ToolLedgerEntry):
            view.ledger_entries.append(body)
        elif isinstance(body, FilePatchEntry):
            view.patches.append(body)
        elif isinstance(body, Checkpoint):
            complete, why = True, ""
            if first_damage is not None and record.seq > first_damage:
                complete, why = False, f"a damaged record precedes it (seq {first_damage})"
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
        elif isinstance(body, CheckpointConflict):
            view.conflicts[body.path] = body
        elif isinstance(body, Rewind):
            branch = branch[: body.history_len]
    view.history = branch
    return view


def _first_damage_seq(log: LogRead) -> int | None:
    """The last sequence number before the first hole in the log, if there is one.

    A record lost in the middle (corrupt line) shows as a hole in the sequence; a torn or corrupt tail leaves
    no record after it, so it makes no checkpoint incomplete.
    """
    expected = 1
    for record in log.records:
        if record.seq != expected:
            return expected - 1
        expected = record.seq + 1
    return None
