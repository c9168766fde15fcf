"""``read_log_after``: a run's log read from a known position on (what a reader holding the log's prefix reads),
on both stores and encrypted. It gives exactly the records and problems the whole read gives past that point, and
refuses (None: the caller reads the whole log) when the record at the position is no longer the one named: the
log cut back, the record rewritten."""

from __future__ import annotations

import os

import pytest

import safepoint
from safepoint.engine.tools import tool
from safepoint.store.log_after import START, LogPosition
from safepoint.store.sealed import unwrap

from .store_runs import KINDS, open_kind

KEY = bytes(range(32))


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


@pytest.fixture(params=KINDS)
def opened(request, tmp_path, workspace):
    tm = open_kind(request, tmp_path, workspace)
    yield tm
    tm.close()


def _calls(run, first, count):
    for n in range(first, first + count):
        if n % 3 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")


def _after(store, run_id, seq):
    whole = store.read_log(run_id)
    return [r for r in whole.records if r.seq > seq], whole


def test_the_read_after_a_position_is_the_whole_read_past_it(opened):
    store = opened.store
    with opened.start("t", tools=[noop], run_id="r") as run:
        _calls(run, 0, 7)
        middle = store.log_position("r")
        _calls(run, 7, 9)
        end = store.log_position("r")
    assert middle is not None and end is not None and 0 < middle.seq < end.seq
    for position in (middle, end):
        read = store.read_log_after("r", position)
        expected, _ = _after(store, "r", position.seq)
        assert read is not None and not read.problems
        assert read.records == expected
    assert store.read_log_after("r", START) == store.read_log("r")
    last = store.read_log_after("r", store.log_position("r"))
    assert last is not None and last.records == []


def test_a_position_whose_record_is_not_the_one_named_is_refused(opened):
    store = opened.store
    with opened.start("t", tools=[noop], run_id="r") as run:
        _calls(run, 0, 6)
        position = store.log_position("r")
        _calls(run, 6, 3)
    assert position is not None
    wrong = [
        LogPosition(position.seq, position.offset, "00000000"),  # another record's checksum
        LogPosition(position.seq + 1, position.offset, position.check),  # another seq
    ]
    if opened.store.url.startswith(("file", "/")) or unwrap(store)[0].local_dir():
        wrong.append(LogPosition(position.seq, position.offset + 1, position.check))  # not where a line ends
    for after in wrong:
        assert store.read_log_after("r", after) is None, after


def test_a_log_cut_back_before_the_position_is_refused(tmp_path, workspace):
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        with tm.start("t", tools=[noop], run_id="r") as run:
            _calls(run, 0, 6)
            position = tm.store.log_position("r")
            _calls(run, 6, 3)
        assert position is not None
        path = os.path.join(tm.store.run_dir("r"), "ledger.jsonl")
        os.truncate(path, position.offset - 5)  # the record at the position is torn away
        assert tm.store.read_log_after("r", position) is None
    finally:
        tm.close()


def test_damage_and_a_torn_tail_past_the_position_are_reported_as_the_whole_read_does(tmp_path, workspace):
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        with tm.start("t", tools=[noop], run_id="r") as run:
            _calls(run, 0, 6)
            position = tm.store.log_position("r")
            _calls(run, 6, 6)
        assert position is not None
        path = os.path.join(tm.store.run_dir("r"), "ledger.jsonl")
        with open(path, "r+b") as handle:
            data = handle.read()
            cut = data.index(b"\n", position.offset + 10) + 20  # a byte inside the second record after it
            handle.seek(cut)
            handle.write(b"X" if data[cut : cut + 1] != b"X" else b"Y")
            handle.seek(0, os.SEEK_END)
            handle.write(b'0badc0de {"kind":"torn')  # a record whose writer died half-way
        read = tm.store.read_log_after("r", position)
        expected, whole = _after(tm.store, "r", position.seq)
        assert read is not None
        assert read.records == expected
        assert read.problems == [p for p in whole.problems if p.position >= position.offset]
        assert {p.kind for p in read.problems} >= {"corrupt", "torn"}
    finally:
        tm.close()
