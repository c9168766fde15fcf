"""What the view snapshot's write costs the tool calls of a long run (issue 10: a write paused the call that made
it due for 3-5 s at 50,000 calls).

What it measures: for each size in ``--calls`` (default 10,000 and 50,000), one run of that many trivial ledgered
calls through the library (``Run.call`` of an idempotent tool returning ``"ok"``, ten to a step: ``Run.step``), each
call timed on its own (``perf_counter_ns`` around the step and the call), in two modes, each in a fresh child
process on a fresh store, in the same run of this script:

- ``inline``: the old way, the snapshot written on the call's thread by the call that made it due
  (``engine.snapshot_writer.INLINE``, set only here);
- ``background``: the session's background writer (``engine.snapshot_writer.SnapshotWriter``);
- ``unpaced``: the same writer without its pauses in the fold (``store.view_index.PACE`` out of reach);
- ``every_1000``: the background writer at half the interval (``SNAPSHOT_EVERY`` 1,000 records, not 2,000: a
  resume's tail halved, for twice the writes; ``every_1000_over_2000`` compares it with ``background``).

For each: ``calls_ms`` (median, p99, max of the per-call latency, in ms), ``during_writes_ms`` (the same over
the calls that began or ended while a background write ran: what the writer's thread, which holds the GIL while
it decodes, folds and encodes, costs the calls beside it; none inline, where the write is in the call),
``slowest`` (the 10 slowest calls, with their index), ``total_s`` (the whole loop), ``snapshots`` (written during
the loop) and ``snapshot_covers`` (the seq the last one covers, against ``log_seq``, the log's end). ``ratios``
gives background over inline for the max, the p99, the median and the total; ``paced_over_unpaced_during_writes``
the calls' latency while a write runs, background over unpaced. ``pressure``: load and PSI before
and after (a shared machine inflates every figure; compare the two modes of one run, not runs of different days).

Run: ``.venv/bin/python bench/snapshot_pause.py`` (a few minutes), or ``--calls 10000`` for a quick look;
``--store postgresql://...`` for a PostgreSQL store (a fresh schema is not made: give an empty database). Prints
one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from measure import logger, machine_info, percentile, pressure

import safepoint
from safepoint.engine import snapshot_writer
from safepoint.engine.tools import tool
from safepoint.store import view_index

log = logger("snapshot_pause")
MODES = ("inline", "background", "unpaced", "every_1000")


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx: Any, n: int = 0) -> str:
    return "ok"


def child(mode: str, calls: int, store: str | None, workspace: str) -> dict[str, Any]:
    """One run of ``calls`` calls in ``mode``; its figures."""
    snapshot_writer.INLINE = mode == "inline"
    if mode == "unpaced":  # the background writer without its pauses: what they buy the calls beside it
        view_index.PACE = 1 << 62
    if mode == "every_1000":
        view_index.SNAPSHOT_EVERY = 1000
    tm = safepoint.open(store, workspace=workspace)
    run = tm.start("bench", tools=[noop], run_id=f"pause-{mode}-{calls}")
    run_id = run.run_id
    writer = run.session._snapshots  # the benchmark reads the writer's state and count
    assert writer is not None
    times: list[tuple[int, int]] = []
    during: list[int] = []  # the calls that began or ended while a background write ran
    clock = time.perf_counter_ns
    begin = clock()
    for index in range(calls):
        t0 = clock()
        running = writer._running
        if index % 10 == 0:
            run.step()
        run.call("noop", {"n": index}, call_id=f"c{index}")
        took = clock() - t0
        times.append((took, index))
        if running or writer._running:
            during.append(took)
    total = clock() - begin
    written = writer.written
    writer.close()  # the last write in flight (not timed): what it covers is reported
    covers = tm.store.view_snapshot_seq(run_id)
    end = tm.store.log_position(run_id)
    values = sorted(ns / 1e6 for ns, _ in times)
    overlapped = sorted(ns / 1e6 for ns in during)
    slowest = sorted(times, reverse=True)[:10]
    result = {
        "calls_ms": {
            "median": round(percentile(values, 50), 3),
            "p99": round(percentile(values, 99), 3),
            "max": round(values[-1], 1),
        },
        "during_writes_ms": {
            "calls": len(overlapped),
            "median": round(percentile(overlapped, 50), 3) if overlapped else None,
            "p99": round(percentile(overlapped, 99), 3) if overlapped else None,
            "max": round(overlapped[-1], 1) if overlapped else None,
        },
        "slowest": [{"call": index, "ms": round(ns / 1e6, 1)} for ns, index in slowest],
        "total_s": round(total / 1e9, 2),
        "snapshots": written,
        "snapshot_covers": covers,
        "log_seq": end.seq if end is not None else None,
    }
    os._exit(print(json.dumps(result), flush=True) or 0)  # no close: the run's close is not what is measured


def measure(mode: str, calls: int, store: str | None, parent: str) -> dict[str, Any]:
    workspace = tempfile.mkdtemp(prefix=f"{mode}-{calls}-", dir=parent)
    where = store or os.path.join(workspace, ".safepoint")
    command = [sys.executable, __file__, "--child", mode, "--calls", str(calls), "--workspace", workspace]
    done = subprocess.run([*command, "--store", where], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def ratio(new: float, old: float) -> float | None:
    return round(new / old, 3) if old else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", default="10000,50000", help="comma-separated run sizes")
    parser.add_argument("--store", help="a store URL or folder (default: a fresh folder per run)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default: all)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.calls.split(",")]
    if args.child:
        child(args.child, sizes[0], args.store, args.workspace)
        return
    parent = tempfile.mkdtemp(prefix="safepoint-pause-")
    report: dict[str, Any] = {"machine": machine_info(parent), "pressure_before": pressure(), "sizes": {}}
    try:
        for calls in sizes:
            found: dict[str, Any] = {}
            for mode in args.modes.split(","):
                log(f"{calls} calls, {mode}")
                found[mode] = measure(mode, calls, args.store, parent)
            if "every_1000" in found and "background" in found:
                now, before = found["every_1000"], found["background"]
                found["every_1000_over_2000"] = {
                    "median": ratio(now["calls_ms"]["median"], before["calls_ms"]["median"]),
                    "p99": ratio(now["calls_ms"]["p99"], before["calls_ms"]["p99"]),
                    "total": ratio(now["total_s"], before["total_s"]),
                }
            if not {"inline", "background", "unpaced"} <= found.keys():
                report["sizes"][str(calls)] = found
                continue
            old, new, unpaced = found["inline"], found["background"], found["unpaced"]
            found["ratios"] = {
                "max": ratio(new["calls_ms"]["max"], old["calls_ms"]["max"]),
                "p99": ratio(new["calls_ms"]["p99"], old["calls_ms"]["p99"]),
                "median": ratio(new["calls_ms"]["median"], old["calls_ms"]["median"]),
                "total": ratio(new["total_s"], old["total_s"]),
            }
            during, without = new["during_writes_ms"], unpaced["during_writes_ms"]
            found["paced_over_unpaced_during_writes"] = {
                key: ratio(during[key], without[key]) if during[key] and without[key] else None
                for key in ("median", "p99", "max")
            }
            report["sizes"][str(calls)] = found
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    report["pressure_after"] = pressure()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
