"""Packing content for storage: compressed with zstd when that pays, addressed by SHA-256 of the plain bytes.

Two places keep content. Small content stays in the run's log as a ``Blob`` record carrying its bytes: packed, at
most ``INLINE_MAX`` bytes. A blob of its own costs a file, its fsync and its folder's: a 2 KB write took 3x as long
with its content as a blob (52 ms against 16 on a loaded disk), while 4 KB in a log line costs a load next to
nothing. Larger
content is a store-wide blob (``store.base.Blobs``), written durably before the log group that references it,
and the log carries only a ``Blob`` reference: ``{hash, codec, size, stored: true}``, no bytes. Logs written before
blobs left the log (every ``Blob`` inline) read as they always did.

A stored blob is self-describing, so it can be checked without the log that references it (``fsck``, another run
that shares it)::

    spb1 <codec> <size>\\n<payload>

``codec`` is ``raw`` or ``zstd``; ``size`` is the plain length (a bound for the decompressor: a damaged or hostile
frame cannot expand past it). Reading checks the plain bytes against their SHA-256 every time.

Not built yet: a blob stored as a zstd delta against a related version. Within a run a file's later versions are
deltas already (``core.patches``: zstd with the earlier version as its dictionary). Across runs it would pay
(``bench/blobs.py``: five versions of a 1 MB lockfile with 60 lines changed each take 0.21x as deltas against the
version before), but finding that version needs a store-wide index from a file to its latest blob, and gc would
have to keep a delta's base alive with it.
"""

from __future__ import annotations

import re
from typing import Literal

import zstandard

from safepoint.core.hashing import content_hash
from safepoint.errors import CorruptRecordError
from safepoint.records import Blob

_MIN_COMPRESS = 256  # below this zstd's frame header costs more than it saves
INLINE_MAX = 4096  # packed content up to this many bytes stays in the log (see above)
_MAGIC = b"spb1 "
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()
_NAME = re.compile(r"[a-z0-9-]{1,32}:[0-9a-f]{64}")


Codec = Literal["raw", "zstd"]


def pack(data: bytes) -> tuple[Codec, bytes]:
    """``(codec, payload)``: zstd when it makes the bytes smaller, else the bytes as they are."""
    if len(data) >= _MIN_COMPRESS:
        packed = _compressor.compress(data)
        if len(packed) < len(data):
            return "zstd", packed
    return "raw", data


def unpack(codec: str, payload: bytes, size: int) -> bytes:
    if codec == "raw":
        return payload
    if codec == "zstd":
        try:
            return _decompressor.decompress(payload, max_output_size=size)
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"a zstd frame does not decompress ({exc})") from None
    raise CorruptRecordError(f"unknown codec {codec!r}")


def make_blob(data: bytes, digest: str | None = None) -> Blob:
    """Content as an inline ``Blob`` record (its bytes in the log)."""
    codec, payload = pack(data)
    return Blob(hash=digest or content_hash(data), codec=codec, data=payload, size=len(data))


def open_blob(blob: Blob) -> bytes:
    """An inline blob's bytes, checked against its hash."""
    return checked(unpack(blob.codec, blob.data, blob.size), blob.hash)


def checked(data: bytes, digest: str) -> bytes:
    if content_hash(data) != digest:
        raise CorruptRecordError(f"blob {digest} does not match its content; the stored copy is damaged")
    return data


def stored_form(data: bytes, digest: str | None = None) -> tuple[Blob, bytes]:
    """Content to keep as a store-wide blob: the log's reference to it, and the stored bytes."""
    codec, payload = pack(data)
    reference = Blob(hash=digest or content_hash(data), codec=codec, size=len(data), stored=True)
    return reference, b"%s%s %d\n" % (_MAGIC, codec.encode(), len(data)) + payload


def open_stored(stored: bytes, digest: str) -> bytes:
    """A stored blob's plain bytes, checked against ``digest``. Raises ``CorruptRecordError``."""
    head, sep, payload = stored.partition(b"\n")
    fields = head.split(b" ")
    if not sep or len(fields) != 3 or fields[0] + b" " != _MAGIC or not fields[2].isdigit():
        raise CorruptRecordError(f"blob {digest} is damaged: its header is not a blob's")
    return checked(unpack(fields[1].decode(errors="replace"), payload, int(fields[2])), digest)


def check_name(name: str) -> str:
    """A blob's name in the store: ``<scheme>:<64 hex digits>`` (``sha256:`` of the plain bytes; an encrypted
    store's keyed name). Anything else is refused before it can become a path."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a blob name: {name!r}")
    return name
