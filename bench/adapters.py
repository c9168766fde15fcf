"""The adapters' figures (issue 12, Performance): a LangGraph graph of 3,000 steps, each adding ~1 KB to a message
list, on ``SafepointSaver`` against LangGraph's ``SqliteSaver`` and ``InMemorySaver`` (the floor), in one run.

The same graph with no checkpointer (``no_saver``) is LangGraph's own cost per step. Per saver: the wall time of
a step at steps 1, 1,000 and 3,000 (the median of the 25 steps ending there: the disk and the 2 cores are shared),
the bytes a step adds there (averaged over the 10 steps ending there: a database grows by pages), and the store's
size at the end; the median wall and CPU time of a step in each tenth of the run (the CPU time of this process does
not count what the rest of a shared machine runs). ``durability="sync"``: every step is durable before the next.

``SqliteSaver`` stores the whole message list at every step, so its database grows with the square of the steps
(~5 GB at 3,000). It is measured up to the step count whose projected size fits ``--sqlite-budget`` (default 2 GB,
and never more than a tenth of the temporary folder's free space); its size at ``--steps`` is extrapolated from its
measured per-step growth (a least-squares line of bytes-per-step against the step: a full copy each step), and its
time at a step it did not reach from the same kind of line; the JSON says which figures are measured and which are
extrapolated. ``InMemorySaver`` keeps every version of the list in memory too: it is held to the same budget
(and an eighth of the memory available), and extrapolated the same way. ``--postgres URL`` adds
``SafepointSaver`` on a PostgreSQL store (an empty database).

Run: ``python bench/adapters.py [--steps 3000] [--sqlite-budget 1e9] [--postgres URL]``. Prints JSON with ratios
to SqliteSaver and to InMemorySaver measured in the same run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
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

MESSAGE = "lorem ipsum " * 85  # ~1 KB a step


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    steps: int


def graph(saver: Any, steps: int) -> Any:
    def talk(state: Chat) -> dict[str, Any]:
        n = state["steps"] + 1
        return {"messages": [AIMessage(content=f"reply {n} {MESSAGE}")], "steps": n}

    builder = StateGraph(Chat)
    builder.add_node("talk", talk)
    builder.add_edge(START, "talk")
    builder.add_conditional_edges("talk", lambda s: END if s["steps"] >= steps else "talk")
    return builder.compile(checkpointer=saver)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(saver: Any, size: Callable[[], int], steps: int, marks: list[int]) -> dict[str, Any]:
    """Runs ``steps`` steps; the size is read (untimed) at the steps around the marks and every 50 steps."""
    sampled = {0, steps} | {k for k in range(50, steps + 1, 50)}
    for mark in marks:
        sampled |= {mark, max(0, mark - 10)}
    cfg = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    sizes = {0: size()}
    times: list[float] = []
    cpu: list[float] = []  # this process's CPU time per step: what the code costs, whatever else the machine runs
    durability = {"durability": "sync"} if saver is not None else {}
    stream = graph(saver, steps).stream({"messages": [HumanMessage("go")], "steps": 0}, cfg, **durability)
    started = time.perf_counter()
    while True:
        start, start_cpu = time.perf_counter(), time.process_time()
        if next(stream, None) is None:
            break
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)  # the step, its put and its writes (the size is not timed)
        if len(times) in sampled:
            sizes[len(times)] = size()
    reached = [m for m in marks if m <= len(times)]
    return {
        "steps": len(times),
        "seconds": round(time.perf_counter() - started, 2),
        "ms_at_step": {m: round(statistics.median(times[max(0, m - 25) : m]) * 1000, 3) for m in reached},
        "bytes_per_step_at": {m: (sizes[m] - sizes[max(0, m - 10)]) // min(m, 10) for m in reached},
        "total_bytes": sizes[max(sizes)],
        # flatness at a glance: the median step of each tenth of the run
        "ms_median_by_tenth": [
            round(statistics.median(times[i * len(times) // 10 : (i + 1) * len(times) // 10]) * 1000, 2)
            for i in range(10)
        ]
        if len(times) >= 10
        else [],
        "cpu_ms_median_by_tenth": [
            round(statistics.median(cpu[i * len(cpu) // 10 : (i + 1) * len(cpu) // 10]) * 1000, 2) for i in range(10)
        ]
        if len(cpu) >= 10
        else [],
        "_sizes": sizes,
        "_times": times,
    }


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points) or 1.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def extrapolate(result: dict[str, Any], steps: int, marks: list[int]) -> dict[str, Any]:
    """Its size and times at the steps it did not reach, from lines fitted to what it measured."""
    sizes: dict[int, int] = result["_sizes"]
    known = sorted(k for k in sizes if k >= 50)
    # Bytes per step over each window between two samples, placed at the window's middle step.
    growth = [((prev + k) / 2, (sizes[k] - sizes[prev]) / (k - prev)) for prev, k in itertools.pairwise(known)]
    a, b = line(growth[len(growth) // 4 :])  # past the first pages' noise
    measured_steps = result["steps"]
    total = sizes[measured_steps] + sum(a + b * k for k in range(measured_steps + 1, steps + 1))
    times = result["_times"]
    ta, tb = line([(k + 1, t) for k, t in enumerate(times) if k >= len(times) // 4])
    fitted = sizes[known[0]] + sum(a + b * k for k in range(known[0] + 1, measured_steps + 1))
    out: dict[str, Any] = {
        "measured_steps": measured_steps,
        "fit_check_total_at_measured_steps": {"measured": sizes[measured_steps], "fitted": round(fitted)},
        "bytes_per_step_line": {"intercept": round(a), "per_step": round(b, 2)},
        "total_bytes_at_steps": round(total),
        "ms_at_step": {m: round((ta + tb * m) * 1000, 3) for m in marks if m > measured_steps},
        "bytes_per_step_at": {m: round(a + b * m) for m in marks if m > measured_steps},
        "how": "least-squares lines of bytes per step and seconds per step against the step, fitted to the last "
        "three quarters of the measured steps (the saver stores the whole list every step)",
    }
    return out


def available_memory() -> float:
    try:
        with open("/proc/meminfo") as info:
            for row in info:
                if row.startswith("MemAvailable:"):
                    return int(row.split()[1]) * 1024.0
    except OSError:
        pass
    return 4e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--sqlite-budget", type=float, default=2e9, help="bytes SqliteSaver's database may reach")
    parser.add_argument("--postgres", default=None, help="an empty PostgreSQL database's URL (optional)")
    parser.add_argument("--only-safepoint", action="store_true", help="skip SqliteSaver and InMemorySaver (no ratios)")
    args = parser.parse_args()
    steps: int = args.steps
    marks = sorted({1, 1000, steps} & set(range(1, steps + 1)))
    results: dict[str, Any] = {"steps": steps, "message_bytes": len(MESSAGE) + 10, "marks": marks}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        free = shutil.disk_usage(tmp).free
        budget = min(args.sqlite_budget, free / 10)
        # A full copy per step: ~message_bytes * 1.15 * k at step k, so n steps take about that * n^2 / 2.
        per_k = results["message_bytes"] * 1.15
        sqlite_steps = min(steps, int((2 * budget / per_k) ** 0.5))
        results["tmp_free_bytes"] = free
        results["sqlite_budget_bytes"] = int(budget)

        with SafepointSaver(f"file:{folder}/store", workspace=tmp) as saver:
            results["safepoint_file"] = measure(saver, lambda: folder_bytes(folder / "store"), steps, marks)
        if args.postgres:
            import psycopg

            def pg_bytes() -> int:
                with psycopg.connect(args.postgres) as connection:
                    row = connection.execute("select pg_database_size(current_database())").fetchone()
                return int(row[0]) if row else 0

            with SafepointSaver(args.postgres, workspace=tmp) as saver:
                base = pg_bytes()
                results["safepoint_postgres"] = measure(saver, lambda: pg_bytes() - base, steps, marks)

        if args.only_safepoint:
            for result in results.values():
                if isinstance(result, dict):
                    result.pop("_sizes", None)
                    result.pop("_times", None)
            print(json.dumps(results, indent=2))
            return
        database = folder / "sqlite.db"
        connection = sqlite3.connect(database, check_same_thread=False)
        sqlite_saver = SqliteSaver(connection)

        def sqlite_bytes() -> int:
            # The database's pages as the saver's own connection sees them (its write-ahead log included): the
            # files' sizes would count the log's reused frames and miss what it has not checkpointed yet.
            with sqlite_saver.lock:
                pages = connection.execute("pragma page_count").fetchone()[0]
                size = connection.execute("pragma page_size").fetchone()[0]
            return int(pages) * int(size)

        results["sqlite"] = measure(sqlite_saver, sqlite_bytes, sqlite_steps, marks)
        connection.close()
        if sqlite_steps < steps:
            results["sqlite"]["extrapolated"] = extrapolate(results["sqlite"], steps, marks)

        # InMemorySaver keeps every version of the list too (in this process's memory): held to the same budget.
        memory_steps = min(steps, int((2 * min(budget, available_memory() / 8) / per_k) ** 0.5))
        memory = InMemorySaver()

        def memory_bytes() -> int:
            values = sum(len(v[1]) for v in memory.blobs.values())
            checkpoints = sum(
                len(c[0][1]) + len(c[1][1]) for t in memory.storage.values() for ns in t.values() for c in ns.values()
            )
            return values + checkpoints

        # The graph with no checkpointer: LangGraph's own cost per step (its reducer walks the whole list).
        results["no_saver"] = measure(None, lambda: 0, steps, marks)
        results["memory"] = measure(memory, memory_bytes, memory_steps, marks)
        if memory_steps < steps:
            results["memory"]["extrapolated"] = extrapolate(results["memory"], steps, marks)

    sqlite = results["sqlite"]
    extra = sqlite.get("extrapolated", {})
    sqlite_total = extra.get("total_bytes_at_steps", sqlite["total_bytes"])
    sqlite_ms = {**sqlite["ms_at_step"], **extra.get("ms_at_step", {})}
    memory_ms = {**results["memory"]["ms_at_step"], **results["memory"].get("extrapolated", {}).get("ms_at_step", {})}
    for name in ("safepoint_file", "safepoint_postgres"):
        ours = results.get(name)
        if ours is None:
            continue
        results[f"{name}_ratios"] = {
            "sqlite_total_bytes_over_ours": round(sqlite_total / max(1, ours["total_bytes"]), 1),
            "ms_over_sqlite_at_step": {m: round(ours["ms_at_step"][m] / sqlite_ms[m], 3) for m in marks},
            "ms_over_memory_at_step": {m: round(ours["ms_at_step"][m] / memory_ms[m], 2) for m in marks},
            "cpu_ms_last_tenth_over_first": round(
                ours["cpu_ms_median_by_tenth"][-1] / ours["cpu_ms_median_by_tenth"][0], 2
            ),
            "no_saver_cpu_ms_last_tenth_over_first": round(
                results["no_saver"]["cpu_ms_median_by_tenth"][-1] / results["no_saver"]["cpu_ms_median_by_tenth"][0], 2
            ),
            "ms_last_over_first": round(ours["ms_at_step"][steps] / ours["ms_at_step"][1], 2),
            "ms_last_over_step_1000": round(ours["ms_at_step"][steps] / ours["ms_at_step"][marks[-2]], 2)
            if len(marks) > 2
            else None,
            "sqlite_figures_at_steps": "extrapolated" if extra else "measured",
            "memory_figures_at_steps": "extrapolated" if "extrapolated" in results["memory"] else "measured",
        }
    for result in results.values():
        if isinstance(result, dict):
            result.pop("_sizes", None)
            result.pop("_times", None)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
