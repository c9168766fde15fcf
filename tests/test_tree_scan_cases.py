"""The scan fallback on the changes real tools make (``workspace/tree_scan.py``, ``find_listing.py``,
``changed_since.py``; issue 10 §5). Each case runs in both kinds of pass: one that prints only the entries whose
ctime moved (local file systems) and one that prints and compares the whole listing (elsewhere), each split over
parallel find processes. After every pass the tree holds exactly what a full Python scan sees, and the pass
reported exactly what differs (a racy file may be reported with the same stat: its content was read again)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import safepoint
from safepoint.core.hashing import content_hash
from safepoint.engine import command_capture
from safepoint.engine.session import load_view
from safepoint.workspace import changed_since, find_listing, tree_scan
from safepoint.workspace import scan as scan_module
from safepoint.workspace.ignore import IgnoreRules
from safepoint.workspace.scan import FileStat, scan
from safepoint.workspace.tree_scan import TreeScan


def rules_for(root: Path) -> IgnoreRules:
    return IgnoreRules.for_workspace(str(root), store_dir=str(root / ".store"))


@pytest.fixture(params=["changed only", "whole listing"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(find_listing, "SPLIT_MIN", 1)  # parallel walkers, even in a small tree
    monkeypatch.setattr(tree_scan, "_WALKERS", 1)
    if request.param == "whole listing":
        monkeypatch.setattr(tree_scan, "local_times", lambda root: False)
    return str(request.param)


class Checked:
    """A tree and the full scan it must match after each pass."""

    def __init__(self, root: Path, mode: str) -> None:
        self.root = root
        tree = TreeScan.start(str(root), rules_for(root))
        assert tree is not None
        assert (tree._since is not None) == (mode == "changed only")
        self.tree = tree
        self.before = scan(str(root), rules_for(root))
        assert tree.stats == self.before

    def check(self) -> dict[str, FileStat | None]:
        reported = self.tree.rescan()
        after = scan(str(self.root), rules_for(self.root))
        assert self.tree.stats == after
        expected = {p for p in self.before.keys() | after.keys() if self.before.get(p) != after.get(p)}
        assert expected <= reported.keys(), f"missed {expected - reported.keys()}"
        assert reported.keys() - expected <= self.tree.content_changed
        assert all(reported[p] == self.before.get(p) for p in reported)
        self.before = after
        return reported


def test_a_file_replaced_by_a_folder_and_back(workspace: Path, mode: str) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "x").write_text("a file\n")
    checked = Checked(workspace, mode)
    (workspace / "src" / "x").unlink()
    (workspace / "src" / "x").mkdir()
    (workspace / "src" / "x" / "inner.txt").write_text("in the folder\n")
    assert set(checked.check()) == {"src/x", "src/x/inner.txt"}
    shutil.rmtree(workspace / "src" / "x")
    (workspace / "src" / "x").write_text("a file again\n")
    assert set(checked.check()) == {"src/x", "src/x/inner.txt"}


def test_renames_across_folders(workspace: Path, mode: str) -> None:
    for folder in ("a", "b", "c/deep"):
        (workspace / folder).mkdir(parents=True)
    (workspace / "a" / "f.txt").write_text("f\n")
    for n in range(3):
        (workspace / "c" / "deep" / f"g{n}.txt").write_text(f"{n}\n")
    checked = Checked(workspace, mode)
    os.rename(workspace / "a" / "f.txt", workspace / "b" / "f.txt")
    assert set(checked.check()) == {"a/f.txt", "b/f.txt"}
    # a folder moved keeps its files' ctimes: only the folders' listings show them
    os.rename(workspace / "c" / "deep", workspace / "a" / "moved")
    assert set(checked.check()) == {f"{d}/g{n}.txt" for d in ("c/deep", "a/moved") for n in range(3)}
    assert checked.tree.arrived == {"a/moved/"}  # what the capture tells a move by (its files' ctimes are old)
    # a folder moved over another one (a new inode under the same name)
    (workspace / "other").mkdir()
    (workspace / "other" / "g0.txt").write_text("another\n")
    shutil.rmtree(workspace / "a" / "moved")
    os.rename(workspace / "other", workspace / "a" / "moved")
    assert set(checked.check()) == {"a/moved/g0.txt", "a/moved/g1.txt", "a/moved/g2.txt"}
    assert checked.tree.arrived == {"a/moved/"}
    (workspace / "a" / "moved" / "g9.txt").write_text("new in a folder that stayed\n")
    assert set(checked.check()) == {"a/moved/g9.txt"} and checked.tree.arrived == set()


def test_a_deep_change_in_a_tree_of_many_folders(workspace: Path, mode: str) -> None:
    deep = workspace
    for level in range(12):
        for sibling in range(3):
            (deep / f"s{sibling}").mkdir()
            (deep / f"s{sibling}" / "f.txt").write_text(f"{level} {sibling}\n")
        deep = deep / "s1"
    checked = Checked(workspace, mode)
    leaf = deep / "f.txt"
    with leaf.open("a") as handle:
        handle.write("changed at the bottom\n")
    [changed] = checked.check()
    assert changed == str(leaf.relative_to(workspace))
    assert checked.check() == {}


def test_a_symlink_loop_and_links_to_folders_are_never_followed(workspace: Path, mode: str) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("f\n")
    os.symlink("loop", workspace / "loop")
    os.symlink("..", workspace / "d" / "up")
    checked = Checked(workspace, mode)
    assert set(checked.tree.stats) == {"d/f.txt", "loop", "d/up"}
    os.symlink("b", workspace / "a")
    os.symlink("a", workspace / "b")
    os.unlink(workspace / "d" / "up")
    os.symlink(".", workspace / "d" / "up")
    assert set(checked.check()) == {"a", "b", "d/up"}


def test_names_with_newlines_bytes_and_lines_inside(workspace: Path, mode: str) -> None:
    """The listing's separator is NUL: a name holding a newline, bytes that are not UTF-8, or what looks like a
    whole entry (``f 1 2.3 4 644``) is one name."""
    names = ["new\nline.txt", os.fsdecode(b"caf\xe9.txt"), "f 1 2.3 4 644", "-rf", "(", "sp ace", "x\\y*[z]?"]
    for name in names:
        (workspace / name).write_text("x\n")
    (workspace / "-dir").mkdir()
    (workspace / "-dir" / "in.txt").write_text("x\n")
    checked = Checked(workspace, mode)
    for name in names:
        (workspace / name).write_text("changed\n")
    (workspace / "-dir" / "in.txt").write_text("changed\n")
    reported = checked.check()
    assert len(reported) == len(names) + 1
    os.rename(workspace / "new\nline.txt", workspace / "new\nname\n")
    assert len(checked.check()) == 2


def test_a_file_changed_while_the_pass_runs(workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written after find saw it, before the pass ends: that pass or the next reports it, whatever its stat."""
    (workspace / "a.txt").write_text("one\n")
    (workspace / "b.txt").write_text("one\n")
    checked = Checked(workspace, mode)
    time.sleep(0.1)  # b.txt is not racy any more: no content hash of it is kept
    real_list = TreeScan._list

    def listing(self: TreeScan, form: str, newer_ns: int | None = None) -> bytes:
        out = real_list(self, form, newer_ns)
        for name in ("a.txt", "b.txt"):
            (workspace / name).write_text("two\n")  # same size, just after find stat'ed it
        return out

    monkeypatch.setattr(TreeScan, "_list", listing)
    during = checked.tree.rescan()
    monkeypatch.setattr(TreeScan, "_list", real_list)
    checked.before = {p: info for p, info in checked.tree.stats.items()}
    after = checked.check()
    assert {"a.txt", "b.txt"} <= during.keys() | after.keys()
    assert checked.check() == {}


def test_a_step_of_the_clock_makes_a_whole_pass(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set back, the clock would stamp new changes before the last pass began: that pass lists everything."""
    (workspace / "a.txt").write_text("one\n")
    tree = TreeScan.start(str(workspace), rules_for(workspace))
    assert tree is not None and tree._since is not None
    wholes: list[int] = []
    real = TreeScan._recompute_stats

    def whole(self: TreeScan, changed: object) -> dict[str, FileStat | None]:
        wholes.append(1)
        return real(self, changed)  # type: ignore[arg-type]  # (passed through)

    monkeypatch.setattr(TreeScan, "_recompute_stats", whole)
    (workspace / "a.txt").write_text("two, longer\n")
    tree._clock += 10 * changed_since.STEP_NS  # as if realtime had been set since the last pass
    assert set(tree.rescan()) == {"a.txt"} and wholes == [1]
    (workspace / "b.txt").write_text("b\n")
    assert set(tree.rescan()) == {"b.txt"} and wholes == [1]  # the clock held: a filtered pass again


@pytest.mark.parametrize(
    ("mounts", "local"),
    [
        (["27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"], True),
        (["27 1 254:0 / / rw - ext4 /dev/vda rw", "40 27 0:50 / /ws rw - nfs4 srv:/x rw"], False),
        (["27 1 254:0 / / rw - nfs srv:/ rw", "40 27 0:50 / /ws rw - overlay overlay rw"], True),
        (["27 1 254:0 / / rw - ext4 /dev/vda rw", "41 27 0:51 / /ws/data rw - fuse.sshfs h:/ rw"], False),
        (["27 1 254:0 / / rw - ext4 /dev/vda rw", "41 27 0:51 / /ws\\040two rw - 9p drvfs rw"], True),
        (["27 1 254:0 / / rw - ext4 /dev/vda rw", "41 27 0:51 / /ws rw shared:1 - virtiofs share rw"], False),
    ],
)
def test_file_times_are_trusted_on_local_file_systems_only(tmp_path: Path, mounts: list[str], local: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("\n".join(mounts) + "\n")
    assert changed_since.local_times("/ws", str(info)) is local


@pytest.fixture(params=["inotify", "scan"])
def watch_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    return str(request.param)


def test_your_edit_of_a_file_the_next_command_rewrites_stays_yours(workspace: Path, watch_mode: str) -> None:
    """Between two commands the user edits a file; the second command (an opaque program: its command line names
    nothing) rewrites it. Its record starts from the user's content, so rolling the command back gives the user's
    edit back, not what the run saw before it."""
    (workspace / "conf.txt").write_text("original\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "conf.txt", "content": "agent's\n"}, call_id="w1")
        run.call("run_command", {"command": "true"}, call_id="c1")
        mark = run.checkpoint()
        (workspace / "conf.txt").write_text("the user's edit\n")
        rewrite = "python3 -c \"open('conf.txt', 'w').write('the command wrote this\\\\n')\""
        run.call("run_command", {"command": rewrite}, call_id="c2")
        assert (run.session.capture_started is not None) and (
            (run.session.capture_started.watcher is None) == (watch_mode == "scan")
        )
    [c2] = [p for p in load_view(tm.store, "r").patches if p.tool_call_id == "c2"]
    assert c2.path == "conf.txt" and c2.before_hash == content_hash(b"the user's edit\n")
    plan = tm.rollback_files("r", mark)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "conf.txt").read_text() == "the user's edit\n"


def test_a_command_making_folders_costs_no_pass_over_the_workspace(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback's passes say which folders came (made or moved in), as the journal does: the capture does not
    work it out again by a walk of every file it knows (O(workspace) in Python per command that makes a file)."""
    monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))

    def no_walk(*args: object) -> set[str]:
        raise AssertionError("the capture walked its whole cache to find the folders that came")

    monkeypatch.setattr(command_capture.CommandCapture, "_folders_arrived", no_walk)
    (workspace / "old").mkdir()
    (workspace / "old" / "k.txt").write_text("k\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "mkdir -p new/sub && echo x > new/sub/f.txt"}, call_id="c1")
        run.call("run_command", {"command": "mv old moved"}, call_id="c2")
    patches = [(p.tool_call_id, p.path, p.op) for p in load_view(tm.store, "r").patches]
    assert patches == [
        ("c1", "new/sub/f.txt", "create"),
        ("c2", "old/k.txt", "delete"),
        ("c2", "moved/k.txt", "create"),
    ]


def test_a_find_killed_mid_pass_is_an_error_not_deletions(
    workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A find process stopped by a signal (the OOM killer) leaves its listing cut short: what it did not print is
    not gone. The pass fails (and the tree is left as it was) rather than report every file after the cut as
    deleted."""
    for name in ("a.txt", "b.txt"):
        (workspace / name).write_text("x\n")
    checked = Checked(workspace, mode)
    real = find_listing._run_all

    def killed(root: str, commands: list[list[str]]) -> tuple[list[bytes], list[int], bytes]:
        outputs, statuses, errors = real(root, commands)
        return [b".\0d 0 0.0 0 755\0"] + [b""] * (len(outputs) - 1), [-9] * len(statuses), errors

    monkeypatch.setattr(find_listing, "_run_all", killed)
    (workspace / "a.txt").unlink()
    since = checked.tree._since
    with pytest.raises(OSError, match="signal 9"):
        checked.tree.rescan()
    assert set(checked.tree.stats) == {"a.txt", "b.txt"} and checked.tree._since == since
    monkeypatch.setattr(find_listing, "_run_all", real)
    assert set(checked.check()) == {"a.txt"}
