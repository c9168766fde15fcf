"""The context builder: recovery notes go to the high-priority region (the system part), ahead of the history.

The agent loop builds a context at every model turn, so the builder keeps what it built and adds only what the
turn appended (``ContextBuilder``); the conversation it hands out is a ``Conversation``, a fixed-length view of a
list the builder only appends to, so handing it out copies nothing and an earlier context keeps what it showed.
When the history is replaced (a rewind, a restore) the builder starts a new list and leaves the old one to the
contexts that hold it. Rejected: rebuilding the whole list at each turn (three passes over the history: a
5,000-step run spent more time there than in its tool calls).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import overload

from safepoint.protocol import SELF_HEALING
from safepoint.providers.base import Context
from safepoint.records import Message, ToolDefinition
from safepoint.restart.checkpoint import Appended

RECOVERY_NOTE = "recovery_note"
DEFAULT_SYSTEM = "You are a careful coding agent. Use the tools to do the task, then answer without tool calls."


class Conversation(Sequence[Message]):
    """The first ``length`` messages of a list that is only ever appended to: a snapshot that costs nothing."""

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._length = length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if not -self._length <= index < self._length:
            raise IndexError("conversation index out of range")
        return self._items[index % self._length]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return f"Conversation({list(self)!r})"


class ContextBuilder:
    """Builds the context of each turn from the session's history, following what it appended since."""

    def __init__(self) -> None:
        self._history: Appended[Message] = Appended()
        self._conversation: list[Message] = []
        self._healing: list[Message] = []
        self._note: Message | None = None

    def build(self, history: Sequence[Message], *, system: str = "", tools: Sequence[ToolDefinition] = ()) -> Context:
        fresh, new = self._history.take(history)
        if fresh:
            self._conversation, self._healing, self._note = [], [], None
        for message in new:
            if message.name == RECOVERY_NOTE:
                self._note = message
            elif message.name == SELF_HEALING:
                self._healing.append(message)
            else:
                self._conversation.append(message)
        region = system or DEFAULT_SYSTEM
        for message in self._healing:  # every subtask that stopped without a result, each once (seed 003 §5.2)
            region += "\n\n## A subtask stopped (read this first)\n" + message.content
        if self._note is not None:
            region += "\n\n## Recovery note (read this first)\n" + self._note.content
        conversation = Conversation(self._conversation, len(self._conversation))
        return Context(system=region, messages=conversation, tools=list(tools))


def build_context(history: Sequence[Message], *, system: str = "", tools: Sequence[ToolDefinition] = ()) -> Context:
    """One context, built from scratch (the agent loop keeps a ``ContextBuilder`` instead)."""
    return ContextBuilder().build(list(history), system=system, tools=tools)
