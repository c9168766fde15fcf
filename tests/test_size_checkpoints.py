"""Checkpoints cost what they say (issue 10 §5): a checkpoint that would restore exactly what the session's previous
one restores is not written again (a step of one call: three records, not four; a further call of the same step:
one, not two), and a checkpoint record leaves out what its place in the log says (its id, the run, the seq before
it). Every promise stays: each checkpoint the listing shows rolls back, ``step:N`` finds each step, a resume
continues, and a log written whole (before the compact form) reads as it did."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

import safepoint
from safepoint.core import checkpoint_codec, record_rows
from safepoint.engine.session import load_view
from safepoint.providers.base import ModelTurn
from safepoint.records import Checkpoint, ToolCall
from safepoint.report import checkpoint_for


class Writer:
    """Each turn writes a file; turn 1 makes two calls (the second in the first's step)."""

    model = "writer"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def complete(self, context: object, turn: int, stream: object = None) -> ModelTurn:
        if turn >= self.steps:
            return ModelTurn(text="done", tool_calls=[])
        calls = [ToolCall(call_id=f"c{turn}", tool="write_file", args={"path": f"f{turn}.txt", "content": f"{turn}\n"})]
        if turn == 1:
            calls.append(ToolCall(call_id="c1b", tool="list_files", args={"path": "."}))
        return ModelTurn(text=f"turn {turn}", tool_calls=calls)


def _run(workspace: Path, steps: int) -> safepoint.Safepoint:
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("write", run_id="r")
    with run:
        assert tm.run_agent(run, Writer(steps)) == "completed"  # type: ignore[arg-type]  # a provider by shape
    return tm


def _checkpoint_lines(workspace: Path) -> list[dict]:
    """The checkpoint records of run r, a row's values named (``core.record_rows``: since rows, a checkpoint's
    body is its values in ``FIELDS["checkpoint"]``'s order, trailing defaults left out)."""
    log = (workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl").read_bytes()
    records = [json.loads(line[9:]) for line in log.splitlines()]
    found = [r for r in records if r["kind"] == "checkpoint"]
    for r in found:
        assert isinstance(r["body"], list) and r["body"][0] == record_rows.VERSION, r
        named = zip(record_rows.FIELDS["checkpoint"], r["body"][1:], strict=False)
        r["body"] = {name: value for name, value in named if value is not None}
        r["body"]["kind"] = record_rows.CODES["kind"][r["body"]["kind"]]  # a kind is written as its number
    return found


def test_a_step_of_one_call_writes_three_checkpoint_records(workspace):
    """Fails before: four a step (before_step, tool_start, tool_end, after_step) and two a call."""
    tm = _run(workspace, steps=5)
    kinds = [r["body"]["kind"] for r in _checkpoint_lines(workspace)]
    # step 1 opens with its before_step; each later step's is the previous after_step (the same state)
    assert kinds[:4] == ["before_step", "tool_start", "tool_end", "after_step"]
    assert kinds.count("before_step") == 1
    assert kinds.count("after_step") == 6  # five steps of calls, and the answer's
    assert kinds.count("tool_end") == 6 and kinds.count("tool_start") == 5  # c1b's start is c1's end
    assert len(kinds) <= 3 * 6
    view = load_view(tm.store, "r")
    for step in range(0, 7):  # step:N still finds each step
        assert checkpoint_for(tm.store, "r", f"step:{step}")
    assert all(at.complete for at in view.checkpoints)
    tm.close()


def test_a_checkpoint_record_leaves_out_what_its_place_says_and_reads_back_whole(workspace):
    tm = _run(workspace, steps=2)
    lines = _checkpoint_lines(workspace)
    assert all(set(r["body"]).isdisjoint({"checkpoint_id", "run_id", "ledger_seq"}) for r in lines)
    view = load_view(tm.store, "r")
    for line, at in zip(lines, view.checkpoints, strict=True):
        assert at.checkpoint.checkpoint_id == f"ckpt_{line['seq']:06d}"
        assert at.checkpoint.run_id == "r" and at.checkpoint.ledger_seq == line["seq"] - 1
    tm.close()


def test_every_listed_checkpoint_rolls_back_to_its_files(workspace):
    tm = _run(workspace, steps=3)
    view = load_view(tm.store, "r")
    assert {p.name for p in Path(workspace).glob("f*.txt")} == {"f0.txt", "f1.txt", "f2.txt"}
    for at in reversed(view.checkpoints):  # latest first: each rollback undoes more
        tm.rollback_files("r", at.checkpoint.checkpoint_id)
        expected = {f"f{t}.txt" for t in range(3) if at.checkpoint.patches_len > t}
        assert {p.name for p in Path(workspace).glob("f*.txt")} == expected, at.checkpoint
    tm.close()


def test_a_checkpoint_written_whole_reads_as_it_was():
    whole = Checkpoint(
        checkpoint_id="ckpt_000007",
        run_id="r",
        step=1,
        kind="tool_end",
        created_at="2026-01-01T00:00:00+00:00",
        history_len=3,
        ledger_seq=6,
        model="m",
    )
    encoded = msgspec.json.encode(whole)
    decoded = msgspec.json.decode(encoded, type=Checkpoint)
    assert checkpoint_codec.expand(decoded, "r", 7) == whole
    compact = checkpoint_codec.compact(whole, "r", 7)
    assert b"checkpoint_id" not in msgspec.json.encode(compact)
    assert checkpoint_codec.expand(msgspec.json.decode(msgspec.json.encode(compact), type=Checkpoint), "r", 7) == whole
    odd = msgspec.structs.replace(whole, checkpoint_id="ckpt_000003", ledger_seq=2)  # not what its place says: kept
    assert checkpoint_codec.expand(checkpoint_codec.compact(odd, "r", 7), "r", 7) == odd
