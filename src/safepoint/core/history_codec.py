"""The history as the log keeps it: each message's text and tool calls zstd-compressed, against a dictionary trained
on the run's own earlier messages (issue 10 §7). Pure: bytes in, bytes out; the log writer stages what it returns.

What a message record holds (a row since issue 10 §5: ``StoredMessageRow``, the values without their names; an
object before, which still reads): its exact fields (seq, role, tool_call_id, name, turn) as they are, and ``z``:
one zstd frame of the JSON ``[content, tool_calls]``, made after redaction (the log writer redacts first, so
compressed bytes never hide a secret a grep of the store would have found), with ``d``: the log sequence number of the
``MessageDictionary`` record it was compressed against (0: none). A message too short to gain, or one that would
not shrink, keeps ``content`` and ``tool_calls`` as plain JSON, which is also how every log written before this
codec reads (old logs stay readable; a log written with the codec needs this version or later).

Why a trained dictionary: one message of about 1 KB (prose and code) compresses alone to 0.48 of its size (zstd
needs context to find repeats), 0.64 once base64'd; against a 64 KB dictionary trained on the run's earlier
messages, to 0.47 base64'd, dictionaries included, in about 20 µs (measured on 3,000 slices of the standard
library's docs and sources; a 16 KB dictionary gave 0.50). Against the dictionary at level ``PACK_LEVEL`` (9, not
3): 7% smaller (316 bytes a KB of text, not 340) for about 0.1 ms a message, once, when it is logged (a message is
read back at the same speed whatever its level); what a long run's history costs on disk is most of what the run
costs (issue 10 §7: at most 1.5x its text).
Random access stays cheap: decoding one message needs that message and its dictionary's record, never the history
before it. Rejected: one zstd stream over the whole history (a quarter of the size on repetitive runs, but reading
one message means decompressing everything before it since the last reset, a damaged record spoils every later one
of its stream, and a refused append leaves the writer's stream ahead of the log); a raw-content dictionary of the
previous 32-128 KB of messages (the same ratio as a trained one, at 0.5-1.3 ms a message to load the dictionary,
and the same coupling on read).

The dictionary is retrained as the session's messages grow four-fold (at 64, 256, 1,024, ... messages), from the
session's latest ``SAMPLES`` messages (redacted, each cut to ``SAMPLE_BYTES``): a few records of 10-40 KB,
about 3% of 3,000 steps of 1 KB text. A new session (a resume) trains its own: the codec keeps no state across
processes. JSON lines cannot hold raw bytes, so ``z`` is base64 in the log (a third more; the ratio above includes
it); the sealed store encrypts the record as it is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, get_args

import msgspec
import zstandard

from safepoint.errors import CorruptRecordError, ExitCode, SafepointError
from safepoint.records import Message, MessageDictionary, Role, ToolCall

MIN_PACK = 96  # bytes of plain JSON below which a frame's header and base64 eat the gain
FIRST_TRAINING = 64  # messages of the session before the first dictionary
GROWTH = 4  # retrain when the session's messages have grown this many times since the last training
SAMPLES = 512  # the latest messages a dictionary is trained on
SAMPLE_BYTES = 4096  # each sample cut to this (a long tool result teaches no more than its start)
DICT_BYTES = 64 * 1024  # a trained dictionary's size (at most a quarter of its samples)
LEVEL = 3
PACK_LEVEL = 9  # a message against the trained dictionary (see above; level 19: 4% smaller again, 0.8 ms a message)
MAX_MESSAGE = 1 << 31  # a frame claiming more than this is damaged (zstd records the content size)

_payload_encoder = msgspec.json.Encoder()
_payload_decoder = msgspec.json.Decoder(tuple[str, tuple[ToolCall, ...]])
_plain = zstandard.ZstdCompressor(level=LEVEL, write_checksum=False)
_plain_reader = zstandard.ZstdDecompressor()


class UnrecordableMessage(SafepointError):
    """A message the log cannot hold as written: refused when it is recorded, before anything is staged."""

    exit_code = ExitCode.USAGE


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(item) for item in value)
    return False


def _check_recordable(content: str, calls: list[Any]) -> bytes:
    """The JSON ``[content, tool_calls]``, or a one-line refusal naming what cannot be kept as written. Rejected:
    replacing a lone surrogate with U+FFFD, or a non-finite number with ``null`` (JSON has neither), silently: a
    history that reads back other text or other arguments than the model sent, and a call matched by its
    arguments that no longer matches."""
    for call in calls:
        if isinstance(call, dict) and _non_finite(call.get("args")):
            raise UnrecordableMessage(
                f"tool call {str(call.get('call_id', ''))!r} ({str(call.get('tool', ''))!r}) has a non-finite number "
                "(Infinity or NaN) in its arguments, which JSON cannot keep: send finite numbers (or strings)"
            )
    try:
        return _payload_encoder.encode([content, calls])
    except UnicodeEncodeError:
        raise UnrecordableMessage(
            "a message holds a lone surrogate (text cut mid-character, e.g. a provider's \\ud83d), which UTF-8 "
            "cannot keep: decode the provider's text with errors='replace' before recording it"
        ) from None


class StoredMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A message record as the log holds it: ``Message``'s fields, its text and calls either plain or in ``z``."""

    seq: int
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    turn: int | None = None
    content_ref: str | None = None  # the content kept as a blob (``core.large_values``)
    z: bytes | None = None
    d: int = 0


class StoredMessageRow(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """A message record as a row (since issue 10 §5's rows, ``core.record_rows``): ``StoredMessage``'s values in
    its order without their names, trailing defaults left out (a tool's short result: 0.11 KB, not 0.16). Never
    reorder (rows written need this order); a new field goes at the end."""

    seq: int
    role: int | str  # its place in ``ROLES`` (a role ``ROLES`` lacks: its name)
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    turn: int | None = None
    content_ref: str | None = None
    z: bytes | None = None
    d: int = 0


ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")  # never reorder: a new role goes at the end
_ROLE_NUMBERS = {role: number for number, role in enumerate(ROLES)}
_KNOWN_ROLES = frozenset(get_args(Role))
_ROW_FIELDS = StoredMessageRow.__struct_fields__
assert StoredMessage.__struct_fields__ == _ROW_FIELDS  # one order: a field of one is a field of the other
STORED_MESSAGE = msgspec.json.Decoder(StoredMessage)  # a message record written as an object (before rows)
_row_decoder = msgspec.json.Decoder(StoredMessageRow)


def is_message_row(raw: bytes | msgspec.Raw) -> bool:
    return memoryview(raw)[:1].tobytes() == b"["


def decode_stored(raw: bytes | msgspec.Raw) -> StoredMessage:
    """A message record's body as written: a row, or an object (every log written before rows)."""
    if not is_message_row(raw):
        return STORED_MESSAGE.decode(raw)
    return decode_message_row(raw)


def decode_message_row(raw: bytes | msgspec.Raw) -> StoredMessage:
    """A message record's row. Raises ``msgspec.DecodeError``."""
    row = _row_decoder.decode(raw)
    role = ROLES[row.role] if isinstance(row.role, int) and 0 <= row.role < len(ROLES) else row.role
    if role not in _KNOWN_ROLES:
        raise msgspec.ValidationError(f"a message row's role {row.role!r} is none of {sorted(_KNOWN_ROLES)}")
    fields = dict(zip(_ROW_FIELDS, msgspec.structs.astuple(row), strict=True))  # in C, not a getattr per field
    fields["role"] = role
    return StoredMessage(**fields)


MESSAGE_DICTIONARY = msgspec.json.Decoder(MessageDictionary)


_ROW_DEFAULTS: dict[str, Any] = {"content": "", "tool_calls": (), "d": 0}  # the others' default is None


def _row(plain: dict[str, Any]) -> bytes:
    """The row of a stored message from its plain fields (``Redactor.record``'s, with ``z``/``d`` set), trailing
    defaults left out (msgspec writes every place of an ``array_like`` struct)."""
    values = [plain.get(name, _ROW_DEFAULTS.get(name)) for name in _ROW_FIELDS]
    values[1] = _ROLE_NUMBERS.get(str(values[1]), values[1])
    while len(values) > 2 and values[-1] == _ROW_DEFAULTS.get(_ROW_FIELDS[len(values) - 1]):
        values.pop()
    return _payload_encoder.encode(values)


class HistoryEncoder:
    """A session's side of the codec: packs redacted messages, and says when a new dictionary is to be staged."""

    def __init__(self) -> None:
        self._samples: deque[bytes] = deque(maxlen=SAMPLES)
        self._seen = 0
        self._next_training = FIRST_TRAINING
        self._dict_seq = 0
        self._compressor: zstandard.ZstdCompressor | None = None

    def encode(self, plain: dict[str, Any], stage: Callable[[MessageDictionary], int]) -> bytes:
        """The JSON body of a message record from ``plain``, the redacted message as builtins (``Redactor.record``).
        ``stage`` stages a dictionary record ahead of it (in the same group) and returns its sequence number."""
        content = plain.pop("content", "")
        calls = plain.pop("tool_calls", [])
        payload = _check_recordable(content, calls)  # first: a refused message stages nothing
        self._seen += 1
        self._samples.append(payload[:SAMPLE_BYTES])
        if self._seen >= self._next_training:
            self._next_training = self._seen * GROWTH
            self._train(stage)
        if len(payload) >= MIN_PACK:
            packed = (self._compressor or _plain).compress(payload)
            if (len(packed) + 2) * 4 // 3 + 12 < len(payload):  # base64 and the row's places included
                plain["z"] = packed
                if self._compressor is not None:
                    plain["d"] = self._dict_seq
                return _row(plain)
        if content:
            plain["content"] = content
        if calls:
            plain["tool_calls"] = calls
        return _row(plain)

    def _train(self, stage: Callable[[MessageDictionary], int]) -> None:
        samples: list[bytes | bytearray | memoryview] = list(self._samples)
        size = min(DICT_BYTES, sum(map(len, samples)) // 4)
        try:
            trained = zstandard.train_dictionary(size, samples, level=LEVEL)
        except zstandard.ZstdError:  # too few or too alike samples: keep the current one, try at the next growth
            return
        data = trained.as_bytes()
        self._dict_seq = stage(MessageDictionary(data=_plain.compress(data), size=len(data)))
        self._compressor = zstandard.ZstdCompressor(
            level=PACK_LEVEL, dict_data=trained, write_checksum=False, write_dict_id=False
        )

    def forget(self, durable_seq: int) -> None:
        """A group was refused: a dictionary staged in it was never stored, so no later message may point at it."""
        if self._dict_seq > durable_seq:
            self._dict_seq = 0
            self._compressor = None
            self._next_training = self._seen + 1  # train again with the next message


class HistoryDecoder:
    """A reader's side: messages from their records, dictionaries kept by sequence number as they are met (a log
    read in order meets each before its messages); ``fetch`` reads one a reader started after (a tail read)."""

    def __init__(self, fetch: Callable[[int], bytes] | None = None) -> None:
        self._readers: dict[int, zstandard.ZstdDecompressor] = {}
        self._fetch = fetch

    def add_dictionary(self, seq: int, body: bytes | MessageDictionary) -> None:
        """Keep the dictionary record at ``seq``. Raises ``CorruptRecordError`` when it does not decode."""
        record = MESSAGE_DICTIONARY.decode(body) if isinstance(body, bytes) else body
        try:
            data = _plain_reader.decompress(record.data, max_output_size=record.size)
            trained = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
            self._readers[seq] = zstandard.ZstdDecompressor(dict_data=trained)
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"the history's dictionary at seq {seq} does not decode ({exc})") from None

    def message(self, stored: StoredMessage) -> Message:
        """The message a record holds. Raises ``CorruptRecordError`` when its text does not decode."""
        content, calls = stored.content, stored.tool_calls
        if stored.z is not None:
            content, calls = self._unpack(stored.z, stored.d, stored.seq)
        return Message(
            seq=stored.seq,
            role=stored.role,
            content=content,
            tool_calls=calls,
            tool_call_id=stored.tool_call_id,
            name=stored.name,
            turn=stored.turn,
            content_ref=stored.content_ref,
        )

    def decode(self, body: bytes) -> Message:
        """One message record's body (random access: its dictionary is fetched when not yet met)."""
        try:
            stored = decode_stored(body)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(f"a message record does not decode ({exc})") from None
        return self.message(stored)

    def _unpack(self, packed: bytes, dict_seq: int, seq: int) -> tuple[str, tuple[ToolCall, ...]]:
        reader = _plain_reader
        if dict_seq:
            found = self._readers.get(dict_seq)
            if found is None and self._fetch is not None:
                try:
                    body = self._fetch(dict_seq)
                    self.add_dictionary(dict_seq, body)
                except (msgspec.DecodeError, LookupError):
                    pass
                found = self._readers.get(dict_seq)
            if found is None:
                raise CorruptRecordError(
                    f"message {seq} was compressed against a dictionary (seq {dict_seq}) not found"
                )
            reader = found
        try:
            payload = reader.decompress(packed, max_output_size=MAX_MESSAGE)
            return _payload_decoder.decode(payload)
        except (zstandard.ZstdError, msgspec.DecodeError) as exc:
            raise CorruptRecordError(f"message {seq}'s text does not decode ({exc})") from None
