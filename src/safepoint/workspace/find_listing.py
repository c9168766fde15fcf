"""One pass of GNU ``find -printf`` over a workspace, split over parallel processes, and where two passes differ.

:class:`~safepoint.workspace.tree_scan.TreeScan` asks for a listing per pass: every entry's path and one line of its
``lstat`` (``FORMAT``), NUL-separated (a name may hold a newline or any byte but NUL). The walk and every ``lstat``
run in C; this module adds no Python per entry:

* **Parallel walkers.** A pass is one ``lstat`` per file, in the kernel, single-threaded in one ``find`` (git stats
  its index in threads, ``core.preloadIndex``). :func:`plan_walkers` picks a few large folders, from the previous
  pass's counts, for extra ``find`` processes to walk (``-mindepth 1`` from each); the main one walks the rest,
  printing those folders' own lines but not entering them. The outputs join in a fixed order (main first), so a
  tree that did not change gives the same bytes. A folder made since the plan is the main walker's: nothing is
  left unlisted. Each ``-path`` test costs the main walker one test per entry, so few folders are handed out.
* **Memory files, not pipes.** Each process writes into its own memory file (``memfd``; an unlinked temporary
  file elsewhere), read once when it exits: a pipe made Python wake on every 4 KB ``find`` wrote (750 wake-ups and
  context switches a pass at 50,000 files, CPU a loaded machine does not have).
* **The C locale.** find matches its ``-name``/``-path`` tests per entry; in a UTF-8 locale glibc's ``fnmatch``
  decodes every name first (10 % of a pass's CPU here). Paths print as the bytes they are either way.
* **Bytes compared, not lines.** :func:`changed_span` compares two passes' outputs as bytes (C ``memcmp`` in 64 KB
  chunks, then a binary search), and only the span between the first and the last difference, widened to whole
  entries, is split and looked at in Python: a pass with no change costs one comparison.

Paths print as ``./REL`` (``%p``: a start point other than ``.`` is named that way, which also keeps a name
starting with ``-`` or ``(`` from being read as part of the expression); the root is ``.``.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import subprocess
import tempfile
from collections.abc import Iterable

__all__ = ["FIRST_FORMAT", "FORMAT", "NoFind", "changed_span", "plan_walkers", "run_find"]

# Each entry: its path, then type, size, ctime, inode, permission bits. Any change of a file's content, mode or
# names moves its ctime (utime too, which may set mtime back); mtime is read by the lstat of what changed. %C@
# prints the nanoseconds exactly (no float). The first pass adds mtime at the end, to make the baseline without a
# second lstat of every file.
FORMAT = r"%p\0%y %s %C@ %i %m\0"
FIRST_FORMAT = r"%p\0%y %s %C@ %i %m %T@\0"
SPLIT_MIN = 8000  # entries below which one process walks it all (a process costs 1-3 ms to start)
MAX_STARTS = 6  # folders handed out in all: each is a -path test per entry for the main walker
_CHUNK = 1 << 16


class NoFind(Exception):
    """``find -printf`` is not at hand (not GNU find): the caller scans in Python."""


def glob_escape(rel: str) -> str:
    return "".join("\\" + c if c in "\\*?[" else c for c in rel)


def plan_walkers(counts: dict[str, int], children: dict[str, list[str]], total: int, walkers: int) -> list[list[str]]:
    """Folders (rel, real names) for ``walkers`` extra processes, each group near ``total / (walkers + 1)``
    entries. ``counts``: entries below each folder (itself not counted); ``children``: each folder's subfolders
    ("" the root). Largest first; a folder too large for any group is split into its subfolders."""
    if walkers < 1 or total < SPLIT_MIN:
        return []
    share = total / (walkers + 1)
    groups: list[list[str]] = [[] for _ in range(walkers)]
    loads = [0] * walkers
    frontier = [(-counts.get(rel, 0), rel) for rel in children.get("", ())]
    heapq.heapify(frontier)
    starts = 0
    while frontier and starts < MAX_STARTS:
        negative, rel = heapq.heappop(frontier)
        size = -negative
        if size < share / 20:
            break  # the rest is too small to be worth a test per entry
        lightest = loads.index(min(loads))
        if loads[lightest] + size <= share * 1.15:
            groups[lightest].append(rel)
            loads[lightest] += size
            starts += 1
        else:
            for sub in children.get(rel, ()):
                heapq.heappush(frontier, (-counts.get(sub, 0), sub))
    return [group for group in groups if group]


def run_find(
    root: str, form: str, prune: Iterable[str], walkers: list[list[str]], newer_ns: int | None = None
) -> bytes:
    """The listing of ``root``: the root's own entry (``.``) first, then every entry below it, skipping folders
    named ``.git`` and the folders ``prune`` names (rel, real names), each path then its line (``form``), all
    NUL-terminated. ``newer_ns``: only the entries whose ctime is later (every entry is still walked and stat'ed,
    but the others are not printed; the root too). Raises :class:`NoFind` where ``find -printf`` is missing or not
    GNU's, and ``OSError`` for a root that cannot be listed."""
    skip = ["-name", ".git"]
    for rel in prune:
        skip += ["-o", "-path", "./" + glob_escape(rel)]
    show = ["-printf", form]
    if newer_ns is not None:
        seconds, fraction = divmod(newer_ns, 1_000_000_000)
        show = ["-newerct", f"@{seconds}.{fraction:09d}", *show]
    handed = [rel for group in walkers for rel in group]
    main = ["find", ".", "(", *skip, ")", "-prune", "-o"]
    if handed:
        tests = ["-path", "./" + glob_escape(handed[0])]
        for rel in handed[1:]:
            tests += ["-o", "-path", "./" + glob_escape(rel)]
        main += ["(", *tests, ")", "-prune", *show, "-o"]
    main += show
    commands = [main]
    for group in walkers:
        commands.append(["find", *("./" + rel for rel in group), "-mindepth", "1", "(", *skip, ")", "-prune", "-o"])
        commands[-1] += show
    outputs, statuses, errors = _run_all(root, commands)
    if any(code < 0 for code in statuses):  # killed: its listing is cut short, and what it left out is not gone
        raise OSError(f"find was stopped by signal {-min(statuses)} while listing {root}")
    status = statuses[0]
    if status != 0 and not outputs[0]:
        os.listdir(root)  # a root that cannot be listed raises here
        if newer_ns is None:  # (a filtered pass may print nothing: find -printf was known to work then)
            raise NoFind(errors.decode(errors="replace"))
    listing = b"".join(outputs)
    whole = listing.startswith(b".\0") or (newer_ns is not None and (not listing or listing.startswith(b"./")))
    if not whole or (listing and not listing.endswith(b"\0")) or listing.count(b"\0") % 2:
        raise NoFind("find -printf is not GNU find's")
    return listing


def _memory_file() -> int:
    with contextlib.suppress(AttributeError, OSError):
        return os.memfd_create("safepoint-find", os.MFD_CLOEXEC)
    handle, path = tempfile.mkstemp(prefix="safepoint-find-")
    os.unlink(path)
    return handle


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    parts = []
    while chunk := os.read(fd, 1 << 24):
        parts.append(chunk)
    return b"".join(parts)


def _run_all(root: str, commands: list[list[str]]) -> tuple[list[bytes], list[int], bytes]:
    """Run the commands at once, each into its own memory file: their outputs and exit statuses, and the first
    one's error output."""
    fds: list[int] = []
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "LC_ALL": "C"}
    errors = _memory_file()
    try:
        for command in commands:
            fds.append(_memory_file())
            try:
                procs.append(
                    subprocess.Popen(
                        command,
                        cwd=root,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=fds[-1],
                        stderr=errors if not procs else subprocess.DEVNULL,
                    )
                )
            except (FileNotFoundError, PermissionError) as exc:
                if not os.path.isdir(root):
                    raise  # no workspace is not an empty workspace
                raise NoFind(str(exc)) from exc
        statuses = [proc.wait() for proc in procs]
        return [_read_all(fd) for fd in fds], statuses, _read_all(errors)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for fd in (*fds, errors):
            os.close(fd)


# --- where two passes differ ----------------------------------------------------------------------------------------


def _common_prefix(a: bytes, b: bytes) -> int:
    limit = min(len(a), len(b))
    lo = 0
    while lo < limit:
        hi = min(lo + _CHUNK, limit)
        if a[lo:hi] == b[lo:hi]:
            lo = hi
            continue
        while hi - lo > 1:  # a[lo:hi] holds the first difference
            mid = (lo + hi) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                hi = mid
        return lo
    return limit


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """How many last bytes ``a`` and ``b`` share, at most ``limit``."""
    la, lb = len(a), len(b)
    lo = 0
    while lo < limit:
        hi = min(lo + _CHUNK, limit)
        if a[la - hi : la - lo] == b[lb - hi : lb - lo]:
            lo = hi
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
                lo = mid
            else:
                hi = mid
        return lo
    return limit


def changed_span(old: bytes, new: bytes) -> tuple[int, int, int]:
    """Where two listings differ, on entry boundaries: ``new[start:new_end]`` against ``old[start:old_end]``.
    Before and after the span the bytes are the same entries (find lists a tree in the same order while nothing
    changes); two changes far apart make the span long, never wrong."""
    prefix = _common_prefix(old, new)
    # the entry holding byte ``prefix`` starts after an even number of NULs (path, line; path, line; ...)
    start = old.rfind(b"\0", 0, prefix) + 1
    if old.count(b"\0", 0, prefix) % 2:
        start = old.rfind(b"\0", 0, start - 1) + 1
    suffix = _common_suffix(old, new, min(len(old), len(new)) - start)
    end = len(old) - suffix  # the first entry start at or after ``end``: both listings end with a NUL
    nuls = old.count(b"\0", end)
    while not ((end == 0 or old[end - 1] == 0) and nuls % 2 == 0):
        end = old.index(b"\0", end) + 1
        nuls -= 1
    return start, end, len(new) - (len(old) - end)
