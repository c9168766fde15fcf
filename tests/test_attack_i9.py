"""Attacks on issue 9's merge (§2-§4): each test is a broken promise found by a reviewer-attacker, marked xfail
(strict) until it is fixed."""

from __future__ import annotations

import os

import pytest

import safepoint
from safepoint.engine.session import load_view


def _fanotify(workspace) -> bool:
    from safepoint.workspace.ignore import IgnoreRules
    from safepoint.workspace.writers import WriterWatch

    watch = WriterWatch.start(str(workspace), IgnoreRules.for_workspace(str(workspace)))
    if watch is None:
        return False
    watch.close()
    return True


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agent-runtime"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = open(full, "rb").read()
    return out


@pytest.mark.xfail(strict=True, reason="a folder renamed by a command: the files under its new name are never captured")
def test_a_folder_renamed_by_a_command_is_rolled_back_whole(workspace):
    """`mv d d2`: rollback brings d/ back but leaves d2/ with a second copy of every file (d2/* were never
    recorded as created, so they are not rolled back, not committed, and never shown). Always so with fanotify
    (root); with SAFEPOINT_NO_FANOTIFY=1 (inotify) it happens in most runs, not all."""
    if not _fanotify(workspace):
        pytest.skip("fanotify is not available here: the inotify path misses it in most runs, not all")
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "k").write_text("keep\n")
    (workspace / "d" / "sub" / "s").write_text("s\n")
    before = _tree(workspace)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "mv d d2"}, call_id="c1")
    paths = {p.path for p in load_view(tm.store, "r").patches if p.tool_call_id == "c1"}
    assert {"d2/k", "d2/sub/s"} <= paths, paths
    tm.rollback_files("r", start, include_uncertain=True)
    assert _tree(workspace) == before


@pytest.mark.xfail(strict=True, reason="a write through a hard link the agent made changes the user's file unseen")
def test_a_hard_link_the_agent_made_never_changes_the_users_file_silently(workspace):
    """`ln f g; echo agent >> g`: the user's f now ends in 'agent', and rollback removes g, reports no conflict
    and nothing unrestorable, and leaves f changed for good. It must put f back, or at least say it cannot."""
    (workspace / "f").write_text("user\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "ln f g"}, call_id="c1")
        run.call("run_command", {"command": "echo agent >> g"}, call_id="c2")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable} | {c.path for c in plan.conflicts}
    assert (workspace / "f").read_text() == "user\n" or "f" in said
