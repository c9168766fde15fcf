"""What the review page costs on a long run, against ``explain`` of the same run (what ``safepoint explain`` pays).

``python bench/ui_timeline.py [--calls N]`` builds one run of N calls (default 10,000: a read-only tool, and every
tenth call a ``write_file``), then prints JSON: the median wall time of ``explain``, of the run page's first and
last page (``Safepoint.timeline``), of the same page through the HTTP app (render included), of the runs page's
data, and each one's ratio to ``explain``. A page renders ``PER_PAGE`` items whatever the run's length: its cost is
``explain``'s (linear in the run) plus a constant, never a cost per call of the whole run on top.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import safepoint
from safepoint.ui.app import create_app


def _median(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 4)


def _build(workspace: str, calls: int) -> None:
    @safepoint.tool(name="lookup", idempotency="idempotent", replay_policy="auto", risk_level="low")
    def lookup(ctx: object, key: str) -> str:
        return f"value of {key}"

    sp = safepoint.open(workspace=workspace)
    with sp.start("ui benchmark", run_id="long", tools=[lookup]) as run:
        for i in range(calls):
            if i % 10 == 9:
                run.call("write_file", {"path": f"f/{i % 100}.txt", "content": f"line {i}\n" * 20}, call_id=f"c{i}")
            else:
                run.call("lookup", {"key": f"k{i}"}, call_id=f"c{i}")
            if i % 100 == 99:
                run.checkpoint()
        run.finish()
    sp.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    workspace = tempfile.mkdtemp(prefix="safepoint-ui-bench-")
    started = time.perf_counter()
    _build(workspace, args.calls)
    built = time.perf_counter() - started
    sp = safepoint.open(workspace=workspace)
    from starlette.testclient import TestClient

    client = TestClient(create_app(sp, token="t", hosts={"testserver"}), headers={"x-safepoint-token": "t"})
    last = sp.timeline("long").pages
    figures = {
        "explain_s": _median(lambda: sp.explain("long"), args.runs),
        "timeline_first_page_s": _median(lambda: sp.timeline("long"), args.runs),
        "timeline_last_page_s": _median(lambda: sp.timeline("long", page=last), args.runs),
        "http_run_page_s": _median(lambda: client.get("/runs/long").raise_for_status(), args.runs),
        "runs_overview_s": _median(sp.runs_overview, args.runs),
    }
    base = figures["explain_s"]
    print(
        json.dumps(
            {
                "calls": args.calls,
                "pages": last,
                "build_s": round(built, 1),
                **figures,
                "ratios_to_explain": {k: round(v / base, 2) for k, v in figures.items() if k != "explain_s"},
                "load_average": os.getloadavg()[0],
            },
            indent=2,
        )
    )
    sp.close()


if __name__ == "__main__":
    main()
