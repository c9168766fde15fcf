"""The agent's view of the workspace: paths confined to it, content read and written whole."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from safepoint.core.hashing import content_hash
from safepoint.durable import fsync_dir
from safepoint.errors import ToolFailure, WorkspaceError

# A symlink is recorded as this mark plus its target, so one hash and one blob describe any path's state. A
# regular file whose bytes happen to start with a mark is recorded behind FILE_MARK, so it can never come back
# as a link.
SYMLINK_MARK = b"\x00safepoint-symlink\x00"
FILE_MARK = b"\x00safepoint-file\x00"

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once: new files get the mode the user's umask gives, not mkstemp's 0600


class Workspace:
    """``scratch`` is where writes are staged before their atomic rename: a folder the run owns, so a temp file
    left by a crash is swept there instead of littering the user's tree (same filesystem required, else the
    temp file goes beside its target)."""

    def __init__(
        self,
        root: str,
        scratch: str | None = None,
        *,
        exclude: tuple[str, ...] = (),
        protected: str | None = None,
    ) -> None:
        if not os.path.isdir(root):
            raise WorkspaceError(f"workspace {root!r} is not a directory; create it or pass an existing --workspace")
        self.root = os.path.realpath(root)
        self.scratch = scratch
        self.exclude = exclude  # gitignore-style patterns no capture of command changes looks at
        self.protected = os.path.realpath(protected) if protected else None  # the store: no tool writes there

    def for_run(self, scratch: str | None) -> Workspace:
        """The same workspace, staging its writes in a run's own scratch folder; leftovers there are removed."""
        if scratch is not None:
            os.makedirs(scratch, exist_ok=True)
            for name in os.listdir(scratch):
                if name.startswith(".safepoint-"):  # writes a crash interrupted; other notes belong to others
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(scratch, name))
        return Workspace(self.root, scratch, exclude=self.exclude, protected=self.protected)

    def _staging_dir(self, directory: str) -> str:
        if self.scratch is not None and os.stat(self.scratch).st_dev == os.stat(directory).st_dev:
            return self.scratch
        return directory

    def resolve(self, rel: str) -> str:
        """An absolute path inside the workspace. Symlinks are resolved and must stay inside."""
        if not rel or "\x00" in rel:
            raise ToolFailure(f"path {rel!r} is empty or invalid")
        joined = os.path.realpath(os.path.join(self.root, rel))
        if joined != self.root and not joined.startswith(self.root + os.sep):
            raise ToolFailure(f"path {rel!r} leads outside the workspace; only paths inside {self.root} are allowed")
        self._check_protected(rel, joined)
        return joined

    def _check_protected(self, rel: str, absolute: str) -> None:
        if self.protected and (absolute == self.protected or absolute.startswith(self.protected + os.sep)):
            raise ToolFailure(f"path {rel!r} is inside safepoint's store; tools may not touch it")

    def relative(self, rel: str) -> str:
        return os.path.relpath(self.resolve(rel), self.root)

    def locate(self, rel: str) -> str:
        """The absolute path of ``rel`` itself, not following a final symlink (for recording and restoring links)."""
        if not rel or "\x00" in rel:
            raise ToolFailure(f"path {rel!r} is empty or invalid")
        parent = os.path.realpath(os.path.join(self.root, os.path.dirname(rel) or "."))
        if parent != self.root and not parent.startswith(self.root + os.sep):
            raise ToolFailure(f"path {rel!r} leads outside the workspace; only paths inside {self.root} are allowed")
        name = os.path.basename(rel)
        if name in ("", ".", ".."):
            raise ToolFailure(f"path {rel!r} names no file")
        self._check_protected(rel, os.path.join(parent, name))
        return os.path.join(parent, name)

    def snapshot(self, rel: str) -> tuple[bytes | None, int | None]:
        """A path's recorded form: content (a symlink's is its encoded target, never followed) and mode bits."""
        return read_state(self.locate(rel))

    def restore(self, rel: str, data: bytes | None, mode: int | None) -> None:
        """Put a recorded form back: write (atomically), re-create a symlink, or remove (``data`` None)."""
        path = self.locate(rel)
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        if data.startswith(SYMLINK_MARK):
            directory = os.path.dirname(path)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(self._staging_dir(directory), f".safepoint-link-{os.getpid()}-{id(data)}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.symlink(os.fsdecode(data[len(SYMLINK_MARK) :]), tmp)
            os.replace(tmp, path)
            return
        if os.path.islink(path):
            os.unlink(path)  # never write through a link: replace the link itself
        self.write(rel, data.removeprefix(FILE_MARK) if data.startswith(FILE_MARK) else data, mode=mode)

    def read(self, rel: str) -> bytes | None:
        """The file's content, or None when it does not exist."""
        return read_if_exists(self.resolve(rel))

    def hash(self, rel: str) -> str | None:
        data = self.read(rel)
        return None if data is None else content_hash(data)

    def write(self, rel: str, data: bytes, *, mode: int | None = None) -> None:
        """Replace the file atomically (temp + rename), creating parent folders; keeps an existing file's mode."""
        path = self.resolve(rel)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        if mode is None:
            mode = 0o666 & ~_UMASK
            with contextlib.suppress(FileNotFoundError):
                mode = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(dir=self._staging_dir(directory), prefix=".safepoint-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                # Durable before the ledger says the call succeeded: after a power loss the file holds what the
                # ledger says, so resume never blames the user for a write the disk had not kept.
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
            fsync_dir(directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def read_if_exists(path: str) -> bytes | None:
    """A resolved path's content, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ToolFailure(f"{path!r} is a directory, not a file") from None


def read_state(path: str) -> tuple[bytes | None, int | None]:
    """Content and permission bits of ``path`` without following a final symlink; (None, None) when absent.
    A directory counts as absent: only files and links are recorded."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    if stat.S_ISLNK(info.st_mode):
        return SYMLINK_MARK + os.fsencode(os.readlink(path)), None
    if not stat.S_ISREG(info.st_mode):
        return None, None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None, None
    if data.startswith((SYMLINK_MARK, FILE_MARK)):
        data = FILE_MARK + data
    return data, info.st_mode & 0o7777
