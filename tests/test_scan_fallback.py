"""The scan fallback kept between passes (``workspace/tree_scan.py``, issue 10 §5): one ``find`` per pass, Python
only for the span of the listing that changed. What it must keep from the full scan it replaces:

1. after any sequence of changes (files made, removed, rewritten, renamed; folders made, moved, removed; ignore
   files edited; symlinks; names that are not text), its files and stats are exactly ``scan``'s, and what a pass
   reports is exactly the difference of two scans;
2. a change that keeps the size and lands in the same timestamp tick (the stat does not move) is still found:
   the file is racy when seen and its content is read again (git's racy-git rule). Shown on a file system that
   keeps whole seconds (emulated: the times cut to the second), where the plain stat scan misses it; in a command
   capture too, with the journal and with the fallback;
3. without GNU find, the capture scans as before.

Both kinds of pass (only the entries whose ctime moved, or the whole listing) and passes split over parallel find
processes are held to 1.; ``test_tree_scan_cases.py`` has the cases one by one.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.engine import command_capture
from safepoint.engine.session import load_view
from safepoint.workspace import find_listing, tree_scan
from safepoint.workspace import scan as scan_module
from safepoint.workspace.ignore import IgnoreRules
from safepoint.workspace.scan import FileStat, scan
from safepoint.workspace.tree_scan import TreeScan


def rules_for(root: Path) -> IgnoreRules:
    return IgnoreRules.for_workspace(str(root), store_dir=str(root / ".store"), extra=("*.log",))


def seed_tree(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("x\n")
    (root / ".store").mkdir()
    (root / ".store" / "blob").write_text("x\n")
    (root / ".gitignore").write_text("build/\n*.tmp\n!keep.tmp\n")
    for top in ("src", "lib", "build", "docs"):
        for sub in ("a", "b"):
            folder = root / top / sub
            folder.mkdir(parents=True)
            for n in range(3):
                (folder / f"f{n}.txt").write_text(f"{top} {sub} {n}\n")
    (root / "src" / "a" / ".gitignore").write_text("secret*\n")
    (root / "src" / "a" / "secret.txt").write_text("s\n")
    (root / "lib" / "x.tmp").write_text("t\n")
    (root / "lib" / "keep.tmp").write_text("k\n")
    (root / "lib" / "run.log").write_text("l\n")
    os.symlink("src/a/f0.txt", root / "link")
    os.symlink("src", root / "dirlink")
    (root / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name\n")
    (root / "new\nline.txt").write_text("newline in the name\n")


def mutate(root: Path, rng: random.Random, step: int) -> None:
    files = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts and ".store" not in p.parts]
    folders = [p for p in root.rglob("*") if p.is_dir() and not p.is_symlink() and p.name not in (".git", ".store")]
    action = rng.choice(["write", "write", "append", "remove", "rename", "mkdir", "rmtree", "move", "ignore", "link"])
    if action in ("write", "append", "remove", "rename") and files:
        target = rng.choice(files)
        if action == "write":
            target.write_text(f"rewritten {step}\n")
        elif action == "append":
            with target.open("a") as handle:
                handle.write("more\n")
        elif action == "remove":
            target.unlink()
        else:
            target.rename(target.with_name(f"renamed{step}{rng.choice(['.txt', '.tmp', '.log'])}"))
    elif action == "mkdir" and folders:
        made = rng.choice(folders) / rng.choice([f"new{step}", "build", "secret-dir"])
        made.mkdir(exist_ok=True)
        (made / "inside.txt").write_text(f"{step}\n")
    elif action == "rmtree" and folders:
        shutil.rmtree(rng.choice(folders), ignore_errors=True)
    elif action == "move" and len(folders) > 1:
        source, dest = rng.sample(folders, 2)
        if not str(dest).startswith(str(source)):
            shutil.move(str(source), str(dest / f"moved{step}"))
    elif action == "ignore":
        ignore = rng.choice([root / ".gitignore", root / "src" / ".gitignore", root / "lib" / ".gitignore"])
        if ignore.parent.is_dir():
            ignore.write_text(rng.choice(["build/\n", "*.txt\n!f1.txt\n", "", "new*/\n", "moved*\n"]))
    elif action == "link" and files:
        link = root / f"link{step}"
        os.symlink(os.path.relpath(rng.choice(files), root), link)


def split_passes(monkeypatch: pytest.MonkeyPatch, walkers: bool) -> None:
    """Passes by one find process, or split over three (``find_listing.plan_walkers``), whatever the machine."""
    monkeypatch.setattr(find_listing, "SPLIT_MIN", 1 if walkers else 10**9)
    monkeypatch.setattr(find_listing, "MAX_STARTS", 3)
    monkeypatch.setattr(tree_scan, "_WALKERS", 2)


@pytest.mark.parametrize(
    ("seed", "walkers", "changed_only"), [(1, False, True), (2, True, True), (3, False, False), (4, True, False)]
)
def test_every_pass_is_what_a_full_scan_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, walkers: bool, changed_only: bool
) -> None:
    """``changed_only``: passes print only the entries whose ctime moved (``changed_since.py``), as on a local
    file system; else the whole listing, compared."""
    split_passes(monkeypatch, walkers)
    if not changed_only:
        monkeypatch.setattr(tree_scan, "local_times", lambda root: False)
    root = tmp_path / "ws"
    root.mkdir()
    seed_tree(root)
    tree = TreeScan.start(str(root), rules_for(root))
    assert tree is not None
    assert bool(tree._walkers) == walkers and (tree._since is not None) == changed_only
    before = scan(str(root), rules_for(root))
    assert tree.stats == before
    rng = random.Random(seed)
    for step in range(25):
        for k in range(rng.randint(1, 3)):
            mutate(root, rng, step * 10 + k)
        reported = tree.rescan()
        after = scan(str(root), rules_for(root))
        assert tree.stats == after, f"step {step}"
        expected = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        # a racy file may also be reported with its stat unchanged (its content was read again): never one missed
        assert expected <= reported.keys(), f"step {step}: missed {expected - reported.keys()}"
        assert all(reported[p] == before.get(p) for p in reported)
        assert reported.keys() - expected <= tree.content_changed
        before = after


def test_names_that_need_quoting_and_excluded_folders(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    seed_tree(root)
    tree = TreeScan.start(str(root), rules_for(root))
    assert tree is not None
    assert {"lib/keep.tmp", "link", "dirlink", "src/a/.gitignore"} <= tree.stats.keys()
    assert not any(p.startswith(("build/", ".git/", ".store/", "src/a/secret")) for p in tree.stats)
    assert not any(p.endswith((".log", "x.tmp")) for p in tree.stats)
    assert tree.stats.keys() == scan(str(root), rules_for(root)).keys()  # quoted names the same way
    (root / "build" / "a" / "f0.txt").write_text("ignored: never reported\n")
    (root / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"changed\n")
    assert list(tree.rescan()) == [p for p in tree.stats if "caf" in p]


UNIT = 10_000_000_000  # ns: coarser than any real file system, so that a loaded machine still fits in one


def coarse(info: FileStat) -> FileStat:
    return FileStat(info.size, info.mtime_ns // UNIT * UNIT, info.ctime_ns // UNIT * UNIT, info.ino, info.mode)


@pytest.fixture
def coarse_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system whose times are coarse (ext3 and HFS+ keep whole seconds, FAT two): every stat the capture and
    the scans take is cut to ten seconds. Two changes in one such tick leave the same stat; a test whose changes
    fall in two ticks (a loaded machine) is skipped: it would not show anything."""
    real_list, real_lstat, real_scan = TreeScan._list, TreeScan._lstat, scan_module.scan

    def cut(text: bytes) -> bytes:
        return str(int(text.split(b".")[0]) // (UNIT // 1_000_000_000) * (UNIT // 1_000_000_000)).encode()

    def listing(self: TreeScan, form: str, newer_ns: int | None = None) -> bytes:
        out = real_list(self, form, newer_ns).split(b"\0")
        for index in range(1, len(out), 2):
            fields = out[index].split(b" ")
            fields[2] = cut(fields[2])
            if len(fields) > 5:
                fields[5] = cut(fields[5])
            out[index] = b" ".join(fields)
        return b"\0".join(out)

    def lstat(self: TreeScan, key: bytes) -> FileStat | None:
        info = real_lstat(self, key)
        return None if info is None else coarse(info)

    def full_scan(root: str, rules: Any) -> dict[str, FileStat]:
        return {p: coarse(i) for p, i in real_scan(root, rules).items()}

    def recorded(root: str, path: str, folders: dict[str, bool]) -> FileStat | None:
        info = scan_module.recorded_stat(root, path, folders)
        return None if info is None else coarse(info)

    monkeypatch.setattr(TreeScan, "_list", listing)
    monkeypatch.setattr(TreeScan, "_lstat", lstat)
    monkeypatch.setattr(command_capture, "scan", full_scan)
    monkeypatch.setattr(command_capture, "_stat", recorded)


@pytest.mark.parametrize("changed_only", [True, False])
def test_a_same_size_change_within_the_tick_is_found(
    tmp_path: Path, coarse_times: None, monkeypatch: pytest.MonkeyPatch, changed_only: bool
) -> None:
    if not changed_only:
        monkeypatch.setattr(tree_scan, "local_times", lambda root: False)
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    (root / "b.txt").write_text("old\n")
    tree = TreeScan.start(str(root), rules_for(root))
    assert tree is not None and (tree._since is not None) == changed_only
    rules = rules_for(root)
    plain = command_capture.scan(str(root), rules)  # the stat scan, with the same cut times
    (root / "a.txt").write_text("two\n")  # same size, same second: the same stat
    if command_capture.scan(str(root), rules) != plain:
        pytest.skip("a tick went by between the two writes: the stat moved")
    assert tree.rescan() == {"a.txt": tree.stats["a.txt"]}  # its stat before is the one it has
    assert tree.content_changed == {"a.txt"}
    assert tree.rescan() == {}  # reported once


def _stat_of(path: Path) -> tuple[int, int, int, int, int]:
    info = os.lstat(path)
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode


@pytest.fixture(params=["inotify", "scan"])
def watch_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    return str(request.param)


def test_a_command_that_changes_what_was_just_written_is_captured(
    workspace: Path, watch_mode: str, coarse_times: None
) -> None:
    """The agent writes a file, then a command rewrites it at once, keeping its size: the command's change is
    recorded and rolled back, though its stat is the one the capture saw before the command."""
    (workspace / "conf.txt").write_text("mode=aaaa\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "conf.txt", "content": "mode=bbbb\n"}, call_id="w1")
        rewrite = "python3 -c \"open('conf.txt', 'r+').write('mode=cccc\\\\n')\""  # in place: same inode
        written = coarse(FileStat(*_stat_of(workspace / "conf.txt")))
        run.call("run_command", {"command": rewrite}, call_id="c1")
        if coarse(FileStat(*_stat_of(workspace / "conf.txt"))) != written:
            pytest.skip("a tick went by between the write and the command: the stat moved")
        assert (run.session.capture_started is not None) and (
            (run.session.capture_started.watcher is None) == (watch_mode == "scan")
        )
    assert (workspace / "conf.txt").read_text() == "mode=cccc\n"
    assert [(p.tool_call_id, p.path) for p in load_view(tm.store, "r").patches] == [
        ("w1", "conf.txt"),
        ("c1", "conf.txt"),
    ]
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "conf.txt").read_text() == "mode=aaaa\n"


def test_without_gnu_find_the_capture_scans(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "find"
    fake.write_text("#!/bin/sh\necho 'find: unknown predicate -printf' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (workspace / "a.txt").write_text("a\n")
    assert TreeScan.start(str(workspace), IgnoreRules.for_workspace(str(workspace))) is None
    monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "echo b > a.txt"}, call_id="c1")
    assert [p.path for p in load_view(tm.store, "r").patches] == ["a.txt"]


def test_a_store_and_excluded_folders_whose_names_are_patterns(tmp_path: Path) -> None:
    """find is told the folders to skip as -path patterns: names with pattern characters are escaped (the
    store named ``st[o]re*`` is skipped, ``store2`` beside it is not)."""
    root = tmp_path / "ws"
    root.mkdir()
    for name in ("st[o]re*", "store2", "stre"):
        (root / name).mkdir()
        (root / name / "f.txt").write_text(f"{name}\n")
    rules = IgnoreRules.for_workspace(str(root), store_dir=str(root / "st[o]re*"))
    tree = TreeScan.start(str(root), rules)
    assert tree is not None
    assert set(tree.stats) == {"store2/f.txt", "stre/f.txt"}
    (root / "st[o]re*" / "g.txt").write_text("in the store\n")
    (root / "store2" / "g.txt").write_text("beside it\n")
    assert set(tree.rescan()) == {"store2/g.txt"}
    assert b"./st[o]re*/" not in tree._raw  # not even listed
    assert (
        tree.stats.keys()
        == scan(str(root), IgnoreRules.for_workspace(str(root), store_dir=str(root / "st[o]re*"))).keys()
    )


@pytest.mark.parametrize("changed_only", [True, False])
def test_only_the_largest_excluded_folders_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changed_only: bool
) -> None:
    """Each folder find is told to skip costs it a test per entry: only large excluded folders are (at the first
    pass, and when one is made later); the small ones are listed and passed over, never reported. Both kinds of
    pass (only the entries whose ctime moved, or the whole listing)."""
    monkeypatch.setattr(tree_scan, "_PRUNE_MIN", 5)
    if not changed_only:
        monkeypatch.setattr(tree_scan, "local_times", lambda root: False)
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".gitignore").write_text("big/\nsmall/\nlater/\n")
    for name, count in (("big", 6), ("small", 2), ("kept", 2)):
        (root / name).mkdir()
        for n in range(count):
            (root / name / f"f{n}.txt").write_text(f"{n}\n")
    tree = TreeScan.start(str(root), rules_for(root))
    assert tree is not None and (tree._since is not None) == changed_only
    assert tree._pruned == {"big"}
    (root / "later" / "deep").mkdir(parents=True)
    for n in range(6):
        (root / "later" / "deep" / f"f{n}.txt").write_text(f"{n}\n")
    (root / "small" / "new.txt").write_text("ignored\n")
    (root / "kept" / "new.txt").write_text("seen\n")
    assert set(tree.rescan()) == {"kept/new.txt"}
    assert tree._pruned == {"big", "later"}
    assert tree.stats == scan(str(root), rules_for(root))
    (root / "later" / "deep" / "g.txt").write_text("ignored\n")
    assert tree.rescan() == {}


@given(
    st.lists(st.tuples(st.binary(min_size=1, max_size=6), st.binary(max_size=4)), max_size=12),
    st.lists(
        st.tuples(st.integers(0, 12), st.sampled_from(["drop", "add", "edit"]), st.binary(max_size=5)), max_size=4
    ),
)
@settings(max_examples=60, deadline=None)
def test_the_span_two_listings_differ_in_holds_every_difference(
    entries: list[tuple[bytes, bytes]], edits: list[tuple[int, str, bytes]]
) -> None:
    """Compared as bytes, two listings differ only inside the span found, which starts and ends on whole entries,
    whatever bytes the names hold (spaces, digits that look like a line, but never NUL)."""
    old_entries = [(b"./" + path.replace(b"\0", b"_"), line.replace(b"\0", b"_")) for path, line in entries]
    new_entries = list(old_entries)
    for at, what, data in edits:
        data = data.replace(b"\0", b"_")
        at = min(at, len(new_entries))
        if what == "drop" and at < len(new_entries):
            del new_entries[at]
        elif what == "add":
            new_entries.insert(at, (b"./n" + data, data))
        elif at < len(new_entries):
            new_entries[at] = (new_entries[at][0], new_entries[at][1] + b"x" + data)

    def raw(items: list[tuple[bytes, bytes]]) -> bytes:
        return b".\0d 1\0" + b"".join(path + b"\0" + line + b"\0" for path, line in items)

    old, new = raw(old_entries), raw(new_entries)
    start, old_end, new_end = find_listing.changed_span(old, new)
    assert old[:start] == new[:start] and old[old_end:] == new[new_end:]
    assert start <= old_end and start <= new_end
    for listing, end in ((old, old_end), (new, new_end)):
        assert start == 0 or listing[start - 1] == 0
        assert listing[:start].count(b"\0") % 2 == 0 and listing[start:end].count(b"\0") % 2 == 0
        assert end == 0 or listing[end - 1] == 0
