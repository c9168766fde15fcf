"""Beside the attacks of ``test_attack_i13`` (the review page) and ``test_attack_i12lg`` (the LangGraph adapter): the
families behind each finding, on the other faces that had the same cause (the CLI's ``--json`` and ``safepoint
diff``, the counts of a diff, other state values, the async ``ToolNode`` path, a call made before a node's own
``interrupt()``)."""

from __future__ import annotations

import dataclasses
import json
import operator
import os
import re
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from starlette.testclient import TestClient

import safepoint
from safepoint.ui.app import create_app
from safepoint.ui.guard import loopback_hosts

TOKEN = "t0ken-of-this-server"
SEPARATORS = ["\u2028", "\u2029", "\r", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\x0b"]


def client_of(sp: safepoint.Safepoint, port: int = 8780, base: str = "http://127.0.0.1:8780") -> TestClient:
    app = create_app(sp, token=TOKEN, hosts=loopback_hosts(port))
    return TestClient(app, base_url=base, headers={"x-safepoint-token": TOKEN}, follow_redirects=False)


@pytest.fixture
def sp(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    opened = safepoint.open(workspace=str(ws))
    yield opened
    opened.close()


# 1. masking each string, not the JSON text ---------------------------------------------------------------------
def test_masking_keeps_every_item_and_still_masks_each_password():
    from safepoint.cli.common import masked

    data = {
        "items": ["password='y", "the deploy step ran", "and it's done", "postgresql://u:hunter2@db/x"],
        "password='k": {"n": 1, "ok": True, "none": None},
    }
    out = masked(data)
    assert out["items"][1:3] == ["the deploy step ran", "and it's done"]
    assert "hunter2" not in json.dumps(out)
    assert len(out["items"]) == 4 and out["password='k"]["n"] == 1  # a key masked alone, its value kept


def test_the_cli_json_keeps_items_a_quote_would_span(sp, capsys):
    from safepoint.cli.common import emit

    emit({"texts": ["password='y", "middle", "it's"]}, as_json=True)
    assert json.loads(capsys.readouterr().out)["texts"] == ["password='y", "middle", "it's"]


def test_the_api_still_masks_a_store_password_in_a_message(sp):
    with sp.start("t", run_id="m") as run:
        run.add_message("assistant", "connect to postgresql://app:s3cretpw@db.example/prod now")
        run.checkpoint()
    told = client_of(sp).get("/api/runs/m")
    assert told.status_code == 200 and "s3cretpw" not in told.text
    assert len(told.json()["items"]) == told.json()["total"]


# 2. a diff line is a line of the diff ----------------------------------------------------------------------------
@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_separator_inside_a_line_never_makes_a_line_anywhere(sp, separator):
    """The page, the counts of a diff (``+1 -0``), ``safepoint diff``'s rendering and the page's cap all see one
    added line; the page shows the separator as an escape."""
    from safepoint.cli.review import _coloured
    from safepoint.timeline import _cap_lines

    with sp.start("t", run_id="sep") as run:
        run.call("write_file", {"path": "a.py", "content": f"ok = 1{separator}- check(request)\n"}, call_id="c1")
        run.checkpoint()
    files = sp.diff("sep").files
    assert [(f.added, f.removed) for f in files] == [(1, 0)]
    text = files[0].diff
    assert not any(line.startswith("-") and not line.startswith("---") for line in text.split("\n"))
    rendered = _coloured(text, on=True)
    assert separator not in rendered and "\x1b[31m" not in rendered  # no red line, the separator shown escaped
    assert _cap_lines(text, "x") is text
    page = client_of(sp).get("/runs/sep").text
    diff = re.search(r'<pre class="diff">.*?</pre>', page, re.S)
    assert diff is not None and separator not in page and '<span class="del">' not in diff.group(0)


@pytest.mark.parametrize("separator", ["\r", "\u2028", "\x0c"])
def test_the_cli_conflicts_view_shows_a_separator_inside_a_line_as_an_escape(separator):
    from rich.console import Console

    from safepoint.cli.render import conflicts_view

    change = f"+ok = 1{separator}- check(request)\n"
    conflict = {"path": "a.py", "why": "w", "expected_hash": "e", "actual_hash": "a", "resolution": "pending"}
    console = Console(record=True, width=200, force_terminal=False)
    console.print(conflicts_view([{**conflict, "agent_change": change, "changed_since": change}]))
    text = console.export_text()
    assert separator not in text and text.count("check(request)") == 2
    assert not any(line.lstrip("│ ").startswith("- check") for line in text.splitlines())


def test_a_capped_diff_counts_lines_at_newlines_only():
    from safepoint.timeline import DIFF_CAP_LINES, _cap_lines

    one_line_many_separators = "+" + "\u2028" * (DIFF_CAP_LINES * 2) + "\n"
    assert _cap_lines(one_line_many_separators, "x") is one_line_many_separators
    many = "".join(f"+{n}\n" for n in range(DIFF_CAP_LINES + 5))
    capped = _cap_lines(many, "safepoint diff r")
    assert capped.count("\n") == DIFF_CAP_LINES + 1 and "5 more lines" in capped


# 3. port 80 --------------------------------------------------------------------------------------------------------
def test_on_port_80_the_browsers_origin_may_write_and_other_ports_stay_exact(sp):
    client = client_of(sp, port=80, base="http://127.0.0.1")
    got = client.post("/api/runs/none/approve", json={"call_id": "c"}, headers={"origin": "http://127.0.0.1"})
    assert got.status_code == 404  # past the guard: the run is not there
    assert client.get("/api/runs", headers={"host": "localhost"}).status_code == 200
    other = client_of(sp)
    assert other.get("/api/runs", headers={"host": "127.0.0.1"}).status_code == 403
    assert "127.0.0.1" not in loopback_hosts(8780)


# 4. one answer per call ----------------------------------------------------------------------------------------------
def test_a_second_answer_is_refused_naming_who_answered(tmp_path):
    from .ui_runs import waiting_run

    ws = tmp_path / "ws"
    ws.mkdir()
    waiting_run(ws, tmp_path)
    sp = safepoint.open(workspace=str(ws))
    try:
        assert sp.approve("waiting", "call_1", by="alice").approved
        with pytest.raises(safepoint.errors.ResumeError, match="approved already by alice"):
            sp.deny("waiting", "call_1", by="bob")
    finally:
        sp.close()


def test_an_answer_posted_between_the_read_and_the_post_makes_this_one_the_loser(tmp_path, monkeypatch):
    """Another process's answer lands after this one read the channel: the conditional post refuses, what came is
    read, and this answer is refused naming the other; an unrelated post between (a submission) is retried."""
    from safepoint.protocol import Approval
    from safepoint.restart import control
    from safepoint.store.ownership import now

    from .ui_runs import waiting_run

    ws = tmp_path / "ws"
    ws.mkdir()
    waiting_run(ws, tmp_path)
    sp = safepoint.open(workspace=str(ws))
    try:
        entry = control.load_view(sp.store, "waiting").ledger["call_1"]
        real = control.controls
        posted: list[str] = []

        def and_then_another_posts(store, run_id):
            seen = real(store, run_id)
            if not posted:
                posted.append("x")
                other = Approval(call_id="call_1", input_hash=entry.input_hash, approved=False, at=now(), by="carol")
                control.post(store, run_id, other)
            return seen

        monkeypatch.setattr(control, "controls", and_then_another_posts)
        with pytest.raises(safepoint.errors.ResumeError, match="denied already by carol"):
            sp.approve("waiting", "call_1", by="dave")
        monkeypatch.setattr(control, "controls", real)
        answers = [r for _, r in real(sp.store, "waiting") if isinstance(r, Approval)]
        assert [a.by for a in answers] == ["carol"]
    finally:
        sp.close()


# 5. a symlink on the conflicts page ------------------------------------------------------------------------------
def test_recorded_forms_are_said_as_what_they_are():
    from safepoint.timeline import _as_text
    from safepoint.workspace.files import FILE_MARK, SYMLINK_MARK

    notes: list[str] = []
    assert _as_text(SYMLINK_MARK + b"../etc/config.toml", "the file now", notes) == "symlink -> ../etc/config.toml"
    assert "symlink" in notes[0] and "binary" not in notes[0]
    notes.clear()
    # a regular file whose text starts like the mark is kept escaped: shown as its own text, not as a symlink
    assert _as_text(FILE_MARK + SYMLINK_MARK + b"x", "v", notes) is None and "binary" in notes[0]
    assert _as_text(FILE_MARK + b"plain text\n", "v", []) == "plain text\n"


# 6. one unreadable run -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["owner.json", "run.json", "restart_checkpoint.json"])
def test_any_unreadable_file_of_a_run_leaves_the_others_listed(tmp_path, name):
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        for run_id in ("good", "broken"):
            with sp.start("t", run_id=run_id) as run:
                run.checkpoint()
    finally:
        sp.close()
    part = ws / ".agent-runtime" / "runs" / "broken" / name
    part.unlink(missing_ok=True)
    part.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        rows = {row.summary.run_id: row.summary.status for row in sp.runs_overview()}
        assert rows["good"] != "unreadable" and "broken" in rows
        listed = client_of(sp).get("/api/runs")
        assert listed.status_code == 200 and "good" in listed.text
    finally:
        sp.close()


def test_an_unreadable_control_channel_is_one_line_and_the_run_is_listed_unreadable(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        for run_id in ("good", "broken"):
            with sp.start("t", run_id=run_id) as run:
                run.checkpoint()
    finally:
        sp.close()
    control_file = ws / ".agent-runtime" / "runs" / "broken" / "control.jsonl"
    control_file.unlink(missing_ok=True)
    control_file.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        with pytest.raises(safepoint.errors.StoreError, match="'broken' cannot be read"):
            sp.store.read_control("broken")
        rows = {row.summary.run_id: row.summary.status for row in sp.runs_overview()}
        assert rows["good"] != "unreadable"
        page = client_of(sp).get("/")
        assert page.status_code == 200 and "good" in page.text
    finally:
        sp.close()


def test_status_lists_a_run_whose_log_is_a_folder(tmp_path):
    from .conftest import safepoint_in_process

    ws = tmp_path / "ws"
    ws.mkdir()
    sp = safepoint.open(workspace=str(ws))
    try:
        with sp.start("t", run_id="broken") as run:
            run.checkpoint()
    finally:
        sp.close()
    log = ws / ".agent-runtime" / "runs" / "broken" / "ledger.jsonl"
    log.unlink()
    log.mkdir()
    done = safepoint_in_process("status", "--workspace", str(ws))
    assert "Traceback" not in done.stdout + done.stderr
    assert "unreadable" in done.stdout


# LangGraph ---------------------------------------------------------------------------------------------------------
langgraph = pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Command, Send  # noqa: E402

from safepoint.integrations.langgraph import SafepointSaver, durable_tool  # noqa: E402

SECRET = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0" * 2


def config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


@dataclasses.dataclass(frozen=True)
class Frozen:
    header: str
    seen: int = dataclasses.field(default=0, init=False)


class Holder:
    """A plain object: stored as the serializer makes it (its text is the user's choice to keep)."""


# 7. redaction of every kind of value -----------------------------------------------------------------------------
def test_redact_walks_nested_kinds_and_leaves_the_rest_the_same_object():
    from pydantic import BaseModel

    from safepoint.core.redact import Redactor
    from safepoint.integrations.langgraph_thread import redact

    class Inner(BaseModel):
        keys: list[str]

    class Outer(BaseModel):
        inner: Inner
        note: str = "plain"

    redactor = Redactor(values=[SECRET])
    value = {
        "frozen": Frozen(header=f"Bearer {SECRET}"),
        "fs": frozenset({SECRET}),
        "ba": bytearray(SECRET.encode()),
        "model": Outer(inner=Inner(keys=[SECRET])),
        "raw": b"\xff\xfe" + SECRET.encode(),  # not UTF-8: redacted all the same, the other bytes kept
    }
    out = redact(redactor, value)
    assert SECRET not in repr(out) and SECRET.encode() not in bytes(out["ba"]) and out["raw"].startswith(b"\xff\xfe")
    assert isinstance(out["frozen"], Frozen) and isinstance(out["fs"], frozenset) and isinstance(out["ba"], bytearray)
    assert value["model"].inner.keys == [SECRET]  # the graph's own state is never changed
    clean = {"a": Frozen(header="x"), "b": {1, 2}, "c": b"bytes", "d": Holder()}
    assert redact(redactor, clean) is clean


def test_a_model_that_holds_itself_is_walked_once():
    from safepoint.core.redact import Redactor
    from safepoint.integrations.langgraph_thread import redact

    loop: list[Any] = [SECRET]
    loop.append(loop)
    out = redact(Redactor(values=[SECRET]), loop)
    assert out[0] != SECRET


# 9. arguments recorded by type, never an address ----------------------------------------------------------------
def test_an_object_argument_is_recorded_by_its_type_only():
    from langchain_core.documents import Document

    from safepoint.integrations.langgraph_tools import _jsonable

    recorded = _jsonable({"client": Holder(), "doc": Document(page_content="x"), "nested": [{"h": Holder()}]})
    text = json.dumps(recorded)
    assert "0x" not in text and "object at" not in text
    assert recorded["client"] == {"object": f"{__name__}.Holder"}
    assert recorded["doc"]["kwargs"]["page_content"] == "x"
    assert _jsonable({"client": Holder()}) == _jsonable({"client": Holder()})


# 10. tool call ids a model repeats -------------------------------------------------------------------------------
def test_a_call_key_is_its_id_when_unique_and_its_position_beside_it_when_not():
    from types import SimpleNamespace

    from safepoint.integrations.langgraph_tools import _call_key

    calls = [{"name": "t", "args": {}, "id": i} for i in ("a", "dup", "dup", "")]
    message = AIMessage(content="", tool_calls=calls)
    held = message.tool_calls
    keys = [_call_key(SimpleNamespace(tool_call=c, state={"messages": [message]})) for c in held]  # a stand-in request
    assert keys == ["a", "dup#1", "dup#2", "#3"]


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_async_tool_node_calls_with_one_empty_id_each_run_once(tmp_path: Path):
    import asyncio

    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode

    from safepoint.integrations.langgraph import DurableCall, ToolNodeLedger

    sent: list[str] = []

    @tool
    async def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    calls = [{"name": "send_email", "args": {"to": to}, "id": ""} for to in ("a@x", "b@x", "c@x")]
    ledger = ToolNodeLedger(default=DurableCall(replay_policy="never"))
    graph = StateGraph(Chat)
    graph.add_node("think", lambda state: {"messages": [AIMessage(content="", tool_calls=calls)]})
    graph.add_node("tools", ToolNode([send_email], wrap_tool_call=ledger, awrap_tool_call=ledger.acall))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)

    async def main() -> Any:
        with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
            app = graph.compile(checkpointer=saver)
            return await app.ainvoke({"messages": [HumanMessage("mail")]}, config(), durability="sync")

    out = asyncio.run(main())
    assert sorted(sent) == ["a@x", "b@x", "c@x"]
    assert sorted(m.content for m in out["messages"] if isinstance(m, ToolMessage)) == [
        "sent to a@x",
        "sent to b@x",
        "sent to c@x",
    ]


# 12. a filter on redacted metadata ---------------------------------------------------------------------------------
class Count(TypedDict):
    n: int


def test_a_filter_matches_only_its_own_secret_and_plain_values_still_match(tmp_path: Path):
    graph = StateGraph(Count)
    graph.add_node("a", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "a")
    graph.add_edge("a", END)
    one = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    two = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIyIn0.b3RoZXJzaWdu"
    with SafepointSaver(f"file:{tmp_path}/store") as saver:
        app = graph.compile(checkpointer=saver)
        app.invoke({"n": 0}, {**config("x"), "metadata": {"session": one, "team": "blue"}}, durability="sync")
        app.invoke({"n": 0}, {**config("y"), "metadata": {"session": two, "team": "blue"}}, durability="sync")
        saver.copy_thread("x", "x-copy")
    with SafepointSaver(f"file:{tmp_path}/store") as saver:  # read back from the store, in a new saver
        assert len(list(saver.list(config("x"), filter={"session": one}))) == 3
        assert list(saver.list(config("x"), filter={"session": two})) == []
        assert list(saver.list(config("x"), filter={"session": "[REDACTED:jwt]"})) == []
        assert len(list(saver.list(None, filter={"team": "blue"}))) == 9
        assert len(list(saver.list(config("x-copy"), filter={"session": one}))) == 3
    stored = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert one.encode() not in stored and two.encode() not in stored


# 13. a Command recorded, and handed back from the record ------------------------------------------------------------
def test_a_recorded_command_comes_back_redacted_from_the_record(tmp_path: Path):
    from safepoint.integrations.langgraph_tools import ToolNodeLedger

    command = Command(update={"messages": [ToolMessage(f"key {SECRET}", tool_call_id="c1")]}, goto=Send("n", {"a": 1}))

    class Runs:
        def open(self, thread_id: str) -> Any:
            from types import SimpleNamespace

            from safepoint.core.redact import Redactor

            return SimpleNamespace(session=SimpleNamespace(log=SimpleNamespace(redactor=Redactor(values=[SECRET]))))

    recorded = ToolNodeLedger._record(Runs(), "t", command)  # a stand-in for ToolRuns
    assert SECRET not in json.dumps(recorded)
    back = ToolNodeLedger._answer(None, json.loads(json.dumps(recorded)), [])  # unused
    assert isinstance(back, Command) and back.goto == Send("n", {"a": 1})
    assert "REDACTED" in back.update["messages"][0].content
    assert ToolNodeLedger._answer(None, recorded, [command]) is command  # the live one


# 14. tools run at once ----------------------------------------------------------------------------------------------
class Fan(TypedDict):
    out: Annotated[list[str], operator.add]


def test_parallel_send_branches_run_their_durable_tools_at_once(tmp_path: Path):
    """Both branches wait for each other inside their tool: under a lock held while a tool runs, the barrier
    breaks (one waits for ever); held around the records only, both pass."""
    both = threading.Barrier(2, timeout=20)

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def meet(i: int) -> str:
        both.wait()
        return f"met {i}"

    graph = StateGraph(Fan)
    graph.add_node("work", lambda arg: {"out": [meet(arg["i"])]})
    graph.add_conditional_edges(START, lambda state: [Send("work", {"i": i}) for i in range(2)], ["work"])
    graph.add_edge("work", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        out = graph.compile(checkpointer=saver).invoke({"out": []}, config(), durability="sync")
    assert sorted(out["out"]) == ["met 0", "met 1"]


# 15. interrupt() and the calls around it ------------------------------------------------------------------------------
class Order(TypedDict):
    status: str


def test_a_call_before_the_nodes_own_interrupt_is_not_run_again_by_the_answer(tmp_path: Path):
    from langgraph.types import interrupt

    charged: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        receipt = charge(10)
        return {"status": f"{receipt}, {interrupt('ship?')}"}

    graph = StateGraph(Order)
    graph.add_node("pay", pay)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        app.invoke({"status": "new"}, config(), durability="sync")
        out = app.invoke(Command(resume="shipped"), config(), durability="sync")
    assert out == {"status": "charged 10, shipped"} and charged == [10]


def test_a_durable_tool_asked_again_without_an_answer_asks_again_then_runs_once(tmp_path: Path):
    """Re-invoked without an answer, the tool asks again (not "failed"); answered, it runs once; and a new saver
    on the same store (a restart) takes the recorded result, never charging twice."""
    from langgraph.types import interrupt

    charged: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge(amount: int) -> str:
        if interrupt(f"charge {amount}?") != "yes":
            return "declined"
        charged.append(amount)
        return f"charged {amount}"

    graph = StateGraph(Order)
    graph.add_node("pay", lambda state: {"status": charge(10)})
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        assert app.invoke({"status": "new"}, config(), durability="sync")["__interrupt__"][0].value == "charge 10?"
        assert app.invoke(None, config(), durability="sync")["__interrupt__"][0].value == "charge 10?"
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        assert app.invoke(Command(resume="yes"), config(), durability="sync") == {"status": "charged 10"}
    assert charged == [10]


def test_the_refusal_of_changed_arguments_is_one_line_naming_the_tool(tmp_path: Path):
    from langgraph.types import RetryPolicy

    from safepoint.errors import ResumeError

    attempts: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    def pay(state: Order) -> dict[str, Any]:
        attempts.append(1)
        done = refund(len(attempts))
        if len(attempts) < 2:
            raise ConnectionError("timed out")
        return {"status": done}

    graph = StateGraph(Order)
    graph.add_node("pay", pay, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False))
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with (
        SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver,
        pytest.raises(ResumeError) as refused,
    ):
        graph.compile(checkpointer=saver).invoke({"status": "new"}, config("t-9"), durability="sync")
    message = str(refused.value)
    assert "\n" not in message and "'refund'" in message and "'t-9'" in message
    assert "same arguments on every attempt" in message
    assert os.sep + "tmp" not in message


# 11. copy_thread copies the durable calls -----------------------------------------------------------------------
@pytest.mark.parametrize("key", [None, bytes(range(32))], ids=["plain", "encrypted"])
def test_a_copy_takes_a_charge_its_source_made_after_its_last_checkpoint(tmp_path: Path, key: bytes | None):
    """The node charged, then failed: the charge is in the ledger, not in a checkpoint. The copy (and then the
    source) each run the node again and take the recorded charge: one charge in all, on an encrypted store too."""
    charged: list[int] = []
    failing = {"on": True}

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def charge(amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        receipt = charge(10)
        if failing["on"]:
            raise ConnectionError("the shipping API timed out")
        return {"status": receipt}

    graph = StateGraph(Order)
    graph.add_node("pay", pay)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with SafepointSaver(f"file:{tmp_path}/store", key=key, workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        with pytest.raises(ConnectionError):
            app.invoke({"status": "new"}, config("src"), durability="sync")
        saver.copy_thread("src", "dst")
        saver.copy_thread("src", "dst")  # again, over the copy: replaced, not doubled
        failing["on"] = False
        assert app.invoke(None, config("dst"), durability="sync") == {"status": "charged 10"}
        assert app.invoke(None, config("src"), durability="sync") == {"status": "charged 10"}
    assert charged == [10]


def test_a_tool_node_tool_that_asks_through_interrupt_gets_the_answer(tmp_path: Path):
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode
    from langgraph.types import interrupt

    from safepoint.integrations.langgraph import DurableCall, ToolNodeLedger

    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email, once a person said yes."""
        if interrupt(f"send to {to}?") != "yes":
            return "not sent"
        sent.append(to)
        return f"sent to {to}"

    calls = [{"name": "send_email", "args": {"to": "a@x"}, "id": "call_1"}]
    ledger = ToolNodeLedger(default=DurableCall(replay_policy="never"))
    graph = StateGraph(Chat)
    graph.add_node("think", lambda state: {"messages": [AIMessage(content="", tool_calls=calls)]})
    graph.add_node("tools", ToolNode([send_email], wrap_tool_call=ledger, awrap_tool_call=ledger.acall))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = graph.compile(checkpointer=saver)
        asked = app.invoke({"messages": [HumanMessage("mail")]}, config(), durability="sync")
        assert asked["__interrupt__"][0].value == "send to a@x?"
        out = app.invoke(Command(resume="yes"), config(), durability="sync")
    assert sent == ["a@x"] and out["messages"][-1].content == "sent to a@x"
