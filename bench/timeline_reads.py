"""The review page's run page (issue 13): ``Safepoint.timeline`` of a run of N tool calls, now (the session's view
handed to explain: one read of the log fewer) against the composition before (explain reading the log itself),
measured in the same run on the same store.

``python bench/timeline_reads.py [--calls 2000] [--repeat 5]`` prints JSON: the median seconds of each and their
ratio (``before / now``), and how many times each read the run's log.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import safepoint
from safepoint import report, review, timeline


def before(sp: safepoint.Safepoint, run_id: str) -> Any:
    """``Safepoint.timeline`` as it was: explain (its own read), then the session's read."""
    explanation = sp.explain(run_id)
    approvals = review.pending_approvals(sp.store, [run_id])
    with sp._session(run_id, read_only=True) as session:
        return timeline.build_timeline(session, explanation, approvals)


def counted(sp: safepoint.Safepoint, fn: Any) -> tuple[float, int]:
    reads = 0
    real = sp.store.read_log

    def read_log(run_id: str) -> Any:
        nonlocal reads
        reads += 1
        return real(run_id)

    sp.store.read_log = read_log  # counting the reads of this one measurement
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start, reads
    finally:
        sp.store.read_log = real  # back as it was


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        sp = safepoint.open(workspace=str(ws))
        try:
            with sp.start("bench", run_id="big") as run:
                for n in range(args.calls):
                    run.call("write_file", {"path": f"f{n % 50}.txt", "content": f"{n}\n"}, call_id=f"c{n}")
                    if n % 20 == 19:
                        run.checkpoint()
            assert report.explain(sp.store, "big").run_id == "big"
            old = [counted(sp, lambda: before(sp, "big")) for _ in range(args.repeat)]
            new = [counted(sp, lambda: sp.timeline("big")) for _ in range(args.repeat)]
        finally:
            sp.close()
    old_s, new_s = statistics.median(t for t, _ in old), statistics.median(t for t, _ in new)
    print(
        json.dumps(
            {
                "calls": args.calls,
                "before_s": round(old_s, 3),
                "now_s": round(new_s, 3),
                "ratio_before_over_now": round(old_s / new_s, 2),
                "log_reads_before": old[0][1],
                "log_reads_now": new[0][1],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
