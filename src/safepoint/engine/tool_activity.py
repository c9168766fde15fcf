"""Which tool calls of this process are running: a control record written while one runs is not a person's.

Any tool can write its run's control channel (same user as safepoint): a command, a Python tool, an MCP server
answering a call, a subagent's tool. So every tool call is bracketed here (``CallRunner`` wraps each invocation in
``running``), and two things follow from the count:

- listeners (each session's ``ControlWatch``) hear when the process becomes busy (the first call starts) and
  quiet again (the last one ends), both under the lock, so no call starts or ends between the change and what a
  listener reads: records that appear in between are judged as tampering;
- an approval wait (``restart/approvals.py``) samples ``changes`` before and after each read of the channel: a
  record is new at read k, so it was written after read k-1 began and before read k ended; if no call started or
  ended over that span and none was running at its start, no call ran while it was written. Otherwise the wait's
  line moves past it: to the channel's end when the last call ended (read under the lock, after the call's end:
  what a person posts after that still counts), or to the end just read if a call still runs. No timing, no race:
  a call that wrote the record changed the count inside the span.

Process-wide, not per run: a tool of another run of this process counts too (it could write this run's channel as
well), as ``Launcher.launches`` does for commands.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import NamedTuple, Protocol


class ActivityListener(Protocol):
    def busy(self) -> None:
        """The first call is about to start (nothing runs yet)."""

    def quiet(self) -> None:
        """The last call ended (nothing runs now)."""


class Sample(NamedTuple):
    changes: int  # starts and ends so far
    active: int  # calls running now


class ToolActivity:
    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a listener's records may come back through a tool-less path
        self._changes = 0
        self._active = 0
        self._listeners: weakref.WeakSet[ActivityListener] = weakref.WeakSet()  # a session's watch dies with it

    def listen(self, listener: ActivityListener) -> int:
        """Returns how many calls run now (the listener then hears their end, not their start)."""
        with self._lock:
            self._listeners.add(listener)
            return self._active

    def sample(self) -> Sample:
        with self._lock:
            return Sample(self._changes, self._active)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                for listener in list(self._listeners):
                    listener.busy()
            self._changes += 1
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._changes += 1
                self._active -= 1
                if self._active == 0:
                    for listener in list(self._listeners):
                        listener.quiet()


TOOLS = ToolActivity()
