"""Large tool inputs (and other large payloads) out of the log (issue 10 §2): a megabyte argument through every
tool kind and through the agent loop leaves a log of a few KB (measured on the store's own files); the value is a
blob of what the log would have held inline (redacted where the field is), read back exactly where it is needed
(a resume's model context, ``history``, a doubtful call's input, the input hash check); a value of the caller's
own that looks like a reference is given back as it was; logs written before (inline values) read as before; gc
keeps what an input or a message references as long as the run is kept."""

from __future__ import annotations

import json
import os
import random

import pytest

import safepoint
from safepoint.core import large_values as rule
from safepoint.core.hashing import input_hash
from safepoint.engine import large_values
from safepoint.engine.log_writer import redacted_arguments
from safepoint.lifecycle import gc
from safepoint.report import load_view
from safepoint.standins.scenario import parse_scenario
from safepoint.store.fsck import fsck

MB = 1_000_000
SMALL_LOG = 16_000  # a few KB: the run's records, never the value
SECRET = "sk-ant-api03-" + "Qq1Ww2Ee3Rr4Tt5Yy6Uu7" * 2


def big(seed: int, size: int = MB) -> str:
    rng = random.Random(seed)
    text = "".join(f"line {i} {rng.getrandbits(96):x} é\n" for i in range(size // 30))
    return text[:size]


@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def keep_note(ctx, text: str, tags: list) -> str:
    return f"kept {len(text)} characters"


@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def long_report(ctx, seed: int) -> str:
    return big(seed)


def log_bytes(tm, run_id: str) -> int:
    return os.path.getsize(os.path.join(tm.store.run_dir(run_id), "ledger.jsonl"))


def store_bytes(tm) -> bytes:
    found = b""
    for folder, _, names in os.walk(tm.store.root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                found += handle.read()
    return found


def read_back(tm, run_id: str, call_id: str) -> dict:
    view = load_view(tm.store, run_id)
    entry = view.ledger[call_id]
    args = large_values.resolve(entry.input, large_values.reader(tm.store, view))
    assert input_hash(args) == entry.input_hash  # the hash is of the real input, as before
    return args


def unified_new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


@pytest.fixture
def tm(tmp_path, workspace):
    opened = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    yield opened
    opened.close()


CASES = {
    "write_file of a new file": ("write_file", lambda: {"path": "new.txt", "content": big(1)}),
    "apply_patch": ("apply_patch", lambda: {"patch": unified_new_file("patched.txt", big(2))}),
    "a Python tool's argument": ("keep_note", lambda: {"text": big(3), "tags": ["a", big(4, 10_000)]}),
    "run_command": ("run_command", lambda: {"command": "true " + big(5, 100_000).replace("\n", " ")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_megabyte_argument_of_every_tool_kind_stays_out_of_the_log(case, tm, workspace):
    tool, make = CASES[case]
    args = make()
    with tm.start("t", run_id="r", tools=[keep_note]) as run:
        run.call(tool, args, call_id="c1")
    assert log_bytes(tm, "r") < SMALL_LOG  # it held the whole value: 1 MB and more
    assert read_back(tm, "r", "c1") == args
    assert fsck(tm.store, "r", repair=False).clean


def test_a_megabyte_result_of_a_python_tool_stays_out_of_the_log_and_is_taken_again_on_resume(tm):
    with tm.start("t", run_id="r", tools=[long_report]) as run:
        first = run.call("long_report", {"seed": 7}, call_id="c1")
    assert log_bytes(tm, "r") < SMALL_LOG
    with tm.resume("r", tools=[long_report]) as run:
        again = run.call("long_report", {"seed": 7}, call_id="c1")  # the recorded outcome, not a second run
    assert again == first == big(7)


class Crash(BaseException):
    """The process dies while the model thinks."""


class Scripted(safepoint.ScriptedProvider):
    def __init__(self, script, crash_at: int | None = None) -> None:
        super().__init__(script)
        self.crash_at = crash_at

    def complete(self, context, turn, stream=None):
        if turn == self.crash_at:
            self.crash_at = None
            raise Crash()
        return super().complete(context, turn, stream)


def agent_script(content: str):
    turns = [
        {"text": "writing", "tool_calls": [{"tool": "write_file", "args": {"path": "big.txt", "content": content}}]},
        {"text": "reading", "tool_calls": [{"tool": "long_report", "args": {"seed": 8}}]},
        {"text": "noting", "tool_calls": [{"tool": "keep_note", "args": {"text": content[::-1], "tags": []}}]},
        {"text": "done"},
    ]
    return parse_scenario(json.dumps({"task": "write a big file", "turns": turns}).encode())


def said(messages):
    return [(m.role, m.content, [(c.tool, c.args) for c in m.tool_calls]) for m in messages]


def test_the_agent_loop_keeps_large_arguments_and_results_out_and_a_resume_sends_them_whole(tm, workspace):
    content = big(6)
    played = agent_script(content)
    run = tm.start(played.task, run_id="r", model=played.model, tools=[long_report, keep_note])
    with pytest.raises(Crash), run:
        tm.run_agent(run, Scripted(played, crash_at=3))
    # three megabytes went through the conversation (two arguments, one result): the log holds references
    assert log_bytes(tm, "r") < 3 * SMALL_LOG
    assert (workspace / "big.txt").read_text() == content
    shown = tm.restored_history("r")  # `safepoint history`: what a resume restores, read back
    conversation = [row.message for row in shown.messages]
    provider = Scripted(played)
    run = tm.resume("r", tools=[long_report, keep_note])
    with run:
        assert tm.run_agent(run, provider) == "completed"
    sent = [m for m in provider.contexts[0].messages if m.name is None or m.role != "user"]
    calls = [c for m in sent for c in m.tool_calls]
    assert calls[0].args == {"path": "big.txt", "content": content}
    assert calls[2].args == {"text": content[::-1], "tags": []}
    assert any(m.role == "tool" and m.content == big(8) for m in sent)
    assert said(conversation) == said([m for m in sent if m.seq < len(conversation)])[: len(conversation)]
    assert (workspace / "big.txt").read_text() == content
    # The history the resume restored is the one the run had (read back on both sides): no rewind to it logged.
    rewinds = [r for r in tm.store.read_log("r").records if r.kind == "rewind"]
    assert rewinds == []
    # The library's history: as said, long texts and arguments included.
    current = tm.history("r").current
    assert next(c.args for m in current for c in m.tool_calls)["content"] == content
    assert any(m.role == "tool" and m.content == big(8) for m in current)


def test_a_long_final_answer_reads_back_whole(tm):
    answer = big(13, 20_000)
    played = parse_scenario(json.dumps({"task": "answer at length", "turns": [{"text": answer}]}).encode())
    run = tm.start(played.task, run_id="r", model=played.model)
    with run:
        assert tm.run_agent(run, Scripted(played)) == "completed"
    assert log_bytes(tm, "r") < SMALL_LOG
    assert [m.content for m in tm.history("r").current if m.role == "assistant"] == [answer]


def test_a_secret_in_a_large_argument_is_redacted_in_its_blob_and_the_call_is_known_to_have_lost_it(tm):
    text = big(9, 50_000) + f"\napi_key = {SECRET}\n"
    with tm.start("t", run_id="r", tools=[keep_note]) as run:
        run.call("keep_note", {"text": text, "tags": []}, call_id="c1")
    assert SECRET.encode() not in store_bytes(tm)  # the blob holds what the log would have: redacted
    entry = load_view(tm.store, "r").ledger["c1"]
    assert redacted_arguments(entry.input)  # seen without reading the blob: never run again from it
    back = read_back_unchecked(tm, "r", "c1")
    assert "[REDACTED:" in back["text"] and back["text"].startswith(text[:1000])


def read_back_unchecked(tm, run_id, call_id):
    view = load_view(tm.store, run_id)
    return large_values.resolve(view.ledger[call_id].input, large_values.reader(tm.store, view))


def test_an_argument_shaped_like_a_reference_is_the_callers_own_and_given_back_as_it_was(tm):
    digest = "sha256:" + "0" * 64
    hostile = {"text": "x", "tags": [{"$large": f"blob:{digest}", "size": 3}, {"$literal": 1}]}
    args = {**hostile, "text": big(10, 20_000)}
    with tm.start("t", run_id="r", tools=[keep_note]) as run:
        run.call("keep_note", hostile, call_id="c1")
        run.call("keep_note", args, call_id="c2")
    assert read_back(tm, "r", "c1") == hostile
    assert read_back(tm, "r", "c2") == args


def test_a_log_written_before_keeps_its_values_inline_and_reads_as_before(tm, workspace, monkeypatch):
    content = big(11, 200_000)
    with monkeypatch.context() as patched:
        patched.setattr(rule, "LARGE_BYTES", 10**9)  # the old writer: every value inline
        with tm.start("t", run_id="r", tools=[keep_note]) as run:
            run.call("keep_note", {"text": content, "tags": []}, call_id="c1")
    assert log_bytes(tm, "r") > 100_000
    assert read_back(tm, "r", "c1") == {"text": content, "tags": []}
    with tm.resume("r", tools=[keep_note]) as run:
        assert run.call("keep_note", {"text": content, "tags": []}, call_id="c1") == f"kept {len(content)} characters"


def test_gc_keeps_what_inputs_and_messages_reference_for_as_long_as_the_run_is_kept(tm, workspace):
    content = big(12, 300_000)
    played = agent_script(content)
    run = tm.start(played.task, run_id="r", model=played.model, tools=[long_report, keep_note])
    with run:
        assert tm.run_agent(run, Scripted(played)) == "completed"
    with tm.start("t", run_id="s", tools=[keep_note]) as run:
        for number in range(5):
            run.step()
            run.call("write_file", {"path": "new.txt", "content": big(20 + number, 50_000)}, call_id=f"w{number}")
            run.checkpoint()
        run.finish("completed")
    done = gc(tm.store, keep=1)
    assert done.freed_blobs > 0  # old file versions went
    assert fsck(tm.store, None, repair=False).clean
    assert read_back(tm, "s", "w0")["content"] == big(20, 50_000)  # the input, still shown whole
    assert read_back(tm, "r", next(iter(load_view(tm.store, "r").ledger)))["content"] == content
    rows = [row.message for row in tm.restored_history("r").messages]
    assert any(m.role == "tool" and m.content == big(8) for m in rows)
    assert next(c.args for m in rows for c in m.tool_calls)["content"] == content


def test_a_call_whose_only_argument_is_large_is_shown_by_its_size():
    from safepoint.core.progress import main_argument

    text = big(14, 9000)
    shown = main_argument(rule.externalize({"text": text}, lambda t: ("sha256:" + "1" * 64, t)))
    assert shown == f"({len(text.encode()):,} bytes)"  # UTF-8 bytes, as the reference counts them
    assert main_argument({"path": "a.txt", "content": {"$large": "blob:sha256:" + "1" * 64, "size": 5}}) == "a.txt"


def test_the_rule_round_trips_nested_values_and_leaves_small_ones_untouched():
    stored: dict[str, str] = {}

    def put(text: str) -> tuple[str, str]:
        digest = f"sha256:{len(stored):064d}"
        stored[digest] = text
        return digest, text

    small = {"a": "x" * rule.LARGE_BYTES, "b": [1, 2.5, None, True]}
    assert rule.externalize(small, put) is small and not stored
    value = {"a": ["é" * 3000, {"b": "y" * 5000}], "c": "z"}
    out = rule.externalize(value, put)
    assert len(stored) == 2 and len(json.dumps(out)) < 400
    assert rule.resolve(out, stored.__getitem__) == value
    assert sorted(rule.references(out)) == sorted(stored)


def test_in_an_encrypted_store_a_large_input_and_result_are_sealed_blobs(tmp_path, workspace):
    marker = "plain-marker-" + "Zq9" * 20
    text = big(15, 60_000) + marker
    tm = safepoint.open(str(tmp_path / "sealed"), workspace=str(workspace), key="a1" * 32)
    try:
        with tm.start("t", run_id="r", tools=[keep_note, long_report]) as run:
            run.call("keep_note", {"text": text, "tags": []}, call_id="c1")
            run.call("long_report", {"seed": 16}, call_id="c2")
        assert tm.store.list_blobs()
        assert read_back(tm, "r", "c1")["text"] == text
    finally:
        tm.close()
    found = b"".join(p.read_bytes() for p in (tmp_path / "sealed").rglob("*") if p.is_file())
    assert marker.encode() not in found and big(16)[:200].encode() not in found


def test_on_postgresql_every_tool_kinds_megabyte_stays_out_of_the_log(fresh_url, workspace):
    tm = safepoint.open(fresh_url, workspace=str(workspace))
    try:
        given = {}
        with tm.start("t", run_id="r", tools=[keep_note, long_report]) as run:
            for number, (tool, make) in enumerate(CASES.values()):
                given[f"c{number}"] = make()
                run.call(tool, given[f"c{number}"], call_id=f"c{number}")
            run.call("long_report", {"seed": 17}, call_id="r1")
        log = sum(len(record.body) for record in tm.store.read_log("r").records)
        assert log < 4 * SMALL_LOG, log  # five megabyte-sized values went through
        for call_id, args in given.items():
            assert read_back(tm, "r", call_id) == args
        with tm.resume("r", tools=[long_report]) as run:
            assert run.call("long_report", {"seed": 17}, call_id="r1") == big(17)
    finally:
        tm.close()
