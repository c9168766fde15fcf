"""The house, pinned: each folder imports only the ones below it, counting imports inside functions and under
TYPE_CHECKING (an import is an import wherever it stands); no import cycles; the CLI calls only the library API;
one store backend never imports the other; no module over 800 lines."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import safepoint

SRC = Path(__file__).resolve().parent.parent / "src" / "safepoint"

# folder -> the packages above it, which it must never import
ABOVE = {
    "core": ("safepoint.engine", "safepoint.restart", "safepoint.agent", "safepoint.supervisor", "safepoint.api"),
    "engine": ("safepoint.restart", "safepoint.agent", "safepoint.supervisor", "safepoint.api"),
    "restart": ("safepoint.agent", "safepoint.supervisor", "safepoint.api"),
    "agent": ("safepoint.supervisor", "safepoint.api"),
    "supervisor": ("safepoint.api",),
}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("folder", sorted(ABOVE))
def test_a_layer_never_imports_one_above_it(folder: str) -> None:
    found = []
    for path in sorted((SRC / folder).glob("*.py")):
        for name in sorted(imported(path)):
            if any(name == above or name.startswith(above + ".") for above in ABOVE[folder]):
                found.append(f"{path.relative_to(SRC)} imports {name}")
    assert found == []


def test_the_check_sees_imports_inside_functions_and_under_type_checking(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from safepoint.agent.loop import Agent\n"
        "def f():\n    import safepoint.api\n"
    )
    assert {"safepoint.agent.loop", "safepoint.api"} <= imported(sample)


# The whole package's import graph ---------------------------------------------------------------------------
ROOT = Path(safepoint.__file__).parent
MAX_LINES = 800


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every safepoint module ``name`` imports, wherever the import statement stands."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for _ in range(max(node.level - 1, 0)):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            names = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
            out.update(names or ({target} if target in MODULES else set()))
    out.discard(name)
    return out


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Parsed on first use, not at import: every xdist worker collects this file, one runs it (1 s of parsing)."""
    return {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in _graph():
        if start in index:
            continue
        # Tarjan's algorithm, iteratively (no recursion limit to meet).
        work = [(start, iter(sorted(_graph()[start] - {"safepoint"})))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(_graph()[nxt] - {"safepoint"}))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_every_module_is_under_800_lines() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


SHARED = {"safepoint.records", "safepoint.protocol", "safepoint.errors"}


def test_core_imports_only_records_protocol_and_errors() -> None:
    wrong = {
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if _package(name) == "safepoint.core"
        for target in targets
        if _package(target) not in SHARED | {"safepoint.core"}
    }
    assert wrong == set()


def test_the_cli_calls_only_the_library_api() -> None:
    # The API and the public modules beside it: typed results, supervision, the stand-ins and the providers.
    public = {
        "safepoint.api",
        "safepoint.results",
        "safepoint.supervision",
        "safepoint.standins",
        "safepoint.providers",
    }
    allowed = public | {"safepoint.cli", "safepoint.ui"} | SHARED
    wrong = {
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if _package(name) == "safepoint.cli"
        for target in targets
        if _package(target) not in allowed and target != "safepoint"
    }
    assert wrong == set()


def test_the_review_page_calls_only_the_library_api() -> None:
    allowed = {"safepoint.api", "safepoint.results", "safepoint.review", "safepoint.timeline", "safepoint.ui"} | SHARED
    wrong = {
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if _package(name) == "safepoint.ui"
        for target in targets
        if _package(target) not in allowed
    }
    assert wrong == set()
    assert not any(
        _package(t) == "safepoint.cli" for n, ts in _graph().items() if _package(n) == "safepoint.ui" for t in ts
    )


def test_nothing_below_the_api_imports_it() -> None:
    above = {
        "safepoint",
        "safepoint.api",
        "safepoint.supervision",
        "safepoint.cli",
        "safepoint.ui",
        "safepoint.__main__",
    }
    wrong = {name for name, targets in _graph().items() if "safepoint.api" in targets and _package(name) not in above}
    assert wrong == set()


def test_one_backend_never_imports_the_other() -> None:
    files = {n for n in _graph() if n.startswith("safepoint.store.file")}
    postgres = {n for n in _graph() if n.startswith("safepoint.store.postgres")}
    assert not any(_graph()[n] & postgres for n in files)
    assert not any(_graph()[n] & files for n in postgres)
