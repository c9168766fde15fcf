"""The agent's view of the workspace: paths confined to it, content read and written whole."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from typing import NoReturn

from safepoint.core.hashing import content_hash
from safepoint.durable import fsync_dir, make_private_dirs
from safepoint.errors import ToolFailure, WorkspaceError
from safepoint.workspace.names import real_path
from safepoint.workspace.staged import StagedWrites, fsync_all, fsync_folders

# A symlink is recorded as this mark plus its target, so one hash and one blob describe any path's state. A
# regular file whose bytes happen to start with a mark is recorded behind FILE_MARK, so it can never come back
# as a link.
SYMLINK_MARK = b"\x00safepoint-symlink\x00"
FILE_MARK = b"\x00safepoint-file\x00"

NAME_MAX = 255  # bytes in one path component on every filesystem people use (ext4, xfs, btrfs, apfs, ntfs)
PATH_MAX = 4096
# The user's configuration of safepoint at the workspace's root (case-folded): no tool writes it.
CONFIGURATION = frozenset({".safepoint", ".safepointignore"})
_SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}

# A replaced file held open by a batch (``StagedWrites.hold``): a path descriptor, which reads nothing.
_HOLD_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
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
        self._staged: StagedWrites | None = None  # the batch of writes under way (``staged_writes``)

    def for_run(self, scratch: str | None) -> Workspace:
        """The same workspace, staging its writes in a run's own scratch folder; leftovers there are removed."""
        if scratch is not None:
            make_private_dirs(scratch)  # under the store: private, whatever the umask
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
        rel = real_path(rel)  # a recorded (quoted) name is the real one on disk: workspace/names.py
        check_path(rel)
        joined = os.path.realpath(os.path.join(self.root, rel))
        if joined != self.root and not joined.startswith(self.root + os.sep):
            raise ToolFailure(f"path {rel!r} leads outside the workspace; only paths inside {self.root} are allowed")
        self._check_protected(rel, joined)
        return joined

    def _check_protected(self, rel: str, absolute: str) -> None:
        """Refuse the store and every repository's ``.git`` (the workspace's and nested ones): a hook or an
        fsmonitor written there runs the model's code the next time the user runs git. ``absolute`` is already
        normalised (and, for ``resolve``, has its links followed), so ``./.git/../.git/config`` and a link into
        ``.git`` are caught by the same test. Compared case-folded: on a case-insensitive filesystem ``.GIT`` is
        ``.git`` (on others refusing such a rare name costs nothing). Rejected: refusing only writes, which left
        ``read_file .git/config`` showing the credentials a remote URL holds."""
        folded = absolute.casefold()
        if self.protected:
            store = self.protected.casefold()
            if folded == store or folded.startswith(store + os.sep):
                raise ToolFailure(f"path {rel!r} is inside safepoint's store; tools may not touch it")
        if absolute.startswith(self.root + os.sep):
            inside = absolute[len(self.root) + 1 :]  # normalised already: a slice is relpath's answer, 10x cheaper
        else:
            inside = os.path.relpath(absolute, self.root) if absolute.startswith(self.root) else absolute
        if any(part == ".git" for part in inside.casefold().split(os.sep)):
            raise ToolFailure(
                f"path {rel!r} is inside a repository's .git folder; tools may not touch it (use git commands)"
            )

    def refuse_configuration(self, rel: str, absolute: str | None = None) -> None:
        """Refuse the user's own configuration of safepoint (``.safepoint/``: the command rules, the redaction
        patterns ...; ``.safepointignore``): written by the agent, it would loosen what holds or records the
        agent's next calls (``redact.toml`` matching ``*.py`` hid every later change to code from the record and
        from rollback). Only the tools' writes: reading it shows nothing secret, and rollback (``restore``) still
        puts back what an approved command changed there."""
        inside = os.path.relpath(absolute or self.resolve(rel), self.root).casefold().split(os.sep)
        if inside[0] in CONFIGURATION:
            raise ToolFailure(
                f"path {rel!r} is safepoint's own configuration ({inside[0]}); tools may not write it "
                "(the user edits it)"
            )

    def relative(self, rel: str) -> str:
        return os.path.relpath(self.resolve(rel), self.root)

    def locate(self, rel: str) -> str:
        """The absolute path of ``rel`` itself, not following a final symlink (for recording and restoring links)."""
        rel = real_path(rel)
        check_path(rel)
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

    @contextlib.contextmanager
    def staged_writes(self) -> Iterator[StagedWrites | None]:
        """A batch of writes (``workspace.staged``): contents staged with ``stage`` and made durable together by
        ``sync_staged`` are what ``restore`` renames into place for their paths, and every folder a rename
        changed is made durable together when the batch ends (before the caller records the writes as done).
        None where the scratch folder is missing or on another filesystem: each write is then durable on its own."""
        if self.scratch is None or os.stat(self.scratch).st_dev != os.stat(self.root).st_dev:
            yield None
            return
        staged = StagedWrites(self.scratch)
        self._staged = staged
        try:
            yield staged
        finally:
            self._staged = None
            staged.discard()  # staged and never placed: an action found done, or a conflict

            def opener(parts: tuple[str, ...]) -> int | None:
                try:
                    return self._open_parent("/".join(parts), [*parts, "."], create=False)
                except ToolFailure:
                    return None  # a link there now: the batch wrote nothing through it

            try:
                fsync_folders(self.root, staged.touched, opener)
            finally:
                staged.release()

    def stage(self, staged: StagedWrites, rel: str, data: bytes, mode: int) -> None:
        """Write ``rel``'s recorded content to a temp file of the batch, with its mode; not yet durable, not yet in
        place (``sync_staged``, then ``restore``). A symlink is not staged: it is made where it goes."""
        if data.startswith(SYMLINK_MARK):
            return
        tmp = f".safepoint-{secrets.token_hex(8)}.part"
        path = os.path.join(staged.scratch, tmp)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data.removeprefix(FILE_MARK) if data.startswith(FILE_MARK) else data)
                handle.flush()
                os.fchmod(handle.fileno(), mode)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        staged.staged[rel] = tmp

    @staticmethod
    def sync_staged(staged: StagedWrites) -> None:
        """Every staged content durable (one parallel pass), before the first of them is renamed into place."""
        fsync_all(os.path.join(staged.scratch, name) for name in staged.staged.values())

    def _place(self, staged: StagedWrites, tmp: str, parent: int, parts: list[str], rel: str) -> None:
        """Rename a staged (durable) content into place, atomically; the folder's fsync is left to the batch."""
        scratch = os.open(staged.scratch, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            with contextlib.suppress(OSError):  # nothing there (or not a file): nothing to hold
                staged.hold(os.open(parts[-1], _HOLD_FLAGS, dir_fd=parent))
            try:
                self._replace(tmp, scratch, parts[-1], parent, rel)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                # A folder on another filesystem (a mount inside the workspace): written there, on its own.
                with open(os.path.join(staged.scratch, tmp), "rb") as handle:
                    data, mode = handle.read(), os.fstat(handle.fileno()).st_mode & 0o7777
                os.unlink(tmp, dir_fd=scratch)
                self._write_at(parent, parts[-1], rel, data, mode)
                return
            staged.touched.add(tuple(parts[:-1]))
        finally:
            os.close(scratch)

    def restore(self, rel: str, data: bytes | None, mode: int | None) -> None:
        """Put a recorded form back: write (atomically), re-create a symlink, or remove (``data`` None).

        Never through a symlink: rollback and resolutions write where the record says, so every folder on the
        way is opened from the workspace root with ``O_NOFOLLOW | O_DIRECTORY`` and the last step acts on that
        descriptor (a folder swapped for a link in between is refused, never followed). A link on the way is a
        ``ToolFailure``; missing folders are created. Rejected: ``realpath`` of the parent, which put the user's
        ``src/keep.txt`` into whatever folder an agent's ``src`` link pointed at."""
        parts = self._parts(rel)
        parent = self._open_parent(rel, parts, create=data is not None)
        if parent is None:
            return  # a folder on the way is missing: there is nothing to remove
        name = parts[-1]
        try:
            if data is None:
                try:
                    os.unlink(name, dir_fd=parent)
                except FileNotFoundError:
                    return
                except (IsADirectoryError, PermissionError):
                    raise ToolFailure(f"{rel!r} is a folder now, not a file; it was left as it is") from None
                # No fsync of the folder: a removal lost to a power cut leaves the agent's file, which the next
                # rollback finds as the agent left it and removes again (an fsync per removal doubled a rollback).
                return
            if data.startswith(SYMLINK_MARK):
                tmp = f".safepoint-link-{os.getpid()}-{secrets.token_hex(6)}"
                os.symlink(os.fsdecode(data[len(SYMLINK_MARK) :]), tmp, dir_fd=parent)
                self._replace(tmp, parent, name, parent, rel)
                if self._staged is not None:
                    self._staged.touched.add(tuple(parts[:-1]))  # made durable with the batch's folders
                else:
                    os.fsync(parent)
                return
            staged = self._staged.take(rel) if self._staged is not None and mode is not None else None
            if staged is not None and self._staged is not None:
                self._place(self._staged, staged, parent, parts, rel)  # the batch staged these bytes, durable
                return
            self._write_at(
                parent, name, rel, data.removeprefix(FILE_MARK) if data.startswith(FILE_MARK) else data, mode
            )
        finally:
            os.close(parent)

    def remove_empty_folder(self, rel: str) -> bool:
        """Remove ``rel`` when it is an empty folder (reached without following links); False when it holds
        anything. Where a file or link comes back over a folder the rollback emptied."""
        parts = self._parts(rel)
        parent = self._open_parent(rel, parts, create=False)
        if parent is None:
            return True
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                return False
            raise ToolFailure(f"cannot remove the folder {rel!r}: {exc.strerror}") from None
        finally:
            os.close(parent)
        return True

    def link_parent(self, rel: str) -> str | None:
        """The nearest folder on the way to ``rel`` that is a symlink now (workspace-relative), or None: a path
        there belongs to the link, and nothing of safepoint's reads or writes it through the link."""
        parts = self._parts(rel)
        path = self.root
        for index, name in enumerate(parts[:-1]):
            path = os.path.join(path, name)
            try:
                info = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if stat.S_ISLNK(info.st_mode):
                return "/".join(parts[: index + 1])
            if not stat.S_ISDIR(info.st_mode):
                return None
        return None

    def _parts(self, rel: str) -> list[str]:
        real = real_path(rel)  # a recorded (quoted) name is the real one on disk: workspace/names.py
        check_path(real)
        normal = os.path.normpath(real)
        if os.path.isabs(normal) or normal in (".", "..") or normal.startswith("../"):
            raise ToolFailure(f"path {rel!r} leads outside the workspace; only paths inside {self.root} are allowed")
        self._check_protected(rel, os.path.join(self.root, normal))
        return normal.split("/")

    def _open_parent(self, rel: str, parts: list[str], *, create: bool) -> int | None:
        """A descriptor of ``rel``'s folder, reached from the root without following any link; None when a folder
        on the way is missing and ``create`` is False."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        for index, name in enumerate(parts[:-1]):
            try:
                try:
                    inner = os.open(name, flags, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)  # the umask applies, as for any folder the user makes
                    os.fsync(fd)  # the new folder durable before the file in it
                    inner = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    folder = "/".join(parts[: index + 1])
                    raise ToolFailure(
                        f"{folder!r} is a symlink or a file now, not a folder; {rel!r} is never written through it"
                    ) from None
                raise ToolFailure(f"cannot reach {rel!r}: {exc.strerror}") from None
            os.close(fd)
            fd = inner
        return fd

    def _write_at(self, parent: int, name: str, rel: str, data: bytes, mode: int | None) -> None:
        if mode is None:
            mode = 0o666 & ~_UMASK
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    mode = info.st_mode & 0o7777
        stage = parent
        if self.scratch is not None and os.stat(self.scratch).st_dev == os.fstat(parent).st_dev:
            stage = os.open(self.scratch, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        tmp = f".safepoint-{secrets.token_hex(8)}.part"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=stage)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fchmod(handle.fileno(), mode)
                    os.fsync(handle.fileno())  # durable before the ledger says the rollback succeeded
                self._replace(tmp, stage, name, parent, rel)
                os.fsync(parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=stage)
                raise
        finally:
            if stage != parent:
                os.close(stage)

    @staticmethod
    def _replace(tmp: str, tmp_dir: int, name: str, parent: int, rel: str) -> None:
        try:
            os.replace(tmp, name, src_dir_fd=tmp_dir, dst_dir_fd=parent)
        except (IsADirectoryError, OSError) as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=tmp_dir)
            if isinstance(exc, IsADirectoryError) or exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise ToolFailure(f"{rel!r} is a folder now, not a file; it was left as it is") from None
            raise

    def read(self, rel: str) -> bytes | None:
        """The file's content, or None when it does not exist."""
        return read_if_exists(self.resolve(rel))

    def read_head(self, rel: str, limit: int) -> tuple[bytes, int] | None:
        """The first ``limit`` bytes of the file and its whole size, or None when it does not exist: a model's
        ``read_file`` of a log of many gigabytes reads what it shows, not the whole file into memory."""
        fd = _open_regular(self.resolve(rel), follow=True)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read(limit), os.fstat(handle.fileno()).st_size

    def hash(self, rel: str) -> str | None:
        data = self.read(rel)
        return None if data is None else content_hash(data)

    def check_writable(self, rel: str) -> None:
        """Refuse, as ``write`` would, a path it could not write: the workspace itself, a folder, a special file,
        or a path through something that is not a folder. Checked before a change that writes several files."""
        path = self.resolve(rel)
        if path == self.root:
            raise ToolFailure(f"path {rel!r} is the workspace folder itself, not a file; name a file inside it")
        self.refuse_configuration(rel, path)
        with contextlib.suppress(FileNotFoundError):
            _writable(rel, path)
            return
        folder = os.path.dirname(path)
        while not os.path.lexists(folder):
            folder = os.path.dirname(folder)
        if not os.path.isdir(folder):
            raise ToolFailure(f"cannot write {rel!r}: a part of its path is not a folder")

    def write(self, rel: str, data: bytes, *, mode: int | None = None) -> None:
        """Replace the file atomically (temp + rename), creating parent folders; keeps an existing file's mode.

        Only a regular file (or nothing) is ever replaced: a folder, FIFO, socket or device at ``rel`` (or at the
        end of a link there) is refused in one line, as is any failure of the disk, never an ``OSError`` naming
        the store's temp file. Rejected: replacing a user's FIFO with a file, which rollback then removed."""
        path = self.resolve(rel)
        if path == self.root:
            raise ToolFailure(f"path {rel!r} is the workspace folder itself, not a file; name a file inside it")
        self.refuse_configuration(rel, path)
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise _write_failure(rel, exc, "a folder on its way cannot be created") from None
        if mode is None:
            mode = 0o666 & ~_UMASK
            with contextlib.suppress(FileNotFoundError):
                mode = _writable(rel, path) & 0o7777
        try:
            fd, tmp = tempfile.mkstemp(dir=self._staging_dir(directory), prefix=".safepoint-", suffix=".part")
        except OSError as exc:
            raise _write_failure(rel, exc) from None
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                # Durable before the ledger says the call succeeded: after a power loss the file holds what the
                # ledger says, so resume never blames the user for a write the disk had not kept.
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            with contextlib.suppress(FileNotFoundError):
                _writable(rel, path)  # again, just before the rename: a FIFO made meanwhile is not replaced
            os.replace(tmp, path)
            fsync_dir(directory)
        except BaseException as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise _write_failure(rel, exc) from None
            raise


def _writable(rel: str, path: str) -> int:
    """The mode of the regular file at ``path`` (links followed: ``resolve`` kept them inside the workspace);
    ``FileNotFoundError`` when nothing is there; a folder or a special file is refused."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a file on the way (ENOTDIR), a loop of links (ELOOP), no access
        raise _write_failure(rel, exc) from None
    if stat.S_ISREG(info.st_mode):
        return info.st_mode
    if stat.S_ISDIR(info.st_mode):
        raise ToolFailure(f"path {rel!r} is a folder, not a file; name a file inside it")
    kind = _SPECIAL.get(stat.S_IFMT(info.st_mode), "a special file")
    raise ToolFailure(
        f"path {rel!r} is {kind}, not a regular file; tools never replace or write through one (remove it "
        "yourself first if it should become a file)"
    )


def _write_failure(rel: str, exc: OSError, hint: str = "") -> ToolFailure:
    """A failed write in one line naming the workspace path (never the store's temp file) and what to do."""
    why = exc.strerror or str(exc)
    fixes = {
        errno.ENOSPC: "free some disk space",
        errno.EDQUOT: "free some disk space",
        errno.EACCES: "the user must grant write access",
        errno.EPERM: "the user must grant write access",
        errno.EROFS: "the filesystem is read-only",
        errno.ENOTDIR: "a part of its path is not a folder",
        errno.EEXIST: "a part of its path is not a folder",
        errno.EISDIR: "it is a folder; name a file inside it",
        errno.ENOTEMPTY: "it is a folder; name a file inside it",
    }
    fix = fixes.get(exc.errno or 0, hint or "check the path")
    return ToolFailure(f"cannot write {rel!r}: {why}; {fix}")


def check_path(rel: str) -> None:
    """Refuse, as the tool's failure, a path no filesystem would take: checked before anything is recorded for it,
    so a model's overlong name fails its call instead of crashing the run (and every resume of it)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise ToolFailure(f"path {rel!r} is empty or invalid")
    encoded = os.fsencode(rel)
    if len(encoded) > PATH_MAX:
        raise ToolFailure(f"path {rel[:60]!r}... is {len(encoded)} bytes, over the {PATH_MAX} a path may have")
    for name in encoded.split(b"/"):
        if len(name) > NAME_MAX:
            shown = os.fsdecode(name[:40])
            raise ToolFailure(
                f"path {rel[:60]!r}...: the name {shown!r}... is {len(name)} bytes, over the {NAME_MAX} a file name "
                "may have; use a shorter name"
            )


def _open_regular(path: str, *, follow: bool) -> int | None:
    """A read-only descriptor of the regular file at ``path``; None when absent or a folder. Opened without
    blocking and checked on the descriptor, so a FIFO or a device (even one swapped in after a check) is refused
    instead of blocking the run for ever."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        raise ToolFailure(f"{path!r} is a directory, not a file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise  # a symlink where none may be followed: the caller decides
        if exc.errno == errno.ENXIO:  # a socket, or a device with nothing behind it
            _refuse(path, stat.S_IFMT(os.stat(path).st_mode))
        raise ToolFailure(f"cannot read {path!r}: {exc.strerror}") from None
    kind = stat.S_IFMT(os.fstat(fd).st_mode)
    if kind == stat.S_IFREG:
        return fd
    os.close(fd)
    _refuse(path, kind)


def _refuse(path: str, kind: int) -> NoReturn:
    if kind == stat.S_IFDIR:
        raise ToolFailure(f"{path!r} is a directory, not a file")
    raise ToolFailure(f"{path!r} is {_SPECIAL.get(kind, 'a special file')}, not a regular file; tools read only files")


def _read_fd(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def read_if_exists(path: str) -> bytes | None:
    """A resolved path's content, or None when it does not exist. Refuses folders, FIFOs, sockets and devices."""
    fd = _open_regular(path, follow=True)
    return None if fd is None else _read_fd(fd)


def read_state(path: str) -> tuple[bytes | None, int | None]:
    """Content and permission bits of ``path`` without following a final symlink; (None, None) when absent.
    Only files and links are recorded: a folder, FIFO, socket or device counts as absent (and is never opened for
    reading, which could block for ever)."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        raise ToolFailure(f"cannot read {path!r}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        return SYMLINK_MARK + os.fsencode(os.readlink(path)), None
    if not stat.S_ISREG(info.st_mode):
        return None, None
    try:
        fd = _open_regular(path, follow=False)
    except ToolFailure:
        return None, None  # swapped for a folder or a FIFO since the lstat: not a file now
    except OSError as exc:  # swapped for a symlink since the lstat: record what is there now
        if exc.errno == errno.ELOOP:
            return SYMLINK_MARK + os.fsencode(os.readlink(path)), None
        raise ToolFailure(f"cannot read {path!r}: {exc.strerror}") from None
    if fd is None:
        return None, None
    mode = os.fstat(fd).st_mode & 0o7777
    data = _read_fd(fd)
    if data.startswith((SYMLINK_MARK, FILE_MARK)):
        data = FILE_MARK + data
    return data, mode
