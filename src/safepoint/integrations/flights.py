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
A flight whose task can never end (its event loop was closed with the task pending, so its ``finally`` never ran) is
not waited for: the call goes on and meets the ledger's ``started``, which is then what it looks like, a call whose
outcome was lost.
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

    def _enter(self, key: Hashable, owner: object) -> tuple[_Flight | None, _Flight | None]:
        """``(the flight taken, None)``, or ``(None, the flight that holds the key)``."""
        with self._lock:
            flight = self._flying.get(key)
            if flight is None:
                taken = self._flying[key] = _Flight(owner)
                return taken, None
            if flight.owner is owner or flight.owner == owner:
                raise ConfigError(f"call {key!r} was made again from inside itself; give each call its own place")
            return None, flight

    def _leave(self, key: Hashable, flight: _Flight) -> None:
        """``flight`` gives the key up (its holder, or a waiter for a flight that can never end)."""
        with self._lock:
            if self._flying.get(key) is flight:
                del self._flying[key]
        flight.done.set()

    @staticmethod
    def _dead(flight: _Flight) -> bool:
        """Whether the flight's task can never end: its loop is closed and the task never finished."""
        owner = flight.owner
        return isinstance(owner, asyncio.Task) and not owner.done() and owner.get_loop().is_closed()

    @contextlib.contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        owner = threading.get_ident()
        while True:
            taken, flight = self._enter(key, owner)
            if taken is not None:
                break
            assert flight is not None
            while not flight.done.wait(0.5):
                if self._dead(flight):
                    self._leave(key, flight)
                    break
        try:
            yield
        finally:
            self._leave(key, taken)

    @contextlib.asynccontextmanager
    async def ahold(self, key: Hashable) -> AsyncIterator[None]:
        owner = asyncio.current_task()
        while True:
            taken, flight = self._enter(key, owner)
            if taken is not None:
                break
            assert flight is not None
            # On a worker thread: the flight may be a task of this loop (it must go on meanwhile) or a thread. Woken
            # now and then to see whether the flight can still end (rejected: waiting for ever on a dead loop's task).
            while not await asyncio.to_thread(flight.done.wait, 0.5):
                if self._dead(flight):
                    self._leave(key, flight)
                    break
        try:
            yield
        finally:
            self._leave(key, taken)
