"""The file store's root is the user's own, private folder, or it is refused (as ssh refuses a loose key file).

A repository can ship ``.agent-runtime`` as a symlink (git keeps them) into a folder others share: the store (the
user's files, exact) would be written there, and another user could rename ``runs/`` and put forged runs, records
or approvals in its place. So the root and its two top folders must be real folders, owned by this user and
writable by nobody else; one that is only readable by others (made by an older safepoint under the umask) is made
private, since it is ours. Rejected: following the link and chmod-ing its target (it may be a folder others rely on).
"""

from __future__ import annotations

import os
import stat

from safepoint.durable import PRIVATE_DIR
from safepoint.errors import StoreError


def check_store_root(root: str) -> None:
    """Raise ``StoreError`` (one line: the folder and the fix) unless ``root`` and its ``runs``/``schedules`` are
    private folders of this user. Folders that do not exist yet pass: safepoint creates them 0700."""
    for path in (root, os.path.join(root, "runs"), os.path.join(root, "schedules")):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(found.st_mode):
            target = os.path.realpath(path)
            raise StoreError(
                f"store folder {path} is a symbolic link (to {target}); safepoint does not follow it, as the store "
                f"would leave the workspace: remove the link, or name a private folder of yours with --store file:PATH"
            )
        if not stat.S_ISDIR(found.st_mode):
            raise StoreError(f"store folder {path} is not a folder; move it away or pick another --store")
        if found.st_uid != os.geteuid():
            raise StoreError(
                f"store folder {path} belongs to user id {found.st_uid}, not to you ({os.geteuid()}): its records "
                "could be anyone's; use a store of your own (--store file:PATH)"
            )
        mode = stat.S_IMODE(found.st_mode)
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise StoreError(
                f"store folder {path} is writable by others (mode {mode:04o}): runs or approvals may have been planted "
                f"in it; check what it holds, then `chmod go-rwx {path}`"
            )
        if mode & 0o077:
            os.chmod(path, PRIVATE_DIR)  # readable by others only (an older store, or a chmod -R a+rX): ours to close
