"""A branch of the history by reference (issue 10 §3): the log seqs of its messages, read from the run's messages
(``RunView.message_records``, a ``core.message_pack.MessageMap`` after a snapshot) when asked, then the messages a
session added that have no place in the log yet.

A resume at call 50,000 holds one integer per message of its branch, not one object: the messages are decoded
when something reads them (the context of the next turn, ``history``, ``explain``), and a read gives the same
object each time (the map keeps what it decoded), so a message of the branch is still told by identity.

Used as a list is (``len``, indexing, slices, iteration from either end, ``append``, equality with any sequence),
and a slice shares the messages, copying only the seqs (rejected: ``list`` itself, which cannot read lazily, and a
``list`` subclass, whose C code (``==``, ``list(...)``, msgspec) reads the list's own storage and would see none).
Pure: no I/O.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

from safepoint.errors import CorruptRecordError
from safepoint.records import Message

_EMPTY: Mapping[int, Message] = {}


class MessageList(Sequence[Message]):
    """``seqs`` read from ``records`` (with ``over``: a message read back in place of the one at that index), then
    ``tail``, messages held as they are."""

    __slots__ = ("_over", "_records", "_seqs", "_tail")

    def __init__(
        self,
        records: Mapping[int, Message] = _EMPTY,
        seqs: array.array[int] | None = None,
        tail: Iterable[Message] = (),
        over: dict[int, Message] | None = None,
    ) -> None:
        self._records = records
        self._seqs: array.array[int] = array.array("Q") if seqs is None else seqs
        self._over: dict[int, Message] = {} if over is None else over
        self._tail: list[Message] = list(tail)

    @classmethod
    def of(cls, messages: Iterable[Message]) -> MessageList:
        """A list of messages held as they are."""
        return cls(tail=messages)

    # -- building --------------------------------------------------------------------------------------------------
    def append(self, message: Message) -> None:
        self._tail.append(message)

    def append_logged(self, seq: int, message: Message) -> None:
        """``message``, which ``records`` holds at log seq ``seq`` (the fold's: the branch stays seqs)."""
        if self._tail:
            self._tail.append(message)
        else:
            self._seqs.append(seq)

    def __setitem__(self, index: int, message: Message) -> None:
        index = self._index(index)
        if index < len(self._seqs):
            self._over[index] = message
        else:
            self._tail[index - len(self._seqs)] = message

    def copy(self) -> MessageList:
        return MessageList(self._records, array.array("Q", self._seqs), self._tail, dict(self._over))

    def logged_seqs(self) -> array.array[int] | None:
        """The log seqs of every message, when each is the one ``records`` holds (a fold's branch); else None."""
        return None if self._tail or self._over else self._seqs

    # -- reading ---------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._seqs) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._seqs) or bool(self._tail)

    def _index(self, index: int) -> int:
        size = len(self)
        if not -size <= index < size:
            raise IndexError("history index out of range")
        return index % size

    def _at(self, index: int) -> Message:
        if index < len(self._seqs):
            over = self._over.get(index) if self._over else None
            return self._record(self._seqs[index]) if over is None else over
        return self._tail[index - len(self._seqs)]

    def _record(self, seq: int) -> Message:
        try:
            return self._records[seq]
        except KeyError:
            raise CorruptRecordError(
                f"the history names the message at log seq {seq}, which it does not hold"
            ) from None

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> MessageList: ...
    def __getitem__(self, index: int | slice) -> Message | MessageList:
        if not isinstance(index, slice):
            return self._at(self._index(index))
        start, stop, step = index.indices(len(self))
        if step != 1:
            return MessageList.of([self._at(i) for i in range(start, stop, step)])
        stop = max(start, stop)
        logged = len(self._seqs)
        over = {i - start: m for i, m in self._over.items() if start <= i < stop} if self._over else None
        return MessageList(
            self._records,
            self._seqs[min(start, logged) : min(stop, logged)],
            self._tail[max(start - logged, 0) : max(stop - logged, 0)],
            over,
        )

    def __iter__(self) -> Iterator[Message]:
        if self._over:
            head: Iterator[Message] = (self._at(i) for i in range(len(self._seqs)))
        else:
            head = map(self._record, self._seqs)
        return itertools.chain(head, self._tail)

    def __reversed__(self) -> Iterator[Message]:
        return (self._at(i) for i in range(len(self) - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        """As a list's: the same messages in the same order. Two branches of the same messages compare their seqs,
        not their messages (no message decoded)."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        if len(other) != len(self):
            return False
        if (
            isinstance(other, MessageList)
            and other._records is self._records
            and len(other._seqs) == len(self._seqs)
            and other._seqs == self._seqs
        ):
            return all(self._at(i) == other._at(i) for i in self._over.keys() | other._over.keys()) and (
                self._tail == other._tail
            )
        return all(mine is theirs or mine == theirs for mine, theirs in zip(self, other, strict=True))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return f"MessageList({len(self._seqs)} by reference, {len(self._tail)} held)"
