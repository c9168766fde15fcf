from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safepoint.workspace import scan as scan_mod
from safepoint.workspace.scan import ChangeWatcher, FileStat, IgnoreRules, scan

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")


def write(root, rel, data="x"):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)


def keys(root, **kw):
    return set(scan(str(root), IgnoreRules.for_workspace(str(root), **kw)))


@pytest.fixture
def watched(workspace):
    """A started watcher on the workspace, closed after the test; call it with the rules' keyword arguments."""
    made = []

    def start(**kw):
        rules = IgnoreRules.for_workspace(str(workspace), **kw)
        w = ChangeWatcher.start(str(workspace), rules)
        assert w is not None
        made.append(w)
        assert w.drain() == set()
        return w

    yield start
    for w in made:
        w.close()


# --- scan ---------------------------------------------------------------------------------------------------------


def test_scan_lists_nested_files_with_their_lstat(workspace):
    for rel in ["a.txt", "d1/b.txt", "d1/d2/c.txt", "d1/d2/d3/d.txt"]:
        write(workspace, rel, rel)
    os.makedirs(workspace / "empty")
    found = scan(str(workspace), IgnoreRules.for_workspace(str(workspace)))
    assert set(found) == {"a.txt", "d1/b.txt", "d1/d2/c.txt", "d1/d2/d3/d.txt"}
    st_ = os.lstat(workspace / "d1/d2/c.txt")
    assert found["d1/d2/c.txt"] == FileStat(st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns, st_.st_ino, st_.st_mode)
    assert stat.S_ISREG(found["a.txt"].mode) and found["a.txt"].size == len("a.txt")


def test_filestat_encodes_as_an_array():
    import msgspec

    fs = FileStat(1, 2, 3, 4, 0o100644)
    assert msgspec.json.encode(fs) == b"[1,2,3,4,33188]"
    assert msgspec.json.decode(b"[1,2,3,4,33188]", type=FileStat) == fs


def test_scan_lists_symlinks_and_never_follows_them(workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    write(workspace, "real/f.txt")
    os.symlink("real/f.txt", workspace / "to_file")
    os.symlink("real", workspace / "to_dir")
    os.symlink(str(outside), workspace / "to_outside")
    os.symlink("nowhere", workspace / "dangling")
    found = scan(str(workspace), IgnoreRules.for_workspace(str(workspace)))
    assert set(found) == {"real/f.txt", "to_file", "to_dir", "to_outside", "dangling"}
    for link in ["to_file", "to_dir", "to_outside", "dangling"]:
        assert stat.S_ISLNK(found[link].mode), link
        assert found[link].ino == os.lstat(workspace / link).st_ino


def test_scan_leaves_out_git_dirs_and_git_files_at_any_depth(workspace):
    write(workspace, ".git/HEAD")
    write(workspace, ".git/objects/ab/cd")
    write(workspace, "sub/.git", "gitdir: ../.git/worktrees/sub")
    write(workspace, "sub/code.py")
    write(workspace, "vendor/lib/.git/config")
    write(workspace, "vendor/lib/lib.py")
    assert keys(workspace) == {"sub/code.py", "vendor/lib/lib.py"}


def test_scan_leaves_out_the_store_dir(workspace, tmp_path):
    write(workspace, ".agent-runtime/runs/r/ledger.jsonl")
    write(workspace, "nested/store/x")
    write(workspace, "keep.txt")
    assert keys(workspace, store_dir=str(workspace / ".agent-runtime")) == {"keep.txt", "nested/store/x"}
    assert keys(workspace, store_dir=str(workspace / "nested/store")) == {
        "keep.txt",
        ".agent-runtime/runs/r/ledger.jsonl",
    }
    # a store outside the workspace changes nothing
    assert len(keys(workspace, store_dir=str(tmp_path / "elsewhere"))) == 3


def test_gitignore_root_and_nested_with_negation(workspace):
    write(workspace, ".gitignore", "*.log\nbuild/\n!keep.log\n/top.txt\n# comment\n\n")
    write(workspace, "sub/.gitignore", "!important.log\n*.tmp\n/local/\n")
    files = [
        "a.log",
        "keep.log",
        "top.txt",
        "x.tmp",
        "build/out.o",
        "build",  # a file named like the dir-only pattern: kept
        "src/build/out.o",
        "src/z.log",
        "sub/important.log",
        "sub/other.log",
        "sub/x.tmp",
        "sub/top.txt",
        "sub/local/l.txt",
        "sub/deep/local/l.txt",
        "sub/deep/y.tmp",
    ]
    for rel in files:
        if rel == "build":
            continue
        write(workspace, rel)
    write(workspace, "src/build2", "file")
    assert keys(workspace) == {
        ".gitignore",
        "keep.log",
        "x.tmp",
        "src/build2",
        "sub/.gitignore",
        "sub/important.log",
        "sub/top.txt",
        "sub/deep/local/l.txt",
    }


def test_gitignore_cannot_reinclude_inside_an_excluded_folder_but_star_bang_star_slash_works(workspace):
    write(workspace, ".gitignore", "build/\n!build/keep.txt\n")
    write(workspace, "build/keep.txt")
    write(workspace, "build/.gitignore", "!*\n")  # never read: its folder is excluded
    assert keys(workspace) == {".gitignore"}
    write(workspace, ".gitignore", "*\n!*/\n!*.py\n")
    write(workspace, "pkg/mod.py")
    write(workspace, "pkg/data.csv")
    write(workspace, "pkg/deep/more.py")
    # build/ is no longer excluded, so its .gitignore counts now and re-includes what is under it
    assert keys(workspace) == {"pkg/mod.py", "pkg/deep/more.py", "build/keep.txt", "build/.gitignore"}


def test_git_info_exclude_and_precedence(workspace):
    write(workspace, ".git/info/exclude", "*.secret\nlocal.cfg\n")
    write(workspace, ".gitignore", "!local.cfg\n")  # a .gitignore overrides info/exclude
    write(workspace, "a.secret")
    write(workspace, "local.cfg")
    write(workspace, "b.txt")
    assert keys(workspace) == {".gitignore", "local.cfg", "b.txt"}
    assert keys(workspace, use_gitignore=False) == {".gitignore", "local.cfg", "b.txt", "a.secret"}


def test_extra_patterns_are_root_relative_and_override_gitignore(workspace):
    write(workspace, ".gitignore", "*.bin\n")
    write(workspace, "data/big.parquet")
    write(workspace, "x/data/kept")
    write(workspace, "model.bin")
    write(workspace, "keep.bin")
    write(workspace, "notes.md")
    got = keys(workspace, extra=["/data/", "!keep.bin", "*.md"])
    assert got == {".gitignore", "x/data/kept", "keep.bin"}


def test_scan_rereads_a_changed_gitignore(workspace):
    rules = IgnoreRules.for_workspace(str(workspace))
    write(workspace, "sub/a.log")
    assert set(scan(str(workspace), rules)) == {"sub/a.log"}
    write(workspace, "sub/.gitignore", "*.log\n")
    assert set(scan(str(workspace), rules)) == {"sub/.gitignore"}
    os.unlink(workspace / "sub/.gitignore")
    assert set(scan(str(workspace), rules)) == {"sub/a.log"}


def test_scan_refuses_rules_of_another_root_and_a_missing_root(workspace, tmp_path):
    with pytest.raises(ValueError):
        scan(str(tmp_path), IgnoreRules.for_workspace(str(workspace)))
    gone = tmp_path / "gone"
    with pytest.raises(FileNotFoundError):
        scan(str(gone), IgnoreRules.for_workspace(str(gone)))
    assert ChangeWatcher.start(str(gone), IgnoreRules.for_workspace(str(gone))) is None


def test_excluded_checks_ancestors_and_loads_nested_gitignores(workspace):
    write(workspace, ".gitignore", "build/\n")
    write(workspace, "pkg/.gitignore", "*.gen.py\n")
    rules = IgnoreRules.for_workspace(str(workspace), store_dir=str(workspace / ".agent-runtime"))
    assert rules.excluded("build/x/y.txt", is_dir=False)
    assert rules.excluded("build", is_dir=True)
    assert not rules.excluded("build", is_dir=False)
    assert rules.excluded("pkg/a.gen.py", is_dir=False)
    assert rules.excluded("pkg/sub/a.gen.py", is_dir=False)
    assert not rules.excluded("a.gen.py", is_dir=False)
    assert rules.excluded(".agent-runtime/runs/x", is_dir=False)
    assert rules.excluded("a/.git/config", is_dir=False)
    assert not rules.excluded("pkg/a.py", is_dir=False)
    assert not rules.excluded("", is_dir=True)


@pytest.mark.parametrize(
    ("pattern", "rel", "is_dir", "expected"),
    [
        ("foo", "a/b/foo", False, True),
        ("foo/", "a/foo", False, False),
        ("foo/", "a/foo", True, True),
        ("/foo", "a/foo", False, False),
        ("a/foo", "x/a/foo", False, False),  # a slash in the middle anchors the pattern
        ("**/foo", "x/y/foo", False, True),
        ("**/foo", "foo", False, True),
        ("a/**/b", "a/b", False, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("a/**/b", "xa/b", False, False),
        ("foo/**", "foo", True, False),  # everything inside, not the folder itself
        ("foo/**", "foo/x/y", False, True),
        ("a/*.c", "a/x.c", False, True),
        ("a/*.c", "a/b/x.c", False, False),  # '*' does not cross '/'
        ("*.c", "a/b/x.c", False, True),
        ("a?c", "abc", False, True),
        ("a?c", "a/c", False, False),
        ("[!a]b", "bb", False, True),
        ("[!a]b", "ab", False, False),
        ("[[:digit:]]x", "7x", False, True),
        ("[a-c]z", "bz", False, True),
        ("[]]z", "]z", False, True),
        ("[a", "[a", False, False),  # unterminated: never matches (git's wildmatch)
        ("\\#x", "#x", False, True),
        ("\\!x", "!x", False, True),
        ("x\\ ", "x ", False, True),
        ("x   ", "x", False, True),  # unescaped trailing spaces are dropped
        ("#x", "#x", False, False),  # a comment
        ("foo**bar", "fooXbar", False, True),
        ("foo**bar", "foo/bar", False, False),
        ("*", "anything/at/all", False, True),
    ],
)
def test_pattern_semantics(workspace, pattern, rel, is_dir, expected):
    rules = IgnoreRules.for_workspace(str(workspace), extra=[pattern], use_gitignore=False)
    assert rules.excluded(rel, is_dir=is_dir) is expected


_GIT = shutil.which("git")
_NAMES = ["a.log", "b.py", "x", "ba"]
_PAT_TOKENS = ["a", "b", "*", "**", "?", "/", ".log", ".py", "[ab]", "[!a]", "ab"]


@pytest.mark.skipif(_GIT is None, reason="needs git as the reference")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    root_pats=st.lists(
        st.tuples(st.booleans(), st.lists(st.sampled_from(_PAT_TOKENS), min_size=1, max_size=4), st.booleans()),
        max_size=4,
    ),
    sub_pats=st.lists(
        st.tuples(st.booleans(), st.lists(st.sampled_from(_PAT_TOKENS), min_size=1, max_size=3), st.booleans()),
        max_size=3,
    ),
)
def test_gitignore_matches_git_itself(tmp_path, root_pats, sub_pats):
    """Differential check against `git ls-files --others --exclude-standard` in a scratch repository."""
    repo = tmp_path / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(exist_ok=True)
        subprocess.run([_GIT, "init", "-q", str(repo)], check=True, env=_git_env(tmp_path))
    for entry in os.listdir(repo):
        if entry != ".git":
            shutil.rmtree(repo / entry) if (repo / entry).is_dir() else os.unlink(repo / entry)
    for d in ["", "a", "b", "a/b", "a/ab", "b/a"]:
        for n in _NAMES:
            write(repo, os.path.join(d, n) if d else n, "1")

    def render(pats):
        return "".join(
            ("!" if neg else "") + "".join(toks) + ("/" if slash else "") + "\n" for neg, toks, slash in pats
        )

    write(repo, ".gitignore", render(root_pats))
    write(repo, "a/.gitignore", render(sub_pats))
    out = subprocess.run(
        [_GIT, "-C", str(repo), "ls-files", "-z", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        env=_git_env(tmp_path),
    ).stdout
    expected = {p for p in os.fsdecode(out).split("\0") if p}
    assert keys(repo) == expected, (render(root_pats), render(sub_pats))


def _git_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, HOME=str(tmp_path))
    return env


# --- the watcher --------------------------------------------------------------------------------------------------


@linux_only
def test_drain_reports_create_modify_chmod_rename_delete(workspace, watched):
    w = watched()
    write(workspace, "f.txt")
    assert w.drain() == {"f.txt"}
    with open(workspace / "f.txt", "a") as f:
        f.write("more")
    assert w.drain() == {"f.txt"}
    os.chmod(workspace / "f.txt", 0o600)
    assert w.drain() == {"f.txt"}
    os.utime(workspace / "f.txt", ns=(1, 1))
    assert w.drain() == {"f.txt"}
    os.rename(workspace / "f.txt", workspace / "g.txt")
    assert w.drain() == {"f.txt", "g.txt"}
    os.symlink("g.txt", workspace / "link")
    assert w.drain() == {"link"}
    os.unlink(workspace / "g.txt")
    assert w.drain() == {"g.txt"}
    assert w.drain() == set()


@linux_only
def test_drain_sees_a_write_that_just_completed_every_time(workspace, watched):
    w = watched()
    os.makedirs(workspace / "d")
    assert w.drain() == {"d/"}
    for i in range(200):
        rel = f"d/f{i % 7}.txt"
        with open(workspace / rel, "a") as f:
            f.write(str(i))
        assert rel in (w.drain() or ()), i


@linux_only
def test_new_folder_filled_at_once_is_reported_file_by_file(workspace, watched):
    w = watched()
    expected = set()
    for i in range(5):
        os.makedirs(workspace / f"n{i}/a/b/c")
        for rel in [f"n{i}/top.txt", f"n{i}/a/x", f"n{i}/a/b/y", f"n{i}/a/b/c/z"]:
            write(workspace, rel)
            expected.add(rel)
        os.symlink("top.txt", workspace / f"n{i}/link")
        expected.add(f"n{i}/link")
    got = w.drain()
    assert got is not None and expected <= got
    assert {f"n{i}/" for i in range(5)} <= got
    # the new folders are watched now
    write(workspace, "n3/a/b/c/later")
    assert w.drain() == {"n3/a/b/c/later"}


def _source_tree(base):
    files = set()
    for d in ["", "p", "p/q", "p/q/r", "s"]:
        for n in ["one.txt", "two.py"]:
            rel = os.path.join(d, n) if d else n
            write(base, rel, rel * 3)
            files.add(rel)
    return files


@linux_only
def test_trees_copied_or_unpacked_by_a_subprocess_are_reported_whole(workspace, watched, tmp_path):
    src = tmp_path / "src"
    files = _source_tree(src)
    archive = tmp_path / "tree.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(src, arcname="tree")
    w = watched()
    for i in range(8):
        subprocess.run(["cp", "-r", str(src), str(workspace / f"cp{i}")], check=True)
        got = w.drain()
        assert got is not None and {f"cp{i}/{f}" for f in files} <= got, i
        sub = workspace / f"tar{i}"
        sub.mkdir()
        subprocess.run(["tar", "-xf", str(archive), "-C", str(sub)], check=True)
        got = w.drain()
        assert got is not None and {f"tar{i}/tree/{f}" for f in files} <= got, i


@linux_only
def test_folder_rename_is_reported_with_a_trailing_slash_and_followed(workspace, watched, tmp_path):
    write(workspace, "d/sub/f.txt")
    write(workspace, "d/g.txt")
    w = watched()
    os.rename(workspace / "d", workspace / "e")
    got = w.drain()
    assert got is not None and {"d/", "e/", "e/sub/f.txt", "e/g.txt"} <= got
    assert not any(p.startswith("d/") and p != "d/" for p in got)
    write(workspace, "e/sub/f.txt", "changed")
    assert w.drain() == {"e/sub/f.txt"}
    # moved out of the workspace: reported, then no longer watched
    shutil.move(str(workspace / "e"), str(tmp_path / "away"))
    assert w.drain() == {"e/"}
    write(tmp_path, "away/sub/f.txt", "outside")
    assert w.drain() == set()
    shutil.rmtree(workspace / "nothing", ignore_errors=True)


@linux_only
def test_folder_removal_is_reported_with_a_trailing_slash(workspace, watched):
    write(workspace, "t/a/b/f")
    write(workspace, "t/g")
    w = watched()
    shutil.rmtree(workspace / "t")
    got = w.drain()
    assert got is not None and "t/" in got
    os.makedirs(workspace / "t")
    write(workspace, "t/new")
    got = w.drain()
    assert got is not None and "t/new" in got


@linux_only
def test_excluded_paths_are_not_reported(workspace, watched):
    write(workspace, ".gitignore", "*.log\nbuild/\n")
    write(workspace, "build/old.o")
    os.makedirs(workspace / ".git")
    os.makedirs(workspace / ".agent-runtime")
    w = watched(store_dir=str(workspace / ".agent-runtime"), extra=["*.tmp"])
    write(workspace, "x.log")
    write(workspace, "build/new.o")
    write(workspace, ".git/index")
    write(workspace, ".agent-runtime/ledger")
    write(workspace, "scratch.tmp")
    os.makedirs(workspace / "out/build")  # an excluded folder created later is not watched
    write(workspace, "out/build/y.o")
    write(workspace, "kept.txt")
    assert w.drain() == {"kept.txt", "out/"}
    write(workspace, "out/build/z.o")
    assert w.drain() == set()


@linux_only
def test_symlinked_folders_are_not_watched_through(workspace, watched, tmp_path):
    (tmp_path / "outside").mkdir()
    write(workspace, "real/f")
    os.symlink(str(tmp_path / "outside"), workspace / "out_link")
    os.symlink("real", workspace / "in_link")
    w = watched()
    write(tmp_path, "outside/secret")
    assert w.drain() == set()
    write(workspace, "in_link/f", "through the link")
    assert w.drain() == {"real/f"}


@linux_only
def test_gitignore_change_asks_for_a_scan_then_watches_per_the_new_rules(workspace, watched):
    write(workspace, ".gitignore", "build/\n")
    write(workspace, "build/a.o")
    rules_w = watched()
    write(workspace, "build/b.o")
    assert rules_w.drain() == set()
    write(workspace, ".gitignore", "")
    assert rules_w.drain() is None
    write(workspace, "build/c.o")
    assert rules_w.drain() == {"build/c.o"}
    # a new folder's .gitignore is read when the folder is first walked: nothing known changed, no scan needed
    write(workspace, "sub/.gitignore", "*.x\n")
    assert rules_w.drain() == {"sub/", "sub/.gitignore"}
    write(workspace, "sub/a.x")
    write(workspace, "sub/a.y")
    assert rules_w.drain() == {"sub/a.y"}
    write(workspace, "sub/.gitignore", "*.y\n")
    assert rules_w.drain() is None
    write(workspace, "sub/b.x")
    write(workspace, "sub/b.y")
    assert rules_w.drain() == {"sub/b.x"}


@linux_only
def test_queue_overflow_means_scan(workspace, watched):
    try:
        with open("/proc/sys/fs/inotify/max_queued_events") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        pytest.skip("cannot read fs.inotify.max_queued_events")
    if limit > 200_000:
        pytest.skip(f"queue holds {limit} events: too many to overflow quickly")
    write(workspace, "a")
    write(workspace, "b")
    w = watched()
    a, b = str(workspace / "a"), str(workspace / "b")
    for i in range(limit // 2 + 100):  # alternate names: the kernel merges only identical consecutive events
        os.utime(a, ns=(i, i))
        os.utime(b, ns=(i, i))
    assert w.drain() is None
    # watching goes on after the full scan the caller does now
    write(workspace, "after")
    assert w.drain() == {"after"}


@linux_only
def test_start_is_none_without_inotify(workspace, monkeypatch):
    rules = IgnoreRules.for_workspace(str(workspace))
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # import fails
    assert ChangeWatcher.start(str(workspace), rules) is None


@linux_only
def test_start_is_none_when_inotify_init_fails(workspace, monkeypatch):
    import inotify_simple

    def fail(*a, **k):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(inotify_simple, "INotify", fail)
    assert ChangeWatcher.start(str(workspace), IgnoreRules.for_workspace(str(workspace))) is None


@linux_only
def test_watch_limit_at_start_gives_none_and_later_gives_none_from_drain(workspace, monkeypatch):
    import inotify_simple

    write(workspace, "d/e/f")
    real = inotify_simple.INotify.add_watch
    budget = {"n": 2}

    def limited(self, path, mask):
        if budget["n"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        budget["n"] -= 1
        return real(self, path, mask)

    monkeypatch.setattr(inotify_simple.INotify, "add_watch", limited)
    rules = IgnoreRules.for_workspace(str(workspace))
    assert ChangeWatcher.start(str(workspace), rules) is None  # needs 3 watches: root, d, d/e
    budget["n"] = 3
    w = ChangeWatcher.start(str(workspace), rules)
    assert w is not None
    try:
        os.makedirs(workspace / "new")
        assert w.drain() is None
        write(workspace, "d/e/f", "again")
        assert w.drain() is None  # stays None: the caller should close it and scan
    finally:
        w.close()
    assert w.drain() is None


@linux_only
def test_removing_the_root_breaks_the_watcher(tmp_path):
    root = tmp_path / "gone"
    root.mkdir()
    w = ChangeWatcher.start(str(root), IgnoreRules.for_workspace(str(root)))
    assert w is not None
    with w:
        shutil.rmtree(root)
        assert w.drain() is None
        assert w.drain() is None


# --- drain() covers every change a scan would see ------------------------------------------------------------------

_DIRS = ["", "d1", "d1/d2", "d3"]
_FILES = ["a", "b", "c.log"]
_PATHS = [os.path.join(d, f) if d else f for d in _DIRS for f in _FILES] + [d for d in _DIRS if d]

_TARGETS = [*_PATHS, "d4", "d1/d5", "d3/d6/d7"]

_op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(_PATHS), st.text("xyz", max_size=3)),
    st.tuples(st.just("append"), st.sampled_from(_PATHS), st.just("+")),
    st.tuples(st.just("delete"), st.sampled_from(_PATHS), st.just("")),
    st.tuples(st.just("rename"), st.sampled_from(_PATHS + _TARGETS[-3:]), st.sampled_from(_TARGETS)),
    st.tuples(st.just("mktree"), st.sampled_from(_TARGETS), st.just("")),
    st.tuples(st.just("chmod"), st.sampled_from(_PATHS), st.just("")),
    st.tuples(st.just("mkdir"), st.sampled_from(_PATHS), st.just("")),
    st.tuples(st.just("symlink"), st.sampled_from(_PATHS), st.sampled_from(_PATHS)),
    st.tuples(st.just("touch"), st.sampled_from(_PATHS), st.just("")),
)


def _apply(root, op, path, arg):
    p = os.path.join(root, path)
    try:
        if op == "write":
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(arg)
        elif op == "append":
            with open(p, "a") as f:
                f.write(arg)
        elif op == "delete":
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        elif op == "rename":
            os.makedirs(os.path.dirname(os.path.join(root, arg)), exist_ok=True)
            os.rename(p, os.path.join(root, arg))
        elif op == "chmod":
            os.chmod(p, 0o700 if os.stat(p).st_mode & 0o100 == 0 else 0o644)
        elif op == "mkdir":
            os.makedirs(p)
        elif op == "symlink":
            os.symlink(arg, p)
        elif op == "touch":
            os.utime(p)
        elif op == "mktree":  # a folder filled at once, as a build or an unpack does
            os.makedirs(os.path.join(p, "n", "m"))
            for rel in ["f", "n/g", "n/m/h", "n/m/i.log"]:
                with open(os.path.join(p, rel), "w") as f:
                    f.write(rel)
    except OSError:
        pass  # an impossible operation (missing source, folder into itself, ...) just does nothing


@linux_only
@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(_op, min_size=1, max_size=6), min_size=1, max_size=4), with_gitignore=st.booleans())
def test_drain_covers_every_change_between_two_scans(batches, with_gitignore):
    with tempfile.TemporaryDirectory() as root:
        write(root, "d1/d2/a", "seed")
        write(root, "d3/b", "seed")
        if with_gitignore:
            write(root, ".gitignore", "*.log\n")
        rules = IgnoreRules.for_workspace(root)
        w = ChangeWatcher.start(root, rules)
        assert w is not None
        with w:
            before = scan(root, rules)
            for batch in batches:
                for op in batch:
                    _apply(root, *op)
                touched = w.drain()
                after = scan(root, rules)
                assert touched is not None
                folders = [p for p in touched if p.endswith("/")]
                for p in touched:
                    assert not rules.excluded(p, is_dir=p.endswith("/")), p
                changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
                for p in changed:
                    # what the caller knew is covered by name or by a folder; what is new must be named
                    known = p in before and any(p.startswith(f) for f in folders)
                    assert p in touched or known, (p, batch, touched)
                before = after


def test_module_exports():
    assert set(scan_mod.__all__) == {"ChangeWatcher", "FileStat", "IgnoreRules", "scan"}
