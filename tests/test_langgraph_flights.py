"""A LangGraph node run again while its first run's calls are still in flight (issue 12 §1): the async ``ToolNode``
gathers a message's calls, and when one stops at ``interrupt()`` the node ends while the others go on; the answered
interrupt runs the node again. A call still in flight in this process is waited for and its outcome taken from the
ledger, never refused as uncertain (it is not a crash) nor run twice."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from safepoint.errors import ConfigError
from safepoint.integrations.flights import Flights
from safepoint.integrations.langgraph import DurableCall, SafepointSaver, ToolNodeLedger
from tests.test_langgraph_tools import Chat, config


def test_the_async_tool_node_rerun_waits_for_its_calls_still_in_flight(tmp_path: Path) -> None:
    """Forced interleaving: ``send_email`` blocks until the node's second run has reached the same call, so the first
    ``ainvoke`` returns (at the interrupt) with the email still being sent. The second run must wait for it: the
    email goes once, and the node's answer is the recorded "sent", not "uncertain". On the code before, the second
    run found ``started`` and refused the call as uncertain (the ToolNode raised ``ToolFailure``)."""
    sent: list[str] = []
    release = threading.Event()
    reached: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        assert release.wait(30), "the node's second run never came"
        sent.append(to)
        return f"sent to {to}"

    @tool
    def confirm(question: str) -> str:
        """Ask a person."""
        return f"answer: {interrupt(question)}"

    calls = [
        {"name": "send_email", "args": {"to": "a@example.com"}, "id": "call_1"},
        {"name": "confirm", "args": {"question": "ship it?"}, "id": "call_3"},
    ]
    model = FakeMessagesListChatModel(responses=[AIMessage(content="", tool_calls=calls)])
    ledger = ToolNodeLedger(tools={"confirm": None}, default=DurableCall(replay_policy="never"))

    async def watched(request: Any, execute: Any) -> Any:
        """The ledger's own ``acall``; the second time call_1 comes (the node's re-run), its first run is let go
        once the re-run has been given the chance to decide the call on its own (it must wait instead)."""
        reached.append(request.tool_call["id"])
        if reached.count("call_1") < 2:
            return await ledger.acall(request, execute)
        again = asyncio.ensure_future(ledger.acall(request, execute))
        await asyncio.wait({again}, timeout=0.5)  # the code before decided here: "uncertain", at once
        release.set()
        return await again

    def think(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    async def go() -> dict[str, Any]:
        with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
            graph = StateGraph(Chat)
            graph.add_node("think", think)
            graph.add_node("tools", ToolNode([send_email, confirm], wrap_tool_call=ledger, awrap_tool_call=watched))
            graph.add_edge(START, "think")
            graph.add_edge("think", "tools")
            graph.add_edge("tools", END)
            app = graph.compile(checkpointer=saver)
            first = await app.ainvoke({"messages": [HumanMessage("mail them")]}, config(), durability="sync")
            assert first["__interrupt__"][0].value == "ship it?" and sent == []  # still sending
            out: dict[str, Any] = await app.ainvoke(Command(resume="yes"), config(), durability="sync")
            statuses = {e.call_id.rsplit("-", 1)[1]: e.status for e in saver.tools.open("t").session.ledger.values()}
            assert statuses == {"call_1": "succeeded"}
            return out

    out = asyncio.run(go())
    assert sent == ["a@example.com"]
    answers = {m.tool_call_id: (m.content, m.status) for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers == {"call_1": ("sent to a@example.com", "success"), "call_3": ("answer: yes", "success")}


def test_a_flight_is_waited_for_by_another_thread_and_refused_from_inside_itself() -> None:
    flights = Flights()
    order: list[str] = []
    inside = threading.Event()
    go_on = threading.Event()

    def first() -> None:
        with flights.hold("k"):
            inside.set()
            go_on.wait(30)
            order.append("first")

    def second() -> None:
        inside.wait(30)
        with flights.hold("k"):
            order.append("second")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    inside.wait(30)
    with flights.hold("other"):  # another key never waits
        order.append("other")
    go_on.set()
    for thread in threads:
        thread.join(30)
    assert order == ["other", "first", "second"]
    with flights.hold("k"), pytest.raises(ConfigError, match="from inside itself"), flights.hold("k"):
        pass

    async def nested() -> None:
        async with flights.ahold("a"):
            with pytest.raises(ConfigError, match="from inside itself"):
                async with flights.ahold("a"):
                    pass

    asyncio.run(nested())
    with flights.hold("k"):  # every flight above was let go
        pass


def test_a_call_cancelled_while_its_tool_runs_leaves_the_ledger_saying_so(tmp_path: Path) -> None:
    """The orphaned calls above are cancelled when their event loop ends (``asyncio.run`` cancels every task left).
    Cancelled while its tool ran, a call is ``uncertain`` at once (the engine's promise for ``acall``), never left
    ``started`` as if this live process had crashed, and the saver's lock is free for the next call and for
    ``close``. On the code before, the call stayed ``started``."""
    running = threading.Event()
    release = threading.Event()

    def blocking() -> str:
        running.set()
        release.wait(30)
        return "sent"

    async def handler() -> str:
        return await asyncio.to_thread(blocking)

    async def quick() -> str:
        return "ok"

    policy = DurableCall(replay_policy="never")
    with SafepointSaver(f"file:{tmp_path}/store", workspace=str(tmp_path)) as saver:
        runs = saver.tools

        async def go() -> str:
            task = asyncio.ensure_future(runs.acall("t", "lg-send-x-1", "x-1", "send", {}, policy, handler))
            await asyncio.to_thread(running.wait, 30)
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            return str(await runs.acall("t", "lg-send-x-2", "x-2", "send", {}, policy, quick))

        assert asyncio.run(go()) == "ok"
        statuses = {e.call_id: e.status for e in runs.open("t").session.ledger.values()}
    assert statuses == {"lg-send-x-1": "uncertain", "lg-send-x-2": "succeeded"}


def test_a_flight_whose_event_loop_was_closed_is_not_waited_for() -> None:
    """An app drives a graph with ``loop.run_until_complete`` and closes the loop with a call still pending: its task
    never ends, so nothing gives its key up. The same call made later on another loop goes on (and meets the
    ledger's ``started``) instead of waiting for ever."""
    flights = Flights()
    forever = threading.Event()

    async def stuck() -> None:
        async with flights.ahold("k"):
            await asyncio.to_thread(forever.wait)  # pending when its loop is closed

    loop = asyncio.new_event_loop()
    task = loop.create_task(stuck())
    loop.run_until_complete(asyncio.sleep(0.05))  # the task holds the key now
    loop.close()  # the task is left pending: its `finally` never runs
    assert not task.done()

    async def again() -> str:
        async with flights.ahold("k"):
            return "went on"

    try:
        assert asyncio.run(asyncio.wait_for(again(), 30)) == "went on"
    finally:
        forever.set()
        task.get_coro().close()  # what the garbage collector would do: its `finally` gives up nothing now
