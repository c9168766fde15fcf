"""How long an ``acall`` stalls the event loop (issue 12 §5): the longest gap between a ticker's ticks.

A ticker task sleeps 1 ms in a loop and records the longest gap between two of its ticks while one operation runs
on the same loop: ``acall`` of ``write_file`` (a new 4,000-line file, then a one-line change to it), ``apply_patch``
on a 4,000-line file, ``run_command``, a Python tool (blocking and async), ``astep`` and ``acheckpoint``. The
baseline, measured in the same run: the same operation done synchronously on the loop (``run.call``, ``step``,
``checkpoint``), which stalls the loop for as long as it takes. Per operation: the stall off the loop, the stall on
it, their ratio, and the operation's own time; ``idle_floor`` is the ticker's longest gap with nothing else running
(the machine's own scheduling noise). Each figure is the median of ``--repeat`` rounds (the machine is
shared).

Run: ``python bench/async_loop.py [--repeat 5] [--postgres URL]`` (a URL of an empty database adds the
PostgreSQL store). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import safepoint
from safepoint import ToolContext

LINES = 4000


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
def blocking_tool(ctx: ToolContext, n: int) -> int:
    return n


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
async def async_tool(ctx: ToolContext, n: int) -> int:
    return n


def big(tag: str) -> str:
    return "".join(f"line {i} of a generated file {tag}\n" for i in range(LINES))


async def stall_during(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """The longest gap between ticks while ``work`` runs, and how long it ran (seconds)."""
    longest = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.005)
    longest = 0.0  # the ticker's own start is not the operation's
    start = time.perf_counter()
    await work()
    took = time.perf_counter() - start
    done.set()
    await ticking
    return longest, took


def operations(run: safepoint.Run, workspace: Path, n: int) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (the async form, the sync form), each a fresh call (its own call id and file)."""
    ids = itertools.count()
    (workspace / f"base{n}a.txt").write_text(big("base"))
    (workspace / f"base{n}s.txt").write_text(big("base"))

    def patch(path: str) -> str:
        hunk = "@@ -1,2 +1,2 @@\n-line 0 of a generated file base\n+line 0 changed\n line 1 of a generated file base\n"
        return f"--- a/{path}\n+++ b/{path}\n{hunk}"

    def both(tool: str, args: Callable[[str], dict[str, Any]]) -> tuple[Callable[[], Any], Callable[[], Any]]:
        key = f"{tool}-{next(ids)}-{n}"

        async def on_thread() -> Any:
            return await run.acall_result(tool, args("a"), call_id=f"{key}-a")

        async def on_loop() -> Any:
            return run.call_result(tool, args("s"), call_id=f"{key}-s")

        return on_thread, on_loop

    async def astep() -> Any:
        return await run.astep()

    async def step() -> Any:
        return run.step()

    async def acheckpoint() -> Any:
        return await run.acheckpoint()

    async def checkpoint() -> Any:
        return run.checkpoint()

    return {
        "write_file_new_4000_lines": both(
            "write_file", lambda s: {"path": f"new{n}{s}.txt", "content": big(f"new {n}")}
        ),
        "write_file_edit_4000_lines": both(
            "write_file",
            lambda s: {"path": f"base{n}{s}.txt", "content": big("base").replace("line 7 ", "line seven ")},
        ),
        "apply_patch_4000_lines": both("apply_patch", lambda s: {"patch": patch(f"base{n}{s}.txt")}),
        "run_command": both("run_command", lambda s: {"command": f"echo {n} > out{n}{s}.txt"}),
        "python_tool_blocking": both("blocking_tool", lambda s: {"n": n}),
        "python_tool_async": (
            lambda: run.acall_result("async_tool", {"n": n}, call_id=f"async-{n}-a"),
            lambda: asyncio.sleep(0),  # an async tool cannot be called synchronously on a running loop
        ),
        "idle_floor": (lambda: asyncio.sleep(0.02), lambda: asyncio.sleep(0.02)),  # the ticker alone: the floor
        "step": (astep, step),
        "checkpoint": (acheckpoint, checkpoint),
    }


def measure(url: str, workspace: Path, repeat: int) -> dict[str, Any]:
    tm = safepoint.open(url, workspace=str(workspace))
    rounds: dict[str, list[tuple[float, float, float, float]]] = {}
    with tm.start("bench", tools=[blocking_tool, async_tool], run_id="bench") as run:

        async def go() -> None:
            for n in range(repeat):
                await run.astep()
                for name, (off_loop, on_loop) in operations(run, workspace, n).items():
                    stall, took = await stall_during(off_loop)
                    sync_stall, sync_took = await stall_during(on_loop)
                    rounds.setdefault(name, []).append((stall, took, sync_stall, sync_took))

        asyncio.run(go())
    out: dict[str, Any] = {}
    for name, values in rounds.items():
        stall, took, sync_stall, _ = (statistics.median(v[i] for v in values) for i in range(4))
        out[name] = {
            "stall_ms": round(stall * 1000, 2),
            "call_ms": round(took * 1000, 2),
            "stall_ms_on_the_loop": round(sync_stall * 1000, 2),
            "stall_over_on_the_loop": round(stall / sync_stall, 3)
            if name not in ("python_tool_async", "idle_floor")
            else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres", default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {"lines": LINES, "repeat": args.repeat, "tick_ms": 1}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        results["file"] = measure(f"file:{tmp}/store", workspace, args.repeat)
        if args.postgres:
            pg_workspace = Path(tmp) / "pg"
            pg_workspace.mkdir()
            results["postgres"] = measure(args.postgres, pg_workspace, args.repeat)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
