"""Every byte a file store holds, with the history's compressed frames expanded: a grep of the store for a planted
secret must see what compression would hide (message text is zstd-compressed after redaction, against dictionaries
trained on the run's messages; ``safepoint.core.history_codec``). Written apart from the library's own decoder, so a
bug there cannot hide a secret from the tests that use this."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import zstandard

TRACE_MARKER = b"z1:"  # a trace batch: base64 of zstd against the trace dictionary (``store.trace_batches``)


def expanded_trace_batch(payload: bytes) -> bytes:
    """The trace lines a packed batch holds (decoded here, not by the library's ``unpack``)."""
    from safepoint.store.trace_batches import DICTIONARY

    dictionary = zstandard.ZstdCompressionDict(DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    packed = base64.b64decode(payload[len(TRACE_MARKER) :])
    return zstandard.ZstdDecompressor(dict_data=dictionary).decompress(packed, max_output_size=1 << 30)


def trace_lines(data: bytes) -> list[bytes]:
    """Every trace event line a run's ``trace.jsonl`` holds, packed batches expanded."""
    lines: list[bytes] = []
    for line in data.splitlines():
        payload = line[9:]
        if len(line) < 10 or zlib.crc32(payload) != int(line[:8], 16):
            continue
        lines.extend(expanded_trace_batch(payload).split(b"\n") if payload.startswith(TRACE_MARKER) else [payload])
    return lines


# A message record as a row (``core.history_codec.StoredMessageRow``): its values in this order, trailing defaults
# left out. Restated here, not imported: a change of the library's order must break these tests, not follow them.
MESSAGE_ROW = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "turn", "content_ref", "z", "d")


ROLES = ("system", "user", "assistant", "tool")  # a row's role is its place here


def message_body(body: object) -> dict[str, object] | None:
    """A message record's body as an object (a row's values named), or None when it is neither (ciphertext)."""
    if isinstance(body, list):
        named = {name: value for name, value in zip(MESSAGE_ROW, body, strict=False) if value is not None}
        if isinstance(named.get("role"), int):
            named["role"] = ROLES[int(str(named["role"]))]
        return named
    return dict(body) if isinstance(body, dict) else None


def expanded_log(data: bytes) -> bytes:
    """The plain text of every compressed message and every dictionary in a log's bytes (framed JSON lines), and of
    every packed trace batch."""
    dictionaries: dict[int, zstandard.ZstdCompressionDict] = {}
    out: list[bytes] = []
    for line in data.splitlines():
        payload = line[9:]
        if len(line) < 10 or zlib.crc32(payload) != int(line[:8], 16):
            continue
        if payload.startswith(TRACE_MARKER):
            out.append(expanded_trace_batch(payload))
            continue
        try:
            record = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        body = message_body(record.get("body")) if record.get("kind") == "message" else record.get("body")
        if not isinstance(body, dict):
            continue  # a sealed store's body is a string: ciphertext; a ledger state's or a checkpoint's, a row
        if record.get("kind") == "message_dict":
            raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(body["data"]), max_output_size=body["size"])
            dictionaries[record["seq"]] = zstandard.ZstdCompressionDict(raw)
            out.append(raw)
        elif record.get("kind") == "blob" and body.get("codec") == "zstd" and body.get("data"):
            out.append(zstandard.ZstdDecompressor().decompress(base64.b64decode(body["data"]), max_output_size=1 << 30))
        elif record.get("kind") == "message" and "z" in body:
            found = dictionaries.get(body.get("d", 0))
            reader = zstandard.ZstdDecompressor(dict_data=found) if found else zstandard.ZstdDecompressor()
            out.append(reader.decompress(base64.b64decode(body["z"]), max_output_size=1 << 30))
    return b"\n".join(out)


def every_store_byte(root: Path) -> bytes:
    """The bytes of every file under ``root`` (a store), then the expanded text of every log among them."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    raw = [p.read_bytes() for p in files]
    expanded = [expanded_log(data) for p, data in zip(files, raw, strict=True) if p.suffix == ".jsonl"]
    expanded += [expanded_blob(data) for data in raw if data.startswith(b"spb1 zstd ")]
    return b"".join(raw) + b"\n" + b"\n".join(expanded)


def expanded_blob(data: bytes) -> bytes:
    """A store-wide blob file's plain bytes (``spb1 <codec> <size>\\n<payload>``): large content, compressed."""
    header, _, payload = data.partition(b"\n")
    return zstandard.ZstdDecompressor().decompress(payload, max_output_size=int(header.split()[2]))


def expanded_messages(data: bytes) -> list[dict[str, object]]:
    """Every message record's body of a log, with ``content`` and ``tool_calls`` expanded from ``z``."""
    dictionaries: dict[int, zstandard.ZstdCompressionDict] = {}
    found: list[dict[str, object]] = []
    for line in data.splitlines():
        record = json.loads(line[9:])
        body = record["body"]
        if record["kind"] == "message_dict":
            raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(body["data"]), max_output_size=body["size"])
            dictionaries[record["seq"]] = zstandard.ZstdCompressionDict(raw)
        elif record["kind"] == "message":
            body = message_body(body)
            assert body is not None, record
            if "z" in body:
                known = dictionaries.get(int(str(body.pop("d", 0))))
                reader = zstandard.ZstdDecompressor(dict_data=known) if known else zstandard.ZstdDecompressor()
                packed = base64.b64decode(str(body.pop("z")))
                content, calls = json.loads(reader.decompress(packed, max_output_size=1 << 30))
                body["content"], body["tool_calls"] = content, calls
            found.append(body)
    return found
