"""File patches: the exact change from one content to the next, in time linear in the sizes and small for small
edits (§8.4), for text and binary content alike.

A patch trims what both versions share at their start and their end (an append or a one-line edit of a 30 MB file
costs a few dozen bytes), then compresses what is left of the new content with zstd, using what is left of the old
content as a raw dictionary (zstd's "patch-from"): every run of old bytes the new content repeats costs a few bytes.
A lockfile with 60 scattered version bumps (360 KB) patches in about a millisecond.

Why not a line diff: ``difflib.SequenceMatcher`` is quadratic in the worst case, and lockfiles and generated files
are that case (7-19 s for one write of a 360 KB ``package-lock.json``); Myers' O(ND) diff degrades the same way as
edits add up. People never read these patches: ``conflicts`` and ``diff`` compute unified diffs when shown
(``unified_diff``, with a size cap).

The layout: ``SPATCH1`` | before size, prefix, suffix, middle size (4 x u64, little-endian) | codec | payload.
``apply_patch`` checks the base's size, so a patch applied to the wrong content fails loudly; callers verify the
result by its hash as well.
"""

from __future__ import annotations

import difflib
import struct

import zstandard

from safepoint.errors import CorruptRecordError

MAGIC = b"SPATCH1"
_HEADER = struct.Struct("<QQQQB")
RAW, ZSTD, ZSTD_DICT = 0, 1, 2  # codecs of the middle: as it is, compressed, compressed against the old middle
_LEVEL = 3  # measured: level 1 barely uses the dictionary (14x larger patches), levels above 3 cost more time
_MIN_DICT = 8  # zstd refuses a raw dictionary shorter than this
_MAX_WINDOW_LOG = 31  # zstd's limit on 64-bit machines; larger content is compressed without the old bytes
_decompressor = zstandard.ZstdDecompressor()


def is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _common_prefix(a: bytes, b: bytes) -> int:
    """Length of the shared start, found by halving (each comparison is one C-speed memcmp): O(n)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid : len(a) - low] == b[len(b) - mid : len(b) - low]:
            low = mid
        else:
            high = mid - 1
    return low


def _window_log(size: int) -> int:
    return max(10, size.bit_length() + 1)


def _hash_log(window: int) -> int:
    """The match finder's table, sized to the old content: level 3's own (2^17 entries) indexes too few positions
    of a large dictionary, so a 10 MB file with 60 scattered edits made a 2.3 MB patch and 60 changed bytes of a
    1 MB binary file a 415 KB one (measured: 1.2 KB and 420 bytes with this, a 1 MB patch in about 25-35 ms on a
    busy 2-core machine; a table four times larger cost half again as much time for the same sizes). Capped at
    2^22 entries (16 MB)."""
    return min(max(window - 4, 17), 22)


def _dictionary(old: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(old, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def make_patch(before: bytes, after: bytes) -> bytes:
    prefix = _common_prefix(before, after)
    suffix = _common_suffix(before, after, min(len(before), len(after)) - prefix)
    old = before[prefix : len(before) - suffix]
    new = after[prefix : len(after) - suffix]
    codec, payload = RAW, new
    if len(new) > 32:
        window = _window_log(len(old) + len(new))
        if len(old) >= _MIN_DICT and window <= _MAX_WINDOW_LOG:
            params = zstandard.ZstdCompressionParameters.from_level(
                _LEVEL, window_log=window, hash_log=_hash_log(window)
            )
            packed = zstandard.ZstdCompressor(dict_data=_dictionary(old), compression_params=params).compress(new)
            codec_try = ZSTD_DICT
        else:
            packed = zstandard.ZstdCompressor(level=_LEVEL).compress(new)
            codec_try = ZSTD
        if len(packed) < len(new):
            codec, payload = codec_try, packed
    return MAGIC + _HEADER.pack(len(before), prefix, suffix, len(new), codec) + payload


def apply_patch(before: bytes, patch: bytes) -> bytes:
    if not patch.startswith(MAGIC) or len(patch) < len(MAGIC) + _HEADER.size:
        raise CorruptRecordError("a stored file patch is not in safepoint's patch format; its record is damaged")
    size, prefix, suffix, middle, codec = _HEADER.unpack_from(patch, len(MAGIC))
    if size != len(before) or prefix + suffix > size:
        raise CorruptRecordError(
            f"a stored file patch was made for {size} bytes of content, not these {len(before)}; its record is damaged"
        )
    payload = patch[len(MAGIC) + _HEADER.size :]
    old = before[prefix : size - suffix]
    try:
        if codec == RAW:
            new = payload
        elif codec == ZSTD:
            new = _decompressor.decompress(payload, max_output_size=middle)
        elif codec == ZSTD_DICT:
            window = _window_log(len(old) + middle)
            reader = zstandard.ZstdDecompressor(dict_data=_dictionary(old), max_window_size=1 << window)
            new = reader.decompress(payload, max_output_size=middle)
        else:
            raise CorruptRecordError(f"a stored file patch names an unknown codec {codec}; its record is damaged")
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"a stored file patch cannot be decompressed ({exc}); its record is damaged") from None
    if len(new) != middle:
        raise CorruptRecordError("a stored file patch is cut short; its record is damaged")
    return before[:prefix] + new + before[size - suffix :]


DIFF_CAP_BYTES = 2 * 1024 * 1024  # a unified diff of larger content is not worth its time nor readable


def unified_diff(before: bytes, after: bytes, path: str) -> str:
    """For people: a unified diff (binary files are named, not dumped; very large files summarised)."""
    if before == after:
        return ""
    if not (is_text(before) and is_text(after)):
        return f"Binary file {path} changed ({len(before)} -> {len(after)} bytes)\n"
    if len(before) + len(after) > DIFF_CAP_BYTES:
        return f"File {path} is too large to show as a diff ({len(before)} -> {len(after)} bytes)\n"
    # Only what differs is diffed: the shared start and end are trimmed to whole lines (keeping three lines of
    # context), so a one-line edit of a large file costs what that line costs (difflib is quadratic at worst).
    start = before.rfind(b"\n", 0, _common_prefix(before, after)) + 1
    for _ in range(3):
        start = before.rfind(b"\n", 0, max(start - 1, 0)) + 1 if start else 0
    tail = _common_suffix(before, after, min(len(before), len(after)) - start)
    end_b = len(before) - tail
    for _ in range(4):
        cut = before.find(b"\n", end_b)
        end_b = len(before) if cut < 0 else cut + 1
    end_a = end_b - len(before) + len(after)
    offset = before[:start].count(b"\n")
    old = _lines(before[start:end_b].decode())
    new = _lines(after[start:end_a].decode())
    lines = list(difflib.unified_diff(old, new, fromfile=f"a/{path}", tofile=f"b/{path}", n=3))
    if not lines:
        return ""
    return "".join(lines[:2]) + "".join(_shift(line, offset) for line in lines[2:])


def _lines(text: str) -> list[str]:
    """Lines ending at "\\n" only (``splitlines`` also breaks at "\\r" and others, and the trimming counts "\\n")."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _shift(line: str, offset: int) -> str:
    """Renumber a hunk header of a diff made on a trimmed middle back to the whole file's line numbers."""
    if not line.startswith("@@ ") or offset == 0:
        return line
    head, _, rest = line[3:].partition(" @@")
    old, new = head.split(" ")

    def move(spec: str) -> str:
        sign, body = spec[0], spec[1:]
        first, comma, count = body.partition(",")
        return f"{sign}{int(first) + offset}{comma}{count}"

    return f"@@ {move(old)} {move(new)} @@{rest}"
