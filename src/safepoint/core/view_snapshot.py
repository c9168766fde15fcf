"""A snapshot of a run's folded log (the seed's checkpoint index, §8.4): the ``ViewFold`` state after the log's
first records, so an open reads the snapshot and the records after it instead of the whole log and its fold.
Pure: a fold in, bytes out, and back.

What it keeps is what the fold carries between records and what a resume asks (issue 10 §3): the current entry of
every call (not each of its states), the open calls, the attempts, each step's calls, the latest complete
checkpoint and the ones after it, the current branch of the history, the history's dictionaries, the damage it
met; each message once (a branch is a list of messages' log seqs). Not kept: every ledger state and every
checkpoint, which only what goes over the whole run asks for (``explain``, ``gc``, rollback): the view it gives
(``PastView``) reads those from the log when first asked. And the log position it covers (the last record folded:
its seq, where its line ends, its checksum), which the store checks against the log before the snapshot is used
(``store.log_after``). The bytes are msgpack (rejected: JSON, three times slower to decode for the same structs);
their integrity is the store's frame (a checksum), their freshness the position.

A snapshot that does not decode, was made by another version of this module, or names a position the log no
longer holds is never trusted: the reader reads the whole log, as without one.
"""

from __future__ import annotations

import array
import functools
import itertools
from collections.abc import Callable
from typing import Any

import msgspec

from safepoint.core.history_codec import HistoryDecoder
from safepoint.core.ledger_map import LedgerMap, Row, Settled, pack
from safepoint.core.message_list import MessageList
from safepoint.core.message_pack import MessageMap, PackedMessages, pack_messages
from safepoint.core.run_view import CheckpointAt, PastView, RunView, ViewFold, step_of
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
    MessageDictionary,
    Rewind,
    RunEvent,
    RunInfo,
    ToolLedgerEntry,
    WorkspaceState,
)

VERSION = 4  # 1 kept every ledger state and every checkpoint; 2 every call's entry as an object; 3 every message

# every ledger state and checkpoint up to a seq (the snapshot's), of a fold up to another (the view's last)
Past = Callable[[int, int], tuple[list[ToolLedgerEntry], list[CheckpointAt]]]


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
    messages: PackedMessages  # every message the log holds, by log seq (``RunView.message_records``)
    branches: list[bytes]  # each distinct history branch named here, as its messages' log seqs (uint64)
    branch: int  # the current one
    settled: Settled  # the current entry of each finished call, packed (``core.ledger_map``)
    open_entries: list[ToolLedgerEntry]  # the current entry of each other call (their places: ``unsettled``)
    open_attempts: dict[str, int]  # the open calls' (the others' are packed in ``settled``)
    open_seqs: dict[str, int]
    unsettled: dict[str, int]
    open_starts: dict[str, int]
    reopened: dict[str, dict[str, Any]]
    doubted: list[str]
    messages_len: int
    ref_messages: list[int]  # log seqs, in ``messages``
    latest_complete: SnapshotCheckpoint | None
    after_latest: list[SnapshotCheckpoint]
    patches: list[FilePatchEntry]
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
    branches: list[bytes] = []
    branch_index: dict[int, int] = {}

    def branch_of(messages: MessageList) -> int:
        key = id(messages)
        if key not in branch_index:
            seqs = messages.logged_seqs()
            if seqs is None:  # (a fold's branches are its log's seqs: only a session's hold messages of their own)
                raise ValueError("a branch holds messages the log does not")
            branch_index[key] = len(branches)
            branches.append(seqs.tobytes())
        return branch_index[key]

    def kept(at: CheckpointAt) -> SnapshotCheckpoint:
        return SnapshotCheckpoint(at.checkpoint, at.seq, branch_of(at.branch), at.complete, at.why_incomplete)

    latest = view.latest_complete
    settled = settle(fold)
    snapshot = ViewSnapshot(
        version=VERSION,
        run_id=view.info.run_id,
        seq=view.last_seq,
        offset=offset,
        check=check,
        read_problems=read_problems,
        problems=list(view.problems),
        messages=_packed_messages(fold),
        branch=branch_of(fold.branch),
        branches=branches,
        settled=settled,
        open_entries=[view.current[call_id] for call_id in view.unsettled],
        open_attempts={c: view.attempt_counts[c] for c in view.unsettled if c in view.attempt_counts},
        open_seqs={c: view.ledger_seqs[c] for c in view.unsettled if c in view.ledger_seqs},
        unsettled=view.unsettled,
        open_starts=view.open_starts,
        reopened=view.reopened,
        doubted=list(view.doubted),
        messages_len=view.messages_len,
        ref_messages=list(view.ref_messages),
        latest_complete=kept(latest) if latest is not None else None,
        after_latest=[kept(at) for at in view.after_latest],
        patches=view.patches,
        decisions=view.decisions,
        events=view.events,
        blobs=view.blobs,
        conflicts=view.conflicts,
        workspace_states=view.workspace_states,
        abandoned=view.abandoned,
        restores=view.restores,
        befores=view.befores,
        spawned=view.spawned,
        recoveries=view.recoveries,
        control_seen=view.control_seen,
        context_epoch=view.context_epoch,
        lost_seqs=view.lost_seqs,
        last_seq=view.last_seq,
        damaged_at=fold.damaged_at,
        expected=fold.expected,
        dictionaries=fold.dictionaries,
    )
    return _encoder.encode(snapshot)


def _packed_messages(fold: ViewFold) -> PackedMessages:
    """Every message of the fold packed: what its last snapshot packed (or the snapshot it was read from), with
    the messages logged since appended, only those encoded (a writer's snapshot every 2,000 records does not
    encode 50,000 messages again)."""
    records = fold.view.message_records
    base = fold.packed_messages
    if base is None:
        base = records.packed if isinstance(records, MessageMap) else PackedMessages()
    seqs = memoryview(base.seqs).cast("Q")
    last = int(seqs[-1]) if len(seqs) else -1
    if isinstance(records, MessageMap):
        new = [(seq, message) for seq, message in records.added() if seq > last]
    else:  # log order: the new ones are at the end
        new = list(itertools.takewhile(lambda item: item[0] > last, reversed(records.items())))[::-1]
    fold.packed_messages = pack_messages(new, base)
    return fold.packed_messages


def settle(fold: ViewFold) -> Settled:
    """The finished calls packed (their entries, attempts, latest records' seqs, steps); the fold's ledger
    becomes a ``LedgerMap`` over them (the same calls and values: only how they are held changes), so a writer's
    next snapshot packs only the calls that finished since, and holds no object per finished call meanwhile."""
    view = fold.view
    current, unsettled = view.current, view.unsettled

    def row(ordinal: int, entry: ToolLedgerEntry) -> Row:
        call_id = entry.call_id
        seq = view.ledger_seqs.get(call_id, 0)
        return Row(ordinal, entry, view.attempt_counts.get(call_id, 0), seq, step_of(entry.step_id))

    if isinstance(current, LedgerMap) and not current.shadowing():
        added = [
            row(ordinal, entry)
            for call_id, entry in current.changed().items()
            if call_id not in unsettled and (ordinal := current.ordinal(call_id)) is not None
        ]
        settled = pack(sorted(added, key=lambda found: found.ordinal), current.settled)
    else:  # folded from the log (or a finished call changed again, which is rare): every finished call packed
        settled = pack([row(n, e) for n, (c, e) in enumerate(current.items()) if c not in unsettled])
    install(
        fold,
        settled,
        {call_id: current[call_id] for call_id in unsettled},
        {c: view.attempt_counts[c] for c in unsettled if c in view.attempt_counts},
        {c: view.ledger_seqs[c] for c in unsettled if c in view.ledger_seqs},
    )
    return settled


def install(
    fold: ViewFold,
    settled: Settled,
    open_entries: dict[str, ToolLedgerEntry],
    attempts: dict[str, int],
    seqs: dict[str, int],
) -> None:
    """The view's per-call parts over ``settled`` and the open calls' own (``open_entries``, in ``unsettled``)."""
    view = fold.view
    view.current = fold.current = LedgerMap(settled, open_entries, view.unsettled)
    view.attempt_counts = view.current.counts(attempts, "attempts")
    view.ledger_seqs = view.current.counts(seqs, "seqs")
    view.step_calls = {}
    for call_id, ordinal in sorted(view.unsettled.items(), key=lambda pair: pair[1]):
        view.step_calls.setdefault(step_of(open_entries[call_id].step_id), []).append((ordinal, call_id))


def decode(data: bytes, info: RunInfo) -> ViewSnapshot | None:
    """The snapshot in ``data`` if it is one of this version for this run; None otherwise (never trusted)."""
    try:
        snapshot = _decoder.decode(data)
    except msgspec.DecodeError:
        return None
    if snapshot.version != VERSION or snapshot.run_id != info.run_id:
        return None
    return snapshot


def _branch(messages: MessageMap, whole: bytes, packed: Callable[[], set[int]], data: bytes) -> MessageList:
    """A branch the snapshot names, by reference; ``ValueError`` when it names a message the snapshot lacks."""
    if len(data) % 8:
        raise ValueError("a branch's seqs are cut short")
    seqs = array.array("Q", data)
    if data != whole and not packed().issuperset(seqs):  # (a branch of every message: the common case, in C)
        raise ValueError("a branch names messages the snapshot does not hold")
    return MessageList(messages, seqs)


def past_of(info: RunInfo, log: LogRead, covered: int, upto: int) -> tuple[list[ToolLedgerEntry], list[CheckpointAt]]:
    """``Past`` from the log's read: its fold up to ``upto`` (so each checkpoint's branch is the list the whole
    fold gives it), of which the states and checkpoints of the records up to ``covered``."""
    fold = ViewFold(RunView(info=info, problems=list(log.problems)))
    records = iter(log.records)
    for record in records:
        if record.seq > covered:
            counts = len(fold.view.ledger_entries), len(fold.view.checkpoints)
            fold.feed([record])
            break
        fold.feed([record])
    else:
        counts = len(fold.view.ledger_entries), len(fold.view.checkpoints)
    fold.feed(record for record in records if record.seq <= upto)
    return fold.view.ledger_entries[: counts[0]], fold.view.checkpoints[: counts[1]]


def resume_fold(snapshot: ViewSnapshot, info: RunInfo, after: LogRead, past: Past) -> tuple[ViewFold, int]:
    """The fold the whole log gives, from the snapshot and the log's read after its position (``after``); and how
    many of the view's problems the reads reported (for the next snapshot). ``past``: every ledger state and
    every checkpoint of the log up to a seq, read when the view is first asked for them. Raises ``ValueError``
    when the snapshot does not hold together (a message or entry it names is not in it): the caller reads the
    log."""
    messages = MessageMap(snapshot.messages)
    try:
        snapshot.messages.check()
        whole = snapshot.messages.seqs
        packed = functools.cache(lambda: set(memoryview(whole).cast("Q").tolist()))
        branches = [_branch(messages, whole, packed, seqs) for seqs in snapshot.branches]
        branch = branches[snapshot.branch]

        def at_of(kept: SnapshotCheckpoint) -> CheckpointAt:
            return CheckpointAt(kept.checkpoint, kept.seq, branches[kept.branch], kept.complete, kept.why_incomplete)

        latest = at_of(snapshot.latest_complete) if snapshot.latest_complete is not None else None
        after_latest = [at_of(kept) for kept in snapshot.after_latest]
        ref_messages = {seq: messages[seq] for seq in snapshot.ref_messages}
    except (KeyError, IndexError) as exc:
        raise ValueError(f"the snapshot names what it does not hold ({exc})") from None
    open_entries = {entry.call_id: entry for entry in snapshot.open_entries}
    if open_entries.keys() != snapshot.unsettled.keys() or len(open_entries) != len(snapshot.open_entries):
        raise ValueError("the snapshot's open calls are not its open entries")
    snapshot.settled.check()
    # The read's problems first, then the fold's, as one whole read reports them.
    problems = [
        *snapshot.problems[: snapshot.read_problems],
        *after.problems,
        *snapshot.problems[snapshot.read_problems :],
    ]
    covered = snapshot.seq
    # The snapshot's own containers become the view's (decoded for this view alone: copies would only raise the
    # open's peak memory).
    view = PastView(
        past=lambda: past(covered, view.last_seq),
        info=info,
        history=branch,
        patches=snapshot.patches,
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
        lost_seqs=snapshot.lost_seqs,
        unsettled=snapshot.unsettled,
        open_starts=snapshot.open_starts,
        reopened=snapshot.reopened,
        doubted=dict.fromkeys(snapshot.doubted),
        messages_len=snapshot.messages_len,
        ref_messages=ref_messages,
        latest_complete=latest,
        after_latest=after_latest,
    )
    fold = ViewFold(view)
    install(fold, snapshot.settled, open_entries, snapshot.open_attempts, snapshot.open_seqs)
    fold.damaged_at, fold.expected, fold.branch = snapshot.damaged_at, snapshot.expected, branch
    fold.history = HistoryDecoder()
    for seq, dictionary in snapshot.dictionaries.items():
        try:
            fold.history.add_dictionary(seq, dictionary)
        except CorruptRecordError as exc:
            raise ValueError(str(exc)) from None
        fold.dictionaries[seq] = dictionary
    fold.feed(after.records)
    return fold, snapshot.read_problems + len(after.problems)
