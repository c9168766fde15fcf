"""What a ``dict`` over packed values shares (``core.ledger_map``'s ledger, ``core.message_pack``'s messages): read
and written as the plain dict the whole log's fold gives, with the subclass answering lookups, length and order
from its packed part. Its keys are never removed (a log's calls and messages only come), so removals are refused
rather than made wrong. Pure."""

from __future__ import annotations

from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class PackedDict(dict[K, V]):
    """The dict methods that follow from ``__getitem__``, ``__contains__``, ``__setitem__``, ``__len__`` and
    ``_ordered`` (every item in order, what a whole pass pays), which the subclass gives."""

    _removal = "a packed dict's keys are never removed"

    def _ordered(self) -> list[tuple[K, V]]:
        raise NotImplementedError

    def get(self, key: K, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __bool__(self) -> bool:
        return len(self) > 0

    def __eq__(self, other: object) -> bool:
        """As a dict's: the same keys with the same values (order aside)."""
        if not isinstance(other, dict):
            return NotImplemented
        return dict(self._ordered()) == (dict(other._ordered()) if isinstance(other, PackedDict) else other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # a dict's

    def setdefault(self, key: K, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:  # through ``__setitem__``: the C one would skip the count
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def pop(self, *args: Any) -> Any:  # never used on these: refused rather than wrong
        raise TypeError(self._removal)

    def __delitem__(self, key: K) -> None:
        raise TypeError(self._removal)
