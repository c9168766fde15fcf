"""When a pass of the scan fallback may print only what changed: file times that come from this kernel's clock.

Every change that matters to a capture moves a ctime, and no program can set a ctime (only the clock can): a
write, a truncation, a chmod or utime (even one that sets mtime back) moves the file's; a file made, removed or
renamed moves its folder's. So where the ctimes come from this machine's clock, a pass only needs to print the
entries whose ctime is later than the last pass began (``find -newerct``: every entry is still stat'ed, in C, but
not formatted, not copied, not compared in Python), and to list again the folders among them
(:meth:`~safepoint.workspace.tree_scan.TreeScan._filtered`).

That holds on local file systems. It does not where the times come from another clock: a network file system
(the server's), FUSE and virtual machine shares (the host's), a FAT volume (no change time at all); nor across a
step of the clock itself. :func:`local_times` says whether every file system at or below a root is a local one
(``/proc/self/mountinfo``); the caller checks the clock at each pass (``STEP_NS``). Elsewhere every pass prints
the whole listing and compares it (as before).
"""

from __future__ import annotations

import os
import re

__all__ = ["SLACK_NS", "STEP_NS", "local_times"]

# Printed: the entries whose ctime is later than the last pass's start minus this. A file time comes from a coarse
# clock (up to a tick behind the fine one) and the realtime clock is slewed by NTP (at most 0.5 ms a second): two
# seconds cover both with room to spare; what it prints again (the changes of the last seconds) costs little.
SLACK_NS = 2_000_000_000
# A change of (realtime - monotonic) between two passes larger than this: the clock was set, or the machine slept;
# that pass is a whole one.
STEP_NS = 100_000_000
# File systems whose times come from this kernel's clock. Overlay (containers) stacks local ones.
_LOCAL = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "bcachefs", "jfs", "reiserfs", "overlay"}
)
_ESCAPE = re.compile(rb"\\([0-7]{3})")


def local_times(root: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether the file system holding ``root`` and every one mounted below it is local (see the module's
    docstring). False where it cannot be told (not Linux, no /proc)."""
    try:
        with open(mountinfo, "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return False
    real = os.fsencode(os.path.realpath(root))
    holder: tuple[int, bytes] | None = None  # (length of its mount point, type) of the mount holding root
    for line in lines:
        fields = line.split(b" ")
        try:
            point = _ESCAPE.sub(lambda m: bytes([int(m[1], 8)]), fields[4])
            kind = fields[fields.index(b"-", 6) + 1]
        except (IndexError, ValueError):
            return False
        if real == point or real.startswith(point.rstrip(b"/") + b"/"):
            if holder is None or len(point) >= holder[0]:  # the longest; a later line is mounted over an earlier
                holder = (len(point), kind)
        elif point.startswith(real + b"/") and kind.decode(errors="replace") not in _LOCAL:
            return False  # a share mounted inside the workspace
    return holder is not None and holder[1].decode(errors="replace") in _LOCAL
