"""SafepointSaver against LangGraph's own savers: bytes and time per step of a growing messages channel.

One graph, one node adding a ~1 KB ``AIMessage`` to ``messages`` per step (``add_messages``), ``--steps`` steps
(default 1,000), ``durability="sync"``, run once on each saver in this process:

* ``safepoint_file``: ``SafepointSaver`` on a file store (fsync'd per step);
* ``sqlite``: ``SqliteSaver`` on a file database (it stores the whole checkpoint, every value, per step);
* ``memory``: ``InMemorySaver`` (the floor for time; its "bytes" are the serialized values it holds).

Per saver: the bytes a step adds at steps 1, 10, 100 and ``--steps`` (file sizes, averaged over the 10 steps
ending there), the
total, and the wall time of those steps (median of the 5 steps ending there, as the disk is shared). Ratios are
to SqliteSaver measured in the same run. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from safepoint.integrations.langgraph import SafepointSaver


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int


def graph(saver: Any, steps: int) -> Any:
    def talk(state: Chat) -> dict[str, Any]:
        n = state["steps"] + 1
        return {"messages": [AIMessage(content=f"reply {n} " + "lorem ipsum " * 85)], "steps": n}

    builder = StateGraph(Chat)
    builder.add_node("talk", talk)
    builder.add_edge(START, "talk")
    builder.add_conditional_edges("talk", lambda s: END if s["steps"] >= steps else "talk")
    return builder.compile(checkpointer=saver)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(saver: Any, size: Callable[[], int], steps: int) -> dict[str, Any]:
    marks = sorted({1, 10, 100, steps} & set(range(1, steps + 1)))
    cfg = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    sizes = [size()]
    times: list[float] = []
    stream = graph(saver, steps).stream({"messages": [HumanMessage("go")], "steps": 0}, cfg, durability="sync")
    while True:
        start = time.perf_counter()
        if next(stream, None) is None:
            break
        times.append(time.perf_counter() - start)  # the step, its put and its writes (the size is not timed)
        sizes.append(size())
    return {
        # averaged over the 10 steps ending there: a database file grows by pages, not by records
        "bytes_per_step_at": {m: (sizes[m] - sizes[max(0, m - 10)]) // min(m, 10) for m in marks},
        "ms_at_step": {m: round(statistics.median(times[max(0, m - 5) : m]) * 1000, 3) for m in marks},
        "total_bytes": sizes[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    steps = parser.parse_args().steps
    results: dict[str, Any] = {"steps": steps, "message_bytes": len("lorem ipsum " * 85) + 10}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with SafepointSaver(f"file:{folder}/store", workspace=tmp) as saver:
            results["safepoint_file"] = measure(saver, lambda: folder_bytes(folder / "store"), steps)
        database = folder / "sqlite.db"
        connection = sqlite3.connect(database, check_same_thread=False)
        results["sqlite"] = measure(
            SqliteSaver(connection), lambda: sum(os.path.getsize(p) for p in folder.glob("sqlite.db*")), steps
        )
        connection.close()
        memory = InMemorySaver()

        def memory_bytes() -> int:
            values = sum(len(v[1]) for v in memory.blobs.values())
            checkpoints = sum(
                len(c[0][1]) + len(c[1][1]) for t in memory.storage.values() for ns in t.values() for c in ns.values()
            )
            return values + checkpoints

        results["memory"] = measure(memory, memory_bytes, steps)
    ours, sqlite = results["safepoint_file"], results["sqlite"]
    results["ratios_to_sqlite"] = {
        "total_bytes": round(ours["total_bytes"] / sqlite["total_bytes"], 4),
        "bytes_per_step_at_last": round(
            ours["bytes_per_step_at"][steps] / max(1, sqlite["bytes_per_step_at"][steps]), 4
        ),
        "ms_at_last_step": round(ours["ms_at_step"][steps] / sqlite["ms_at_step"][steps], 3),
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
