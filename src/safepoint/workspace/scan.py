"""What changed in the workspace: a stat scan with exclusions, and an inotify change journal.

A capture of a shell command's effects needs the set of files whose stat changed. Two ways to get it:

* :func:`scan` walks the workspace and returns ``rel path -> FileStat`` for every regular file and symlink that
  :class:`IgnoreRules` does not exclude. Always correct; costs O(workspace) (about 3 µs a file here).
* :class:`ChangeWatcher` (Linux, inotify) reports the paths that may have changed since the last ``drain()``, so a
  capture costs O(changes). It says ``None`` whenever it cannot vouch for its answer; the caller then scans.

How a caller combines them (start the watcher *before* taking the baseline, so nothing falls between the two)::

    rules = IgnoreRules.for_workspace(root, store_dir=store)
    watcher = ChangeWatcher.start(root, rules)          # None: scan every time
    cache = scan(root, rules)
    ...run the command...
    touched = watcher.drain() if watcher else None
    if touched is None:
        new = scan(root, rules)                          # compare with cache
    else:
        # a path ending in '/' stands for every cached path under it; every other entry is a path to lstat
        # (gone -> deleted; a folder now -> deleted; excluded paths are never reported)

Nothing here hashes or reads file content (callers hash what changed), and nothing reads outside the workspace.

Limits of the journal (the full scan has none of these): changes made through another name of a hard-linked file
are reported under the name that was used only (a caller whose cache holds several paths with one ``ino`` should
re-stat all of them when one is reported); writes through a shared ``mmap`` are seen at close; changes made by
another machine on a network filesystem are not seen at all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

__all__ = ["ChangeWatcher", "FileStat", "IgnoreRules", "scan"]


class FileStat(msgspec.Struct, frozen=True, array_like=True):
    """``lstat`` of a file or symlink (symlinks are never followed); ``mode`` keeps the type bits."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int


# --- gitignore patterns ---------------------------------------------------------------------------------------------
#
# Matching follows git (dir.c + wildmatch.c), not pathspec's GitIgnoreSpec, which differs from git where it matters
# here: with "*" then "!*/" it still excludes every folder (git re-includes them), and "dir/**" excludes "dir" itself.
# A pattern is matched against one path at a time ("leaf" semantics): git never looks inside an excluded folder, and
# neither does the walk, so a path's ancestors are known not to be excluded when the path itself is checked.

_POSIX_CLASSES: dict[str, tuple[tuple[int, int], ...]] = {
    "alnum": ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)),
    "alpha": ((0x41, 0x5A), (0x61, 0x7A)),
    "blank": ((0x09, 0x09), (0x20, 0x20)),
    "cntrl": ((0x00, 0x1F), (0x7F, 0x7F)),
    "digit": ((0x30, 0x39),),
    "graph": ((0x21, 0x7E),),
    "lower": ((0x61, 0x7A),),
    "print": ((0x20, 0x7E),),
    "punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    "space": ((0x09, 0x0D), (0x20, 0x20)),
    "upper": ((0x41, 0x5A),),
    "xdigit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}


def _bracket(pat: str, i: int) -> tuple[str, int] | None:
    """Translate the bracket expression starting at ``pat[i] == '['``; None when git's wildmatch aborts on it."""
    n = len(pat)
    j = i + 1
    negate = j < n and pat[j] in "!^"
    if negate:
        j += 1
    ranges: list[tuple[int, int]] = []
    prev: str | None = None
    first = True
    while True:
        if j >= n:
            return None  # unterminated: wildmatch gives up, the pattern matches nothing
        c = pat[j]
        if c == "]" and not first:
            break
        first = False
        if c == "\\":
            j += 1
            if j >= n:
                return None
            ranges.append((ord(pat[j]), ord(pat[j])))
            prev = pat[j]
        elif c == "-" and prev is not None and j + 1 < n and pat[j + 1] != "]":
            j += 1
            hi = pat[j]
            if hi == "\\":
                j += 1
                if j >= n:
                    return None
                hi = pat[j]
            ranges.append((ord(prev), ord(hi)))
            prev = None
        elif c == "[" and j + 1 < n and pat[j + 1] == ":":
            close = pat.find("]", j + 2)
            if close == -1:
                return None
            if close - 1 < j + 2 or pat[close - 1] != ":":
                ranges.append((0x5B, 0x5B))  # not a [:class:]: a literal '['
                prev = "["
            else:
                named = _POSIX_CLASSES.get(pat[j + 2 : close - 1])
                if named is None:
                    return None
                ranges.extend(named)
                prev = None
                j = close
        else:
            ranges.append((ord(c), ord(c)))
            prev = c
        j += 1
    body = "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges if lo <= hi)
    if negate:
        return f"[^/{body}]", j + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), j + 1


def _translate(pat: str) -> str | None:
    """A git wildmatch pattern (WM_PATHNAME) as a regex for ``fullmatch``; None if it can never match."""
    out: list[str] = []
    i, n = 0, len(pat)
    # git compares the literal prefix (up to the first wildcard) on its own, then wildmatches the rest: a "**" that
    # starts the rest counts as starting the pattern ("a**" matches "ab/x", as git does).
    first = _MAGIC.search(pat)
    rest_starts = first.start() if first else n
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            if j - i >= 2 and (i in (0, rest_starts) or pat[i - 1] == "/") and (j == n or pat[j] == "/"):
                if j == n:
                    out.append(".*")  # "x/**": everything inside
                else:
                    out.append("(?:.*/)?")  # "**/": zero or more folders
                    j += 1
            else:
                out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            res = _bracket(pat, i)
            if res is None:
                return None
            part, i = res
            out.append(part)
        elif c == "\\":
            if i + 1 == n:
                return None  # a trailing backslash is invalid: never matches
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _trim_trailing_spaces(line: str) -> str:
    end = len(line)
    while end and line[end - 1] == " ":
        backslashes = 0
        k = end - 2
        while k >= 0 and line[k] == "\\":
            backslashes += 1
            k -= 1
        if backslashes % 2:
            break  # "\ " keeps that space
        end -= 1
    return line[:end]


_MAGIC = re.compile(r"[*?\[\\]")
# (negate, dir_only, basename_only, literal or None, regex or None, "*suffix" pattern's plain suffix or None)
_Pattern = tuple[bool, bool, bool, str | None, re.Pattern[str] | None, str | None]


def _parse(line: str) -> _Pattern | None:
    if line.endswith("\r"):
        line = line[:-1]
    if not line or line[0] == "#":
        return None
    line = _trim_trailing_spaces(line)
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    basename = "/" not in line
    if not basename and line.startswith("/"):
        line = line[1:]
    if not line:
        return None
    if not _MAGIC.search(line):
        return (negate, dir_only, basename, line, None, None)
    regex = _translate(line)
    if regex is None:
        return None
    suffix = line[1:] if basename and line[0] == "*" and not _MAGIC.search(line[1:]) else None
    return (negate, dir_only, basename, None, re.compile(regex, re.DOTALL), suffix)


class _PatternList:
    """The patterns of one source (a .gitignore, info/exclude, the user's extras), relative to one folder.

    ``match`` gives git's verdict for a path of which no ancestor is excluded: True excluded, False re-included by a
    negation, None no pattern matched. A cheap pre-filter (literal names, ``*suffix`` patterns, one combined regex
    for the rest) answers None for the usual path without looking at each pattern."""

    __slots__ = ("_base_re", "_exact", "_path_re", "_patterns", "_suffixes")

    def __init__(self, lines: Iterable[str]) -> None:
        patterns = [p for p in map(_parse, lines) if p is not None]
        self._patterns = patterns[::-1]  # the last matching pattern decides
        exact: set[str] = set()
        suffixes: set[str] = set()
        base_parts: list[str] = []
        path_parts: list[str] = []
        for _neg, _dir_only, basename, literal, regex, suffix in patterns:
            if regex is None:
                assert literal is not None
                if basename:
                    exact.add(literal)
                else:
                    path_parts.append(re.escape(literal))
            elif suffix is not None:
                suffixes.add(suffix)  # "*.log": names ending in ".log"
            elif basename:
                base_parts.append(regex.pattern)
            else:
                path_parts.append(regex.pattern)
        self._exact = frozenset(exact)
        self._suffixes = tuple(suffixes)
        self._base_re = re.compile("|".join(f"(?:{p})" for p in base_parts), re.DOTALL) if base_parts else None
        self._path_re = re.compile("|".join(f"(?:{p})" for p in path_parts), re.DOTALL) if path_parts else None

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def match(self, rel: str, name: str, is_dir: bool) -> bool | None:
        if not (
            name in self._exact
            or (self._suffixes and name.endswith(self._suffixes))
            or (self._base_re is not None and self._base_re.fullmatch(name) is not None)
            or (self._path_re is not None and self._path_re.fullmatch(rel) is not None)
        ):
            return None
        for negate, dir_only, basename, literal, regex, _suffix in self._patterns:
            if dir_only and not is_dir:
                continue
            target = name if basename else rel
            if target == literal if regex is None else regex.fullmatch(target) is not None:
                return not negate
        return None


def _read_patterns(path: str) -> _PatternList | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    plist = _PatternList(os.fsdecode(line) for line in data.split(b"\n"))
    return plist if plist else None


# A folder's gitignore chain: (pattern list, length of the folder's "rel/" prefix), deepest folder first.
_Chain = tuple[tuple[_PatternList, int], ...]
_GitignoreKey = tuple[int, int, int, int]


def _gitignore_key(st: os.stat_result | None) -> _GitignoreKey | None:
    if st is None or not stat.S_ISREG(st.st_mode):
        return None  # absent, or a symlink (git does not follow a symlinked .gitignore), or not a file
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class IgnoreRules:
    """What a capture never looks at: ``.git`` (file or folder, at any depth: worktrees and submodules have a ``.git``
    file), the store folder, what ``.gitignore`` files at any depth and ``.git/info/exclude`` ignore (git's semantics:
    a nested .gitignore applies relative to its folder and overrides its parents, the last matching pattern of a file
    wins, negation works, nothing inside an excluded folder can be re-included), and the user's extra patterns
    (gitignore syntax, relative to the root; they take precedence over every gitignore file, as git's command-line
    excludes do).

    ``.gitignore`` files are read when a walk (``scan``, the watcher) first meets their folder and re-read by ``scan``
    when their stat changes; ``.git/info/exclude`` is read once, here. Ignore files outside the root (a parent
    repository's, the user's global excludes file) are not read. Not thread-safe: share one instance per thread."""

    def __init__(
        self,
        root: str,
        *,
        store_rel: str | None,
        extra: _PatternList | None,
        info_exclude: _PatternList | None,
        use_gitignore: bool,
    ) -> None:
        self.root = root
        self._store_rel = store_rel
        self._extra = extra
        self._info = info_exclude
        self._use_gitignore = use_gitignore
        self._lists: dict[str, tuple[_GitignoreKey | None, _PatternList | None]] = {}
        self._chains: dict[str, _Chain] = {}

    @classmethod
    def for_workspace(
        cls,
        root: str,
        *,
        store_dir: str | None = None,
        extra: Sequence[str] = (),
        use_gitignore: bool = True,
    ) -> IgnoreRules:
        """``store_dir`` (absolute, or relative to the current folder) is excluded when it lies inside ``root``;
        paths are compared as given (``abspath``), not resolved through symlinks."""
        root = os.path.abspath(root)
        store_rel = None
        if store_dir is not None:
            rel = os.path.relpath(os.path.abspath(store_dir), root)
            if rel != "." and rel != os.pardir and not rel.startswith(os.pardir + os.sep):
                store_rel = rel.replace(os.sep, "/")
        info = None
        if use_gitignore and os.path.isdir(os.path.join(root, ".git")):
            info = _read_patterns(os.path.join(root, ".git", "info", "exclude"))
        extra_list = _PatternList(extra) if extra else None
        return cls(root, store_rel=store_rel, extra=extra_list or None, info_exclude=info, use_gitignore=use_gitignore)

    def excluded(self, rel: str, *, is_dir: bool) -> bool:
        """Whether ``rel`` ('/'-separated, relative to the root) is excluded, itself or through an ancestor."""
        rel = rel.strip("/")
        if not rel or rel == ".":
            return False
        parts = rel.split("/")
        chain = self._chain_for("")
        path = ""
        for i, name in enumerate(parts):
            path = f"{path}/{name}" if path else name
            last = i == len(parts) - 1
            if self._leaf_excluded(chain, path, name, is_dir if last else True):
                return True
            if not last:
                chain = self._chain_for(path, chain)
        return False

    # -- internals shared with scan() and ChangeWatcher --

    def _leaf_excluded(self, chain: _Chain, rel: str, name: str, is_dir: bool) -> bool:
        """Excluded, given that no ancestor of ``rel`` is; ``chain`` is the gitignore chain of its folder."""
        if name == ".git" or rel == self._store_rel:
            return True
        if self._extra is not None:
            verdict = self._extra.match(rel, name, is_dir)
            if verdict is not None:
                return verdict
        for plist, cut in chain:
            verdict = plist.match(rel[cut:], name, is_dir)
            if verdict is not None:
                return verdict
        if self._info is not None:
            return self._info.match(rel, name, is_dir) is True
        return False

    def _load(self, rel_dir: str, key: _GitignoreKey | None) -> _PatternList | None:
        cached = self._lists.get(rel_dir)
        if cached is not None and cached[0] == key:
            return cached[1]
        plist = None
        if key is not None:
            plist = _read_patterns(os.path.join(self.root, rel_dir, ".gitignore"))
        if cached is not None:
            self._chains.clear()  # the folder's rules changed: every chain below it is stale
        self._lists[rel_dir] = (key, plist)
        return plist

    def _enter_dir(self, rel_dir: str, parent_chain: _Chain, entries: list[os.DirEntry[str]]) -> _Chain:
        """The chain of a folder a walk is listing, (re)loading its .gitignore if that changed."""
        plist = None
        if self._use_gitignore:
            key = None
            for entry in entries:
                if entry.name == ".gitignore":
                    with contextlib.suppress(OSError):
                        key = _gitignore_key(entry.stat(follow_symlinks=False))
                    break
            plist = self._load(rel_dir, key)
        chain = ((plist, len(rel_dir) + 1 if rel_dir else 0), *parent_chain) if plist else parent_chain
        if len(self._chains) > 200_000:
            self._chains.clear()
        self._chains[rel_dir] = chain
        return chain

    def _forget(self, rel_dir: str) -> None:
        """Re-read ``rel_dir``'s .gitignore the next time it is needed."""
        if self._lists.pop(rel_dir, None) is not None:
            self._chains.clear()

    def _chain_for(self, rel_dir: str, parent_chain: _Chain | None = None) -> _Chain:
        chain = self._chains.get(rel_dir)
        if chain is not None:
            return chain
        if parent_chain is None:
            parent_chain = self._chain_for(rel_dir.rpartition("/")[0]) if rel_dir else ()
        plist = None
        if self._use_gitignore:
            cached = self._lists.get(rel_dir)
            if cached is not None:
                plist = cached[1]
            else:
                try:
                    st: os.stat_result | None = os.lstat(os.path.join(self.root, rel_dir, ".gitignore"))
                except OSError:
                    st = None
                plist = self._load(rel_dir, _gitignore_key(st))
        chain = ((plist, len(rel_dir) + 1 if rel_dir else 0), *parent_chain) if plist else parent_chain
        self._chains[rel_dir] = chain
        return chain


# --- the scan -------------------------------------------------------------------------------------------------------


def _check_root(root: str, rules: IgnoreRules) -> str:
    root = os.path.abspath(root)
    if root != rules.root:
        raise ValueError(f"these IgnoreRules were made for {rules.root!r}, not {root!r}")
    return root


def scan(root: str, rules: IgnoreRules) -> dict[str, FileStat]:
    """Every regular file and symlink below ``root`` (rel path -> lstat) that ``rules`` do not exclude.

    Never descends into excluded folders nor follows symlinks (a symlinked folder is listed as a symlink); other
    kinds of files (fifos, sockets, devices) are left out; entries that vanish mid-walk, and folders that cannot be
    listed (no permission), are skipped: their files look deleted. A root that cannot be listed raises ``OSError``.
    Nested .gitignore files are read as the walk meets them (and re-read when their stat changed)."""
    root = _check_root(root, rules)
    out: dict[str, FileStat] = {}
    excluded = rules._leaf_excluded
    plain_root = rules._extra is None and rules._info is None
    store_rel = rules._store_rel
    stack: list[tuple[str, str, _Chain]] = [("", root, ())]
    while stack:
        rel_dir, abs_dir, parent_chain = stack.pop()
        try:
            with os.scandir(abs_dir) as it:
                entries = list(it)
        except OSError:
            if not rel_dir:
                raise  # no workspace is not an empty workspace
            continue
        chain = rules._enter_dir(rel_dir, parent_chain, entries)
        plain = not chain and plain_root  # only .git and the store to leave out here: skip the call
        prefix = rel_dir + "/" if rel_dir else ""
        for entry in entries:
            name = entry.name
            rel = prefix + name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if (name == ".git" or rel == store_rel) if plain else excluded(chain, rel, name, is_dir):
                continue
            if is_dir:
                stack.append((rel, entry.path, chain))
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                out[rel] = FileStat(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, mode)
    return out


# --- the change journal ---------------------------------------------------------------------------------------------

_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_UNMOUNT = 0x00002000
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000

_MASK = (
    _IN_CREATE
    | _IN_DELETE
    | _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
    | _IN_EXCL_UNLINK
)
_MAX_READS = 64  # reads per drain: the first takes everything queued before the call; a busy writer cannot pin us
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP)


class _WatchFailed(Exception):
    pass


class ChangeWatcher:
    """Paths that may have changed since the last ``drain()``, from inotify (Linux).

    Watches every folder the rules do not exclude; adds watches for folders created (or moved in) later, reporting
    every file already inside them, since files made before a watch existed produce no event; drops the watches of
    folders removed or moved away. Exclusion is decided per event with the same rules as :func:`scan`. When a
    ``.gitignore`` in a watched folder changes, the watches below it are re-synced to the new rules and that
    ``drain()`` returns None (the set of excluded paths changed: the caller must rescan). ``.git/info/exclude`` and
    the extra patterns are fixed when the rules are made. Not thread-safe; one watcher per workspace."""

    def __init__(self, rules: IgnoreRules, inotify: Any) -> None:
        self._rules = rules
        self._root = rules.root
        self._ino: Any = inotify
        self._wd_dir: dict[int, str] = {}
        self._dir_wd: dict[str, int] = {}
        self._children: dict[str, set[str]] = {}
        self._pending: set[str] = set()
        self._lost = False
        self._broken = False
        self._resync: set[str] = set()

    @classmethod
    def start(cls, root: str, rules: IgnoreRules) -> ChangeWatcher | None:
        """Watch the workspace, or None when inotify is unavailable or fails (no module, not Linux, no instance
        left, the watch limit ``fs.inotify.max_user_watches`` reached): the caller then scans."""
        root = _check_root(root, rules)
        if not sys.platform.startswith("linux"):
            return None
        try:
            import inotify_simple
        except ImportError:
            return None
        try:
            inotify = inotify_simple.INotify()
        except (OSError, AttributeError):
            return None
        watcher = cls(rules, inotify)
        try:
            ok = watcher._watch_tree("", None) is not None
        except _WatchFailed:
            ok = False
        if not ok:
            watcher.close()
            return None
        return watcher

    def drain(self) -> set[str] | None:
        """Rel paths touched since the last drain (files and symlinks; for a folder removed, moved or created, also
        the folder's rel path with a trailing '/', standing for every path under it), never excluded ones.

        None means "events were lost, do a full scan": the kernel queue overflowed (``fs.inotify.max_queued_events``
        events between two drains; the watches are re-synced and the next drain is exact again), a .gitignore in a
        watched folder changed (same), a watch could not be added (the watch limit) or the root itself was removed
        or moved -- after these two every later drain is None too: close the watcher and scan. Never blocks; every
        event the kernel queued before the call is read (inotify queues an event within the syscall that made the
        change, so a write that returned, or a process that exited, has been seen). Closed watchers return None."""
        if self._ino is None or self._broken:
            return None
        try:
            for _ in range(_MAX_READS):
                events = self._ino.read(timeout=0)
                if not events:
                    break
                for wd, mask, _cookie, name in events:
                    self._handle(wd, mask, name)
            if self._resync and not self._broken:
                self._do_resync()
        except (_WatchFailed, OSError):
            self._broken = True  # e.g. the watch limit: keep saying "scan" rather than give partial answers
        touched, lost = self._pending, self._lost
        self._pending, self._lost = set(), False
        return None if lost or self._broken else touched

    def close(self) -> None:
        if self._ino is not None:
            with contextlib.suppress(OSError):
                self._ino.close()
            self._ino = None
        self._wd_dir.clear()
        self._dir_wd.clear()
        self._children.clear()

    def __enter__(self) -> ChangeWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & _IN_Q_OVERFLOW:
            self._lost = True
            self._resync.add("")
            return
        rel_dir = self._wd_dir.get(wd)
        if rel_dir is None:
            return  # a watch already dropped (folder moved or removed): what it saw is covered otherwise
        if mask & _IN_IGNORED:
            self._unmap(wd)
            if rel_dir == "":
                self._broken = True
            return
        if not name:
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT):
                if rel_dir == "":
                    self._broken = True
                    return
                if mask & _IN_DELETE_SELF:
                    self._pending.add(rel_dir + "/")
                    self._unmap(wd)  # an rmdir'ed folder was empty: its subfolders went before it
                # MOVE_SELF: the parent's MOVED_FROM (every watched folder's parent is watched) says it all; by now
                # the watch may even follow the folder at its new place, found by a walk
            return
        rel = f"{rel_dir}/{name}" if rel_dir else name
        is_dir = bool(mask & _IN_ISDIR)
        rules = self._rules
        if name == ".gitignore" and not is_dir and rules._use_gitignore:
            rules._forget(rel_dir)
            self._lost = True
            self._resync.add(rel_dir)
        if rules._leaf_excluded(rules._chain_for(rel_dir), rel, name, is_dir):
            return
        if not is_dir:
            self._pending.add(rel)
        elif mask & (_IN_MOVED_FROM | _IN_DELETE):
            self._pending.add(rel + "/")
            self._drop_subtree(rel)
        elif mask & (_IN_CREATE | _IN_MOVED_TO):
            self._pending.add(rel + "/")
            self._drop_subtree(rel)
            self._watch_tree(rel, self._pending)

    def _map(self, wd: int, rel: str) -> None:
        old_rel = self._wd_dir.get(wd)
        if old_rel is not None and old_rel != rel:
            self._unmap(wd)  # the same folder under a new name whose move we have not processed yet
        old_wd = self._dir_wd.get(rel)
        if old_wd is not None and old_wd != wd:
            self._unmap(old_wd)  # another folder now has this name
            with contextlib.suppress(OSError):
                self._ino.rm_watch(old_wd)
        self._wd_dir[wd] = rel
        self._dir_wd[rel] = wd
        if rel:
            self._children.setdefault(rel.rpartition("/")[0], set()).add(rel)

    def _unmap(self, wd: int) -> None:
        rel = self._wd_dir.pop(wd, None)
        if rel is not None and self._dir_wd.get(rel) == wd:
            del self._dir_wd[rel]
            if rel:
                siblings = self._children.get(rel.rpartition("/")[0])
                if siblings is not None:
                    siblings.discard(rel)

    def _subtree(self, rel: str) -> list[str]:
        found: list[str] = []
        todo = [rel]
        while todo:
            d = todo.pop()
            if d in self._dir_wd:
                found.append(d)
            todo.extend(self._children.pop(d, ()))
        return found

    def _drop_subtree(self, rel: str) -> None:
        for d in self._subtree(rel):
            wd = self._dir_wd[d]
            self._unmap(wd)
            with contextlib.suppress(OSError):
                self._ino.rm_watch(wd)  # a folder moved away keeps its watch otherwise

    def _add_watch(self, rel: str, path: str) -> bool:
        try:
            wd = self._ino.add_watch(path, _MASK)
        except OSError as exc:
            if exc.errno in _VANISHED:
                return False  # gone, replaced by a file or a symlink: its parent's events tell
            raise _WatchFailed(str(exc)) from exc
        self._map(wd, rel)
        return True

    def _watch_tree(self, top: str, report: set[str] | None) -> set[str] | None:
        """Watch ``top`` and every non-excluded folder below it; each folder is watched *before* it is listed, so a
        file is either listed or produces an event. Adds every file and symlink found to ``report``. Returns the
        folders watched, None when ``top`` itself could not be watched."""
        rules = self._rules
        excluded = rules._leaf_excluded
        parent_chain = rules._chain_for(top.rpartition("/")[0]) if top else ()
        watched: set[str] = set()
        stack: list[tuple[str, str, _Chain]] = [
            (top, os.path.join(self._root, top) if top else self._root, parent_chain)
        ]
        while stack:
            rel_dir, abs_dir, parent_chain = stack.pop()
            if not self._add_watch(rel_dir, abs_dir):
                continue
            watched.add(rel_dir)
            try:
                with os.scandir(abs_dir) as it:
                    entries = list(it)
            except OSError:
                continue
            chain = rules._enter_dir(rel_dir, parent_chain, entries)
            prefix = rel_dir + "/" if rel_dir else ""
            for entry in entries:
                name = entry.name
                rel = prefix + name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if (not is_dir and report is None) or excluded(chain, rel, name, is_dir):
                        continue
                    if is_dir:
                        stack.append((rel, entry.path, chain))
                    elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                        assert report is not None
                        report.add(rel)
                except OSError:
                    continue
        return watched if top in watched else None

    def _do_resync(self) -> None:
        """Bring the watches under each folder in ``_resync`` in line with the tree and the current rules."""
        tops = sorted(self._resync)
        self._resync.clear()
        done: list[str] = []
        for top in tops:
            if any(top == d or top.startswith(d + "/") or d == "" for d in done):
                continue
            done.append(top)
            before = set(self._subtree_keep(top))
            watched = self._watch_tree(top, None) or set()
            for stale in before - watched:
                wd = self._dir_wd.get(stale)
                if wd is not None:
                    self._unmap(wd)
                    with contextlib.suppress(OSError):
                        self._ino.rm_watch(wd)
            if top == "" and "" not in watched:
                self._broken = True

    def _subtree_keep(self, rel: str) -> list[str]:
        """Like ``_subtree`` but leaves the children index intact."""
        found: list[str] = []
        todo = [rel]
        while todo:
            d = todo.pop()
            if d in self._dir_wd:
                found.append(d)
            todo.extend(self._children.get(d, ()))
        return found
