"""``SafepointSaver`` (``safepoint.integrations.langgraph``) against LangGraph's own conformance suite and graphs.

The suite drives only the async methods; the sync ones are driven by real ``StateGraph``s. Beside it: a thread has
one writer (a second saver is refused, a saver taken over is refused), hostile thread ids stay names, a step stores
what changed (not the whole state), ``get_tuple`` never reads the whole log again, and the store keeps redacted,
sealed records.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import operator
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import zstandard

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from safepoint.errors import DiskFullError, RunLockedError, StaleGenerationError
from safepoint.integrations.langgraph import SafepointSaver
from safepoint.integrations.langgraph_thread import thread_run_id
from safepoint.store.url import open_store
from tests.store_text import trace_lines

KEY = bytes(range(32))
HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")


def conformance(make: Any) -> dict[str, tuple[int, int]]:
    @checkpointer_test(name="SafepointSaver")
    async def saver() -> AsyncIterator[SafepointSaver]:
        made = make()
        yield made
        made.close()

    report = asyncio.run(validate(saver, progress=ProgressCallbacks.quiet()))
    results = {str(cap): (r.tests_passed, r.tests_failed) for cap, r in report.results.items()}
    assert report.passed_all(), report.to_dict()
    assert report.conformance_level() == "FULL"
    return results


EXTENDED = {"delete_for_runs", "copy_thread", "prune"}


def test_conformance_on_the_file_store(tmp_path: Path) -> None:
    stores = iter(range(100))
    results = conformance(lambda: SafepointSaver(f"file:{tmp_path}/s{next(stores)}"))
    assert {cap for cap, (passed, failed) in results.items() if passed and not failed} >= EXTENDED


def test_conformance_on_an_encrypted_file_store(tmp_path: Path) -> None:
    stores = iter(range(100))
    conformance(lambda: SafepointSaver(f"file:{tmp_path}/s{next(stores)}", key=KEY))


def test_conformance_on_postgresql(fresh_url: str) -> None:
    results = conformance(lambda: SafepointSaver(fresh_url))
    assert {cap for cap, (passed, failed) in results.items() if passed and not failed} >= EXTENDED


# A real graph through the sync methods --------------------------------------------------------------------------
class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: Annotated[int, operator.add]


def chat_graph(saver: Any, turns: int = 3) -> Any:
    def talk(state: Chat) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"reply {n} " + "x" * 1000)], "steps": 1}

    def route(state: Chat) -> str:
        return END if state["steps"] >= turns else "talk"

    graph = StateGraph(Chat)
    graph.add_node("talk", talk)
    graph.add_edge(START, "talk")
    graph.add_conditional_edges("talk", route)
    return graph.compile(checkpointer=saver)


MORE = {"messages": [HumanMessage("more")]}  # new input: the thread runs on from its last state


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 10_000}


def test_a_graph_runs_on_the_sync_methods_and_a_new_saver_sees_the_same_thread(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/store"
    with SafepointSaver(url) as saver:
        app = chat_graph(saver)
        out = app.invoke({"messages": [HumanMessage("hi")], "steps": 0}, config("t"), durability="sync")
        history = list(app.get_state_history(config("t")))
    assert out["steps"] == 3 and len(out["messages"]) == 4
    with SafepointSaver(url) as again:
        state = chat_graph(again).get_state(config("t"))
        assert state.values == out
        assert [s.config for s in chat_graph(again).get_state_history(config("t"))] == [s.config for s in history]
        # the graph goes on where it was, in another saver
        more = chat_graph(again, turns=5).invoke({"messages": [HumanMessage("more")]}, config("t"), durability="sync")
        assert more["steps"] == 5 and [m.content for m in more["messages"][:4]] == [m.content for m in out["messages"]]


def test_the_async_methods_run_a_graph_too(tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        with SafepointSaver(f"file:{tmp_path}/store") as saver:
            app = chat_graph(saver)
            result: dict[str, Any] = await app.ainvoke({"messages": [HumanMessage("hi")], "steps": 0}, config("t"))
            state = await app.aget_state(config("t"))
            assert state.values == result
            return result

    assert asyncio.run(go())["steps"] == 3


# One writer per thread (LangGraph #8796: two writers silently forked a thread) ----------------------------------
def test_a_second_saver_writing_a_thread_is_refused_and_reading_is_not(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/store"
    first = SafepointSaver(url)
    chat_graph(first).invoke({"messages": [HumanMessage("hi")], "steps": 0}, config("t"), durability="sync")
    second = SafepointSaver(url)
    assert chat_graph(second).get_state(config("t")).values["steps"] == 3  # reading needs no claim
    with pytest.raises(RunLockedError, match="LangGraph thread 't' is written by another saver"):
        chat_graph(second, turns=5).invoke(MORE, config("t"), durability="sync")
    chat_graph(second).invoke({"messages": [HumanMessage("hi")], "steps": 0}, config("other"), durability="sync")
    chat_graph(first, turns=4).invoke(MORE, config("t"), durability="sync")  # the owner goes on
    assert first.get_tuple(config("t")).checkpoint["channel_values"]["steps"] == 4
    first.release("t")
    chat_graph(second, turns=5).invoke(MORE, config("t"), durability="sync")  # released: the next writer takes it
    with pytest.raises(RunLockedError):
        chat_graph(first, turns=6).invoke(MORE, config("t"), durability="sync")  # and now the first is refused
    first.close()
    assert second.get_tuple(config("t")) is not None
    tuples = {t.config["configurable"]["checkpoint_id"]: t for t in second.list(config("t"))}
    head = second.get_tuple(config("t"))
    assert head is not None and head.checkpoint["channel_values"]["steps"] == 5
    reachable, at = set(), head
    while at is not None:
        reachable.add(at.config["configurable"]["checkpoint_id"])
        at = tuples[at.parent_config["configurable"]["checkpoint_id"]] if at.parent_config else None
    assert reachable == set(tuples)  # one lineage: every checkpoint is an ancestor of the head, never a fork
    second.close()


def test_a_saver_whose_thread_was_taken_over_is_refused(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/store"
    first = SafepointSaver(url)
    chat_graph(first).invoke({"messages": [HumanMessage("hi")], "steps": 0}, config("t"), durability="sync")
    store = open_store(url)
    store.claim(thread_run_id("t"), "someone else", takeover=True)  # a newer owner (first was presumed dead)
    with pytest.raises(StaleGenerationError, match="lost the thread to a newer writer"):
        chat_graph(first, turns=5).invoke(MORE, config("t"), durability="sync")
    first.close()
    store.close()


# Hostile thread ids ------------------------------------------------------------------------------------------------
HOSTILE = ["../../etc/passwd", "a\x00b", "x" * 10_000, "日本語 🙂 \u202e", "", "lg-", ".", "t/../t"]


def test_hostile_thread_ids_are_names_kept_apart(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    before = set(os.listdir(tmp_path))
    with SafepointSaver(f"file:{store_dir}") as saver:
        app = chat_graph(saver, turns=1)
        for n, thread in enumerate(HOSTILE):
            app.invoke({"messages": [HumanMessage(f"hi {n}")], "steps": 0}, config(thread), durability="sync")
        for n, thread in enumerate(HOSTILE):
            state = app.get_state(config(thread))
            assert state.values["messages"][0].content == f"hi {n}"
            assert state.config["configurable"]["thread_id"] == thread
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == set(HOSTILE)
        saver.delete_thread("../../etc/passwd")
        assert app.get_state(config("../../etc/passwd")).values == {}
        assert app.get_state(config("t/../t")).values["messages"][0].content == "hi 7"
    assert set(os.listdir(tmp_path)) == before | {"store"}  # nothing written beside the store
    names = [name for _, dirs, files in os.walk(store_dir) for name in dirs + files]
    assert all(len(name) < 100 and "\x00" not in name and ".." not in name for name in names)


# Storage grows with what changed ---------------------------------------------------------------------------------
class CountingStore:
    """A store that counts whole-log reads (what get_tuple must not do per step)."""

    def __init__(self, url: str) -> None:
        self.inner = open_store(url)
        self.reads = 0

    def read_log(self, run_id: str) -> Any:
        self.reads += 1
        return self.inner.read_log(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def store_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_bytes_per_step_stay_flat_and_get_tuple_reads_no_log(tmp_path: Path) -> None:
    """A step adding a 1 KB message stores about 1 KB, at step 10 as at step 300 (a state copy per step grows
    with the list), and reading the thread's latest checkpoint never reads its log again."""
    folder = tmp_path / "store"
    counting = CountingStore(f"file:{folder}")
    saver = SafepointSaver(counting)  # type: ignore[arg-type]  # a Store by duck typing
    cfg = config("t")
    per_step: list[int] = []
    last = 0
    for _ in chat_graph(saver, turns=300).stream(
        {"messages": [HumanMessage("hi")], "steps": 0}, cfg, durability="sync"
    ):
        now = store_bytes(folder)
        per_step.append(now - last)
        last = now
    assert len(per_step) == 300
    assert 1000 < per_step[299] < 2 * per_step[9], (per_step[9], per_step[299])
    reads = counting.reads
    for _ in range(20):
        assert saver.get_tuple(cfg) is not None
    assert counting.reads == reads  # the thread's index serves it
    saver.close()
    in_memory = InMemorySaver()
    chat_graph(in_memory, turns=300).invoke({"messages": [HumanMessage("hi")], "steps": 0}, cfg)
    memory_bytes = sum(len(v[1]) for v in in_memory.blobs.values())
    assert store_bytes(folder) * 20 < memory_bytes  # InMemorySaver keeps the whole list at every version


# Redaction and sealing ---------------------------------------------------------------------------------------------
SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2


def secret_graph(saver: Any) -> Any:
    def talk(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"the key is {SECRET}")], "steps": 1}

    graph = StateGraph(Chat)
    graph.add_node("talk", talk)
    graph.add_edge(START, "talk")
    graph.add_edge("talk", END)
    return graph.compile(checkpointer=saver)


def test_model_text_is_redacted_in_the_store(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/store"
    with SafepointSaver(url) as saver:
        app = secret_graph(saver)
        run_config = {**config("t"), "metadata": {"note": f"key {SECRET}"}}  # metadata, writes and values
        out = app.invoke({"messages": [HumanMessage(f"use {SECRET}")], "steps": 0}, run_config)
        assert SECRET in out["messages"][1].content  # the live graph keeps its own state
    assert not any(SECRET.encode() in text for text in readable(tmp_path / "store"))  # no record holds it
    with SafepointSaver(url) as again:
        values = secret_graph(again).get_state(config("t")).values
    texts = [m.content for m in values["messages"]]
    assert all(SECRET not in t and "[REDACTED" in t for t in texts), texts


def readable(folder: Path) -> Iterator[bytes]:
    """Every file's bytes, and every base64 run in them decoded (a Blob's data is base64 in its JSON line), and
    unpacked when it is zstd's."""
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            yield data
            if path.name == "trace.jsonl":  # packed batches: zstd against the trace dictionary
                yield from trace_lines(data)
            for run in re.findall(rb"[A-Za-z0-9+/]{16,}={0,2}", data):
                with contextlib.suppress(ValueError, zstandard.ZstdError):
                    decoded = base64.b64decode(run + b"=" * (-len(run) % 4))
                    yield decoded
                    yield zstandard.ZstdDecompressor().decompress(decoded, max_output_size=1 << 24)


def test_an_encrypted_store_keeps_no_text_in_clear(tmp_path: Path) -> None:
    plain = "a message everyone could read"
    for name, key in (("clear", None), ("sealed", KEY)):
        with SafepointSaver(f"file:{tmp_path}/{name}", key=key) as saver:
            chat_graph(saver, turns=1).invoke({"messages": [HumanMessage(plain)], "steps": 0}, config("t"))
    found = {name: any(plain.encode() in text for text in readable(tmp_path / name)) for name in ("clear", "sealed")}
    assert found == {"clear": True, "sealed": False}
    with SafepointSaver(f"file:{tmp_path}/sealed", key=KEY) as saver:
        assert chat_graph(saver).get_state(config("t")).values["messages"][0].content == plain


def test_a_writer_in_another_process_holds_the_thread_until_it_dies(tmp_path: Path) -> None:
    url = f"file:{tmp_path}/store"
    code = (
        "import sys; from langchain_core.messages import HumanMessage; "
        f"sys.path[:0] = [{SRC!r}, {str(HERE)!r}]; import test_langgraph_saver as t; "
        "from safepoint.integrations.langgraph import SafepointSaver; "
        f"s = SafepointSaver({url!r}); "
        "t.chat_graph(s, turns=1).invoke({'messages': [HumanMessage('hi')], 'steps': 0}, t.config('t')); "
        "print('ready', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with SafepointSaver(url) as saver:
            with pytest.raises(RunLockedError, match="written by another saver"):
                chat_graph(saver, turns=2).invoke(MORE, config("t"), durability="sync")
            holder.kill()  # SIGKILL: its claim stays behind, with a dead owner
            holder.wait(timeout=60)
            out = chat_graph(saver, turns=2).invoke(MORE, config("t"), durability="sync")
            assert out["steps"] == 2 and [m.content for m in out["messages"][:1]] == ["hi"]
    finally:
        holder.kill()
        holder.wait(timeout=60)


# DeltaChannel: prune keeps what rebuilds it -------------------------------------------------------------------------
def extend(state: list[str] | None, writes: list[Any]) -> list[str]:
    out = list(state or [])
    for write in writes:
        out.extend(write)
    return out


class Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=3)]
    i: int


def test_prune_keep_latest_keeps_the_ancestors_a_delta_channel_needs(tmp_path: Path) -> None:
    graph = StateGraph(Log)
    graph.add_node("step", lambda s: {"log": [f"e{s['i']}"], "i": s["i"] + 1})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: END if s["i"] >= 4 else "step")  # the last step is no snapshot
    url = f"file:{tmp_path}/store"
    with SafepointSaver(url) as saver:
        app = graph.compile(checkpointer=saver)
        assert app.invoke({"log": [], "i": 0}, config("t"), durability="sync")["log"] == ["e0", "e1", "e2", "e3"]
        saver.prune(["t"], strategy="keep_latest")
        assert len(list(saver.list(config("t")))) < 6  # pruned
        assert app.get_state(config("t")).values == {"log": ["e0", "e1", "e2", "e3"], "i": 4}
    with SafepointSaver(url) as again:
        assert graph.compile(checkpointer=again).get_state(config("t")).values["log"] == ["e0", "e1", "e2", "e3"]


def test_a_writer_killed_while_it_writes_leaves_a_thread_that_loads_and_goes_on(tmp_path: Path) -> None:
    """SIGKILL at whatever moment the writer is in (a put, a put_writes, between): the next saver reads a whole
    thread, at its last durable checkpoint, and runs it on."""
    url = f"file:{tmp_path}/store"
    code = (
        "import sys; from langchain_core.messages import HumanMessage; "
        f"sys.path[:0] = [{SRC!r}, {str(HERE)!r}]; import test_langgraph_saver as t; "
        "from safepoint.integrations.langgraph import SafepointSaver; "
        f"s = SafepointSaver({url!r}); "
        "[print(n, flush=True) for n, _ in enumerate(t.chat_graph(s, turns=100_000).stream("
        "{'messages': [HumanMessage('hi')], 'steps': 0}, t.config('t'), durability='async'))]"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    try:
        assert writer.stdout is not None
        while int(writer.stdout.readline() or -1) < 40:  # well into its writing
            pass
    finally:
        writer.kill()
        writer.wait(timeout=60)
    with SafepointSaver(url) as saver:
        state = chat_graph(saver).get_state(config("t")).values
        # one whole checkpoint (with "async", LangGraph's default, the writes lag behind the steps)
        assert state["steps"] >= 1 and len(state["messages"]) == state["steps"] + 1
        out = chat_graph(saver, turns=state["steps"] + 2).invoke(None, config("t"), durability="sync")
    assert out["steps"] == state["steps"] + 2
    assert [m.content for m in out["messages"][: len(state["messages"])]] == [m.content for m in state["messages"]]


class FailingStore(CountingStore):
    """A store whose next append fails (a full disk, a dropped connection), once."""

    fail_next = False

    def append(self, claim: Any, records: Any, **options: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            raise DiskFullError("no space left on the device (test)")
        self.inner.append(claim, records, **options)


def test_a_failed_write_leaves_no_list_built_on_what_it_did_not_store(tmp_path: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    url = f"file:{tmp_path}/store"
    store = FailingStore(url)
    saver = SafepointSaver(store)  # type: ignore[arg-type]  # a Store by duck typing
    parent: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(items: list[str], version: str, *, fails: bool = False) -> Any:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"log": items}
        checkpoint["channel_versions"] = {"log": version}
        store.fail_next = fails
        return saver.put(parent, checkpoint, {"step": len(items)}, {"log": version})

    parent = put(["a"], "1")
    with pytest.raises(DiskFullError):
        put(["a", "b"], "2", fails=True)  # never stored
    put(["a", "b", "c"], "3")  # so this one must not be stored as "version 2, then c"
    saver.close()
    with SafepointSaver(url) as again:
        latest = again.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert latest is not None and latest.checkpoint["channel_values"]["log"] == ["a", "b", "c"]


def test_a_saver_keeps_its_claims_alive_while_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another host takes an owner whose heartbeat is older than its lease for dead: an idle saver renews its."""
    import safepoint.integrations.langgraph as lg

    from .conftest import wait_for  # here: a child process imports this module on its own

    monkeypatch.setattr(lg, "HEARTBEAT_SECONDS", 0.05)
    with SafepointSaver(f"file:{tmp_path}/store") as saver:
        chat_graph(saver, turns=1).invoke({"messages": [HumanMessage("hi")], "steps": 0}, config("t"))
        owner = saver.store.owner(thread_run_id("t"))
        assert owner is not None
        wait_for(
            lambda: (
                (now := saver.store.owner(thread_run_id("t"))) is not None and now.heartbeat_at > owner.heartbeat_at
            ),
            "the idle saver's heartbeat",
        )
