"""The current ledger entry of every call, with the finished ones held as bytes (issue 10 §3): what a snapshot's view
(``core.view_snapshot``) keeps of a long run's ledger without one Python object per past call.

``Settled`` is the packed part: each finished call's entry encoded on its own (msgpack), the entries one after the
other in ``blob``, and an index of 64-bit digests of the call ids, sorted, bisected on a ``memoryview``; an entry is
decoded when it is asked for, never kept. ``LedgerMap`` is a ``dict`` of the entries that changed since (the open
calls, the calls after the snapshot) over a ``Settled``: reading it as a dict (``get``, ``in``, ``len``, iteration
in order of first appearance, ``items``) gives every call, as the plain dict the whole log's fold gives (a subclass,
so every reader typed ``dict`` takes it; rejected: a ``Mapping`` of its own, which every caller's type would have
to follow). What goes over every call (``explain``, ``gc``) decodes them all, and pays then.

Pure: entries in, bytes out, and back.
"""

from __future__ import annotations

import array
import bisect
import hashlib
import heapq
import sys
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from itertools import islice
from typing import Literal, TypeVar

import msgspec
import zstandard

from safepoint.core.hashing import idempotency_key, input_hash
from safepoint.core.packed_dict import PackedDict
from safepoint.errors import CorruptRecordError
from safepoint.records import ToolLedgerEntry

V = TypeVar("V")
CHUNK = 64  # entries a frame: one read decompresses about 20 KB (rejected: one frame, a whole decompress per read)
_encoder = msgspec.msgpack.Encoder()
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()
_decoder = msgspec.msgpack.Decoder(ToolLedgerEntry)


DERIVED = "="  # a packed entry's hash or key that its other fields give (a value beginning with it: one more in front)


def _packed_entry(entry: ToolLedgerEntry) -> ToolLedgerEntry:
    """``entry`` as packed: its input hash and idempotency key left out where its input and ids give them (they are
    most of a packed entry's bytes: 64 and 32 hex digits that do not compress; 81 bytes a call became 26)."""
    hashed = DERIVED if entry.input_hash == input_hash(entry.input) else _escaped(entry.input_hash)
    key = (
        DERIVED
        if entry.idempotency_key == idempotency_key(entry.run_id, entry.call_id)
        else _escaped(entry.idempotency_key)
    )
    if hashed is entry.input_hash and key is entry.idempotency_key:
        return entry
    return msgspec.structs.replace(entry, input_hash=hashed, idempotency_key=key)


def _escaped(value: str) -> str:
    return DERIVED + value if value.startswith(DERIVED) else value


def _unpacked_entry(entry: ToolLedgerEntry) -> ToolLedgerEntry:
    hashed, key = entry.input_hash, entry.idempotency_key
    if not hashed.startswith(DERIVED) and not key.startswith(DERIVED):
        return entry
    return msgspec.structs.replace(
        entry,
        input_hash=input_hash(entry.input) if hashed == DERIVED else hashed.removeprefix(DERIVED),
        idempotency_key=idempotency_key(entry.run_id, entry.call_id) if key == DERIVED else key.removeprefix(DERIVED),
    )


def digest(call_id: str) -> int:
    """A call id's 64-bit digest (stable across processes, unlike ``hash``); a collision is told apart by the
    decoded entry's call id."""
    return int.from_bytes(hashlib.blake2b(call_id.encode(errors="surrogatepass"), digest_size=8).digest(), "little")


class Settled(msgspec.Struct, frozen=True):
    """Finished calls' entries, packed. ``offsets`` (n + 1 little-endian uint64) bound each entry in ``blob``;
    ``ordinals`` (n uint32) give each call's place in the ledger's order; ``digests`` (n uint64, sorted) and
    ``order`` (n uint32: the entry each digest is) are the index."""

    blob: bytes = b""  # the entries, each ``CHUNK`` of them one zstd frame (rejected: raw, 350 bytes a call)
    chunks: bytes = b"\x00" * 8  # uint64: where each frame starts in ``blob`` (and where the last ends)
    offsets: bytes = b"\x00" * 8  # uint64, n + 1: where each entry starts in the frames' decompressed bytes
    ordinals: bytes = b""
    digests: bytes = b""
    order: bytes = b""
    attempts: bytes = b""  # n uint32: each call's `started` states (``RunView.attempt_counts``)
    seqs: bytes = b""  # n uint64: the log seq of each call's latest ledger record (``RunView.ledger_seqs``)
    steps: bytes = b""  # n uint32, sorted: the step numbers of the calls ...
    by_step: bytes = b""  # ... n uint32: the entry each is (the calls of the last steps found by bisection)

    def __len__(self) -> int:
        return len(self.ordinals) // 4

    def views(self) -> tuple[memoryview, memoryview, memoryview, memoryview]:
        return (
            memoryview(self.offsets).cast("Q"),
            memoryview(self.ordinals).cast("I"),
            memoryview(self.digests).cast("Q"),
            memoryview(self.order).cast("I"),
        )

    def check(self) -> None:
        """Raise ``ValueError`` when the parts do not fit together (the reader then reads the log)."""
        n = len(self)
        if (
            len(self.ordinals) % 4
            or len(self.offsets) != 8 * (n + 1)
            or len(self.chunks) != 8 * (-(-n // CHUNK) + 1)
            or len(self.digests) != 8 * n
            or len(self.order) != 4 * n
            or len(self.attempts) != 4 * n
            or len(self.seqs) != 8 * n
            or len(self.steps) != 4 * n
            or len(self.by_step) != 4 * n
        ):
            raise ValueError("its settled entries' index does not fit them")
        if memoryview(self.chunks).cast("Q")[-1] != len(self.blob):
            raise ValueError("its settled entries' frames do not fit their bytes")
        # Not checked here: that every position the index holds is inside it (a pass over every call at each open,
        # 3-6 ms at 50,000 calls); one that is not is found where it is read (``_Index.entry``), as a damaged
        # frame is, and reported as a corrupt record.


class _Index:
    """A ``Settled``'s views, made once per map (casting is cheap, but not per lookup)."""

    def __init__(self, settled: Settled) -> None:
        self.settled = settled
        self.blob = memoryview(settled.blob)
        self.offsets, self.ordinals, self.digests, self.order = settled.views()
        self.attempts = memoryview(settled.attempts).cast("I")
        self.seqs = memoryview(settled.seqs).cast("Q")
        self.steps = memoryview(settled.steps).cast("I")
        self.by_step = memoryview(settled.by_step).cast("I")

        self.chunks = memoryview(settled.chunks).cast("Q")
        self._frame: tuple[int, bytes] = (-1, b"")  # the last frame decompressed (iteration reads each once)
        # Each call id's answer, once found: a ledger record of a call asks its map and the maps of its attempts and
        # seq several times (a digest and a bisection each; half a fold's time per record at 50,000 calls). Holds
        # the calls asked for (a resume's tail, a session's new calls), not every call.
        self._found: dict[str, int | None] = {}

    def frame(self, chunk: int) -> bytes:
        if self._frame[0] != chunk:
            try:
                data = _decompressor.decompress(self.blob[self.chunks[chunk] : self.chunks[chunk + 1]])
            except zstandard.ZstdError as exc:
                raise CorruptRecordError(f"a packed ledger frame does not decompress ({exc})") from None
            self._frame = (chunk, data)
        return self._frame[1]

    def entry(self, position: int) -> ToolLedgerEntry:
        try:
            chunk = position // CHUNK
            base = self.offsets[chunk * CHUNK]
            data = self.frame(chunk)
            found = _decoder.decode(data[self.offsets[position] - base : self.offsets[position + 1] - base])
        except (IndexError, msgspec.DecodeError) as exc:
            raise CorruptRecordError(f"a packed ledger entry is damaged ({exc})") from None
        return _unpacked_entry(found)

    def find(self, call_id: str) -> int | None:
        """The position of ``call_id``'s entry, None when it is not a settled call."""
        try:
            return self._found[call_id]
        except KeyError:
            found = self._found[call_id] = self._find(call_id)
            return found

    def _find(self, call_id: str) -> int | None:
        key = digest(call_id)
        at = bisect.bisect_left(self.digests, key)
        while at < len(self.digests) and self.digests[at] == key:
            position = self.order[at]
            if self.entry(position).call_id == call_id:
                return position
            at += 1
        return None

    def from_step(self, first: int) -> list[int]:
        """The positions of the calls of step ``first`` and later."""
        return list(self.by_step[bisect.bisect_left(self.steps, first) :])


class Row(msgspec.Struct, frozen=True, array_like=True):
    """A finished call as packed: its place in the ledger's order, its entry, its attempts, its latest record's
    seq and its step number."""

    ordinal: int
    entry: ToolLedgerEntry
    attempts: int
    seq: int
    step: int


def pack(rows: list[Row], base: Settled | None = None) -> Settled:
    """``base`` with ``rows`` added: each entry encoded once, the index merged (a writer's next snapshot appends the
    calls that finished since; its cost is theirs plus copying ``base``'s bytes, not a sort of every call: rejected,
    the sort of 50,000 pairs at each write, 65 ms a write in the background writer at 50,000 calls)."""
    base = base or Settled()
    offsets, chunks = array.array("Q", base.offsets), array.array("Q", base.chunks)
    kept = len(base.blob)  # the frames kept as they are: copied once, into the new blob (a few MB at 50,000 calls)
    tail = bytearray()  # the last frame's entries, while it is not full: decompressed, to be framed again
    if len(offsets) > 1 and (len(offsets) - 1) % CHUNK:
        kept = chunks[-2]
        tail += _decompressor.decompress(memoryview(base.blob)[kept:])
        chunks.pop()
    frames: list[bytes] = []
    size = kept
    ordinals, attempts = array.array("I", base.ordinals), array.array("I", base.attempts)
    seqs = array.array("Q", base.seqs)
    keyed: list[tuple[int, int]] = []
    stepped: list[tuple[int, int]] = []
    for row in rows:
        keyed.append((digest(row.entry.call_id), len(ordinals)))
        stepped.append((row.step, len(ordinals)))
        data = _encoder.encode(_packed_entry(row.entry))
        tail += data
        offsets.append(offsets[-1] + len(data))
        ordinals.append(row.ordinal)
        attempts.append(row.attempts)
        seqs.append(row.seq)
    first = (len(chunks) - 1) * CHUNK  # the first entry of the frames made now
    for start in range(first, len(offsets) - 1, CHUNK):
        end = min(start + CHUNK, len(offsets) - 1)
        frames.append(
            _compressor.compress(memoryview(tail)[offsets[start] - offsets[first] : offsets[end] - offsets[first]])
        )
        size += len(frames[-1])
        chunks.append(size)
    digests, order = _merged(base.digests, base.order, "Q", keyed)
    steps, by_step = _merged(base.steps, base.by_step, "I", stepped)
    return Settled(
        blob=b"".join([memoryview(base.blob)[:kept], *frames]),
        chunks=chunks.tobytes(),
        offsets=offsets.tobytes(),
        ordinals=ordinals.tobytes(),
        digests=digests,
        order=order,
        attempts=attempts.tobytes(),
        seqs=seqs.tobytes(),
        steps=steps,
        by_step=by_step,
    )


def _merged(
    keys: bytes, positions: bytes, code: Literal["Q", "I"], added: list[tuple[int, int]]
) -> tuple[bytes, bytes]:
    """Sorted ``keys`` (``positions`` alongside, uint32) with ``added`` (key, position) merged in, as sorting every
    pair gives: an added position is after every earlier one, so among equal keys it goes last (``bisect_right``)."""
    old_keys, width = memoryview(keys).cast(code), 8 if code == "Q" else 4
    raw_keys, raw_positions = memoryview(keys), memoryview(positions)
    key_parts: list[bytes | memoryview] = []
    position_parts: list[bytes | memoryview] = []
    start = 0
    for key, position in sorted(added):
        at = bisect.bisect_right(old_keys, key, lo=start)
        key_parts += (raw_keys[start * width : at * width], key.to_bytes(width, sys.byteorder))
        position_parts += (raw_positions[start * 4 : at * 4], position.to_bytes(4, sys.byteorder))
        start = at
    key_parts.append(raw_keys[start * width :])
    position_parts.append(raw_positions[start * 4 :])
    return b"".join(key_parts), b"".join(position_parts)


class _PackedDict(PackedDict[str, V]):
    """A dict over a ``Settled``: the dict itself holds what changed since it was packed, which shadows the
    packed value of the same call. Read as a dict (``get``, ``in``, ``len``, iteration, ``items``), it gives every
    call; what goes over every call decodes the packed ones, and pays then."""

    _index: _Index
    _ordinals: dict[str, int]  # the ledger-order place of each call the dict holds that ``settled`` does not
    _shadowed: dict[str, int]  # call id -> its packed position, when the dict holds it too
    _extra: int  # calls the dict holds that ``settled`` does not
    _removal = "a ledger's calls are never removed"

    def _setup(self, index: _Index, changed: dict[str, V], ordinals: dict[str, int]) -> None:
        dict.__init__(self, changed)
        self._index, self._ordinals, self._shadowed, self._extra = index, dict(ordinals), {}, 0
        for call_id in changed:
            position = index.find(call_id)
            if position is None or self._absent(position):
                self._extra += 1
            else:
                self._shadowed[call_id] = position

    def _value(self, position: int) -> V:
        raise NotImplementedError

    def _absent(self, position: int) -> bool:
        """Whether the packed call has no value here (a call never started has no attempts)."""
        return False

    @property
    def settled(self) -> Settled:
        return self._index.settled

    def shadowing(self) -> dict[str, int]:
        """The calls the dict holds that ``settled`` holds too (a finished call changed again)."""
        return self._shadowed

    def changed(self) -> dict[str, V]:
        """What the dict itself holds (each call changed since ``settled`` was packed)."""
        return dict(dict.items(self))

    def ordinal(self, call_id: str) -> int | None:
        if call_id in self._shadowed:
            return int(self._index.ordinals[self._shadowed[call_id]])
        return self._ordinals.get(call_id)

    def _position(self, call_id: object) -> int | None:
        if not isinstance(call_id, str) or dict.__contains__(self, call_id):
            return None
        position = self._index.find(call_id)
        return None if position is None or self._absent(position) else position

    def __getitem__(self, call_id: str) -> V:
        if dict.__contains__(self, call_id):
            return dict.__getitem__(self, call_id)
        position = self._position(call_id)
        if position is None:
            raise KeyError(call_id)
        return self._value(position)

    def __contains__(self, call_id: object) -> bool:
        return dict.__contains__(self, call_id) or self._position(call_id) is not None

    def __setitem__(self, call_id: str, value: V) -> None:
        if not dict.__contains__(self, call_id):
            position = self._position(call_id)
            if position is None:
                if not self._sparse:  # (a sparse map's order is not asked: its length is a count)
                    self._ordinals.setdefault(call_id, len(self))  # a new call: after every other
                self._extra += 1
            else:
                self._shadowed[call_id] = position
        dict.__setitem__(self, call_id, value)

    def __len__(self) -> int:
        packed = len(self._index.settled)
        if self._sparse:  # (a count: only asked by what goes over every call)
            packed = sum(1 for position in range(packed) if not self._absent(position))
        return packed + self._extra

    _sparse = False  # whether some packed calls have no value here (``_absent``)

    def __iter__(self) -> Iterator[str]:
        return iter([call_id for call_id, _ in self._ordered()])

    def _ordered(self) -> list[tuple[str, V]]:
        """Every (call id, value), in ledger order: the packed ones decoded (what goes over every call pays)."""
        index, found = self._index, []
        for position in range(len(index.settled)):
            if self._absent(position):
                continue
            call_id = index.entry(position).call_id
            if not dict.__contains__(self, call_id):
                found.append((int(index.ordinals[position]), call_id, self._value(position)))
        for call_id, value in dict.items(self):
            ordinal = self.ordinal(call_id)
            found.append((len(index.settled) + len(self._ordinals) if ordinal is None else ordinal, call_id, value))
        found.sort(key=lambda item: item[0])
        return [(call_id, value) for _, call_id, value in found]

    def keys(self) -> KeysView[str]:  # type: ignore[override]  # a view of a plain dict of the same items
        return dict(self._ordered()).keys()

    def values(self) -> ValuesView[V]:  # type: ignore[override]  # as ``keys``
        return dict(self._ordered()).values()

    def items(self) -> ItemsView[str, V]:  # type: ignore[override]  # as ``keys``
        return dict(self._ordered()).items()

    def _copy_into(self, copied: _PackedDict[V]) -> None:
        dict.__init__(copied, dict.items(self))
        copied._index, copied._ordinals = self._index, dict(self._ordinals)
        copied._shadowed, copied._extra = dict(self._shadowed), self._extra

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._index.settled)} packed, {dict.__len__(self)} changed)"


class LedgerMap(_PackedDict[ToolLedgerEntry]):
    """Every call's current entry (``RunView.current``)."""

    def __init__(self, settled: Settled, changed: dict[str, ToolLedgerEntry], ordinals: dict[str, int]) -> None:
        self._setup(_Index(settled), changed, ordinals)

    def _value(self, position: int) -> ToolLedgerEntry:
        return self._index.entry(position)

    def copy(self) -> LedgerMap:  # the packed part shared
        copied = LedgerMap.__new__(LedgerMap)
        self._copy_into(copied)
        return copied

    def counts(self, changed: dict[str, int], column: str) -> ColumnMap:
        """A ``ColumnMap`` of ``column`` (``attempts``, ``seqs``) over the same packed calls."""
        found = ColumnMap.__new__(ColumnMap)
        found._column = getattr(self._index, column)
        found._sparse = column == "attempts"
        found._setup(self._index, changed, {})
        return found

    def page(self, start: int, stop: int) -> list[str]:
        """The call ids at places ``start`` to ``stop`` of the ledger's order (as iteration gives them), only the
        page's packed entries decoded (a page of ``explain``); the order itself from the ordinals alone."""
        index = self._index
        ordinals = index.ordinals
        packed = sorted(range(len(index.settled)), key=ordinals.__getitem__)  # positions, in ledger order
        last = len(index.settled) + len(self._ordinals)  # ``_ordered``'s place for a call without an ordinal
        held = sorted(
            (last if (ordinal := self.ordinal(call_id)) is None else ordinal, call_id)
            for call_id in dict.keys(self)
            if call_id not in self._shadowed
        )
        merged: Iterator[tuple[int, int, int | str]] = heapq.merge(
            ((int(ordinals[p]), 0, p) for p in packed), ((o, 1, c) for o, c in held)
        )
        return [
            thing if isinstance(thing, str) else index.entry(thing).call_id
            for _, _, thing in islice(merged, start, stop)
        ]

    def from_step(self, first: int) -> list[tuple[int, str]]:
        """(ordinal, call id) of the packed calls of step ``first`` and later, those the dict holds left out (their
        current step is their entry's)."""
        index, found = self._index, []
        for position in index.from_step(first):
            call_id = index.entry(position).call_id
            if call_id not in self._shadowed:
                found.append((int(index.ordinals[position]), call_id))
        return found


class ColumnMap(_PackedDict[int]):
    """A number per call over the packed calls' ``column`` (their attempts, their latest record's seq)."""

    _column: memoryview

    def _value(self, position: int) -> int:
        return int(self._column[position])

    def _absent(self, position: int) -> bool:
        return self._sparse and self._column[position] == 0

    def copy(self) -> ColumnMap:
        copied = ColumnMap.__new__(ColumnMap)
        copied._column, copied._sparse = self._column, self._sparse
        self._copy_into(copied)
        return copied
