"""Issue 11 §4: safepoint's own configuration (`.safepoint/`: commands.toml, redact.toml ...; `.safepointignore`)
gets the store's protection from the agent's file tools: they refuse to write, create, rename onto or delete it,
whatever the spelling (case, `..`, a link), while reading it stays allowed and a command that writes it is held
(tests/test_reach_commands.py)."""

from __future__ import annotations

import os

import pytest

import safepoint
from safepoint.errors import ToolFailure
from safepoint.workspace.files import Workspace

SPELLINGS = [
    ".safepoint/redact.toml",
    ".safepoint/commands.toml",
    ".safepoint/new.toml",
    "./.safepoint/redact.toml",
    "src/../.safepoint/redact.toml",
    ".SafePoint/redact.toml",
    ".safepointignore",
    ".SAFEPOINTIGNORE",
]


@pytest.mark.parametrize("path", SPELLINGS)
def test_the_workspace_refuses_to_write_the_configuration(workspace, path) -> None:
    (workspace / "src").mkdir()
    ws = Workspace(str(workspace))
    with pytest.raises(ToolFailure, match="safepoint's own configuration"):
        ws.write(path, b"x")
    with pytest.raises(ToolFailure, match="safepoint's own configuration"):
        ws.check_writable(path)
    assert not (workspace / ".safepoint").exists() or not any((workspace / ".safepoint").iterdir())


def test_a_link_into_the_configuration_is_refused(workspace) -> None:
    (workspace / ".safepoint").mkdir()
    os.symlink(".safepoint", workspace / "cfg")
    with pytest.raises(ToolFailure, match="safepoint's own configuration"):
        Workspace(str(workspace)).write("cfg/redact.toml", b"x")
    assert list((workspace / ".safepoint").iterdir()) == []


def test_a_nested_folder_of_that_name_is_an_ordinary_folder(workspace) -> None:
    """Only the workspace's own configuration is safepoint's: `docs/.safepoint/x` is the user's file."""
    Workspace(str(workspace)).write("docs/.safepoint/x", b"x")
    assert (workspace / "docs" / ".safepoint" / "x").read_bytes() == b"x"


def test_the_agents_tools_cannot_write_rename_or_delete_it_but_may_read_it(workspace) -> None:
    (workspace / ".safepoint").mkdir()
    (workspace / ".safepoint" / "redact.toml").write_text('patterns = ["key-[0-9]+"]\n')
    (workspace / "a.txt").write_text("a\n")
    before = (workspace / ".safepoint" / "redact.toml").read_text()
    delete = '--- a/.safepoint/redact.toml\n+++ /dev/null\n@@ -1 +0,0 @@\n-patterns = ["key-[0-9]+"]\n'
    rename = "--- a/a.txt\n+++ b/.safepointignore\n@@ -1 +1 @@\n-a\n+*\n"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        results = [
            run.call_result(
                "write_file", {"path": ".safepoint/redact.toml", "content": "patterns = []\n"}, call_id="c1"
            ),
            run.call_result("write_file", {"path": ".safepointignore", "content": "*\n"}, call_id="c2"),
            run.call_result("apply_patch", {"patch": delete}, call_id="c3"),
            run.call_result("apply_patch", {"patch": rename}, call_id="c4"),
        ]
        read = run.call_result("read_file", {"path": ".safepoint/redact.toml"}, call_id="c5")
    for result in results:
        assert result.status == "failed", result.observation
        assert "safepoint's own configuration" in result.observation
    assert (workspace / ".safepoint" / "redact.toml").read_text() == before
    assert not (workspace / ".safepointignore").exists()
    assert (workspace / "a.txt").read_text() == "a\n"
    assert read.status == "succeeded" and "key-" in read.observation
