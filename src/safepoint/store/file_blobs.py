"""The file store's blobs (``store.base.Blobs``): one file per blob, store-wide, named by its content.

::

    .agent-runtime/blobs/
    ├── sha256/ab/<64 hex>     a blob (``keyed/`` in an encrypted store: names that say nothing of the content)
    ├── quarantine/<name>      a damaged blob ``fsck --repair`` moved aside (kept for a person, never deleted)
    └── lock                   flock'd shared by a writer from its put to its log append, exclusively by gc

A blob is written to a temporary file in its folder, fsync'd, renamed into place, and the folder fsync'd (each
folder once per ``put_blobs``, however many blobs it gained or was given again: a blob stored again may be one
whose writer died before its folder's fsync): after a crash a blob is whole or absent, and a
temporary file left behind (a dot-name) is never listed and is removed by ``gc``. Two hex digits of fan-out keep
a folder to a few thousand entries at a million blobs. Rejected: a pack file of blobs (fewer inodes), whose
removal by gc means rewriting it; one file per blob is removed by an unlink.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence

from safepoint.core.blobs import check_name
from safepoint.durable import PRIVATE_FILE, fsync_dir, make_private_dirs, write_all
from safepoint.errors import CorruptRecordError, DiskFullError, StoreError, is_disk_full
from safepoint.store.base import BlobStat
from safepoint.store.file_blob_refs import FileBlobRefs
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT

BLOBS = "blobs"
QUARANTINE = "quarantine"


def flock_waiting(fd: int, mode: int, timeout: float, stuck: StoreError) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise stuck from None
            time.sleep(0.005)


class FileBlobs(FileBlobRefs):
    """The ``Blobs`` part over a folder; the file store mixes it in (``root``: the store's folder)."""

    root: str
    shown: str

    def _blob_root(self) -> str:
        return os.path.join(self.root, BLOBS)

    def _blob_path(self, name: str) -> str:
        scheme, _, digest = check_name(name).partition(":")
        return os.path.join(self.root, BLOBS, scheme, digest[:2], digest)

    def put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        try:
            return self._put_blobs(blobs)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            raise DiskFullError(
                f"no space left on the disk of store {self.shown} (writing blobs); nothing half-written was kept and "
                "nothing references what was: free space, then resume the run"
            ) from None

    def _put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        written = 0
        folders: set[str] = set()
        for name, data in blobs:
            path = self._blob_path(name)
            if _holds(path, data):
                # Its name is its content and the bytes there are these (compared, not only their length: a
                # damaged blob of the same length would be trusted, and the good copy in hand thrown away).
                os.utime(path)  # stored again: a reference to it is on its way (see blob_clock)
                # Its writer may have died between the rename and the folder's fsync: the name is made durable
                # before the reference on its way is.
                folders.add(os.path.dirname(path))
                continue
            # Absent, cut short or damaged (a crash leaves no partial blob under its name): written again over it,
            # atomically, so the new reference is to whole bytes.
            folder = os.path.dirname(path)
            if not os.path.isdir(folder):
                make_private_dirs(folder)
                folders.update((os.path.dirname(folder), os.path.dirname(os.path.dirname(folder)), self.root))
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")  # 0600
            try:
                write_all(fd, data)
                os.fdatasync(fd)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            os.close(fd)
            if os.path.isdir(path) and not os.path.islink(path):  # a folder where the blob goes: set aside first
                self.quarantine_blob(name)
            os.rename(tmp, path)
            folders.add(folder)
            written += len(data)
        for folder in sorted(folders, key=len, reverse=True):  # deepest first: a name before the folder holding it
            fsync_dir(folder)
        return written

    def get_blob(self, name: str) -> bytes | None:
        path = self._blob_path(name)
        try:
            # Not through a symlink: a blob's bytes are the store's own file, never one a link points at.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symlink (ELOOP) or something the store cannot open: damage, said as such
            raise CorruptRecordError(
                f"blob {name} is damaged: {path} cannot be read as a file ({exc.strerror})"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CorruptRecordError(f"blob {name} is damaged: {path} is not a regular file")
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def blob_clock(self) -> float:
        """The file system's own clock, read from a file touched now (the clock blob times are set by is the
        kernel's coarse one, which may lag ``time.time()`` by a tick)."""
        top = self._blob_root()
        make_private_dirs(top)
        path = os.path.join(top, "clock")
        with open(path, "ab"):
            pass
        os.utime(path)
        return os.stat(path).st_mtime

    def list_blobs(self) -> dict[str, BlobStat]:
        found: dict[str, BlobStat] = {}
        top = self._blob_root()
        for scheme in _names(top):
            if scheme in (QUARANTINE, "lock", "clock"):
                continue
            for shard in _names(os.path.join(top, scheme)):
                folder = os.path.join(top, scheme, shard)
                for entry in _entries(folder):
                    if not entry.name.startswith("."):
                        with contextlib.suppress(FileNotFoundError):
                            # Its own stat, not a link's target's: gc sizes and ages what it would remove.
                            found_stat = entry.stat(follow_symlinks=False)
                            found[f"{scheme}:{entry.name}"] = BlobStat(found_stat.st_size, found_stat.st_mtime)
        return found

    def delete_blobs(self, names: Sequence[str]) -> int:
        freed = 0
        folders: set[str] = set()
        for name in names:
            path = self._blob_path(name)
            try:
                found = os.lstat(path)
                if stat.S_ISDIR(found.st_mode):  # not a blob the store wrote: set aside, never removed
                    self.quarantine_blob(name)
                    continue
                os.unlink(path)
            except FileNotFoundError:
                continue
            freed += found.st_size
            folders.add(os.path.dirname(path))
        for folder in folders:
            fsync_dir(folder)
        return freed

    def sweep_blob_temporaries(self) -> int:
        """Remove temporary files of blob writes a crash cut short; only inside ``blobs_exclusive``."""
        swept = 0
        top = self._blob_root()
        for scheme in _names(top):
            for shard in _names(os.path.join(top, scheme)):
                for entry in _entries(os.path.join(top, scheme, shard)):
                    if entry.name.startswith(".tmp-"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                            swept += 1
        return swept

    def quarantine_blob(self, name: str) -> bool:
        path = self._blob_path(name)
        if not os.path.lexists(path):
            return False
        aside = os.path.join(self._blob_root(), QUARANTINE)
        make_private_dirs(aside)
        # Each damaged copy kept: a second one of the same content (stored again, damaged again) goes beside the
        # first, not over it (rename replaces its target).
        target = os.path.join(aside, name.replace(":", "-"))
        number = 1
        while os.path.lexists(target):
            number += 1
            target = os.path.join(aside, f"{name.replace(':', '-')}.{number}")
        os.rename(path, target)
        fsync_dir(aside)
        fsync_dir(os.path.dirname(path))
        return True

    @contextlib.contextmanager
    def _blob_lock(self, mode: int, stuck: StoreError) -> Iterator[None]:
        top = self._blob_root()
        if not os.path.isdir(top):
            make_private_dirs(top)
        # A descriptor of its own per holder: flock excludes open files, so two threads of this process exclude
        # each other as two processes do.
        fd = os.open(os.path.join(top, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            flock_waiting(fd, mode, CLAIM_LOCK_TIMEOUT, stuck)
            yield
        finally:
            os.close(fd)  # lets the lock go

    def blobs_shared(self) -> contextlib.AbstractContextManager[None]:
        return self._blob_lock(
            fcntl.LOCK_SH,
            StoreError(
                f"store {self.shown}: `safepoint gc` holds the blobs' lock and does not let go (stopped?); "
                "end it, then resume the run"
            ),
        )

    def blobs_exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self._blob_lock(
            fcntl.LOCK_EX,
            StoreError(
                f"store {self.shown}: a writer holds the blobs' lock between storing a blob and its log record and "
                "does not let go (stopped with SIGSTOP?); end it or try gc again later"
            ),
        )


def _holds(path: str, data: bytes) -> bool:
    """Whether the file at ``path`` is a regular file holding exactly ``data`` (read only when its length matches;
    a symlink or a folder there never holds a blob)."""
    try:
        found = os.lstat(path)
        if not stat.S_ISREG(found.st_mode) or found.st_size != len(data):
            return False
        with open(path, "rb") as handle:
            return handle.read() == data
    except FileNotFoundError:
        return False


def _names(folder: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(folder) if not name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as found:
            return list(found)
    except (FileNotFoundError, NotADirectoryError):
        return []
