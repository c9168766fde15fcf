"""The file store's record that it is encrypted at rest: ``encryption.json`` at the store's root, holding the
cipher and the key id (never the key), one framed line written once before anything else. The sealing itself is
``safepoint.store.sealed``'s, for every backend; a backend only keeps this record and answers whether it holds
anything yet.

Two processes making one new store, one with a key and one without, must not leave half a store encrypted. Each
writes first and looks second: the keyed one links the record into place and then looks for an unencrypted run
(and takes its record back if there is one); the keyless one puts its run in place and then looks for the record
(and takes its run back if there is one, ``FileStore.create_run``). Whichever looks last sees the other's write,
so at least one of them backs out.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

from safepoint.durable import fsync_dir, make_private_dirs, write_all
from safepoint.errors import CorruptRecordError
from safepoint.store.crypt import is_sealed
from safepoint.store.framing import check_line, frame

ENCRYPTION = "encryption.json"


class EncryptionRecordFile:
    """The record's hooks of ``safepoint.store.base.Store``, for a store kept in files (mixed into ``FileStore``)."""

    root: str
    url: str
    _runs: str
    _schedules: str

    def encryption_record(self) -> bytes | None:
        path = os.path.join(self.root, ENCRYPTION)
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        payload = check_line(raw.rstrip(b"\n"))
        if payload is None:
            raise CorruptRecordError(
                f"the encryption record of store {self.url} ({path}) fails its checksum; restore it from a backup"
            )
        return payload

    def record_encryption(self, data: bytes) -> None:
        """Linked into place, never renamed over: of two processes making one store with two keys, the first
        one's record stays and the second reads it back (and is refused)."""
        path = os.path.join(self.root, ENCRYPTION)
        make_private_dirs(self.root)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".part")
        try:
            try:
                write_all(fd, frame(data))
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
                ours = True
            except FileExistsError:
                ours = False
        finally:
            os.unlink(tmp)
        fsync_dir(self.root)
        if ours and self._holds_plain():  # a keyless process made a run meanwhile: the store stays unencrypted
            os.unlink(path)
            fsync_dir(self.root)

    def _holds_plain(self) -> bool:
        """Whether a run or schedule was written without encryption (read only while recording encryption)."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            found += [os.path.join(self._runs, name, "run.json") for name in os.listdir(self._runs)]
        with contextlib.suppress(FileNotFoundError):
            found += [os.path.join(self._schedules, name) for name in os.listdir(self._schedules)]
        for path in found:
            if os.path.basename(os.path.dirname(path)).startswith(".") or os.path.basename(path).startswith("."):
                continue  # a run being created, a write in flight
            with contextlib.suppress(FileNotFoundError, NotADirectoryError), open(path, "rb") as handle:
                if not is_sealed(handle.read()[9:]):
                    return True
        return False

    def first_run_header(self) -> tuple[str, bytes] | None:
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self._runs):  # any one run: listing them all in order would stat every header
                if name.startswith("."):
                    continue
                with (
                    contextlib.suppress(OSError),  # gone, or unreadable (a folder, EACCES): another run tells
                    open(os.path.join(self._runs, name, "run.json"), "rb") as f,
                ):
                    payload = check_line(f.read().rstrip(b"\n"))
                    if payload is not None:
                        return name, payload
        return None

    def holds_runs(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            if any(not name.startswith(".") for name in os.listdir(self._runs)):
                return True
        with contextlib.suppress(FileNotFoundError):
            return any(name.endswith(".json") and not name.startswith(".") for name in os.listdir(self._schedules))
        return False
