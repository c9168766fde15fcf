"""Workspace checkpoints: safepoint's cost per file change against a shadow-git checkpoint, by workspace size.

What it measures (one process, one run of this script, on the filesystem of ``tempfile.gettempdir()``):

* ``fsync_floor_ms``: one raw ``os.write`` of a 300-byte line plus ``os.fdatasync`` on an append-only file, the
  least a durable append can cost here; half the samples at the start, half at the end, pooled.
* Per workspace size (``--sizes``, default 1,000, 10,000 and 50,000 text files of 1 KB, 100 per folder, two
  folder levels deep; each built once and flushed with ``os.sync()``, untimed; no ``.git`` in the workspace):

  - ``tool_write_first_touch``: ``run.call("write_file", ...)`` of a 1 KB file the run has not touched yet, whose
    new content differs from the old in 3 lines (192 bytes), against the bare tool function (``write_file.fn``,
    which fsyncs the file and its folder) writing the same bytes to a sibling file not touched by the run.
    ``tool_write_same_file``: the same, re-editing one file again and again (no before-content blob, one patch).
    Timed in blocks of 50 like ``bench/overhead.py``: bare calls, a journal flush, floor samples, the ledgered
    calls back to back, a journal flush. Default store ``WORKSPACE/.agent-runtime``, a fresh run per case.
  - ``shadow_git_write_checkpoint_ms``: what Gemini CLI and Cline do instead: a separate ``GIT_DIR`` (outside the
    workspace, ``/.agent-runtime/`` excluded in its ``info/exclude``) with ``--work-tree`` the workspace; an
    initial ``add -A`` + ``commit`` of the whole tree (untimed, ``setup_seconds``), then per sample one
    single-file edit (plain write, untimed) followed by the timed ``git add -A`` and ``git commit -q --no-verify``
    (``-c user.name=x -c user.email=x@y -c gc.auto=0``, no system or global git config). Git's default
    ``core.fsync`` flushes packs only, not loose objects, refs or the index; safepoint's numbers include its fsyncs.

* At the largest size, ``command_capture``: ``run.call("run_command", ...)`` of a command appending a line to 10
  files of one folder, against ``subprocess.run(["bash", "-c", cmd])`` of the same command in a twin folder
  *outside* the workspace holding copies of those 10 files (run in the workspace, the bare command's changes would
  be settled as the user's edits by the next ledgered call and charged to it). Once with the inotify journal
  (default), once with the stat-scan fallback (``ChangeWatcher.start`` patched to return None: the capture's
  ``TreeScan``, one ``find`` per pass, before and after each command), each in a fresh run. ``capture_start``:
  the capture (watches, baseline scan) starts with the session, on a thread, so ``tm.start`` with the built-in
  tools (``session_start_ms``) is timed against ``tm.start(builtins=False)`` (no capturing tool: no capture);
  ``capture_ready_ms`` is from the same start until the capture's thread is done and settled (what a command
  right after the start waits for); then the first capturing call (minus a bare command) on its own.
  ``without_attribution``: the inotify case again with ``SAFEPOINT_NO_FANOTIFY=1`` (no fanotify marks, no fork
  events: every change marked of uncertain author); ``attribution_cost_ms`` is the difference of the two cost
  medians, what telling the command's writes from others' costs a command (``writers_attributed`` says whether the
  platform allowed it: root or ``CAP_SYS_ADMIN`` on Linux).
  ``no_change_command`` runs ``true`` the same way: the ledger's own cost for a command, without changes.
  ``shadow_git_command_checkpoint_ms``: ``git add -A`` + ``git commit`` after the same command. The scan fallback
  is also paired call by call: after each ledgered call, a shadow-git checkpoint of what that call's command
  changed (``paired_shadow_git_ms``, ``paired_ratio_to_shadow_git``: cost median / checkpoint median,
  ``per_pair_ratio``): on a shared machine the load drifts between sections, interleaved both meet the same.
  ``scan_fallback_whole_listing``: the same with passes that print and compare the whole listing (what the
  fallback does where file times come from another clock: network shares), paired too.
* ``storage``: 100 calls each changing one line of a 100 KB, 2,000-line text file (a separate small workspace per
  tool, no git): by ``write_file`` (whole new content as input) and by ``run_command`` (``sed -i``). Growth of
  ``.agent-runtime/runs/<id>/`` (apparent bytes of every file in it) from after ``tm.start`` to after the run is
  closed, against 100 full copies of the file.
* ``rollback`` (in the largest workspace): a run takes a checkpoint, then ``write_file``s 1,000 files (500 new, 500
  existing ones modified), finishes and closes; ``tm.rollback_files(run_id, checkpoint_id)`` is timed (it opens
  the run, plans, and runs the rollback as a ledgered call) and every file is checked to be back (asserted).

How to read it:

* ``call_total_ms``: the whole ledgered call. ``bare_ms``: the bare twin. ``cost_ms``: per call index, ledgered
  minus bare (median, p99; min can be negative when a bare call hit a stall). ``median_total_minus_median_bare_ms``
  is the estimate from the two medians, as a check. ``cpu_ms``: the same in thread CPU time (not fsync waits).
* ``ratio_to_shadow_git``: safepoint's cost median / the shadow-git checkpoint median at the same size.
* ``trend``: cost median of the first and the second half of the calls; a rise means the cost grows with the
  run's history rather than staying flat.
* ``pressure``: load average and PSI ``some avg10`` (cpu, io) around a section: other processes competing.
* ``targets``: the issue's, ``tool_write_le_2ms`` (cost median, each size), ``command_capture_le_half_shadow_git``
  (inotify cost median vs half the shadow-git command checkpoint median, largest size), ``storage_le_5pct``
  (write_file growth vs 100 copies), ``rollback_1000_le_1s`` (and verified); ``all_targets_met`` covers those.
  Reported beside them (issue 10 §5): ``session_start_le_100ms`` (``session_start_ms`` at the largest size, both
  capture modes) and ``scan_fallback_le_shadow_git`` (``paired_ratio_to_shadow_git`` <= 1).
  ``extra_`` ones (scan fallback, run_command storage, p99) are reported, not required.

Run: ``.venv/bin/python bench/workspace.py`` (full: about 65 s on 2 quiet cores, most of it building the 50,000-file
tree and git's initial commit; under 2 minutes under load), or ``--sizes 1000 --calls 50`` for a quick look.
Prints one JSON object on stdout; progress goes to stderr. Temporary directories are removed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable
from typing import Any

import measure
from measure import (
    FILES_PER_FOLDER,
    LINE_WIDTH,
    Appender,
    bare_context,
    check_results,
    fsync_floor,
    global_warmup,
    line,
    machine_info,
    percentile,
    pressure,
    settle,
)
from shadow_git import ShadowGit, time_shadow_git

import safepoint
from safepoint.engine.builtin import write_file
from safepoint.workspace import tree_scan
from safepoint.workspace.scan import ChangeWatcher
from safepoint.workspace.writers import DISABLE_ENV

FILE_LINES = 16  # 1 KB files
EDIT_LINES = range(5, 8)  # a tool edit replaces these 3 lines: 192 bytes
WARMUP_CALLS = 20
BLOCK = 50
COMMAND_FILES = 10
BIG_LINES = 2000
EDITS = 100
ROLLBACK_FILES = 1000
FLOOR_WARMUP = 100  # untimed appends before the floor samples


log = measure.logger("workspace")


# statistics --------------------------------------------------------------------------------------------------
def summary(ns: list[int]) -> dict[str, float]:
    """Median, p99, min and max in milliseconds."""
    return measure.summary(ns, 1e6, 3)


def median_ms(ns: list[int]) -> float:
    return round(percentile(sorted(v / 1e6 for v in ns), 50), 3)


def trend(ns: list[int]) -> dict[str, float]:
    half = len(ns) // 2
    return {"first_half_median": median_ms(ns[:half] or ns), "second_half_median": median_ms(ns[half:])}


# content and workspaces --------------------------------------------------------------------------------------
def file_lines(index: int) -> list[str]:
    return [line(f"orig{index} line {n:02d}:") for n in range(FILE_LINES)]


def file_text(index: int) -> str:
    return "".join(file_lines(index))


def edited_text(index: int, tag: str) -> str:
    """The original text of file ``index`` with 3 lines (192 bytes) replaced."""
    lines = file_lines(index)
    for n in EDIT_LINES:
        lines[n] = line(f"{tag} edit {n:02d}:")
    return "".join(lines)


def build_workspace(parent: str, size: int) -> tuple[str, list[str]]:
    return measure.build_workspace(parent, size, file_text)


def big_text(seed: int = 7) -> list[str]:
    """About 100 KB of code-like text in 2,000 lines that do not repeat (so compression does not flatter it)."""
    rng = random.Random(seed)
    words = ["data", "value", "index", "result", "config", "buffer", "offset", "count", "item", "node", "key"]
    lines = []
    for n in range(BIG_LINES):
        indent = " " * (4 * rng.randint(0, 3))
        a, b = rng.choice(words), rng.choice(words)
        lines.append(f"{indent}{a}_{n} = {b}.get({rng.randint(0, 99999)}, '{rng.getrandbits(40):010x}')  # {n}\n")
    return lines


def write_text(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def tree_bytes(path: str) -> dict[str, int]:
    """Apparent bytes of every file below ``path``, by top-level entry."""
    out: dict[str, int] = {}
    for folder, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(folder, name)
            try:
                size = os.lstat(full).st_size
            except FileNotFoundError:
                continue
            top = os.path.relpath(full, path).split(os.sep)[0]
            out[top] = out.get(top, 0) + size
    return out


# safepoint: tool writes ---------------------------------------------------------------------------------------
def tool_write_case(
    tm: safepoint.Safepoint,
    name: str,
    ledgered: list[tuple[str, str]],
    bare: list[tuple[str, str]],
    warm_path: str,
    scratch: str,
) -> dict[str, Any]:
    """``ledgered[i]`` and ``bare[i]`` are (path, content); timed in blocks (see the module docstring)."""
    ctx = bare_context(tm.workspace)
    calls = len(ledgered)
    floor = Appender(scratch, "floor")
    flusher = Appender(scratch, "flush")
    total: list[int] = []
    bare_ns: list[int] = []
    floor_ns: list[int] = []
    total_cpu: list[int] = []
    bare_cpu: list[int] = []
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    before = pressure()
    try:
        with tm.start(f"workspace bench {name}") as run:
            for w in range(WARMUP_CALLS):
                run.call("write_file", {"path": warm_path, "content": edited_text(0, f"warm{w}")}, call_id=f"warm{w}")
                write_file.fn(ctx, path=warm_path + ".bare", content=edited_text(0, f"warm{w}"))
                floor.sample()
            gc.collect()
            flusher.sample()
            for first in range(0, calls, BLOCK):
                block = range(first, min(first + BLOCK, calls))
                for i in block:
                    path, content = bare[i]
                    c0, t0 = cpu(), clock()
                    write_file.fn(ctx, path=path, content=content)
                    t1, c1 = clock(), cpu()
                    bare_ns.append(t1 - t0)
                    bare_cpu.append(c1 - c0)
                flusher.sample()
                for _ in block:
                    floor_ns.append(floor.sample())
                for i in block:
                    path, content = ledgered[i]
                    c0, t0 = cpu(), clock()
                    run.call("write_file", {"path": path, "content": content}, call_id=f"c{i}")
                    t1, c1 = clock(), cpu()
                    total.append(t1 - t0)
                    total_cpu.append(c1 - c0)
                flusher.sample()
            check_results(run, "c", calls, name)
            patches = sum(1 for p in run.session.patches if p.tool_call_id.startswith("c"))
            if patches != calls:
                raise SystemExit(f"{name}: {patches} file patches recorded for {calls} writes")
            run.finish("completed")
    finally:
        floor.close()
        flusher.close()
    diffs = [t - b for t, b in zip(total, bare_ns, strict=True)]
    cpu_diffs = [t - b for t, b in zip(total_cpu, bare_cpu, strict=True)]
    return {
        "calls": calls,
        "call_total_ms": summary(total),
        "bare_ms": summary(bare_ns),
        "cost_ms": summary(diffs),
        "median_total_minus_median_bare_ms": round(median_ms(total) - median_ms(bare_ns), 3),
        "cpu_ms": {"call_total": summary(total_cpu), "bare": summary(bare_cpu), "cost": summary(cpu_diffs)},
        "fsync_floor_during_case_ms": summary(floor_ns),
        "trend_cost_ms": trend(diffs),
        "pressure": {"before": before, "after": pressure()},
    }


# safepoint: command capture -----------------------------------------------------------------------------------
def append_command(folder: str) -> str:
    targets = " ".join(f"{folder}/file{i:02d}.txt" for i in range(COMMAND_FILES))
    return f"for f in {targets}; do echo x >> $f; done"


def bare_command(cmd: str, cwd: str) -> int:
    start = time.perf_counter_ns()
    subprocess.run(["bash", "-c", cmd], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter_ns() - start


def command_case(
    tm: safepoint.Safepoint,
    name: str,
    cmd: str,
    twin: str,
    calls: int,
    expect_patches: int,
    scratch: str,
    paired: ShadowGit | None = None,
) -> dict[str, Any]:
    """A fresh run: its start and first capturing call timed alone (capture start), then ``calls`` paired calls in
    blocks of BLOCK (bare commands in the twin, a journal flush, the ledgered calls back to back, a flush).
    ``paired``: after each ledgered call, a shadow-git checkpoint of what it changed, timed too (the two
    interleaved, so both meet the same load)."""
    flusher = Appender(scratch, "flush")
    git_ns: list[int] = []
    total: list[int] = []
    bare_ns: list[int] = []
    clock = time.perf_counter_ns
    before = pressure()
    try:
        # The capture starts with the session (watches, baseline scan): tm.start with the built-in tools (run_command
        # captures) against tm.start without any tool, and then the first capturing call on its own.
        plain_start: list[int] = []
        for i in range(3):
            flusher.sample()
            t0 = clock()
            plain = tm.start(f"workspace bench {name} plain start {i}", builtins=False)
            plain_start.append(clock() - t0)
            plain.finish("completed")
            plain.close()
        gc.collect()
        flusher.sample()
        t0 = clock()
        run = tm.start(f"workspace bench {name}")
        session_start = clock() - t0
        capture = run.session.capture_started
        if capture is not None and hasattr(capture, "finish_start"):  # (an older safepoint started it in tm.start)
            capture.finish_start()  # the capture starts on a thread: until its watches and baseline are in place
        ready = clock() - t0
        with run:
            start_bare = [bare_command(cmd, twin) for _ in range(3)]
            flusher.sample()
            t0 = clock()
            run.call("run_command", {"command": cmd}, call_id="first")
            start_total = clock() - t0
            capture = run.session.capture_started
            watcher_active = capture is not None and capture.watcher is not None
            tree = getattr(capture, "_tree", None)  # the scan fallback's passes: what kind, how many walkers
            passes = {"changed_only": tree._since is not None, "walkers": len(tree._walkers)} if tree else None
            attributed = capture is not None and capture.writers is not None
            flusher.sample()
            for first in range(0, calls, BLOCK):
                block = range(first, min(first + BLOCK, calls))
                for _ in block:
                    bare_ns.append(bare_command(cmd, twin))
                flusher.sample()
                for i in block:
                    t0 = clock()
                    run.call("run_command", {"command": cmd}, call_id=f"c{i}")
                    total.append(clock() - t0)
                    if paired is not None:
                        git_ns.append(sum(paired.checkpoint()))
                flusher.sample()
            check_results(run, "c", calls, name)
            per_call = [sum(1 for p in run.session.patches if p.tool_call_id == f"c{i}") for i in range(calls)]
            if set(per_call) != {expect_patches}:
                raise SystemExit(f"{name}: file patches per call {sorted(set(per_call))}, expected {expect_patches}")
            run.finish("completed")
    finally:
        flusher.close()
    diffs = [t - b for t, b in zip(total, bare_ns, strict=True)]
    pairs: dict[str, Any] = {}
    if paired is not None:
        pairs["paired_shadow_git_ms"] = summary(git_ns)
        pairs["paired_ratio_to_shadow_git"] = round(median_ms(diffs) / median_ms(git_ns), 4)
        ratios = sorted(d / g for d, g in zip(diffs, git_ns, strict=True))
        pairs["per_pair_ratio"] = {"median": round(percentile(ratios, 50), 4), "max": round(ratios[-1], 4)}
    return {
        **pairs,
        "calls": calls,
        "watcher_active": watcher_active,
        "fallback_passes": passes,
        "writers_attributed": attributed,
        "file_patches_per_call": expect_patches,
        "call_total_ms": summary(total),
        "bare_command_ms": summary(bare_ns),
        "cost_ms": summary(diffs),
        "median_total_minus_median_bare_ms": round(median_ms(total) - median_ms(bare_ns), 3),
        "trend_cost_ms": trend(diffs),
        "capture_start": {
            "session_start_ms": round(session_start / 1e6, 3),
            "capture_ready_ms": round(ready / 1e6, 3),
            "session_start_without_capture_ms": median_ms(plain_start),
            "start_cost_ms": round(session_start / 1e6 - median_ms(plain_start), 3),
            "first_call_ms": round(start_total / 1e6, 3),
            "first_call_cost_ms": round((start_total - sorted(start_bare)[1]) / 1e6, 3),
        },
        "pressure": {"before": before, "after": pressure()},
    }


def scan_fallback(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` with the inotify journal unavailable: every capture scans the workspace."""
    original = ChangeWatcher.__dict__["start"]
    ChangeWatcher.start = classmethod(lambda cls, root, rules: None)  # type: ignore[method-assign,assignment]
    try:
        return fn()
    finally:
        ChangeWatcher.start = original  # type: ignore[method-assign]


def whole_listing(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` with the scan fallback's passes printing the whole listing, as on a file system whose times come
    from another clock (``workspace/changed_since.py``)."""
    original = tree_scan.local_times
    tree_scan.local_times = lambda root: False
    try:
        return scan_fallback(fn)
    finally:
        tree_scan.local_times = original


def without_attribution(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` with writers not told apart by process (``SAFEPOINT_NO_FANOTIFY=1``): the fallback's cost."""
    old = os.environ.get(DISABLE_ENV)
    os.environ[DISABLE_ENV] = "1"
    try:
        return fn()
    finally:
        if old is None:
            del os.environ[DISABLE_ENV]
        else:
            os.environ[DISABLE_ENV] = old


# storage -----------------------------------------------------------------------------------------------------
def storage_case(parent: str, tool: str) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix=f"storage-{tool}-", dir=parent)
    try:
        lines = big_text()
        for i in range(20):  # a few neighbours, so the workspace is not just the one file
            write_text(os.path.join(root, f"other{i:02d}.txt"), file_text(i))
        write_text(os.path.join(root, "big.txt"), "".join(lines))
        file_bytes = os.path.getsize(os.path.join(root, "big.txt"))
        one_copy_deflated = len(zlib.compress("".join(lines).encode(), 6))
        tm = safepoint.open(workspace=root)
        times: list[int] = []
        growth: list[int] = []
        with tm.start(f"workspace bench storage {tool}") as run:
            run_dir = tm.store.run_dir(run.run_id)  # type: ignore[attr-defined]
            start_bytes = sum(tree_bytes(run_dir).values())
            last = start_bytes
            for k in range(EDITS):
                number = 1 + k * (BIG_LINES // EDITS)  # 1-based line number, spread over the file
                lines[number - 1] = f"edited {number}\n"
                if tool == "write_file":
                    args = {"path": "big.txt", "content": "".join(lines)}
                else:
                    args = {"command": f"sed -i '{number}s/.*/edited {number}/' big.txt"}
                t0 = time.perf_counter_ns()
                out = run.call_result(tool, args, call_id=f"e{k}")
                times.append(time.perf_counter_ns() - t0)
                if out.status != "succeeded":
                    raise SystemExit(f"storage {tool}: {out.observation}")
                now = sum(tree_bytes(run_dir).values())
                growth.append(now - last)
                last = now
            with open(os.path.join(root, "big.txt")) as handle:
                if handle.read() != "".join(lines):
                    raise SystemExit(f"storage {tool}: big.txt does not hold the expected edits")
            patches = [p for p in run.session.patches if p.path == "big.txt"]
            if len(patches) != EDITS:
                raise SystemExit(f"storage {tool}: {len(patches)} patches of big.txt for {EDITS} edits")
            run.finish("completed")
        tm.close()
        after = tree_bytes(run_dir)
        grown = sum(after.values()) - start_bytes
        copies = EDITS * file_bytes
        ordered = sorted(growth)
        return {
            "edits": EDITS,
            "file_bytes": file_bytes,
            "file_lines": BIG_LINES,
            "one_copy_deflated_bytes": one_copy_deflated,
            "full_copies_bytes": copies,
            "store_growth_bytes": grown,
            "ratio_to_full_copies_pct": round(100 * grown / copies, 2),
            "run_dir_bytes_after": after,
            "per_call_growth_bytes": {
                "first": growth[0],
                "median": int(percentile([float(g) for g in ordered], 50)),
                "max": ordered[-1],
                "sum_without_first": sum(growth[1:]),
            },
            "call_ms": {
                "median": median_ms(times),
                "first_10_median": median_ms(times[:10]),
                "last_10_median": median_ms(times[-10:]),
            },
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


# rollback ----------------------------------------------------------------------------------------------------
def rollback_case(tm: safepoint.Safepoint, modify: list[str]) -> dict[str, Any]:
    root = tm.workspace.root
    originals: dict[str, bytes] = {}
    for rel in modify:
        with open(os.path.join(root, rel), "rb") as handle:
            originals[rel] = handle.read()
    folders = sorted({os.path.dirname(p) for p in modify})
    created = [f"{folders[i % len(folders)]}/new{i:04d}.txt" for i in range(ROLLBACK_FILES - len(modify))]
    for rel in created:
        assert not os.path.lexists(os.path.join(root, rel)), rel
    writes = [(p, edited_text(0, f"rb{i}")) for i, p in enumerate(modify)]
    writes += [(p, file_text(i)) for i, p in enumerate(created)]
    random.Random(3).shuffle(writes)
    t0 = time.monotonic()
    with tm.start("workspace bench rollback") as run:
        checkpoint_id = run.checkpoint()
        for i, (path, content) in enumerate(writes):
            run.call("write_file", {"path": path, "content": content}, call_id=f"w{i}")
        check_results(run, "w", len(writes), "rollback writes")
        run.finish("completed")
        run_id = run.run_id
    write_seconds = time.monotonic() - t0
    settle()
    t0 = time.perf_counter_ns()
    dry = tm.rollback_files(run_id, checkpoint_id, dry_run=True)
    dry_ns = time.perf_counter_ns() - t0
    before = pressure()
    t0 = time.perf_counter_ns()
    plan = tm.rollback_files(run_id, checkpoint_id)
    rollback_ns = time.perf_counter_ns() - t0
    after = pressure()
    wrong = []
    for rel, data in originals.items():
        with open(os.path.join(root, rel), "rb") as handle:
            if handle.read() != data:
                wrong.append(rel)
    wrong += [rel for rel in created if os.path.lexists(os.path.join(root, rel))]
    assert not wrong, f"rollback left {len(wrong)} files changed, e.g. {wrong[:3]}"
    assert not plan.conflicts, f"rollback found {len(plan.conflicts)} conflicts"
    assert len(plan.actions) == ROLLBACK_FILES, f"{len(plan.actions)} rollback actions for {ROLLBACK_FILES} files"
    return {
        "files": ROLLBACK_FILES,
        "modified": len(modify),
        "created": len(created),
        "writes_seconds": round(write_seconds, 2),
        "dry_run_plan_seconds": round(dry_ns / 1e9, 3),
        "dry_run_actions": len(dry.actions),
        "rollback_seconds": round(rollback_ns / 1e9, 3),
        "conflicts": len(plan.conflicts),
        "verified": True,
        "pressure": {"before": before, "after": after},
    }


# main --------------------------------------------------------------------------------------------------------
def warmup_calls(tm: safepoint.Safepoint, run: safepoint.Run, paths: list[str]) -> None:
    """The global warm-up's calls (``measure.global_warmup``): file writes and commands (subprocess)."""
    for i in range(60):
        run.call("write_file", {"path": paths[i], "content": edited_text(i, "warm")}, call_id=f"w{i}")
    for i in range(5):
        run.call("run_command", {"command": f"echo x >> {paths[i]}"}, call_id=f"r{i}")


def size_section(parent: str, size: int, calls: int, git_calls: int, largest: bool, args: Any) -> dict[str, Any]:
    t0 = time.monotonic()
    root, paths = build_workspace(parent, size)
    built = time.monotonic() - t0
    settle()
    git = ShadowGit(root, os.path.join(parent, f"shadow{size}.git"))
    git_setup = git.init()
    settle()
    log(f"{size} files: built in {built:.1f}s, shadow git initial commit in {git_setup:.1f}s")
    entry: dict[str, Any] = {
        "workspace_files": size,
        "build_seconds": round(built, 1),
        "shadow_git_setup_seconds": round(git_setup, 1),
    }
    # Reserved: the warm-up file, the steady file and its bare sibling, and (largest size) the command folder.
    warm_path, steady, steady_bare = paths[:3]
    command_folder = os.path.dirname(paths[(size // FILES_PER_FOLDER - 1) * FILES_PER_FOLDER])
    pool = [p for p in paths[3:] if not (largest and p.startswith(command_folder + "/"))]
    index = {p: i for i, p in enumerate(paths)}
    targets, bare_targets = pool[0::2], pool[1::2]

    def first_touch(i: int) -> tuple[str, str]:
        path = targets[i % len(targets)]
        return path, edited_text(index[path], f"s{size}c{i}")

    tm = safepoint.open(workspace=root)
    ledgered = [first_touch(i) for i in range(calls)]
    bare = [(bare_targets[i % len(bare_targets)], content) for i, (_p, content) in enumerate(ledgered)]
    log(f"{size} files: tool_write_first_touch, {calls} calls")
    entry["tool_write_first_touch"] = tool_write_case(tm, "first_touch", ledgered, bare, warm_path, parent)
    entry["tool_write_first_touch"]["first_touch_calls"] = min(calls, len(targets))
    same = [(steady, edited_text(index[steady], f"s{size}same{i}")) for i in range(calls)]
    same_bare = [(steady_bare, content) for _p, content in same]
    log(f"{size} files: tool_write_same_file, {calls} calls")
    entry["tool_write_same_file"] = tool_write_case(tm, "same_file", same, same_bare, warm_path, parent)

    def git_edit(i: int) -> None:
        path = pool[-1 - (i % len(pool))]
        write_text(os.path.join(root, path), edited_text(index[path], f"git{size}x{i}"))

    log(f"{size} files: shadow git after a single-file write, {git_calls} samples")
    settle()
    entry["shadow_git_write_checkpoint_ms"] = time_shadow_git(git, git_edit, git_calls)
    settle()
    git_median = entry["shadow_git_write_checkpoint_ms"]["total"]["median"]
    for case in ("tool_write_first_touch", "tool_write_same_file"):
        entry[case]["ratio_to_shadow_git"] = round(entry[case]["cost_ms"]["median"] / git_median, 4)

    command = rollback = None
    if largest:
        command = command_section(tm, root, parent, git, command_folder, args)
        log(f"{size} files: rollback of {ROLLBACK_FILES} files")
        settle()
        modify = pool[-(ROLLBACK_FILES // 2) :]
        rollback = rollback_case(tm, modify)
        rollback["workspace_files"] = size
    tm.close()
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(git.git_dir, ignore_errors=True)
    return {"entry": entry, "command": command, "rollback": rollback}


def command_section(
    tm: safepoint.Safepoint, root: str, parent: str, git: ShadowGit, folder: str, args: Any
) -> dict[str, Any]:
    cmd = append_command(folder)
    twin = tempfile.mkdtemp(prefix="twin-", dir=parent)
    shutil.copytree(os.path.join(root, folder), os.path.join(twin, folder))
    out: dict[str, Any] = {"command": cmd, "bare_runs_in": "a twin folder outside the workspace (same files)"}
    try:
        settle()
        log(f"command capture (inotify), {args.command_calls} calls")
        out["inotify"] = command_case(tm, "inotify", cmd, twin, args.command_calls, COMMAND_FILES, parent)
        settle()
        log(f"command capture (scan fallback), {args.scan_calls} calls")
        out["scan_fallback"] = scan_fallback(
            lambda: command_case(tm, "scan", cmd, twin, args.scan_calls, COMMAND_FILES, parent, paired=git)
        )
        settle()
        log(f"command capture (scan fallback, whole listings), {args.scan_calls} calls")
        out["scan_fallback_whole_listing"] = whole_listing(
            lambda: command_case(tm, "scan whole", cmd, twin, args.scan_calls, COMMAND_FILES, parent, paired=git)
        )
        settle()
        log(f"command capture without writer attribution, {args.command_calls} calls")
        out["without_attribution"] = without_attribution(
            lambda: command_case(tm, "unattributed", cmd, twin, args.command_calls, COMMAND_FILES, parent)
        )
        settle()
        log("no-change command (inotify)")
        out["no_change_command"] = command_case(tm, "no_change", "true", twin, args.command_calls, 0, parent)
        settle()
        log(f"shadow git after the command, {args.git_calls} samples")
        out["shadow_git_command_checkpoint_ms"] = time_shadow_git(
            git, lambda i: subprocess.run(["bash", "-c", cmd], cwd=root, check=True), args.git_calls
        )
        settle()
    finally:
        shutil.rmtree(twin, ignore_errors=True)
    out["attribution_cost_ms"] = round(
        out["inotify"]["cost_ms"]["median"] - out["without_attribution"]["cost_ms"]["median"], 3
    )
    git_median = out["shadow_git_command_checkpoint_ms"]["total"]["median"]
    for mode in ("inotify", "scan_fallback"):
        out[mode]["ratio_to_shadow_git"] = round(out[mode]["cost_ms"]["median"] / git_median, 4)
        out[mode]["capture_minus_no_change_ms"] = round(
            out[mode]["cost_ms"]["median"] - out["no_change_command"]["cost_ms"]["median"], 3
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000,50000", help="workspace sizes in files, comma-separated")
    parser.add_argument("--calls", type=int, default=200, help="ledgered tool writes per case and size")
    parser.add_argument("--git-calls", type=int, default=20, help="shadow-git checkpoints timed per size and case")
    parser.add_argument("--command-calls", type=int, default=40, help="run_command calls per case (inotify)")
    parser.add_argument("--scan-calls", type=int, default=15, help="run_command calls with the scan fallback")
    parser.add_argument("--floor-iterations", type=int, default=1000, help="fsync-floor samples (half at start)")
    args = parser.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not sizes or min(sizes) < 2 * FILES_PER_FOLDER or max(sizes) < ROLLBACK_FILES:
        parser.error(f"every size must be >= {2 * FILES_PER_FOLDER} and the largest >= {ROLLBACK_FILES}")
    if min(args.calls, args.git_calls, args.command_calls, args.scan_calls) < 1:
        parser.error("the call counts must be >= 1")
    args.git_calls = min(args.git_calls, args.calls)
    args.command_calls = min(args.command_calls, args.calls)
    args.scan_calls = min(args.scan_calls, args.calls)

    started = time.monotonic()
    parent = tempfile.mkdtemp(prefix="safepoint-workspace-bench-")
    try:
        machine = machine_info(parent, git=True)
        log(f"temp dir {parent} on {machine['filesystem']['type']}; warming up")
        global_warmup(parent, file_text, "workspace bench warm-up", warmup_calls)
        half = max(1, args.floor_iterations // 2)
        settle()
        floor_start = fsync_floor(parent, half, FLOOR_WARMUP)

        per_size: dict[str, Any] = {}
        command: dict[str, Any] = {}
        rollback: dict[str, Any] = {}
        for size in sizes:
            section = size_section(parent, size, args.calls, args.git_calls, size == sizes[-1], args)
            per_size[str(size)] = section["entry"]
            if section["command"] is not None:
                command = {"workspace_files": size, **section["command"]}
                rollback = section["rollback"]

        log("storage: 100 one-line edits of a 100 KB file")
        storage = {"write_file": storage_case(parent, "write_file"), "run_command": storage_case(parent, "run_command")}

        settle()
        floor_end = fsync_floor(parent, args.floor_iterations - half, FLOOR_WARMUP)
        floor = summary(floor_start + floor_end)

        largest = per_size[str(sizes[-1])]
        shadow_cmd = command["shadow_git_command_checkpoint_ms"]["total"]["median"]
        targets: dict[str, Any] = {
            "tool_write_le_2ms": {
                key: entry["tool_write_first_touch"]["cost_ms"]["median"] <= 2.0
                and entry["tool_write_same_file"]["cost_ms"]["median"] <= 2.0
                for key, entry in per_size.items()
            },
            "command_capture_le_half_shadow_git": command["inotify"]["cost_ms"]["median"] <= shadow_cmd / 2,
            "storage_le_5pct": storage["write_file"]["ratio_to_full_copies_pct"] <= 5.0,
            "rollback_1000_le_1s": rollback["rollback_seconds"] <= 1.0 and rollback["verified"],
        }
        required = [*targets["tool_write_le_2ms"].values(), *list(targets.values())[1:]]
        targets["extra_tool_write_p99_le_2ms"] = {
            key: max(entry[c]["cost_ms"]["p99"] for c in ("tool_write_first_touch", "tool_write_same_file")) <= 2.0
            for key, entry in per_size.items()
        }
        targets["extra_tool_write_cheaper_than_shadow_git"] = {
            key: entry["tool_write_first_touch"]["ratio_to_shadow_git"] < 1.0 for key, entry in per_size.items()
        }
        targets["extra_scan_fallback_le_half_shadow_git"] = (
            command["scan_fallback"]["cost_ms"]["median"] <= shadow_cmd / 2
        )
        starts = [command[m]["capture_start"]["session_start_ms"] for m in ("inotify", "scan_fallback")]
        targets["session_start_le_100ms"] = max(starts) <= 100.0
        targets["scan_fallback_le_shadow_git"] = command["scan_fallback"]["paired_ratio_to_shadow_git"] <= 1.0
        targets["extra_run_command_storage_le_5pct"] = storage["run_command"]["ratio_to_full_copies_pct"] <= 5.0
        report = {
            "benchmark": "safepoint workspace checkpoints vs a shadow-git checkpoint",
            "machine": machine,
            "config": {
                "sizes": sizes,
                "calls_per_tool_write_case": args.calls,
                "shadow_git_samples": args.git_calls,
                "command_calls": args.command_calls,
                "scan_fallback_calls": args.scan_calls,
                "file_bytes": FILE_LINES * LINE_WIDTH,
                "edit_bytes": len(EDIT_LINES) * LINE_WIDTH,
                "files_per_folder": FILES_PER_FOLDER,
                "block": BLOCK,
                "store": "file store, WORKSPACE/.agent-runtime (default)",
                "timer": "time.perf_counter_ns; gc enabled (collected before each timed pass)",
            },
            "fsync_floor_ms": {
                **floor,
                "samples": len(floor_start) + len(floor_end),
                "start_median": median_ms(floor_start),
                "end_median": median_ms(floor_end),
            },
            "results": per_size,
            "command_capture": command,
            "storage": storage,
            "rollback": rollback,
            "summary": {
                "tool_write_cost_median_ms": {
                    k: e["tool_write_first_touch"]["cost_ms"]["median"] for k, e in per_size.items()
                },
                "shadow_git_write_median_ms": {
                    k: e["shadow_git_write_checkpoint_ms"]["total"]["median"] for k, e in per_size.items()
                },
                "ratio_safepoint_to_shadow_git": {
                    k: e["tool_write_first_touch"]["ratio_to_shadow_git"] for k, e in per_size.items()
                },
                "command_capture_cost_median_ms": {
                    "inotify": command["inotify"]["cost_ms"]["median"],
                    "scan_fallback": command["scan_fallback"]["cost_ms"]["median"],
                    "scan_fallback_paired_shadow_git": command["scan_fallback"]["paired_shadow_git_ms"]["median"],
                    "scan_fallback_paired_ratio": command["scan_fallback"]["paired_ratio_to_shadow_git"],
                    "whole_listing_paired_ratio": command["scan_fallback_whole_listing"]["paired_ratio_to_shadow_git"],
                    "shadow_git": shadow_cmd,
                },
                "largest_size": sizes[-1],
                "largest_tool_write_cost_ms": largest["tool_write_first_touch"]["cost_ms"]["median"],
            },
            "targets": targets,
            "all_targets_met": all(required),
            "elapsed_seconds": round(time.monotonic() - started, 1),
        }
        print(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
