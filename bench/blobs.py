"""Content out of the log (issue 10 §2): what a large file costs the log, a load and the store, with blobs inline in
the log (the code before) and as store-wide blobs (now), measured in the same run.

``python bench/blobs.py [--mb 30]`` prints JSON:

- ``append``: one ``run_command`` appending a line to an N MB file: the log's bytes, ``load_view``'s time and the
  store's bytes, inline vs blobs, and their ratios (the issue's case: 30 MB made an 84 MB log);
- ``dedup``: five runs, each editing one line of the same 2 MB file: the store's bytes, inline vs blobs;
- ``write_cost``: the median time of a ``write_file`` creating a 2 KB, 100 KB and 1 MB file, inline vs blobs;
- ``cross_run_delta``: five versions of a 1 MB lockfile-like file, each with 60 scattered lines changed (what a
  second run stores as its before-version when the first changed the file): the bytes of each version as a whole
  zstd blob, and as a zstd delta against the version before it (the ratio says whether a blob-level delta pays).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zstandard

import safepoint
from safepoint.engine import content as content_module
from safepoint.engine import session as session_module
from safepoint.engine.session import load_view


class _Inline(content_module.Content):
    """The code before: every blob in the log."""

    def __init__(self, run_id: str, blobs: Any, messages: Any, stage: Any, *_: Any) -> None:
        super().__init__(run_id, blobs, messages, stage)


@contextmanager
def _mode(inline: bool) -> Iterator[None]:
    original = session_module.Content
    session_module.Content = _Inline if inline else original  # type: ignore[misc]  # the bench swaps the class
    try:
        yield
    finally:
        session_module.Content = original  # type: ignore[misc]  # put back


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f'"pkg-{i}": "^{rng.randrange(10)}.{rng.randrange(40)}.{rng.randrange(99)}",\n' for i in range(count)]


def append(mb: int) -> dict[str, Any]:
    text = "".join(_lines(mb * 1024 * 1024 // 32, 1))
    found: dict[str, Any] = {}
    for mode in ("inline", "blobs"):
        root = tempfile.mkdtemp()
        try:
            workspace = os.path.join(root, "ws")
            os.mkdir(workspace)
            with open(os.path.join(workspace, "big.json"), "w") as handle:
                handle.write(text)
            tm = safepoint.open(os.path.join(root, "store"), workspace=workspace)
            with _mode(mode == "inline"), tm.start("t", run_id="r") as run:
                run.call("run_command", {"command": "echo one more >> big.json"}, call_id="c1")
            started = time.perf_counter()
            load_view(tm.store, "r")
            load_s = time.perf_counter() - started
            log = os.path.getsize(os.path.join(tm.store.run_dir("r"), "ledger.jsonl"))
            found[mode] = {"log_bytes": log, "load_s": round(load_s, 4), "store_bytes": _size(tm.store.root)}
            tm.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    found["file_mb"] = mb
    found["log_ratio"] = round(found["blobs"]["log_bytes"] / found["inline"]["log_bytes"], 5)
    found["load_ratio"] = round(found["blobs"]["load_s"] / max(found["inline"]["load_s"], 1e-9), 4)
    return found


def dedup(runs: int = 5) -> dict[str, Any]:
    base = _lines(2 * 1024 * 1024 // 32, 2)
    found: dict[str, Any] = {}
    for mode in ("inline", "blobs"):
        root = tempfile.mkdtemp()
        try:
            workspace = os.path.join(root, "ws")
            os.mkdir(workspace)
            tm = safepoint.open(os.path.join(root, "store"), workspace=workspace)
            for number in range(runs):
                with open(os.path.join(workspace, "big.json"), "w") as handle:
                    handle.write("".join(base))  # every run starts from the same file
                edited = list(base)
                edited[number * 100] = '"edited": true,\n'
                with _mode(mode == "inline"), tm.start("t", run_id=f"r{number}") as run:
                    run.call("write_file", {"path": "big.json", "content": "".join(edited)}, call_id="c1")
            found[mode] = {"store_bytes": _size(tm.store.root)}
            tm.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    found["runs"] = runs
    found["ratio"] = round(found["blobs"]["store_bytes"] / found["inline"]["store_bytes"], 4)
    return found


def cross_run_delta(versions: int = 5) -> dict[str, Any]:
    lines = _lines(1024 * 1024 // 32, 3)
    rng = random.Random(4)
    compressor = zstandard.ZstdCompressor(level=3)
    whole = delta = 0
    previous: bytes | None = None
    for _ in range(versions):
        for index in rng.sample(range(len(lines)), 60):
            lines[index] = f'"pkg-{index}": "^{rng.randrange(10)}.0.0",\n'
        data = "".join(lines).encode()
        whole += len(compressor.compress(data))
        if previous is None:
            delta += len(compressor.compress(data))
        else:
            raw = zstandard.ZstdCompressionDict(previous, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            delta += len(zstandard.ZstdCompressor(level=3, dict_data=raw).compress(data))
        previous = data
    return {"versions": versions, "whole_bytes": whole, "delta_bytes": delta, "ratio": round(delta / whole, 4)}


def write_cost(sizes: tuple[int, ...] = (2_000, 100_000, 1_000_000), calls: int = 15) -> dict[str, Any]:
    """Median time of a ``write_file`` creating a file of each size, inline vs blobs (a blob costs its fsyncs)."""
    found: dict[str, Any] = {}
    for size in sizes:
        row: dict[str, float] = {}
        for mode in ("inline", "blobs"):
            root = tempfile.mkdtemp()
            try:
                workspace = os.path.join(root, "ws")
                os.mkdir(workspace)
                tm = safepoint.open(os.path.join(root, "store"), workspace=workspace)
                base = "".join(_lines(size // 32, 5))
                times = []
                with _mode(mode == "inline"), tm.start("t", run_id="r") as run:
                    for number in range(calls):
                        started = time.perf_counter()
                        args = {"path": f"f{number}.json", "content": base + f"{number}\n"}
                        run.call("write_file", args, call_id=f"c{number}")
                        times.append(time.perf_counter() - started)
                row[f"{mode}_ms"] = round(sorted(times)[len(times) // 2] * 1000, 2)
                tm.close()
            finally:
                shutil.rmtree(root, ignore_errors=True)
        row["ratio"] = round(row["blobs_ms"] / row["inline_ms"], 3)
        found[str(size)] = row
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=30)
    options = parser.parse_args()
    figures = {"append": append(options.mb), "dedup": dedup(), "cross_run_delta": cross_run_delta()}
    figures["write_cost"] = write_cost()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
