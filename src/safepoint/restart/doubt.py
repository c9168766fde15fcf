"""The witnesses a damaged log is checked against (``core.doubt`` judges them): the store's mark of the last
durable record, the trace, the approvals on the control channel and the restart checkpoint's pending calls.

Each is read once per resume or report, linear in what it holds; none of them can make a call look finished,
only doubtful (the trace is not durable per call, so it may say too little, never too much).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable

import msgspec

from safepoint.core.doubt import Doubt, Witnesses, find_doubt
from safepoint.core.large_values import LOST_CONTENT
from safepoint.core.lost_content import needing
from safepoint.core.run_view import RunView
from safepoint.protocol import (
    Approval,
    ControlRecord,
    RestartPayload,
    RuntimeRestartCheckpoint,
    RuntimeRestartReactionLoopState,
)
from safepoint.store.base import Store

_RAN = frozenset({"tool_started", "tool_finished"})


class _TraceEvent(msgspec.Struct):
    event: str = ""
    data: dict[str, object] = msgspec.field(default_factory=dict)


_trace_decoder = msgspec.json.Decoder(_TraceEvent)
_checkpoint_decoder = msgspec.json.Decoder(RuntimeRestartCheckpoint)
_payload_decoder = msgspec.json.Decoder(RestartPayload)
_control_decoder = msgspec.json.Decoder(ControlRecord)


def restart_pending(store: Store, run_id: str) -> tuple[str, ...]:
    """The calls the run's restart checkpoint names as pending (none when it has none, or it cannot be read:
    the recovery assertions report a damaged descriptor)."""
    stored = store.read_restart_checkpoint(run_id)
    if stored is None or not stored.intact:
        return ()
    try:
        payload = _payload_decoder.decode(_checkpoint_decoder.decode(stored.data).payload_json or "")
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ()
    return payload.pending_tool_calls if isinstance(payload, RuntimeRestartReactionLoopState) else ()


def traced_calls(store: Store, run_id: str) -> frozenset[str]:
    found: set[str] = set()
    for line in store.read_trace(run_id):
        if b'"tool_' not in line:
            continue  # most of the trace is checkpoints and file events: not decoded
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            event = _trace_decoder.decode(line)
            call_id = event.data.get("call_id")
            if event.event in _RAN and isinstance(call_id, str):
                found.add(call_id)
    return frozenset(found)


def answered_calls(store: Store, run_id: str) -> frozenset[str]:
    """Calls a person approved or denied: ``approve`` reads the call from the ledger, so the ledger had it."""
    found: set[str] = set()
    for _, data in store.read_control(run_id):
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            record = _control_decoder.decode(data)
            if isinstance(record, Approval):
                found.add(record.call_id)
    return frozenset(found)


def witnesses(store: Store, run_id: str) -> Witnesses:
    mark = store.log_mark(run_id)
    return Witnesses(
        log_mark=mark,
        # Every `started` is written with a checkpoint after it, so a store that keeps a mark of its last durable
        # checkpoint sees any cut that lost one; the trace (a third of a resume's reading on a long run) is read
        # only where no mark is kept.
        traced=traced_calls(store, run_id) if mark == 0 else frozenset(),
        approved=answered_calls(store, run_id),
        pending=restart_pending(store, run_id),
    )


def lost_content(view: RunView) -> list[str]:
    """What the records still name but the store no longer holds: content that went with a damaged record (fsck
    quarantines what it cannot mend). Each as the file and the call that kept it, a call's arguments (the
    ledger's, or the history's), a tool's result or a message's text (``core.lost_content``). Only a log with a
    hole can have lost any this way; one pass over its records. (A store blob lost under a whole log is found
    where it is read: ``doubt_of``'s ``found``.)"""
    if not view.lost_seqs:
        return []
    produced = {patch.after_hash for patch in view.patches}  # rebuilt from its patch: not lost
    return needing(view, lambda digest: digest not in view.blobs and digest not in produced)


def doubt_of(store: Store, view: RunView, found: Iterable[str] = ()) -> Doubt:
    """The doubt a damaged log raises, and what it took with it: the recovery note says which file versions
    (rollback leaves those files as they are), which arguments are gone (that call is never re-run from them) and
    which messages the model now sees as a note. ``found``: what a session's reads found lost besides (a store
    blob missing or damaged, or failing to unseal, where the log itself is whole)."""
    doubt = find_doubt(view, witnesses(store, view.info.run_id))
    lost = list(dict.fromkeys([*lost_content(view), *found]))
    if not lost:
        return doubt
    shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
    what = f"{LOST_CONTENT}: {shown}"
    return dataclasses.replace(doubt, reasons=(*doubt.reasons, what))
