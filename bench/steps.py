"""What one agent step costs along a long CLI run, against one ledgered call through the library (issue 10 §4).

What it measures (one run of this script, on the filesystem of ``tempfile.gettempdir()``):

* ``cli``: one ``safepoint run SCENARIO`` (a child process, the real CLI) of a scripted scenario of ``--steps``
  turns (default 5,025), each turn one ``write_file`` of a small file (20 lines, ten files in turn), then a final
  answer. A step is everything between two tool calls: the model turn (the scripted provider and the context
  builder), the before-step checkpoint, the reply's record, the restart checkpoint, the call itself (two durable
  appends) and the after-step checkpoint. Its cost at step ``k`` is read afterwards from the ledger: the median
  of the gaps between consecutive calls' ``started_at`` over the ``--window`` steps around ``k`` (clipped to the
  run), so nothing is added to the measured process. ``at`` lists steps 50, 1,000 and 5,000 by default
  (``--at``). ``whole_run_s`` is the child's wall time (start-up and the final answer included).
* ``library``: ``--calls`` (default 1,000) ``Run.call("write_file", ...)`` of the same kind, in this process,
  timed one by one with ``time.perf_counter_ns``; ``per_call_ms`` is their median (and p99), ``at`` the median
  over the window around calls 50 and the last one (flat when the library is).
* ``fsync_floor_us``: one raw append + ``fdatasync`` here, the least a durable write costs on this disk; a CLI step
  makes about six durable writes (four appends and the restart checkpoint's atomic replace), a library call two.
* ``ratios``: each CLI step cost over the one at step 50 (``flat``: the goal is about 1.0 at step 5,000), and over
  the library's per-call median (the goal is at most 3).
* ``pressure``: load average and PSI before and after each part; a busy shared machine inflates wall times.

Run: ``.venv/bin/python bench/steps.py`` (about a minute), or ``--steps 1025 --at 50,1000`` for a quick look. To
measure another checkout of the code, put its ``src`` first: ``PYTHONPATH=OTHER/src .venv/bin/python
bench/steps.py`` (the CLI child inherits it). Prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

from measure import fsync_floor, logger, machine_info, pressure, settle, summary

import safepoint

log = logger("steps")
FILES = 10


def content(index: int) -> str:
    return f"line {index}\n" * 20


def scenario(steps: int) -> dict[str, Any]:
    turns: list[dict[str, Any]] = [
        {
            "text": f"step {index}: writing",
            "tool_calls": [
                {"tool": "write_file", "args": {"path": f"f{index % FILES}.txt", "content": content(index)}}
            ],
        }
        for index in range(steps)
    ]
    turns.append({"text": "done"})
    return {"task": "write the files, one a step", "turns": turns}


def window_median(values: list[float], at: int, width: int) -> float:
    """The median of ``values[i]`` (``i`` counted from 1) for ``i`` in the ``width`` around ``at``, clipped."""
    low = max(1, min(at - width // 2, len(values) - width + 1))
    high = min(len(values), low + width - 1)
    return statistics.median(values[low - 1 : high])


def cli_run(parent: str, steps: int, at: list[int], width: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="cli-", dir=parent)
    path = os.path.join(parent, "scenario.json")
    with open(path, "w") as handle:
        json.dump(scenario(steps), handle)
    settle()
    before = pressure()
    start = time.perf_counter_ns()
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", path, "--run-id", "steps", "-w", root],
        capture_output=True,
        text=True,
        check=False,
    )
    whole = time.perf_counter_ns() - start
    after = pressure()
    if done.returncode != 0:
        raise SystemExit(f"the CLI run failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    tm = safepoint.open(workspace=root)
    started = sorted(
        datetime.fromisoformat(entry.started_at).timestamp()
        for entry in tm.ledger("steps")
        if entry.started_at and entry.tool_name == "write_file"
    )
    tm.close()
    shutil.rmtree(root, ignore_errors=True)
    if len(started) != steps:
        raise SystemExit(f"the CLI run made {len(started)} calls of {steps}")
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(started)]  # gaps[i-1]: step i to i+1
    return {
        "steps": steps,
        "whole_run_s": round(whole / 1e9, 2),
        "at": {str(k): round(window_median(gaps, k, width), 3) for k in at},
        "pressure": {"before": before, "after": after},
    }


def cli_in_process(parent: str, steps: int, at: list[int], width: int) -> dict[str, Any]:
    """The same CLI command run inside this process (``safepoint.cli.app.main``), with the scripted model's
    ``complete`` wrapped to note the wall clock and this thread's CPU time at each turn: what a step costs in CPU,
    which a busy shared disk or core does not skew (the agent loop runs in the main thread)."""
    from safepoint.cli import app
    from safepoint.providers.scripted import ScriptedProvider

    root = tempfile.mkdtemp(prefix="cli-in-", dir=parent)
    path = os.path.join(parent, "scenario.json")
    with open(path, "w") as handle:
        json.dump(scenario(steps), handle)
    marks: list[tuple[int, int]] = []
    original = ScriptedProvider.complete

    def complete(self: ScriptedProvider, *args: Any, **kwargs: Any) -> Any:
        marks.append((time.perf_counter_ns(), time.thread_time_ns()))
        return original(self, *args, **kwargs)

    settle()
    before = pressure()
    saved = sys.argv
    ScriptedProvider.complete = complete  # type: ignore[method-assign]  # the bench's probe, this process only
    sys.argv = ["safepoint", "run", path, "--run-id", "steps", "-w", root]
    code: object = 0
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            app.main()
    except SystemExit as exit_:
        code = exit_.code
    finally:
        ScriptedProvider.complete = original  # type: ignore[method-assign]
        sys.argv = saved
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # `run` installs its own handler
    after = pressure()
    shutil.rmtree(root, ignore_errors=True)
    if code not in (0, None) or len(marks) != steps + 1:
        raise SystemExit(f"the in-process CLI run failed ({code}) after {len(marks)} turns of {steps + 1}")
    wall = [(b[0] - a[0]) / 1e6 for a, b in itertools.pairwise(marks)]
    cpu = [(b[1] - a[1]) / 1e6 for a, b in itertools.pairwise(marks)]
    return {
        "steps": steps,
        "wall_ms_at": {str(k): round(window_median(wall, k, width), 3) for k in at},
        "cpu_ms_at": {str(k): round(window_median(cpu, k, width), 3) for k in at},
        "pressure": {"before": before, "after": after},
    }


def library_calls(parent: str, calls: int, width: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="lib-", dir=parent)
    tm = safepoint.open(workspace=root)
    times: list[int] = []
    cpu: list[int] = []
    settle()
    before = pressure()
    with tm.start("write the files, one a call") as run:
        for index in range(calls):
            start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
            run.call("write_file", {"path": f"f{index % FILES}.txt", "content": content(index)})
            times.append(time.perf_counter_ns() - start)
            cpu.append(time.thread_time_ns() - start_cpu)
        run.finish("completed")
    after = pressure()
    tm.close()
    shutil.rmtree(root, ignore_errors=True)
    ms = [t / 1e6 for t in times]
    return {
        "calls": calls,
        "per_call_ms": summary(times, 1e6, 3),
        "cpu_per_call_ms": summary(cpu, 1e6, 3),
        "at": {str(k): round(window_median(ms, k, width), 3) for k in (50, calls)},
        "pressure": {"before": before, "after": after},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5025, help="turns of the CLI run")
    parser.add_argument("--at", default="50,1000,5000", help="the steps whose cost is reported")
    parser.add_argument("--window", type=int, default=50, help="steps (or calls) around each point")
    parser.add_argument("--calls", type=int, default=1000, help="library calls")
    args = parser.parse_args()
    at = [int(k) for k in args.at.split(",")]
    if max(at) > args.steps:
        raise SystemExit(f"--at {max(at)} is past the run's {args.steps} steps")
    parent = tempfile.mkdtemp(prefix="safepoint-steps-")
    try:
        floor = fsync_floor(parent, 200, 20)
        log("library calls")
        library_calls(parent, 60, args.window)  # warm-up: imports, encoders, zstd
        library = library_calls(parent, args.calls, args.window)
        log(f"CLI run of {args.steps} steps")
        cli = cli_run(parent, args.steps, at, args.window)
        log(f"CLI run of {args.steps} steps in this process")
        in_process = cli_in_process(parent, args.steps, at, args.window)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    per_call = library["per_call_ms"]["median"]
    per_call_cpu = library["cpu_per_call_ms"]["median"]
    first = cli["at"][str(at[0])]
    first_cpu = in_process["cpu_ms_at"][str(at[0])]
    report = {
        "machine": machine_info(tempfile.gettempdir()),
        "fsync_floor_us": summary(floor, 1e3, 1),
        "cli": cli,
        "cli_in_process": in_process,
        "library": library,
        "ratios": {
            "flat": {k: round(v / first, 2) for k, v in cli["at"].items()},
            "to_library_call": {k: round(v / per_call, 2) for k, v in cli["at"].items()},
            "cpu_flat": {k: round(v / first_cpu, 2) for k, v in in_process["cpu_ms_at"].items()},
            "cpu_to_library_call": {k: round(v / per_call_cpu, 2) for k, v in in_process["cpu_ms_at"].items()},
        },
        "targets": {
            "flat_within_1_5x": max(cli["at"].values()) <= 1.5 * first,
            "at_most_3x_library": max(cli["at"].values()) <= 3 * per_call,
            "cpu_flat_within_1_5x": max(in_process["cpu_ms_at"].values()) <= 1.5 * first_cpu,
            "cpu_at_most_3x_library": max(in_process["cpu_ms_at"].values()) <= 3 * per_call_cpu,
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
