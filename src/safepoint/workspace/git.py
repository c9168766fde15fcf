"""The git repository around a workspace: read-only views of it, and the one write, made only when the user asks.

Rules (spec §8.5): safepoint detects a repository and reads HEAD and the dirty state; it never creates commits,
stashes or refs, never touches the index or the user's branch on its own. ``commit_paths`` is the exception the
user asks for, and it commits only the paths it is given.

Every read runs ``git`` with ``GIT_OPTIONAL_LOCKS=0`` (so ``git status`` does not refresh and rewrite the index),
``LC_ALL=C``, no pager, no terminal prompt, stdin closed, its own process group and a timeout. Variables that would
point git at another repository or index (``GIT_DIR``, ``GIT_INDEX_FILE`` …, e.g. when safepoint runs inside a git
hook) are dropped, and every pathspec is literal (``GIT_LITERAL_PATHSPECS=1``: ``*`` in a file name is just ``*``).
No command runs a program a setting names (hooks, fsmonitor, filters, diff drivers ...: ``workspace/git_guard.py``).

Paths handed in and out are workspace-relative, ``/``-separated and in recorded form (``workspace/names.py``: a
name that is not plain text is quoted, so undecodable bytes survive a record).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from safepoint.errors import GitError, WorkspaceError
from safepoint.workspace.git_guard import GUARD_QUERY, SAFE_CONFIG, Guard, driver_guard
from safepoint.workspace.names import quote_path, real_path

READ_TIMEOUT = 60.0
"""Seconds a read-only git command may take (a cold ``git status`` of a very large repository is the slow one)."""
WRITE_TIMEOUT = 120.0
"""Seconds each step of ``commit_paths`` may take (commit signing runs here)."""

_DROPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_QUARANTINE_PATH",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
    "GIT_LITERAL_PATHSPECS",
)
_FIXED_ENV = {
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
    "LANGUAGE": "C",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
    "GIT_EDITOR": ":",
    "GIT_LITERAL_PATHSPECS": "1",
}
# A temporary index must stay one plain file: a split index would write sharedindex.* into .git.
_TEMP_INDEX_CONFIG = ("-c", "core.splitIndex=false", "-c", "index.sparse=false")
_EMPTY_TREES = frozenset(
    {"4b825dc642cb6eb9a060e54bf8d69288fbee4904", "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"}
)
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_AUTHOR = re.compile(r"\s*([^<>]*?)\s*<([^<>]+)>\s*")
_IDENTITY_FIX = (
    'run `git config --global user.name "Your Name"` and `git config --global user.email you@example.com` '
    '(or pass author="Name <email>")'
)


class GitState(msgspec.Struct, frozen=True, kw_only=True):
    is_repo: bool
    top: str | None
    """Absolute work-tree top of the repository containing the workspace (may be above the workspace)."""
    prefix: str
    """The workspace relative to ``top`` ('' when equal), '/'-separated, no trailing slash."""
    head: str | None
    """The commit HEAD names; None in a repository without commits."""
    branch: str | None
    """Short branch name; None when HEAD is detached."""
    dirty: tuple[str, ...]
    """Workspace-relative files that differ from HEAD (staged or not) and untracked files that are not ignored;
    both sides of a staged rename. A submodule is listed only when its commit differs; edits inside it are not."""
    nested_repos: tuple[str, ...]
    """Workspace-relative folders holding a separate repository (a ``.git`` folder or file) that is not a
    submodule; git does not look inside them. Found by git's own walk, so one inside an ignored folder is missed."""
    submodules: tuple[str, ...]
    """Workspace-relative gitlinks in the index (submodules, and repositories added without .gitmodules)."""
    is_worktree: bool
    """The work tree is a linked worktree (``git worktree add``)."""


_NOT_A_REPO = GitState(
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


class _GitMissing(Exception):
    pass


class _Result(NamedTuple):
    rc: int
    out: bytes
    err: bytes


class _Repo(NamedTuple):
    top: str
    prefix: str
    git_dir: str
    common_dir: str


# --------------------------------------------------------------------------------------------------------------------
# running git


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(_FIXED_ENV)
    if extra:
        env.update(extra)
    return env


def _run(
    args: Sequence[str],
    cwd: str,
    *,
    data: bytes | None = None,
    env: dict[str, str] | None = None,
    write: bool = False,
) -> _Result:
    """Run ``git args`` in ``cwd``. Raises ``_GitMissing`` when there is no git, ``GitError`` on a timeout."""
    timeout = WRITE_TIMEOUT if write else READ_TIMEOUT
    exe = shutil.which("git")
    if exe is None:
        raise _GitMissing
    try:
        proc = subprocess.Popen(
            [exe, *SAFE_CONFIG, *args],
            cwd=cwd,
            env=_env(env),
            stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # no controlling terminal to prompt on; one group to kill on a timeout
        )
    except FileNotFoundError as exc:
        if not os.path.isdir(cwd):
            raise WorkspaceError(f"workspace {cwd!r} is not a directory; create it or pass an existing one") from exc
        raise _GitMissing from exc
    try:
        out, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise GitError(
            f"`git {_verb(args)}` took longer than {timeout:g} s in {cwd}; check the repository "
            f"(`git status` by hand) or raise safepoint.workspace.git.{'WRITE' if write else 'READ'}_TIMEOUT"
        ) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return _Result(proc.returncode, out, err)


def _verb(args: Sequence[str]) -> str:
    """The git command in ``args``, past ``-c key=value`` options."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] == "-c" else 1
    return " ".join(args[i : i + 2])


def _first_line(err: bytes) -> str:
    for line in os.fsdecode(err).splitlines():
        line = line.strip()
        if line and not line.startswith("hint:"):
            return line
    return "(no message)"


def _raise_if_untrusted(result: _Result, where: str) -> None:
    if b"dubious ownership" in result.err:
        named = re.search(r"repository at '([^\n]*)'", os.fsdecode(result.err))
        where = named.group(1) if named else where
        raise GitError(
            f"git refuses the repository at {where}: it belongs to another user; if you trust it, run "
            f"`git config --global --add safe.directory {where}`"
        )


def _ok(result: _Result, args: Sequence[str], where: str) -> bytes:
    if result.rc != 0:
        _raise_if_untrusted(result, where)
        raise GitError(f"`git {_verb(args)}` failed in {where}: {_first_line(result.err)}")
    return result.out


def _git(
    args: Sequence[str],
    cwd: str,
    *,
    data: bytes | None = None,
    env: dict[str, str] | None = None,
    write: bool = False,
) -> bytes:
    return _ok(_run(args, cwd, data=data, env=env, write=write), args, cwd)


def _guard(top: str) -> Guard:
    """The settings that turn off every filter and diff driver the configuration names (``git_guard``)."""
    found = _run(GUARD_QUERY, top)
    return driver_guard(found.out if found.rc == 0 else b"", os.environ)


def _line(out: bytes) -> str:
    return os.fsdecode(out).rstrip("\n")


def _require_dir(workspace: str) -> None:
    if not os.path.isdir(workspace):
        raise WorkspaceError(f"workspace {workspace!r} is not a directory; create it or pass an existing --workspace")


def _probe(workspace: str) -> _Repo | None:
    """Where the repository is, or None when the workspace is not in a work tree (or inside .git, or bare)."""
    _require_dir(workspace)
    args = ["rev-parse", "--show-toplevel", "--show-prefix", "--absolute-git-dir", "--git-common-dir"]
    result = _run(args, workspace)
    if result.rc != 0:
        _raise_if_untrusted(result, os.path.abspath(workspace))
        if b"not a git repository" in result.err or b"must be run in a work tree" in result.err:
            return None
        _ok(result, args, workspace)
    lines = os.fsdecode(result.out).split("\n")
    if len(lines) != 5 or lines[4] != "":
        raise GitError(f"could not read `git rev-parse` output in {workspace}; is there a newline in the path?")
    top, prefix, git_dir, common = lines[:4]
    here = os.path.realpath(workspace)
    return _Repo(
        top=top,
        prefix=prefix.rstrip("/"),
        git_dir=git_dir,
        common_dir=os.path.normpath(os.path.join(here, common)),
    )


def _under(path: str, prefix: str) -> str | None:
    """``path`` (relative to the top) relative to the workspace, or None when it is outside."""
    if not prefix:
        return path
    if path.startswith(prefix + "/"):
        return path[len(prefix) + 1 :]
    return None


def _scope(prefix: str) -> list[str]:
    return ["--", prefix] if prefix else []


def _head(top: str) -> str | None:
    result = _run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], top)
    if result.rc != 0:
        _raise_if_untrusted(result, top)
        return None
    return _line(result.out)


# --------------------------------------------------------------------------------------------------------------------
# reading


def git_state(workspace: str) -> GitState:
    """The repository around ``workspace``; not-a-repo (also when git is not installed) is a state, not an error.

    Four git processes: ``rev-parse``, ``config`` (the drivers to turn off, see ``_guard``), ``status`` (the one
    that scans the tree) and ``ls-files --stage``.
    Raises ``WorkspaceError`` for a missing workspace and ``GitError`` when git itself fails or times out.
    """
    try:
        repo = _probe(workspace)
        if repo is None:
            return _NOT_A_REPO
        top, prefix = repo.top, repo.prefix
        guard = _guard(top)
        status = _git(
            [
                "status",
                "--porcelain=v2",
                "-z",
                "--untracked-files=all",
                "--branch",
                "--no-ahead-behind",
                "--ignore-submodules=dirty",
                "--renames",
                *_scope(prefix),
            ],
            top,
            env=guard.env,
        )
        staged = _git(["ls-files", "-z", "--stage", *_scope(prefix)], top)
    except _GitMissing:
        return _NOT_A_REPO

    head: str | None = None
    branch: str | None = None
    dirty: set[str] = set()
    nested: set[str] = set()
    tokens = status.split(b"\0")
    i = 0
    while i < len(tokens):
        token = os.fsdecode(tokens[i])
        i += 1
        paths: list[str] = []
        kind = token[:2]
        if kind == "# ":
            key, _, value = token[2:].partition(" ")
            if key == "branch.oid" and value != "(initial)":
                head = value
            elif key == "branch.head" and value != "(detached)":
                branch = value
        elif kind == "1 ":
            paths.append(token.split(" ", 8)[8])
        elif kind == "2 ":
            paths.append(token.split(" ", 9)[9])
            if i < len(tokens):
                paths.append(os.fsdecode(tokens[i]))
                i += 1
        elif kind == "u ":
            paths.append(token.split(" ", 10)[10])
        elif kind == "? ":
            if token.endswith("/"):  # with -uall, a folder is reported only when it is a repository of its own
                rel = _under(token[2:-1], prefix)
                if rel is not None:
                    nested.add(rel)
            else:
                paths.append(token[2:])
        for path in paths:
            rel = _under(path, prefix)
            if rel is not None:
                dirty.add(rel)

    submodules: set[str] = set()
    if b"160000 " in staged:
        for entry in staged.split(b"\0"):
            if entry.startswith(b"160000 "):
                rel = _under(os.fsdecode(entry.partition(b"\t")[2]), prefix)
                if rel is not None:
                    submodules.add(rel)
    return GitState(
        is_repo=True,
        top=top,
        prefix=prefix,
        head=head,
        branch=branch,
        dirty=tuple(sorted(map(quote_path, dirty))),
        nested_repos=tuple(sorted(map(quote_path, nested - submodules))),
        submodules=tuple(sorted(map(quote_path, submodules))),
        is_worktree=os.path.realpath(repo.git_dir) != os.path.realpath(repo.common_dir),
    )


def git_blob_id(data: bytes) -> str:
    """The SHA-1 object id git gives a blob with this content (``git hash-object`` without filters)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def head_blob_ids(workspace: str) -> dict[str, str]:
    """Workspace-relative path -> blob id at HEAD, for regular files and symlinks (a symlink's blob is its
    target). Submodules are left out. ``{}`` when there is no repository, no commit, or no git."""
    try:
        repo = _probe(workspace)
        if repo is None:
            return {}
        args = ["ls-tree", "-r", "-z", "HEAD", *_scope(repo.prefix)]
        result = _run(args, repo.top)
        if result.rc != 0:
            if _head(repo.top) is None:
                return {}
            _ok(result, args, repo.top)
    except _GitMissing:
        return {}
    ids: dict[str, str] = {}
    for entry in result.out.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        fields = meta.split(b" ")
        if len(fields) != 3 or fields[1] != b"blob":
            continue
        rel = _under(os.fsdecode(raw), repo.prefix)
        if rel is not None:
            ids[quote_path(rel)] = fields[2].decode("ascii")
    return ids


def read_blob(workspace: str, blob_id: str) -> bytes | None:
    """The raw content of a blob (no filters applied); None when it is not in the repository, is not a blob,
    the id is malformed, or there is no repository or git."""
    blob_id = blob_id.lower()
    if not _OBJECT_ID.fullmatch(blob_id):
        return None
    _require_dir(workspace)
    try:
        result = _run(["cat-file", "blob", blob_id], workspace)
    except _GitMissing:
        return None
    if result.rc != 0:
        _raise_if_untrusted(result, os.path.abspath(workspace))
        return None
    return result.out


class BlobReader:
    """Blobs read through ONE ``git cat-file --batch`` process for a whole operation (a rollback of 500 tracked
    files, a capture's before-states), instead of a process per file. Started at the first read; closed with the
    reader (use it as a context manager). Gives what ``read_blob`` gives for each id."""

    def __init__(self, workspace: str) -> None:
        self.workspace = workspace
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes] | None:
        if self._proc is None and not self._failed:
            exe = shutil.which("git")
            if exe is None or not os.path.isdir(self.workspace):
                self._failed = True
                return None
            self._proc = subprocess.Popen(
                [exe, *SAFE_CONFIG, "cat-file", "--batch"],
                cwd=self.workspace,
                env=_env(None),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self._proc

    def read(self, blob_id: str) -> bytes | None:
        blob_id = blob_id.lower()
        if not _OBJECT_ID.fullmatch(blob_id):
            return None
        proc = self._start()
        if proc is None or proc.stdin is None or proc.stdout is None:
            return self._single(blob_id)  # no git, or it could not start here: the single read says why
        try:
            proc.stdin.write(blob_id.encode() + b"\n")
            proc.stdin.flush()
            header = proc.stdout.readline()
        except OSError:  # a broken pipe: git exited (not a repository)
            header = b""
        fields = header.split()
        if len(fields) == 2 and fields[1] == b"missing":
            return None
        if len(fields) != 3:
            # git exited (not a repository, or it refused): one process for this read says why the way every other
            # read does (an untrusted repository is an error, not a missing blob).
            self.close()
            self._failed = True
            return self._single(blob_id)
        size = int(fields[2])
        data = proc.stdout.read(size + 1)  # the content and the newline that ends every answer
        return data[:size] if fields[1] == b"blob" else None

    def _single(self, blob_id: str) -> bytes | None:
        return read_blob(self.workspace, blob_id)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=READ_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def refs_snapshot(workspace: str) -> dict[str, str]:
    """What must not change when safepoint only reads: HEAD, every ref, the index bytes and the stash list.

    Keys: ``HEAD`` (``refs/heads/<b>`` or a sha), ``head_sha`` (or ''), ``refs`` (``git for-each-ref``),
    ``index`` (sha256 of the worktree's index file, or '') and ``stash`` (``git stash list``). All '' outside a
    repository. Five git processes.
    """
    empty = {"HEAD": "", "head_sha": "", "refs": "", "index": "", "stash": ""}
    try:
        repo = _probe(workspace)
        if repo is None:
            return empty
        top = repo.top
        symbolic = _run(["symbolic-ref", "-q", "HEAD"], top)
        head_sha = _head(top) or ""
        refs = _line(_git(["for-each-ref"], top))
        stash = _line(_git(["stash", "list"], top))
    except _GitMissing:
        return empty
    try:
        with open(os.path.join(repo.git_dir, "index"), "rb") as handle:
            index = hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        index = ""
    return {
        "HEAD": _line(symbolic.out) if symbolic.rc == 0 else head_sha,
        "head_sha": head_sha,
        "refs": refs,
        "index": index,
        "stash": stash,
    }


# --------------------------------------------------------------------------------------------------------------------
# committing, when the user asks


def _repo_path(path: str, prefix: str, workspace: str) -> str:
    """A workspace-relative path as a path relative to the top, refused when it cannot be the agent's file."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise GitError(f"path {path!r} is empty or invalid; pass workspace-relative file paths")
    slashed = path.replace(os.sep, "/")
    if slashed.startswith("/"):
        raise GitError(f"path {path!r} is absolute; pass it relative to the workspace {workspace}")
    norm = posixpath.normpath(slashed)
    if norm in (".", "..") or norm.startswith("../"):
        raise GitError(f"path {path!r} is outside the workspace {workspace}; only files inside it can be committed")
    if any(part.lower() == ".git" for part in norm.split("/")):
        raise GitError(f"path {path!r} is inside .git; only work-tree files can be committed")
    return f"{prefix}/{norm}" if prefix else norm


def _check_on_disk(top: str, rel: str, shown: str) -> None:
    """Refuse what ``git update-index`` cannot take as one file: folders, devices, paths through a symlink or
    into another repository. A path that does not exist is fine: it is committed as a deletion."""
    parts = rel.split("/")
    here = top
    for part in parts[:-1]:
        here = os.path.join(here, part)
        if os.path.islink(here):
            raise GitError(f"path {shown!r} goes through the symlink {here}; commit the real path instead")
        if not os.path.isdir(here):
            return
        if os.path.lexists(os.path.join(here, ".git")):
            raise GitError(f"path {shown!r} is inside the separate repository {here}; commit it there with git instead")
    try:
        mode = os.lstat(os.path.join(top, rel)).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise GitError(f"path {shown!r} is a folder; list the files inside it instead")
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise GitError(f"path {shown!r} is not a regular file or symlink; git cannot commit it")


def _configured_identity(top: str) -> dict[str, str]:
    result = _run(["config", "-z", "--get-regexp", r"^(user|author|committer)\.(name|email)$"], top)
    if result.rc not in (0, 1):  # 1: none set
        _ok(result, ["config", "--get-regexp"], top)
    found: dict[str, str] = {}
    for entry in result.out.split(b"\0"):
        key, _, value = os.fsdecode(entry).partition("\n")
        if value.strip():
            found[key.lower()] = value.strip()
    return found


def _identity_env(top: str, author: str | None) -> dict[str, str]:
    """Environment for ``commit-tree``: the user's own identity, never one git would guess from the host name."""
    config = _configured_identity(top)

    def lookup(role: str) -> tuple[str, str] | None:
        name = os.environ.get(f"GIT_{role.upper()}_NAME") or config.get(f"{role}.name") or config.get("user.name")
        email = (
            os.environ.get(f"GIT_{role.upper()}_EMAIL")
            or config.get(f"{role}.email")
            or config.get("user.email")
            or os.environ.get("EMAIL")
        )
        return (name, email) if name and email else None

    extra: dict[str, str] = {}
    given: tuple[str, str] | None = None
    if author is not None:
        match = _AUTHOR.fullmatch(author)
        if match is None or not match.group(1) or not match.group(2).strip():
            raise GitError(f'author {author!r} is not "Name <email>"; pass it like "Ada Lovelace <ada@example.com>"')
        given = (match.group(1), match.group(2).strip())
        extra.update(GIT_AUTHOR_NAME=given[0], GIT_AUTHOR_EMAIL=given[1])
    elif lookup("author") is None:
        raise GitError(f"no git identity is configured for {top}; {_IDENTITY_FIX}")
    if lookup("committer") is None:
        if given is None:
            raise GitError(f"no git committer identity is configured for {top}; {_IDENTITY_FIX}")
        extra.update(GIT_COMMITTER_NAME=given[0], GIT_COMMITTER_EMAIL=given[1])
    return extra


def commit_paths(workspace: str, paths: Sequence[str], message: str, *, author: str | None = None) -> str:
    """Commit the current content of exactly ``paths`` (workspace-relative; a missing file is committed as a
    deletion) on top of HEAD on the current branch, and return the new commit's sha.

    The user's other changes, staged or not, stay as they were: the tree is built in a temporary index seeded
    from HEAD, the branch moves by compare-and-swap (a concurrent commit is never lost), and afterwards only
    these paths' entries in the real index are set to the new commit's. Runs no hooks and no filter or diff
    driver (the agent may have configured one: see ``_guard``; a file's content is committed as it is on disk),
    but honours ``core.autocrlf``, ``core.filemode`` and ``commit.gpgSign`` like ``git commit``.

    Refuses (``GitError``): no git, not a repository, detached HEAD, no paths, an empty message, a path outside
    the workspace or inside .git, a folder, a path through a symlink or inside a nested repository or submodule,
    an untracked ignored file, an unmerged or skip-worktree path, a path under a required filter (git-lfs),
    nothing to commit, no configured identity (unless ``author`` is given), and a branch that moved meanwhile.
    """
    if isinstance(paths, str):
        raise GitError(f"paths must be a list of paths, not the single string {paths!r}; wrap it in a list")
    if not paths:
        raise GitError("no paths to commit; pass the workspace-relative files the agent changed")
    if not message.strip():
        raise GitError("the commit message is empty; pass a message")
    try:
        return _commit(workspace, list(paths), message, author)
    except _GitMissing:
        raise GitError("git is not installed or not on PATH; install git to commit") from None


def _refuse_required_filters(top: str, guard: Guard, path_args: list[str], by_rel: dict[str, str]) -> None:
    """A path whose ``.gitattributes`` filter is configured ``required`` (git-lfs) must go through that filter,
    which safepoint never runs (the agent may have planted it): refused in one line, the user commits it with git.
    Other filters are optional by git's own rule (a missing one keeps the content as it is), so that content is
    committed raw. One ``check-attr`` process, only when such a filter is configured."""
    if not guard.required:
        return
    found = _git(["check-attr", "-z", "filter", *path_args], top).split(b"\0")
    for i in range(0, len(found) - 2, 3):
        rel, value = os.fsdecode(found[i]), os.fsdecode(found[i + 2])
        if value in guard.required:
            raise GitError(
                f"path {by_rel.get(rel, rel)!r} goes through git's filter {value!r} (.gitattributes), which "
                "safepoint does not run; commit it with `git add` and `git commit` yourself"
            )


def _commit(workspace: str, paths: list[str], message: str, author: str | None) -> str:
    repo = _probe(workspace)
    if repo is None:
        raise GitError(
            f"workspace {workspace} is not inside a git work tree; run `git init` there or do not ask for a commit"
        )
    top, prefix = repo.top, repo.prefix
    by_rel: dict[str, str] = {}
    for path in paths:
        by_rel.setdefault(_repo_path(real_path(path), prefix, workspace), path)
    rels = sorted(by_rel)

    symbolic = _run(["symbolic-ref", "-q", "HEAD"], top)
    if symbolic.rc != 0:
        _raise_if_untrusted(symbolic, top)
        raise GitError(f"HEAD is detached in {top}; check out a branch (`git switch <branch>`) and ask again")
    ref = _line(symbolic.out)
    if not ref.startswith("refs/heads/"):
        raise GitError(f"HEAD points at {ref}, not a branch, in {top}; check out a branch and ask again")
    branch = ref[len("refs/heads/") :]
    old = _head(top)
    old_tree = _line(_git(["rev-parse", "--verify", f"{old}^{{tree}}"], top)) if old else None
    identity = _identity_env(top, author)

    for rel in rels:
        _check_on_disk(top, rel, by_rel[rel])
    path_args = ["--", *rels]
    tags = _git(["ls-files", "-z", "-t", *path_args], top)
    for entry in tags.split(b"\0"):
        tag, _, raw = entry.partition(b" ")
        if tag in (b"M", b"S"):
            rel = os.fsdecode(raw)
            what = "has unresolved merge conflicts; resolve them" if tag == b"M" else "is outside the sparse checkout"
            raise GitError(f"path {by_rel.get(rel, rel)!r} {what} before committing it")
    ignored = _git(["ls-files", "-z", "--others", "--ignored", "--exclude-standard", *path_args], top)
    if ignored.strip(b"\0"):
        rel = os.fsdecode(ignored.split(b"\0")[0])
        raise GitError(
            f"path {by_rel.get(rel, rel)!r} is ignored by git (.gitignore); leave it out, or `git add -f` it yourself"
        )

    guard = _guard(top)
    _refuse_required_filters(top, guard, path_args, by_rel)
    listed = b"".join(os.fsencode(rel) + b"\0" for rel in rels)
    with tempfile.TemporaryDirectory(prefix="safepoint-git-") as scratch:
        env = {**guard.env, "GIT_INDEX_FILE": os.path.join(scratch, "index"), "GIT_NO_REPLACE_OBJECTS": "1"}
        if old:
            _git([*_TEMP_INDEX_CONFIG, "read-tree", old], top, env=env, write=True)
        else:
            _git([*_TEMP_INDEX_CONFIG, "read-tree", "--empty"], top, env=env, write=True)
        _git(
            [*_TEMP_INDEX_CONFIG, "update-index", "--add", "--remove", "-z", "--stdin"],
            top,
            data=listed,
            env=env,
            write=True,
        )
        tree = _line(_git([*_TEMP_INDEX_CONFIG, "write-tree"], top, env=env, write=True))
    if tree == old_tree or (old is None and tree in _EMPTY_TREES):
        raise GitError(f"nothing to commit: {', '.join(map(repr, sorted(by_rel.values())))} already match HEAD")

    text = message.strip() + "\n"
    parents = ["-p", old] if old else []
    new = _line(
        _git(
            ["commit-tree", tree, *parents, "-F", "-"],
            top,
            data=text.encode("utf-8"),
            env={**guard.env, **identity, "GIT_NO_REPLACE_OBJECTS": "1"},
            write=True,
        )
    )

    again = _run(["symbolic-ref", "-q", "HEAD"], top)
    if again.rc != 0 or _line(again.out) != ref:
        raise GitError(f"HEAD left branch {branch} while committing in {top}; nothing was changed, ask again")
    subject = text.splitlines()[0]
    moved = _run(["update-ref", "-m", f"commit: {subject}", ref, new, old or ""], top, write=True)
    if moved.rc != 0:
        raise GitError(
            f"branch {branch} moved while committing in {top} ({_first_line(moved.err)}); nothing was changed, "
            "ask again"
        )

    # The one time the user's index is touched: these paths now match the new HEAD, nothing else changes.
    entries = _git(["ls-tree", "-z", new, *path_args], top)
    present: dict[bytes, bytes] = {}
    for entry in entries.split(b"\0"):
        meta, _, raw = entry.partition(b"\t")
        fields = meta.split(b" ")
        if len(fields) == 3:
            present[raw] = fields[0] + b" " + fields[2]
    zero = b"0 " + b"0" * len(new)
    info = b"".join(present.get(raw, zero) + b"\t" + raw + b"\0" for raw in (os.fsencode(rel) for rel in rels))
    updated = _run(["update-index", "-z", "--index-info"], top, data=info, env=guard.env, write=True)
    if updated.rc != 0:
        raise GitError(
            f"committed {new} on {branch}, but could not update the index for these paths "
            f"({_first_line(updated.err)}); run `git reset -q -- <those paths>` in {top}"
        )
    return new
