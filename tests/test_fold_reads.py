"""A resume's per-record costs (issue 10 §3): reading the log after the view snapshot and folding it. The faster
readers give exactly what the code before them gave: each is compared here, over random and damaged inputs, with
that code kept verbatim below (``_old_*``): the same records, the same values, the same errors with the same words
(a fold's ``problems`` quote them), the same torn tails and gaps. And what made them slow stays gone: a time is not
formatted through a datetime per row, and a snapshot is read as one copy of its bytes, not two."""

from __future__ import annotations

import os
import re
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safepoint.core import history_codec, record_rows
from safepoint.core.ledger import _CHANGEABLE, _DEFAULTS, apply_change
from safepoint.core.record_rows import CODES, DERIVED, FIELDS, TYPES, VERSION, Place
from safepoint.core.run_view import step_of
from safepoint.errors import CorruptRecordError
from safepoint.records import LedgerChange, LogProblem, LogRead, LogRecord, ToolLedgerEntry
from safepoint.store import framing
from safepoint.store.file_store import FileStore
from safepoint.store.log_after import frame_snapshot

# The code before (verbatim, but for names) -------------------------------------------------------------------------
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIMES = frozenset({"created_at", "planned_at", "started_at", "finished_at"})
_old_row_decoder = msgspec.json.Decoder(list[Any])


def _old_iso(value: int) -> str:
    return (_EPOCH + timedelta(microseconds=value)).isoformat(timespec="microseconds")


def _old_decode(kind: str, raw: bytes, place: Place) -> msgspec.Struct:
    names = FIELDS.get(kind)
    if names is None:
        raise CorruptRecordError(f"{kind} records are not written as rows")
    row = _old_row_decoder.decode(raw)
    if not row or row[0] != VERSION or len(row) - 1 > len(names):
        raise CorruptRecordError(f"{kind}: a row of another version or length ({len(row)} values)")
    derived = DERIVED.get(kind, {})
    fields: dict[str, Any] = {}
    for index, name in enumerate(names):
        value = row[index + 1] if index + 1 < len(row) else None
        if value is None:
            if name in derived:
                if kind != "checkpoint" and not isinstance(fields.get("call_id"), str):
                    raise CorruptRecordError(f"{kind}: a row without its call id")
                fields[name] = derived[name](place, fields)
            continue
        if value is False and name in derived:
            value = None
        elif name in CODES and isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(CODES[name]):
                raise CorruptRecordError(f"{kind}: {name} number {value} names no value")
            value = CODES[name][value]
        elif name in _TIMES and isinstance(value, int) and not isinstance(value, bool):
            if place.since is None:
                raise CorruptRecordError(f"{kind}: {name} counts from the run's creation, which its header lacks")
            try:
                value = _old_iso(place.since + value)
            except OverflowError:
                raise CorruptRecordError(f"{kind}: {name} {value} is not a time") from None
        if value is not None:
            fields[name] = value
    return msgspec.convert(fields, TYPES[kind])


_HEX = frozenset(b"0123456789abcdef")
_old_record_decoder = msgspec.json.Decoder(LogRecord)


def _old_check_line(line: bytes) -> bytes | None:
    if len(line) < 10 or line[8:9] != b" " or not _HEX.issuperset(line[:8]):
        return None
    payload = line[9:]
    if int(line[:8], 16) != zlib.crc32(payload):
        return None
    return payload


def _old_unframe_all(data: bytes) -> Iterator[tuple[int, bytes | LogProblem]]:
    offset = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        if end < 0:
            detail = f"last record ({size - offset} bytes) has no end"
            yield offset, LogProblem(kind="torn", position=offset, detail=detail)
            return
        line = data[offset:end]
        payload = _old_check_line(line)
        if payload is None:
            yield offset, LogProblem(kind="corrupt", position=offset, detail="checksum does not match")
        else:
            yield offset, payload
        offset = end + 1


def _old_read_records(lines: Iterable[tuple[int, bytes | LogProblem]], first: int) -> LogRead:
    records: list[LogRecord] = []
    problems: list[LogProblem] = []
    expected = first
    for position, item in lines:
        if isinstance(item, LogProblem):
            problems.append(item)
            continue
        try:
            record = _old_record_decoder.decode(item)
        except msgspec.DecodeError as exc:
            problems.append(LogProblem(kind="corrupt", position=position, detail=f"not a log record: {exc}"))
            continue
        if record.seq != expected:
            detail = f"records {expected}..{record.seq - 1} are missing before seq {record.seq}"
            problems.append(LogProblem(kind="gap", position=position, detail=detail))
        expected = record.seq + 1
        records.append(record)
    return LogRead(records=records, problems=problems)


def _old_read_after(data: bytes, base: int, first: int) -> LogRead:
    def moved(item: bytes | LogProblem) -> bytes | LogProblem:
        return msgspec.structs.replace(item, position=item.position + base) if isinstance(item, LogProblem) else item

    return _old_read_records(((base + position, moved(item)) for position, item in _old_unframe_all(data)), first)


def _old_apply_change(previous: ToolLedgerEntry, change: LedgerChange) -> ToolLedgerEntry:
    fields: dict[str, object] = {name: getattr(change, name) for name in _CHANGEABLE}
    fields = {name: value for name, value in fields.items() if value is not None}
    for name in change.cleared:
        if name in _CHANGEABLE:
            fields[name] = _DEFAULTS.get(name)
    return msgspec.structs.replace(previous, status=change.status, input={}, **fields)


_OLD_STEP = re.compile(r"step_(\d+)$")


def _old_step_of(step_id: str) -> int:
    match = _OLD_STEP.search(step_id)
    return int(match.group(1)) if match else 0


def _outcome(read: Any, *args: Any) -> tuple[str, Any]:
    """What a reader gives: its value, or its error's type and words."""
    try:
        return "value", read(*args)
    except (CorruptRecordError, msgspec.DecodeError, OverflowError) as exc:
        return type(exc).__name__, str(exc)


# Times -----------------------------------------------------------------------------------------------------------
MAX_MICROS = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
MIN_MICROS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
EDGES = [0, -1, 1, 999_999, 1_000_000, -1_000_000, -1_000_001, MAX_MICROS, MAX_MICROS + 1, MIN_MICROS, MIN_MICROS - 1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(EDGES),
            st.integers(MIN_MICROS - 10**7, MAX_MICROS + 10**7),
            st.integers(-(10**30), 10**30),
            st.integers(1_796_145_133_000_000, 1_796_145_136_000_000),  # many in one second, as a run writes them
        ),
        min_size=1,
        max_size=30,
    )
)
def test_a_time_reads_as_the_datetime_wrote_it_in_any_order(values):
    for value in values:  # the one-second cache, met in every order
        assert _outcome(record_rows.iso, value) == _outcome(_old_iso, value)


def test_a_second_is_made_a_datetime_once_not_per_time(monkeypatch):
    made = []

    def counting(*args: Any, **kwargs: Any) -> timedelta:
        made.append(1)
        return timedelta(*args, **kwargs)

    monkeypatch.setattr(record_rows, "timedelta", counting)
    since = record_rows.micros("2026-12-01T11:59:53.203855+00:00")
    assert since is not None
    for step in range(200):  # 200 rows within one second of the run, each with its time
        record_rows.decode("ledger_change", b'[1,"c%d",2,%d]' % (step, 300_000 + step), Place("r", 9, "m", since))
    assert len(made) <= 1


# Rows ------------------------------------------------------------------------------------------------------------
CREATED = "2026-12-01T11:59:53.203855+00:00"
PLACES = [
    Place("r", 40, "scripted-v1", record_rows.micros(CREATED)),
    Place("r", 40),  # the header could not be read: no model, no start to count from
    Place("run-9", 2, None, -5),
]
_vocabulary = [value for values in CODES.values() for value in values]
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.integers(-(10**20), 10**20),
    st.sampled_from([*_vocabulary, "call_7", "step_3", "", "log:39", "2026-12-01T12:00:01.000001+00:00"]),
    st.floats(allow_nan=False, allow_infinity=False),
)
_values = st.one_of(
    _scalars,
    st.lists(st.sampled_from(["fs", "net", "error", 3]), max_size=3),
    st.dictionaries(st.sampled_from(["n", "path", "x"]), _scalars, max_size=3),
)


def _rows(kind: str) -> st.SearchStrategy[list[Any]]:
    width = len(FIELDS[kind])
    version = st.sampled_from([VERSION, VERSION, VERSION, 2, 1.0, True, "1"])
    return st.tuples(version, st.lists(_values, max_size=width + 1)).map(lambda pair: [pair[0], *pair[1]])


def _good_rows(kind: str) -> st.SearchStrategy[list[Any]]:
    """Rows much like the writer's: a call id first, then each place a value of its own kind or null."""
    names = FIELDS[kind]

    def place(name: str) -> st.SearchStrategy[Any]:
        if name in CODES:
            return st.one_of(st.none(), st.integers(-1, len(CODES[name])), st.sampled_from([*CODES[name], True, False]))
        if name in _TIMES:
            strings = st.sampled_from(["2026-12-01T12:00:01+01:00", True])
            return st.one_of(st.none(), st.integers(-(10**9), 10**12), strings)
        if name in DERIVED.get(kind, {}):
            return st.one_of(st.none(), st.sampled_from([False, "said-otherwise", "", 0, True]))
        if name in ("step", "history_len", "patches_len", "ledger_seq", "next_turn"):
            return st.one_of(st.none(), st.integers(0, 99))
        if name in ("side_effects", "cleared", "pending_tool_calls"):
            return st.one_of(st.none(), st.just(["error"]))
        if name in ("input", "model_config"):
            return st.one_of(st.none(), st.dictionaries(st.sampled_from(["n", "path"]), st.integers(0, 9)))
        return st.one_of(st.none(), st.sampled_from(["call_7", "step_3", "noop", "x"]))

    return st.tuples(*(place(name) for name in names)).flatmap(
        lambda values: st.integers(0, len(values)).map(lambda cut: [VERSION, *values[:cut]])
    )


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(sorted(FIELDS)),
    data=st.data(),
    place=st.sampled_from(PLACES),
)
def test_a_row_decodes_to_what_the_code_before_gave_and_fails_in_its_words(kind, data, place):
    row = data.draw(st.one_of(_rows(kind), _good_rows(kind)))
    raw = msgspec.json.encode(row)
    assert _outcome(record_rows.decode, kind, raw, place) == _outcome(_old_decode, kind, raw, place)


@pytest.mark.parametrize(
    ("kind", "raw"),
    [
        ("ledger", b'[1,"c49634",0,"noop","step_4964",0,0,0,{"n":49634},null,97937905]'),
        ("ledger_change", b'[1,"c49633",3,null,97932246,null,0]'),
        ("ledger_change", b'[1,"c49634",2,97937973]'),
        ("checkpoint", b"[1,4964,2,97932302,49635]"),
        ("ledger", b"[1]"),  # every derived value asked of a row without its call id
        ("ledger", b'[1,"c",0,"t","s",0,0,0,{},true]'),  # a derived place holding neither null nor false nor a hash
        ("checkpoint", b"[1,1,2,5,1,false,false]"),  # model and next turn said as None
        ("ledger_change", b'[1,"c",2,99999999999999999999]'),
        ("nothing", b"[1]"),
    ],
)
def test_the_rows_a_run_writes_decode_as_before(kind, raw):
    for place in PLACES:
        assert _outcome(record_rows.decode, kind, raw, place) == _outcome(_old_decode, kind, raw, place)


_old_message_row = msgspec.json.Decoder(history_codec.StoredMessageRow)


def _old_decode_message_row(raw: bytes) -> history_codec.StoredMessage:
    row = _old_message_row.decode(raw)
    roles = history_codec.ROLES
    role = roles[row.role] if isinstance(row.role, int) and 0 <= row.role < len(roles) else row.role
    if role not in history_codec._KNOWN_ROLES:
        raise msgspec.ValidationError(
            f"a message row's role {row.role!r} is none of {sorted(history_codec._KNOWN_ROLES)}"
        )
    fields = {name: getattr(row, name) for name in history_codec._ROW_FIELDS}
    return history_codec.StoredMessage(**{**fields, "role": role})


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(
        st.one_of(st.integers(0, 9), st.just("x")),
        st.one_of(st.integers(-1, 5), st.sampled_from(["tool", "robot", ""])),
        st.lists(
            st.one_of(st.none(), st.text(max_size=3), st.integers(0, 3), st.just([]), st.just("AAAA")), max_size=9
        ),
    )
)
def test_a_message_row_decodes_as_before(parts):
    raw = msgspec.json.encode([parts[0], parts[1], *parts[2]])
    new, old = _outcome(history_codec.decode_message_row, raw), _outcome(_old_decode_message_row, raw)
    assert new == old


# Ledger changes and step ids ---------------------------------------------------------------------------------------
_entry = ToolLedgerEntry(
    call_id="c1",
    step_id="step_2",
    tool_name="noop",
    input_hash="sha256:0",
    status="started",
    risk_level="low",
    idempotency="idempotent",
    replay_policy="auto",
    input={"n": 1},
    error="was",
    side_effects=("fs",),
)


@settings(max_examples=60, deadline=None)
@given(
    st.fixed_dictionaries(
        {"call_id": st.just("c1"), "status": st.sampled_from(CODES["status"])},
        optional={
            "step_id": st.sampled_from(["step_3", ""]),
            "finished_at": st.just("2026-12-01T12:00:01.000001+00:00"),
            "result_ref": st.just("log:4"),
            "error": st.sampled_from(["boom", ""]),
            "side_effects": st.just(["net"]),
            "decision": st.sampled_from(CODES["decision"]),
            "result_encoding": st.sampled_from(CODES["result_encoding"]),
            "cleared": st.lists(st.sampled_from([*LedgerChange.__struct_fields__, "nonsense"]), max_size=4),
        },
    )
)
def test_a_change_applies_as_before(fields):
    change = msgspec.convert(fields, LedgerChange)
    assert apply_change(_entry, change) == _old_apply_change(_entry, change)


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.text(max_size=12),
        st.builds(lambda tail: "step_" + tail, st.text(alphabet="0123456789٣߁x_\n ", max_size=5)),
        st.builds(lambda head, n: f"{head}step_{n}", st.text(max_size=4), st.integers(0, 10**6)),
    )
)
def test_a_step_ids_number_reads_as_the_pattern_reads_it(step_id):
    assert step_of(step_id) == _old_step_of(step_id)


# The log's lines -----------------------------------------------------------------------------------------------------
def _line(seq: int, body: bytes = b'{"status":"running","at":"t"}') -> bytes:
    return framing.frame(b'{"kind":"event","body":%s,"seq":%d,"gen":1}' % (body, seq))


_damages = st.sampled_from(
    [
        "none",
        "flip",  # a bit of the payload
        "upper",  # the checksum spelled in capitals
        "prefix",  # the checksum spelled with 0x
        "no-space",
        "short",
        "not-json",
        "not-a-record",
        "skip",  # a record lost: a gap
        "again",  # a seq repeated
        "empty",
    ]
)


def _damaged(seq: int, damage: str) -> bytes:
    line = _line(seq)
    if damage == "flip":
        return line[:20] + bytes([line[20] ^ 4]) + line[21:]
    if damage == "upper":
        return line[:8].upper() + line[8:] if line[:8].upper() != line[:8] else line[:8] + b"  " + line[8:]
    if damage == "prefix":
        return b"0x" + line[2:]
    if damage == "no-space":
        return line[:8] + b"_" + line[9:]
    if damage == "short":
        return line[:9] + b"\n"
    if damage == "not-json":
        return framing.frame(b"{not json")
    if damage == "not-a-record":
        return framing.frame(b'{"kind":5,"seq":"x"}')
    if damage == "empty":
        return b"\n"
    return line


@settings(max_examples=80, deadline=None)
@given(
    st.lists(_damages, max_size=14),
    st.integers(0, 30),  # the torn tail's length (0: none)
    st.integers(0, 5000),  # where the lines start in the file
    st.integers(1, 4),  # the seq the read expects first
)
def test_a_tail_reads_as_before_with_its_damage(damages, torn, base, first):
    data, seq = b"", first
    for damage in damages:
        if damage == "skip":
            seq += 1
        data += _damaged(seq, damage)
        seq += 0 if damage == "again" else 1
    data += _line(seq)[:torn]
    assert framing.read_framed(data, base=base, first=first) == _old_read_after(data, base, first)
    for line in data.split(b"\n"):
        assert framing.check_line(line) == _old_check_line(line)


# The snapshot ---------------------------------------------------------------------------------------------------------
def test_a_snapshot_is_read_as_one_copy_of_its_bytes_and_checked(tmp_path):
    store = FileStore(str(tmp_path / "store"))
    os.makedirs(store.run_dir("r"))
    Path(store.run_dir("r"), "run.json").write_bytes(b"")  # a run's place (the reader asks only that it exists)
    path = Path(store.run_dir("r"), "view_snapshot.bin")
    data = bytes(range(256)) * 16_384  # 4 MB
    framed = frame_snapshot(data, 7)
    path.write_bytes(framed)
    store.read_view_snapshot("r")  # warm: what the first read allocates once is not the point
    tracemalloc.start()
    try:
        assert store.read_view_snapshot("r") == data
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) * 1.2, peak  # a buffered read gathered it in chunks, then joined them: twice the bytes
    for damaged in (framed[:-1], framed[:100], framed[:-5] + b"xxxxx", b"spv1 nothing", b"", framed + b"more"):
        path.write_bytes(damaged)
        assert store.read_view_snapshot("r") is None  # torn, cut, corrupt or not a snapshot: never trusted
