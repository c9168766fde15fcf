"""The few file operations durability rests on: atomic replace and fsync'd append.

Everything they create is private: files 0600 and folders 0700, given when the file is created (``mkstemp`` and
``os.open``'s mode), never a chmod afterwards that leaves a moment where another user could open it. The store
holds copies of the user's files and the agent's whole conversation."""

from __future__ import annotations

import contextlib
import os
import tempfile

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def make_private_dirs(path: str) -> None:
    """``os.makedirs`` with every folder it creates private (``makedirs`` gives ``mode`` to the last one only)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_private_dirs(parent)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, PRIVATE_DIR)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, durable: bool = True) -> None:
    """Write-to-temp, fsync, rename over ``path``, fsync the directory: readers see old or new, never half."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)


def append_fd(path: str) -> int:
    """An fd for appending; the caller fsyncs it (``os.fdatasync``) when the group must be durable."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)


def write_private(path: str, data: bytes) -> None:
    """A small note written in place (not atomic, not fsync'd: its readers tolerate a torn one), created 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
