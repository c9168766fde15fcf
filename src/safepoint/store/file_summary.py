"""The file store's run summary (``core.run_summary``): ``runs/<run_id>/summary.json``, two framed lines, the stamp
of the log's end when it was written (last seq, size, modification time, inode) and the summary itself.

It is a cache of what ``status`` shows, never a source of truth: ``read_summary`` hands it back only while the log
still ends where the stamp says, checked on the log itself (its size and times, and its last record, read from the
end and checked against its checksum), so a log appended to without a summary, repaired, cut short or damaged at
its end sends the reader to the log. Reading the log's end costs the same at 50,000 calls as at 100.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec

from safepoint.durable import PRIVATE_FILE
from safepoint.records import Claim, LogRecord
from safepoint.store.framing import check_line, chunks_from_end, frame

SUMMARY = "summary.json"
LOG = "ledger.jsonl"

_record_decoder = msgspec.json.Decoder(LogRecord)
_encoder = msgspec.json.Encoder()


class SummaryStamp(msgspec.Struct, frozen=True):
    """The log's end when the summary was written."""

    seq: int
    size: int
    mtime_ns: int
    ino: int


_stamp_decoder = msgspec.json.Decoder(SummaryStamp)


class SummaryFile:
    """The summary's hooks of ``FencedStore``, for a store kept in files (mixed into ``FileStore``)."""

    # FileStore's
    _summary_fds: dict[str, int]
    _log_fds: dict[str, int]
    _fd: Callable[..., int]
    _log_size: Callable[[Claim], int]
    _existing_run_dir: Callable[[str], str]

    def _put_summary_txn(self, handle: None, claim: Claim, seq: int, summary: bytes) -> None:
        """Overwritten in place, not fsync'd and not renamed into place (rejected: an atomic write per append, an
        fsync and a rename for a cache): a reader that meets it torn or half-replaced finds its checksum or its
        stamp wrong and reads the log, as after a crash or a power loss that left it behind the log."""
        fd = self._summary_fds.get(claim.run_id)
        if fd is None:  # not an append fd (``_fd``'s): O_APPEND would put every pwrite at the end
            path = os.path.join(self._existing_run_dir(claim.run_id), SUMMARY)
            fd = self._summary_fds[claim.run_id] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        log = os.fstat(self._fd(self._log_fds, claim.run_id, LOG))
        stamp = SummaryStamp(seq=seq, size=self._log_size(claim), mtime_ns=log.st_mtime_ns, ino=log.st_ino)
        data = frame(_encoder.encode(stamp)) + frame(summary)
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))

    def read_summary(self, run_id: str) -> tuple[int, bytes] | None:
        run_dir = self._existing_run_dir(run_id)
        try:
            with open(os.path.join(run_dir, SUMMARY), "rb") as handle:
                raw = handle.read()
            log = os.stat(os.path.join(run_dir, LOG))
        except FileNotFoundError:
            return None
        lines = raw.split(b"\n")
        if len(lines) != 3 or lines[2]:
            return None
        stamp_line, summary = check_line(lines[0]), check_line(lines[1])
        if stamp_line is None or summary is None:
            return None
        try:
            stamp = _stamp_decoder.decode(stamp_line)
        except msgspec.DecodeError:
            return None
        if (stamp.size, stamp.mtime_ns, stamp.ino) != (log.st_size, log.st_mtime_ns, log.st_ino):
            return None  # the log changed since (appended to without a summary, repaired, damaged, cut)
        # A file's times may be coarser than two writes (a last record damaged within one tick): the last record
        # is checked too.
        if last_record_seq(os.path.join(run_dir, LOG), stamp.size) != stamp.seq:
            return None
        return stamp.seq, summary


def last_record_seq(path: str, size: int) -> int | None:
    """The seq of the log's last record, read from its end only, if that record is whole and intact (0: empty)."""
    if size == 0:
        return 0
    try:
        with open(path, "rb") as handle:
            found = _last_line(handle.fileno(), size)
    except FileNotFoundError:
        return None
    if found is None:
        return None
    payload = check_line(found[1])
    if payload is None:
        return None
    try:
        return _record_decoder.decode(payload).seq
    except msgspec.DecodeError:
        return None


def last_intact_seq(fd: int, size: int) -> tuple[int, int]:
    """``(end, seq)``: where the file's whole lines end (past it: a torn tail, or nothing) and the seq of the last
    record before it that passes its checksum (0: none does), read from the end, ever further back only while no
    record passes."""
    end = 0
    for start, data in chunks_from_end(fd, size):
        if not end:
            cut = data.rfind(b"\n") + 1
            if cut == 0 and start > 0:
                continue  # no newline yet: a torn tail longer than what was read
            end = start + cut
        lines = data[: end - start].split(b"\n")[:-1]
        whole = lines if start == 0 else lines[1:]  # the first may begin before what was read
        for line in reversed(whole):
            payload = check_line(line)
            if payload is None:
                continue
            try:
                return end, _record_decoder.decode(payload).seq
            except msgspec.DecodeError:
                continue
    return end, 0


def _last_line(fd: int, size: int) -> tuple[int, bytes] | None:
    """``(offset, line)`` of the last whole line of the file's first ``size`` bytes, without its newline; None
    when those bytes do not end with a newline."""
    for start, data in chunks_from_end(fd, size):
        if not data.endswith(b"\n"):
            return None
        begin = data.rfind(b"\n", 0, len(data) - 1)
        if begin >= 0 or start == 0:
            return start + begin + 1, data[begin + 1 : -1]
    return None
