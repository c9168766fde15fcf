"""A run's view read through its snapshot (the seed's checkpoint index, §8.4): the folded log up to a position
(``core.view_snapshot``) and the records after it (``read_log_after``), instead of the whole log and its fold.

Reading (``read_view``): a snapshot is used only when it opens (the store's checksum, an encrypted store's seal),
decodes as this version's snapshot of this run, names a position the log still holds (the record there is the
one it names) and holds together; anything else is reported (``refused``) and the whole log is read, as without
one. The view is the same either way (``tests/test_snapshot_property.py``).

Writing (``refresh``): by the run's owner, fenced, from the last snapshot and the records after it (or the whole
log, the first time): at close once ``SNAPSHOT_EVERY`` records came after the last snapshot, and while the run
goes on (``due_after``, checked after each durable group) every ``SNAPSHOT_EVERY`` records, so a run killed mid-way
(the crash a resume is for) leaves a resume at most about that many records to fold after its snapshot, whatever
its length (rejected: the growth rule this replaced, a quarter of the run, whose tail was most of a resume's
cost). The writer keeps its fold between writes (``_kept``), so a write costs the records since and the encode, not
the decode of the last snapshot and the fold of its tail (not done yet: a snapshot of size O(open state), or a delta
on the last one: the encode still holds every call's current entry).
Never for a log with a problem (a damaged or torn record: such a log is read whole, as
before, so what the snapshot would freeze about it never outlives a repair). A snapshot is a cache: failing to
write one fails nothing (``refresh`` says whether it wrote).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import msgspec

from safepoint.core import view_snapshot
from safepoint.core.run_view import CheckpointAt, PastView, RunView, ViewFold
from safepoint.errors import StoreError
from safepoint.records import Claim, LogRead, LogRecord, RunInfo, ToolLedgerEntry
from safepoint.store.base import Store
from safepoint.store.log_after import LogPosition

SNAPSHOT_EVERY = 2000  # log records after the last snapshot before the owner writes a new one (see ``due_after``)
PACE = 64  # records folded between two of a background writer's pauses (``refresh(pause=...)``)


def due_after(covered: int) -> int:
    """The log seq at which the owner writes its next snapshot while the run goes on, the last covering
    ``covered`` records (0: none yet): ``SNAPSHOT_EVERY`` records later, so a resume folds at most about that many
    after it whatever the run's length (the writer keeps its fold: a write costs the records since and the encode,
    not the decode of the last one and its tail). Rejected: 1,000, which halves a resume's tail (about 11 ms of
    a resume on average) but doubles the writes, each a whole snapshot (5 MB at 50,000 calls): a run of 50,000
    calls took 10% longer, its p99 call 1.65x (``bench/snapshot_pause.py``'s ``every_1000_over_2000``, load 7)."""
    return covered + SNAPSHOT_EVERY


def read_view(store: Store, info: RunInfo, refused: list[str] | None = None) -> RunView:
    """The run's view: from its snapshot and the log after it when they hold, else from the whole log (why the
    snapshot was not used is appended to ``refused``)."""
    found = _from_snapshot(store, info, refused)
    if found is not None:
        return found[0].finish()
    read = store.read_log(info.run_id)
    fold = ViewFold(RunView(info=info, problems=list(read.problems)))
    fold.feed(read.records)
    return fold.finish()


def _from_snapshot(
    store: Store, info: RunInfo, refused: list[str] | None, *, cut: Callable[[LogRead], LogRead] | None = None
) -> tuple[ViewFold, int] | None:
    def refuse(why: str) -> None:
        if refused is not None:
            refused.append(why)

    data = store.read_view_snapshot(info.run_id)
    if data is None:
        return None  # none kept (a damaged one reads as none too: the store cannot tell it from a torn write)
    snapshot = view_snapshot.decode(data, info)
    del data  # its bytes are not kept through the fold (the open's peak memory)
    if snapshot is None:
        refuse("its snapshot does not decode (another version, or another run's)")
        return None
    after = store.read_log_after(info.run_id, LogPosition(snapshot.seq, snapshot.offset, snapshot.check))
    if after is not None and cut is not None:
        after = cut(after)
    if after is None:
        refuse(f"the log no longer holds the record its snapshot ends at (seq {snapshot.seq})")
        return None
    try:
        return view_snapshot.resume_fold(snapshot, info, after, lambda covered, upto: _past(store, info, covered, upto))
    except ValueError as exc:
        refuse(f"its snapshot does not hold together: {exc}")
        return None


def _past(store: Store, info: RunInfo, covered: int, upto: int) -> tuple[list[ToolLedgerEntry], list[CheckpointAt]]:
    """Every ledger state and every checkpoint of the log's records up to ``covered`` (what a snapshot's view reads
    when first asked: ``core.run_view.PastView``), folded from the log as without a snapshot."""
    return view_snapshot.past_of(info, store.read_log(info.run_id), covered, upto)


def refresh(
    store: Store,
    claim: Claim,
    info: RunInfo,
    *,
    every: int | None = None,
    upto: LogPosition | None = None,
    pause: Callable[[], None] | None = None,
) -> bool:
    """Write the run's snapshot when ``every`` (default ``SNAPSHOT_EVERY``) records came after the last one;
    whether one was written. Only by the run's owner (``claim``). Without ``upto``, while nothing else appends (at
    a session's close, or right after a group is durable under the run's bookkeeping lock): it covers the log to
    its end, and an append that slips in anyway only makes it skip. With ``upto`` (the position of a group known
    durable: a background writer), it covers the log exactly up to there, and what was appended after it is read
    past, never folded. ``pause`` is called every ``PACE`` records folded (a background writer's thread lets the
    run's calls have the GIL)."""
    every = SNAPSHOT_EVERY if every is None else every
    try:
        return _refresh(store, claim, info, every, upto, pause)
    except (StoreError, OSError):  # a cache: a store gone, full or taken over fails the close no more than before
        return False


def _cut(read: LogRead, upto: int | None, pause: Callable[[], None] | None) -> LogRead:
    """The records up to seq ``upto`` (None: all), paced by ``pause``; problems are kept (a log with one is never
    snapshotted)."""
    records = read.records
    if upto is not None and records and records[-1].seq > upto:
        records = [record for record in records if record.seq <= upto]
    if pause is not None:
        records = _Paced(records, pause)
    return read if records is read.records else LogRead(records=records, problems=read.problems)


class _Paced(list[LogRecord]):
    """Records whose iteration calls ``pause`` every ``PACE`` of them: the fold iterates them (rejected: a pause
    parameter through the fold, ``core``'s, which knows nothing of threads)."""

    def __init__(self, records: list[LogRecord], pause: Callable[[], None]) -> None:
        super().__init__(records)
        self._pause = pause

    def __iter__(self) -> Iterator[LogRecord]:
        pause = self._pause
        for index, record in enumerate(super().__iter__()):
            if index % PACE == PACE - 1:
                pause()
            yield record


# The writer's fold, kept between its snapshots (run id and store -> the fold, what the reads reported, the
# position it ends at, the claim's generation): the next write feeds it the records since and encodes it, instead of
# decoding the last snapshot and folding its tail again, so a write costs the records since and the encode, and the
# snapshots can be written every ``SNAPSHOT_EVERY`` records (a resume's tail stays that short). Dropped at close.
_kept: dict[tuple[int, str], tuple[ViewFold, int, LogPosition, int]] = {}
_kept_lock = threading.Lock()


def _refresh(
    store: Store, claim: Claim, info: RunInfo, every: int, upto: LogPosition | None, pause: Callable[[], None] | None
) -> bool:
    key = (id(store), info.run_id)
    with _kept_lock:
        kept = _kept.pop(key, None)
    try:
        return _write(store, claim, info, every, key, kept, upto, pause)
    finally:
        if every:  # a close (``RunSession.close``; its writes while the run goes on are due: ``every=0``)
            with _kept_lock:
                _kept.pop(key, None)


def _write(
    store: Store,
    claim: Claim,
    info: RunInfo,
    every: int,
    key: tuple[int, str],
    kept: tuple[ViewFold, int, LogPosition, int] | None,
    upto: LogPosition | None,
    pause: Callable[[], None] | None,
) -> bool:
    position = store.log_position(info.run_id) if upto is None else upto
    if position is None:
        return False
    known = store.view_snapshot_seq(info.run_id) or 0  # its header alone: a close reads nothing more
    if position.seq - (0 if known > position.seq else known) < every:  # past the log's end: a cut log, rewritten
        if kept is not None:
            with _kept_lock:
                _kept[key] = kept
        return False

    def cut(read: LogRead) -> LogRead:
        return _cut(read, None if upto is None else upto.seq, pause)

    found: tuple[ViewFold, int] | None = None
    if kept is not None and kept[3] == claim.generation and kept[2].seq == known:
        fold, read_problems, since, _ = kept
        after = store.read_log_after(info.run_id, since)
        if after is not None and not after.problems:
            fold.feed(cut(after).records)
            found = (fold, read_problems)
    if found is None:
        found = _from_snapshot(store, info, None, cut=cut)
    if found is None:
        read = cut(store.read_log(info.run_id))
        fold = ViewFold(RunView(info=info, problems=list(read.problems)))
        fold.feed(read.records)
        found = (fold, len(read.problems))
    fold, read_problems = found
    if fold.view.problems or fold.view.last_seq != position.seq:
        return False  # a damaged log is read whole; an append came meanwhile: next time
    try:
        data = view_snapshot.encode(fold, read_problems=read_problems, offset=position.offset, check=position.check)
    except ValueError:  # a fold the snapshot cannot hold (never met: the log refuses what msgpack cannot encode)
        return False
    store.put_view_snapshot(claim, data, seq=position.seq)
    if not isinstance(fold.view, PastView):  # folded from the whole log: kept as the snapshot's own view instead,
        snapshot = view_snapshot.decode(data, info)  # which holds no list of every state and checkpoint
        try:
            if snapshot is None:
                raise ValueError("it does not decode")
            fold, read_problems = view_snapshot.resume_fold(snapshot, info, LogRead(records=[], problems=[]), _no_past)
        except ValueError:
            return True  # written; the next write starts from it as a reader would
    assert isinstance(fold.view, PastView)
    fold.view.keep_after = False  # only encoded from now on: the states after it are not kept in memory
    with _kept_lock:
        _kept[key] = (fold, read_problems, position, claim.generation)
    return True


def _no_past(covered: int, upto: int) -> tuple[list[ToolLedgerEntry], list[CheckpointAt]]:
    raise StoreError("the writer's fold is only encoded")  # never asked: a bug if it is


def header_info(store: Store, run_id: str) -> RunInfo:
    return msgspec.json.decode(store.run_header(run_id), type=RunInfo)
