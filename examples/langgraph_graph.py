"""A LangGraph graph on safepoint, offline: killed inside a tool that charges a card, resumed, the card charged once.

    pip install 'safepoint[langgraph]'
    python examples/langgraph_graph.py WORKSPACE crash     # the process is SIGKILLed right after the charge
    python examples/langgraph_graph.py WORKSPACE resume    # resumes the thread: the charge waits for a decision
    python examples/langgraph_graph.py WORKSPACE skip      # a person decides: it happened, do not charge again
    python examples/langgraph_graph.py WORKSPACE replay    # ... or: it did not happen, charge again

The graph: ``quote`` (an idempotent price lookup) then ``pay`` (a non-idempotent charge). ``SafepointSaver`` keeps
the graph's checkpoints; ``durable_tool`` ledgers each call made inside a node, so when LangGraph runs ``pay`` again
after the crash, the price comes from the ledger and the charge, whose outcome the crash lost, is never run again
on its own: ``DecisionNeeded`` names it until ``skip`` or ``replay`` settles it. Each effect is a line appended to
WORKSPACE/effects.txt, printed at the end. The store is WORKSPACE/.safepoint-example (a ``file:`` store).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from safepoint.errors import DecisionNeeded, ToolFailure
from safepoint.integrations.langgraph import SafepointSaver
from safepoint.integrations.langgraph_tools import durable_tool

THREAD = {"configurable": {"thread_id": "order-42"}}


class Order(TypedDict):
    item: str
    price: int
    status: str


def build(saver: SafepointSaver, effects: Path, *, crash: bool) -> Any:
    @durable_tool(idempotency="idempotent", replay_policy="auto")
    def look_up_price(item: str) -> int:
        with effects.open("a") as f:
            f.write(f"price looked up for {item}\n")
        return 12

    @durable_tool(idempotency="non_idempotent", replay_policy="ask")
    def charge_card(amount: int) -> str:
        with effects.open("a") as f:
            f.write(f"card charged {amount}\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the charge happened; its outcome is never recorded
        return f"charged {amount}"

    def quote(state: Order) -> dict[str, Any]:
        return {"price": look_up_price(state["item"])}

    def pay(state: Order) -> dict[str, Any]:
        try:
            return {"status": charge_card(state["price"])}
        except ToolFailure as exc:  # skipped by a person: its value is not known
            return {"status": f"not charged again ({exc})"}

    graph = StateGraph(Order)
    graph.add_node("quote", quote)
    graph.add_node("pay", pay)
    graph.add_edge(START, "quote")
    graph.add_edge("quote", "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=saver)


def main(workspace: str, mode: str) -> int:
    effects = Path(workspace, "effects.txt")
    with SafepointSaver(f"file:{workspace}/.safepoint-example", workspace=workspace) as saver:
        app = build(saver, effects, crash=mode == "crash")
        if mode == "crash":
            app.invoke({"item": "book", "price": 0, "status": "new"}, THREAD, durability="sync")
            return 1  # not reached: the charge kills the process
        print("next node:", ", ".join(app.get_state(THREAD).next) or "none (the graph has finished)")
        if mode in ("skip", "replay"):
            try:
                app.invoke(None, THREAD, durability="sync")
            except DecisionNeeded as exc:
                call = str(exc).split("charge_card(")[1].split(")")[0]
                saver.settle("order-42", **{mode: [call]})
                print(f"decided: {mode} {call}")
        try:
            out = app.invoke(None, THREAD, durability="sync")
        except DecisionNeeded as exc:
            print(f"waiting for a decision: {exc}")
            print("run again with `skip` (it happened) or `replay` (charge again)")
        else:
            print("status:", out["status"])
    print(effects.read_text(), end="")
    return 0


if __name__ == "__main__":
    modes = ("crash", "resume", "skip", "replay")
    if len(sys.argv) != 3 or sys.argv[2] not in modes:
        print(f"usage: python examples/langgraph_graph.py WORKSPACE {{{'|'.join(modes)}}}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
