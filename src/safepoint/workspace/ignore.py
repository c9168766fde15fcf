"""Which paths a capture never looks at: gitignore rules with git's own semantics, ``.git``, the store folder.

Used by :func:`safepoint.workspace.scan.scan` and its ``ChangeWatcher``; they call the internals (``_enter_dir``,
``_leaf_excluded``, ``_chain_for``) so that a walk decides each entry once, with its folder's chain in hand.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Sequence

from safepoint.workspace.names import real_path

__all__ = ["IgnoreRules", "Pins"]


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


class Pins:
    """Paths a capture has watched (recorded form in, real names kept): never excluded again, whatever the ignore
    rules say now. The run itself can edit ``.gitignore`` (its own file, written by a tool), nested ones,
    ``.safepointignore`` or ``.git/info/exclude``: rules read afresh must not make the user's files unwatched, so
    that a command deleting them next finds them kept (rather than "an ignored file ... not kept"). Rejected:
    freezing the rules read at the run's start (a folder the run makes with its own ``.gitignore``, like
    ``cargo new``'s ``/target``, would have its build output captured). Only grows (a session's worth of paths:
    O(files)), and its folders with it, so a walk enters them."""

    __slots__ = ("dirs", "files")

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.dirs: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.files)

    def add(self, recorded: str) -> None:
        rel = real_path(recorded) if '"' in recorded else recorded
        if rel in self.files:
            return
        self.files.add(rel)
        end = rel.rfind("/")
        while end > 0:
            folder = rel[:end]
            if folder in self.dirs:
                break  # its ancestors are in already
            self.dirs.add(folder)
            end = rel.rfind("/", 0, end)

    def update(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.add(path)


class IgnoreRules:
    """What a capture never looks at: ``.git`` (file or folder, at any depth: worktrees and submodules have a ``.git``
    file), the store folder, what ``.gitignore`` files at any depth and ``.git/info/exclude`` ignore (git's semantics:
    a nested .gitignore applies relative to its folder and overrides its parents, the last matching pattern of a file
    wins, negation works, nothing inside an excluded folder can be re-included), and the user's extra patterns
    (gitignore syntax, relative to the root; they take precedence over every gitignore file, as git's command-line
    excludes do). ``pins``: paths watched before, never excluded again (``Pins``); inside a pinned folder that the
    rules exclude now, only pinned paths are watched (git never looks inside an excluded folder).

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
        pins: Pins | None = None,
    ) -> None:
        self.root = root
        self._pins = pins
        self._forced: dict[str, bool] = {}  # pinned folder -> whether the rules exclude it now
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
        pins: Pins | None = None,
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
        return cls(
            root,
            store_rel=store_rel,
            extra=extra_list or None,
            info_exclude=info,
            use_gitignore=use_gitignore,
            pins=pins,
        )

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
        pins = self._pins
        if pins:
            if rel in pins.files or rel in pins.dirs:
                return False
            parent = rel.rpartition("/")[0]
            if parent in pins.dirs and self._forced_dir(parent):
                return True  # not pinned, in a folder the rules exclude now: as git, nothing inside it
        return self._ruled(chain, rel, name, is_dir)

    def _forced_dir(self, rel_dir: str) -> bool:
        """Whether the rules exclude the pinned folder ``rel_dir`` now (itself or through an ancestor)."""
        verdict = self._forced.get(rel_dir)
        if verdict is None:
            parent, _, name = rel_dir.rpartition("/")
            verdict = (bool(parent) and self._forced_dir(parent)) or self._ruled(
                self._chain_for(parent), rel_dir, name, True
            )
            self._forced[rel_dir] = verdict
        return verdict

    def _ruled(self, chain: _Chain, rel: str, name: str, is_dir: bool) -> bool:
        """The rules' verdict alone, given that no ancestor of ``rel`` is excluded."""
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
            self._forced.clear()
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
            self._forced.clear()

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
