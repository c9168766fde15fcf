"""What encryption at rest costs per tool call on the file store, against the same store unencrypted in the same run.

Two workspaces on the filesystem of ``tempfile.gettempdir()``, one with a plain store and one with an encrypted
one (``safepoint.open(..., key=...)``). Each runs ``--calls`` ledgered ``write_file`` calls of 2 KB of new text
(through ``Run.call``: the ledger's two durable appends, the before blob, the patch), in alternating blocks of 50
so both see the same disk conditions. Then each reads its whole run back (``load_view``: every record opened).

Printed (one JSON object on stdout):

* ``call_us``: median and p99 wall time of a ledgered call, plain and encrypted, and ``ratio`` (encrypted / plain).
* ``call_cpu_us``: the same in thread CPU time (what sealing adds, without the fsyncs' waiting).
* ``read_run_ms``: reading the whole run back, plain and encrypted, and its ratio.
* ``log_bytes_per_call``: how much the run's log grows per call, plain and encrypted (sealed bodies are base64).
* ``seal_2kb_us`` / ``open_2kb_us``: AES-256-GCM alone on 2 KB (median of 2,000).

Run: ``.venv/bin/python bench/encryption.py`` (about 10 s) or ``--calls 200``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import safepoint
from safepoint.engine.session import load_view
from safepoint.store.crypt import Cipher, StoreKey, place

KEY = os.urandom(32)
BLOCK = 50


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    fn()
    return (time.perf_counter_ns() - wall) / 1000, (time.thread_time_ns() - cpu) / 1000


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="safepoint-bench-crypt-")
    try:
        sides = {}
        for name, key in (("plain", None), ("encrypted", KEY)):
            workspace = os.path.join(base, name)
            os.mkdir(workspace)
            sp = safepoint.open(workspace=workspace, key=key)
            run = sp.start("bench", run_id="r")
            sides[name] = {"sp": sp, "run": run, "wall": [], "cpu": [], "n": 0}
        for _ in range(0, args.calls, BLOCK):
            for side in sides.values():
                for _ in range(BLOCK):
                    n = side["n"]
                    side["n"] += 1
                    text = (f"{n:08d} " * 228)[:2048]
                    wall, cpu = timed(
                        lambda side=side, n=n, text=text: side["run"].call(
                            "write_file", {"path": f"f{n % 20}.txt", "content": text}, call_id=f"c{n}"
                        )
                    )
                    side["wall"].append(wall)
                    side["cpu"].append(cpu)
        result: dict[str, object] = {"calls": args.calls}
        call_us: dict[str, object] = {}
        cpu_us: dict[str, object] = {}
        read_ms: dict[str, float] = {}
        log_bytes: dict[str, float] = {}
        for name, side in sides.items():
            side["run"].close()
            call_us[name] = {"median": statistics.median(side["wall"]), "p99": p99(side["wall"])}
            cpu_us[name] = {"median": statistics.median(side["cpu"])}
            store = side["sp"].store
            reads = [timed(lambda store=store: load_view(store, "r"))[0] / 1000 for _ in range(5)]
            read_ms[name] = statistics.median(reads)
            log = os.path.join(base, name, ".agent-runtime", "runs", "r", "ledger.jsonl")
            log_bytes[name] = os.path.getsize(log) / args.calls
            side["sp"].close()
        call_us["ratio"] = statistics.median(sides["encrypted"]["wall"]) / statistics.median(sides["plain"]["wall"])
        cpu_us["ratio"] = statistics.median(sides["encrypted"]["cpu"]) / statistics.median(sides["plain"]["cpu"])
        result["call_us"] = call_us
        result["call_cpu_us"] = cpu_us
        result["read_run_ms"] = {**read_ms, "ratio": read_ms["encrypted"] / read_ms["plain"]}
        result["log_bytes_per_call"] = {**log_bytes, "ratio": log_bytes["encrypted"] / log_bytes["plain"]}
        cipher = Cipher(StoreKey(KEY, "bench"))
        data, where = os.urandom(2048), place("r", "log", "blob", 1)
        sealed = cipher.seal(data, where)
        result["seal_2kb_us"] = statistics.median(timed(lambda: cipher.seal(data, where))[0] for _ in range(2000))
        result["open_2kb_us"] = statistics.median(timed(lambda: cipher.open(sealed, where))[0] for _ in range(2000))
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
