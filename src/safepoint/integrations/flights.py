"""One call at a time per key in this process: a call made again while the same call is still in flight waits for
it, then is decided from what the ledger recorded.

Frameworks run a call again while its first run is still going. LangGraph's async ``ToolNode`` gathers a message's
tool calls with ``asyncio.gather``: when one of them stops at ``interrupt()``, the node ends at once and the others
go on as orphaned tasks; the answered interrupt runs the node again, and its calls met their own first runs still
in flight. The ledger said ``started`` (it was: the tool was running), which reads as a crash, so the second run
refused the call as uncertain, and the first run's outcome was then written over a settled entry. A call in flight
in this very process is not a crash: the second run waits for the first to end and takes its outcome from the
ledger (rejected: deciding from ``started`` alone, which cannot tell a live call from a dead one; and cancelling
the orphan, which leaves a tool that may have acted half done).

A wait for a flight of the same thread (sync) or task (async) would wait for itself: refused in one line instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Hashable, Iterator
from dataclasses import dataclass, field

from safepoint.errors import ConfigError

__all__ = ["Flights"]


@dataclass
class _Flight:
    owner: object  # the thread's ident (sync) or the asyncio task (async) that runs the call
    done: threading.Event = field(default_factory=threading.Event)


class Flights:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flying: dict[Hashable, _Flight] = {}

    def _enter(self, key: Hashable, owner: object) -> _Flight | None:
        """Take the key (None), or the flight that holds it."""
        with self._lock:
            flight = self._flying.get(key)
            if flight is None:
                self._flying[key] = _Flight(owner)
                return None
            if flight.owner is owner or flight.owner == owner:
                raise ConfigError(f"call {key!r} was made again from inside itself; give each call its own place")
            return flight

    def _leave(self, key: Hashable) -> None:
        with self._lock:
            flight = self._flying.pop(key)
        flight.done.set()

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        owner = threading.get_ident()
        while (flight := self._enter(key, owner)) is not None:
            flight.done.wait()
        try:
            yield
        finally:
            self._leave(key)

    @contextlib.asynccontextmanager
    async def ahold(self, key: Hashable) -> AsyncIterator[None]:
        owner = asyncio.current_task()
        while (flight := self._enter(key, owner)) is not None:
            # On a worker thread: the flight may be a task of this loop (it must go on meanwhile) or a thread.
            await asyncio.to_thread(flight.done.wait)
        try:
            yield
        finally:
            self._leave(key)
