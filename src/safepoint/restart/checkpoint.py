"""What the run's restart checkpoint says at a model turn (seed 003 §2, ``RuntimeRestartReactionLoopState``): the
turn, its pending calls, the outputs finished but not in the history yet, and the run's lifetime counts. The
engine's ``RestartWriter`` writes it; this module decides what it holds.

A payload is written at every model turn, so it costs what the turn added, not what the run holds: a ``LoopTally``
kept for each open session follows its history and its log's messages as they grow (``Appended``) and is built
from scratch once, at its first use (a resume opens a new session, so that is where it is rebuilt). Rejected:
counting over the whole history at each turn, as before: a set of every tool result and a walk back to the last
user message made a 5,000-step run quadratic.
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter, deque
from collections.abc import Collection, Mapping, Reversible, Sequence
from typing import Generic, Protocol, TypeVar

from safepoint.engine.restart_writer import now_ms
from safepoint.protocol import RuntimeRestartReactionLoopState
from safepoint.records import Message, ToolCall, ToolLedgerEntry

__all__ = ["Appended", "LoopFacts", "LoopTally", "loop_state", "now_ms"]

T = TypeVar("T")


class LoopFacts(Protocol):
    """The conversation as a turn leaves it (a ``RunSession`` is one)."""

    @property
    def history(self) -> Sequence[Message]: ...

    @property
    def pending(self) -> list[ToolCall]: ...

    @property
    def ledger(self) -> Mapping[str, ToolLedgerEntry]: ...

    @property
    def lifetime_messages(self) -> Collection[Message]:
        """Every message of the run's log, oldest first, only ever appended to (a dict's values view is one)."""


class Appended(Generic[T]):
    """What was appended to a list since the last look. The session only appends to its history or replaces it
    with another list (a rewind, a restore, a resume); a replaced, shorter or changed list (its last seen item is
    not the one seen) is reported as ``fresh``: the caller counts it again from the start."""

    def __init__(self) -> None:
        self._items: Sequence[T] | None = None  # held, so its identity cannot pass to a new list
        self._seen = 0
        self._last: T | None = None

    def take(self, items: Sequence[T]) -> tuple[bool, Sequence[T]]:
        seen = self._seen
        fresh = items is not self._items or len(items) < seen or (seen > 0 and items[seen - 1] is not self._last)
        new = items if fresh else items[seen:]
        self._items, self._seen, self._last = items, len(items), items[-1] if items else None
        return fresh, new


class LoopTally:
    """The counts a payload needs, kept as the session's history and log grow."""

    def __init__(self) -> None:
        self._history: Appended[Message] = Appended()
        self._batches = 0  # assistant turns with tool calls since the last user message
        self._results: Counter[str | None] = Counter()  # tool_call_id of every tool message in the history
        self._lifetime_seen = 0
        self._lifetime_last: Message | None = None
        self._inferences = 0  # assistant messages in the log, over every branch

    def _follow_history(self, history: Sequence[Message]) -> None:
        fresh, new = self._history.take(history)
        if fresh:
            self._batches = 0
            self._results.clear()
        for message in new:
            if message.role == "user":
                self._batches = 0
            elif message.role == "assistant" and message.tool_calls:
                self._batches += 1
            elif message.role == "tool":
                self._results[message.tool_call_id] += 1

    def _follow_lifetime(self, messages: Collection[Message]) -> None:
        total, seen = len(messages), self._lifetime_seen
        if isinstance(messages, Reversible) and seen <= total:
            # The newest total - seen messages, and the one before them, which must be the last one counted.
            newest = list(itertools.islice(reversed(messages), total - seen + (1 if seen else 0)))
            if not seen or newest[-1] is self._lifetime_last:
                self._inferences += sum(1 for m in newest[: total - seen] if m.role == "assistant")
                self._lifetime_seen = total
                self._lifetime_last = newest[0] if newest else self._lifetime_last
                return
        # Not the log seen before (never so for a session's), or one that cannot be read from its end: counted again.
        self._inferences = sum(1 for m in messages if m.role == "assistant")
        self._lifetime_seen = total
        self._lifetime_last = next(iter(deque(messages, maxlen=1)), None)

    def state(
        self, facts: LoopFacts, turn: int, *, visible_output_started: bool = False
    ) -> RuntimeRestartReactionLoopState:
        self._follow_history(facts.history)
        self._follow_lifetime(facts.lifetime_messages)
        done = {
            call.call_id: entry.result_ref
            for call in facts.pending
            if (entry := facts.ledger.get(call.call_id)) is not None
            and entry.status in ("succeeded", "failed")
            and entry.result_ref
            and not self._results[call.call_id]
        }
        return RuntimeRestartReactionLoopState(
            turn=turn,
            consecutive_batches=self._batches,
            pending_tool_calls=tuple(call.call_id for call in facts.pending),
            completed_unpersisted_tool_outputs=done,
            # Over every branch the run ever had: a rewind does not give back the inferences it made.
            lifetime_inference_count=self._inferences,
            lifetime_tool_call_count=len(facts.ledger),
            visible_output_started=visible_output_started,
        )


# One tally per open session, gone with it: the session (engine) knows nothing of payloads.
_tallies: weakref.WeakKeyDictionary[LoopFacts, LoopTally] = weakref.WeakKeyDictionary()


def loop_state(facts: LoopFacts, turn: int, *, visible_output_started: bool = False) -> RuntimeRestartReactionLoopState:
    tally = _tallies.get(facts)
    if tally is None:
        tally = _tallies[facts] = LoopTally()
    return tally.state(facts, turn, visible_output_started=visible_output_started)
