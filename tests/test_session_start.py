"""A session starts without waiting for its workspace capture (issue 10 §5): the watches, the baseline scan and
git's view are made on a thread, and the first command waits for them. Nothing is lost to that:

1. ``start`` returns while the watches are still being set (the thread is held; nothing timed);
2. a file changed while the watches are being set (in a folder already watched, in one not yet watched, made
   new), or by the user right after ``start`` returned, is a change the session saw: a command that overwrites it
   afterwards is rolled back to the user's version, with or without inotify (no git: nothing else keeps it);
3. a file changed before the session started stays the baseline's, as before;
4. a start that fails is raised by the first command, and a session that ran no command still records the
   workspace's state and keeps what it learnt for the next one.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import safepoint
from safepoint.core.rollback import UNKNOWN
from safepoint.engine import command_capture
from safepoint.engine.session import load_view
from safepoint.workspace import scan as scan_module
from safepoint.workspace.scan import ChangeWatcher
from safepoint.workspace.tree_scan import TreeScan

# A program whose command line does not say which files it writes: nothing is kept ahead for it, so what rollback
# puts back is only what the capture saw.
OPAQUE = "python3 -c \"import sys; [open(p, 'w').write('agent\\n') for p in sys.argv[1:]]\" {}"
TICK = 0.02  # seconds: more than one tick of the kernel's coarse clock (HZ >= 100)


@pytest.fixture(params=["inotify", "scan"])
def watch_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    return str(request.param)


def before_baseline(monkeypatch: pytest.MonkeyPatch, hook: Any) -> None:
    """Run ``hook`` right before the capture's baseline pass: a scan (inotify) or the fallback's first find."""
    real_scan, real_tree = command_capture.scan, TreeScan.__dict__["start"]

    def scan(root: str, rules: Any) -> Any:
        hook()
        return real_scan(root, rules)

    def start(cls: Any, root: str, rules: Any) -> Any:
        hook()
        return real_tree.__func__(cls, root, rules)

    monkeypatch.setattr(command_capture, "scan", scan)
    monkeypatch.setattr(TreeScan, "start", classmethod(start))


def tree(workspace: Path, folders: int = 6) -> None:
    for n in range(folders):
        (workspace / f"d{n}").mkdir()
        (workspace / f"d{n}" / "f.txt").write_text(f"before {n}\n")


def test_start_does_not_wait_for_the_watches(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree(workspace)
    release, finished = threading.Event(), threading.Event()
    real = ChangeWatcher.__dict__["start"]

    def held(cls: Any, root: str, rules: Any) -> Any:
        release.wait(timeout=2)  # a start that waits for the watches waits here, then goes on
        finished.set()
        return real.__func__(cls, root, rules)

    monkeypatch.setattr(ChangeWatcher, "start", classmethod(held))
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    assert not finished.is_set(), "start waited for the watches"
    release.set()
    with run:
        run.call("run_command", {"command": "echo x > d0/f.txt"}, call_id="c1")
        assert run.session.capture_started is not None and run.session.capture_started.watcher is not None
    assert [p.path for p in load_view(tm.store, "r").patches] == ["d0/f.txt"]


def user_edits(workspace: Path) -> None:
    """The user's edits: two folders' files (the first folder is watched already, the last not yet), a new one.
    Made a clock tick after the start at least: a file system may stamp times with a coarse clock, which lags
    the fine one by up to a tick, and within it a change cannot be told from one made just before the start."""
    time.sleep(TICK)
    (workspace / "d0" / "f.txt").write_text("the user's 0\n")
    (workspace / "d5" / "f.txt").write_text("the user's 5\n")
    (workspace / "d3" / "new.txt").write_text("the user's new\n")


def overwrite_and_roll_back(tm: safepoint.Safepoint, run: safepoint.Run, workspace: Path) -> None:
    start = run.checkpoint()
    run.call("run_command", {"command": OPAQUE.format("d0/f.txt d5/f.txt d3/new.txt")})
    run.close()
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "d0" / "f.txt").read_text() == "the user's 0\n"
    assert (workspace / "d5" / "f.txt").read_text() == "the user's 5\n"
    assert (workspace / "d3" / "new.txt").read_text() == "the user's new\n"


def test_a_change_made_while_the_watches_are_set_is_not_missed(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(workspace)
    added: list[str] = []
    real = ChangeWatcher._add_watch

    def add_watch(self: ChangeWatcher, rel: str, path: str) -> bool:
        added.append(rel)
        if len(added) == 3:  # the root and two folders are watched, the others not yet
            user_edits(workspace)
        return real(self, rel, path)

    monkeypatch.setattr(ChangeWatcher, "_add_watch", add_watch)
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    overwrite_and_roll_back(tm, run, workspace)
    assert len(added) == 7


def test_a_change_made_before_the_baseline_scan_is_not_missed(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, watch_mode: str
) -> None:
    """Made after the session started, before its scan: with the watches set (inotify) or none (the scan)."""
    tree(workspace)
    before_baseline(monkeypatch, lambda: user_edits(workspace))
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    overwrite_and_roll_back(tm, run, workspace)


def test_a_change_the_user_makes_while_the_start_goes_on_is_not_missed(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, watch_mode: str
) -> None:
    tree(workspace)
    edited = threading.Event()
    before_baseline(monkeypatch, lambda: edited.wait(timeout=10))  # the user edits once start has returned
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    user_edits(workspace)
    edited.set()
    overwrite_and_roll_back(tm, run, workspace)


def test_a_file_changed_before_the_session_stays_the_baselines(workspace: Path, watch_mode: str) -> None:
    tree(workspace)
    (workspace / "d1" / "f.txt").write_text("changed before the session\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": OPAQUE.format("d1/f.txt")}, call_id="c1")
    [patch] = load_view(tm.store, "r").patches
    assert patch.path == "d1/f.txt" and patch.before_hash == UNKNOWN  # never seen: not guessed (no git)
    assert [u.path for u in tm.rollback_files("r", start).unrestorable] == ["d1/f.txt"]


def test_a_start_that_fails_is_raised_by_the_first_command(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree(workspace)

    def denied() -> None:
        raise PermissionError(13, "Permission denied", str(workspace))

    before_baseline(monkeypatch, denied)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "a.txt", "content": "a\n"}, call_id="w1")  # no capture needed
        for call_id in ("c1", "c2"):  # every use fails, as a capture that could not be made did
            with pytest.raises(PermissionError):
                run.call("run_command", {"command": "true"}, call_id=call_id)
    assert (workspace / "a.txt").read_text() == "a\n"


def test_a_session_without_a_command_records_its_start_and_keeps_what_it_learnt(
    workspace: Path, watch_mode: str
) -> None:
    tree(workspace)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")  # saves what the capture saw
    (workspace / "d2" / "f.txt").write_text("the user's 2\n")  # between two sessions of the run
    tm.resume("r").close()  # a session that runs no command: it learns the edit, and keeps it
    assert len(load_view(tm.store, "r").workspace_states) == 2
    with tm.resume("r") as third:
        start = third.checkpoint()
        third.call("run_command", {"command": OPAQUE.format("d2/f.txt")}, call_id="c1")
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "d2" / "f.txt").read_text() == "the user's 2\n"


def test_the_agents_first_write_is_never_taken_for_the_users_dirty_state(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace's state at the start (git's dirty paths: the user's work in progress) is read on the thread
    too; a write_file that ran before the thread got there made the agent's new file read as the user's (seen as a
    flaky test under load). The thread is held here until the write has run, if the write does not wait for it."""
    subprocess.run(["git", "-C", str(workspace), "init", "-q", "-b", "main"], check=True)
    (workspace / "kept.txt").write_text("committed\n")
    subprocess.run(["git", "-C", str(workspace), "add", "kept.txt"], check=True)
    subprocess.run(
        ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], check=True
    )
    (workspace / "user.txt").write_text("the user's work in progress\n")
    release = threading.Event()
    real = ChangeWatcher.__dict__["start"]

    def held(cls: Any, root: str, rules: Any) -> Any:
        release.wait(timeout=2)  # the thread is slow: a write that does not wait for it runs first
        return real.__func__(cls, root, rules)

    monkeypatch.setattr(ChangeWatcher, "start", classmethod(held))
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        timer = threading.Timer(0.5, release.set)  # lets a write that waits for the thread go on
        timer.start()
        run.call("write_file", {"path": "feature.py", "content": "x = 1\n"}, call_id="w1")
        release.set()
        timer.cancel()
    [started] = load_view(tm.store, "r").workspace_states
    assert started.dirty == ("user.txt",)


def test_a_command_run_at_once_after_the_start_is_captured_whole(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, watch_mode: str
) -> None:
    """The first command runs while the capture's start is still on its thread (held until the command is
    called): it waits for the watches and the baseline, so its changes deep in the tree (rewritten, made, removed)
    are its own, each put back by rollback; the files it did not touch are the baseline's, never recorded."""
    for n in range(3):
        deep = workspace / "a" / "b" / "c" / f"d{n}"
        deep.mkdir(parents=True)
        (deep / "f.txt").write_text(f"before {n}\n")
    git = ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "i"], check=True)  # what the command overwrites can be put back
    release = threading.Event()
    before_baseline(monkeypatch, lambda: release.wait(timeout=10))
    real_ready = command_capture.CommandCapture._ready

    def ready(self: command_capture.CommandCapture) -> None:
        release.set()  # the command is here: the start may go on, and the command waits for it
        real_ready(self)

    monkeypatch.setattr(command_capture.CommandCapture, "_ready", ready)
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start("t", run_id="r")
    assert not release.is_set()  # start returned before its baseline
    with run:
        start = run.checkpoint()
        command = "echo agent > a/b/c/d0/f.txt; rm a/b/c/d1/f.txt; mkdir -p a/b/c/d2/e && echo new > a/b/c/d2/e/g.txt"
        run.call("run_command", {"command": command}, call_id="c1")
    patches = load_view(tm.store, "r").patches
    assert sorted((p.tool_call_id, p.path) for p in patches) == [
        ("c1", "a/b/c/d0/f.txt"),
        ("c1", "a/b/c/d1/f.txt"),
        ("c1", "a/b/c/d2/e/g.txt"),
    ]
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    assert not (workspace / "a/b/c/d2/e/g.txt").exists()
    for n in range(3):
        assert (workspace / "a" / "b" / "c" / f"d{n}" / "f.txt").read_text() == f"before {n}\n"
