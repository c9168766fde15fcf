"""Storage that stays small and fast on real files (issue 10, "Performance"): one script, one JSON object on stdout,
every figure beside a baseline measured in the same run. Progress goes to stderr.

Sections (``--only`` picks some, comma-separated; default all but ``reports``, which ``--reports`` adds):

* ``writes``: ``run.call("write_file", ...)`` per-call cost by file size (2 KB, 64 KB, 1 MB, 10 MB: ``--sizes``) and
  edit shape: ``one_line`` (one line of a text file changed), ``scattered`` (60 lines changed, evenly spread: the
  version bumps of a lockfile), ``reordered`` (a lockfile's entries in another order: every line moves) and
  ``binary`` (random bytes, 60 of them changed). The file is written once untimed, then each timed call writes a
  new edit of that shape (the ``k``-th: another line, other versions, another order, other bytes), in
  ``--repeat`` rounds over all cases (one call of each a round: a busy machine's load falls on all alike); median.
  ``ratio_to_2kb``: each median over the median of the 2 KB writes; the target is at most 10x up to 1 MB.
  ``log_bytes``: what one call adds to the store.
* ``inputs``: ``write_file`` of a new file (its content is the call's input: there is no before-state to patch
  against) at 2 KB, 100 KB, 1 MB and 10 MB (``--input-sizes``), each call a new path: the log bytes one call adds
  (``ledger.jsonl``), the store bytes and the median time, with large values kept as blobs (``after``) and with
  every value inline in the log as before (``before``: ``core.large_values.LARGE_BYTES`` raised past any size),
  in ``--repeat`` rounds that go round both modes and every size.
* ``history``: ``--history-steps`` (3,000) agent steps, each about 1 KB of model text (real prose and code of the
  standard library, never the same slice twice) with one ``list_files`` call, driven through the library by a
  provider that is not the scripted one (whose scenario would sit in the run's header). Reports the raw bytes of
  the model's text, the store's bytes per file and per record kind, the messages as the log holds them against the
  same messages as plain JSON (what the log held before the history codec), and LangGraph's ``SqliteSaver`` (a
  ``MessagesState`` graph, one ``invoke`` a step with that step's messages, the same stream) over
  ``--langgraph-steps`` steps (its size grows with the square of the steps: each checkpoint holds every message).
  Needs ``langgraph`` and ``langgraph-checkpoint-sqlite``: ``pip install -e '.[bench]'`` (``make bench`` does);
  without them the section says how to get them and measures the rest.
* ``steps``: per-step cost of a CLI run at steps 50, 1,000 and 5,000 against the library's per-call cost
  (``bench/steps.py``'s measurement, run from here: ``--cli-steps``).
* ``reports`` (only with ``--reports``: another part of issue 10 is making these fast; the lead runs them after
  merging): ``status``, ``status RUN``, ``explain`` (CLI, a child each) and a library ``resume`` (a child), their wall
  time and peak memory (the child's max RSS) on runs of ``--report-calls`` (100, 10,000, 50,000) calls left
  interrupted, and ``status`` over ``--status-runs`` (500) runs.
* ``rollback``: a git repository of ``--repo-files`` (50,000) committed files; one ``run_command`` changes 500 of
  them; ``rollback_files`` to the checkpoint before it, timed (target: at most 1 s), against ``git checkout`` of
  the same 500 files.

Run: ``make bench`` or ``.venv/bin/python bench/storage.py [--quick]`` (``--quick``: small sizes, for a look).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from measure import logger, machine_info

import safepoint
from safepoint.providers.base import ModelTurn
from safepoint.records import LogRecord, ToolCall

log = logger("storage")
KB = 1024


# writes ------------------------------------------------------------------------------------------------------------
def lockfile_entries(size: int, seed: int) -> list[str]:
    """Lines of a package-lock.json-like file of about ``size`` bytes: one entry of four lines a package."""
    rng = random.Random(seed)
    entries = []
    total = 0
    index = 0
    while total < size:
        digest = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(64))
        entry = (
            f'    "node_modules/pkg-{index}": {{\n'
            f'      "version": "1.{index % 50}.{index % 7}",\n'
            f'      "resolved": "https://registry.example.org/pkg-{index}/-/'
            f'pkg-{index}-1.{index % 50}.{index % 7}.tgz",\n'
            f'      "integrity": "sha512-{digest}"\n    }},\n'
        )
        entries.append(entry)
        total += len(entry)
        index += 1
    return entries


class Shapes:
    """A file of about ``size`` bytes and, for each edit shape, its ``k``-th edit: every timed call writes a new one
    (the same two versions again and again would measure a cache, not a patch)."""

    NAMES = ("one_line", "scattered", "reordered", "binary")

    def __init__(self, size: int) -> None:
        self.entries = lockfile_entries(size, size)
        self.base = "".join(self.entries)
        self.lines = self.base.splitlines(keepends=True)
        versions = [i for i, line in enumerate(self.lines) if '"version"' in line]
        self.bumped = versions[:: max(1, len(versions) // 60)][:60]
        self.blob = random.Random(size).randbytes(size)
        self.flipped = list(range(0, size, max(1, size // 60)))[:60]

    def original(self, shape: str) -> str:
        return self.blob.decode("latin-1") if shape == "binary" else self.base

    def edit(self, shape: str, k: int) -> str:
        if shape == "one_line":
            lines = list(self.lines)
            middle = len(lines) // 2
            lines[middle] = lines[middle].rstrip("\n") + f" // edit {k}\n"
            return "".join(lines)
        if shape == "scattered":
            lines = list(self.lines)
            for i in self.bumped:
                lines[i] = lines[i].replace('"1.', f'"{k + 2}.', 1)
            return "".join(lines)
        if shape == "reordered":
            entries = list(self.entries)
            random.Random(k).shuffle(entries)
            return "".join(entries)
        changed = bytearray(self.blob)
        for i in self.flipped:
            changed[i] ^= k % 255 + 1
        return bytes(changed).decode("latin-1")


def shapes(size: int) -> dict[str, tuple[str, str]]:
    """The original and the first edit of each shape, for a look (tests/test_storage_bench.py)."""
    made = Shapes(size)
    return {shape: (made.original(shape), made.edit(shape, 1)) for shape in Shapes.NAMES}


def store_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def writes(parent: str, sizes: list[int], repeat: int) -> dict[str, Any]:
    """Every case gets its own run, and the timed calls go round the cases (one call of each, ``repeat`` rounds):
    a shared machine's load then falls on every case alike instead of on whichever ran while it peaked."""
    cases: list[tuple[str, str, Shapes]] = []
    for size in sizes:
        made = Shapes(size)
        cases += [(shape, f"{size // KB}KB", made) for shape in Shapes.NAMES]
    opened = []
    for shape, key, made in cases:
        root = tempfile.mkdtemp(prefix="w-", dir=parent)
        tm = safepoint.open(workspace=root)
        run = tm.start(f"write {shape} {key}")
        run.call("write_file", {"path": "f.txt", "content": made.original(shape)})
        opened.append(
            (tm, run, os.path.join(root, ".agent-runtime"), store_bytes(os.path.join(root, ".agent-runtime")))
        )
    times: list[list[int]] = [[] for _ in cases]
    for index in range(repeat):
        log(f"write_file round {index + 1} of {repeat}")
        for (shape, _, made), (_, run, _, _), samples in zip(cases, opened, times, strict=True):
            content = made.edit(shape, index + 1)  # made before the clock starts
            start = time.perf_counter_ns()
            run.call("write_file", {"path": "f.txt", "content": content})
            samples.append(time.perf_counter_ns() - start)
    found: dict[str, Any] = {}
    for (shape, key, _), (tm, run, store, before), samples in zip(cases, opened, times, strict=True):
        grown = store_bytes(store) - before
        run.finish("completed")
        run.close()
        tm.close()
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)
        found.setdefault(shape, {})[key] = {
            "median_ms": round(statistics.median(samples) / 1e6, 3),
            "log_bytes": grown // repeat,
        }
    small = f"{sizes[0] // KB}KB"
    base = statistics.median(found[shape][small]["median_ms"] for shape in found)  # the 2 KB writes, every shape
    for by_size in found.values():
        for case in by_size.values():
            case["ratio_to_2kb"] = round(case["median_ms"] / base, 2)
    limit = [f"{s // KB}KB" for s in sizes if s <= 1024 * KB]
    worst = max(found[shape][key]["ratio_to_2kb"] for shape in found for key in limit)
    return {"cases": found, "baseline_2kb_ms": base, "worst_ratio_up_to_1mb": worst, "target_at_most_10x": worst <= 10}


# inputs ------------------------------------------------------------------------------------------------------------
def inputs(parent: str, sizes: list[int], repeat: int) -> dict[str, Any]:
    from safepoint.core import large_values

    modes = {"before": 10**15, "after": large_values.LARGE_BYTES}
    opened: dict[tuple[str, int], tuple[Any, Any, str]] = {}
    for mode in modes:
        for size in sizes:
            root = tempfile.mkdtemp(prefix="i-", dir=parent)
            tm = safepoint.open(workspace=root)
            opened[mode, size] = (tm, tm.start(f"new files {mode} {size}"), os.path.join(root, ".agent-runtime"))
    samples: dict[tuple[str, int], list[tuple[int, int, int]]] = {key: [] for key in opened}
    try:
        for index in range(repeat):
            log(f"new files round {index + 1} of {repeat}")
            for (mode, size), (_, run, store) in opened.items():
                content = random_text(size, seed=index * 7 + size)  # made before the clock starts
                ledger = os.path.join(store, "runs", run.run_id, "ledger.jsonl")
                log_before, store_before = os.path.getsize(ledger), store_bytes(store)
                large_values.LARGE_BYTES = modes[mode]
                start = time.perf_counter_ns()
                run.call("write_file", {"path": f"new-{index}.txt", "content": content})
                took = time.perf_counter_ns() - start
                samples[mode, size].append(
                    (took, os.path.getsize(ledger) - log_before, store_bytes(store) - store_before)
                )
    finally:
        large_values.LARGE_BYTES = modes["after"]
        for tm, run, store in opened.values():
            run.close()
            tm.close()
            shutil.rmtree(os.path.dirname(store), ignore_errors=True)
    found: dict[str, Any] = {}
    for (mode, size), rows in samples.items():
        found.setdefault(f"{size // KB}KB", {})[mode] = {
            "median_ms": round(statistics.median(r[0] for r in rows) / 1e6, 3),
            "log_bytes_per_call": int(statistics.median(r[1] for r in rows)),
            "store_bytes_per_call": int(statistics.median(r[2] for r in rows)),
        }
    for case in found.values():
        before, after = case["before"], case["after"]
        case["log_after_over_before"] = round(after["log_bytes_per_call"] / before["log_bytes_per_call"], 4)
        case["time_after_over_before"] = round(after["median_ms"] / before["median_ms"], 2)
    return found


def random_text(size: int, seed: int) -> str:
    """Text that compresses like source or data does not (hex), ``size`` bytes."""
    rng = random.Random(seed)
    return "".join(f"{i} {rng.getrandbits(128):032x}\n" for i in range(size // 38 + 1))[:size]


# history -----------------------------------------------------------------------------------------------------------
def varied_texts(count: int, size: int = 1000) -> list[str]:
    """About ``size`` characters each: prose (Python's own documentation) and code (standard library modules),
    never the same slice twice while the sources last."""
    import pydoc_data.topics

    prose = "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    library = os.path.dirname(os.__file__)
    modules = []
    for name in sorted(os.listdir(library)):  # read, never imported (some modules act when imported)
        if name.endswith(".py"):
            modules.append(read(os.path.join(library, name)))
        if sum(map(len, modules)) > count * size:
            break
    code = "".join(modules)
    texts = []
    prose_at = code_at = 0
    for index in range(count):
        if index % 3 == 0:
            texts.append(code[code_at : code_at + size])
            code_at = (code_at + size) % max(1, len(code) - size)
        else:
            texts.append(prose[prose_at : prose_at + size])
            prose_at = (prose_at + size) % max(1, len(prose) - size)
    return texts


class Talker:
    """A model that says ``texts`` one a turn, each with a ``list_files`` call, then stops (not the scripted
    provider: its scenario would be kept in the run's header)."""

    model = "bench-talker"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def complete(self, context: Any, turn: int, stream: Any = None) -> ModelTurn:
        if turn >= len(self.texts):
            return ModelTurn(text="done", tool_calls=[])
        call = ToolCall(call_id=f"call_{turn + 1}", tool="list_files", args={"path": "."})
        return ModelTurn(text=self.texts[turn], tool_calls=[call])


def history(parent: str, steps: int, langgraph_steps: int) -> dict[str, Any]:
    import msgspec

    from safepoint.engine.session import load_view

    texts = varied_texts(steps)
    raw = sum(len(t.encode()) for t in texts)
    root = tempfile.mkdtemp(prefix="h-", dir=parent)
    for name in ("README.md", "main.py", "util.py"):
        with open(os.path.join(root, name), "w") as handle:
            handle.write("x\n")
    tm = safepoint.open(workspace=root)
    log(f"history: {steps} steps through the library")
    start = time.perf_counter()
    run = tm.start("talk about the code", run_id="h")
    with run:
        status = tm.run_agent(run, Talker(texts))  # type: ignore[arg-type]  # a provider by shape
    elapsed = time.perf_counter() - start
    run_dir = os.path.join(root, ".agent-runtime", "runs", "h")
    files = {
        os.path.relpath(os.path.join(d, f), run_dir): os.path.getsize(os.path.join(d, f))
        for d, _, names in os.walk(run_dir)
        for f in names
    }
    kinds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    bodies: Counter[str] = Counter()  # the record's own bytes (its body), without the line's framing
    with open(os.path.join(run_dir, "ledger.jsonl"), "rb") as handle:
        for line in handle:
            record = msgspec.json.decode(line[9:], type=LogRecord)
            kinds[record.kind] += len(line)
            counts[record.kind] += 1
            bodies[record.kind] += len(record.body)
    view = load_view(tm.store, "h")
    plain_messages = sum(
        len(line) + 40  # the record's framing: checksum, kind, seq, generation
        for line in (msgspec.json.encode(m) for m in view.history)
    )
    stream = [(m.role, m.content, m.tool_call_id, [c.call_id for c in m.tool_calls]) for m in view.history]
    tm.close()
    total = sum(files.values())
    index_name = os.path.join("checkpoints", "index.jsonl")
    found: dict[str, Any] = {
        "steps": steps,
        "status": status,
        "run_s": round(elapsed, 2),
        "raw_text_bytes": raw,
        "store_bytes": total,
        "store_ratio_to_raw": round(total / raw, 3),
        "files": files,
        "log_bytes_by_kind": dict(kinds),
        "records_by_kind": dict(counts),
        "per_step_bytes_by_kind": {k: round(v / steps) for k, v in kinds.items()},
        # Every byte of the store a step, by what holds it: each record kind's bodies, the log lines' framing
        # (checksum, kind, seq, generation: the same for every record), the trace and the checkpoint index.
        "per_step_bytes_by_part": {
            **{f"{k} bodies": round(v / steps) for k, v in bodies.items()},
            "log line framing": round((sum(kinds.values()) - sum(bodies.values())) / steps),
            "trace": round(files.get("trace.jsonl", 0) / steps),
            "checkpoint index": round(files.get(index_name, 0) / steps),
            "other files": round(
                (total - sum(files.get(name, 0) for name in ("ledger.jsonl", "trace.jsonl", index_name))) / steps
            ),
        },
        "messages_ratio_to_raw": round((kinds["message"] + kinds["message_dict"]) / raw, 3),
        "messages_plain_json_ratio_to_raw": round(plain_messages / raw, 3),
        "target_store_at_most_1_5x": total <= 1.5 * raw,
    }
    shutil.rmtree(root, ignore_errors=True)
    found["langgraph_sqlite"] = langgraph_sqlite(parent, stream, langgraph_steps, raw / steps)
    lg = found["langgraph_sqlite"]
    if "bytes" in lg and lg["steps"]:  # ours scaled to its steps when it ran fewer (ours grows linearly)
        ours = total * lg["steps"] / steps if lg["steps"] < steps else total
        found["ratio_langgraph_to_ours"] = round(lg["bytes"] / ours, 1)
    return found


def langgraph_sqlite(parent: str, stream: list[Any], steps: int, text_per_step: float) -> dict[str, Any]:
    try:
        import sqlite3

        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph
    except ImportError as exc:
        return {"missing": f"{exc.name} is not installed: pip install -e '.[bench]' (or make bench)"}
    path = os.path.join(parent, "langgraph.sqlite")
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {})
    graph.add_edge(START, "agent")
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "h"}}
    log(f"history: {steps} steps through LangGraph's SqliteSaver")
    start = time.perf_counter()
    messages: list[Any] = []
    done = half = 0
    for role, content, call_id, calls in stream:
        if role == "user":
            messages.append(HumanMessage(content=content))
        elif role == "assistant":
            if done == steps:
                break
            tool_calls = [{"name": "list_files", "args": {"path": "."}, "id": c} for c in calls]
            messages.append(AIMessage(content=content, tool_calls=tool_calls))
        elif role == "tool":
            messages.append(ToolMessage(content=content, tool_call_id=call_id or ""))
            app.invoke({"messages": messages}, config)  # one step: its model turn and its observation
            messages = []
            done += 1
            if done == steps // 2:
                conn.commit()
                half = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
            if done % 500 == 0:
                log(f"  LangGraph at step {done}")
    conn.close()
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)
    # Each checkpoint holds every message so far: the size grows with the square of the steps. Fitted on the two
    # sizes measured (at half the steps and at the end), it gives the size at the history section's steps.
    growth = (size / half) if half else 0.0
    return {
        "steps": done,
        "bytes": size,
        "bytes_at_half": half,
        "growth_from_half_to_end": round(growth, 2),
        "mb_extrapolated_to": {str(target): round(size * (target / max(done, 1)) ** 2 / 1e6) for target in (3000,)},
        "mb": round(size / 1e6, 1),
        "ratio_to_raw": round(size / (text_per_step * max(done, 1)), 1),
        "s": round(time.perf_counter() - start, 1),
    }


# steps -------------------------------------------------------------------------------------------------------------
def cli_steps(parent: str, steps: int) -> dict[str, Any]:
    import steps as steps_bench

    at = [k for k in (50, 1000, 5000) if k <= steps]
    log("library calls (steps.py)")
    steps_bench.library_calls(parent, 60, 50)
    library = steps_bench.library_calls(parent, 1000, 50)
    log(f"CLI run of {steps} steps (steps.py)")
    cli = steps_bench.cli_run(parent, steps, at, 50)
    per_call = library["per_call_ms"]["median"]
    return {
        "library_per_call_ms": per_call,
        "cli_step_ms_at": cli["at"],
        "ratio_flat": {k: round(v / cli["at"][str(at[0])], 2) for k, v in cli["at"].items()},
        "ratio_to_library_call": {k: round(v / per_call, 2) for k, v in cli["at"].items()},
        "target_at_most_3x_library": max(cli["at"].values()) <= 3 * per_call,
    }


# reports -----------------------------------------------------------------------------------------------------------
BUILD = """
import os, sys, safepoint
tm = safepoint.open(workspace=sys.argv[1])
run = tm.start("many calls", run_id=sys.argv[2])
for index in range(int(sys.argv[3])):
    if index % 10 == 0:
        run.step()
    run.call("list_files", {"path": "."})
os._exit(0)  # no close: the run is left as a crash leaves it
"""

RESUME = """
import sys, safepoint
tm = safepoint.open(workspace=sys.argv[1])
tm.resume(sys.argv[2]).close()
"""


def timed_child(argv: list[str]) -> dict[str, float]:
    """Wall time and peak memory of one child, measured by a fresh middle process (max RSS is per process tree)."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "start = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "took = time.perf_counter() - start\n"
        "print(done.returncode, took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True).stdout
    code, took, rss = out.split()
    return {"s": round(float(took), 3), "peak_mb": round(int(rss) / 1024, 1), "exit": int(code)}


def reports(parent: str, calls: list[int], runs: int) -> dict[str, Any]:
    cli = [sys.executable, "-m", "safepoint"]
    found: dict[str, Any] = {}
    for count in calls:
        root = tempfile.mkdtemp(prefix="r-", dir=parent)
        log(f"reports: a run of {count} calls")
        subprocess.run([sys.executable, "-c", BUILD, root, "r", str(count)], check=True)
        found[str(count)] = {
            "status": timed_child([*cli, "status", "-w", root]),
            "status_run": timed_child([*cli, "status", "r", "-w", root]),
            "explain": timed_child([*cli, "explain", "r", "-w", root, "--json"]),
            "resume_library": timed_child([sys.executable, "-c", RESUME, root, "r"]),
        }
        shutil.rmtree(root, ignore_errors=True)
    root = tempfile.mkdtemp(prefix="runs-", dir=parent)
    log(f"reports: {runs} runs")
    making = (
        "import sys, safepoint\ntm = safepoint.open(workspace=sys.argv[1])\n"
        "for i in range(int(sys.argv[2])):\n"
        "    with tm.start('one call', run_id=f'r{i}') as run:\n"
        "        run.call('list_files', {'path': '.'})\n        run.finish('completed')\n"
    )
    subprocess.run([sys.executable, "-c", making, root, str(runs)], check=True)
    found[f"status_over_{runs}_runs"] = timed_child([*cli, "status", "-w", root])
    shutil.rmtree(root, ignore_errors=True)
    first, last = str(calls[0]), str(calls[-1])
    found["ratio_largest_to_smallest"] = {
        name: round(found[last][name]["s"] / found[first][name]["s"], 2) for name in found[first]
    }
    return found


def read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


# rollback ----------------------------------------------------------------------------------------------------------
def rollback(parent: str, files: int, changed: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="repo-", dir=parent)
    log(f"rollback: a repository of {files} files")
    for index in range(files):
        folder = os.path.join(root, f"d{index // 100:04d}")
        if index % 100 == 0:
            os.makedirs(folder)
        with open(os.path.join(folder, f"f{index % 100:03d}.txt"), "w") as handle:
            handle.write(f"file {index}\n" * 8)
    git = ["git", "-C", root, "-c", "user.name=b", "-c", "user.email=b@e", "-c", "gc.auto=0"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    targets = [f"d{i // 100:04d}/f{i % 100:03d}.txt" for i in range(0, files, files // changed)][:changed]
    with open(os.path.join(root, "targets.txt"), "w") as handle:
        handle.write("\n".join(targets) + "\n")
    subprocess.run([*git, "add", "targets.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "targets"], check=True)
    tm = safepoint.open(workspace=root)
    with tm.start("change many files", run_id="r") as run:
        before = run.checkpoint()
        log(f"rollback: one command changing {changed} tracked files")
        start = time.perf_counter()
        run.call("run_command", {"command": "xargs sed -i 's/file/FILE/' < targets.txt"})
        command_s = time.perf_counter() - start
        run.finish("completed")
    start = time.perf_counter()
    plan = tm.rollback_files("r", before)
    took = time.perf_counter() - start
    tm.close()
    restored = all(read(os.path.join(root, t)).startswith("file ") for t in targets)
    subprocess.run(["bash", "-c", "xargs sed -i 's/file/FILE/' < targets.txt"], cwd=root, check=True)
    start = time.perf_counter()
    subprocess.run([*git, "checkout", "--", *targets], check=True)
    git_s = time.perf_counter() - start
    shutil.rmtree(root, ignore_errors=True)
    return {
        "repo_files": files,
        "changed": changed,
        "command_s": round(command_s, 3),
        "rollback_s": round(took, 3),
        "actions": len(plan.actions),
        "conflicts": len(plan.conflicts),
        "uncertain": len(plan.uncertain),
        "restored_all": restored,
        "git_checkout_s": round(git_s, 3),
        "ratio_to_git_checkout": round(took / git_s, 1),
        "target_at_most_1s": took <= 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="writes,inputs,history,steps,rollback", help="sections, comma-separated")
    parser.add_argument("--reports", action="store_true", help="add the reports section (status, explain, resume)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a look, not the figures")
    parser.add_argument("--sizes", default="2,64,1024,10240", help="write_file sizes in KB")
    parser.add_argument("--repeat", type=int, default=15, help="timed writes of each case")
    parser.add_argument("--input-sizes", default="2,100,1024,10240", help="new files' sizes in KB (inputs)")
    parser.add_argument("--history-steps", type=int, default=3000)
    parser.add_argument("--langgraph-steps", type=int, default=600, help="quadratic: 3,000 take an hour and 5 GB")
    parser.add_argument("--cli-steps", type=int, default=5025)
    parser.add_argument("--report-calls", default="100,10000,50000")
    parser.add_argument("--status-runs", type=int, default=500)
    parser.add_argument("--repo-files", type=int, default=50000)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeat, args.history_steps, args.langgraph_steps = "2,64,1024", 10, 300, 300
        args.cli_steps, args.report_calls, args.status_runs, args.repo_files = 1025, "100,1000", 50, 5000
    sections = set(args.only.split(",")) | ({"reports"} if args.reports else set())
    parent = tempfile.mkdtemp(prefix="safepoint-storage-")
    report: dict[str, Any] = {"machine": machine_info(tempfile.gettempdir())}
    try:
        if "writes" in sections:
            report["writes"] = writes(parent, [int(s) * KB for s in args.sizes.split(",")], args.repeat)
        if "inputs" in sections:
            report["inputs"] = inputs(parent, [int(s) * KB for s in args.input_sizes.split(",")], args.repeat)
        if "history" in sections:
            report["history"] = history(parent, args.history_steps, args.langgraph_steps)
        if "steps" in sections:
            report["steps"] = cli_steps(parent, args.cli_steps)
        if "reports" in sections:
            calls = [int(c) for c in args.report_calls.split(",")]
            report["reports"] = reports(parent, calls, args.status_runs)
        if "rollback" in sections:
            report["rollback"] = rollback(parent, args.repo_files, 500)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
