"""Rows: the compact body of the records a run writes at every call (issue 10 §5, §7). Pure: records in, bytes out.

A ledger entry, a ledger change and a checkpoint are ours (no user reads their bytes: ``explain``, the CLI's JSON
and the API give the records whole, with the seed's names), and they were most of a run's log after its messages:
each repeated its field names, its timestamps as 32-character strings, and ids its place already says. A row is a
JSON array ``[1, value, ...]``: the values in a fixed order per kind (``FIELDS``, most often set first); a status,
a checkpoint kind, a risk level and the like as its number in ``CODES``; ``null`` for a field at its default,
trailing nulls left out; a timestamp as integer microseconds since the run's creation (its header's
``created_at``) when that gives back the exact string (any other string is kept as it is); and ``null`` for a field
its place says (``DERIVED``) when it is exactly what the place says: a ledger entry's ``run_id``,
``idempotency_key`` and ``input_hash`` (of its input, unless redaction changed it), a result's ``result_ref`` (the
tool message just before it), a checkpoint's ``model`` (the header's) and ``next_turn`` (its step). Such a field is
written as it is otherwise, even when empty (``false`` for None). What is read back is always the record as it
was made (``tests/test_records_rows.py`` proves the round trip on every field). A step of a 3,000-step run of 1 KB
texts: ledger and checkpoint records 0.58 KB, not 1.4 KB (``bench/storage.py --only history``).

Old logs: a body that is a JSON object is the record written whole, as every log before rows holds it, and reads
as it always did (``tests/data/`` keeps such a log). The leading ``1`` names this field order: another order takes
another number, and this one stays readable. The row sits in the record's body (the log line's, the PostgreSQL
row's ``body``), so the stores, their framing, checksums, fencing and sealing are unchanged.

Rejected: msgpack bodies (the log is JSON lines and base64 would eat the gain); a delta against the previous
checkpoint (the checkpoint index opens one checkpoint record on its own); shortening the hashes (they are what a
person compares against ``sha256sum``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import msgspec

from safepoint.core.hashing import idempotency_key, input_hash
from safepoint.core.history_codec import decode_message_row
from safepoint.errors import CorruptRecordError
from safepoint.records import Checkpoint, LedgerChange, RunInfo, ToolLedgerEntry

VERSION = 1
_TIMES = frozenset({"created_at", "planned_at", "started_at", "finished_at"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_encoder = msgspec.json.Encoder()
_row_decoder = msgspec.json.Decoder(list[Any])

# The order of each kind's row: the fields every record sets first (so the trailing defaults fall away). Never
# reorder a tuple (rows written under ``VERSION`` need it); a new field goes at the end.
FIELDS: dict[str, tuple[str, ...]] = {
    "ledger": (
        "call_id",
        "status",
        "tool_name",
        "step_id",
        "risk_level",
        "idempotency",
        "replay_policy",
        "input",
        "input_hash",
        "planned_at",
        "idempotency_key",
        "run_id",
        "started_at",
        "finished_at",
        "result_ref",
        "result_encoding",
        "side_effects",
        "error",
        "decision",
        "decision_reason",
        "compensates",
    ),
    "ledger_change": (
        "call_id",
        "status",
        "started_at",
        "finished_at",
        "result_ref",
        "result_encoding",
        "error",
        "decision",
        "decision_reason",
        "cleared",
        "step_id",
        "tool_name",
        "input_hash",
        "risk_level",
        "idempotency",
        "replay_policy",
        "side_effects",
        "run_id",
        "idempotency_key",
        "planned_at",
        "compensates",
    ),
    "checkpoint": (
        "step",
        "kind",
        "created_at",
        "history_len",
        "model",
        "next_turn",
        "pending_tool_calls",
        "patches_len",
        "git_head",
        "model_config",
        "ledger_seq",
        "checkpoint_id",
        "run_id",
    ),
}
TYPES: dict[str, type[msgspec.Struct]] = {
    "ledger": ToolLedgerEntry,
    "ledger_change": LedgerChange,
    "checkpoint": Checkpoint,
}


class Place(NamedTuple):
    """Where a record sits: its run, its sequence number, and what the run's header says (its model, and its
    creation time in microseconds: a row's times are counted from it, 10-11 digits, not 16). None where the header
    could not be read when the record was written: then the row keeps the model and its times as strings."""

    run_id: str
    seq: int
    model: str | None = None
    since: int | None = None


def _result_ref(place: Place, fields: dict[str, Any]) -> str | None:
    return f"log:{place.seq - 1}" if fields.get("status") in ("succeeded", "failed") else None


# A value of the seed's vocabulary as its place in these tuples (the names stay the names wherever a user sees them:
# ``explain``, the CLI's JSON, the API read the records whole). Never reorder a tuple: a new value goes at its end,
# and a value a tuple lacks is written as its string.
CODES: dict[str, tuple[str, ...]] = {
    "status": ("planned", "approved", "started", "succeeded", "failed", "uncertain"),
    "kind": ("before_step", "tool_start", "tool_end", "after_step"),
    "risk_level": ("low", "medium", "high"),
    "idempotency": ("idempotent", "conditional", "non_idempotent"),
    "replay_policy": ("auto", "ask", "never"),
    "result_encoding": ("text", "json", "none"),
    "decision": (
        *("approved", "denied", "timeout", "grant_expired", "probe", "replay", "skip", "report_uncertain"),
        "settled",
    ),
}
_NUMBERS = {name: {value: number for number, value in enumerate(values)} for name, values in CODES.items()}


# What a record's place says: the value of a field, from its place and the fields before it in the row. A ledger
# entry's input hash is the hash of its input unless redaction changed the input (the hash is of the real one).
DERIVED: dict[str, dict[str, Callable[[Place, dict[str, Any]], Any]]] = {
    "ledger": {
        "input_hash": lambda place, fields: input_hash(fields.get("input", {})),
        "run_id": lambda place, fields: place.run_id,
        "idempotency_key": lambda place, fields: idempotency_key(place.run_id, fields["call_id"]),
    },
    "ledger_change": {"result_ref": _result_ref},  # the call's result: the tool message just before it
    "checkpoint": {"model": lambda place, fields: place.model, "next_turn": lambda place, fields: fields.get("step")},
}


def _defaults(kind_type: type[msgspec.Struct]) -> dict[str, Any]:
    info = msgspec.structs.fields(kind_type)
    found: dict[str, Any] = {}
    for field in info:
        if field.default is not msgspec.NODEFAULT:
            found[field.name] = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            found[field.name] = field.default_factory()
    return found


_DEFAULTS = {kind: _defaults(kind_type) for kind, kind_type in TYPES.items()}
for _kind, _names in FIELDS.items():  # a field left out of a row would be lost: every field has its place
    assert sorted(_names) == sorted(TYPES[_kind].__struct_fields__), _kind


def micros(text: str) -> int | None:
    """``text`` (an ISO 8601 UTC timestamp as ``log_writer.now`` writes it) as microseconds since the epoch, or
    None when those would not give back exactly ``text``."""
    if len(text) != 32 or not text.endswith("+00:00"):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    delta = moment - _EPOCH
    value = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value if iso(value) == text else None


_since = functools.lru_cache(maxsize=64)(micros)  # a reader asks it of the same header for every record
# The last second ``iso`` formatted, as ``(seconds since the epoch, "YYYY-MM-DDTHH:MM:SS")``: a run's records come
# many to a second, so a time is its second's text (made once) and its microseconds. One tuple, replaced whole, so
# a thread never reads one second's number with another's text. Rejected: a datetime made and formatted per time
# (2.5-5 µs each, 3,000 of a resume's 1,900-record tail), and keeping rows' times as numbers until read (a field
# change of every record a user reads).
_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def iso(value: int) -> str:
    """``value`` microseconds since the epoch as ``log_writer.now`` writes a time (``+00:00``, six digits of
    microseconds). Raises ``OverflowError`` outside the years 1-9999, as the datetime it stands for would."""
    global _second
    seconds, fraction = divmod(value, 1_000_000)
    known, text = _second
    if seconds != known:
        # The whole second's datetime: in range exactly when every microsecond of it is (the range's ends are
        # whole seconds and .999999), so the same values overflow as in ``_EPOCH + timedelta(microseconds=...)``.
        text = (_EPOCH + timedelta(seconds=seconds)).isoformat()[:19]
        _second = (seconds, text)
    return f"{text}.{fraction:06d}+00:00"


def place_of(info: RunInfo, seq: int) -> Place:
    """The place of record ``seq`` of the run ``info`` heads."""
    return Place(info.run_id, seq, info.model, _since(info.created_at))


def encode(kind: str, plain: dict[str, Any], place: Place) -> bytes | None:
    """A record of ``kind`` as a row, from its plain form (``msgspec.to_builtins`` of it, redacted: a field at its
    default may be left out), or None when ``kind`` has no rows."""
    names = FIELDS.get(kind)
    if names is None:
        return None
    defaults = _DEFAULTS[kind]
    derived = DERIVED.get(kind, {})
    values: list[Any] = [VERSION]
    seen: dict[str, Any] = {}
    for name in names:
        value = plain[name] if name in plain else defaults.get(name)
        seen[name] = value
        if name in derived:
            if value == derived[name](place, seen):
                values.append(None)
            else:  # written as it is, even at its default; ``false`` for None (null says "what the place says")
                values.append(False if value is None else value)
        elif name in defaults and value == defaults[name]:
            values.append(None)
        elif name in _TIMES and isinstance(value, str):
            moment = micros(value) if place.since is not None else None
            values.append(value if moment is None or place.since is None else moment - place.since)
        elif name in _NUMBERS and isinstance(value, str):
            values.append(_NUMBERS[name].get(value, value))
        else:
            values.append(value)
    while values[-1] is None:
        values.pop()
    return _encoder.encode(values)


def is_row(kind: str, raw: bytes | msgspec.Raw) -> bool:
    """True when a record of ``kind`` was written as a row (else it is the record written whole, as before): a
    ledger state, a checkpoint, or a message (``history_codec.StoredMessageRow``)."""
    return (kind in FIELDS or kind == "message") and memoryview(raw)[:1].tobytes() == b"["


# How a row's place is read, decided once per kind from the tables above (rejected: asking ``DERIVED``, ``CODES`` and
# ``_TIMES`` of every value of every row, most of a resume's fold of the log after its snapshot).
_PLAIN, _CODE, _TIME, _DERIVED = 0, 1, 2, 3


class _Plan(NamedTuple):
    kind: str
    names: tuple[str, ...]
    hows: tuple[int, ...]  # per name: _PLAIN, _CODE, _TIME or _DERIVED
    codes: tuple[tuple[str, ...], ...]  # per name: its CODES (empty unless _CODE)
    derive: tuple[Callable[[Place, dict[str, Any]], Any] | None, ...]  # per name: its DERIVED (else None)
    derived: tuple[int, ...]  # the indexes of the derived names, in order: a row that stops before one says it
    type: type[msgspec.Struct]
    by_call: bool  # a derived value needs the row's call id (every kind but a checkpoint)


def _plan(kind: str) -> _Plan:
    names, derived = FIELDS[kind], DERIVED.get(kind, {})
    assert not derived.keys() & (CODES.keys() | _TIMES), kind  # a derived value is written as it is, never coded
    hows = tuple(
        _DERIVED if name in derived else _CODE if name in CODES else _TIME if name in _TIMES else _PLAIN
        for name in names
    )
    return _Plan(
        kind,
        names,
        hows,
        tuple(CODES.get(name, ()) for name in names),
        tuple(derived.get(name) for name in names),
        tuple(index for index, how in enumerate(hows) if how == _DERIVED),
        TYPES[kind],
        kind != "checkpoint",
    )


_PLANS = {kind: _plan(kind) for kind in FIELDS}


def decode(kind: str, raw: bytes | msgspec.Raw, place: Place) -> msgspec.Struct:
    """The record a row of ``kind`` holds, as it was made. Raises ``msgspec.DecodeError`` (a ``ValidationError``:
    a value of the wrong type) or ``CorruptRecordError`` (not a row this version reads)."""
    if kind == "message":  # the history codec's row: a ``StoredMessage`` the reader makes a message
        return decode_message_row(raw)
    plan = _PLANS.get(kind)
    if plan is None:
        raise CorruptRecordError(f"{kind} records are not written as rows")
    row = _row_decoder.decode(raw)
    names = plan.names
    if not row or row[0] != VERSION or len(row) - 1 > len(names):
        raise CorruptRecordError(f"{kind}: a row of another version or length ({len(row)} values)")
    # The places in order, as the names are: the values the row holds, then the derived ones it stops before (a
    # value is derived from the values before it only, so the fields are made, and a damage found, in one order).
    fields: dict[str, Any] = {}
    hows = plan.hows
    for index, value in enumerate(row[1:]):
        how = hows[index]
        if value is None:
            if how == _DERIVED:
                _derive(plan, index, place, fields)
            continue
        if how == _PLAIN:
            fields[names[index]] = value
        elif how == _DERIVED:
            if value is not False:  # ``false``: None said otherwise than the place says
                fields[names[index]] = value
        elif type(value) is not int:  # a name or a time kept as its string (or a wrong type msgspec refuses)
            fields[names[index]] = value
        elif how == _CODE:
            codes = plan.codes[index]
            if not 0 <= value < len(codes):
                raise CorruptRecordError(f"{kind}: {names[index]} number {value} names no value")
            fields[names[index]] = codes[value]
        else:
            if place.since is None:
                raise CorruptRecordError(
                    f"{kind}: {names[index]} counts from the run's creation, which its header lacks"
                )
            try:
                fields[names[index]] = iso(place.since + value)
            except OverflowError:
                raise CorruptRecordError(f"{kind}: {names[index]} {value} is not a time") from None
    for index in plan.derived:
        if index >= len(row) - 1:
            _derive(plan, index, place, fields)
    return msgspec.convert(fields, plan.type)


def _derive(plan: _Plan, index: int, place: Place, fields: dict[str, Any]) -> None:
    if plan.by_call and not isinstance(fields.get("call_id"), str):
        raise CorruptRecordError(f"{plan.kind}: a row without its call id")
    derive = plan.derive[index]
    assert derive is not None
    fields[plan.names[index]] = derive(place, fields)
