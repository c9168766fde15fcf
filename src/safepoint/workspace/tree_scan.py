"""The scan fallback, kept between passes: ``find`` walks the tree in C, Python looks only at what changed.

Where no change journal works (no inotify: not Linux, the watch limit reached, a container without it), every
command is bracketed by two passes over the workspace: one before it (the user's edits since the last command
are settled as theirs, their content kept, so a command that rewrites such a file can be undone back to the
user's version) and one after. Neither may be skipped, nor may either skip a file: a file's content changes
without its folder's, so each pass is one ``lstat`` of every file. :func:`safepoint.workspace.scan.scan` costs
about 3 µs a file in Python (0.15-0.5 s at 50,000 files, twice per command), more than a shadow-git checkpoint.

:class:`TreeScan` keeps what the last pass saw instead, and each pass runs ``find -printf`` (the walk and every
``lstat`` in C, pruning ``.git``, the store and the largest folders the rules exclude; split over parallel
processes, ``workspace/find_listing.py``). Two kinds of pass:

* **Changed only** (local file systems, ``workspace/changed_since.py``): find prints only the entries whose ctime
  is later than the last pass's start (minus a slack). Every change moves a ctime: a file's own for a write,
  chmod or utime, its folder's for a file made, removed or renamed. Each folder printed is listed again (what
  came, went, or was swapped for another inode); a folder that arrived is walked whole (moved in, its files keep
  their old ctimes); each file printed is compared with its stat. O(changes) in Python, nothing formatted for
  what did not change. A step of the clock between two passes makes that pass a whole one.
* **Whole listing** (elsewhere: a network share's times come from another clock): find prints every entry; the
  listing is compared, as bytes, with the last pass's, and only the span that differs is looked at in Python
  (each entry whose line changed, or that came or went: its ignore verdict, a fresh ``lstat``).

Correct where a stat cache is not (git's "racy git" problem): a change that keeps the size and lands in the same
timestamp tick as the file's last change leaves its stat unchanged. A file whose ctime is within a tick of the
pass that saw it is *racy*: its content hash is taken then and compared again at the next pass, which reports it
when the content differs, whatever its stat says (only files changed in the last moments before a pass: O(changes)).

A ``.gitignore`` that came, went or changed re-decides every entry (a rebuild, O(workspace) in Python, as a full
scan). Where ``find -printf`` is missing (BSD, macOS), :meth:`TreeScan.start` returns None and callers scan.
Rejected: skipping the pass before a command (ctime would tell the user's edits from the command's, but not give
back the content of a file the user edited and the command then rewrote), and starting it before the command is
known (an edit in between would be charged to the command).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterable
from itertools import islice

from safepoint.workspace import find_listing
from safepoint.workspace.changed_since import SLACK_NS as _SLACK_NS
from safepoint.workspace.changed_since import STEP_NS as _STEP_NS
from safepoint.workspace.changed_since import local_times
from safepoint.workspace.find_listing import FIRST_FORMAT, FORMAT, NoFind, changed_span, plan_walkers
from safepoint.workspace.ignore import IgnoreRules, _Chain
from safepoint.workspace.names import quote_path, real_path
from safepoint.workspace.scan import FileStat

__all__ = ["TreeScan"]

_RACY_NS = 50_000_000  # file times come from a coarse clock that lags the fine one by up to a tick (HZ >= 100)
_COARSE_UNITS = (10_000_000_000, 2_000_000_000, 1_000_000_000)  # file systems whose times are coarser than a tick
# Excluded folders passed to find by name (-path): each pattern costs find a test per entry (200 of them made a
# pass at 50,000 files ten times slower), so only the few largest, where skipping the listing pays for the test;
# find lists the others and Python passes over them.
_MAX_PRUNED = 4
_PRUNE_MIN = 2000  # entries inside an excluded folder for it to be pruned
_RACY_BYTES = 64 * 1024 * 1024  # a racy file larger than this is not re-read (see ``_digest``)
_TYPE_BITS = {b"f": stat.S_IFREG, b"l": stat.S_IFLNK}
# Extra find processes per pass (``find_listing.plan_walkers``): one per core beyond the first, at most 3.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_WALKERS = min(max(_CORES - 1, 0), 3)  # (the cores this process may run on: a container's, not the host's)


def _rel(key: bytes) -> str:
    """A listed path (``./REL``) as the rules see it."""
    return os.fsdecode(key[2:])


def _ns(text: bytes) -> int:
    whole, _, frac = text.partition(b".")
    sign = -1 if whole.startswith(b"-") else 1
    return int(whole) * 1_000_000_000 + sign * int((frac + b"000000000")[:9])


def _pairs(span: bytes) -> dict[bytes, bytes]:
    """A span of a listing (whole entries): path -> line."""
    tokens = span.split(b"\0")
    return dict(zip(tokens[0:-1:2], tokens[1:-1:2], strict=True))


class TreeScan:
    """Every regular file and symlink the rules do not exclude (``stats``, rel path in recorded form -> lstat, as
    :func:`~safepoint.workspace.scan.scan` returns), brought up to date by :meth:`rescan`. Same exclusions and the
    same limits as ``scan`` (never follows symlinks nor enters excluded folders' listings in Python; entries that
    vanish mid-walk and folders that cannot be listed are left out). Not thread-safe."""

    def __init__(self, root: str, rules: IgnoreRules) -> None:
        self.root = root
        self._rules = rules
        self.stats: dict[str, FileStat] = {}
        self._raw = b""  # the last pass's listing, as find printed it (``find_listing.FORMAT``)
        self._names: dict[bytes, str] = {}  # path as find prints it, of an included file -> its recorded path
        self._pruned: set[str] = set()  # excluded folders (rel, real names), not listed again
        self._walkers: list[list[str]] = []  # folders walked by extra find processes (``find_listing``)
        self._racy: dict[str, tuple[FileStat, bytes | None]] = {}  # path -> stat and content hash when seen
        self.content_changed: set[str] = set()  # of the last pass: changed with the same stat (racy files)
        # Of the last pass: folders (recorded form + "/") made, moved in or swapped for another since the pass
        # before, not excluded; None where it cannot tell (every entry was decided again).
        self.arrived: set[str] | None = set()
        self._racy_ns = _RACY_NS
        # Passes that print only what changed (``_filtered``): where the file times come from this kernel's clock.
        self._children: dict[bytes, set[bytes]] = {}  # included folder (listed path) -> its included entries
        self._dir_ino: dict[bytes, int] = {}  # included folder -> its inode (a folder swapped for another)
        self._since: int | None = None  # when the last pass began (time.time_ns()); None: every pass is whole
        self._clock = 0  # time.time_ns() - time.monotonic_ns() then: a step of the clock shows here

    @classmethod
    def start(cls, root: str, rules: IgnoreRules) -> TreeScan | None:
        """A first pass (the baseline); None where ``find -printf`` is not at hand. A root that cannot be listed
        raises ``OSError``, as ``scan`` does."""
        if os.path.abspath(root) != rules.root:
            raise ValueError(f"these IgnoreRules were made for {rules.root!r}, not {root!r}")
        tree = cls(rules.root, rules)
        began, clock = _clock()
        try:
            listing = tree._list(FIRST_FORMAT)
        except NoFind:
            return None
        tokens = listing.split(b"\0")
        tree._rebuild(tokens)
        root_ctime = _ns(tokens[1].split(b" ")[2])
        sample = [root_ctime, *(info.ctime_ns for info in islice(tree.stats.values(), 100))]
        for unit in _COARSE_UNITS:  # a file system that keeps whole seconds (ext3, HFS+) or two (FAT), or coarser
            if not any(ns % unit for ns in sample):
                tree._racy_ns = unit + _RACY_NS
                break
        tree._note_racy(tree.stats, began)
        if local_times(tree.root):
            tree._since, tree._clock = began, clock
        return tree

    def rescan(self) -> dict[str, FileStat | None]:
        """Paths (recorded form) changed since the last pass, each with its stat before (None: it was not there,
        or was excluded); ``stats`` is brought up to date in place (a caller may hold it as its own cache). A racy
        file whose content changed is in it (and in ``content_changed``) with the stat it still has."""
        began, clock = _clock()
        self.arrived = set()
        if self._since is not None:
            if abs(clock - self._clock) > _STEP_NS:  # the clock was set (or the machine slept): a whole pass
                seen = self._recompute(began, ())
            else:
                seen = self._filtered(self._since - max(_SLACK_NS, self._racy_ns), began)  # (a coarse tick)
            self._since, self._clock = began, clock  # once the pass is done: a pass that failed moves nothing
            return seen
        new = self._list(FORMAT)
        old, self._raw = self._raw, new
        if new == old:
            return self._recheck_racy({}, began)
        start, old_end, new_end = changed_span(old, new)
        before = _pairs(old[start:old_end])
        after = _pairs(new[start:new_end])
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
                was_line = before.get(key, b"")
                if kind == b"d" and key != b"." and (was_line[:1] != b"d" or _ino(was_line) != _ino(after[key])):
                    if rules.excluded(_rel(key), is_dir=True):
                        if was_line[:1] != b"d":
                            hidden[key] = key
                            sizes[key] = 0
                    else:
                        self.arrived.add(quote_path(_rel(key)) + "/")  # made, moved in or swapped
                continue
            if path is None:
                rel = _rel(key)
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
                self._pruned.add(_rel(top))  # find lists it no more
        return self._recheck_racy(out, began)

    def _filtered(self, newer_ns: int, began: int) -> dict[str, FileStat | None]:
        """A pass that prints only the entries whose ctime is later than ``newer_ns`` (``workspace/changed_since.py``):
        each folder among them is listed again (what came, went or was swapped in it; a folder moved in keeps its
        files' ctimes, so it is walked whole), each file among them compared with its stat. O(changes) in Python."""
        tokens = self._list(FORMAT, newer_ns).split(b"\0")
        printed = dict(zip(tokens[0:-1:2], tokens[1:-1:2], strict=True))
        out: dict[str, FileStat | None] = {}
        done: set[bytes] = set()  # entries a folder's listing settled
        ignores: list[bytes] = []  # .gitignore files that came, went or changed
        for key, line in printed.items():
            if line[:1] == b"d" and key in self._children:
                self._relist(key, out, done, ignores)
        rules = self._rules
        hidden: dict[bytes, bytes] = {}  # folder printed, not known -> the outermost such folder above it
        sizes: dict[bytes, int] = {}  # that outermost folder -> its entries printed (its own line too)
        for key, line in printed.items():
            if key in done or key in self._children:
                continue
            path = self._names.get(key)
            if path is None:  # not seen by a listing of its folder: excluded, or inside an excluded folder
                parent = key.rpartition(b"/")[0]
                if parent in self._children:
                    if line[:1] == b"d":
                        hidden[key] = key
                        sizes[key] = sizes.get(key, 0) + 1
                    elif line[:1] in _TYPE_BITS and not rules.excluded(_rel(key), is_dir=False):
                        self._add(key, False, out, done, ignores)  # (made after its folder's listing)
                    continue
                top = hidden.get(parent)
                if top is None:  # its folders were not printed (made before the pass began): find the outermost
                    top = parent
                    while top.rpartition(b"/")[0] not in self._children and b"/" in top:
                        top = top.rpartition(b"/")[0]
                    hidden[parent] = top
                if line[:1] == b"d":
                    hidden[key] = top
                sizes[top] = sizes.get(top, 0) + 1
                continue
            if line[:1] == b"d":
                continue
            info = self.stats.get(path)
            if info is None or not _same(line, info):
                now = self._lstat(key)
                if now is None:
                    self._drop(key, out, ignores)
                elif now != info:
                    self.stats[path] = now
                    out.setdefault(path, info)
                    if key.endswith(b"/.gitignore"):
                        ignores.append(key)
        for top, size in sorted(sizes.items(), key=lambda item: -item[1]):
            if size >= _PRUNE_MIN and len(self._pruned) < _MAX_PRUNED and rules.excluded(_rel(top), is_dir=True):
                self._pruned.add(_rel(top))  # find lists it no more
        if ignores:  # the rules changed: every entry decided again (the stats before are those of ``out`` first)
            for path, was in self._recompute_stats(ignores).items():
                out.setdefault(path, was)
        for path in [p for p, was in out.items() if was == self.stats.get(p)]:
            del out[path]  # gone and back as it was (a folder swapped for one holding the same files)
        return self._recheck_racy(out, began)

    def _relist(self, folder: bytes, out: dict[str, FileStat | None], done: set[bytes], ignores: list[bytes]) -> None:
        """List a known folder again: entries gone, new or swapped (another inode, another type) since."""
        known = self._children[folder]
        try:
            with os.scandir(os.path.join(os.fsencode(self.root), folder)) as listing:
                entries = {folder + b"/" + entry.name: entry for entry in listing}
        except OSError:
            entries = {}  # gone, or not listable: what it held is left out (as find leaves it out)
        for key in known - entries.keys():
            self._drop(key, out, ignores)
        chain = self._rules._chain_for(_rel(folder))
        for key, entry in entries.items():
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                ino = entry.inode()
            except OSError:
                continue
            if key in known:
                if (is_dir and self._dir_ino.get(key) == ino) or (
                    not is_dir
                    and key in self._names
                    and (info := self.stats.get(self._names[key])) is not None
                    and info.ino == ino
                ):
                    continue  # the same entry (a file's content is compared from its printed line)
                self._drop(key, out, ignores)
            elif self._rules._leaf_excluded(chain, _rel(key), os.fsdecode(entry.name), is_dir):
                continue
            self._add(key, is_dir, out, done, ignores)

    def _drop(self, key: bytes, out: dict[str, FileStat | None], ignores: list[bytes]) -> None:
        """An entry gone (with everything below it, for a folder)."""
        todo = [key]
        while todo:
            here = todo.pop()
            todo.extend(self._children.pop(here, ()))
            self._dir_ino.pop(here, None)
            path = self._names.pop(here, None)
            if path is not None and (was := self.stats.pop(path, None)) is not None:
                out.setdefault(path, was)
            if here.endswith(b"/.gitignore"):
                ignores.append(here)
        siblings = self._children.get(key.rpartition(b"/")[0])
        if siblings is not None:
            siblings.discard(key)

    def _add(
        self, key: bytes, is_dir: bool, out: dict[str, FileStat | None], done: set[bytes], ignores: list[bytes]
    ) -> None:
        """A new entry, not excluded (a folder with everything below it that is not)."""
        rules = self._rules
        todo = [(key, is_dir)]
        while todo:
            here, folder = todo.pop()
            done.add(here)
            if here.endswith(b"/.gitignore"):
                ignores.append(here)
            rel = _rel(here)
            absolute = os.path.join(os.fsencode(self.root), here)
            if not folder:
                now = self._lstat(here)
                if now is None:
                    continue  # a fifo, a socket, or gone already
                path = self._names[here] = quote_path(rel)
                self._children.setdefault(here.rpartition(b"/")[0], set()).add(here)
                if now != (was := self.stats.get(path)):
                    self.stats[path] = now
                    out.setdefault(path, was)
                continue
            try:
                ino = os.lstat(absolute).st_ino
                with os.scandir(absolute) as listing:
                    entries = list(listing)
            except OSError:
                continue  # gone already, or not listable: left out, as find leaves it out
            self._children.setdefault(here.rpartition(b"/")[0], set()).add(here)
            self._children[here], self._dir_ino[here] = set(), ino
            if self.arrived is not None:
                self.arrived.add(quote_path(rel) + "/")
            chain = rules._chain_for(rel)
            for entry in entries:
                child = here + b"/" + entry.name
                try:
                    child_is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if not rules._leaf_excluded(chain, _rel(child), os.fsdecode(entry.name), child_is_dir):
                    todo.append((child, child_is_dir))

    # -- internals --

    def _list(self, form: str, newer_ns: int | None = None) -> bytes:
        """find's listing (``find_listing.run_find``): the root (``.``) and its line first, then each entry's
        path (``./REL``) and line, every one NUL-terminated."""
        store = self._rules._store_rel
        prune = [store, *sorted(self._pruned)] if store else sorted(self._pruned)
        return find_listing.run_find(self.root, form, prune, self._walkers, newer_ns)

    def _lstat(self, key: bytes) -> FileStat | None:
        try:
            info = os.lstat(os.path.join(self.root, os.fsdecode(key)))
        except OSError:
            return None
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return None
        return FileStat(info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_mode)

    def _rebuild_after(self, old: bytes, began: int) -> dict[str, FileStat | None]:
        """A .gitignore came, went or changed: every entry is decided again (as a full scan), from a listing
        with the times."""
        before_lines, now_lines = _pairs(old), _pairs(self._raw)
        changed = [key for key in before_lines.keys() | now_lines.keys() if before_lines.get(key) != now_lines.get(key)]
        return self._recompute(began, changed)

    def _recompute(self, began: int, changed: Iterable[bytes]) -> dict[str, FileStat | None]:
        return self._recheck_racy(self._recompute_stats(changed), began)

    def _recompute_stats(self, changed: Iterable[bytes]) -> dict[str, FileStat | None]:
        """Every entry decided again from a whole listing with the times (O(workspace) in Python, as a full scan),
        the rules of the folders whose .gitignore is among ``changed`` (listed paths) read again."""
        rules = self._rules
        self.arrived = None
        for key in changed:
            if key.rpartition(b"/")[2] == b".gitignore":
                rules._forget(_rel(key.rpartition(b"/")[0]))
        before = dict(self.stats)
        self._pruned = set()
        self._rebuild(self._list(FIRST_FORMAT).split(b"\0"))
        out: dict[str, FileStat | None] = {p: before[p] for p in before.keys() - self.stats.keys()}
        out.update((p, before.get(p)) for p, s in self.stats.items() if before.get(p) != s)
        return out

    def _rebuild(self, listing: list[bytes]) -> None:
        """Decide every entry (``listing``: a pass in the first pass's format, split at its NULs): in find's
        order, a folder comes before what it holds, so an excluded folder's entries are skipped by their parent.
        The walkers of the next passes are planned from what each folder holds."""
        rules = self._rules
        stats: dict[str, FileStat] = {}
        names: dict[bytes, str] = {}
        skipped: dict[str, str] = {}  # excluded folders -> the outermost of them
        sizes: dict[str, int] = {}
        chains: dict[str, _Chain] = {}
        excluded = rules._leaf_excluded
        kept = listing[:]
        held: dict[str, int] = {}  # folder (rel) -> entries directly in it
        children: dict[bytes, set[bytes]] = {b".": set()}
        dir_ino: dict[bytes, int] = {}
        subfolders: dict[str, list[str]] = {}
        for index in range(2, len(listing) - 1, 2):
            key, line = listing[index], listing[index + 1]
            head, _, mtime = line.rpartition(b" ")
            kept[index + 1] = head
            rel = _rel(key)
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
            held[parent] = held.get(parent, 0) + 1
            children.setdefault(key.rpartition(b"/")[0], set()).add(key)
            if kind == b"d":
                subfolders.setdefault(parent, []).append(rel)
                children.setdefault(key, set())
                dir_ino[key] = int(head.split(b" ")[3])
            bits = _TYPE_BITS.get(kind)
            if bits is None:
                continue
            _kind, size, ctime, ino, mode = head.split(b" ")
            path = names[key] = quote_path(rel)
            stats[path] = FileStat(int(size), _ns(mtime), _ns(ctime), int(ino), bits | int(mode, 8))
        kept[1] = listing[1].rpartition(b" ")[0]
        largest = sorted((-size, rel) for rel, size in sizes.items() if size >= _PRUNE_MIN)[:_MAX_PRUNED]
        self._raw, self._names, self._pruned = b"\0".join(kept), names, {rel for _size, rel in largest}
        self._children, self._dir_ino = children, dir_ino
        self._walkers = plan_walkers(_below(held, subfolders), subfolders, sum(held.values()), _WALKERS)
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


def _clock() -> tuple[int, int]:
    """The time (``time.time_ns``) and how far realtime is ahead of the monotonic clock, read close together (a
    thread preempted between the two reads would look like a step of the clock: read again)."""
    for _ in range(3):
        first = time.monotonic_ns()
        now = time.time_ns()
        last = time.monotonic_ns()
        if last - first < 1_000_000:
            break
    return now, now - (first + last) // 2


def _ino(line: bytes) -> bytes:
    """The inode field of a printed line (``find_listing.FORMAT``)."""
    return line.split(b" ")[3] if line else b""


def _same(line: bytes, info: FileStat) -> bool:
    """Whether a printed line (``find_listing.FORMAT``) says what ``info`` says."""
    kind, size, ctime, ino, mode = line.split(b" ")
    return (
        int(size) == info.size
        and _ns(ctime) == info.ctime_ns
        and int(ino) == info.ino
        and (_TYPE_BITS.get(kind, 0) | int(mode, 8)) == info.mode
    )


def _below(held: dict[str, int], subfolders: dict[str, list[str]]) -> dict[str, int]:
    """Entries below each folder, from the entries directly in each (subfolders listed after their parent)."""
    total = dict(held)
    for parent in sorted(subfolders, key=lambda rel: -rel.count("/") if rel else 1):  # deepest first, root last
        for sub in subfolders[parent]:
            if parent:
                total[parent] = total.get(parent, 0) + total.get(sub, 0)
    return total
