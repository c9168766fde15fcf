"""What one turn of an OpenAI Agents SDK session costs as the session grows: ``SafepointSession`` against the
SDK's own ``SQLiteSession`` (issue 12 §3: ``get_items(limit)`` flat in the session's length).

A turn here is what ``Runner.run(..., session=s)`` does to its session each time: ``get_items(limit)`` (the
history it sends the model) and ``add_items`` of two items (about 1 KB of varied text each). Both sessions get the
same stream, written to files under ``tempfile.gettempdir()``. For each session, ``at`` gives the median per-turn
cost over the ``--window`` turns after item counts 10, 1,000 and ``--items`` (default 3,000); ``flat`` is the last
over the first (the goal: about 1.0). ``open_ms`` is what opening the session with ``--items`` items costs (the
safepoint session reads its log once there, then never again); ``fsync_floor_us`` is one raw append + fdatasync on
this disk (a safepoint turn makes one durable write; the SQLite session commits once a turn, fsync'd too when
``sqlite_synchronous`` is 2, FULL, SQLite's default). ``ratios.vs_sqlite`` is safepoint's per-turn cost over
SQLite's at the largest size. ``model_key_us``: what ``durable_model`` adds to a model turn at each size (hashing the
request; linear in the input the SDK sends anyway, each item redacted only once).

Run: ``.venv/bin/python bench/openai_session.py`` (about a minute; ``--items 1000`` for a quick look). Prints one
JSON object on stdout; progress goes to stderr. Needs the ``openai-agents`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from typing import Any

from measure import fsync_floor, logger, machine_info, pressure, summary

import safepoint

try:
    from agents.memory.sqlite_session import SQLiteSession

    from safepoint.integrations.openai_agents import SafepointSession
    from safepoint.integrations.openai_agents_tools import DurableModel
except ImportError:  # pragma: no cover - told to the user
    sys.exit("bench/openai_session.py needs the SDK: pip install -e '.[openai-agents]'")

log = logger("openai_session")
WORDS = ["the", "model", "said", "that", "a", "ledger", "keeps", "every", "call", "and", "its", "outcome", "so"]


def text(rng: random.Random, size: int = 1000) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(WORDS) if rng.random() < 0.8 else f"{rng.randrange(10**6)}")
    return " ".join(out)


def turn_items(rng: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {n}: {text(rng)}"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text(rng)}]},
    ]


async def measure(session: Any, items: int, at: list[int], window: int, limit: int) -> dict[str, Any]:
    rng = random.Random(7)
    samples: dict[int, list[int]] = {a: [] for a in at}
    count = 0
    n = 0
    while count < items + 2 * window:
        started = time.perf_counter_ns()
        await session.get_items(limit)
        batch = turn_items(rng, n)
        await session.add_items(batch)
        spent = time.perf_counter_ns() - started
        for a in at:
            if a <= count < a + 2 * window and len(samples[a]) < window:
                samples[a].append(spent)
        count += len(batch)
        n += 1
    return {str(a): summary(s, 1e3, 1) for a, s in samples.items() if s}


def key_cost(session: SafepointSession, items: list[Any], turns: int = 20) -> dict[str, float]:
    """What ``durable_model`` adds to a turn: the request's key over ``items`` plus one new item a turn (each item
    is redacted once, then remembered), after a first turn that redacts them all."""
    model = DurableModel(session, None)  # type: ignore[arg-type]  # the key needs no model behind it
    items = list(items)
    model.key(None, items, [])
    samples = []
    for n in range(turns):
        items.append({"role": "user", "content": f"new {n}"})
        started = time.perf_counter_ns()
        model.key(None, items, [])
        samples.append(time.perf_counter_ns() - started)
    return summary(samples, 1e3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=3000)
    parser.add_argument("--window", type=int, default=40)
    parser.add_argument("--limit", type=int, default=50, help="get_items(limit), as session_settings.limit does")
    args = parser.parse_args()
    at = [10, 1000, args.items] if args.items > 1000 else [10, args.items]
    parent = tempfile.mkdtemp(prefix="sp-oa-bench-")
    report: dict[str, Any] = {"machine": machine_info(parent), "pressure_before": pressure()}
    try:
        report["fsync_floor_us"] = summary(fsync_floor(parent, 200, 20), 1e3, 1)
        ws = os.path.join(parent, "ws")
        os.mkdir(ws)
        sp = safepoint.open(None, workspace=ws)
        log("safepoint session")
        session = SafepointSession.open(sp, "bench")
        ours = asyncio.run(measure(session, args.items, at, args.window, args.limit))
        session.close()
        started = time.perf_counter_ns()
        session = SafepointSession.open(sp, "bench")
        open_ms = (time.perf_counter_ns() - started) / 1e6
        everything = asyncio.run(session.get_items())
        size = len(everything)
        model_key_us = {str(a): key_cost(session, everything[:a]) for a in at}
        session.close()
        log("sqlite session")
        db = os.path.join(parent, "sessions.db")
        theirs_session = SQLiteSession("bench", db)
        theirs = asyncio.run(measure(theirs_session, args.items, at, args.window, args.limit))
        theirs_session.close()
        started = time.perf_counter_ns()
        reopened = SQLiteSession("bench", db)
        asyncio.run(reopened.get_items(args.limit))
        sqlite_open_ms = (time.perf_counter_ns() - started) / 1e6
        reopened.close()
        with sqlite3.connect(db) as con:
            synchronous = con.execute("PRAGMA synchronous").fetchone()[0]
        first, last = str(at[0]), str(at[-1])
        report.update(
            {
                "items": size,
                "limit": args.limit,
                "safepoint": {"per_turn_us": ours, "open_ms": round(open_ms, 1), "model_key_us": model_key_us},
                "sqlite": {"per_turn_us": theirs, "open_ms": round(sqlite_open_ms, 1)},
                "sqlite_synchronous": synchronous,
                "ratios": {
                    "safepoint_flat": round(ours[last]["median"] / ours[first]["median"], 2),
                    "sqlite_flat": round(theirs[last]["median"] / theirs[first]["median"], 2),
                    "vs_sqlite": round(ours[last]["median"] / theirs[last]["median"], 2),
                    "safepoint_over_fsync": round(ours[last]["median"] / report["fsync_floor_us"]["median"], 2),
                },
                "pressure_after": pressure(),
            }
        )
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
