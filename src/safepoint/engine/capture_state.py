"""What a workspace capture keeps in the run's scratch folder for the next session: its saved state (the stat cache
and what is known of each file) and the journal of a command in flight (``engine/command_capture.py`` says what
each holds and when it is written).

Both name the workspace's files (and the journal the files a command line named), so on an encrypted store both
are sealed like every other part (``store/sealed.py``), bound to the run and to the file's role: a state copied
from another run, or a journal put in the state's place, does not open. A file that does not open (torn by a
crash, changed, another key) counts as none, as a torn one always did: the capture then takes what is there as
its baseline, which loses no user content (that was kept in the log when it was learnt).
"""

from __future__ import annotations

import contextlib
import os

import msgspec

from safepoint.durable import PRIVATE_FILE, atomic_write, fsync_dir, write_all
from safepoint.store.base import Store
from safepoint.store.crypt import Cipher, place
from safepoint.store.sealed import unwrap
from safepoint.workspace.scan import FileStat

STATE_FILE = "capture-state.msgpack"
JOURNAL_FILE = "capture-command.msgpack"  # what a command in flight started from (for a crash while it runs)

Known = tuple[str, int | None]


class SavedState(msgspec.Struct):
    stats: dict[str, FileStat]
    known: dict[str, Known]


class Journal(msgspec.Struct):
    """Written (durably) before a command's ``started``: the capture's state then, as a delta on the saved state
    (O(what changed since the last save)), and the ignored files its command line named."""

    call_id: str
    stats: dict[str, FileStat | None]
    known: dict[str, Known | None]
    named: dict[str, FileStat | None]
    head: str | None = None  # git's HEAD then: a clean tracked file's content before is HEAD's, if HEAD stayed
    # How many file changes the run had recorded then: the call's changes from there on are this attempt's (its
    # recovery is done); those before are an earlier attempt's, killed too, whose recovery says nothing of this
    # one. None: a journal written before it was kept (any change of the call counts, as it did then).
    patches_at: int | None = None


_encoder = msgspec.msgpack.Encoder()
_state_decoder = msgspec.msgpack.Decoder(SavedState)
_journal_decoder = msgspec.msgpack.Decoder(Journal)


class ScratchSeal:
    """Seals what the run keeps in its scratch folder when the store is encrypted (a no-op otherwise)."""

    def __init__(self, cipher: Cipher | None, run_id: str) -> None:
        self.cipher = cipher
        self.run_id = run_id

    @classmethod
    def of(cls, store: Store, run_id: str) -> ScratchSeal:
        return cls(unwrap(store)[1], run_id)

    def seal(self, role: str, data: bytes) -> bytes:
        if self.cipher is None:
            return data
        return self.cipher.seal(data, place(self.run_id, "scratch", role))

    def open(self, role: str, data: bytes) -> bytes | None:
        """The plain bytes, or None when a sealed store's file does not authenticate."""
        if self.cipher is None:
            return data
        return self.cipher.open(data, place(self.run_id, "scratch", role))


class CaptureStateFiles:
    """The two files, in ``state_dir``."""

    def __init__(self, state_dir: str, seal: ScratchSeal | None) -> None:
        self.state_path = os.path.join(state_dir, STATE_FILE)
        self.journal_path = os.path.join(state_dir, JOURNAL_FILE)
        self._seal = seal

    @staticmethod
    def has_journal(state_dir: str | None) -> bool:
        try:
            return state_dir is not None and os.path.getsize(os.path.join(state_dir, JOURNAL_FILE)) > 0
        except FileNotFoundError:
            return False

    def saved_exists(self) -> bool:
        return os.path.exists(self.state_path)

    def _read(self, path: str, role: str) -> bytes | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        return data if self._seal is None else self._seal.open(role, data)

    def _sealed(self, role: str, data: bytes) -> bytes:
        return data if self._seal is None else self._seal.seal(role, data)

    def read_saved(self) -> SavedState | None:
        data = self._read(self.state_path, "capture-state")
        try:
            return None if data is None else _state_decoder.decode(data)
        except msgspec.DecodeError:
            return None

    def read_journal(self) -> Journal | None:
        data = self._read(self.journal_path, "capture-journal")
        try:
            return None if not data else _journal_decoder.decode(data)
        except msgspec.DecodeError:
            return None

    def save(self, state: SavedState) -> None:
        # Durable: a crash while a command runs is recovered from it and the journal (a few fsyncs a minute).
        atomic_write(self.state_path, self._sealed("capture-state", _encoder.encode(state)), durable=True)

    def write_journal(self, journal: Journal) -> None:
        """Durable before `started` (recovery relies on it; the blobs it names are in `started`'s group): written
        in place and flushed with one fdatasync (the file stays: only its first creation costs a folder fsync). A
        journal torn by a crash does not decode, and counts as none."""
        data = self._sealed("capture-journal", _encoder.encode(journal))
        created = not os.path.exists(self.journal_path)
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
        try:
            write_all(fd, data)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(os.path.dirname(self.journal_path))

    def clear_journal(self) -> None:
        """The journal is spent (emptied, not removed: see ``write_journal``)."""
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.journal_path, 0)
