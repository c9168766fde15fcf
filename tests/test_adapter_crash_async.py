"""Real processes killed inside a side-effecting tool on the async path (the bookkeeping on its own thread, the
tools on the loop), then resumed: every effect happens at most once, a finished call is taken from the ledger and
the killed one waits for a decision or is reported uncertain, never run again on its own.

One own loop with many ``acall``s in flight at once (``asyncio.gather``), and one async LangGraph graph
(``ainvoke``, an async ``durable_tool`` in an async node).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

import safepoint
from safepoint import ToolContext
from safepoint.engine.session import load_view
from safepoint.errors import DecisionNeeded, ToolFailure

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")
CALLS = 8
KILLED = 3


def effect_tool(effects: Path, *, kill: bool) -> Any:
    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    async def effect(ctx: ToolContext, n: int) -> str:
        await asyncio.sleep(0.02 * n)
        with open(effects, "a") as f:
            f.write(f"effect {n}\n")
        if kill and n == KILLED:
            os.kill(os.getpid(), signal.SIGKILL)  # its effect happened; its outcome is never recorded
        return f"did {n}"

    return effect


async def all_calls(run: safepoint.Run) -> list[Any]:
    await run.astep()
    return await asyncio.gather(
        *(run.acall_result("effect", {"n": n}, call_id=f"e{n}") for n in range(CALLS)), return_exceptions=True
    )


def own_loop_child(store: str, workspace: str, effects: str) -> None:
    tm = safepoint.open(store, workspace=workspace)
    run = tm.start("t", tools=[effect_tool(Path(effects), kill=True)], builtins=False, run_id="r")
    asyncio.run(all_calls(run))


def child(function: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    code = (
        f"import sys; sys.path[:0] = [{SRC!r}, {str(HERE)!r}]; import test_adapter_crash_async as t; "
        f"t.{function}(*{args!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, timeout=120
    )


@pytest.fixture(params=["file", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file:{tmp_path}/store"
    url: str = request.getfixturevalue("fresh_url")
    return url


def test_an_own_loop_killed_with_calls_in_flight_resumes_with_each_effect_at_most_once(
    store_url: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    done = child("own_loop_child", store_url, str(tmp_path), str(effects))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    before = effects.read_text().splitlines()
    assert f"effect {KILLED}" in before
    tm = safepoint.open(store_url, workspace=str(tmp_path))
    crashed = load_view(tm.store, "r").ledger
    assert crashed[f"e{KILLED}"].status == "started"  # durable before the tool ran, no outcome after it
    finished_before = {c for c, e in crashed.items() if e.status == "succeeded"}
    with tm.resume("r", tools=[effect_tool(effects, kill=False)], builtins=False) as run:
        results = asyncio.run(all_calls(run))
    lines = effects.read_text().splitlines()
    assert all(lines.count(f"effect {n}") <= 1 for n in range(CALLS)), lines  # nothing happened twice
    by_id = {r.call_id: r for r in results}
    assert by_id[f"e{KILLED}"].status == "uncertain" and "NOT run again" in by_id[f"e{KILLED}"].observation
    for call_id in finished_before:
        assert by_id[call_id].value == f"did {call_id[1:]}"  # taken from the ledger
    for n in range(CALLS):
        if n != KILLED and by_id[f"e{n}"].status == "succeeded":
            assert lines.count(f"effect {n}") == 1
    assert {e.status for e in load_view(tm.store, "r").ledger.values()} <= {"succeeded", "uncertain"}


# LangGraph, async ---------------------------------------------------------------------------------------------------
class Order(TypedDict):
    status: str


def order_graph(saver: Any, effects: Path, *, kill: bool) -> Any:
    from langgraph.graph import END, START, StateGraph

    from safepoint.integrations.langgraph import durable_tool

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    async def charge_card(amount: int) -> str:
        await asyncio.sleep(0)
        with open(effects, "a") as f:
            f.write(f"charge {amount}\n")
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"charged {amount}"

    async def pay(state: Order) -> dict[str, Any]:
        return {"status": await charge_card(10)}

    graph = StateGraph(Order)
    graph.add_node("pay", pay)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=saver)


THREAD = {"configurable": {"thread_id": "t"}}


def langgraph_child(store: str, workspace: str, effects: str) -> None:
    from safepoint.integrations.langgraph import SafepointSaver

    async def go() -> None:
        async with asyncio.timeout(60):
            saver = SafepointSaver(store, workspace=workspace)
            await order_graph(saver, Path(effects), kill=True).ainvoke({"status": "new"}, THREAD, durability="sync")

    asyncio.run(go())


def test_an_async_graph_killed_in_a_charge_waits_for_a_decision_then_charges_once(
    store_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("langgraph")
    from safepoint.integrations.langgraph import SafepointSaver

    effects = tmp_path / "effects.txt"
    done = child("langgraph_child", store_url, str(tmp_path), str(effects))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert effects.read_text() == "charge 10\n"

    async def resume() -> dict[str, Any]:
        with SafepointSaver(store_url, workspace=str(tmp_path)) as saver:
            app = order_graph(saver, effects, kill=False)
            with pytest.raises(DecisionNeeded, match=r"charge_card\(lg-charge_card-"):
                await app.ainvoke(None, THREAD, durability="sync")
            assert effects.read_text() == "charge 10\n"  # nothing ran while it waits
            with pytest.raises(DecisionNeeded) as waiting:
                await app.ainvoke(None, THREAD, durability="sync")
            call = str(waiting.value).split("charge_card(")[1].split(")")[0]
            saver.settle("t", skip=[call])
            with pytest.raises(ToolFailure, match="NOT run again"):  # skipped: the node is told its value is unknown
                await app.ainvoke(None, THREAD, durability="sync")
            return {}

    asyncio.run(resume())
    assert effects.read_text() == "charge 10\n"  # once
