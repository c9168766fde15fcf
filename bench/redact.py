"""What redaction costs on the text a run persists: a command's output of 4 KB and of 1 MB.

``python bench/redact.py [--repeat N]`` prints JSON: for each size, the median time of ``Redactor.text`` over N
runs, with the environment's credential values the redactor hunts for (eight, as a developer's shell holds) and
without, on output shaped like what agents read (build logs, ``git log``, a lockfile, ``env``-like lines, JSON,
base64), holding a few secrets. Also the time of one small JSON value (``Redactor.value``) and of one ledger
entry as the log writer redacts it (``Redactor.record`` where there is one), which every record of a run pays.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable

import msgspec

from safepoint.core.redact import Redactor
from safepoint.records import ToolLedgerEntry

VALUES = [
    "sk-proj-" + "K" * 40,
    "ghp_" + "G" * 36,
    "postgresql://app:Pg-pass-1234@db.internal/prod",
    "custom-llm-key-0123456789",
    "hunter2-database-password",
    "AKIAIOSFODNN7EXAMPLE",
    "slack-bot-token-value-xyz",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
]


def sample_output(size: int) -> str:
    """Output of that many characters, the kinds an agent reads mixed, a secret every ~16 KB."""
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        digest = hashlib.sha256(str(n).encode()).hexdigest()
        blocks = [
            f"commit {hashlib.sha1(str(n).encode()).hexdigest()}\nAuthor: Dev <dev@example.com>\n"
            f"Date:   Tue Dec 1 06:{n % 60:02d}:00 2026 +0000\n\n    Fix the parser (#{n})\n\n",
            f'    "node_modules/pkg-{n}": {{\n      "version": "1.{n}.0",\n'
            f'      "resolved": "https://registry.npmjs.org/pkg-{n}/-/pkg-{n}-1.{n}.0.tgz",\n'
            f'      "integrity": "sha512-{base64.b64encode(hashlib.sha512(digest.encode()).digest()).decode()}"\n'
            "    },\n",
            f"[{n:05d}] INFO building target {n} in src/module_{n}.py ... ok ({n % 97} ms) id={uuid.UUID(int=n)}\n",
            f"PATH=/usr/local/bin:/usr/bin\nHOME=/home/dev\nLANG=C.UTF-8\nBUILD_ID={digest[:12]}\n",
            json.dumps({"id": n, "sha256": digest, "tags": ["a", "b"], "ok": True}) + "\n",
            "data:image/png;base64," + base64.b64encode(hashlib.sha512(digest.encode()).digest() * 6).decode() + "\n",
        ]
        if n % 40 == 39:
            blocks.append(f"export OPENAI_API_KEY={VALUES[0]}\nAuthorization: Bearer {'t' * 32}\n")
        for block in blocks:
            parts.append(block)
            total += len(block)
        n += 1
    return "".join(parts)[:size]


def median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    plain = Redactor()
    hunting = Redactor(values=VALUES)
    report: dict[str, object] = {"python": sys.version.split()[0], "repeat": args.repeat}
    for label, size in (("4KB", 4096), ("1MB", 1 << 20)):
        text = sample_output(size)
        repeat = args.repeat if size < 100_000 else max(3, args.repeat // 4)
        report[f"text_{label}_us"] = round(median_us(lambda t=text: plain.text(t), repeat), 1)
        report[f"text_{label}_with_values_us"] = round(median_us(lambda t=text: hunting.text(t), repeat), 1)
    record = {"call_id": "call_1", "tool_name": "run_command", "input": {"command": "ls -la src"}, "status": "ok"}
    report["record_value_us"] = round(median_us(lambda: hunting.value(record), args.repeat * 20), 2)
    entry = ToolLedgerEntry(
        call_id="call_1", step_id="step_3", tool_name="run_command", input_hash="sha256:" + "0" * 64,
        status="succeeded", risk_level="low", idempotency="idempotent", replay_policy="auto", run_id="r",
        input={"command": "ls -la src"}, idempotency_key="r:call_1", result_ref="log:12", result_encoding="text",
        started_at="2026-12-01T06:31:09.000000+00:00", finished_at="2026-12-01T06:31:09.100000+00:00",
    )  # fmt: skip
    # what the log writer does with a record (``Redactor.record``; before it, every field went through ``value``)
    by_structure = getattr(hunting, "record", None)
    encode = by_structure or (lambda body: hunting.value(msgspec.to_builtins(body)))
    report["ledger_entry_us"] = round(median_us(lambda: encode(entry), args.repeat * 20), 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
