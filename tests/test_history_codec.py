"""The history compressed (issue 10 §7): message text and tool calls zstd-compressed against dictionaries trained on
the run's own messages, after redaction; old logs stay readable; one message decodes with its dictionary alone; a
refused group takes its dictionary back; a damaged dictionary is reported, never loaded."""

from __future__ import annotations

import base64
import inspect
import json

import msgspec
import pytest

import safepoint
from safepoint.core import history_codec
from safepoint.core.history_codec import HistoryDecoder
from safepoint.core.run_view import build_view
from safepoint.engine.log_writer import LogWriter
from safepoint.engine.session import load_view
from safepoint.errors import CorruptRecordError, DiskFullError
from safepoint.records import Claim, LogRead, LogRecord, Message, RunInfo, ToolCall
from safepoint.standins.scenario import parse_scenario
from tests.store_text import every_store_byte, expanded_messages, message_body

SECRET = "sk-ant-api03-" + "Hh1Ii2Jj3Kk4Ll5Mm6Nn7" * 2  # the model writes it, in many turns


def varied_texts(count: int, size: int = 1000) -> list[str]:
    """About ``size`` characters each of real prose and code (the standard library's docs and sources), never the
    same slice twice: what a model writes varies, and a repeated string would flatter any compressor."""
    import argparse
    import difflib
    import email.message
    import json as json_module
    import pydoc_data.topics

    prose = "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    code = "".join(inspect.getsource(module) for module in (argparse, difflib, email.message, json_module))
    texts = []
    for index in range(count):
        source, at = (code, (index // 3) * size) if index % 3 == 0 else (prose, (index - index // 3 - 1) * size)
        texts.append(source[at % (len(source) - size) :][:size])
    return texts


def play(
    workspace, texts: list[str], run_id: str = "r", url: str | None = None, key: bytes | None = None
) -> safepoint.Safepoint:
    turns = [{"text": text, "tool_calls": [{"tool": "list_files", "args": {"path": "."}}]} for text in texts]
    script = parse_scenario(json.dumps({"task": "talk", "turns": [*turns, {"text": "done"}]}).encode())
    tm = safepoint.open(url, workspace=str(workspace), key=key)
    run = tm.start(script.task, run_id=run_id, model=script.model)
    with run:
        assert tm.run_agent(run, safepoint.ScriptedProvider(script)) == "completed"
    return tm


def log_bytes(workspace, run_id: str = "r") -> bytes:
    return (workspace / ".agent-runtime" / "runs" / run_id / "ledger.jsonl").read_bytes()


def kinds(data: bytes) -> list[tuple[str, dict]]:
    records = (json.loads(line[9:]) for line in data.splitlines())
    return [(r["kind"], message_body(r["body"]) if r["kind"] == "message" else r["body"]) for r in records]


def test_a_long_run_keeps_its_history_below_the_size_of_its_text_and_reads_it_back_exactly(workspace):
    texts = varied_texts(300)  # 600 messages: dictionaries trained at 64 and 256
    tm = play(workspace, texts)
    view = load_view(tm.store, "r")
    said = [m.content for m in view.history if m.role == "assistant"]
    assert said == [*texts, "done"]
    assert all(
        m.tool_calls == (ToolCall(call_id=m.tool_calls[0].call_id, tool="list_files", args={"path": "."}),)
        for m in view.history
        if m.role == "assistant" and m.content != "done"
    )
    data = log_bytes(workspace)
    records = kinds(data)
    dictionaries = [body for kind, body in records if kind == "message_dict"]
    assert len(dictionaries) >= 2
    packed = [body for kind, body in records if kind == "message" and "z" in body]
    assert len(packed) >= 300 and {body.get("d", 0) for body in packed} - {0}
    raw = sum(len(text.encode()) for text in texts)
    message_bytes = sum(len(line) + 1 for line in data.splitlines() if b'"kind":"message' in line)
    assert message_bytes < 0.9 * raw, (message_bytes, raw)  # below the text itself, framing and dictionaries included
    assert [m["content"] for m in expanded_messages(data) if m["role"] == "assistant"] == [*texts, "done"]
    tm.close()


@pytest.mark.parametrize("where", ["postgres", "sealed"])
def test_the_compressed_history_reads_back_from_postgresql_and_an_encrypted_store(workspace, where, request):
    texts = varied_texts(80)  # 160 messages: one dictionary
    url = request.getfixturevalue("fresh_url") if where == "postgres" else None
    tm = play(workspace, texts, url=url, key=bytes(range(32)) if where == "sealed" else None)
    view = load_view(tm.store, "r")
    assert [m.content for m in view.history if m.role == "assistant"] == [*texts, "done"] and not view.problems
    assert any(record.kind == "message_dict" for record in tm.store.read_log("r").records)
    tm.close()


def test_redaction_happens_before_compression_and_a_grep_of_the_store_sees_through_it(workspace, monkeypatch):
    texts = [f"{text}\nthe key is {SECRET} for now" for text in varied_texts(100)]
    tm = play(workspace, texts)
    stored = every_store_byte(workspace / ".agent-runtime")
    assert SECRET.encode() not in stored, "the secret reached the store (or a dictionary trained on it)"
    assert stored.count(b"[REDACTED:") >= 100  # seen in the expanded text of the compressed messages
    history = [m.content for m in load_view(tm.store, "r").history if m.role == "assistant"]
    assert all(SECRET not in text and "[REDACTED:" in text for text in history[:-1])
    tm.close()


def test_the_grep_would_find_what_compression_hid(workspace):
    """The check above can fail: a phrase no pattern redacts, written in many messages, is invisible to a plain grep
    of the store (compressed) and found by the expanded one."""
    phrase = "PLANTED-PHRASE-" + "7f3a9c"
    play(workspace, [f"{text} {phrase}" for text in varied_texts(80)]).close()
    root = workspace / ".agent-runtime"
    log = log_bytes(workspace)
    assert log.count(phrase.encode()) < 10  # most are compressed: a plain grep is blind to them
    assert every_store_byte(root).count(phrase.encode()) >= 80


def _record(body: msgspec.Struct, seq: int) -> LogRecord:
    kind = "message" if isinstance(body, Message) else "message_dict"
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode(body)), seq=seq, gen=1)


INFO = RunInfo(run_id="r", task="t", model="m", created_at="2026-01-01T00:00:00+00:00", workspace="/w")


def test_a_log_written_before_the_codec_reads_as_it_did():
    old = [
        Message(seq=0, role="user", content="do it"),
        Message(
            seq=1, role="assistant", content="x" * 500, tool_calls=(ToolCall(call_id="c1", tool="t", args={"a": 1}),)
        ),
        Message(seq=2, role="tool", content="result " * 50, tool_call_id="c1", name="t"),
    ]
    view = build_view(INFO, LogRead(records=[_record(m, i + 1) for i, m in enumerate(old)], problems=[]))
    assert view.history == old and not view.problems


def _encoded(texts: list[str]) -> list[LogRecord]:
    """Records as a log writer stages them (dictionaries ahead of the messages compressed against them)."""
    encoder = history_codec.HistoryEncoder()
    records: list[LogRecord] = []

    def stage(dictionary: msgspec.Struct) -> int:
        records.append(_record(dictionary, len(records) + 1))
        return len(records)

    for index, text in enumerate(texts):
        plain = msgspec.to_builtins(Message(seq=index, role="assistant", content=text))
        body = encoder.encode(plain, stage)
        records.append(LogRecord(kind="message", body=msgspec.Raw(body), seq=len(records) + 1, gen=1))
    return records


def test_one_message_decodes_with_its_own_dictionary_alone():
    texts = varied_texts(300)
    records = _encoded(texts)
    by_seq = {r.seq: r for r in records}
    last = records[-1]
    assert message_body(json.loads(bytes(last.body)))["d"]  # compressed against a dictionary
    fetched: list[int] = []

    def fetch(seq: int) -> bytes:
        fetched.append(seq)
        return bytes(by_seq[seq].body)

    message = HistoryDecoder(fetch=fetch).decode(bytes(last.body))
    assert message.content == texts[-1]
    assert len(fetched) == 1 and by_seq[fetched[0]].kind == "message_dict"
    with pytest.raises(CorruptRecordError, match="dictionary"):
        HistoryDecoder().decode(bytes(last.body))  # without its dictionary: said, never guessed


class RefusingStore:
    """The real store, refusing the append whose group holds ``refuse_kind`` once (a full disk)."""

    def __init__(self, store, refuse_kind: str) -> None:
        self.store = store
        self.refuse_kind = refuse_kind

    def append(self, claim: Claim, records: list[LogRecord], **options: object) -> None:
        if self.refuse_kind and any(r.kind == self.refuse_kind for r in records):
            self.refuse_kind = ""
            raise DiskFullError("no space left on the store's disk")
        self.store.append(claim, records, **options)

    def __getattr__(self, name: str):
        return getattr(self.store, name)


def test_a_refused_group_takes_its_dictionary_back(workspace):
    tm = safepoint.open(workspace=str(workspace))
    tm.start("t", run_id="r").close()
    claim = tm.store.claim("r", "holder")
    writer = LogWriter(RefusingStore(tm.store, "message_dict"), claim, load_view(tm.store, "r").last_seq)  # type: ignore[arg-type]
    texts = varied_texts(100)
    for index, text in enumerate(texts):
        writer.add(Message(seq=index + 1, role="assistant", content=text))
        try:
            writer.commit()
        except DiskFullError:
            writer.add(Message(seq=index + 1, role="assistant", content=text))  # the caller tries again
            writer.commit()
    view = load_view(tm.store, "r")
    assert not view.problems
    assert [m.content for m in view.history[1:]] == texts
    assert any(kind == "message_dict" for kind, _ in kinds(log_bytes(workspace)))
    tm.close()


def test_a_damaged_dictionary_is_reported_and_its_messages_are_not_loaded():
    records = _encoded(varied_texts(100))
    at = next(i for i, r in enumerate(records) if r.kind == "message_dict")
    body = msgspec.json.decode(bytes(records[at].body))
    data = bytearray(base64.b64decode(body["data"]))
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)  # its second half zeroed: still base64, not the frame
    body["data"] = base64.b64encode(bytes(data)).decode()
    records[at] = LogRecord(
        kind="message_dict", body=msgspec.Raw(msgspec.json.encode(body)), seq=records[at].seq, gen=1
    )
    view = build_view(INFO, LogRead(records=records, problems=[]))
    details = " ".join(p.detail for p in view.problems)
    assert "dictionary" in details and view.problems
    assert len(view.history) < 100  # the history stops at the first message it cannot read: a hole, never a guess
