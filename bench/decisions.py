"""What telling a person which decisions a waiting call accepts costs (``engine.decision_choices``): a scripted run
of ``--steps`` turns, each a ``list_files`` call, whose last call (a non-idempotent one) is left uncertain by a
crash; then, on the run as read, the time of ``load_view`` (the baseline: a resume reads the log once anyway) and
of judging the waiting call's choices (its history's arguments, its ledger copy), the median of ``--repeat``.

Run: ``python bench/decisions.py [--steps 1000] [--repeat 15]``. Prints JSON with the ratio to ``load_view``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import safepoint
from safepoint.engine import decision_choices
from safepoint.engine.session import load_view
from safepoint.standins.scenario import parse_scenario
from safepoint.workspace.files import Workspace


class Crash(BaseException):
    pass


@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="low")
def send(ctx: safepoint.ToolContext, text: str) -> str:
    raise Crash()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    options = parser.parse_args()
    turns = [{"tool_calls": [{"tool": "list_files", "args": {}}]} for _ in range(options.steps)]
    turns += [{"tool_calls": [{"tool": "send", "args": {"text": "x" * 20000}}]}, {"text": "done"}]
    with tempfile.TemporaryDirectory() as folder:
        sp = safepoint.open(workspace=folder)
        played = parse_scenario(json.dumps({"task": "t", "turns": turns}).encode())
        run = sp.start(played.task, run_id="r", model=played.model, tools=[send])
        try:
            with run:
                sp.run_agent(run, safepoint.ScriptedProvider(played))
        except Crash:
            pass
        view_s, judge_s = [], []
        for _ in range(options.repeat):
            started = time.perf_counter()
            view = load_view(sp.store, "r")
            view_s.append(time.perf_counter() - started)
            waiting = [e.call_id for e in view.ledger.values() if e.status == "started"]
            started = time.perf_counter()
            refused = decision_choices.refusals(sp.store, view, Workspace(folder), waiting)
            judge_s.append(time.perf_counter() - started)
        sp.close()
    view_median, judge_median = statistics.median(view_s), statistics.median(judge_s)
    print(
        json.dumps(
            {
                "steps": options.steps,
                "waiting": waiting,
                "replay_refused": refused,
                "load_view_s": round(view_median, 5),
                "choices_s": round(judge_median, 5),
                "ratio_to_load_view": round(judge_median / view_median, 4),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
