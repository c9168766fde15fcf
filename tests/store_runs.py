"""What the storage tests share: a store of each kind opened on a workspace (file, file encrypted, PostgreSQL),
and runs that write a large text file once per step."""

from __future__ import annotations

import random
from typing import Any

import pytest

import safepoint

KEY = bytes(range(32))
KINDS = ["file", "file-sealed", "postgres"]


def text_of(seed: int, lines: int = 2000) -> str:
    """A file of ``lines`` lines nothing compresses away, the same for the same seed."""
    rng = random.Random(seed)
    return "".join(f"{seed}.{i} {rng.getrandbits(64):x}\n" for i in range(lines))


def finished_run(
    tm: Any, run_id: str, versions: list[str], path: str = "big.txt", also: str | None = None
) -> list[Any]:
    """A finished run that writes ``path`` once per step (and appends to ``also`` with a command); returns the
    checkpoint after each step."""
    after = []
    with tm.start("t", run_id=run_id) as run:
        for number, content in enumerate(versions):
            run.step()
            run.call("write_file", {"path": path, "content": content}, call_id=f"c{number}")
            if also is not None:
                run.call("run_command", {"command": f"printf '{number}\\n' >> {also}"}, call_id=f"d{number}")
            after.append(run.checkpoint())
        run.finish("completed")
    return after


def open_kind(request: pytest.FixtureRequest, tmp_path: Any, workspace: Any) -> safepoint.Safepoint:
    """The store of ``request.param``'s kind (one of ``KINDS``) on ``workspace``."""
    if request.param == "postgres":
        return safepoint.open(request.getfixturevalue("fresh_url"), workspace=str(workspace))
    key = KEY if request.param == "file-sealed" else None
    return safepoint.open(str(tmp_path / "store"), workspace=str(workspace), key=key)
