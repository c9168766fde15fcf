"""write_file's per-call overhead (issue 10): a large content is hashed once per call, not once per place that
needs its digest (the input's patch, the after-state read back, the next call's before-state)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import safepoint
from safepoint.core import hashing

SIZE = 200 * 1024


def lines(version: int) -> str:
    return "".join(f"line {i} {'v' * 40} {version if i % 97 == 0 else 0}\n" for i in range(SIZE // 50))


def test_a_write_of_a_large_file_hashes_its_content_at_most_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Once as the content (its patch, its after-state, the next call's before-state share the digest) and once
    inside the call's input hash; before, the same bytes were hashed four times a call."""
    big: list[int] = []
    real = hashlib.sha256

    def counting(data: Any = b"", **kwargs: Any) -> Any:
        if len(data) >= SIZE // 2:
            big.append(len(data))
        return real(data, **kwargs)

    tm = safepoint.open(workspace=str(tmp_path))
    with tm.start("w", run_id="r") as run:
        run.call("write_file", {"path": "lock.json", "content": lines(0)})
        monkeypatch.setattr(hashing.hashlib, "sha256", counting)
        marks = {}
        for version in (1, 2, 3):
            marks[version] = run.checkpoint()
            big.clear()
            run.call("write_file", {"path": "lock.json", "content": lines(version)})
            assert len(big) <= 2, big
        monkeypatch.undo()
    assert (tmp_path / "lock.json").read_text() == lines(3)
    # The record is still exact: a rollback to each version gives its bytes back.
    for version in (3, 2, 1):
        assert not tm.rollback_files("r", marks[version]).conflicts
        assert (tmp_path / "lock.json").read_text() == lines(version - 1)
    tm.close()


def test_a_file_changed_behind_the_runs_back_is_hashed_again_not_taken_for_the_last_write(tmp_path: Path):
    """The shortcut compares bytes, never trusts a length or a name: a file the user rewrote between two writes
    (same size, other bytes) is recorded with its own hash, and a rollback spares it as a conflict."""
    tm = safepoint.open(workspace=str(tmp_path))
    with tm.start("w", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "a.txt", "content": "agent one\n"})
        (tmp_path / "a.txt").write_text("user one!\n")  # same length, other bytes
        mid = run.checkpoint()
        run.call("write_file", {"path": "b.txt", "content": "agent two\n"})
    plan = tm.rollback_files("r", mid)
    assert not plan.conflicts and not (tmp_path / "b.txt").exists()
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "user one!\n"
    tm.close()
