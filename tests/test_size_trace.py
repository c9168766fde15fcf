"""The trace is stored small (issue 10 §7): a batch of events is one compressed line, on the file store, on
PostgreSQL and under encryption, and reads back event by event as written; a trace written before (one line an
event) still reads; a damaged batch is skipped like a damaged line, never the lines around it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import safepoint
from safepoint.providers.base import ModelTurn
from safepoint.records import ToolCall
from safepoint.store import trace_batches
from safepoint.store.framing import frame

KEY = "0" * 64


class Talker:
    model = "talker"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def complete(self, context: object, turn: int, stream: object = None) -> ModelTurn:
        if turn >= self.steps:
            return ModelTurn(text="done", tool_calls=[])
        return ModelTurn(
            text=f"step {turn}",
            tool_calls=[ToolCall(call_id=f"call_{turn + 1}", tool="list_files", args={"path": "."})],
        )


def _run(tm: safepoint.Safepoint, steps: int = 20) -> None:
    run = tm.start("talk", run_id="r")
    with run:
        assert tm.run_agent(run, Talker(steps)) == "completed"  # type: ignore[arg-type]  # a provider by shape


@pytest.fixture(params=["file", "encrypted", "postgres"])
def opened(request, workspace):
    if request.param == "postgres":
        tm = safepoint.open(request.getfixturevalue("fresh_url"), workspace=str(workspace))
    else:
        tm = safepoint.open(workspace=str(workspace), key=KEY if request.param == "encrypted" else None)
    yield tm
    tm.close()


def test_every_event_reads_back_in_order_from_packed_batches(opened):
    _run(opened)
    events = opened.trace("r")
    names = [e.event for e in events]
    assert names[:2] == ["run_claimed", "run_running"]
    assert names.count("tool_started") == names.count("tool_finished") == 20
    assert [e.data["call_id"] for e in events if e.event == "tool_started"] == [f"call_{i}" for i in range(1, 21)]
    assert "run_completed" in names and names[-1] == "run_released"
    stamps = [e.at for e in events]
    assert stamps == sorted(stamps)


def test_the_trace_on_disk_is_a_fraction_of_its_events(workspace):
    """Fails before batches were packed: the file held one framed line an event."""
    tm = safepoint.open(workspace=str(workspace))
    _run(tm, steps=40)
    lines = list(tm.store.read_trace("r"))
    tm.close()
    plain = sum(len(frame(line)) for line in lines)
    stored = os.path.getsize(Path(workspace) / ".agent-runtime" / "runs" / "r" / "trace.jsonl")
    assert len(lines) > 200
    assert stored * 3 < plain, (stored, plain)


def test_a_trace_written_one_line_an_event_still_reads(workspace):
    tm = safepoint.open(workspace=str(workspace))
    _run(tm, steps=2)
    path = Path(workspace) / ".agent-runtime" / "runs" / "r" / "trace.jsonl"
    packed = list(tm.store.read_trace("r"))
    old = [
        b'{"event":"run_running","at":"2020-01-01T00:00:00+00:00","run_id":"r","generation":1,"data":{"detail":"x"}}'
    ]
    path.write_bytes(b"".join(frame(line) for line in old) + path.read_bytes())
    assert list(tm.store.read_trace("r")) == old + packed
    tm.close()


def test_a_damaged_batch_is_skipped_and_the_rest_reads(workspace):
    tm = safepoint.open(workspace=str(workspace))
    first = [b'{"n":%d}' % i for i in range(50)]
    second = [b'{"m":%d}' % i for i in range(50)]
    _run(tm, steps=1)
    path = Path(workspace) / ".agent-runtime" / "runs" / "r" / "trace.jsonl"
    path.write_bytes(b"")
    tm.store.trace("r", first)
    tm.store.trace("r", second)
    assert list(tm.store.read_trace("r")) == first + second
    data = bytearray(path.read_bytes())
    assert data.count(b"\n") == 2 and data.startswith(b"") and b"z1:" in data  # two batches, two lines
    data[20] ^= 1  # inside the first batch: its checksum no longer matches
    path.write_bytes(bytes(data))
    assert list(tm.store.read_trace("r")) == second
    tm.close()


def test_pack_keeps_lines_that_do_not_shrink_and_unpack_refuses_garbage():
    assert trace_batches.pack([]) == []
    assert trace_batches.pack([b"{}"]) == [b"{}"]  # one tiny line: packing would only grow it
    many = [b'{"event":"tool_finished","data":{"call_id":"call_%d"}}' % i for i in range(64)]
    (packed,) = trace_batches.pack(many)
    assert packed.startswith(trace_batches.MARKER) and b"\n" not in packed
    assert list(trace_batches.unpack(packed)) == many
    assert list(trace_batches.unpack(trace_batches.MARKER + b"not base64!")) == []
    assert list(trace_batches.unpack(trace_batches.MARKER + b"AAAA")) == []
