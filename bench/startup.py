"""How long the CLI takes to start, against importing typer and rich in the same environment.

``python bench/startup.py [--runs N]`` prints JSON: the median (and min, max) wall time of N runs of each of
``safepoint --help``, ``safepoint status`` on an empty store, ``safepoint status`` on a store with one run (its
table drawn with rich) and ``python -c "import typer, rich"`` (the baseline: what any typer + rich CLI pays), and
each command's ratio to the baseline. The goal is a ratio of at most 2.

Runs are interleaved (baseline, help, status, baseline, ...) so a machine that gets busier or quieter during the
measurement moves all three alike; the load average is printed alongside, since a shared machine skews every run.
``--importtime`` adds the ten slowest safepoint modules of one ``safepoint status`` (``python -X importtime``).

Bytecode is written (``PYTHONDONTWRITEBYTECODE`` is dropped for the runs) and the unmeasured first run of each
command writes it: an installed package has its ``.pyc`` files, as typer and rich have theirs, so compiling
safepoint's sources at every start would measure the checkout, not the command. CPU time (user + system of the
child) is reported beside wall time: on a shared machine it moves less with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _summary(times: list[tuple[float, float]]) -> dict[str, float]:
    wall = [w for w, _ in times]
    cpu = [c for _, c in times]
    return {
        "median_s": round(statistics.median(wall), 4),
        "min_s": round(min(wall), 4),
        "max_s": round(max(wall), 4),
        "median_cpu_s": round(statistics.median(cpu), 4),
    }


def _one_run(workspace: str) -> None:
    """A finished run of one call, through the library (this process pays the engine, not the timed ones)."""
    import safepoint

    sp = safepoint.open(workspace=workspace)
    with sp.start("startup benchmark", run_id="bench") as run:
        run.call("list_files", {}, call_id="c1")
        run.finish()
    sp.close()


def _slowest_imports(argv: list[str], env: dict[str, str], count: int = 10) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True, check=False
    )
    rows = []
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if found and found.group(4).startswith("safepoint"):
            rows.append({"module": found.group(4), "self_ms": int(found.group(1)) / 1000})
    rows.sort(key=lambda row: -float(str(row["self_ms"])))
    return rows[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="Runs of each command (default 15).")
    parser.add_argument("--importtime", action="store_true", help="Add the slowest modules of `safepoint status`.")
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs: give at least 1")
    workspace = tempfile.mkdtemp(prefix="safepoint-startup-")
    with_run = tempfile.mkdtemp(prefix="safepoint-startup-run-")
    _one_run(with_run)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEPOINT_") and k != "PYTHONDONTWRITEBYTECODE"}
    commands = {
        "baseline_import_typer_rich": [sys.executable, "-c", "import typer, rich"],
        "safepoint_help": [sys.executable, "-m", "safepoint", "--help"],
        "safepoint_status_empty_store": [sys.executable, "-m", "safepoint", "status", "--workspace", workspace],
        # A store with one run: the table is drawn with rich (an empty store is said in one plain line).
        "safepoint_status_one_run": [sys.executable, "-m", "safepoint", "status", "--workspace", with_run],
    }
    try:
        for argv in commands.values():  # warm the file cache and the bytecode once, unmeasured
            _timed(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                times[name].append(_timed(argv, env))
        slowest = _slowest_imports(commands["safepoint_status_empty_store"][1:], env) if args.importtime else None
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(with_run, ignore_errors=True)

    def median(name: str, index: int) -> float:
        return statistics.median(run[index] for run in times[name])

    base_wall, base_cpu = median("baseline_import_typer_rich", 0), median("baseline_import_typer_rich", 1)
    report: dict[str, object] = {
        "runs": args.runs,
        "python": sys.version.split()[0],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        **{name: _summary(values) for name, values in times.items()},
        "ratio_help": round(median("safepoint_help", 0) / base_wall, 2),
        "ratio_status": round(median("safepoint_status_empty_store", 0) / base_wall, 2),
        "ratio_status_one_run": round(median("safepoint_status_one_run", 0) / base_wall, 2),
        "cpu_ratio_help": round(median("safepoint_help", 1) / base_cpu, 2),
        "cpu_ratio_status": round(median("safepoint_status_empty_store", 1) / base_cpu, 2),
        "cpu_ratio_status_one_run": round(median("safepoint_status_one_run", 1) / base_cpu, 2),
        "goal_ratio": 2.0,
    }
    if slowest is not None:
        report["slowest_safepoint_imports_of_status"] = slowest
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
