"""Checksummed JSON lines: ``<crc32 as 8 hex digits> <json>\\n``.

CRC-32 (zlib, in C) rather than SHA-256: it detects torn writes and bit flips, which is its job here, at a
fraction of the cost on the hot path; content addressing (blobs) uses SHA-256 separately.
A line without its newline is a torn tail; a checksum mismatch is corruption; both are reported, never loaded.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator

import msgspec

from safepoint.errors import StoreError
from safepoint.records import LogProblem, LogRead, LogRecord, StoredDescriptor

_record_decoder = msgspec.json.Decoder(LogRecord)

_SPACE = ord(" ")


def frame(payload: bytes) -> bytes:
    """One line holding ``payload`` (which must contain no newline; JSON from msgspec never does)."""
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def check_one_line(what: str, data: bytes) -> bytes:
    """A record for a line-framed file or row must hold no newline (encoded JSON never does); every backend refuses
    one, so a caller cannot come to rely on what only one of them accepts."""
    if b"\n" in data:
        raise StoreError(f"{what} holds a newline; encode it as JSON (msgspec never writes one)")
    return data


def unframe_all(data: bytes) -> Iterator[tuple[int, bytes | LogProblem]]:
    """Yield ``(offset, payload)`` for good lines and ``(offset, LogProblem)`` for bad ones."""
    offset = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        if end < 0:
            yield (
                offset,
                LogProblem(kind="torn", position=offset, detail=f"last record ({size - offset} bytes) has no end"),
            )
            return
        line = data[offset:end]
        payload = check_line(line)
        if payload is None:
            yield offset, LogProblem(kind="corrupt", position=offset, detail="checksum does not match")
        else:
            yield offset, payload
        offset = end + 1


def check_line(line: bytes) -> bytes | None:
    """The payload of a well-formed line, or None."""
    if len(line) < 10 or line[8] != _SPACE:
        return None
    payload = line[9:]
    # Its checksum written back as the frame writes it: eight lowercase hex digits are one number's only spelling,
    # so this is the frame's check (rejected: a digit set test and an ``int`` parse, which ``0x``/``_`` would fool
    # without it; twice the cost).
    return payload if line[:8] == b"%08x" % zlib.crc32(payload) else None


def read_records(lines: Iterable[tuple[int, bytes | LogProblem]], *, row_seqs: bool = False, first: int = 1) -> LogRead:
    """Decode checked payloads into records, in order, reporting the damaged ones and every hole in the
    sequence. ``row_seqs``: positions are the sequence numbers the rows were stored under (databases), which each
    record must match. ``first``: the seq the lines start at (a read after a known position)."""
    records: list[LogRecord] = []
    problems: list[LogProblem] = []
    expected = first
    for position, item in lines:
        if isinstance(item, LogProblem):
            problems.append(item)
            continue
        try:
            record = _record_decoder.decode(item)
        except msgspec.DecodeError as exc:
            problems.append(LogProblem(kind="corrupt", position=position, detail=f"not a log record: {exc}"))
            continue
        if row_seqs and record.seq != position:
            detail = f"row {position} holds the record of seq {record.seq}"
            problems.append(LogProblem(kind="corrupt", position=position, detail=detail))
            continue
        if record.seq != expected:
            detail = f"records {expected}..{record.seq - 1} are missing before seq {record.seq}"
            problems.append(LogProblem(kind="gap", position=position, detail=detail))
        expected = record.seq + 1
        records.append(record)
    return LogRead(records=records, problems=problems)


def read_framed(data: bytes, *, base: int = 0, first: int = 1) -> LogRead:
    """``read_records(unframe_all(data))`` in one pass, for a file's lines that start at byte ``base`` and at seq
    ``first``: the same records, and the same problems in the same order (a resume reads its tail this way: each
    line is sliced once, not as a line, then its payload, through two generators)."""
    records: list[LogRecord] = []
    problems: list[LogProblem] = []
    decode, crc32, find = _record_decoder.decode, zlib.crc32, data.find
    expected, offset, size = first, 0, len(data)
    while offset < size:
        end = find(b"\n", offset)
        if end < 0:
            detail = f"last record ({size - offset} bytes) has no end"
            problems.append(LogProblem(kind="torn", position=base + offset, detail=detail))
            break
        payload = data[offset + 9 : end]
        if end - offset < 10 or data[offset + 8] != _SPACE or data[offset : offset + 8] != b"%08x" % crc32(payload):
            problems.append(LogProblem(kind="corrupt", position=base + offset, detail="checksum does not match"))
        else:
            try:
                record = decode(payload)
            except msgspec.DecodeError as exc:
                detail = f"not a log record: {exc}"
                problems.append(LogProblem(kind="corrupt", position=base + offset, detail=detail))
            else:
                if record.seq != expected:
                    detail = f"records {expected}..{record.seq - 1} are missing before seq {record.seq}"
                    problems.append(LogProblem(kind="gap", position=base + offset, detail=detail))
                expected = record.seq + 1
                records.append(record)
        offset = end + 1
    return LogRead(records=records, problems=problems)


def read_descriptor(raw: bytes) -> StoredDescriptor:
    """A whole-file framed record as read: intact, or damaged with why (never raised, never trusted)."""
    if not raw.endswith(b"\n"):
        return StoredDescriptor(data=raw[9:], intact=False, detail=f"cut short: {len(raw)} bytes and no end")
    payload = check_line(raw.removesuffix(b"\n"))
    if payload is None:
        return StoredDescriptor(data=raw[9:-1], intact=False, detail="checksum does not match")
    return StoredDescriptor(data=payload, intact=True)


def chunks_from_end(fd: int, size: int) -> Iterator[tuple[int, bytes]]:
    """Ever longer ends of the file's first ``size`` bytes (4 KB, then 16 KB, ...), up to the whole: where a
    reader finds a log's last lines without reading the log (its summary's stamp, a read-after's position)."""
    chunk = 4096
    while True:
        start = max(0, size - chunk)
        yield start, os.pread(fd, size - start, start)
        if start == 0:
            return
        chunk *= 4
