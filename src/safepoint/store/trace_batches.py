"""Trace batches: many trace lines stored as one compressed line (issue 10 §7).

A trace event is a short JSON object that repeats the same names, ids and statuses again and again, so a batch of
them compresses about tenfold with zstd (64 events of an agent loop: 11x); one line an event made the trace the
largest part of a run's store after the messages. A batch is stored as one line
``z1:<base64 of zstd(lines joined by newlines)>``: base64 because the file store's lines are newline-framed
(rejected: a binary trace file with its own framing, which the database store and the encrypted store would each
need again). A line that does not start with the marker is an event of its own,
so a trace written before batches were packed reads as it always did.

The encrypted store packs before sealing (sealed bytes do not compress), and its inner store then finds one line
that does not shrink and keeps it as it is.
"""

from __future__ import annotations

import binascii
import threading
from collections.abc import Iterator, Sequence

import zstandard

MARKER = b"z1:"
_LEVEL = 3  # zstd's default: a batch is small, and the dictionary finds most of its repeats
_MAX_BATCH = 64 << 20  # a batch decompresses to at most this: a damaged length field cannot ask for more

# What trace lines say again and again, as a raw-content dictionary: a batch is flushed at every step of an agent
# loop (a handful of events), too few for zstd to find the repeats within the batch; with the dictionary a step's
# events (1.2 KB as lines) take about 255 bytes, not 445 compressed alone (64-event batches: 104, not 141).
# Never change these bytes: the batches written
# under the marker need them to decode (a new dictionary takes a new marker, and the old one stays readable).
DICTIONARY = (
    b'{"event":"run_claimed","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"takeover":false,"holder":"pid1-"}}\n'
    b'{"event":"run_running","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"detail":"started"}}\n'
    b'{"event":"tool_finished","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"call_id":"call_1","tool_name":"write_file","status":"failed"}}\n'
    b'{"event":"file_patch","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"path":"","call_id":"call_1","op":"modify"}}\n'
    b'{"event":"tool_started","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"call_id":"call_1","tool_name":"run_command","attempt":1,"step_id":"step_1",'
    b'"idempotency":"non_idempotent","replay_policy":"never","risk_level":"medium"}}\n'
    b'{"event":"restart_checkpoint","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"mode":"reaction_loop"}}\n'
    b'{"event":"tool_started","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"call_id":"call_1","tool_name":"read_file","attempt":1,"step_id":"step_1",'
    b'"idempotency":"idempotent","replay_policy":"auto","risk_level":"low"}}\n'
    b'{"event":"tool_finished","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"call_id":"call_1","tool_name":"list_files","status":"succeeded"}}\n'
    b'{"event":"checkpoint","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"checkpoint_id":"ckpt_000001","kind":"after_step","step":1}}\n'
    b'{"event":"checkpoint","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"checkpoint_id":"ckpt_000001","kind":"tool_end","step":1}}\n'
    b'{"event":"checkpoint","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"checkpoint_id":"ckpt_000001","kind":"tool_start","step":1}}\n'
    b'{"event":"checkpoint","at":"2026-01-01T00:00:00.000000+00:00","run_id":"run_","generation":1,'
    b'"data":{"checkpoint_id":"ckpt_000001","kind":"before_step","step":1}}\n'
)
_dictionary = zstandard.ZstdCompressionDict(DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_dictionary.precompute_compress(level=_LEVEL)
_local = threading.local()  # zstandard's (de)compressors are not thread-safe: the heartbeat and tool threads trace


def _codecs() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    codecs: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(_local, "codecs", None)
    if codecs is None:
        # No dictionary id in the frame (the marker names the dictionary) and no checksum (the line has its own).
        compressor = zstandard.ZstdCompressor(
            level=_LEVEL, dict_data=_dictionary, write_checksum=False, write_dict_id=False
        )
        codecs = _local.codecs = (compressor, zstandard.ZstdDecompressor(dict_data=_dictionary))
    return codecs


def pack(lines: Sequence[bytes]) -> list[bytes]:
    """The lines to store for ``lines``: one packed line when that is smaller, else the lines as they are."""
    if not lines:
        return []
    joined = b"\n".join(lines)
    packed = MARKER + binascii.b2a_base64(_codecs()[0].compress(joined), newline=False)
    if len(packed) >= len(joined):
        return list(lines)
    return [packed]


def unpack(stored: bytes) -> Iterator[bytes]:
    """The trace lines one stored line holds; a packed line that does not decode yields nothing (the trace is
    observability: a damaged batch is skipped like a damaged line)."""
    if not stored.startswith(MARKER):
        yield stored
        return
    try:
        joined = _codecs()[1].decompress(
            binascii.a2b_base64(stored[len(MARKER) :], strict_mode=True), max_output_size=_MAX_BATCH
        )
    except (binascii.Error, ValueError, zstandard.ZstdError):
        return
    yield from joined.split(b"\n")
