"""Why a live run stops before its work is done, checked at every safe point (between steps, and while a call
waits for approval): a cancel (its own, or a whole-stream cancel of any ancestor), a context reset, a successor,
or SIGTERM. The first three close the work for good (seed 003 §4.1); SIGTERM leaves it for the next start."""

from __future__ import annotations

from typing import Protocol

from safepoint.errors import RunCancelled, WorkVoided
from safepoint.protocol import (
    CancelRequest,
    ContextResetRequest,
    ControlRecord,
    ControlSeen,
    SuccessorAccepted,
)
from safepoint.records import RunInfo
from safepoint.restart.judge import ancestor_stream_cancel
from safepoint.store.base import Store


class StopFacts(Protocol):
    """The run a stop is checked for, and the control records it already acted on (a ``RunSession`` is one)."""

    store: Store
    info: RunInfo
    control_seen: dict[int, ControlSeen]


def raise_if_stopped(session: StopFacts, found: list[tuple[int, ControlRecord]]) -> None:
    for position, record in found:
        if position in session.control_seen:
            continue
        if isinstance(record, CancelRequest):
            raise RunCancelled(record, position)
        if isinstance(record, ContextResetRequest):
            raise WorkVoided("context_reset", f"context reset by {record.by} at {record.at}", position)
        if isinstance(record, SuccessorAccepted):
            detail = f"run {record.successor_run_id!r} took over this work at {record.at}"
            raise WorkVoided("successor_accepted", detail, position)
    if session.info.parent_run_id is not None:
        above = ancestor_stream_cancel(session.store, session.info)
        if above is not None:
            raise RunCancelled(above, None)
