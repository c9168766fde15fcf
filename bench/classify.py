"""What the run_command classifier costs: imports, the spec tree, and one line judged and its write targets.

``python bench/classify.py [--lines N]`` prints JSON, each figure measured in a fresh interpreter where a first
use matters:

- ``import_ms``: importing ``safepoint.core.commands`` and ``command_targets`` (the spec tables, not the parser);
- ``first_line_ms``: the first ``classify_command`` (imports the parser, compiles the specs);
- ``compile_tree_ms``: compiling the default rules into the spec tree (once per ``CommandRules``);
- ``classify_us`` / ``write_targets_us``: per line, median over N distinct lines (the caches are bypassed: each
  line is new), from the corpus of ``tests/test_command_specs.py``;
- ``parser``: tree-sitter-bash's import and parse time per line and how many corpus lines it parses, and the
  same for bashlex (the parser it replaced) when that is installed: the evaluation of issue 9.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def corpus() -> list[str]:
    lines: list[str] = []
    for name in ("test_commands.py", "test_command_specs.py"):
        tree = ast.parse((ROOT / "tests" / name).read_text())
        for node in tree.body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(node.value, ast.List):
                continue
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id in {"CASES", "ISSUE_LINES", "HOSTILE", "EVERYDAY"}:
                for item in node.value.elts:  # the command is the item or its first element
                    first = item.elts[0] if isinstance(item, ast.Tuple) else item
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        lines.append(first.value)
    return lines


_MS = "print((time.perf_counter() - t) * 1000)"


def in_fresh_interpreter(code: str) -> float:
    path = os.pathsep.join(["src", *(p for p in sys.path if p.endswith("site-packages"))])
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env={"PYTHONPATH": path}
    )
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=400)
    options = parser.parse_args()
    timer = "import time; t = time.perf_counter()\n"
    report: dict[str, object] = {
        "import_ms": in_fresh_interpreter(
            timer + "import safepoint.core.commands, safepoint.core.command_targets\n"
            "print((time.perf_counter() - t) * 1000)"
        ),
        "first_line_ms": in_fresh_interpreter(
            "import safepoint.core.commands as c\n" + timer + "c.classify_command('git status')\n"
            "print((time.perf_counter() - t) * 1000)"
        ),
        "compile_tree_ms": in_fresh_interpreter(
            "import safepoint.core.commands as c\n" + timer + "c.compiled_tree(c.DEFAULT_COMMAND_RULES)\n"
            "print((time.perf_counter() - t) * 1000)"
        ),
    }
    sys.path.insert(0, str(ROOT / "src"))
    from safepoint.core.command_targets import write_targets
    from safepoint.core.commands import classify_command

    lines = corpus()
    classify_command("ls")
    samples: dict[str, list[float]] = {"classify_us": [], "write_targets_us": []}
    for i in range(options.lines):
        line = f"{lines[i % len(lines)]} #{i}"  # a new line each time: the caches do not answer
        start = time.perf_counter()
        classify_command(line)
        samples["classify_us"].append((time.perf_counter() - start) * 1e6)
        start = time.perf_counter()
        write_targets(line)
        samples["write_targets_us"].append((time.perf_counter() - start) * 1e6)
    report = {name: round(value, 1) if isinstance(value, float) else value for name, value in report.items()}
    report |= {name: round(statistics.median(values), 1) for name, values in samples.items()}
    report["corpus_lines"] = len(lines)
    report["parser"] = parsers(lines)
    print(json.dumps(report, indent=2))


def parsers(lines: list[str]) -> dict[str, object]:
    """The parser in use (tree-sitter-bash) against bashlex, the one it replaced, when that is installed."""
    timer = "import time; t = time.perf_counter()\n"
    import tree_sitter
    import tree_sitter_bash

    ts_parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
    load = "import tree_sitter as ts, tree_sitter_bash as tsb\nts.Parser(ts.Language(tsb.language()))\n"
    found: dict[str, object] = {"tree_sitter_import_ms": round(in_fresh_interpreter(timer + load + _MS), 1)}
    start = time.perf_counter()
    found["tree_sitter_parsed"] = sum(not ts_parser.parse(line.encode()).root_node.has_error for line in lines)
    found["tree_sitter_parse_us"] = round((time.perf_counter() - start) / len(lines) * 1e6, 1)
    try:
        import bashlex
    except ImportError:
        found["bashlex"] = "not installed (pip install bashlex to compare)"
        return found
    found["bashlex_import_ms"] = round(in_fresh_interpreter(timer + "import bashlex; bashlex.parse('ls')\n" + _MS), 1)

    def bashlex_ok(text: str) -> bool:
        try:
            bashlex.parse(text)
        except Exception:  # bashlex raises several types; any of them means "not parsed"
            return False
        return True

    start = time.perf_counter()
    found["bashlex_parsed"] = sum(bashlex_ok(line) for line in lines)
    found["bashlex_parse_us"] = round((time.perf_counter() - start) / len(lines) * 1e6, 1)
    return found


if __name__ == "__main__":
    main()
