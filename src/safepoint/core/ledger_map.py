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

import bisect
import hashlib
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import Any

import msgspec

from safepoint.records import ToolLedgerEntry

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ToolLedgerEntry)


def digest(call_id: str) -> int:
    """A call id's 64-bit digest (stable across processes, unlike ``hash``); a collision is told apart by the
    decoded entry's call id."""
    return int.from_bytes(hashlib.blake2b(call_id.encode(errors="surrogatepass"), digest_size=8).digest(), "little")


class Settled(msgspec.Struct, frozen=True):
    """Finished calls' entries, packed. ``offsets`` (n + 1 little-endian uint64) bound each entry in ``blob``;
    ``ordinals`` (n uint32) give each call's place in the ledger's order; ``digests`` (n uint64, sorted) and
    ``order`` (n uint32: the entry each digest is) are the index."""

    blob: bytes = b""
    offsets: bytes = b"\x00" * 8
    ordinals: bytes = b""
    digests: bytes = b""
    order: bytes = b""

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
            or len(self.digests) != 8 * n
            or len(self.order) != 4 * n
        ):
            raise ValueError("its settled entries' index does not fit them")
        offsets, _, _, order = self.views()
        if offsets[n] != len(self.blob) or any(position >= n for position in order):
            raise ValueError("its settled entries' index points outside them")


class _Index:
    """A ``Settled``'s views, made once per map (casting is cheap, but not per lookup)."""

    def __init__(self, settled: Settled) -> None:
        self.settled = settled
        self.blob = memoryview(settled.blob)
        self.offsets, self.ordinals, self.digests, self.order = settled.views()

    def entry(self, position: int) -> ToolLedgerEntry:
        return _decoder.decode(self.blob[self.offsets[position] : self.offsets[position + 1]])

    def find(self, call_id: str) -> int | None:
        """The position of ``call_id``'s entry, None when it is not a settled call."""
        key = digest(call_id)
        at = bisect.bisect_left(self.digests, key)
        while at < len(self.digests) and self.digests[at] == key:
            position = self.order[at]
            if self.entry(position).call_id == call_id:
                return position
            at += 1
        return None


def pack(entries: list[tuple[int, ToolLedgerEntry]], base: Settled | None = None) -> Settled:
    """``base`` with ``entries`` (ordinal, entry) added: each encoded once (a writer's next snapshot appends the
    calls that finished since, it does not encode the others again)."""
    base = base or Settled()
    blob = bytearray(base.blob)
    offsets = memoryview(base.offsets).cast("Q").tolist()
    ordinals = memoryview(base.ordinals).cast("I").tolist()
    keyed = list(
        zip(memoryview(base.digests).cast("Q").tolist(), memoryview(base.order).cast("I").tolist(), strict=True)
    )
    for ordinal, entry in entries:
        keyed.append((digest(entry.call_id), len(ordinals)))
        blob += _encoder.encode(entry)
        offsets.append(len(blob))
        ordinals.append(ordinal)
    keyed.sort()
    return Settled(
        blob=bytes(blob),
        offsets=_packed("Q", offsets),
        ordinals=_packed("I", ordinals),
        digests=_packed("Q", [key for key, _ in keyed]),
        order=_packed("I", [position for _, position in keyed]),
    )


def _packed(code: str, values: list[int]) -> bytes:
    import array

    return array.array(code, values).tobytes()


class LedgerMap(dict[str, ToolLedgerEntry]):
    """Every call's current entry: the dict itself holds those that changed since ``settled`` was packed, which
    shadow a packed one of the same call. ``ordinals``: the ledger-order place of each call the dict holds that
    ``settled`` does not (a new call: after every packed one)."""

    def __init__(self, settled: Settled, changed: dict[str, ToolLedgerEntry], ordinals: dict[str, int]) -> None:
        super().__init__(changed)
        self._index = _Index(settled)
        self._ordinals = dict(ordinals)
        self._shadowed: dict[str, int] = {}  # call id -> its packed position, when the dict holds it too
        self._extra = 0  # calls the dict holds that ``settled`` does not
        for call_id in changed:
            position = self._index.find(call_id)
            if position is None:
                self._extra += 1
            else:
                self._shadowed[call_id] = position

    @property
    def settled(self) -> Settled:
        return self._index.settled

    def ordinal(self, call_id: str) -> int | None:
        if call_id in self._shadowed:
            return int(self._index.ordinals[self._shadowed[call_id]])
        return self._ordinals.get(call_id)

    def shadowing(self) -> dict[str, int]:
        """The calls the dict holds that ``settled`` holds too (a finished call changed again)."""
        return self._shadowed

    def changed(self) -> dict[str, ToolLedgerEntry]:
        """What the dict itself holds (each call changed since ``settled`` was packed)."""
        return dict(super().items())

    def _packed(self, call_id: str) -> ToolLedgerEntry | None:
        if dict.__contains__(self, call_id):
            return None
        position = self._index.find(call_id)
        return None if position is None else self._index.entry(position)

    # the dict's reading, over both parts ---------------------------------------------------------------------
    def __getitem__(self, call_id: str) -> ToolLedgerEntry:
        if dict.__contains__(self, call_id):
            return dict.__getitem__(self, call_id)
        found = self._packed(call_id)
        if found is None:
            raise KeyError(call_id)
        return found

    def get(self, call_id: str, default: Any = None) -> Any:
        try:
            return self[call_id]
        except KeyError:
            return default

    def __contains__(self, call_id: object) -> bool:
        if dict.__contains__(self, call_id):
            return True
        return isinstance(call_id, str) and self._index.find(call_id) is not None

    def __setitem__(self, call_id: str, entry: ToolLedgerEntry) -> None:
        if not dict.__contains__(self, call_id):
            position = self._index.find(call_id)
            if position is None:
                self._extra += 1
                self._ordinals.setdefault(call_id, len(self) - 1)
            else:
                self._shadowed[call_id] = position
        dict.__setitem__(self, call_id, entry)

    def __len__(self) -> int:
        return len(self._index.settled) + self._extra

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[str]:
        return iter([call_id for call_id, _ in self._ordered()])

    def _ordered(self) -> list[tuple[str, ToolLedgerEntry]]:
        """Every (call id, entry), in ledger order: the packed ones decoded (what goes over every call pays)."""
        index, found = self._index, []
        for position in range(len(index.settled)):
            entry = index.entry(position)
            if not dict.__contains__(self, entry.call_id):
                found.append((int(index.ordinals[position]), entry.call_id, entry))
        for call_id, entry in dict.items(self):
            ordinal = self.ordinal(call_id)
            found.append((len(index.settled) + len(self) if ordinal is None else ordinal, call_id, entry))
        found.sort(key=lambda item: item[0])
        return [(call_id, entry) for _, call_id, entry in found]

    def keys(self) -> KeysView[str]:  # type: ignore[override]  # a view of a plain dict of the same items
        return dict(self._ordered()).keys()

    def values(self) -> ValuesView[ToolLedgerEntry]:  # type: ignore[override]  # as ``keys``
        return dict(self._ordered()).values()

    def items(self) -> ItemsView[str, ToolLedgerEntry]:  # type: ignore[override]  # as ``keys``
        return dict(self._ordered()).items()

    def copy(self) -> LedgerMap:  # the packed part shared
        copied = LedgerMap.__new__(LedgerMap)
        dict.__init__(copied, dict.items(self))
        copied._index, copied._ordinals = self._index, dict(self._ordinals)
        copied._shadowed, copied._extra = dict(self._shadowed), self._extra
        return copied

    def __eq__(self, other: object) -> bool:
        """As a dict's: the same calls with the same entries (order aside)."""
        if not isinstance(other, dict):
            return NotImplemented
        return len(self) == len(other) and dict(self._ordered()) == (
            dict(other._ordered()) if isinstance(other, LedgerMap) else other
        )

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # a dict's

    def __repr__(self) -> str:
        return f"LedgerMap({len(self._index.settled)} packed, {dict.__len__(self)} changed)"

    def pop(self, *args: Any) -> Any:  # never used on a ledger: refused rather than wrong
        raise TypeError("a ledger's entries are never removed")

    def __delitem__(self, call_id: str) -> None:
        raise TypeError("a ledger's entries are never removed")
