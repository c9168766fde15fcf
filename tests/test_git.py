"""safepoint.workspace.git: reads never change the repository; commit_paths commits only what it is given."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safepoint.errors import GitError, SafepointError, WorkspaceError
from safepoint.workspace import git as g
from safepoint.workspace.git import (
    GitState,
    commit_paths,
    git_blob_id,
    git_state,
    head_blob_ids,
    read_blob,
    refs_snapshot,
)

_IDENTITY_VARS = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
)


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config, no identity from the environment, no repository discovered above tmp."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path_factory.getbasetemp()))
    for var in _IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path | str, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout.decode()


def write(root: Path, rel: str, content: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)


def make_repo(path: Path, files: dict[str, str] | None = None, *, identity: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    if identity:
        git(path, "config", "user.name", "Test User")
        git(path, "config", "user.email", "test@example.com")
    if files:
        for rel, content in files.items():
            write(path, rel, content)
        git(path, "add", "-A")
        if identity:
            git(path, "commit", "-q", "-m", "init")
        else:
            git(path, "-c", "user.name=Setup", "-c", "user.email=setup@example.com", "commit", "-q", "-m", "init")
    return path


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def tree(repo: Path, rev: str) -> dict[str, str]:
    out = git(repo, "ls-tree", "-r", "-z", rev)
    entries = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        entries[path] = meta
    return entries


# --------------------------------------------------------------------------------------------------------------------
# git_state


def test_not_a_repo(tmp_path: Path) -> None:
    ws = tmp_path / "plain"
    ws.mkdir()
    (ws / "f").write_text("x")
    state = git_state(str(ws))
    assert state == GitState(
        is_repo=False,
        top=None,
        prefix="",
        head=None,
        branch=None,
        dirty=(),
        nested_repos=(),
        submodules=(),
        is_worktree=False,
    )
    assert head_blob_ids(str(ws)) == {}
    assert read_blob(str(ws), git_blob_id(b"x")) is None
    assert refs_snapshot(str(ws)) == {"HEAD": "", "head_sha": "", "refs": "", "index": "", "stash": ""}
    with pytest.raises(GitError, match="not inside a git work tree"):
        commit_paths(str(ws), ["f"], "m")


def test_missing_workspace_is_a_workspace_error(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a directory"):
        git_state(str(tmp_path / "nope"))


def test_inside_dot_git_is_not_a_work_tree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    assert git_state(str(repo / ".git")).is_repo is False


def test_git_missing_reads_as_no_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert git_state(str(repo)).is_repo is False
    assert head_blob_ids(str(repo)) == {}
    assert read_blob(str(repo), git_blob_id(b"1")) is None
    assert refs_snapshot(str(repo))["HEAD"] == ""
    with pytest.raises(GitError, match="git is not installed"):
        commit_paths(str(repo), ["a"], "m")


def test_repo_without_commits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    write(repo, "new.txt", "hello")
    write(repo, "d/inner.txt", "x")
    state = git_state(str(repo))
    assert state.is_repo and state.top == os.path.realpath(repo) and state.prefix == ""
    assert state.head is None
    assert state.branch == "main"
    assert state.dirty == ("d/inner.txt", "new.txt")
    assert head_blob_ids(str(repo)) == {}
    snap = refs_snapshot(str(repo))
    assert snap["HEAD"] == "refs/heads/main" and snap["head_sha"] == "" and snap["index"] == ""


def test_clean_repo(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "a", "src/b.py": "b"})
    state = git_state(str(repo))
    assert state == GitState(
        is_repo=True,
        top=os.path.realpath(repo),
        prefix="",
        head=head(repo),
        branch="main",
        dirty=(),
        nested_repos=(),
        submodules=(),
        is_worktree=False,
    )


def test_dirty_lists_every_kind_of_change(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {"mod": "1", "staged": "1", "gone": "1", "old-name": "same content\n" * 5, ".gitignore": "*.log\n", "k": "1"},
    )
    write(repo, "mod", "2")  # modified, not staged
    write(repo, "staged", "2")
    git(repo, "add", "staged")  # modified and staged
    write(repo, "added", "new")
    git(repo, "add", "added")  # added
    write(repo, "dir/untracked", "u")  # untracked, in a folder git would collapse without -uall
    write(repo, "noise.log", "ignored")
    os.unlink(repo / "gone")  # deleted
    git(repo, "mv", "old-name", "new-name")  # renamed
    write(repo, "we ird*name", "odd")
    assert git_state(str(repo)).dirty == (
        "added",
        "dir/untracked",
        "gone",
        "mod",
        "new-name",
        "old-name",
        "staged",
        "we ird*name",
    )


def test_workspace_in_a_subfolder(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"top.txt": "t", "ws/a.txt": "a", "ws/deep/b.txt": "b", "wsx/c.txt": "c"})
    write(repo, "top.txt", "changed")
    write(repo, "wsx/c.txt", "changed")  # shares a name prefix with the workspace, must not leak in
    write(repo, "ws/a.txt", "changed")
    write(repo, "ws/deep/new.txt", "n")
    state = git_state(str(repo / "ws"))
    assert state.top == os.path.realpath(repo)
    assert state.prefix == "ws"
    assert state.dirty == ("a.txt", "deep/new.txt")
    assert set(head_blob_ids(str(repo / "ws"))) == {"a.txt", "deep/b.txt"}
    assert git_state(str(repo / "ws" / "deep")).prefix == "ws/deep"


def test_nested_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    make_repo(repo / "vendor" / "lib", {"inner.txt": "i"})
    write(repo / "vendor" / "lib", "inner.txt", "changed inside")
    write(repo, "vendor/readme", "r")
    state = git_state(str(repo))
    assert state.nested_repos == ("vendor/lib",)
    assert state.submodules == ()
    assert state.dirty == ("vendor/readme",)
    assert git_state(str(repo / "vendor" / "lib")).top == os.path.realpath(repo / "vendor" / "lib")


def test_submodule(tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream", {"lib.txt": "lib"})
    repo = make_repo(tmp_path / "r", {"a": "1"})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "mods/sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    write(repo / "mods" / "sub", "lib.txt", "edited inside the submodule")
    state = git_state(str(repo))
    assert state.submodules == ("mods/sub",)
    assert state.nested_repos == ()
    assert state.dirty == ()  # edits inside a submodule belong to that repository
    assert "mods/sub" not in head_blob_ids(str(repo))
    inner = git_state(str(repo / "mods" / "sub"))
    assert inner.top == os.path.realpath(repo / "mods" / "sub") and not inner.is_worktree
    assert inner.dirty == ("lib.txt",)


def test_submodule_listed_as_dirty_only_when_its_commit_moves(tmp_path: Path) -> None:
    upstream = make_repo(tmp_path / "upstream", {"lib.txt": "lib"})
    repo = make_repo(tmp_path / "r", {"a": "1"})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    git(repo / "sub", "-c", "user.name=U", "-c", "user.email=u@e", "commit", "-q", "--allow-empty", "-m", "moved")
    assert git_state(str(repo)).dirty == ("sub",)


def test_repository_added_without_gitmodules_counts_as_a_submodule(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    make_repo(repo / "embedded", {"e": "e"})
    git(repo, "-c", "advice.addEmbeddedRepo=false", "add", "embedded")
    git(repo, "commit", "-q", "-m", "gitlink")
    state = git_state(str(repo))
    assert state.submodules == ("embedded",) and state.nested_repos == () and state.dirty == ()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown the repository")
def test_repository_of_another_user_is_a_clear_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    for root, dirs, files in os.walk(repo):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), 65534, 65534)
    os.chown(repo, 65534, 65534)
    with pytest.raises(GitError, match=r"belongs to another user; .*safe\.directory"):
        git_state(str(repo))


def test_a_hung_git_is_killed_with_its_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\nsleep 30 &\nsleep 30\n")  # a child keeps the output pipe open too
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(g, "READ_TIMEOUT", 0.3)
    (tmp_path / "ws").mkdir()
    started = time.monotonic()
    with pytest.raises(GitError, match=r"`git rev-parse --show-toplevel` took longer than 0\.3 s"):
        git_state(str(tmp_path / "ws"))
    assert time.monotonic() - started < 5


def test_linked_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    git(repo, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt"))
    write(tmp_path / "wt", "a", "2")
    state = git_state(str(tmp_path / "wt"))
    assert state.is_worktree and state.branch == "feature" and state.dirty == ("a",)
    assert state.top == os.path.realpath(tmp_path / "wt")
    assert not git_state(str(repo)).is_worktree
    assert refs_snapshot(str(tmp_path / "wt"))["HEAD"] == "refs/heads/feature"


def test_detached_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"})
    git(repo, "checkout", "-q", "--detach")
    state = git_state(str(repo))
    assert state.branch is None and state.head == head(repo)
    assert refs_snapshot(str(repo))["HEAD"] == head(repo)
    write(repo, "a", "2")
    before = refs_snapshot(str(repo))
    with pytest.raises(GitError, match=r"HEAD is detached .*git switch"):
        commit_paths(str(repo), ["a"], "m")
    assert refs_snapshot(str(repo)) == before


# --------------------------------------------------------------------------------------------------------------------
# blobs


@pytest.mark.parametrize("data", [b"", b"hello\n", bytes(range(256)) * 3, "é\r\n".encode()])
def test_git_blob_id_matches_hash_object(tmp_path: Path, data: bytes) -> None:
    assert git_blob_id(data) == git(tmp_path, "hash-object", "--stdin", "--no-filters", data=data).strip()


def test_head_blob_ids_and_read_blob_roundtrip(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    write(repo, "text.txt", "some text\n")
    write(repo, "bin/data", bytes(range(256)))
    os.symlink("text.txt", repo / "link")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "c")
    ids = head_blob_ids(str(repo))
    assert ids == {
        "text.txt": git_blob_id(b"some text\n"),
        "bin/data": git_blob_id(bytes(range(256))),
        "link": git_blob_id(os.readlink(repo / "link").encode()),
    }
    for rel, blob in ids.items():
        data = read_blob(str(repo), blob)
        assert data is not None and git_blob_id(data) == blob, rel
    assert read_blob(str(repo), "link") is None  # not an id
    assert read_blob(str(repo), "--help") is None
    assert read_blob(str(repo), git_blob_id(b"never stored")) is None
    assert read_blob(str(repo), git(repo, "rev-parse", "HEAD^{tree}").strip()) is None  # a tree, not a blob


# --------------------------------------------------------------------------------------------------------------------
# reads change nothing


def _index_bytes(repo: Path) -> bytes:
    return (repo / ".git" / "index").read_bytes()


def test_reads_leave_refs_index_and_stash_untouched_even_when_stat_dirty(tmp_path: Path) -> None:
    files = {f"f{i}.txt": f"content {i}\n" for i in range(30)}
    files["sub/x.txt"] = "x"
    repo = make_repo(tmp_path / "r", files)
    write(repo, "f1.txt", "stashed change")
    git(repo, "stash", "-q")
    write(repo, "f0.txt", "really modified\n")
    past = time.time() - 10_000
    for rel in files:  # same content, new stat data: plain `git status` would refresh and rewrite the index
        os.utime(repo / rel, (past, past))
    write(repo, "untracked.txt", "u")
    ws = str(repo)

    before = refs_snapshot(ws)
    index_before = _index_bytes(repo)
    mtime_before = os.stat(repo / ".git" / "index").st_mtime_ns
    assert before["index"] == hashlib.sha256(index_before).hexdigest()
    assert before["stash"] and before["refs"] and before["head_sha"] == head(repo)

    for _ in range(2):
        state = git_state(ws)
        assert state.dirty == ("f0.txt", "untracked.txt")
        assert git_state(str(repo / "sub")).dirty == ()
        assert read_blob(ws, head_blob_ids(ws)["f2.txt"]) == b"content 2\n"
        assert refs_snapshot(ws) == before

    assert _index_bytes(repo) == index_before
    assert os.stat(repo / ".git" / "index").st_mtime_ns == mtime_before
    assert not (repo / ".git" / "index.lock").exists()

    git(repo, "status", "--porcelain")  # the control: without GIT_OPTIONAL_LOCKS=0 the index is rewritten
    assert _index_bytes(repo) != index_before


# --------------------------------------------------------------------------------------------------------------------
# commit_paths


def _user_view(repo: Path, paths: list[str]) -> tuple[str, str, str]:
    return (
        git(repo, "diff", "--cached", "--", *paths),
        git(repo, "diff", "--", *paths),
        git(repo, "status", "--porcelain=v1", "--", *paths),
    )


def test_commit_paths_commits_only_the_agents_paths(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"agent.txt": "a0\n", "staged.txt": "s0\n", "unstaged.txt": "u0\n", "d/x": "x"})
    old = head(repo)
    write(repo, "staged.txt", "s1\n")
    git(repo, "add", "staged.txt")
    write(repo, "staged.txt", "s2\n")  # staged and further modified
    write(repo, "unstaged.txt", "u1\n")
    write(repo, "user-untracked.txt", "mine")
    write(repo, "agent.txt", "a1\n")
    write(repo, "d/agent-new.txt", "n\n")
    others = ["staged.txt", "unstaged.txt", "user-untracked.txt"]
    view_before = _user_view(repo, others)

    new = commit_paths(str(repo), ["agent.txt", "d/agent-new.txt"], "agent: edit files\n\nbody")

    assert head(repo) == new and new != old
    assert git(repo, "rev-parse", f"{new}^").strip() == old
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    changed = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", old, new).split()
    assert changed == ["agent.txt", "d/agent-new.txt"]
    assert git(repo, "show", "-s", "--format=%an <%ae>|%cn|%B", new).strip() == (
        "Test User <test@example.com>|Test User|agent: edit files\n\nbody"
    )
    assert _user_view(repo, others) == view_before
    assert git(repo, "diff", "--cached", "--name-only").split() == ["staged.txt"]
    assert git(repo, "status", "--porcelain", "--", "agent.txt", "d/agent-new.txt") == ""
    assert "commit: agent: edit files" in git(repo, "reflog", "-1", "main")
    assert git(repo, "stash", "list") == ""
    assert git_state(str(repo)).dirty == ("staged.txt", "unstaged.txt", "user-untracked.txt")


def test_commit_paths_commits_a_deletion_and_keeps_modes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"doomed.txt": "bye", "keep.txt": "k", "run.sh": "echo\n"})
    old = head(repo)
    os.unlink(repo / "doomed.txt")
    os.chmod(repo / "run.sh", 0o755)
    os.symlink("keep.txt", repo / "alias")
    new = commit_paths(str(repo), ["doomed.txt", "run.sh", "alias", "doomed.txt"], "agent: tidy")
    entries = tree(repo, new)
    assert "doomed.txt" not in entries
    assert entries["run.sh"].startswith("100755 ")
    assert entries["alias"].startswith("120000 ")
    assert entries["keep.txt"] == tree(repo, old)["keep.txt"]
    assert git(repo, "status", "--porcelain") == ""


def test_commit_paths_in_a_subfolder_workspace_and_on_an_unborn_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    write(repo, "ws/a.txt", "a")
    write(repo, "outside.txt", "user's")
    new = commit_paths(str(repo / "ws"), ["a.txt"], "first")
    assert git(repo, "rev-list", "--parents", "-n1", new).split() == [new]  # a root commit
    assert list(tree(repo, new)) == ["ws/a.txt"]
    assert git(repo, "status", "--porcelain") == "?? outside.txt\n"
    write(repo, "ws/a.txt", "a2")
    second = commit_paths(str(repo / "ws"), ["./a.txt"], "second")
    assert git(repo, "rev-parse", f"{second}^").strip() == new


def test_commit_paths_takes_names_literally(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a*": "1", "ab": "1"})
    old = head(repo)
    write(repo, "a*", "2")
    write(repo, "ab", "2")
    new = commit_paths(str(repo), ["a*"], "star")
    assert git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", old, new).split() == ["a*"]
    assert git_state(str(repo)).dirty == ("ab",)


def test_commit_paths_uses_only_a_configured_identity(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1"}, identity=False)
    write(repo, "a", "2")
    before = refs_snapshot(str(repo))
    with pytest.raises(GitError, match=r"no git identity is configured .*user\.name.*user\.email"):
        commit_paths(str(repo), ["a"], "m")
    assert refs_snapshot(str(repo)) == before
    with pytest.raises(GitError, match='is not "Name <email>"'):
        commit_paths(str(repo), ["a"], "m", author="just a name")
    new = commit_paths(str(repo), ["a"], "m", author="Ada Lovelace <ada@example.com>")
    assert git(repo, "show", "-s", "--format=%an <%ae>|%cn <%ce>", new).strip() == (
        "Ada Lovelace <ada@example.com>|Ada Lovelace <ada@example.com>"
    )


def test_commit_paths_loses_no_concurrent_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "r", {"a": "1", "b": "1"})
    write(repo, "a", "2")
    real = g._identity_env

    def commit_meanwhile(top: str, author: str | None) -> dict[str, str]:
        git(repo, "commit", "-q", "--allow-empty", "-m", "the user's concurrent commit")
        return real(top, author)

    monkeypatch.setattr(g, "_identity_env", commit_meanwhile)
    with pytest.raises(GitError, match="branch main moved while committing"):
        commit_paths(str(repo), ["a"], "agent")
    assert git(repo, "log", "-1", "--format=%s").strip() == "the user's concurrent commit"
    assert git_state(str(repo)).dirty == ("a",)


@pytest.mark.parametrize(
    ("paths", "message", "expected"),
    [
        ([], "m", "no paths to commit"),
        ("a.txt", "m", "must be a list of paths"),
        (["a.txt"], "  \n", "commit message is empty"),
        (["../outside.txt"], "m", "outside the workspace"),
        (["sub/../../outside.txt"], "m", "outside the workspace"),
        (["/etc/passwd"], "m", "is absolute"),
        ([""], "m", "empty or invalid"),
        ([".git/config"], "m", "inside .git"),
        (["folder"], "m", "is a folder; list the files inside it"),
        (["build.log"], "m", r"ignored by git \(.gitignore\)"),
        (["clean.txt"], "m", "nothing to commit: 'clean.txt' already match HEAD"),
        (["never-existed.txt"], "m", "nothing to commit"),
        (["inner/file.txt"], "m", "inside the separate repository"),
        (["via-link/x.txt"], "m", "goes through the symlink"),
    ],
)
def test_commit_paths_refusals(tmp_path: Path, paths: list[str], message: str, expected: str) -> None:
    repo = make_repo(tmp_path / "r", {"a.txt": "1", "clean.txt": "c", ".gitignore": "*.log\n", "folder/f": "f"})
    write(repo, "a.txt", "2")
    write(repo, "build.log", "log")
    write(repo, "folder/f", "changed")
    make_repo(repo / "inner", {"file.txt": "i"})
    write(repo / "inner", "file.txt", "changed")
    (tmp_path / "elsewhere").mkdir()
    write(tmp_path, "elsewhere/x.txt", "x")
    os.symlink(tmp_path / "elsewhere", repo / "via-link")
    status_before = git(repo, "status", "--porcelain")  # (plain status refreshes the index: run it first)
    before = refs_snapshot(str(repo))
    with pytest.raises(GitError, match=expected) as caught:
        commit_paths(str(repo), paths, message)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, SafepointError)
    assert refs_snapshot(str(repo)) == before
    assert git(repo, "status", "--porcelain") == status_before


def test_commit_paths_refuses_an_unmerged_path(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"c.txt": "base\n"})
    git(repo, "checkout", "-q", "-b", "other")
    write(repo, "c.txt", "other\n")
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    write(repo, "c.txt", "main\n")
    git(repo, "commit", "-q", "-am", "main")
    subprocess.run(["git", "merge", "-q", "other"], cwd=repo, capture_output=True, check=False)
    with pytest.raises(GitError, match="unresolved merge conflicts"):
        commit_paths(str(repo), ["c.txt"], "m")


_NAMES = ["a", "b", "c.txt", "d/e", "d/f", "g/h/i"]
_CONTENT = st.sampled_from(["", "x\n", "y\n", "zz\n"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    at_head=st.dictionaries(st.sampled_from(_NAMES), _CONTENT, min_size=1),
    on_disk=st.dictionaries(st.sampled_from(_NAMES), st.one_of(st.none(), _CONTENT)),
    staged=st.sets(st.sampled_from(_NAMES)),
    chosen=st.sets(st.sampled_from(_NAMES), min_size=1),
)
def test_commit_paths_never_changes_other_paths(
    tmp_path_factory: pytest.TempPathFactory,
    at_head: dict[str, str],
    on_disk: dict[str, str | None],
    staged: set[str],
    chosen: set[str],
) -> None:
    repo = make_repo(tmp_path_factory.mktemp("prop") / "r", at_head)
    old = head(repo)
    for rel, content in on_disk.items():
        if content is None:
            if (repo / rel).exists():
                os.unlink(repo / rel)
        else:
            write(repo, rel, content)
    for rel in sorted(staged - chosen):
        if rel in at_head or (repo / rel).exists():
            git(repo, "add", "-A", "--", rel)
    others = sorted(set(_NAMES) - chosen)
    others = others or ["no-such-path"]  # (`git ls-files --` with no path would list every file)
    index_before = git(repo, "ls-files", "-s", "--", *others)
    worktree_before = {rel: (repo / rel).read_bytes() for rel in _NAMES if (repo / rel).exists()}
    try:
        new = commit_paths(str(repo), sorted(chosen), "prop")
    except GitError as exc:
        assert "nothing to commit" in str(exc)
        assert head(repo) == old
        return
    before, after = tree(repo, old), tree(repo, new)
    for rel in others:
        assert before.get(rel) == after.get(rel), rel
    for rel in chosen:
        path = repo / rel
        if path.exists():
            assert after[rel].split()[2] == git_blob_id(path.read_bytes())
        else:
            assert rel not in after
    assert git(repo, "ls-files", "-s", "--", *others) == index_before
    assert {rel: (repo / rel).read_bytes() for rel in _NAMES if (repo / rel).exists()} == worktree_before
    assert git(repo, "status", "--porcelain", "--", *sorted(chosen)) == ""
