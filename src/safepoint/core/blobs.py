"""Packing content into ``Blob`` records: compressed with zstd when that pays, addressed by SHA-256."""

from __future__ import annotations

import zstandard

from safepoint.core.hashing import content_hash
from safepoint.errors import CorruptRecordError
from safepoint.records import Blob

_MIN_COMPRESS = 256  # below this zstd's frame header costs more than it saves
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()


def make_blob(data: bytes, digest: str | None = None) -> Blob:
    digest = digest or content_hash(data)
    if len(data) >= _MIN_COMPRESS:
        packed = _compressor.compress(data)
        if len(packed) < len(data):
            return Blob(hash=digest, codec="zstd", data=packed, size=len(data))
    return Blob(hash=digest, codec="raw", data=data, size=len(data))


def open_blob(blob: Blob) -> bytes:
    data = _decompressor.decompress(blob.data, max_output_size=blob.size) if blob.codec == "zstd" else blob.data
    if content_hash(data) != blob.hash:
        raise CorruptRecordError(f"blob {blob.hash} does not match its content; the stored copy is damaged")
    return data
