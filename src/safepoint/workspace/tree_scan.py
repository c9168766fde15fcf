"""The scan fallback, kept between passes: one ``find`` process lists the tree, Python looks only at what changed.

Where no change journal works (no inotify: not Linux, the watch limit reached, a container without it), every
command is bracketed by two scans of the workspace. :func:`safepoint.workspace.scan.scan` costs about 3 µs a file
in Python (a ``DirEntry.stat``, a ``FileStat``, a quoted name, an ignore verdict per entry: 0.15-0.5 s at 50,000
files, twice per command), more than a shadow-git checkpoint (``git add -A`` + ``commit``) of the same tree.

:class:`TreeScan` keeps the last pass's listing instead: each pass runs one ``find -printf`` (the walk and every
``lstat`` in C, pruning ``.git``, the store and the folders the rules excluded last time) and compares its lines,
as bytes, with the last pass's. Only the entries whose line changed (or that came or went) are looked at in
Python: their ignore verdict, a fresh ``lstat``. So a pass costs the C walk plus O(changes) in Python.

Correct where a stat cache is not (git's "racy git" problem): a change that keeps the size and lands in the same
timestamp tick as the file's last change leaves its line unchanged. A file whose ctime is within a tick of the
pass that saw it is *racy*: its content hash is taken then and compared again at the next pass, which reports it
when the content differs, whatever its stat says (only files changed in the last moments before a pass: O(changes)).

A ``.gitignore`` that came, went or changed re-decides every entry (a rebuild, O(workspace) in Python, as a full
scan). Where ``find -printf`` is missing (BSD, macOS), :meth:`TreeScan.start` returns None and callers scan.
The folder-mtime shortcut (skip listing a folder whose mtime did not change) was rejected: a listing is cheap
beside the ``lstat`` of each file, which no shortcut may skip (a file's content changes without its folder's).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import time
from itertools import compress, count, islice
from operator import ne

from safepoint.workspace.ignore import IgnoreRules, _Chain
from safepoint.workspace.names import quote_path, real_path
from safepoint.workspace.scan import FileStat

__all__ = ["TreeScan"]

# Each entry: its path, then type, size, ctime, inode, permission bits. Any change of a file's content, mode or
# names moves its ctime (utime too, which may set mtime back); mtime is read by the lstat of what changed. %C@
# prints the nanoseconds exactly (no float). The first pass adds mtime at the end, to make the baseline without a
# second lstat of every file.
_FORMAT = r"%P\0%y %s %C@ %i %m\0"
_FIRST_FORMAT = r"%P\0%y %s %C@ %i %m %T@\0"
_RACY_NS = 50_000_000  # file times come from a coarse clock that lags the fine one by up to a tick (HZ >= 100)
_COARSE_UNITS = (10_000_000_000, 2_000_000_000, 1_000_000_000)  # file systems whose times are coarser than a tick
# Excluded folders passed to find by name (-path): each pattern costs find a test per entry (200 of them made a
# pass at 50,000 files ten times slower), so only the few largest, where skipping the listing pays for the test;
# find lists the others and Python passes over them.
_MAX_PRUNED = 4
_PRUNE_MIN = 2000  # entries inside an excluded folder for it to be pruned
_RACY_BYTES = 64 * 1024 * 1024  # a racy file larger than this is not re-read (see ``_digest``)
_TYPE_BITS = {b"f": stat.S_IFREG, b"l": stat.S_IFLNK}


def _glob_escape(rel: str) -> str:
    return "".join("\\" + c if c in "\\*?[" else c for c in rel)


def _ns(text: bytes) -> int:
    whole, _, frac = text.partition(b".")
    sign = -1 if whole.startswith(b"-") else 1
    return int(whole) * 1_000_000_000 + sign * int((frac + b"000000000")[:9])


def _changed_span(old: list[bytes], new: list[bytes]) -> tuple[int, int, int]:
    """Where two listings differ: ``new[start:new_end]`` against ``old[start:old_end]``, on entry boundaries (a
    listing is ``[path, line, path, line, ..., b""]``). find lists a tree in the same order while nothing changes,
    so the entries before the first and after the last difference are the same entries; comparing them is C-speed
    (``map(ne, ...)``), and only the span between is looked at in Python: O(workspace) in C, O(changes) in Python
    when the changes are near each other (two far apart make the span long, never wrong)."""
    shorter = min(len(old), len(new))
    start = next(compress(count(), map(ne, old, new)), shorter)
    start -= start % 2
    tail = next(compress(count(), map(ne, reversed(old), reversed(new))), shorter)
    tail = min(tail, shorter - start)
    old_end, new_end = len(old) - tail, len(new) - tail
    if old_end % 2:  # the span ends on a line: take the entry whole
        old_end, new_end = old_end + 1, new_end + 1
    return start, min(old_end, len(old) - 1), min(new_end, len(new) - 1)


class TreeScan:
    """Every regular file and symlink the rules do not exclude (``stats``, rel path in recorded form -> lstat, as
    :func:`~safepoint.workspace.scan.scan` returns), brought up to date by :meth:`rescan`. Same exclusions and the
    same limits as ``scan`` (never follows symlinks nor enters excluded folders' listings in Python; entries that
    vanish mid-walk and folders that cannot be listed are left out). Not thread-safe."""

    def __init__(self, root: str, rules: IgnoreRules) -> None:
        self.root = root
        self._rules = rules
        self.stats: dict[str, FileStat] = {}
        self._listing: list[bytes] = [b""]  # the last pass's find output, split: path, line, path, line, ..., b""
        self._names: dict[bytes, str] = {}  # path as find prints it, of an included file -> its recorded path
        self._pruned: set[str] = set()  # excluded folders (rel, real names), not listed again
        self._racy: dict[str, tuple[FileStat, bytes | None]] = {}  # path -> stat and content hash when seen
        self.content_changed: set[str] = set()  # of the last pass: changed with the same stat (racy files)
        self._racy_ns = _RACY_NS

    @classmethod
    def start(cls, root: str, rules: IgnoreRules) -> TreeScan | None:
        """A first pass (the baseline); None where ``find -printf`` is not at hand. A root that cannot be listed
        raises ``OSError``, as ``scan`` does."""
        if os.path.abspath(root) != rules.root:
            raise ValueError(f"these IgnoreRules were made for {rules.root!r}, not {root!r}")
        tree = cls(rules.root, rules)
        began = time.time_ns()
        try:
            listing = tree._list(_FIRST_FORMAT)
        except _NoFind:
            return None
        tree._rebuild(listing[2:])
        root_ctime = _ns(listing[1].split(b" ")[2])
        sample = [root_ctime, *(info.ctime_ns for info in islice(tree.stats.values(), 100))]
        for unit in _COARSE_UNITS:  # a file system that keeps whole seconds (ext3, HFS+) or two (FAT), or coarser
            if not any(ns % unit for ns in sample):
                tree._racy_ns = unit + _RACY_NS
                break
        tree._note_racy(tree.stats, began)
        return tree

    def rescan(self) -> dict[str, FileStat | None]:
        """Paths (recorded form) changed since the last pass, each with its stat before (None: it was not there,
        or was excluded); ``stats`` is brought up to date in place (a caller may hold it as its own cache). A racy
        file whose content changed is in it (and in ``content_changed``) with the stat it still has."""
        began = time.time_ns()
        new = self._list(_FORMAT)[2:]
        old, self._listing = self._listing, new
        if new == old:
            return self._recheck_racy({}, began)
        start, old_end, new_end = _changed_span(old, new)
        before = dict(zip(old[start:old_end:2], old[start + 1 : old_end : 2], strict=True))
        after = dict(zip(new[start:new_end:2], new[start + 1 : new_end : 2], strict=True))
        changed = [key for key, line in after.items() if before.get(key) != line]
        gone = before.keys() - after.keys()
        if any(key.rpartition(b"/")[2] == b".gitignore" for key in (*changed, *gone)):
            return self._rebuild_after(old, began)
        out: dict[str, FileStat | None] = {}
        for key in gone:
            path = self._names.pop(key, None)
            if path is not None and (was := self.stats.pop(path, None)) is not None:
                out[path] = was
        rules = self._rules
        hidden: dict[bytes, bytes] = {}  # folders new in this pass and excluded -> the outermost of them
        sizes: dict[bytes, int] = {}
        for key in changed:  # in find's order: a new folder before what it holds
            kind = after[key][:1]
            top = hidden.get(key.rpartition(b"/")[0])
            if top is not None:  # inside a new excluded folder: new too, and excluded
                sizes[top] += 1
                if kind == b"d":
                    hidden[key] = top
                continue
            path = self._names.get(key)
            if kind not in _TYPE_BITS:
                if path is not None:  # a file became a folder (or a fifo): the file is gone
                    del self._names[key]
                    if (was := self.stats.pop(path, None)) is not None:
                        out[path] = was
                if kind == b"d" and before.get(key, b"")[:1] != b"d" and rules.excluded(os.fsdecode(key), is_dir=True):
                    hidden[key] = key
                    sizes[key] = 0
                continue
            if path is None:
                rel = os.fsdecode(key)
                if rules.excluded(rel, is_dir=False):
                    continue
                path = self._names[key] = quote_path(rel)
            now = self._lstat(key)
            was = self.stats.get(path)
            if now is None:
                del self._names[key]
                if was is not None:
                    del self.stats[path]
                    out[path] = was
            elif was != now:
                self.stats[path] = now
                out[path] = was
        for top, size in sorted(sizes.items(), key=lambda item: -item[1]):
            if size >= _PRUNE_MIN and len(self._pruned) < _MAX_PRUNED:
                self._pruned.add(os.fsdecode(top))  # find lists it no more
        return self._recheck_racy(out, began)

    # -- internals --

    def _list(self, form: str) -> list[bytes]:
        """find's listing, split: the root (an empty path) and its line first, then each entry's path and line in
        find's order (a folder before what it holds), then b""."""
        prune = ["-name", ".git"]
        store = self._rules._store_rel
        for rel in (store, *sorted(self._pruned)) if store else sorted(self._pruned):
            prune += ["-o", "-path", "./" + _glob_escape(rel)]
        command = ["find", ".", "(", *prune, ")", "-prune", "-o", "-printf", form]
        try:
            done = subprocess.run(command, cwd=self.root, capture_output=True, check=False)
        except (FileNotFoundError, PermissionError) as exc:
            if not os.path.isdir(self.root):
                raise  # no workspace is not an empty workspace
            raise _NoFind from exc
        if done.returncode != 0 and not done.stdout:
            os.listdir(self.root)  # a root that cannot be listed raises here
            raise _NoFind(done.stderr.decode(errors="replace"))
        listing = done.stdout.split(b"\0")
        if len(listing) % 2 != 1 or listing[-1] or listing[0] != b"":
            raise _NoFind("find -printf is not GNU find's")
        return listing  # the root itself first: b"" and its line

    def _lstat(self, key: bytes) -> FileStat | None:
        try:
            info = os.lstat(os.path.join(self.root, os.fsdecode(key)))
        except OSError:
            return None
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return None
        return FileStat(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode)

    def _rebuild_after(self, old: list[bytes], began: int) -> dict[str, FileStat | None]:
        """A .gitignore came, went or changed: every entry is decided again (as a full scan), from a listing
        with the times."""
        rules = self._rules
        before_lines = dict(zip(old[0:-1:2], old[1:-1:2], strict=True))
        now_lines = dict(zip(self._listing[0:-1:2], self._listing[1:-1:2], strict=True))
        for key in before_lines.keys() | now_lines.keys():
            if key.rpartition(b"/")[2] == b".gitignore" and before_lines.get(key) != now_lines.get(key):
                rules._forget(os.fsdecode(key.rpartition(b"/")[0]))
        before = dict(self.stats)
        self._pruned = set()
        self._rebuild(self._list(_FIRST_FORMAT)[2:])
        out: dict[str, FileStat | None] = {p: before[p] for p in before.keys() - self.stats.keys()}
        out.update((p, before.get(p)) for p, s in self.stats.items() if before.get(p) != s)
        return self._recheck_racy(out, began)

    def _rebuild(self, listing: list[bytes]) -> None:
        """Decide every entry (``listing`` in the first pass's format): in find's order, a folder comes before
        what it holds, so an excluded folder's entries are skipped by their parent."""
        rules = self._rules
        stats: dict[str, FileStat] = {}
        names: dict[bytes, str] = {}
        skipped: dict[str, str] = {}  # excluded folders -> the outermost of them
        sizes: dict[str, int] = {}
        chains: dict[str, _Chain] = {}
        excluded = rules._leaf_excluded
        kept = listing[:]
        for index in range(0, len(listing) - 1, 2):
            key, line = listing[index], listing[index + 1]
            head, _, mtime = line.rpartition(b" ")
            kept[index + 1] = head
            rel = os.fsdecode(key)
            parent, _, name = rel.rpartition("/")
            kind = line[:1]
            top = skipped.get(parent)
            if top is not None:
                sizes[top] += 1
                if kind == b"d":
                    skipped[rel] = top
                continue
            chain = chains.get(parent)
            if chain is None:
                chain = chains[parent] = rules._chain_for(parent)
            if excluded(chain, rel, name, kind == b"d"):
                if kind == b"d":
                    skipped[rel] = rel
                    sizes[rel] = 0
                continue
            bits = _TYPE_BITS.get(kind)
            if bits is None:
                continue
            _kind, size, ctime, ino, mode = head.split(b" ")
            path = names[key] = quote_path(rel)
            stats[path] = FileStat(int(size), _ns(mtime), _ns(ctime), int(ino), bits | int(mode, 8))
        largest = sorted((-size, rel) for rel, size in sizes.items() if size >= _PRUNE_MIN)[:_MAX_PRUNED]
        self._listing, self._names, self._pruned = kept, names, {rel for _size, rel in largest}
        self.stats.clear()  # the same dict: a caller may hold it
        self.stats.update(stats)

    def _note_racy(self, seen: dict[str, FileStat] | dict[str, FileStat | None], began: int) -> None:
        """Files changed within a tick of this pass: a later change in that tick may leave their stat as it is, so
        their content is hashed now and again at the next pass (git's racy-git rule). The hash is read after the
        listing: a same-size change between the two, within one tick, is the window left (git's too)."""
        for path, info in seen.items():
            if info is not None and info.ctime_ns >= began - self._racy_ns:
                self._racy[path] = (info, self._digest(path, info))

    def _recheck_racy(self, out: dict[str, FileStat | None], began: int) -> dict[str, FileStat | None]:
        racy, self._racy = self._racy, {}
        self.content_changed = set()
        for path, (info, digest) in racy.items():
            if path not in out and self.stats.get(path) == info and self._digest(path, info) != digest:
                out[path] = info  # same stat, other content: found only by reading it (the stat before is this)
                self.content_changed.add(path)
        self._note_racy({p: self.stats.get(p) for p in (*racy, *out)}, began)  # as they are now
        return out

    def _digest(self, path: str, info: FileStat) -> bytes | None:
        if info.size > _RACY_BYTES:
            return None  # not re-read: a same-size change of a huge file within one tick is not seen
        real = os.path.join(self.root, real_path(path))
        try:
            if stat.S_ISLNK(info.mode):
                return os.fsencode(os.readlink(real))
            with open(real, "rb") as handle:
                return hashlib.blake2b(handle.read(), digest_size=16).digest()
        except OSError:
            return None


class _NoFind(Exception):
    pass
