"""Records that carry what changed (issue 10 §5, §7): a ledger state, a checkpoint and a message are written as rows
(their values without their names, times counted from the run's creation, what their place says left out) and read
back exactly as they were made; a store written before rows (``tests/data/store_v0``: a run SIGKILLed while a call
ran, written by the code before this change) opens, reads whole, resumes and goes on in rows; a step of reads only
leaves its trace to the batch, a step that changes something writes it at its end."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import msgspec
import pytest

import safepoint
from safepoint.core import history_codec, record_rows
from safepoint.core.hashing import idempotency_key, input_hash
from safepoint.core.record_rows import Place
from safepoint.engine import log_writer
from safepoint.engine.log_writer import LogWriter
from safepoint.engine.session import load_view
from safepoint.errors import CorruptRecordError
from safepoint.records import Checkpoint, LedgerChange, ToolLedgerEntry
from tests.conftest import cli_env, safepoint_in_process
from tests.store_text import trace_lines

FIXTURE = Path(__file__).parent / "data" / "store_v0"
CREATED = "2026-12-01T11:59:53.203855+00:00"
PLACE = Place("r", 40, "scripted-v1", record_rows.micros(CREATED))
T1, T2 = "2026-12-01T12:00:01.000001+00:00", "2026-12-02T00:00:00.000000+00:00"


def _round_trip(record: msgspec.Struct, place: Place = PLACE) -> msgspec.Struct:
    kind = {ToolLedgerEntry: "ledger", LedgerChange: "ledger_change", Checkpoint: "checkpoint"}[type(record)]
    row = record_rows.encode(kind, msgspec.to_builtins(record), place)
    assert row is not None and row.startswith(b"[1,") and record_rows.is_row(kind, row)
    return record_rows.decode(kind, row, place)


def _entry(**changes: object) -> ToolLedgerEntry:
    entry = ToolLedgerEntry(
        call_id="call_7",
        step_id="step_3",
        tool_name="write_file",
        input_hash=input_hash({"path": "a.txt", "content": "x"}),
        status="planned",
        risk_level="medium",
        idempotency="conditional",
        replay_policy="auto",
        run_id="r",
        input={"path": "a.txt", "content": "x"},
        idempotency_key=idempotency_key("r", "call_7"),
        planned_at=T1,
    )
    return msgspec.structs.replace(entry, **changes)


EVERY_FIELD = _entry(
    status="failed",
    side_effects=("fs", "net"),
    started_at=T1,
    finished_at=T2,
    result_ref="artifact:out",
    error="boom",
    decision="skip",
    decision_reason="by hand",
    compensates="call_1",
    result_encoding="json",
)


@pytest.mark.parametrize(
    "record",
    [
        _entry(),
        EVERY_FIELD,
        # What the place would say, said otherwise: each kept as written (a row never guesses it back).
        _entry(run_id=""),
        _entry(run_id="other"),
        _entry(idempotency_key=""),
        _entry(idempotency_key="k-given-by-the-tool"),
        _entry(input={"token": "[REDACTED:api_key]"}),  # redacted input: the hash is of the real one
        _entry(input={}, input_hash=input_hash({})),
        _entry(planned_at="2026-12-01T13:00:00.000001+01:00"),  # not UTC: kept as its string
        _entry(planned_at="yesterday"),
        _entry(planned_at="2026-11-30T00:00:00.000000+00:00"),  # before the run was created: a negative count
        _entry(planned_at=None),
        LedgerChange(call_id="call_7", status="started", started_at=T1),
        LedgerChange(call_id="call_7", status="succeeded", finished_at=T2, result_ref="log:39", result_encoding="text"),
        LedgerChange(call_id="call_7", status="succeeded", finished_at=T2),  # no result: None, not "log:39"
        LedgerChange(call_id="call_7", status="failed", result_ref="log:12", error="x"),
        LedgerChange(call_id="call_7", status="uncertain", cleared=("result_ref", "error")),
        LedgerChange(
            call_id="call_7",
            status="succeeded",
            **{  # type: ignore[arg-type]  # every field a change may carry, each set (the entry's own values)
                name: getattr(EVERY_FIELD, name)
                for name in record_rows.FIELDS["ledger_change"][2:]
                if name not in ("cleared", "run_id")
            },
            run_id="r",
            cleared=("error",),
        ),
        Checkpoint(step=3, kind="tool_end", created_at=T1, history_len=7, model="scripted-v1", next_turn=3),
        Checkpoint(
            checkpoint_id="ckpt_000009",
            run_id="other",
            step=3,
            kind="tool_start",
            created_at=T2,
            history_len=7,
            ledger_seq=8,
            model="another-model",
            model_config={"temperature": 0.5, "tags": ["a"]},
            pending_tool_calls=("call_7", "call_8"),
            next_turn=3,
            patches_len=2,
            git_head="0123abcd",
        ),
        Checkpoint(step=0, kind="before_step", created_at=T1, history_len=0, model=""),
    ],
    ids=lambda r: type(r).__name__,
)
def test_a_row_reads_back_exactly_the_record_it_was_made_from(record):
    assert _round_trip(record) == record
    # Without the run's header (it could not be read), the row says the times and the model in full.
    bare = Place("r", 40)
    assert _round_trip(record, bare) == record


def test_a_row_leaves_out_names_defaults_and_what_its_place_says():
    row = record_rows.encode("ledger", msgspec.to_builtins(_entry()), PLACE)
    assert row is not None
    text = row.decode()
    assert text.startswith('[1,"call_7",0,"write_file","step_3",1,1,0,{"path":"a.txt","content":"x"}'), text
    for said_by_the_place in ("sha256:", "safepoint-", '"r"'):  # input hash, idempotency key, run id
        assert said_by_the_place not in text
    for name in ("planned", "medium", "conditional", "auto", "planned_at", "2026"):  # numbers, not names or dates
        assert name not in text
    started = msgspec.to_builtins(LedgerChange(call_id="c", status="started"))
    assert record_rows.encode("ledger_change", started, PLACE) == b'[1,"c",2]'  # started


@pytest.mark.parametrize(
    ("kind", "raw", "place"),
    [
        ("ledger", b'[2,"call_1","planned"]', PLACE),  # another version
        ("ledger", b"[1" + b",null" * 30 + b"]", PLACE),  # more values than fields
        ("ledger", b"[1,null,null]", PLACE),  # no call id to derive from
        ("checkpoint", b'[1,1,"tool_end",5,1]', Place("r", 3)),  # a count of time without the header's start
        ("checkpoint", b'[1,1,"tool_end",99999999999999999999,1,"m"]', PLACE),  # past any date
        ("checkpoint", b'[1,"one","tool_end",5,1,"m"]', PLACE),  # a value of the wrong type
        ("event", b'[1,"running"]', PLACE),  # not a kind with rows
        ("checkpoint", b"[1,1,9,5,1]", PLACE),  # a kind's number that names no kind
        ("ledger_change", b'[1,"c",-1]', PLACE),  # nor a status's
        ("ledger_change", b'[1,"c","exploded"]', PLACE),  # a status by a name the vocabulary lacks
    ],
)
def test_a_damaged_row_is_refused_never_guessed(kind, raw, place):
    with pytest.raises((CorruptRecordError, msgspec.DecodeError)):
        record_rows.decode(kind, raw, place)


def test_a_message_row_reads_back_and_an_object_still_reads():
    plain = {"seq": 4, "role": "tool", "content": "ok", "tool_call_id": "c", "name": "read_file"}
    row = history_codec._row(dict(plain))
    assert row == b'[4,3,"ok",[],"c","read_file"]'  # the role as its place in ROLES
    stored = history_codec.decode_stored(row)
    said = (stored.seq, stored.role, stored.content, stored.tool_call_id, stored.name)
    assert said == (4, "tool", "ok", "c", "read_file")
    assert history_codec.decode_stored(json.dumps(plain).encode()) == stored
    for damaged in (b'[4,9,"ok"]', b'[4,"robot","ok"]', b'[4,"tool",5]'):  # no such role; text of the wrong type
        with pytest.raises(msgspec.DecodeError):
            history_codec.decode_stored(damaged)


# A store written before rows ------------------------------------------------------------------------------------------
def _reframed(path: Path, old: bytes, new: bytes) -> None:
    payload = path.read_bytes().rstrip(b"\n")[9:].replace(old, new)
    path.write_bytes(b"%08x %s\n" % (zlib.crc32(payload), payload))


def _old_store(tmp_path: Path) -> Path:
    """The fixture's run ``old`` in a fresh workspace: a scripted run of list_files, write_file, read_file, killed
    while read_file ran, every record written whole (as every store before rows)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("release on friday\nopen: docs\n")
    shutil.copytree(FIXTURE, ws / ".agent-runtime")
    (ws / ".agent-runtime" / ".gitignore").write_text("*\n")
    _reframed(ws / ".agent-runtime" / "runs" / "old" / "run.json", b'"WORKSPACE"', json.dumps(str(ws)).encode())
    return ws


def _bodies(ws: Path) -> list[tuple[str, object]]:
    log = (ws / ".agent-runtime" / "runs" / "old" / "ledger.jsonl").read_bytes()
    return [(r["kind"], r["body"]) for r in (json.loads(line[9:]) for line in log.splitlines())]


def test_a_store_written_before_rows_opens_resumes_and_goes_on_in_rows(tmp_path):
    ws = _old_store(tmp_path)
    before = _bodies(ws)
    assert all(isinstance(body, dict) for _, body in before)  # the fixture is the old form, every record of it
    tm = safepoint.open(workspace=str(ws))
    view = load_view(tm.store, "old")
    ledger = view.ledger
    assert [(c, e.tool_name, e.status) for c, e in ledger.items()] == [
        ("call_1", "list_files", "succeeded"),
        ("call_2", "write_file", "succeeded"),
        ("call_3", "read_file", "started"),
    ]
    assert ledger["call_2"].input == {"path": "notes.txt", "content": "release on friday\nopen: docs\n"}
    assert ledger["call_2"].idempotency_key == idempotency_key("old", "call_2")
    assert [at.checkpoint.kind for at in view.checkpoints] == [
        *("before_step", "tool_start", "tool_end", "after_step"),
        *("tool_start", "tool_end", "after_step", "tool_start"),
    ]
    assert all(at.complete and at.checkpoint.model == "scripted-v1" for at in view.checkpoints)
    assert view.history[1].content.startswith("I will look at the files first")
    tm.close()

    resumed = safepoint_in_process("resume", "old", "--workspace", ws, env=cli_env())
    assert resumed.returncode == 0, resumed.stderr
    after = _bodies(ws)
    assert after[: len(before)] == before  # the old records stay as they were
    added = {kind for kind, body in after[len(before) :] if isinstance(body, list)}
    assert {"ledger_change", "checkpoint", "message"} <= added  # and the run goes on in rows
    tm = safepoint.open(workspace=str(ws))
    view = load_view(tm.store, "old")
    assert view.status == "completed" and view.ledger["call_3"].status == "succeeded"
    assert view.history[-1].content.startswith("The notes are tidy")
    assert all(at.complete for at in view.checkpoints)
    listed = safepoint_in_process("checkpoints", "old", "--workspace", ws, "--json", env=cli_env())
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == len(view.checkpoints)
    tm.close()


# The trace, batched --------------------------------------------------------------------------------------------------
def _trace_count(ws: Path, run_id: str) -> int:
    path = ws / ".agent-runtime" / "runs" / run_id / "trace.jsonl"
    return len([line for line in trace_lines(path.read_bytes()) if line]) if path.exists() else 0


def test_a_step_of_reads_leaves_its_trace_to_the_batch_and_a_step_that_writes_says_it_at_its_end(
    workspace, monkeypatch
):
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    with run:
        session = run.session
        log: LogWriter = session.log
        log.flush_trace()
        written = _trace_count(workspace, "r")
        log.trace("run_running", detail="a step of reads")
        log.add(_entry(call_id="c1", idempotency="idempotent", run_id="r", idempotency_key=idempotency_key("r", "c1")))
        log.commit()
        log.end_of_step()
        assert _trace_count(workspace, "r") == written  # diagnostics of reads wait for the batch
        log.add(_entry(call_id="c2", run_id="r", idempotency_key=idempotency_key("r", "c2")))  # conditional: a write
        log.commit()
        log.end_of_step()
        assert _trace_count(workspace, "r") == written + 1  # said at the step's end, the waiting line with it
        log.trace("run_running", detail="another step of reads")
        monkeypatch.setattr(log_writer, "TRACE_AGE", 0.0)  # ... that ends once the batch is old enough
        log.end_of_step()
        assert _trace_count(workspace, "r") == written + 2
    tm.close()


# PostgreSQL ----------------------------------------------------------------------------------------------------------
def test_a_run_on_postgresql_keeps_rows_in_its_rows_bodies_and_reads_them_back(fresh_url, workspace):
    """The row is the record's body, so a PostgreSQL row carries it as the file store's line does: one agent run,
    its stored bodies are rows, and the run reads back whole (ledger, checkpoints with their ids and model,
    history)."""
    from safepoint.providers.base import ModelTurn
    from safepoint.records import ToolCall

    class Talker:
        model = "talker"

        def complete(self, context: object, turn: int, stream: object = None) -> ModelTurn:
            if turn >= 2:
                return ModelTurn(text="done", tool_calls=[])
            call = ToolCall(call_id=f"call_{turn + 1}", tool="list_files", args={"path": "."})
            return ModelTurn(text=f"step {turn}: " + "prose of the model " * 20, tool_calls=[call])

    tm = safepoint.open(fresh_url, workspace=str(workspace))
    run = tm.start("t", run_id="r")
    with run:
        assert tm.run_agent(run, Talker()) == "completed"  # type: ignore[arg-type]  # a provider by shape
    read = tm.store.read_log("r")
    rows = {r.kind for r in read.records if bytes(r.body).startswith(b"[")}
    assert {"ledger", "ledger_change", "checkpoint", "message"} <= rows
    view = load_view(tm.store, "r")
    assert [(e.call_id, e.status, e.run_id) for e in view.ledger.values()] == [
        ("call_1", "succeeded", "r"),
        ("call_2", "succeeded", "r"),
    ]
    assert view.ledger["call_1"].idempotency_key == idempotency_key("r", "call_1")
    assert view.ledger["call_1"].input_hash == input_hash({"path": "."})
    assert all(at.checkpoint.checkpoint_id == f"ckpt_{at.seq:06d}" for at in view.checkpoints)
    assert view.history[1].content.startswith("step 0: prose") and view.history[-1].content == "done"
    tm.close()
