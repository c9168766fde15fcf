"""Helpers shared by the benchmark scripts ``bench/overhead.py`` and ``bench/workspace.py``.

Statistics, the raw append+fsync floor, the machine's state and description, the workspaces they build and the bare
tool context. The scripts are run directly (``python bench/overhead.py``), so Python puts ``bench/`` first on
``sys.path`` and they import this module as ``measure``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import safepoint
from safepoint.engine.tools import ToolContext
from safepoint.workspace.files import Workspace

FILES_PER_FOLDER = 100
FOLDERS_PER_GROUP = 100
LINE_WIDTH = 64  # 63 characters + newline
FLOOR_LINE = b"x" * 299 + b"\n"


def logger(name: str) -> Callable[[str], None]:
    """A progress logger writing ``[name] message`` lines to stderr (stdout carries the JSON report)."""

    def log(message: str) -> None:
        print(f"[{name}] {message}", file=sys.stderr, flush=True)

    return log


# statistics --------------------------------------------------------------------------------------------------
def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def summary(ns: list[int], unit: float, digits: int) -> dict[str, float]:
    """Median, p99, min and max of nanosecond samples, in ``unit`` nanoseconds (1e3: µs, 1e6: ms), rounded."""
    values = sorted(v / unit for v in ns)
    return {
        "median": round(percentile(values, 50), digits),
        "p99": round(percentile(values, 99), digits),
        "min": round(values[0], digits),
        "max": round(values[-1], digits),
    }


# content and workspaces --------------------------------------------------------------------------------------
def line(text: str) -> str:
    """One line of ``LINE_WIDTH`` bytes: ``text`` padded with filler words."""
    return (text + " lorem ipsum dolor sit amet" * 3)[: LINE_WIDTH - 1] + "\n"


def rel_path(index: int) -> str:
    group, rest = divmod(index, FILES_PER_FOLDER * FOLDERS_PER_GROUP)
    folder, number = divmod(rest, FILES_PER_FOLDER)
    return f"pkg{group:03d}/mod{folder:02d}/file{number:02d}.txt"


def build_workspace(parent: str, size: int, content: Callable[[int], str]) -> tuple[str, list[str]]:
    """``size`` files, ``content(index)`` each, ``FILES_PER_FOLDER`` per folder, two folder levels deep."""
    root = tempfile.mkdtemp(prefix=f"ws{size}-", dir=parent)
    paths = [rel_path(i) for i in range(size)]
    made: set[str] = set()
    for index, rel in enumerate(paths):
        folder = os.path.join(root, os.path.dirname(rel))
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(os.path.join(root, rel), "w") as handle:
            handle.write(content(index))
    return root, paths


def bare_context(workspace: Workspace) -> ToolContext:
    """The context a tool function gets when called bare (no run, no ledger)."""
    return ToolContext(
        run_id="bench_bare",
        call_id="bare",
        step_id="bare",
        idempotency_key="bare",
        workspace=workspace,
        save_artifact=lambda name, data: "",
    )


def check_results(run: safepoint.Run, prefix: str, expected: int, name: str) -> None:
    """Exit unless the run holds ``expected`` tool results for call ids starting with ``prefix``, none an error."""
    results = [m for m in run.history if m.role == "tool" and (m.tool_call_id or "").startswith(prefix)]
    errors = [m.content for m in results if m.content.startswith("error:")]
    if len(results) != expected or errors:
        raise SystemExit(f"{name}: {len(results)} results of {expected}, {len(errors)} failed: {errors[:1]}")


def global_warmup(
    parent: str,
    content: Callable[[int], str],
    title: str,
    exercise: Callable[[safepoint.Safepoint, safepoint.Run, list[str]], None],
) -> None:
    """Warm imports, encoders, zstd, difflib (and whatever ``exercise`` uses) in a throwaway 60-file workspace, so
    the first measured case is not the cold one. ``exercise(tm, run, paths)`` makes the calls; the run is finished
    and the workspace removed here."""
    root, paths = build_workspace(parent, 60, content)
    try:
        tm = safepoint.open(workspace=root)
        with tm.start(title) as run:
            exercise(tm, run, paths)
            run.finish("completed")
        tm.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# the floor and the machine's state ---------------------------------------------------------------------------
class Appender:
    """An append-only file next to the store: timed floor samples, and untimed journal flushes."""

    def __init__(self, directory: str, name: str) -> None:
        self.path = os.path.join(directory, f"{name}-{time.monotonic_ns()}.jsonl")
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def sample(self) -> int:
        start = time.perf_counter_ns()
        os.write(self.fd, FLOOR_LINE)
        os.fdatasync(self.fd)
        return time.perf_counter_ns() - start

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


def fsync_floor(directory: str, iterations: int, warmup: int) -> list[int]:
    """``iterations`` timed appends of ``FLOOR_LINE`` + ``os.fdatasync`` to a fresh file, after ``warmup`` untimed."""
    appender = Appender(directory, "floor")
    try:
        samples = [appender.sample() for _ in range(warmup + iterations)]
    finally:
        appender.close()
    return samples[warmup:]


def settle() -> None:
    """Flush all dirty data (untimed), so the writeback left by building a workspace (100 MB at 50,000 files) or
    by git does not land in the measured fsyncs."""
    os.sync()
    time.sleep(0.2)


def pressure() -> dict[str, Any]:
    """Load on the machine now: load average and PSI "some avg10" for cpu and io (percent of time stalled)."""
    found: dict[str, Any] = {}
    try:
        with open("/proc/loadavg") as handle:
            found["loadavg_1m"] = float(handle.read().split()[0])
    except OSError:
        pass
    for kind in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{kind}") as handle:
                first = handle.readline().split()
            found[f"{kind}_some_avg10"] = float(dict(part.split("=") for part in first[1:])["avg10"])
        except (OSError, KeyError, ValueError):
            pass
    return found


# machine -----------------------------------------------------------------------------------------------------
def filesystem_of(path: str, block_size: bool = False) -> dict[str, Any]:
    """The mount holding ``path`` (longest matching mount point in /proc/mounts), its type, device and free space."""
    real = os.path.realpath(path)
    best = ("", "unknown", "unknown")
    try:
        with open("/proc/mounts") as handle:
            for entry in handle:
                device, mount, fstype, *_ = entry.split()
                mount = mount.replace("\\040", " ")
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, fstype, device)
    except OSError:
        pass
    info: dict[str, Any] = {"path": real, "mount": best[0], "type": best[1], "device": best[2]}
    stat = os.statvfs(real)
    if block_size:
        info["block_size"] = stat.f_bsize
    info["free_gb"] = round(stat.f_bavail * stat.f_frsize / 1e9, 1)
    return info


def source_state() -> dict[str, Any]:
    """The commit the measured code is at, and whether ``src/`` has uncommitted changes (read-only git calls)."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=top, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=top, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "src_uncommitted_changes": None}
    return {"commit": commit, "src_uncommitted_changes": bool(dirty)}


def machine_info(
    parent: str, *, implementation: bool = False, block_size: bool = False, git: bool = False
) -> dict[str, Any]:
    """Python, platform, CPU and the filesystem of ``parent``; optionally the Python implementation, the
    filesystem's block size and the git version (each script reports the ones it always has)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as handle:
            for entry in handle:
                if entry.startswith("model name"):
                    cpu = entry.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {"python": platform.python_version()}
    if implementation:
        info["implementation"] = platform.python_implementation()
    info.update(
        {
            "platform": platform.platform(),
            "cpu": cpu,
            "cpus": os.cpu_count(),
            "filesystem": filesystem_of(parent, block_size=block_size),
        }
    )
    if git:
        info["git"] = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    info["safepoint_version"] = safepoint.__version__
    info["safepoint_source"] = source_state()
    return info
