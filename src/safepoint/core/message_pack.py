"""Every message of a run's log, with those a snapshot covers held as bytes (issue 10 §3): what a snapshot's view
(``core.view_snapshot``) keeps of a long conversation without one Python object per message.

``PackedMessages`` is the packed part: each message encoded on its own (msgpack), ``CHUNK`` of them to a zstd frame,
with their log seqs, ascending (a log's messages come in seq order, and a writer's next snapshot only appends the
later ones). ``MessageMap`` is a ``dict`` (log seq -> message, ``RunView.message_records``) of the messages added
since, over a ``PackedMessages``: read as a dict it gives every message, a packed one decoded when first asked and
then kept, in a cache its copies share, so the same seq always gives the same object (the session's readers tell a
message of the current branch by identity). Rejected: a ``Mapping`` of its own (every reader typed ``dict`` would
have to change), and decoding again on each read (two reads, two objects).

Pure: messages in, bytes out, and back.
"""

from __future__ import annotations

import array
import bisect
from collections.abc import ItemsView, Iterable, Iterator, KeysView, ValuesView

import msgspec
import zstandard

from safepoint.core.packed_dict import PackedDict
from safepoint.errors import CorruptRecordError
from safepoint.records import Message

CHUNK = 64  # messages a frame: a read decompresses a few KB (rejected: one frame, a whole decompress per read)
_encoder = msgspec.msgpack.Encoder()
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()
_decoder = msgspec.msgpack.Decoder(Message)


class PackedMessages(msgspec.Struct, frozen=True):
    """Messages, packed. ``seqs`` (n uint64, ascending) are their log seqs; ``offsets`` (n + 1 uint64) bound each
    in the frames' decompressed bytes; ``chunks`` (uint64) where each frame starts in ``blob`` (and the last ends)."""

    blob: bytes = b""
    chunks: bytes = b"\x00" * 8
    offsets: bytes = b"\x00" * 8
    seqs: bytes = b""

    def __len__(self) -> int:
        return len(self.seqs) // 8

    def check(self) -> None:
        """Raise ``ValueError`` when the parts do not fit together (the reader then reads the log)."""
        n = len(self)
        if len(self.seqs) % 8 or len(self.offsets) != 8 * (n + 1) or len(self.chunks) != 8 * (-(-n // CHUNK) + 1):
            raise ValueError("its packed messages' index does not fit them")
        if memoryview(self.chunks).cast("Q")[-1] != len(self.blob):
            raise ValueError("its packed messages' frames do not fit their bytes")
        # Not checked here: that the seqs ascend (a pass over every message at each open, 2-4 ms at 50,000). The
        # order is made by ``pack_messages``, which refuses any other, and the bytes are the store's checksum's: a
        # snapshot's integrity is that checksum (a seq damaged in order would be no more found than one damaged
        # in value). A seq a branch names and the map lacks is reported where it is read (``core.message_list``).


class _Values(ValuesView[Message]):
    """A ``MessageMap``'s messages, read as iterated, from either end (``lifetime_messages``: a turn reads the newest
    few from the end, a ``dict``'s values view is reversible too)."""

    _mapping: MessageMap

    def __reversed__(self) -> Iterator[Message]:
        return (self._mapping[seq] for seq in reversed(self._mapping))


def pack_messages(messages: Iterable[tuple[int, Message]], base: PackedMessages | None = None) -> PackedMessages:
    """``base`` with ``messages`` (log seq, message) added after its own, each encoded once: a writer's next
    snapshot appends the messages logged since, it does not encode the others again."""
    base = base or PackedMessages()
    offsets = array.array("Q", base.offsets)
    chunks = array.array("Q", base.chunks)
    seqs = array.array("Q", base.seqs)
    blob = bytearray(base.blob)
    tail = bytearray()  # the last frame's messages, while it is not full: decompressed, to be framed again
    first = len(seqs) - len(seqs) % CHUNK  # the first message of the frames made now
    if len(seqs) % CHUNK:
        tail += _decompressor.decompress(bytes(blob[chunks[-2] :]))
        del blob[chunks[-2] :]
        chunks.pop()
    last = seqs[-1] if seqs else -1
    for seq, message in messages:
        if seq <= last:
            raise ValueError(f"message at log seq {seq} packed after seq {last}")
        data = _encoder.encode(message)
        tail += data
        offsets.append(offsets[-1] + len(data))
        seqs.append(seq)
        last = seq
    for start in range(first, len(seqs), CHUNK):
        end = min(start + CHUNK, len(seqs))
        blob += _compressor.compress(bytes(tail[offsets[start] - offsets[first] : offsets[end] - offsets[first]]))
        chunks.append(len(blob))
    return PackedMessages(bytes(blob), chunks.tobytes(), offsets.tobytes(), seqs.tobytes())


class _Packed:
    """A ``PackedMessages`` read: its views made once, and the messages decoded so far (shared by every copy of the
    map, so a seq gives one object)."""

    def __init__(self, packed: PackedMessages) -> None:
        self.packed = packed
        self.blob = memoryview(packed.blob)
        self.chunks = memoryview(packed.chunks).cast("Q")
        self.offsets = memoryview(packed.offsets).cast("Q")
        self.seqs = memoryview(packed.seqs).cast("Q")
        self.decoded: dict[int, Message] = {}
        self._frame: tuple[int, bytes] = (-1, b"")  # the last frame decompressed (iteration reads each once)

    def position(self, seq: int) -> int | None:
        at = bisect.bisect_left(self.seqs, seq)
        return at if at < len(self.seqs) and self.seqs[at] == seq else None

    def message(self, position: int) -> Message:
        seq = int(self.seqs[position])
        found = self.decoded.get(seq)
        if found is None:
            chunk = position // CHUNK
            if self._frame[0] != chunk:
                try:
                    data = _decompressor.decompress(self.blob[self.chunks[chunk] : self.chunks[chunk + 1]])
                except zstandard.ZstdError as exc:
                    raise CorruptRecordError(f"a packed message frame does not decompress ({exc})") from None
                self._frame = (chunk, data)
            base = self.offsets[chunk * CHUNK]
            try:
                found = _decoder.decode(
                    self._frame[1][self.offsets[position] - base : self.offsets[position + 1] - base]
                )
            except msgspec.DecodeError as exc:
                raise CorruptRecordError(f"a packed message does not decode ({exc})") from None
            self.decoded[seq] = found
        return found


class MessageMap(PackedDict[int, Message]):
    """Log seq -> message over a ``PackedMessages`` (``RunView.message_records``): the dict itself holds the
    messages added since it was packed (later seqs)."""

    _packed: _Packed
    _extra: int  # seqs the dict holds that the packed part does not
    _removal = "a log's messages are never removed"

    def __init__(self, packed: PackedMessages, added: dict[int, Message] | None = None) -> None:
        self._packed, self._extra = _Packed(packed), 0
        dict.__init__(self)
        for seq, message in (added or {}).items():
            self[seq] = message

    @property
    def packed(self) -> PackedMessages:
        return self._packed.packed

    def added(self) -> list[tuple[int, Message]]:
        """The messages the packed part does not hold (log seq, message), in seq order."""
        return sorted((seq, m) for seq, m in dict.items(self) if self._packed.position(seq) is None)

    def __getitem__(self, seq: int) -> Message:
        if dict.__contains__(self, seq):
            return dict.__getitem__(self, seq)
        position = self._packed.position(seq) if isinstance(seq, int) else None
        if position is None:
            raise KeyError(seq)
        return self._packed.message(position)

    def __contains__(self, seq: object) -> bool:
        return dict.__contains__(self, seq) or (isinstance(seq, int) and self._packed.position(seq) is not None)

    def __setitem__(self, seq: int, message: Message) -> None:
        if not dict.__contains__(self, seq) and self._packed.position(seq) is None:
            self._extra += 1
        dict.__setitem__(self, seq, message)

    def __len__(self) -> int:
        return len(self._packed.seqs) + self._extra

    def _ordered(self) -> list[tuple[int, Message]]:
        """Every (seq, message) in seq order: the packed ones decoded (what goes over every message pays)."""
        return [(seq, self[seq]) for seq in self._seqs()]

    def _seqs(self) -> list[int]:
        return self._packed.seqs.tolist() + [seq for seq, _ in self.added()]

    def __iter__(self) -> Iterator[int]:  # the seqs alone: nothing decoded
        return iter(self._seqs())

    def __reversed__(self) -> Iterator[int]:
        return reversed(self._seqs())

    def keys(self) -> KeysView[int]:  # type: ignore[override]  # views over the map: read as they are iterated
        return KeysView(self)

    def values(self) -> ValuesView[Message]:  # type: ignore[override]  # as ``keys``
        return _Values(self)

    def items(self) -> ItemsView[int, Message]:  # type: ignore[override]  # as ``keys``
        return ItemsView(self)

    def copy(self) -> MessageMap:  # the packed part and its decoded messages shared
        copied = MessageMap.__new__(MessageMap)
        dict.__init__(copied, dict.items(self))
        copied._packed, copied._extra = self._packed, self._extra
        return copied

    def __repr__(self) -> str:
        return f"MessageMap({len(self._packed.seqs)} packed, {dict.__len__(self)} held)"
