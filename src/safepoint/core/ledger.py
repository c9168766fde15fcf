"""The tool ledger's state machine (§8.2): which status may follow which, and what a crash leaves behind."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from safepoint.errors import LedgerTransitionError
from safepoint.records import LedgerChange, LedgerStatus, ToolLedgerEntry

# planned -> (approved) -> started -> succeeded | failed; a crash turns started into uncertain, which a probe,
# a person or a re-run settles. planned -> failed covers a call refused before it ran (denied, unknown tool).
TRANSITIONS: dict[LedgerStatus | None, frozenset[LedgerStatus]] = {
    None: frozenset({"planned"}),
    "planned": frozenset({"approved", "started", "failed"}),
    "approved": frozenset({"started", "failed"}),
    "started": frozenset({"succeeded", "failed", "uncertain"}),
    "uncertain": frozenset({"started", "succeeded", "failed"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
}
FINISHED: frozenset[LedgerStatus] = frozenset({"succeeded", "failed"})
NEVER_RAN: frozenset[LedgerStatus] = frozenset({"planned", "approved"})


def check_transition(previous: ToolLedgerEntry | None, new: ToolLedgerEntry) -> None:
    before = previous.status if previous else None
    if new.status not in TRANSITIONS[before]:
        raise LedgerTransitionError(
            f"ledger entry {new.call_id}: {before or 'nothing'} -> {new.status} is not a valid transition"
        )


def fold(entries: Iterable[ToolLedgerEntry]) -> dict[str, ToolLedgerEntry]:
    """The current entry per call, in order of first appearance (the last appended state wins).

    A call's input is logged with its first entry only; later states inherit it here.
    """
    current: dict[str, ToolLedgerEntry] = {}
    for entry in entries:
        previous = current.get(entry.call_id)
        if previous is not None and not entry.input and previous.input:
            entry = msgspec.structs.replace(entry, input=previous.input)
        current[entry.call_id] = entry
    return current


def settle_after_crash(entry: ToolLedgerEntry) -> ToolLedgerEntry:
    """A call that started but has no recorded outcome may or may not have had its effect: ``uncertain``."""
    if entry.status == "started":
        return msgspec.structs.replace(entry, status="uncertain")
    return entry


def attempts(entries: Iterable[ToolLedgerEntry]) -> dict[str, int]:
    """How many times each call was started; a person's decision about a call applies to one attempt only."""
    counts: dict[str, int] = {}
    for entry in entries:
        if entry.status == "started":
            counts[entry.call_id] = counts.get(entry.call_id, 0) + 1
    return counts


# A later state logged as what changed (``records.LedgerChange``) ------------------------------------------------------
_CHANGEABLE = tuple(name for name in LedgerChange.__struct_fields__ if name not in ("call_id", "status", "cleared"))
_DEFAULTS = {
    name: default
    for name, default in zip(
        ToolLedgerEntry.__struct_fields__[-len(ToolLedgerEntry.__struct_defaults__) :],
        ToolLedgerEntry.__struct_defaults__,
        strict=True,
    )
}


def change_of(previous: ToolLedgerEntry, new: ToolLedgerEntry) -> LedgerChange:
    """``new`` as what changed since ``previous`` (its input is never repeated: later states inherit it)."""
    changed: dict[str, object] = {}
    cleared = []
    for name in _CHANGEABLE:
        value = getattr(new, name)
        if value == getattr(previous, name):
            continue
        if value is None or (name in _DEFAULTS and value == _DEFAULTS[name]):
            cleared.append(name)  # None here would read as "unchanged"
        else:
            changed[name] = value
    return LedgerChange(call_id=new.call_id, status=new.status, cleared=tuple(cleared), **changed)  # type: ignore[arg-type]  # names and types are ToolLedgerEntry's, checked by msgspec when decoded


_CHANGE_FIELDS = LedgerChange.__struct_fields__
_CHANGEABLE_AT = tuple((index, name) for index, name in enumerate(_CHANGE_FIELDS) if name in _CHANGEABLE)


def apply_change(previous: ToolLedgerEntry, change: LedgerChange) -> ToolLedgerEntry:
    """The whole entry ``change`` makes of ``previous``, with an empty input as a later state is logged (``fold``
    gives it the first state's)."""
    values = msgspec.structs.astuple(change)  # one C call, not a getattr per field (a resume applies thousands)
    fields: dict[str, object] = {name: values[index] for index, name in _CHANGEABLE_AT if values[index] is not None}
    for name in change.cleared:
        if name in _CHANGEABLE:
            fields[name] = _DEFAULTS.get(name)
    return msgspec.structs.replace(previous, status=change.status, input={}, **fields)
