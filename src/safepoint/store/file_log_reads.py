"""The file store's reads of a run's log by position, beside the whole read (``FileStore.read_log``): the
checkpoint index and the log's durable mark (``checkpoints/index.jsonl``), and the read after a known position
(``store.log_after``). Only the log's ends and the index are read here, never the whole log."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from typing import TYPE_CHECKING

import msgspec

from safepoint.durable import atomic_write, fsync_dir
from safepoint.errors import StoreError
from safepoint.records import Claim, LogProblem, LogRead, LogRecord, OwnerState
from safepoint.store.file_blobs import flock_waiting
from safepoint.store.framing import check_line, chunks_from_end, read_framed, unframe_all
from safepoint.store.log_after import START, LogPosition, frame_snapshot, line_position, snapshot_seq, unframe_parts
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT

LOG = "ledger.jsonl"  # ``file_store``'s (it imports this module)
VIEW_SNAPSHOT = "view_snapshot.bin"  # the folded log up to a position (``core.view_snapshot``)
_record_decoder = msgspec.json.Decoder(LogRecord)


class FileLogReads:
    """Mixed into ``FileStore``."""

    if TYPE_CHECKING:  # the store's own

        def _existing_run_dir(self, run_id: str) -> str: ...

        def _fenced(
            self, claim: Claim, *, durable: bool = True
        ) -> contextlib._GeneratorContextManager[tuple[None, OwnerState]]: ...

    def log_position(self, run_id: str) -> LogPosition | None:
        return file_log_position(os.path.join(self._existing_run_dir(run_id), LOG))

    def _put_view_snapshot_txn(self, handle: None, run_id: str, data: bytes, seq: int) -> None:
        atomic_write(os.path.join(self._existing_run_dir(run_id), VIEW_SNAPSHOT), frame_snapshot(data, seq))

    def put_view_snapshot(self, claim: Claim, data: bytes, *, seq: int) -> None:
        """Written and fsync'd beside its place before the run's lock is taken, renamed into place under it
        (fenced): the run's appends never wait for a snapshot's megabytes to reach the disk (rejected: the whole
        write under the lock, as ``FencedStore`` does it, which paused the run's calls for that fsync)."""
        run_dir = self._existing_run_dir(claim.run_id)
        fd, staged = tempfile.mkstemp(dir=run_dir, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(frame_snapshot(data, seq))
                handle.flush()
                os.fsync(handle.fileno())
            with self._fenced(claim):
                self._place_view_snapshot_txn(staged, os.path.join(run_dir, VIEW_SNAPSHOT))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)  # refused (a stale owner) or failed: the snapshot in place stays
        fsync_dir(run_dir)

    def _place_view_snapshot_txn(self, staged: str, path: str) -> None:
        os.replace(staged, path)

    def view_snapshot_seq(self, run_id: str) -> int | None:
        try:
            with open(os.path.join(self._existing_run_dir(run_id), VIEW_SNAPSHOT), "rb") as handle:
                return snapshot_seq(handle.read(256))
        except FileNotFoundError:
            return None

    def read_view_snapshot(self, run_id: str) -> bytes | None:
        try:
            fd = os.open(os.path.join(self._existing_run_dir(run_id), VIEW_SNAPSHOT), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            return read_snapshot_fd(fd)
        finally:
            os.close(fd)

    def read_log_after(self, run_id: str, after: LogPosition) -> LogRead | None:
        stuck = StoreError(
            f"run {run_id!r}: another process holds the log's lock in the middle of an append and does not let go "
            "(stopped with SIGSTOP?); end that process and read again"
        )
        return file_read_log_after(os.path.join(self._existing_run_dir(run_id), LOG), after, stuck)

    def checkpoint_offsets(self, run_id: str) -> list[tuple[int, int]]:
        """``(seq, byte offset)`` of each checkpoint, from the separate index, each checked against the log: an
        index entry the log does not confirm (torn, or cut away with a torn tail) is left out."""
        run_dir = self._existing_run_dir(run_id)
        try:
            with open(os.path.join(run_dir, "checkpoints", "index.jsonl"), "rb") as handle:
                index = handle.read()
            with open(os.path.join(run_dir, LOG), "rb") as handle:
                log = handle.read()
        except FileNotFoundError:
            return []
        found = []
        for _, item in unframe_all(index):
            if isinstance(item, LogProblem):
                continue
            entry = msgspec.json.decode(item)
            seq, offset = int(entry["seq"]), int(entry["offset"])
            end = log.find(b"\n", offset)
            payload = check_line(log[offset:end]) if end > 0 else None
            if payload is not None and _record_decoder.decode(payload).seq == seq:
                found.append((seq, offset))
        return found

    def log_mark(self, run_id: str) -> int:
        """The checkpoint index is written after the log's fdatasync: its last entry is a seq that was durable,
        whether or not the log still holds it (a log cut at a record boundary looks whole on its own). Only its
        end is read."""
        path = os.path.join(self._existing_run_dir(run_id), "checkpoints", "index.jsonl")
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - 4096))
                tail = handle.read()
        except FileNotFoundError:
            return 0
        for line in reversed(tail.split(b"\n")[1 if size > 4096 else 0 :]):
            payload = check_line(line)
            if payload is not None:
                with contextlib.suppress(msgspec.DecodeError, KeyError, TypeError, ValueError):
                    return int(msgspec.json.decode(payload)["seq"])
        return 0


def read_snapshot_fd(fd: int) -> bytes | None:
    """A framed snapshot's bytes (``unframe_parts``: None when torn or damaged), read as its header's line and the
    rest, each with one ``pread`` of its known size: one copy of the snapshot's bytes (rejected: a buffered
    ``readline`` then ``read()``, which gathered the rest in chunks: 11 ms of a 9.5 MB snapshot, not 1)."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, min(size, 4096), 0)
    newline = head.find(b"\n")
    if newline < 0:
        return None  # no header line (cut short, or not a snapshot)
    return unframe_parts(head[: newline + 1], _pread_all(fd, size - newline - 1, newline + 1))


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes from ``offset`` on, fewer only at the file's end (one ``pread`` returns at most 2 GB)."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def file_log_position(path: str) -> LogPosition:
    """Where the file store's log ends now: its last whole line's record (START when it has none)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            for start, data in chunks_from_end(handle.fileno(), size):
                end = data.rfind(b"\n") + 1
                if end == 0 and start > 0:
                    continue
                lines = data[:end].split(b"\n")[:-1]
                whole = lines if start == 0 else lines[1:]
                cut = start + end
                for line in reversed(whole):
                    found = line_position(line, cut)
                    if found is not None:
                        return found
                    cut -= len(line) + 1
                if start == 0:
                    break
    except FileNotFoundError:
        pass
    return START


def file_read_log_after(path: str, after: LogPosition, stuck: StoreError) -> LogRead | None:
    """The file store's records after ``after`` (None when the record there is not the one named)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - kept open across the lock below
    except FileNotFoundError:
        return LogRead(records=[], problems=[]) if after.seq == 0 else None
    with handle:
        fd = handle.fileno()
        if after.seq and not _holds_at(fd, after):
            return None
        data = os.pread(fd, os.fstat(fd).st_size - after.offset, after.offset)
        if data and not data.endswith(b"\n"):
            # As ``read_log``: a tail without its end is a write in flight until the writer's lock is ours.
            flock_waiting(fd, fcntl.LOCK_SH, CLAIM_LOCK_TIMEOUT, stuck)
            try:
                data = os.pread(fd, os.fstat(fd).st_size - after.offset, after.offset)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
    return read_framed(data, base=after.offset, first=after.seq + 1)


def _holds_at(fd: int, after: LogPosition) -> bool:
    if after.offset <= 0 or after.offset > os.fstat(fd).st_size:
        return False
    for start, data in chunks_from_end(fd, after.offset):
        if not data.endswith(b"\n"):
            return False
        begin = data.rfind(b"\n", 0, len(data) - 1)
        if begin >= 0 or start == 0:
            return line_position(data[begin + 1 : -1], after.offset) == after
    return False
