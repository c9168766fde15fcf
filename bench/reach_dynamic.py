"""What holding paths built at run time costs on long hostile scripts (``core/command_reach_walk.py``'s DYNAMIC).

``python bench/reach_dynamic.py`` prints JSON: for scripts of 50, 200 and 800 lines, each line an assignment and a
command given the built path (``D3=build3; rm -rf "$D3/out"`` ..., one of them spelling ``.git`` at the end), the
time of ``classify_with_reach`` (caches bypassed: each script is new), against a baseline measured in the same
run: the same script with every built path written out literally (``rm -rf build3/out``). ``ratio``: hostile over
baseline; ``per_line_us``: how the cost grows with the script (flat: linear). The earlier attempt that expanded
every assignment was 15 times the baseline on such scripts.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from safepoint.core.command_reach import PROTECTED_EFFECT, classify_with_reach


def script(lines: int, *, built: bool, salt: int) -> str:
    out = []
    for i in range(lines):
        if built:
            out.append(f'D{i}=build{i}_{salt}; mkdir -p "$D{i}"; rm -rf "${{D{i}}}/out" > "$D{i}.log"')
        else:
            out.append(f"mkdir -p build{i}_{salt}; rm -rf build{i}_{salt}/out > build{i}_{salt}.log")
    out.append('G=.git; rm -rf "$G/hooks"' if built else "rm -rf .git/hooks")
    return "\n".join(out)


def timed(text: str) -> tuple[float, bool]:
    start = time.perf_counter()
    verdict = classify_with_reach(text)
    return time.perf_counter() - start, PROTECTED_EFFECT in verdict.side_effects


def main() -> None:
    classify_with_reach("ls")  # the parser and the spec tree, once
    report: dict[str, object] = {}
    for lines in (50, 200, 800):
        hostile, baseline = [], []
        for salt in range(5):
            seconds, held = timed(script(lines, built=True, salt=salt))
            assert held, "the built .git path was not held"
            hostile.append(seconds)
            seconds, held = timed(script(lines, built=False, salt=salt))
            assert held
            baseline.append(seconds)
        h, b = statistics.median(hostile), statistics.median(baseline)
        report[f"{lines}_lines"] = {
            "hostile_ms": round(h * 1000, 2),
            "baseline_ms": round(b * 1000, 2),
            "ratio": round(h / b, 2),
            "per_line_us": round(h / lines * 1e6, 1),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
