"""Reading a run's log from a known position on (``RunLog.read_log_after``): what a reader that already holds
the log's prefix folded (a snapshot of it) reads instead of the whole log.

A position names the last record the reader holds: its seq, where its line ends in the file store's log (the
next record's byte offset), and the checksum of its line. The store reads on only when the record there is that
very record (its line ends at the offset, passes its checksum, is the one named, and holds that seq): a log cut
back by a repair, rewritten by fsck, or replaced by hand no longer matches, and the reader is told (None) and
reads the whole log, as before. PostgreSQL rows are keyed by seq, so its offset is unused and the row at the
seq is checked. Rejected: a checksum of the whole prefix (reading it is what this avoids).
"""

from __future__ import annotations

import hashlib

import msgspec

from safepoint.store.framing import check_line

_seq_decoder = msgspec.json.Decoder(dict[str, object])


class LogPosition(msgspec.Struct, frozen=True):
    seq: int  # the last record read (0: none, the log's start)
    offset: int  # where its line ends (the file store's byte offset of the next record; unused by PostgreSQL)
    check: str  # the checksum its line was framed with (8 hex digits; "" at the log's start)


START = LogPosition(0, 0, "")


def line_position(line: bytes, end: int) -> LogPosition | None:
    """The position of a framed line (without its newline) that ends at ``end``; None if it is damaged."""
    payload = check_line(line)
    if payload is None:
        return None
    try:
        seq = _seq_decoder.decode(payload).get("seq")
    except msgspec.DecodeError:
        return None
    return LogPosition(seq, end, line[:8].decode()) if isinstance(seq, int) else None


_SNAPSHOT_MAGIC = b"spv1"


def frame_snapshot(data: bytes, seq: int) -> bytes:
    """A view snapshot as stored: a header line with its SHA-256, its length and the log seq it covers (read
    alone by ``snapshot_seq``), then the bytes (binary: the log's one-line frame does not fit them)."""
    digest = hashlib.sha256(data).hexdigest().encode()
    return b"%s %s %d %d\n" % (_SNAPSHOT_MAGIC, digest, len(data), seq) + data


def snapshot_seq(head: bytes) -> int | None:
    """The seq a stored snapshot's header says it covers (a hint: whether a new one is due), from its first
    bytes; None when there is no such header."""
    fields = head.partition(b"\n")[0].split(b" ")
    return int(fields[3]) if len(fields) == 4 and fields[0] == _SNAPSHOT_MAGIC and fields[3].isdigit() else None


def unframe_snapshot(stored: bytes) -> bytes | None:
    """The bytes of a stored snapshot, or None when it is torn or damaged (never trusted)."""
    header, newline, data = stored.partition(b"\n")
    return unframe_parts(header + newline, data)


def unframe_parts(header_line: bytes, data: bytes) -> bytes | None:
    """``unframe_snapshot`` of a snapshot read as its header's line and the rest (a reader that reads them apart
    holds one copy of the snapshot's bytes, not two: at 50,000 calls, tens of MB of a resume's peak)."""
    header, newline, _ = header_line.partition(b"\n")
    fields = header.split(b" ")
    if not newline or len(fields) != 4 or fields[0] != _SNAPSHOT_MAGIC or not fields[2].isdigit():
        return None
    if int(fields[2]) != len(data) or hashlib.sha256(data).hexdigest().encode() != fields[1]:
        return None
    return data
