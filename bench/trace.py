"""What the trace costs per tool call: the same calls with tracing on and off, in the same run.

Cases (own-loop API, file store in a temporary workspace, ``--calls`` calls each, default 1,000):

* ``read_file`` of a 2 KB file and ``write_file`` of 2 KB: each call through ``Run.call`` with the trace as it
  ships (``on``), and with ``LogWriter.trace``/``flush_trace`` replaced by no-ops (``off``). The two arms run in
  alternating blocks of 50 calls in two runs open side by side, so a shared disk's drift hits both alike.
* ``trace_event_us``: one ``LogWriter.trace`` call alone (vocabulary check, redaction, encoding) for a typical
  ``tool_started`` event, in CPU time.

Prints one JSON object: per case the median and p99 of the call's wall time on and off, ``ratio_on_off``
(median on / median off: 1.0 means the trace costs nothing measurable), the same in thread CPU time
(``cpu_ratio_on_off``: what a loaded machine's waiting does not blur), the events and trace bytes per call, and
the per-event cost. Run: ``.venv/bin/python bench/trace.py [--calls N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import safepoint
from safepoint.engine.log_writer import LogWriter

BLOCK = 50


@contextlib.contextmanager
def tracing_off() -> Iterator[None]:
    trace, flush = LogWriter.trace, LogWriter.flush_trace
    LogWriter.trace = lambda self, event, **data: None  # type: ignore[method-assign]  # the arm without a trace
    LogWriter.flush_trace = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        LogWriter.trace, LogWriter.flush_trace = trace, flush  # type: ignore[method-assign]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def case(tm: safepoint.Safepoint, tool: str, calls: int) -> dict[str, Any]:
    content = "x" * 63 + "\n"
    on_run, off_run = tm.start(f"trace on {tool}"), tm.start(f"trace off {tool}")
    timings: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    for first in range(0, calls, BLOCK):
        for arm, run in (("on", on_run), ("off", off_run)):
            with tracing_off() if arm == "off" else contextlib.nullcontext():
                for i in range(first, min(first + BLOCK, calls)):
                    args = {"path": f"{arm}.txt"}
                    if tool == "write_file":
                        args["content"] = content * 32 + str(i)
                    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                    run.call(tool, args, call_id=f"c{i}")
                    timings[arm].append((time.perf_counter_ns() - t0) / 1000)
                    cpu[arm].append((time.thread_time_ns() - c0) / 1000)
    trace_file = os.path.join(tm.store.root, "runs", on_run.run_id, "trace.jsonl")  # type: ignore[attr-defined]
    on_run.finish("completed")
    off_run.finish("completed")
    events = len(tm.trace(on_run.run_id))
    median_on, median_off = statistics.median(timings["on"]), statistics.median(timings["off"])
    return {
        "calls": calls,
        "on_us": {"median": round(median_on, 1), "p99": round(percentile(timings["on"], 99), 1)},
        "off_us": {"median": round(median_off, 1), "p99": round(percentile(timings["off"], 99), 1)},
        "ratio_on_off": round(median_on / median_off, 3),
        "cpu_on_us": round(statistics.median(cpu["on"]), 1),
        "cpu_off_us": round(statistics.median(cpu["off"]), 1),
        "cpu_ratio_on_off": round(statistics.median(cpu["on"]) / statistics.median(cpu["off"]), 3),
        "events_per_call": round(events / calls, 2),
        "trace_bytes_per_call": round(os.path.getsize(trace_file) / calls),
    }


def event_cost(tm: safepoint.Safepoint, samples: int) -> dict[str, float]:
    run = tm.start("one event")
    log = run.session.log
    data = {"call_id": "call_17", "tool_name": "write_file", "attempt": 1, "step_id": "step_4"}
    data |= {"idempotency": "conditional", "replay_policy": "auto", "risk_level": "low"}
    cpu = []
    for _ in range(samples):
        t0 = time.thread_time_ns()
        log.trace("tool_started", **data)
        cpu.append((time.thread_time_ns() - t0) / 1000)
    log._trace.clear()  # not written: only the staging was measured
    run.finish("completed")
    return {"median": round(statistics.median(cpu), 2), "p99": round(percentile(cpu, 99), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    parent = tempfile.mkdtemp(prefix="safepoint-trace-bench-")
    try:
        os.makedirs(os.path.join(parent, "ws"))
        with (
            open(os.path.join(parent, "ws", "on.txt"), "w") as f,
            open(os.path.join(parent, "ws", "off.txt"), "w") as g,
        ):
            f.write("y" * 2048)
            g.write("y" * 2048)
        tm = safepoint.open(workspace=os.path.join(parent, "ws"))
        case(tm, "read_file", 100)  # warm-up
        report = {
            "benchmark": "safepoint trace cost per tool call (on vs off, same run)",
            "load_average": os.getloadavg(),
            "read_file_2kb": case(tm, "read_file", args.calls),
            "write_file_2kb": case(tm, "write_file", args.calls),
            "trace_event_cpu_us": event_cost(tm, 10_000),
        }
        tm.close()
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
