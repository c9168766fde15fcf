"""An approval wait as the call runner serves it: the request (``AwaitApproval``), the person's answer
(``ApprovalOutcome``), and how a wait whose task was cancelled is stopped (``WaitStop``).

The wait itself is the restart layer's (``restart.approvals``, injected as an ``ApprovalWaiter``): it polls the
run's control channel, for minutes, on a thread. Under an event loop that thread outlives a cancelled task unless
it is told to stop, and a wait nobody reads could still take a person's later approval: ``begin_wait`` runs it as
a future the cancellation leaves running, and the runner stops it and waits for its end before the cancellation
goes on (``CallRunner._abandon_wait``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from safepoint.protocol import RuntimeRestartToolApprovalWait
from safepoint.records import ToolCall, ToolLedgerEntry

__all__ = ["ApprovalOutcome", "ApprovalWaiter", "AwaitApproval", "WaitAbandoned", "WaitStop", "begin_wait"]


class WaitAbandoned(Exception):
    """The wait was stopped (its task was cancelled) before it took a decision: it took none."""


class WaitStop:
    """Stops an approval wait whose task was cancelled. The wait runs on a thread nothing can stop from outside;
    it checks ``stopped`` before every read of the channel and takes a decision only inside ``deciding``, under
    the lock ``stop`` takes too: once ``stop`` returns, the wait takes no decision, so an approval a person posts
    afterwards is left for the next session (rejected: letting the thread run on to its timeout, which marked a
    later approval seen for a call nobody would run, and the next session never saw it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._lock:  # waits for a decision being taken: it is then the caller's to settle
            self._stopped = True

    @contextlib.contextmanager
    def deciding(self) -> Iterator[None]:
        with self._lock:
            if self._stopped:
                raise WaitAbandoned
            yield


@dataclass(frozen=True)
class AwaitApproval:
    """A request, from the call driver, to wait for a person's decision on ``entry`` before it runs."""

    call: ToolCall
    entry: ToolLedgerEntry
    stop: WaitStop = field(default_factory=WaitStop, compare=False)


@dataclass(frozen=True)
class ApprovalOutcome:
    approved: bool
    decision: Literal["approved", "denied", "timeout", "grant_expired"]
    why: str
    wait: RuntimeRestartToolApprovalWait


ApprovalWaiter = Callable[[AwaitApproval], ApprovalOutcome]  # injected by the restart layer (restart.approvals)


def begin_wait(waiter: ApprovalWaiter, request: AwaitApproval) -> asyncio.Future[ApprovalOutcome]:
    """The wait, on a thread of the loop's default pool (it sleeps between reads, for minutes), as
    ``asyncio.to_thread`` runs it, but as a future a cancellation leaves running (the runner stops it)."""
    context = contextvars.copy_context()
    return asyncio.get_running_loop().run_in_executor(None, functools.partial(context.run, waiter, request))
