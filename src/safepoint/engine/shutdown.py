"""A graceful stop: SIGTERM or Ctrl-C (SIGINT) asks the process to stop at its next safe point (between steps,
between two calls of a step, or while waiting for an approval) and leave its restart checkpoint for the next
start, instead of dying mid-write.

A command running at that moment is stopped as a terminal's Ctrl-C would stop it: its whole process group gets
SIGINT (a command runs in a group of its own, so the terminal's signal never reaches it), and SIGKILL if it is
still there after ``GRACE_SECONDS``; its outcome is then recorded as what it is (it failed, interrupted) before
the run stops. Rejected: raising ``KeyboardInterrupt`` (Python's default), which leaves the call without an
outcome and the command running on in the background. A second Ctrl-C kills the commands at once; a third ends
the process there and then (as a crash would: the ledger was written for that).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType

from safepoint.engine.processes import running_groups
from safepoint.errors import ExitCode

GRACE_SECONDS = 5.0

_requested = threading.Event()
_interrupts = 0
_why = ""


def requested() -> bool:
    return _requested.is_set()


def why() -> str:
    """What asked for the stop, in words (empty: nothing did)."""
    return _why


def request(reason: str = "stop requested") -> None:
    global _why
    _why = _why or reason
    _requested.set()


def reset() -> None:
    global _interrupts, _why
    _requested.clear()
    _interrupts = 0
    _why = ""


def _signal_groups(signum: int, groups: set[int]) -> None:
    for pid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)


def _kill_if_left(groups: set[int]) -> None:
    _signal_groups(signal.SIGKILL, groups & running_groups())  # only those whose command has not ended since


def stop_commands(*, now: bool = False) -> None:
    """Stop the commands this process runs: SIGINT, then SIGKILL after the grace period (``now``: SIGKILL)."""
    groups = running_groups()
    if not groups:
        return
    if now:
        _signal_groups(signal.SIGKILL, groups)
        return
    _signal_groups(signal.SIGINT, groups)
    timer = threading.Timer(GRACE_SECONDS, _kill_if_left, args=(groups,))
    timer.daemon = True
    timer.start()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    request("SIGTERM")


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _interrupts
    _interrupts += 1
    request("Ctrl-C")
    if _interrupts == 1:
        sys.stderr.write(
            "\nsafepoint: Ctrl-C: stopping at the next safe point (the running command is stopped); "
            "press it again to kill the command now\n"
        )
        stop_commands()
    elif _interrupts == 2:
        sys.stderr.write(
            "\nsafepoint: Ctrl-C again: commands killed; press it once more to stop without a safe point\n"
        )
        stop_commands(now=True)
    else:
        stop_commands(now=True)
        sys.stderr.write(
            "\nsafepoint: stopped without a safe point; `safepoint resume RUN_ID` (`safepoint status` names it) "
            "settles it from the log\n"
        )
        sys.stderr.flush()
        os._exit(ExitCode.INTERRUPTED)  # as a crash would: every record the run depends on is durable already


def install() -> None:
    """Route SIGTERM and SIGINT to a stop request. Only the main thread may install signal handlers."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGINT, _on_sigint)
