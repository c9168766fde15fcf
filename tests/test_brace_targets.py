"""A command that names files by brace expansion (`rm notes.{txt,md}`) writes each of them: the copies kept before
it runs hold them all, so a rollback puts back untracked files nothing else keeps (no git, no watch that saw them
before). Skipping brace words lost them."""

from __future__ import annotations

import pytest

import safepoint
from safepoint.workspace import scan as scan_module


@pytest.mark.parametrize("watch", ["inotify", "scan"])
def test_files_a_brace_expansion_removes_are_rolled_back(workspace, monkeypatch, watch):
    if watch == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    (workspace / "notes.txt").write_text("the user's notes\n")
    (workspace / "notes.md").write_text("# the user's notes\n")
    (workspace / "keep.txt").write_text("untouched\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("run_command", {"command": "rm notes.{txt,md}"}, call_id="c1")
    assert not (workspace / "notes.txt").exists() and not (workspace / "notes.md").exists()
    tm.rollback_files("r", start)
    assert (workspace / "notes.txt").read_text() == "the user's notes\n"
    assert (workspace / "notes.md").read_text() == "# the user's notes\n"
    assert (workspace / "keep.txt").read_text() == "untouched\n"
