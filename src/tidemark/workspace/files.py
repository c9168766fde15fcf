"""The agent's view of the workspace: paths confined to it, content read and written whole."""

from __future__ import annotations

import contextlib
import os
import tempfile

from tidemark.core.hashing import content_hash
from tidemark.errors import ToolFailure, WorkspaceError

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once: new files get the mode the user's umask gives, not mkstemp's 0600


class Workspace:
    """``scratch`` is where writes are staged before their atomic rename: a folder the run owns, so a temp file
    left by a crash is swept there instead of littering the user's tree (same filesystem required, else the
    temp file goes beside its target)."""

    def __init__(self, root: str, scratch: str | None = None) -> None:
        if not os.path.isdir(root):
            raise WorkspaceError(f"workspace {root!r} is not a directory; create it or pass an existing --workspace")
        self.root = os.path.realpath(root)
        self.scratch = scratch

    def for_run(self, scratch: str | None) -> Workspace:
        """The same workspace, staging its writes in a run's own scratch folder; leftovers there are removed."""
        if scratch is not None:
            os.makedirs(scratch, exist_ok=True)
            for name in os.listdir(scratch):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(scratch, name))
        return Workspace(self.root, scratch)

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
        return joined

    def relative(self, rel: str) -> str:
        return os.path.relpath(self.resolve(rel), self.root)

    def read(self, rel: str) -> bytes | None:
        """The file's content, or None when it does not exist."""
        return read_if_exists(self.resolve(rel))

    def hash(self, rel: str) -> str | None:
        data = self.read(rel)
        return None if data is None else content_hash(data)

    def write(self, rel: str, data: bytes) -> None:
        """Replace the file atomically (temp + rename), creating parent folders; keeps an existing file's mode."""
        path = self.resolve(rel)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        mode = 0o666 & ~_UMASK
        with contextlib.suppress(FileNotFoundError):
            mode = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(dir=self._staging_dir(directory), prefix=".tidemark-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
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
