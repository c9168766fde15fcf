"""A run's view read through its snapshot (the seed's checkpoint index, §8.4): the folded log up to a position
(``core.view_snapshot``) and the records after it (``read_log_after``), instead of the whole log and its fold.

Reading (``read_view``): a snapshot is used only when it opens (the store's checksum, an encrypted store's seal),
decodes as this version's snapshot of this run, names a position the log still holds (the record there is the
one it names) and holds together; anything else is reported (``refused``) and the whole log is read, as without
one. The view is the same either way (``tests/test_snapshot_property.py``).

Writing (``refresh``): by the run's owner, fenced, from the last snapshot and the records after it (or the whole
log, the first time): at close once ``SNAPSHOT_EVERY`` records came after the last snapshot, and while the run
goes on (``due_after``, checked after each durable group; written by the session's background thread up to that
group: ``engine.snapshot_writer``) once the log grew by ``SNAPSHOT_EVERY`` records or by a
``1 / SNAPSHOT_GROWTH`` part of what the last one covers, whichever is more: a run killed mid-way (the crash a
resume is for) finds a snapshot covering most of its log. A write costs the run so far (decode the last one, fold
the records after it, encode), so the growth rule keeps it O(1) per record on average (rejected: a fixed interval,
whose writes cost O(run) each, O(run^2 / interval) in all; not done yet: delta snapshots, each O(what changed)).
Never for a log with a problem (a damaged or torn record: such a log is read whole, as
before, so what the snapshot would freeze about it never outlives a repair). A snapshot is a cache: failing to
write one fails nothing (``refresh`` says whether it wrote).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec

from safepoint.core import view_snapshot
from safepoint.core.run_view import RunView, ViewFold
from safepoint.errors import StoreError
from safepoint.records import Claim, LogRead, LogRecord, RunInfo
from safepoint.store.base import Store
from safepoint.store.log_after import LogPosition

SNAPSHOT_EVERY = 2000  # log records after the last snapshot before the owner writes a new one
PACE = 64  # records folded between two of the background writer's pauses (``refresh(pause=...)``)
SNAPSHOT_GROWTH = 4  # while the run goes on: also at least a quarter of what the last one covers (see above)


def due_after(covered: int) -> int:
    """The log seq at which the owner writes its next snapshot while the run goes on, the last covering
    ``covered`` records (0: none yet)."""
    return covered + max(SNAPSHOT_EVERY, covered // SNAPSHOT_GROWTH)


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
        return view_snapshot.resume_fold(snapshot, info, after)
    except ValueError as exc:
        refuse(f"its snapshot does not hold together: {exc}")
        return None


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
    a session's close): it covers the log to its end, and an append that slips in anyway only makes it skip. With
    ``upto`` (the position of a group known durable, ``engine.snapshot_writer``), while the run goes on: it covers
    the log exactly up to there, and what was appended after it is read past, never folded (rejected: the log's
    end read by the writer's thread, which may be a group still being written). ``pause`` is called every
    ``PACE`` records folded: the background writer's thread lets the run's calls have the GIL."""
    every = SNAPSHOT_EVERY if every is None else every
    try:
        return _refresh(store, claim, info, every, upto, pause)
    except (StoreError, OSError):  # a cache: a store gone, full or taken over fails the close no more than before
        return False


def _refresh(
    store: Store, claim: Claim, info: RunInfo, every: int, upto: LogPosition | None, pause: Callable[[], None] | None
) -> bool:
    position = store.log_position(info.run_id) if upto is None else upto
    if position is None:
        return False
    known = store.view_snapshot_seq(info.run_id) or 0  # its header alone: a close reads nothing more
    if position.seq - (0 if known > position.seq else known) < every:  # past the log's end: a cut log, rewritten
        return False

    def cut(read: LogRead) -> LogRead:
        return _cut(read, None if upto is None else upto.seq, pause)

    found = _from_snapshot(store, info, None, cut=cut)
    if found is None:
        read = cut(store.read_log(info.run_id))
        fold = ViewFold(RunView(info=info, problems=list(read.problems)))
        fold.feed(read.records)
        found = (fold, len(read.problems))
    fold, read_problems = found
    if fold.view.problems or fold.view.last_seq != position.seq:
        return False  # a damaged log is read whole; an append came meanwhile: next time
    data = view_snapshot.encode(fold, read_problems=read_problems, offset=position.offset, check=position.check)
    store.put_view_snapshot(claim, data, seq=position.seq)
    return True


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


def header_info(store: Store, run_id: str) -> RunInfo:
    return msgspec.json.decode(store.run_header(run_id), type=RunInfo)
