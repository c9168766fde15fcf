"""A graceful stop: SIGTERM asks the process to stop at its next safe point (between steps, or while waiting for
an approval) and leave its restart checkpoint for the next start, instead of dying mid-write."""

from __future__ import annotations

import signal
import threading
from types import FrameType

_requested = threading.Event()


def requested() -> bool:
    return _requested.is_set()


def request() -> None:
    _requested.set()


def reset() -> None:
    _requested.clear()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _requested.set()


def install() -> None:
    """Route SIGTERM to a stop request. Only the main thread may install signal handlers."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
