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

Paths handed out are in recorded form (``workspace/names.py``: a name that is not plain text is quoted, so any
byte string survives a record); ignore rules match the real names.

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
import stat
import sys
from typing import Any

import msgspec

from safepoint.workspace.ignore import IgnoreRules, _Chain
from safepoint.workspace.names import quote_path, real_path

__all__ = ["ChangeWatcher", "FileStat", "IgnoreRules", "scan"]


class FileStat(msgspec.Struct, frozen=True, array_like=True):
    """``lstat`` of a file or symlink (symlinks are never followed); ``mode`` keeps the type bits."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int


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
                out[quote_path(rel)] = FileStat(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, mode)
    return out


def recorded_stat(root: str, path: str, folders: dict[str, bool]) -> FileStat | None:
    """``lstat`` of a recorded path, None unless it is a file or link reached through real folders of the
    workspace: after ``rm -rf src && ln -s /elsewhere src``, ``src/keep.txt`` is gone, whatever the link leads to.
    ``folders`` caches which folders are real, for one pass."""
    real = real_path(path)
    folder = os.path.dirname(real)
    if folder:
        is_real = folders.get(folder)
        if is_real is None:
            absolute = os.path.join(root, folder)
            is_real = folders[folder] = os.path.realpath(absolute) == absolute
        if not is_real:
            return None
    try:
        info = os.lstat(os.path.join(root, real))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        return None
    return FileStat(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode)


def safepointignore(root: str) -> list[str]:
    """Extra exclusions a user keeps in WORKSPACE/.safepointignore (gitignore syntax), on top of .gitignore."""
    try:
        with open(os.path.join(root, ".safepointignore"), encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle if line.strip() and not line.startswith("#")]
    except FileNotFoundError:
        return []


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
        # Folders made or moved in (not excluded then) since the last drain; ``arrived`` holds those of the last
        # drain even when it said "scan" (a .gitignore changed), None only when events were lost.
        self._arrivals: set[str] = set()
        self._overflowed = False
        self.arrived: set[str] | None = set()
        self._ignored_born: set[str] = set()  # ignored paths made since ``ignored_gone`` (see ``_ignored_event``)
        self._ignored_gone: set[str] = set()
        self._wd_mode: dict[int, int] = {}  # each watched folder's permission bits, to tell a mode change apart
        self._mode_changed: dict[str, int] = {}  # folders whose mode changed since ``folder_modes`` -> mode before

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
        self.arrived = None if self._overflowed or self._broken else self._arrivals
        self._arrivals, self._overflowed = set(), False
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
            self._lost = self._overflowed = True
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
            if mask & _IN_ATTRIB:
                self._folder_attrib(wd, rel_dir)
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT):
                if rel_dir == "":
                    self._broken = True
                    return
                if mask & _IN_DELETE_SELF:
                    self._pending.add(quote_path(rel_dir) + "/")
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
            if name != ".git" and rel != rules._store_rel:
                self._ignored_event(quote_path(rel) + ("/" if is_dir else ""), mask)
            return
        if not is_dir:
            self._pending.add(quote_path(rel))
        elif mask & (_IN_MOVED_FROM | _IN_DELETE):
            self._pending.add(quote_path(rel) + "/")
            self._drop_subtree(rel)
        elif mask & (_IN_CREATE | _IN_MOVED_TO):
            self._pending.add(quote_path(rel) + "/")
            self._arrivals.add(quote_path(rel) + "/")
            self._drop_subtree(rel)
            self._watch_tree(rel, self._pending)

    def _ignored_event(self, rel: str, mask: int) -> None:
        """An ignored path (by .gitignore or the extra patterns) made or removed in a watched folder: one that was
        there before and went is kept until ``ignored_gone`` (a temporary file the same command made and removed
        is not)."""
        if mask & (_IN_CREATE | _IN_MOVED_TO):
            self._ignored_born.add(rel)
            self._ignored_gone.discard(rel)
        elif mask & (_IN_DELETE | _IN_MOVED_FROM):
            if rel in self._ignored_born:
                self._ignored_born.discard(rel)
            else:
                self._ignored_gone.add(rel)

    def _folder_attrib(self, wd: int, rel_dir: str) -> None:
        """A watched folder's own attributes changed (its watch says so): note a change of its mode."""
        old = self._wd_mode.get(wd)
        try:
            mode = stat.S_IMODE(os.lstat(os.path.join(self._root, rel_dir) if rel_dir else self._root).st_mode)
        except OSError:
            return
        if old is not None and old != mode:
            self._mode_changed.setdefault(quote_path(rel_dir), old)
        self._wd_mode[wd] = mode

    def folder_modes(self) -> dict[str, tuple[int, int]]:
        """Watched folders (recorded form; "" for the root) whose permission bits changed since the last call:
        the mode then and now. A folder's mode is no file's change: no scan sees it, only its watch."""
        changed: dict[str, tuple[int, int]] = {}
        for rel, old in self._mode_changed.items():
            with contextlib.suppress(OSError):
                now = stat.S_IMODE(os.lstat(os.path.join(self._root, real_path(rel)) if rel else self._root).st_mode)
                if now != old:
                    changed[rel] = (old, now)
        self._mode_changed = {}
        return changed

    def ignored_gone(self) -> set[str]:
        """Ignored paths (recorded form; a folder ends in '/') that were there at the previous call and have been
        removed or moved away since; no scan looks at them, so only these events tell. Only the watched folders'
        own entries: what went inside an ignored folder is not seen (that folder's own removal is)."""
        gone = self._ignored_gone
        self._ignored_gone, self._ignored_born = set(), set()
        return gone

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
        self._wd_mode.pop(wd, None)
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
        with contextlib.suppress(OSError):
            self._wd_mode.setdefault(wd, stat.S_IMODE(os.lstat(path).st_mode))  # one stat per folder, like the watch
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
                        report.add(quote_path(rel))
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
