"""The engine's layers, pinned: each folder imports only the ones below it, counting imports inside functions and
under TYPE_CHECKING (an import is an import wherever it stands)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
