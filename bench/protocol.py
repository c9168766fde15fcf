"""What the recovery protocol (seed 003) costs, against the raw append+fsync floor measured in the same run.

* ``restart_checkpoint_upsert``: one upsert of a reaction-loop restart checkpoint through the file store (write to
  a temp file, fsync, atomic rename, directory fsync). Three syncs is its design floor.
* ``agent_step``: one step of the agent loop (a scripted model turn with one ``write_file`` call), which writes
  the before/after-step checkpoints, the call's two log groups and one restart checkpoint. Its baseline is the
  same call made through the own-loop API (``Run.call`` plus ``Run.checkpoint``), which writes no restart
  checkpoint; ``protocol_share_us`` is the difference of the medians.
* ``judge_run_with_calls``: the read-only part of a restart (``judge``: read the descriptor, the owner, the log and
  the control channel, then the seven assertions and the disposition) for a run of ``--calls`` calls: what a
  supervisor pays per run at startup.

Run: ``.venv/bin/python bench/protocol.py`` (about 20 s). Prints one JSON object; progress on stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import tempfile
import time
from typing import Any

import measure

import safepoint
from safepoint.agent.loop import Agent
from safepoint.providers.scripted import ScriptedProvider
from safepoint.restart.checkpoint import loop_state
from safepoint.restart.judge import judge
from safepoint.standins.scenario import parse_scenario

log = measure.logger("protocol")


def summary(ns: list[int]) -> dict[str, float]:
    return measure.summary(ns, 1000.0, 1)


def upserts(tm: safepoint.Safepoint, count: int) -> list[int]:
    run = tm.start("upserts", run_id="upserts")
    restart = run.session.restart
    samples = []
    for turn in range(count):
        payload = loop_state(run.session, turn)
        start = time.perf_counter_ns()
        restart.write(payload)
        samples.append(time.perf_counter_ns() - start)
    run.close()
    return samples


def agent_steps(tm: safepoint.Safepoint, steps: int) -> list[int]:
    turns: list[dict[str, Any]] = [
        {
            "text": f"step {n}",
            "tool_calls": [{"tool": "write_file", "args": {"path": f"a{n % 50}.txt", "content": f"{n}\n" * 40}}],
        }
        for n in range(steps)
    ]
    turns.append({"text": "done"})
    scenario = parse_scenario(json.dumps({"task": "steps", "turns": turns}).encode())
    run = tm.start("steps", run_id="steps", model=scenario.model)
    provider = ScriptedProvider(scenario)
    times: list[int] = []
    real = provider.complete

    def timed(context: Any, turn: int, stream: Any = None) -> Any:  # a step: from one model turn to the next
        times.append(time.perf_counter_ns())
        return real(context, turn, stream)

    provider.complete = timed  # type: ignore[method-assign]
    Agent(run.session, provider, subagents=False).run()
    run.close()
    return [b - a for a, b in itertools.pairwise(times)][5:]


def own_loop_steps(tm: safepoint.Safepoint, steps: int) -> list[int]:
    run = tm.start("own loop", run_id="own")
    samples = []
    for n in range(steps):
        start = time.perf_counter_ns()
        run.add_message("assistant", f"step {n}")
        run.call("write_file", {"path": f"b{n % 50}.txt", "content": f"{n}\n" * 40}, call_id=f"c{n}")
        run.checkpoint()
        samples.append(time.perf_counter_ns() - start)
    run.close()
    return samples[5:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args(argv)
    parent = tempfile.mkdtemp(prefix="safepoint-bench-protocol-")
    try:
        tm = safepoint.open(None, workspace=parent)
        log("fsync floor")
        floor = measure.fsync_floor(parent, args.samples // 2, 20)
        log("restart checkpoint upserts")
        upsert = upserts(tm, args.samples)
        log("agent loop steps and the own-loop baseline")
        agent = agent_steps(tm, args.samples)
        own = own_loop_steps(tm, args.samples)
        floor += measure.fsync_floor(parent, args.samples // 2, 20)
        log(f"judge a run of {args.calls} calls")
        run = tm.start("judged", run_id="judged")
        for n in range(args.calls):
            run.call("read_file", {"path": "a0.txt"}, call_id=f"j{n}")
        run.close()
        judged = []
        for _ in range(30):
            start = time.perf_counter_ns()
            verdict = judge(tm.store, "judged").verdict
            judged.append(time.perf_counter_ns() - start)
        assert verdict.resumable
        floor_s, upsert_s, agent_s, own_s = summary(floor), summary(upsert), summary(agent), summary(own)
        report = {
            "machine": measure.machine_info(parent),
            "fsync_floor_us": floor_s,
            "restart_checkpoint_upsert_us": upsert_s
            | {"ratio_to_fsync_floor": round(upsert_s["median"] / floor_s["median"], 2)},
            "agent_step_us": agent_s,
            "own_loop_step_us": own_s,
            "protocol_share_us": round(agent_s["median"] - own_s["median"], 1),
            "agent_step_ratio_to_own_loop": round(agent_s["median"] / own_s["median"], 2),
            "judge_run_with_calls": {"calls": args.calls, "ms": measure.summary(judged, 1_000_000.0, 2)},
        }
        print(json.dumps(report, indent=2))
        tm.close()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
