"""A snapshot's ledger (``core.ledger_map``): the finished calls packed as bytes, the others in the dict, read as
the plain dict the whole log's fold gives: the same calls, entries, order, length, lookups, copies and writes, for
any split of the calls between packed and changed, and with a digest collision told apart by the call id."""

from __future__ import annotations

import array
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safepoint.core import ledger_map
from safepoint.core.ledger_map import LedgerMap, Row, pack
from safepoint.errors import CorruptRecordError
from safepoint.records import ToolLedgerEntry


def _entry(call_id: str, status: str = "succeeded", step: int = 1) -> ToolLedgerEntry:
    return ToolLedgerEntry(
        call_id=call_id,
        step_id=f"step_{step}",
        tool_name="noop",
        input_hash="h",
        status=status,
        risk_level="low",
        idempotency="idempotent",
        replay_policy="auto",
        input={"n": call_id},
    )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), calls=st.integers(0, 30), later=st.integers(0, 5))
def test_a_ledger_map_reads_as_the_dict_of_every_call(seed, calls, later):
    rng = random.Random(seed)
    plain = {f"c{n}": _entry(f"c{n}", rng.choice(["succeeded", "started", "failed"]), n // 4) for n in range(calls)}
    packed = [n for n, e in enumerate(plain.values()) if e.status != "started" and rng.random() < 0.8]
    rows = [Row(n, list(plain.values())[n], n % 3, 100 + n, n // 4) for n in packed]
    # packed in two writes, as a writer appends what finished since
    half = len(rows) // 2
    settled = pack(rows[half:], pack(rows[:half]))  # (frames of CHUNK entries: a partial last one reframed)
    settled.check()
    names = list(plain)
    changed = {names[n]: plain[names[n]] for n in range(calls) if n not in packed}
    mapped = LedgerMap(settled, changed, {names[n]: n for n in range(calls) if n not in packed})
    assert len(mapped) == len(plain) and bool(mapped) == bool(plain)
    assert list(mapped) == list(plain) and list(mapped.items()) == list(plain.items())
    assert mapped == plain and dict(mapped) == plain and {**mapped} == plain
    for call_id in [*plain, "nope"]:
        assert (call_id in mapped) == (call_id in plain)
        assert mapped.get(call_id) == plain.get(call_id)
    counts = mapped.counts({}, "attempts")
    assert dict(counts) == {names[r.ordinal]: r.attempts for r in rows if r.attempts}
    assert dict(mapped.counts({}, "seqs")) == {names[r.ordinal]: r.seq for r in rows}
    # later calls (and a packed one changed again), on a copy: the original stays as it was
    copied = mapped.copy()
    for n in range(later):
        copied[f"new{n}"] = plain[f"new{n}"] = _entry(f"new{n}", "planned", 99)
    if packed:
        name = names[packed[-1]]
        copied[name] = plain[name] = _entry(name, "failed", 2)
    assert list(copied.items()) == list(plain.items()) and len(copied) == len(plain)
    again = mapped.copy()
    again.update({"u": _entry("u")})
    assert again.setdefault("u", None).call_id == "u" and len(again) == calls + 1 and "u" in again
    assert len(mapped) == calls
    first = rng.randint(0, 9)
    assert sorted(call_id for _, call_id in mapped.from_step(first)) == sorted(
        names[r.ordinal] for r in rows if r.step >= first
    )


def test_a_digest_collision_is_told_apart_by_the_call_id(monkeypatch):
    monkeypatch.setattr(ledger_map, "digest", lambda call_id: 7)  # every call id the same digest
    settled = pack([Row(n, _entry(f"c{n}"), 1, n, 1) for n in range(5)])
    mapped = LedgerMap(settled, {}, {})
    assert [mapped[f"c{n}"].call_id for n in range(5)] == [f"c{n}" for n in range(5)]
    assert "c9" not in mapped and mapped.get("c9") is None


def test_packed_entries_span_frames_and_a_partial_last_frame_is_reframed(monkeypatch):
    monkeypatch.setattr(ledger_map, "CHUNK", 4)
    rows = [Row(n, _entry(f"c{n}"), 1, n, n) for n in range(11)]
    settled = pack(rows[7:], pack(rows[5:7], pack(rows[:5])))  # 5 (a partial frame), then 2, then 4 more
    settled.check()
    mapped = LedgerMap(settled, {}, {})
    assert [entry.call_id for entry in mapped.values()] == [f"c{n}" for n in range(11)]
    assert mapped["c10"].call_id == "c10" and mapped["c3"].call_id == "c3"
    damaged = msgspec.structs.replace(settled, blob=settled.blob[:-3] + b"xyz")
    with pytest.raises(CorruptRecordError):
        LedgerMap(damaged, {}, {})["c10"]


def test_a_packed_entry_leaves_out_only_what_its_fields_give_back():
    """The input hash and the idempotency key are left out where the input and the ids give them; any other value
    (a redacted input's hash, a key of the caller's, a value that looks like the mark) comes back as it was."""
    from safepoint.core.hashing import idempotency_key, input_hash

    plain = _entry("c1")
    derived = msgspec.structs.replace(
        plain, run_id="r", input_hash=input_hash(plain.input), idempotency_key=idempotency_key("r", "c1")
    )
    odd = [
        derived,
        msgspec.structs.replace(derived, input={"n": "[REDACTED:secret]"}),  # the hash of what was said, not kept
        msgspec.structs.replace(derived, idempotency_key="caller-key"),
        msgspec.structs.replace(derived, input_hash="=", idempotency_key="=="),
        msgspec.structs.replace(derived, input_hash="=sha256:x", idempotency_key=""),
        msgspec.structs.replace(derived, run_id="other"),  # the key of another run: not this entry's to derive
    ]
    entries = [msgspec.structs.replace(e, call_id=f"c{n + 10}") if n else e for n, e in enumerate(odd)]
    settled = pack([Row(n, e, 1, n, 1) for n, e in enumerate(entries)])
    mapped = LedgerMap(settled, {}, {})
    assert [mapped[e.call_id] for e in entries] == entries
    raw = ledger_map._decompressor.decompress(pack([Row(0, derived, 1, 0, 1)]).blob)
    assert derived.input_hash.encode() not in raw and derived.idempotency_key.encode() not in raw  # left out
    assert b"caller-key" in ledger_map._decompressor.decompress(settled.blob)


def test_an_index_pointing_outside_its_entries_is_reported_where_it_is_read():
    """Positions are not checked at each open (a pass over every call); one outside the entries is a corrupt record
    when it is read, never another call's entry."""
    entries = [_entry(f"c{n}") for n in range(70)]
    settled = pack([Row(n, e, 1, n, 1) for n, e in enumerate(entries)])
    order = memoryview(settled.order).cast("I").tolist()
    settled.check()
    broken = msgspec.structs.replace(settled, order=array.array("I", [70_000 + p for p in order]).tobytes())
    broken.check()  # the sizes fit
    with pytest.raises(CorruptRecordError):
        LedgerMap(broken, {}, {}).get("c5")
