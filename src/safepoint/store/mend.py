"""Mending a framed line hit by one flipped bit: CRC-32 locates a single-bit error, so a bit flip in a record need
not cost the record.

CRC-32 is linear: a line whose payload differs from the written one in bit ``i`` has ``crc(read) ^ crc(written)``
equal to the syndrome of a one-hot message with that bit set, whatever the rest of the payload holds. The syndromes
of every position are walked from the end (one more zero bit processed shifts the register once), so the bit is
found in one pass over the line, not one CRC per candidate (quadratic). A candidate is only a guess until the
caller checks it (it decodes, and a blob's content matches its SHA-256): beyond ~11 KB two positions can share a
syndrome, which that check tells apart.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

_POLY = 0xEDB88320  # CRC-32 (IEEE, reflected), as zlib computes it
_HEX = frozenset(b"0123456789abcdef")


def _shift_bit(value: int) -> int:
    return (value >> 1) ^ (_POLY if value & 1 else 0)


def _byte_table() -> list[int]:
    table = []
    for low in range(256):
        value = low
        for _ in range(8):
            value = _shift_bit(value)
        table.append(value)
    return table


_SHIFT_BYTE = _byte_table()  # eight zero bits processed at once, as zlib's own table does


def _flipped(data: bytes, byte: int, bit: int) -> bytes:
    mended = bytearray(data)
    mended[byte] ^= 1 << bit
    return bytes(mended)


def one_bit_candidates(line: bytes) -> Iterator[bytes]:
    """Payloads that ``line`` (a framed line without its newline) would carry if one bit of it were flipped
    back: in the payload (the stored checksum then matches the mended payload), or in the checksum's hex digits
    (the payload is then intact). Nothing when the line is not framed at all."""
    if len(line) < 10:
        return
    if line[8] != 0x20:
        if (line[8] ^ 0x20).bit_count() == 1 and zlib.crc32(line[9:]) == _hex_value(line[:8]):
            yield line[9:]  # the bit flipped was the separator's
        return
    payload = line[9:]
    stored_hex = line[:8]
    if _HEX.issuperset(stored_hex):
        stored = int(stored_hex, 16)
        syndrome = zlib.crc32(payload) ^ stored
        if syndrome.bit_count() == 1 or _hex_digit_flip(stored_hex, zlib.crc32(payload)):
            yield payload  # the checksum's digits were hit, not the payload
        size = len(payload)
        zeros = zlib.crc32(bytes(size))
        last = bytes(size - 1)
        # The syndrome of each bit of the last byte, measured; earlier bytes shift it 8 bits per byte.
        walks = [zlib.crc32(last + bytes([1 << bit])) ^ zeros for bit in range(8)]
        for back in range(size):
            for bit in range(8):
                if walks[bit] == syndrome:
                    yield _flipped(payload, size - 1 - back, bit)
            walks = [(value >> 8) ^ _SHIFT_BYTE[value & 0xFF] for value in walks]
    elif _hex_digit_flip(stored_hex, zlib.crc32(payload)):
        yield payload


def _hex_value(digits: bytes) -> int | None:
    return int(digits, 16) if _HEX.issuperset(digits) else None


def _hex_digit_flip(stored_hex: bytes, crc: int) -> bool:
    """Whether one flipped bit in the eight hex digits turns them into the payload's true checksum."""
    want = b"%08x" % crc
    differ = [i for i in range(8) if stored_hex[i] != want[i]]
    return len(differ) == 1 and (stored_hex[differ[0]] ^ want[differ[0]]).bit_count() == 1
