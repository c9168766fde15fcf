"""What opening a run costs as the run grows: ``status``, ``status RUN``, ``explain`` and ``resume`` (issue 10 §3).

What it measures (one run of this script, on the filesystem of ``tempfile.gettempdir()``):

* For each size in ``--sizes`` (default 100, 1,000, 10,000 and 50,000), one run of that many trivial ledgered
  calls through the library (``Run.call`` of an idempotent tool returning ``"ok"``, ten to a step: ``Run.step``),
  each in its own process that is SIGKILLed right after its last call (the crash a resume is for: no ``finish``,
  no close, so no snapshot written at close; only what the writer wrote on the way). Built untimed.
* Each operation is timed in a fresh child process (``python -c``), so its peak memory is its own: ``ms`` is the
  operation's wall time inside the child (imports excluded), ``peak_mb`` the child's peak resident set
  (``ru_maxrss``), ``grew_mb`` how much the operation raised it, and ``peak_over_idle_mb`` the peak minus the peak
  of a child that only imports safepoint and opens the store (the fixed part). Each operation is measured
  ``--repeat`` times (default 3), the median kept.

  - ``status``: ``Safepoint.status()`` over the whole store (every run built here, plus ``--runs`` small runs of 20
    calls each: ``status`` over a store of 500 runs is one of the issue's figures).
  - ``status_run``: ``Safepoint.status(RUN)``.
  - ``explain``: ``Safepoint.explain(RUN, probe_workspace=False)``, every call listed; ``explain_page`` the same
    with ``limit=100`` (where the code has no ``limit``, the child fails and the figure is missing).
  - ``resume``: ``Safepoint.resume(RUN, takeover=True)``, then the child ends without closing (``os._exit``), so
    every repeat resumes a killed run again (its log grows by a few records per repeat).

* ``log_bytes`` and ``log_bytes_per_call``: the run's log size, as the build left it.
* ``ratios_to_smallest`` and ``at_50000_over_1000``: time and peak memory (the whole child's) over the same at the
  smaller size. The issue's targets: ``status_run`` flat; ``resume`` at 50,000 within 1.5x of 1,000; ``explain``
  memory flat when paged.
* ``pressure``: load average and PSI before and after; a busy shared machine inflates wall times.
* With ``--phases``, ``phases`` per size: a resume's fixed costs one by one (``PHASES`` below), the fastest of seven
  rounds in one child: the view snapshot's read and decode, the read of the log after it and the fold of those
  records (``tail_read_us_per_record``, ``tail_fold_us_per_record``). ``--phases-of WORKSPACE`` prints only these,
  for runs named ``run-SIZE`` already built there (read only).

Run: ``.venv/bin/python bench/opens.py`` (several minutes: building 50,000 calls takes most of it), or
``--sizes 100,1000,10000 --runs 50`` for a quick look. To measure another checkout, put its ``src`` first:
``PYTHONPATH=OTHER/src .venv/bin/python bench/opens.py`` (the children inherit it). Prints one JSON object on
stdout; progress goes to stderr. The temporary directory is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from measure import logger, machine_info, pressure

import safepoint

log = logger("opens")
OPS = ("status_run", "explain", "explain_page", "resume")

# The child: imports and opens the store untimed, then runs one operation and prints its wall time and peak RSS.
CHILD = r"""
import json, resource, sys, time
import safepoint
from safepoint.engine.tools import tool
op, workspace, run_id = sys.argv[1], sys.argv[2], sys.argv[3]

@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"

tm = safepoint.open(workspace=workspace)
if op == "resume":  # the resume's own imports are not what is measured
    import safepoint.agent.loop, safepoint.restart.judge  # noqa: F401
import safepoint.report  # noqa: F401
before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if op == "status":
    rows = tm.status()
elif op == "status_run":
    rows = tm.status(run_id)
elif op == "explain":
    found = tm.explain(run_id, probe_workspace=False)
elif op == "explain_page":
    found = tm.explain(run_id, probe_workspace=False, limit=100)
elif op == "resume":
    run = tm.resume(run_id, tools=[noop], takeover=True)
ms = (time.perf_counter() - t0) * 1000
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ms": ms, "peak_kb": peak_kb, "grew_kb": peak_kb - before_kb}), flush=True)
if op == "resume":
    import os
    os._exit(0)  # killed again: the next repeat resumes a killed run too (a close would write its snapshot)
tm.close()
"""


# ``--phases``: a resume's fixed costs one by one, in a child of their own (each the fastest of ``REPS`` rounds, so a
# busy machine's pauses fall out): the view snapshot's read (``read_view_snapshot``: its bytes and its checksum),
# its decode, the read of the log after it (``read_log_after``), and the fold of those records onto the snapshot's
# view (``resume_fold`` with them, less ``resume_fold`` with none: what the tail's records cost), per record too.
PHASES = r"""
import json, sys, time
import msgspec
import safepoint
from safepoint.core import view_snapshot
from safepoint.records import LogRead, RunInfo
from safepoint.store.log_after import LogPosition
workspace, run_id, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = safepoint.open(workspace=workspace).store
info = msgspec.json.decode(store.run_header(run_id), type=RunInfo)
none = LogRead(records=[], problems=[])
times = {"snapshot_read": [], "snapshot_decode": [], "tail_read": [], "fold_setup": [], "fold": []}
found = {}
for _ in range(reps):
    t0 = time.perf_counter()
    data = store.read_view_snapshot(run_id)
    t1 = time.perf_counter()
    if data is None:
        print(json.dumps({"snapshot": False}))
        raise SystemExit(0)
    snapshot = view_snapshot.decode(data, info)
    t2 = time.perf_counter()
    after = store.read_log_after(run_id, LogPosition(snapshot.seq, snapshot.offset, snapshot.check))
    t3 = time.perf_counter()
    view_snapshot.resume_fold(snapshot, info, none, lambda covered, upto: ([], []))
    t4 = time.perf_counter()
    snapshot = view_snapshot.decode(data, info)  # its containers become the view's: a fresh one for the fold
    t5 = time.perf_counter()
    view_snapshot.resume_fold(snapshot, info, after, lambda covered, upto: ([], []))
    t6 = time.perf_counter()
    for name, took in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5)):
        times[name].append(took * 1000)
    found = {"snapshot_bytes": len(data), "tail_records": len(after.records), "tail_problems": len(after.problems)}
best = {f"{name}_ms": round(min(took), 2) for name, took in times.items()}
records = max(found["tail_records"], 1)
best["tail_read_us_per_record"] = round(best["tail_read_ms"] * 1000 / records, 2)
best["tail_fold_us_per_record"] = round(max(best["fold_ms"] - best["fold_setup_ms"], 0) * 1000 / records, 2)
print(json.dumps({"snapshot": True, **found, **best}))
"""


def phases(workspace: str, run_id: str, reps: int = 7) -> dict[str, Any] | None:
    done = subprocess.run([sys.executable, "-c", PHASES, workspace, run_id, str(reps)], capture_output=True, text=True)
    if done.returncode != 0:
        log(f"phases failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def noop_tool() -> Any:
    from safepoint.engine.tools import tool

    @tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
    def noop(ctx: Any, n: int = 0) -> str:
        return "ok"

    return noop


def build(tm: safepoint.Safepoint, calls: int, name: str, per_step: int = 10, *, kill: bool = False) -> str:
    """A run of ``calls`` trivial calls, ``per_step`` to a step (a model turn), left open: with ``kill`` the process
    is SIGKILLed after the last call (nothing closed), else its owner is released."""
    run = tm.start(name, tools=[noop_tool()], run_id=name)
    t0 = time.perf_counter()
    for index in range(calls):
        if index % per_step == 0:
            run.step()
        run.call("noop", {"n": index}, call_id=f"c{index}")
        if index and index % 10_000 == 0:
            log(f"  {name}: {index} calls, {time.perf_counter() - t0:.0f} s")
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    run.close()
    return run.run_id


def child(op: str, workspace: str, run_id: str) -> dict[str, float] | None:
    done = subprocess.run([sys.executable, "-c", CHILD, op, workspace, run_id], capture_output=True, text=True)
    if done.returncode != 0:
        log(f"{op} failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"ms": found["ms"], "peak_mb": found["peak_kb"] / 1024, "grew_mb": found["grew_kb"] / 1024}


def measure_op(op: str, workspace: str, run_id: str, repeat: int, idle_mb: float) -> dict[str, float] | None:
    samples = [found for _ in range(repeat) if (found := child(op, workspace, run_id)) is not None]
    if not samples:
        return None
    ms = statistics.median(s["ms"] for s in samples)
    peak = statistics.median(s["peak_mb"] for s in samples)
    grew = statistics.median(s["grew_mb"] for s in samples)
    # ``grew_mb``: the peak the operation itself raised (0 while it stays under what the imports reached)
    return {
        "ms": round(ms, 1),
        "peak_mb": round(peak, 1),
        "peak_over_idle_mb": round(max(peak - idle_mb, 0.1), 1),
        "grew_mb": round(grew, 1),
    }


def ratio(large: dict[str, float] | None, small: dict[str, float] | None) -> dict[str, float] | None:
    """Time and peak memory (the whole process's: imports included) of ``large`` over ``small``."""
    if large is None or small is None:
        return None
    return {"ms": round(large["ms"] / small["ms"], 2), "peak_mb": round(large["peak_mb"] / small["peak_mb"], 2)}


def log_size(tm: safepoint.Safepoint, run_id: str) -> int:
    return os.path.getsize(os.path.join(getattr(tm.store, "root", ""), "runs", run_id, "ledger.jsonl"))


def build_store(workspace: str, sizes: list[int], runs: int) -> dict[int, dict[str, Any]]:
    tm = safepoint.open(workspace=workspace)
    built: dict[int, dict[str, Any]] = {}
    for size in sizes:
        log(f"building a run of {size} calls, killed after its last")
        t0 = time.perf_counter()
        run_id = f"run-{size}"
        command = [sys.executable, __file__, "--kill-into", workspace, "--sizes", str(size)]
        if subprocess.run(command).returncode != -signal.SIGKILL:
            raise SystemExit(f"the build of {run_id} failed")
        built[size] = {
            "run_id": run_id,
            "build_s": round(time.perf_counter() - t0, 1),
            "log_bytes": log_size(tm, run_id),
            "log_bytes_per_call": round(log_size(tm, run_id) / size),
        }
    log(f"building {runs} small runs")
    for index in range(runs):
        build(tm, 20, f"small-{index:04d}")
    tm.close()
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000,50000")
    parser.add_argument("--runs", type=int, default=500, help="small runs added for `status` over a store")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true", help="also a resume's fixed costs one by one, per size")
    parser.add_argument("--phases-of", metavar="WORKSPACE", help="only the phases of runs run-SIZE already built there")
    parser.add_argument("--build-into", help=argparse.SUPPRESS)  # the build's own child (see below)
    parser.add_argument("--kill-into", help=argparse.SUPPRESS)  # one run's build, killed at its end
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.kill_into:
        build(safepoint.open(workspace=args.kill_into), sizes[0], f"run-{sizes[0]}", kill=True)
    if args.phases_of:  # read only: nothing is built, resumed or written
        found = {str(size): phases(args.phases_of, f"run-{size}") for size in sizes}
        print(json.dumps({"phases": found, "pressure": pressure()}, indent=1))
        return
    if args.build_into:
        print(json.dumps(build_store(args.build_into, sizes, args.runs)))
        return
    parent = tempfile.mkdtemp(prefix="safepoint-opens-")
    try:
        workspace = os.path.join(parent, "ws")
        os.mkdir(workspace)
        # Built in a child: a child of this process would inherit its peak memory (Linux keeps ru_maxrss across
        # fork and exec), and the build of 50,000 calls grows it to hundreds of MB.
        command = [sys.executable, __file__, "--build-into", workspace, "--sizes", args.sizes, "--runs", str(args.runs)]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        built = {int(size): row for size, row in json.loads(done.stdout.strip().splitlines()[-1]).items()}
        # The build's pages written back first: else the first fsync of an operation on the largest run flushes
        # what the build left dirty (tens of MB at 50,000 calls: 17 ms of a resume's fdatasync, against 1 ms), and
        # the figure says when the kernel wrote back, not what the operation costs.
        os.sync()
        pressure_before = pressure()
        idle = statistics.median(
            found["peak_mb"] for _ in range(args.repeat) if (found := child("idle", workspace, "-"))
        )
        results: dict[str, Any] = {"idle_peak_mb": round(idle, 1), "sizes": {}}
        store_status = measure_op("status", workspace, "-", args.repeat, idle)
        results["status_store"] = {"runs": len(sizes) + args.runs, **store_status}
        for size in sizes:
            run_id = built[size]["run_id"]
            row: dict[str, Any] = dict(built[size])
            if args.phases:  # before the resumes, which add to the log after the snapshot
                log(f"phases at {size} calls")
                row["phases"] = phases(workspace, run_id)
            for op in OPS:
                log(f"{op} at {size} calls")
                row[op] = measure_op(op, workspace, run_id, args.repeat, idle)
            results["sizes"][str(size)] = row
        base = results["sizes"][str(sizes[0])]
        results["ratios_to_smallest"] = {
            str(size): {op: ratio(results["sizes"][str(size)][op], base[op]) for op in OPS} for size in sizes[1:]
        }
        if 1000 in sizes and 50000 in sizes:
            small, large = results["sizes"]["1000"], results["sizes"]["50000"]
            results["at_50000_over_1000"] = {op: ratio(large[op], small[op]) for op in OPS}
            results["resume_target"] = 1.5  # resume's time and peak memory, 50,000 over 1,000 calls
        results["pressure"] = {"before": pressure_before, "after": pressure()}
        results["machine"] = machine_info(parent)
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
