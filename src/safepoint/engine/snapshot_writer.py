"""The run's view snapshot written off the tool call's path: one background writer per writing session.

A snapshot write (``store.view_index.refresh``) costs the run so far: it decodes the last snapshot, folds the
records after it and encodes the whole, 3-5 s at 50,000 calls. Written inline after a durable group (as before),
it paused the call that happened to make it due for all that time; an agent's tool call never waits for a cache.

- The call's path only notes "due" (``due``): it hands over the position of the group just made durable (read
  by the session under the run's lock, where no append is in flight) and wakes the thread. O(1), no fold.
- The writer's thread folds from the last snapshot up to exactly that position (``refresh(upto=...)``), never to
  the log's end: a group being appended meanwhile is read past, never folded as a torn tail. Its write is fenced
  by the claim's generation as every write is: a process taken over, fenced off or closed (its claim released)
  has its write refused, and the previous snapshot stays (the file store renames a whole file into place; the
  PostgreSQL store upserts one row in one transaction).
- One write at a time; a due note while one runs replaces the position waiting (the newest wins: the notes
  coalesce into at most one write after the running one).
- ``close`` stops it: a write running is waited for up to ``CLOSE_WAIT`` seconds, then abandoned: its fold stops
  at its next pause, and a write already past its fold is fenced off (the close releases the claim right after,
  and a released claim writes nothing). A process that exits without closing stops it through ``atexit``,
  waiting ``EXIT_WAIT`` (an exit mid-write leaves the previous snapshot, as a kill does); a SIGKILL leaves the
  previous snapshot or the new one, whole (the crash tests).
- A failure fails nothing (a snapshot is a cache): the writer keeps its first error, the session traces it once
  (``snapshot_write_failed``) from its own thread, under the run's lock (rejected: tracing from the writer's
  thread, which would take that lock while a close under it waits for the writer).

The thread holds the GIL while it works, so the calls beside it slow down: it sleeps ``PAUSE_S`` every
``view_index.PACE`` records it folds (a call asking for the GIL otherwise waits up to the interpreter's 5 ms switch
interval after each of its fsyncs): at 10,000 calls the median of the calls made while a write runs is 11.0 ms paced
against 18.3 ms unpaced, the write twice as long (``bench/snapshot_pause.py``, one run, a load of 6 to 12 on 2
cores; calls outside writes 7 ms). The snapshot's decode and encode are one call each and cannot yield: they set the
p99 and the max that are left (the calls' max at 50,000 calls 0.4 s, was 5.4 s inline). Rejected: a process per
write (no GIL shared, but the store, its key and the claim handed to a fresh interpreter at every write). The
thread's store work needs no connection of its own on the file store (each read opens its files; the write is staged
outside the run's lock and renamed under it); on PostgreSQL every read and the fenced write take a pooled
connection, never the connection the run's appends hold (``store.postgres_pool.Held``); the snapshot is uploaded
into a row of its own first and swapped in by one fenced statement (``store.postgres_snapshots``), so the run's
appends never wait for the upload on the owner row (they did: the calls' max at 10,000 calls 0.9 s, now 0.1 s).

``INLINE`` (for ``bench/snapshot_pause.py`` only, which compares both in one run): the write is made on the
caller's thread, as before this module.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

from safepoint.records import Claim, RunInfo
from safepoint.store import view_index
from safepoint.store.base import Store
from safepoint.store.log_after import LogPosition

CLOSE_WAIT = 10.0  # seconds a close waits for a write in flight before abandoning it
EXIT_WAIT = 2.0  # the same at the process's exit without a close (an exit is not held up by a cache)
INLINE = False  # the old way, on the caller's thread: only the benchmark sets it

PAUSE_S = 0.0002  # the writer's sleep every ``view_index.PACE`` records folded (measured: bench/snapshot_pause.py)

IDLE_S = 30.0  # seconds a writer's thread waits for a due note before it ends (one starts again at the next)
_live: weakref.WeakSet[SnapshotWriter] = weakref.WeakSet()  # stopped at the process's exit


class SnapshotWriter:
    """Writes one run's view snapshot in the background, up to the durable positions handed to it."""

    def __init__(self, store: Store, claim: Claim, info: RunInfo) -> None:
        self._store = store
        self._claim = claim
        self._info = info
        self._cond = threading.Condition()
        self._wanted: LogPosition | None = None  # the newest position handed over and not yet taken
        self._running = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._error: str | None = None  # the first failure, until the session takes it to trace it
        self._failed = False  # a failure was kept once: later ones are not traced again
        self._abandoned = False  # a close stopped waiting for the write in flight
        self.written = 0  # snapshots written (for tests and the benchmark)
        self.inline = INLINE

    def due(self, position: LogPosition) -> None:
        """A snapshot is due up to ``position`` (a group known durable). Returns at once (unless ``INLINE``)."""
        if self.inline:
            self._write(position)
            return
        with self._cond:
            if self._stopped:
                return
            self._wanted = position
            if self._thread is None:
                # A daemon: a process that never closes its run must still exit (``_stop_all`` waits, bounded).
                self._thread = threading.Thread(target=self._loop, name=f"safepoint-snapshot-{self._info.run_id}")
                self._thread.daemon = True
                self._thread.start()
                _live.add(self)
            self._cond.notify()

    def take_error(self) -> str | None:
        """The writer's first failure, once (the session traces it); None when none is new."""
        with self._cond:
            error, self._error = self._error, None
        return error

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no write runs or waits (at most ``timeout`` seconds); whether it is idle."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._running or self._wanted is not None), timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Stop taking due notes and end the thread: a write running is waited for up to ``timeout`` (default
        ``CLOSE_WAIT``) seconds; a position still waiting is dropped. Whether the writer is idle now (False: a
        write was abandoned, and it can write nothing once the claim is released)."""
        with self._cond:
            self._stopped = True
            self._wanted = None
            self._cond.notify_all()
            thread = self._thread
        _live.discard(self)
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(CLOSE_WAIT if timeout is None else timeout)
        if not thread.is_alive():
            return True
        self._abandoned = True  # its fold stops at its next pause; a write already past the fold is fenced off
        return False

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._wanted is None and not self._stopped:
                    if not self._cond.wait(IDLE_S) and self._wanted is None and not self._stopped:
                        # Idle: the thread ends, and with it its hold on the store (a session never closed would
                        # keep the store and its pool alive for the process's life); the next due starts one.
                        self._thread = None
                        _live.discard(self)
                        return
                if self._stopped:
                    return
                position, self._wanted = self._wanted, None
                if position is None:
                    continue
                self._running = True
            try:
                self._write(position)
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()

    def _pause(self) -> None:
        """Between two slices of the fold: the calls take the GIL (a sleep hands it over for sure; a zero sleep
        lets this thread take it straight back), and a close that stopped waiting ends the write here."""
        if self._abandoned:
            raise _Abandoned
        time.sleep(PAUSE_S)

    def _write(self, position: LogPosition) -> None:
        pause = None if self.inline else self._pause
        try:
            if view_index.refresh(self._store, self._claim, self._info, every=0, upto=position, pause=pause):
                self.written += 1
        except _Abandoned:
            pass  # nothing written: the snapshot in place stays
        except Exception as exc:  # a cache: nothing fails with it; kept to be traced once
            with self._cond:
                if not self._failed:
                    self._failed = True
                    self._error = f"{type(exc).__name__}: {exc}"[:500]


class _Abandoned(Exception):
    """A close stopped waiting: the write ends at the fold's next pause."""


def _stop_all() -> None:
    """At the process's exit: each writer still running ends, its write waited for (bounded) or abandoned. The
    writers share one ``EXIT_WAIT`` (rejected: ``EXIT_WAIT`` each, which held an exit with ten live runs 20 s)."""
    deadline = time.monotonic() + EXIT_WAIT
    for writer in list(_live):
        writer.close(max(0.0, deadline - time.monotonic()))


def _forget_in_child() -> None:
    """A forked child holds none of its parent's writers: their threads are not in it, and their lock may have
    been held at the fork (rejected: closing them at the child's exit, which waited on that lock for ever)."""
    global _live
    _live = weakref.WeakSet()


atexit.register(_stop_all)
os.register_at_fork(after_in_child=_forget_in_child)


def due_position(store: Store, run_id: str, durable_seq: int) -> LogPosition | None:
    """The position of the group just made durable, read where no append is in flight (under the run's lock,
    right after the commit): the log's last record, when it is that group's last (else None: not now)."""
    position = store.log_position(run_id)
    return position if position is not None and position.seq == durable_seq else None
