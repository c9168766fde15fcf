"""Where a run's bookkeeping runs when an event loop drives it: off the loop, on one worker thread per run.

A call's bookkeeping (hashing, the before-state and patch, the command capture, the ledger's records and their
fsync or PostgreSQL round-trip) is the code between the call runner's yields. ``CallRunner.execute`` runs it on
the caller's thread; ``aexecute`` hands each piece to ``Bookkeeper.arun``, which runs it on the run's bookkeeping
thread, so the loop only waits (rejected: async twins of the store and the engine's parts, two implementations of
every durability rule; and ``asyncio.to_thread`` per piece: the default pool is shared with blocking tools, and
two pieces of one run must never run at once).

The rules that hold it together:

* ONE thread per run runs its pieces, in the order they were asked for, so many ``acall``s on one loop interleave
  as they did on the loop: piece by piece, never two at once (the session's state is not shared between threads).
* ``lock`` is held by every piece; the run's synchronous methods (``Run.call``, ``step``, ``checkpoint``,
  ``add_message``) take it too, so a synchronous call from the loop's thread or a tool's thread never interleaves
  with a piece in the middle of one.
* A piece that has started always finishes (a thread cannot be stopped half-way through a group commit): a task
  cancelled while it waits on one is told so after the piece is done (``through``), never before, so what the
  ledger says is what happened.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["Bookkeeper", "through"]

T = TypeVar("T")


async def through(work: Awaitable[T]) -> tuple[T, bool]:
    """Wait for ``work`` to finish even if the task is cancelled meanwhile; returns its value and whether a
    cancellation came (the caller raises it once the ledger is settled). Rejected: ``asyncio.shield`` alone, which
    raises at once and leaves the work running unobserved."""
    future = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(future), cancelled
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                return future.result(), True  # it ended with the cancellation: its value stands
            if future.cancelled():
                raise
            cancelled = True


class Bookkeeper:
    """Runs a run's bookkeeping pieces: on the caller's thread (``run``) or its own worker thread (``arun``)."""

    def __init__(self, name: str = "safepoint-bookkeeping") -> None:
        self.lock = threading.RLock()
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._worker: int | None = None  # the worker thread's id: a close from a piece must not wait for itself
        self._ending: list[ThreadPoolExecutor] = []  # told to end under the lock, not yet waited for

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        with self.lock:
            return fn(*args)

    def _locked(self, context: contextvars.Context, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        self._worker = threading.get_ident()
        with self.lock:
            return context.run(fn, *args)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            return self._pool

    async def arun(self, fn: Callable[..., T], *args: Any) -> tuple[T, bool]:
        """Run ``fn(*args)`` on the bookkeeping thread; returns its value and whether the task was cancelled while
        it ran (the piece finished all the same; the caller settles the call, then raises the cancellation)."""
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # as asyncio.to_thread does: the caller's context variables hold there
        return await through(loop.run_in_executor(self._executor(), self._locked, context, fn, args))

    def close(self, *, wait: bool = True) -> None:
        """The worker thread ends (after any piece still queued); a later ``arun`` starts a new one.

        ``wait=False`` is for a close made under ``lock`` (a session closed inside the run's lock): a queued piece
        waits for that lock, so waiting there for the worker would never end. The thread is told to end and is
        waited for by the next close made outside the lock (the run's own)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
            if pool is not None:
                self._ending.append(pool)
            ending, self._ending = (self._ending, []) if wait else ([], self._ending)
        if pool is not None and not wait:
            pool.shutdown(wait=False)
        for old in ending:
            old.shutdown(wait=threading.get_ident() != self._worker)
