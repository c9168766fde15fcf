"""Attacks on issue 9's merge (§2-§4): each test is a broken promise found by a reviewer-attacker, marked xfail
(strict) until it is fixed."""

from __future__ import annotations

import os

import pytest

import safepoint
from safepoint.engine.session import load_view
from tests.attacks import run_in_a_fresh_process, tree


@pytest.mark.parametrize("fanotify", [True, False], ids=["fanotify", "inotify"])
def test_a_folder_renamed_by_a_command_is_rolled_back_whole(tmp_path, workspace, fanotify):
    """`mv d d2` in `safepoint run`: rollback brings d/ back but leaves d2/ with a second copy of every file (d2/*
    were never recorded as created: not rolled back, not committed, never shown). `mv src lib`, the everyday
    refactor, leaves the tree doubled after a rollback."""
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "k").write_text("keep\n")
    (workspace / "d" / "sub" / "s").write_text("s\n")
    before = tree(workspace)
    extra = {} if fanotify else {"SAFEPOINT_NO_FANOTIFY": "1"}
    run_in_a_fresh_process(tmp_path, workspace, ["mv d d2"], **extra)
    tm = safepoint.open(workspace=str(workspace))
    first = load_view(tm.store, "r").checkpoints[0].checkpoint.checkpoint_id
    paths = {p.path for p in load_view(tm.store, "r").patches}
    assert {"d2/k", "d2/sub/s"} <= paths, paths
    tm.rollback_files("r", first, include_uncertain=True)
    assert tree(workspace) == before


def test_commit_after_a_folder_rename_never_drops_the_code(tmp_path, workspace):
    """`mv src pkg` in a clean checkout, then `safepoint commit`: the commit deletes src/main.py and does not add
    pkg/main.py (never captured), so HEAD on the user's branch loses the code."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True, text=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("code\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    run_in_a_fresh_process(tmp_path, workspace, ["mv src pkg"])
    safepoint.open(workspace=str(workspace)).commit("r")
    tree = git("ls-tree", "-r", "--name-only", "HEAD").stdout.split()
    assert "pkg/main.py" in tree or "src/main.py" in tree, tree


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


@pytest.mark.xfail(
    strict=True, reason="a folder's mode changed by a command is said in the call's result, not put back (Known limits)"
)
def test_a_folders_mode_a_command_changed_is_put_back(workspace):
    """`chmod 500 d` (or `chmod -R go-rwx`, `chmod 000 d`): file modes are captured and restored (`chmod`
    patches), a folder's are not: after rollback `d` stays 0500 and nothing says so. For a user who is not root,
    that folder is now closed to writes."""
    (workspace / "d").mkdir()
    (workspace / "d" / "k").write_text("k\n")
    os.chmod(workspace / "d", 0o755)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "chmod 500 d"}, call_id="c1")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable}
    assert os.stat(workspace / "d").st_mode & 0o777 == 0o755 or "d" in said


# ------------------------------------------------------------------------------ ignored files a command reaches


@pytest.mark.parametrize(
    "command",
    [
        "find . -name '.env*' -delete",
        "for f in .env*; do rm $f; done",
        "ls -A | grep env | xargs rm",
    ],
)
def test_an_ignored_file_a_command_deletes_is_kept_or_said(workspace, command):
    """§2: "keep what the command line names, ignored or not, or say loudly that it cannot". `rm .env*` is kept
    (the glob is expanded), but `find -delete`, a `for` loop or `xargs rm` delete the gitignored `.env` with no
    word at all: the call's result says nothing, rollback reports no unrestorable path, the secret is gone."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / ".gitignore").write_text(".env*\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    (workspace / ".env").write_text("KEY=secret\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert not (workspace / ".env").exists()
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = ".env" in {u.path for u in plan.unrestorable} or "rollback cannot put it back" in result.observation
    assert (workspace / ".env").exists() or said
