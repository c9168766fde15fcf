"""``durable_tool`` and ``ToolNodeLedger`` (``safepoint.integrations.langgraph``) in real LangGraph graphs, offline.

A node runs again from its top when it is resumed (a crash, an interrupt answered, a retry): a finished call gives
its recorded value without running, and a call a SIGKILL left without an outcome is never run again on its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from safepoint.errors import ConfigError, DecisionNeeded, ToolFailure
from safepoint.integrations.langgraph import DurableCall, SafepointSaver, ToolNodeLedger, durable_tool
from safepoint.integrations.langgraph_tools import DECISION

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")


def config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


# LangGraph #7780: an interrupt in a loop re-ran the calls before it on every answer ------------------------------
class Form(TypedDict):
    age: int


def form_graph(saver: SafepointSaver, calls: list[str]) -> Any:
    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def check_address(attempt: int) -> dict[str, Any]:
        calls.append(f"check-{attempt}")
        return {"attempt": attempt, "valid": True}

    def ask_age(state: Form) -> dict[str, Any]:
        prompt, attempt = "What is your age?", 0
        while True:
            checked = check_address(attempt)  # an API call before each question
            answer = interrupt({"prompt": prompt, "checked": checked})
            if isinstance(answer, int) and answer > 0:
                return {"age": answer}
            prompt, attempt = f"{answer!r} is not an age", attempt + 1

    graph = StateGraph(Form)
    graph.add_node("ask_age", ask_age)
    graph.add_edge(START, "ask_age")
    graph.add_edge("ask_age", END)
    return graph.compile(checkpointer=saver)


@pytest.fixture(params=["file", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    url: str = request.getfixturevalue("fresh_url")
    return url


def test_an_interrupt_in_a_loop_does_not_run_earlier_calls_again(store_url: str, tmp_path: Path) -> None:
    calls: list[str] = []
    with SafepointSaver(store_url, workspace=str(tmp_path)) as saver:
        app = form_graph(saver, calls)
        shown = app.invoke({"age": 0}, config(), durability="sync")["__interrupt__"][0].value
        assert shown["checked"] == {"attempt": 0, "valid": True}
        for answer in ("x", "-3"):
            app.invoke(Command(resume=answer), config(), durability="sync")
        assert app.invoke(Command(resume=30), config(), durability="sync") == {"age": 30}
    assert calls == ["check-0", "check-1", "check-2"]  # each once (without the ledger: 1 + 2 + 3 + 3 runs)


def test_a_durable_tool_outside_a_graph_or_without_the_saver_is_refused(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    @durable_tool
    def ping() -> str:
        return "pong"

    with pytest.raises(ConfigError, match="outside a LangGraph node"):
        ping()
    graph = StateGraph(Form)
    graph.add_node("n", lambda state: {"age": len(ping())})
    graph.add_edge(START, "n")
    app = graph.compile(checkpointer=InMemorySaver())
    with pytest.raises(ConfigError, match="compile it with checkpointer=SafepointSaver"):
        app.invoke({"age": 0}, config())


# A real process killed inside a tool ------------------------------------------------------------------------------
class Order(TypedDict):
    status: str


def order_graph(saver: SafepointSaver, effects: Path, *, kill: bool = False, ship: bool = False) -> Any:
    @durable_tool(idempotency="idempotent", replay_policy="auto")
    def fetch_price(item: str) -> int:
        with open(effects, "a") as f:
            f.write(f"fetch {item}\n")
        return 10

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge_card(amount: int) -> str:
        with open(effects, "a") as f:
            f.write(f"charge {amount}\n")
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)  # the effect happened; its outcome was never recorded
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        price = fetch_price("book")
        try:
            status = charge_card(price)
        except ToolFailure as exc:
            status = f"not known: {exc}"
        if ship:
            status += f"; ship: {interrupt('ship it?')}"  # the node's own question, after the charge
        return {"status": status}

    graph = StateGraph(Order)
    graph.add_node("pay", pay)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=saver)


def child(store: str, workspace: str, effects: str) -> None:
    """A child process: the graph runs until it is killed inside ``charge_card``."""
    saver = SafepointSaver(store, workspace=workspace)
    order_graph(saver, Path(effects), kill=True).invoke({"status": "new"}, config(), durability="sync")


def killed_in_a_tool(tmp_path: Path, store: str | None = None) -> tuple[str, Path]:
    store, effects = store or f"file:{tmp_path}/store", tmp_path / "effects.txt"
    code = (
        f"import sys; sys.path[:0] = [{SRC!r}, {str(HERE)!r}]; import test_langgraph_tools as t; "
        f"t.child({store!r}, {str(tmp_path)!r}, {str(effects)!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert effects.read_text() == "fetch book\ncharge 10\n"
    return store, effects


def test_a_graph_killed_in_a_tool_resumes_with_the_effect_once_and_the_call_decided(
    store_url: str, tmp_path: Path
) -> None:
    store, effects = killed_in_a_tool(tmp_path, store_url)
    with SafepointSaver(store, workspace=str(tmp_path)) as saver:
        app = order_graph(saver, effects)
        assert app.get_state(config()).next == ("pay",)  # the step in flight is run again from the saver
        with pytest.raises(DecisionNeeded, match=r"LangGraph thread 't'.*charge_card\((lg-charge_card-[0-9a-f]+-1)\)"):
            app.invoke(None, config(), durability="sync")
        assert effects.read_text() == "fetch book\ncharge 10\n"  # nothing ran again while it waited
        with pytest.raises(DecisionNeeded) as waiting:
            app.invoke(None, config(), durability="sync")
        call = str(waiting.value).split("charge_card(")[1].split(")")[0]
        saver.settle("t", skip=[call])
        out = app.invoke(None, config(), durability="sync")
    assert out["status"].startswith("not known:")  # skipped: its value is not known, the node is told so
    assert effects.read_text() == "fetch book\ncharge 10\n"  # the price came from the ledger, the charge once


def test_a_graph_killed_in_a_tool_can_ask_through_an_interrupt(tmp_path: Path) -> None:
    store, effects = killed_in_a_tool(tmp_path)
    with SafepointSaver(store, workspace=str(tmp_path), on_uncertain="interrupt") as saver:
        app = order_graph(saver, effects)
        result = app.invoke(None, config(), durability="sync")
        asked = result["__interrupt__"][0].value[DECISION]
        assert [c.split("-")[1] for c in asked["calls"]] == ["charge_card"] and asked["thread_id"] == "t"
        out = app.invoke(Command(resume="replay"), config(), durability="sync")  # the person says: run it again
    assert out["status"] == "charged 10"
    assert effects.read_text() == "fetch book\ncharge 10\ncharge 10\n"  # run again because a person said so


# A ToolNode -----------------------------------------------------------------------------------------------------------
class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def agent_graph(saver: SafepointSaver, sent: list[str]) -> Any:
    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    @tool
    def confirm(question: str) -> str:
        """Ask a person."""
        return f"answer: {interrupt(question)}"

    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "send_email", "args": {"to": "a@example.com"}, "id": "call_1"},
                    {"name": "send_email", "args": {"to": "b@example.com"}, "id": "call_2"},
                    {"name": "confirm", "args": {"question": "ship it?"}, "id": "call_3"},
                ],
            )
        ]
    )
    ledger = ToolNodeLedger(tools={"confirm": None}, default=DurableCall(replay_policy="never"))

    def think(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(Chat)
    graph.add_node("think", think)
    graph.add_node("tools", ToolNode([send_email, confirm], wrap_tool_call=ledger, awrap_tool_call=ledger.acall))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)
    return graph.compile(checkpointer=saver)


def test_a_tool_node_run_again_takes_finished_calls_from_the_ledger(tmp_path: Path) -> None:
    sent: list[str] = []
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = agent_graph(saver, sent)
        first = app.invoke({"messages": [HumanMessage("mail them")]}, config(), durability="sync")
        assert first["__interrupt__"][0].value == "ship it?"
        out = app.invoke(Command(resume="yes"), config(), durability="sync")  # the ToolNode runs again
    assert sorted(sent) == ["a@example.com", "b@example.com"]  # once each, though the node ran twice
    results = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert results == {"call_1": "sent to a@example.com", "call_2": "sent to b@example.com", "call_3": "answer: yes"}


def test_a_decision_asked_through_an_interrupt_keeps_the_nodes_own_answers_in_place(tmp_path: Path) -> None:
    store, effects = killed_in_a_tool(tmp_path)
    with SafepointSaver(store, workspace=str(tmp_path), on_uncertain="interrupt") as saver:
        app = order_graph(saver, effects, ship=True)
        assert DECISION in app.invoke(None, config(), durability="sync")["__interrupt__"][0].value
        asked = app.invoke(Command(resume="skip"), config(), durability="sync")["__interrupt__"][0].value
        assert asked == "ship it?"
        out = app.invoke(Command(resume="yes"), config(), durability="sync")  # the node runs a third time
    assert out["status"].startswith("not known:") and out["status"].endswith("; ship: yes")
    assert effects.read_text() == "fetch book\ncharge 10\n"


def test_deleting_a_thread_removes_its_checkpoints_and_its_ledger_from_the_store(tmp_path: Path) -> None:
    from safepoint.integrations.langgraph_thread import thread_run_id
    from safepoint.integrations.langgraph_tools import tools_run_id

    calls: list[str] = []
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        for thread in ("gone", "kept"):
            form_graph(saver, calls).invoke({"age": 0}, config(thread), durability="sync")
        runs = set(saver.store.list_runs())
        assert {thread_run_id("gone"), tools_run_id("gone"), thread_run_id("kept"), tools_run_id("kept")} <= runs
        saver.delete_thread("gone")
        assert set(saver.store.list_runs()) == runs - {thread_run_id("gone"), tools_run_id("gone")}
        assert saver.get_tuple(config("gone")) is None
        form_graph(saver, calls).invoke({"age": 0}, config("gone"), durability="sync")  # a new thread, anew
    assert calls == ["check-0", "check-0", "check-0"]


def test_a_tool_node_run_again_on_the_async_path_takes_finished_calls_from_the_ledger(tmp_path: Path) -> None:
    sent: list[str] = []

    async def go() -> dict[str, Any]:
        with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
            app = agent_graph(saver, sent)
            first = await app.ainvoke({"messages": [HumanMessage("mail them")]}, config(), durability="sync")
            assert first["__interrupt__"][0].value == "ship it?"
            out: dict[str, Any] = await app.ainvoke(Command(resume="yes"), config(), durability="sync")
            return out

    out = asyncio.run(go())
    assert sorted(sent) == ["a@example.com", "b@example.com"]
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)][-1] == "answer: yes"


@pytest.mark.parametrize("thread", ["../../x", "a\x00b", "t" * 5000, "日本語 🙂 \u202e"])
def test_durable_calls_of_hostile_thread_ids(tmp_path: Path, thread: str) -> None:
    calls: list[str] = []
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        app = form_graph(saver, calls)
        app.invoke({"age": 0}, config(thread), durability="sync")
        assert app.invoke(Command(resume=7), config(thread), durability="sync") == {"age": 7}
    assert calls == ["check-0"]
    assert sorted(os.listdir(tmp_path)) == ["store"]


def test_a_node_retried_after_an_error_does_not_run_its_finished_calls_again(tmp_path: Path) -> None:
    from langgraph.types import RetryPolicy

    charged: list[int] = []
    attempts: list[int] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="never")
    def charge(amount: int) -> str:
        charged.append(amount)
        return f"charged {amount}"

    def pay(state: Order) -> dict[str, Any]:
        receipt = charge(10)
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("the shipping API timed out")  # after the charge: the node is retried
        return {"status": receipt}

    graph = StateGraph(Order)
    graph.add_node("pay", pay, retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False))
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        out = graph.compile(checkpointer=saver).invoke({"status": "new"}, config(), durability="sync")
    assert out == {"status": "charged 10"} and len(attempts) == 3
    assert charged == [10]  # once, though the node ran three times


def test_an_async_durable_tool_in_an_async_node_runs_once_across_resumes(tmp_path: Path) -> None:
    calls: list[str] = []

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    async def notify(attempt: int) -> str:
        await asyncio.sleep(0)
        calls.append(f"notify-{attempt}")
        return f"sent {attempt}"

    async def ask(state: Form) -> dict[str, Any]:
        attempt = 0
        while True:
            await notify(attempt)
            answer = interrupt("age?")
            if isinstance(answer, int):
                return {"age": answer}
            attempt += 1

    graph = StateGraph(Form)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)

    async def go() -> Any:
        with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
            app = graph.compile(checkpointer=saver)
            await app.ainvoke({"age": 0}, config(), durability="sync")
            await app.ainvoke(Command(resume="no"), config(), durability="sync")
            return await app.ainvoke(Command(resume=40), config(), durability="sync")

    assert asyncio.run(go()) == {"age": 40}
    assert calls == ["notify-0", "notify-1"]
