"""A snapshot of a run's folded log (the seed's checkpoint index, §8.4): the ``ViewFold`` state after the log's
first records, so an open reads the snapshot and the records after it instead of the whole log and its fold.
Pure: a fold in, bytes out, and back.

What it keeps is everything the fold holds (the view so far and what the fold carries between records: the
current branch of the history, the ledger's latest states, the history's dictionaries, the damage it met), each
message once (a branch is a list of messages' log seqs; a checkpoint names its branch), and the log position it
covers (the last record folded: its seq, where its line ends, its checksum), which the store checks against the
log before the snapshot is used (``store.log_after``). The bytes are msgpack (rejected: JSON, three times slower
to decode for the same structs); their integrity is the store's frame (a checksum), their freshness the position.

A snapshot that does not decode, was made by another version of this module, or names a position the log no
longer holds is never trusted: the reader reads the whole log, as without one.
"""

from __future__ import annotations

import msgspec

from safepoint.core.history_codec import HistoryDecoder
from safepoint.core.run_view import CheckpointAt, RunView, ViewFold
from safepoint.errors import CorruptRecordError
from safepoint.protocol import ControlSeen, RecoveryReport, SubagentSpawned
from safepoint.records import (
    Blob,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    FileBeforeState,
    FilePatchEntry,
    LogProblem,
    LogRead,
    Message,
    MessageDictionary,
    Rewind,
    RunEvent,
    RunInfo,
    ToolLedgerEntry,
    WorkspaceState,
)

VERSION = 1


class SnapshotCheckpoint(msgspec.Struct, frozen=True, array_like=True):
    checkpoint: Checkpoint
    seq: int
    branch: int  # index in ``ViewSnapshot.branches``
    complete: bool
    why_incomplete: str


class ViewSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    run_id: str
    seq: int  # the log position covered: the last record folded ...
    offset: int  # ... where its line ends (file store) ...
    check: str  # ... and its line's checksum
    read_problems: int  # how many of ``problems`` the log's read reported (the rest the fold found)
    problems: list[LogProblem]
    messages: dict[int, Message]  # log seq -> message (``RunView.message_records``)
    branches: list[list[int]]  # each distinct history branch, as its messages' log seqs
    branch: int  # the current one
    ledger_entries: list[ToolLedgerEntry]
    current: dict[str, int]  # call id -> index of its latest state in ``ledger_entries``
    ledger_seqs: dict[str, int]
    patches: list[FilePatchEntry]
    checkpoints: list[SnapshotCheckpoint]
    decisions: dict[str, CallDecision]
    events: list[RunEvent]
    blobs: dict[str, Blob]
    conflicts: dict[str, CheckpointConflict]
    workspace_states: list[WorkspaceState]
    abandoned: dict[str, int]
    restores: list[Rewind]
    befores: dict[str, list[FileBeforeState]]
    spawned: dict[str, SubagentSpawned]
    recoveries: list[RecoveryReport]
    control_seen: dict[int, ControlSeen]
    context_epoch: int
    lost_seqs: list[tuple[int, int]]
    last_seq: int
    damaged_at: int | None
    expected: int
    dictionaries: dict[int, MessageDictionary]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ViewSnapshot)


def encode(fold: ViewFold, *, read_problems: int, offset: int, check: str) -> bytes:
    """The fold's state as bytes, covering the log up to its last record (at ``offset``, checksum ``check``)."""
    view = fold.view
    seq_of = {id(message): seq for seq, message in view.message_records.items()}
    branches: list[list[int]] = []
    branch_index: dict[int, int] = {}

    def branch_of(messages: list[Message]) -> int:
        key = id(messages)
        if key not in branch_index:
            branch_index[key] = len(branches)
            branches.append([seq_of[id(message)] for message in messages])
        return branch_index[key]

    checkpoints = [
        SnapshotCheckpoint(at.checkpoint, at.seq, branch_of(at.branch), at.complete, at.why_incomplete)
        for at in view.checkpoints
    ]
    entry_index = {id(entry): number for number, entry in enumerate(view.ledger_entries)}
    snapshot = ViewSnapshot(
        version=VERSION,
        run_id=view.info.run_id,
        seq=view.last_seq,
        offset=offset,
        check=check,
        read_problems=read_problems,
        problems=list(view.problems),
        messages=dict(view.message_records),
        branches=branches,
        branch=branch_of(fold.branch),
        ledger_entries=list(view.ledger_entries),
        current={call_id: entry_index[id(entry)] for call_id, entry in fold.current.items()},
        ledger_seqs=dict(view.ledger_seqs),
        patches=list(view.patches),
        checkpoints=checkpoints,
        decisions=dict(view.decisions),
        events=list(view.events),
        blobs=dict(view.blobs),
        conflicts=dict(view.conflicts),
        workspace_states=list(view.workspace_states),
        abandoned=dict(view.abandoned),
        restores=list(view.restores),
        befores={call_id: list(found) for call_id, found in view.befores.items()},
        spawned=dict(view.spawned),
        recoveries=list(view.recoveries),
        control_seen=dict(view.control_seen),
        context_epoch=view.context_epoch,
        lost_seqs=list(view.lost_seqs),
        last_seq=view.last_seq,
        damaged_at=fold.damaged_at,
        expected=fold.expected,
        dictionaries=dict(fold.dictionaries),
    )
    return _encoder.encode(snapshot)


def decode(data: bytes, info: RunInfo) -> ViewSnapshot | None:
    """The snapshot in ``data`` if it is one of this version for this run; None otherwise (never trusted)."""
    try:
        snapshot = _decoder.decode(data)
    except msgspec.DecodeError:
        return None
    if snapshot.version != VERSION or snapshot.run_id != info.run_id:
        return None
    return snapshot


def resume_fold(snapshot: ViewSnapshot, info: RunInfo, after: LogRead) -> tuple[ViewFold, int]:
    """The fold the whole log gives, from the snapshot and the log's read after its position (``after``); and how
    many of the view's problems the reads reported (for the next snapshot). Raises ``ValueError`` when the
    snapshot does not hold together (a message or entry it names is not in it): the caller reads the log."""
    messages = snapshot.messages
    try:
        branches = [[messages[seq] for seq in seqs] for seqs in snapshot.branches]
        current = {call_id: snapshot.ledger_entries[number] for call_id, number in snapshot.current.items()}
        branch = branches[snapshot.branch]
        checkpoints = [
            CheckpointAt(at.checkpoint, at.seq, branches[at.branch], at.complete, at.why_incomplete)
            for at in snapshot.checkpoints
        ]
    except (KeyError, IndexError) as exc:
        raise ValueError(f"the snapshot names what it does not hold ({exc})") from None
    # The read's problems first, then the fold's, as one whole read reports them.
    problems = [
        *snapshot.problems[: snapshot.read_problems],
        *after.problems,
        *snapshot.problems[snapshot.read_problems :],
    ]
    # The snapshot's own containers become the view's (decoded for this view alone: copies would only raise the
    # open's peak memory).
    view = RunView(
        info=info,
        history=branch,
        ledger_entries=snapshot.ledger_entries,
        patches=snapshot.patches,
        checkpoints=checkpoints,
        decisions=snapshot.decisions,
        events=snapshot.events,
        blobs=snapshot.blobs,
        conflicts=snapshot.conflicts,
        workspace_states=snapshot.workspace_states,
        abandoned=snapshot.abandoned,
        restores=snapshot.restores,
        befores=snapshot.befores,
        message_records=messages,
        problems=problems,
        last_seq=snapshot.last_seq,
        spawned=snapshot.spawned,
        recoveries=snapshot.recoveries,
        control_seen=snapshot.control_seen,
        context_epoch=snapshot.context_epoch,
        ledger_seqs=snapshot.ledger_seqs,
        lost_seqs=snapshot.lost_seqs,
    )
    fold = ViewFold(view)
    fold.damaged_at, fold.expected, fold.branch, fold.current = snapshot.damaged_at, snapshot.expected, branch, current
    fold.history = HistoryDecoder()
    for seq, dictionary in snapshot.dictionaries.items():
        try:
            fold.history.add_dictionary(seq, dictionary)
        except CorruptRecordError as exc:
            raise ValueError(str(exc)) from None
        fold.dictionaries[seq] = dictionary
    fold.feed(after.records)
    return fold, snapshot.read_problems + len(after.problems)
