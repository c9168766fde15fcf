"""The embedded default store: plain files under ``.agent-runtime/``, the seed's layout (§8.10).

::

    .agent-runtime/
    ├── runs/<run_id>/
    │   ├── run.json                 the run's header (atomic write)
    │   ├── owner.json               the recovery owner (seed 003 §1.1) and its holder (atomic write)
    │   ├── lock                     flock'd for the few microseconds of each append or claim
    │   ├── ledger.jsonl             the run's ordered log: ledger entries, file patches, messages, checkpoints
    │   ├── checkpoints/index.jsonl  the separate checkpoint index: seq and byte offset of each checkpoint
    │   ├── summary.json             what `status` shows, stamped with the log's end (a cache: see read_summary)
    │   ├── restart_checkpoint.json  the run's one restart checkpoint (seed 003 §1.2; atomic write, framed)
    │   ├── terminal_events.jsonl    terminal events (seed 003 §1.3; fsync'd appends, unique per key)
    │   ├── control.jsonl            what people send the run (fsync'd appends, no claim needed)
    │   ├── control.lock             flock'd by each control post (not the run's lock: see post_control)
    │   ├── artifacts/               large tool outputs and blobs, one file each (atomic write)
    │   ├── tmp/                     the run's workspace writes in flight (swept when the run is claimed)
    │   └── trace.jsonl              trace events (not fsync'd: recovery never reads them)
    ├── blobs/                       content-addressed blobs, store-wide (``safepoint.store.file_blobs``)
    ├── schedules/<job_id>.json      scheduled jobs, store-wide (atomic write, framed)
    └── encryption.json              only in an encrypted store: its cipher and key id (never the key), written
                                     once, before anything else (see ``safepoint.store.sealed``)

Fencing: every write takes the run's lock, compares the writer's generation with ``owner.json`` and refuses a
stale one. A lock held for a whole run (the obvious alternative) would let a SIGSTOP'd owner block a takeover
forever; a short lock per append cannot.

Only what is particular to files lives here: ownership and the fenced writes are ``FencedStore``'s, this module
supplies its critical section (the flock above, ``owner.json``) and the raw writes.

An append in flight and a crash's torn tail look the same to a reader (a last line without its end); the log's
own flock tells them apart: the writer holds it exclusively from its first byte to its fsync, so a reader that
takes it shared and still sees the tail without its end knows no writer is finishing it. (The alternative, reading
again a little later, guesses: an fsync slower than the guess under load reads as damage.)

Every file holds framed lines (``safepoint.store.framing``); a whole-file record (header, owner, restart
checkpoint, schedule) is one framed line, so a torn or bit-flipped one is detected like a log record.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import msgspec

from safepoint.durable import (
    PRIVATE_DIR,
    PRIVATE_FILE,
    append_fd,
    atomic_write,
    fsync_dir,
    make_private_dirs,
    write_all,
)
from safepoint.errors import (
    CorruptRecordError,
    DiskFullError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
    is_disk_full,
)
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, LogProblem, LogRead, LogRecord, OwnerState, StoredDescriptor
from safepoint.store import trace_batches
from safepoint.store.crypt import check_key, read_marker
from safepoint.store.fenced import FencedStore
from safepoint.store.file_blobs import FileBlobs
from safepoint.store.file_encryption import EncryptionRecordFile
from safepoint.store.file_log_reads import FileLogReads
from safepoint.store.file_schedules import FileSchedules
from safepoint.store.file_summary import SummaryFile, last_intact_seq
from safepoint.store.framing import check_line, check_one_line, frame, read_descriptor, read_framed, unframe_all
from safepoint.store.names import check_run_id
from safepoint.store.ownership import CLAIM_LOCK_TIMEOUT, event_key, now, stuck_lock
from safepoint.store.private_root import check_store_root
from safepoint.store.read_errors import unreadable as _unreadable

_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(LogRecord)
_owner_decoder = msgspec.json.Decoder(OwnerState)
_event_decoder = msgspec.json.Decoder(RecoveryOwnerTerminalEvent)
LOG = "ledger.jsonl"
RESTART_CHECKPOINT = "restart_checkpoint.json"
TERMINAL_EVENTS = "terminal_events.jsonl"
CONTROL = "control.jsonl"
DELETED_PREFIX = ".deleted-"  # a deleted run's folder, renamed aside until it is removed
_INDEXED_KINDS = frozenset({"checkpoint"})
APPEND_WAIT_TIMEOUT = CLAIM_LOCK_TIMEOUT  # a reader waits this long for an append in flight to finish


def flock_within(fd: int, mode: int, timeout: float | None, stuck: Callable[[], StoreError]) -> None:
    """Take a flock (``LOCK_EX`` or ``LOCK_SH``), waiting at most ``timeout`` seconds (None: for ever). It waits only
    while another holder has it; a holder stopped inside its section would keep it for ever, so past the timeout it
    raises ``stuck()``."""
    if timeout is None:
        fcntl.flock(fd, mode)
        return
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)  # the common case: nobody holds it
        return
    except BlockingIOError:
        deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise stuck() from None
            time.sleep(0.005)


class _Tail:
    """What this process knows of a log's end, so appends need not re-read the file."""

    __slots__ = ("next_seq", "size")

    def __init__(self, next_seq: int, size: int) -> None:
        self.next_seq = next_seq
        self.size = size


class FileStore(FileBlobs, FileLogReads, FileSchedules, EncryptionRecordFile, SummaryFile, FencedStore[None]):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = f"file:{self.root}"
        self.shown = self.url
        self._runs = os.path.join(self.root, "runs")  # made by the first create_run: reading never creates a store
        self._schedules = os.path.join(self.root, "schedules")
        self._tails: dict[tuple[str, int], _Tail] = {}
        self._log_fds: dict[str, int] = {}
        self._lock_fds: dict[str, int] = {}
        self._thread_lock = threading.RLock()
        self._index_fds: dict[str, int] = {}
        self._trace_fds: dict[str, int] = {}
        self._summary_fds: dict[str, int] = {}
        self._owners: dict[str, tuple[int, tuple[int, int, int], OwnerState]] = {}  # run id -> fd, version, owner
        self._root_checked = False  # the root is checked once per handle, before its first write or claim

    # paths ------------------------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> str:
        return os.path.join(self._runs, check_run_id(run_id))

    def _path(self, run_id: str, *parts: str) -> str:
        return os.path.join(self.run_dir(run_id), *parts)

    def _existing_run_dir(self, run_id: str) -> str:
        path = self.run_dir(run_id)
        if not os.path.exists(os.path.join(path, "run.json")):
            raise RunNotFoundError(f"run {run_id!r} not found in store {self.url}; list runs with `safepoint status`")
        return path

    # runs -------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, header: bytes) -> None:
        """Build the run's folder under a temporary name, then rename it into place: a crash half-way leaves
        an invisible ``.new-*`` folder, never a half-made run that blocks its own id."""
        again = "start the run again (it was not created)"
        with self.disk_full_said(run_id, then=again):
            self._make_root()
        path = self.run_dir(run_id)
        if os.path.exists(path):
            raise RunExistsError(f"run {run_id!r} already exists in {self.url}; pick another --run-id")
        with self.disk_full_said(run_id, then=again):
            staging = tempfile.mkdtemp(dir=self._runs, prefix=f".new-{run_id}-")  # mkdtemp: 0700 already
        with self.disk_full_said(run_id, then=again), _removed_on_failure(staging):
            for folder in ("checkpoints", "artifacts", "tmp"):
                os.mkdir(os.path.join(staging, folder), PRIVATE_DIR)
            os.close(append_fd(os.path.join(staging, LOG)))
            atomic_write(os.path.join(staging, "run.json"), frame(header))
        try:
            os.rename(staging, path)  # fails if another process created the run meanwhile
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            raise RunExistsError(f"run {run_id!r} already exists in {self.url}; pick another --run-id") from None
        fsync_dir(self._runs)
        if not self.sealed and (marker := self.encryption_record()) is not None:
            # Made encrypted by another process while this one, without a key, created its run: back out.
            shutil.rmtree(path, ignore_errors=True)
            fsync_dir(self._runs)
            check_key(read_marker(marker, self.shown), None, self.shown)

    def local_dir(self) -> str | None:
        return self.root

    def _check_root(self) -> None:
        if not self._root_checked:
            check_store_root(self.root)  # a symlink, someone else's or a group/world-writable root is refused
            self._root_checked = True

    def _make_root(self) -> None:
        self._check_root()
        make_private_dirs(self._runs)
        ignore = os.path.join(self.root, ".gitignore")
        if not os.path.exists(ignore):  # the store holds copies of the user's files: never commit it by accident
            # atomic (its temporary file is 0600, as mkstemp makes it): a disk full half-way must not leave an
            # empty file that the check above takes for done
            atomic_write(ignore, b"# safepoint's store: not for version control\n*\n")

    def scratch_dir(self, run_id: str) -> str | None:
        return self._path(run_id, "tmp")

    def run_header(self, run_id: str) -> bytes:
        path = os.path.join(self._existing_run_dir(run_id), "run.json")
        try:
            with open(path, "rb") as handle:
                payload = check_line(handle.read().rstrip(b"\n"))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _unreadable(run_id, exc) from None
        if payload is None:
            raise CorruptRecordError(f"header of run {run_id!r} ({path}) fails its checksum; the run cannot be read")
        return payload

    def list_runs(self) -> list[str]:
        found = []
        if not os.path.isdir(self._runs):
            return []
        for name in os.listdir(self._runs):
            if name.startswith("."):
                continue  # a run being created (or whose creation was interrupted): not a run yet
            header = os.path.join(self._runs, name, "run.json")
            with contextlib.suppress(FileNotFoundError):
                found.append((os.stat(header).st_mtime_ns, name))
        return [name for _, name in sorted(found)]

    # ownership --------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(
        self, run_id: str, *, timeout: float | None = None, name: str = "lock", stuck: StoreError | None = None
    ) -> Iterator[None]:
        # A flock excludes other processes only; threads of this one (a session's heartbeat while a tool runs)
        # take turns on this lock first.
        with (
            self._thread_lock,
            self._flocked(run_id, timeout=timeout, name=name, stuck=stuck),
            self.disk_full_said(run_id),
        ):
            yield

    @contextlib.contextmanager
    def _flocked(self, run_id: str, *, timeout: float | None, name: str, stuck: StoreError | None) -> Iterator[None]:
        key = run_id if name == "lock" else f"{run_id}/{name}"
        fd = self._lock_fds.get(key)
        if fd is None:
            fd = os.open(self._path(run_id, name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
            self._lock_fds[key] = fd
        flock_within(fd, fcntl.LOCK_EX, timeout, lambda: stuck or stuck_lock(run_id))
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def owner(self, run_id: str) -> OwnerState | None:
        path = self._path(run_id, "owner.json")
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _unreadable(run_id, exc) from None
        payload = check_line(raw.rstrip(b"\n"))
        if payload is None:
            raise CorruptRecordError(f"owner record of run {run_id!r} ({path}) fails its checksum")
        return _owner_decoder.decode(payload)

    def _current_owner(self, run_id: str) -> OwnerState | None:
        """The owner record as a write's critical section checks it: decoded once per version of ``owner.json``,
        then re-checked with one ``stat`` (it was opened, read and decoded on every append: a fifth of a call's
        Python time). A version is known by its inode, size and time, and its file is kept open while it is
        cached: every write of the record puts a new file in place (``atomic_write``), and the number of an inode
        held open is never given to another file, so a new record is never taken for the cached one (rejected: a
        cache keyed on the inode alone, whose number a closed file gives back within one clock tick and lets a
        fenced-off writer through). Only the runs this handle writes are cached (``owner`` reads afresh: a
        ``status`` of thousands of runs must not hold a file open per run)."""
        path = self._path(run_id, "owner.json")
        with self._thread_lock:
            cached = self._owners.get(run_id)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                self._forget_owner(run_id)
                return None
            if cached is not None and cached[1] == (st.st_ino, st.st_size, st.st_mtime_ns):
                return cached[2]
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                self._forget_owner(run_id)
                return None
            try:
                held = os.fstat(fd)
                raw = os.pread(fd, held.st_size + 1, 0)
                payload = check_line(raw.rstrip(b"\n"))
                if payload is None:
                    raise CorruptRecordError(f"owner record of run {run_id!r} ({path}) fails its checksum")
                state = _owner_decoder.decode(payload)
            except BaseException:
                os.close(fd)
                raise
            self._forget_owner(run_id)
            self._owners[run_id] = (fd, (held.st_ino, held.st_size, held.st_mtime_ns), state)
            return state

    def _forget_owner(self, run_id: str) -> None:
        cached = self._owners.pop(run_id, None)
        if cached is not None:
            os.close(cached[0])

    # the critical section FencedStore builds on ---------------------------------------------------------------
    @contextlib.contextmanager
    def _owner_section(
        self, run_id: str, *, claiming: bool = False, durable: bool = True
    ) -> Iterator[tuple[None, OwnerState | None]]:
        if claiming:
            self._check_root()
            self._existing_run_dir(run_id)
        with self._locked(run_id, timeout=CLAIM_LOCK_TIMEOUT if claiming else None):
            if claiming:
                self._existing_run_dir(run_id)  # deleted while this process waited for the lock
            yield None, self._current_owner(run_id)

    def _removed(self, run_id: str) -> StoreError | None:
        if os.path.exists(os.path.join(self.run_dir(run_id), "run.json")):
            return None
        return StoreError(
            f"run {run_id!r}: its store {self.run_dir(run_id)} was removed while the run was open (a command deleted "
            "it); the run stopped and nothing more is recorded: start a new run, and keep commands away from the store"
        )

    def _delete_run_txn(self, handle: None, run_id: str) -> None:
        """One rename takes the whole run out of sight (``list_runs`` skips dot-names) and frees its id; the
        folder is removed after the lock is let go, and a crash before that leaves a ``.deleted-*`` folder that the
        next delete or ``gc`` sweeps. Rejected: removing file by file in place, which a crash would leave half-done
        under the run's id (a run without its header, or a log without its owner)."""
        aside = tempfile.mkdtemp(dir=self._runs, prefix=f"{DELETED_PREFIX}{run_id}-")
        os.rename(self.run_dir(run_id), os.path.join(aside, run_id))
        fsync_dir(self._runs)

    def _after_delete(self, run_id: str) -> None:
        self._drop_handles(run_id)
        self.sweep_deleted()

    def sweep_deleted(self) -> int:
        """Remove what deleted runs left renamed aside; how many folders went."""
        swept = 0
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self._runs):
                if name.startswith(DELETED_PREFIX):
                    shutil.rmtree(os.path.join(self._runs, name), ignore_errors=True)
                    swept += 1
        return swept

    def _write_owner_txn(self, handle: None, run_id: str, state: OwnerState) -> None:
        atomic_write(self._path(run_id, "owner.json"), frame(_record_encoder.encode(state)))

    def release(self, claim: Claim) -> None:
        try:
            super().release(claim)
        finally:
            self._drop_handles(claim.run_id)

    # the log ----------------------------------------------------------------------------------------------
    def _fd(self, table: dict[str, int], run_id: str, *parts: str) -> int:
        """An append fd kept open per run: opening a file per append would cost more than the write."""
        fd = table.get(run_id)
        if fd is None:
            try:
                fd = append_fd(self._path(run_id, *parts))
            except FileNotFoundError:
                raise self._removed(run_id) or RunNotFoundError(
                    f"run {run_id!r} not found in store {self.url}"
                ) from None
            table[run_id] = fd
        return fd

    def _tail(self, claim: Claim) -> _Tail:
        key = (claim.run_id, claim.generation)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._repair_tail(claim.run_id)
            self._tails[key] = tail
        return tail

    def _log_size(self, claim: Claim) -> int:
        return self._tail(claim).size

    def _repair_tail(self, run_id: str) -> _Tail:
        """Move a torn tail aside (kept in ``ledger.jsonl.torn``, never deleted) so appends start clean, and find
        the last record's seq. Only the log's end is read (rejected: decoding the whole log, which made the first
        append of a resumed 50,000-call run cost a second): a torn tail is the bytes after the last newline, and
        the last seq is that of the last record that passes its checksum. Damage further back is the readers' to
        report (``read_log``, ``fsck``), as it always was: an append never repaired it."""
        path = self._path(run_id, LOG)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below, before the truncation
        except FileNotFoundError:
            return _Tail(1, 0)
        with handle:
            size = os.fstat(handle.fileno()).st_size
            end, last_seq = last_intact_seq(handle.fileno(), size)
        if end < size:
            with open(path, "rb") as handle:
                handle.seek(end)
                self._quarantine(run_id, handle.read())
            os.truncate(path, end)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return _Tail(last_seq + 1, end)

    def _quarantine(self, run_id: str, data: bytes, name: str = LOG) -> None:
        fd = append_fd(self._path(run_id, f"{name}.torn"))
        try:
            write_all(fd, frame(b'{"quarantined_at":"%s","bytes":%d}' % (now().encode(), len(data))) + data + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.run_dir(run_id))  # the quarantine file must outlive the truncation that follows

    def _log_end_txn(self, handle: None, claim: Claim) -> int:
        return self._tail(claim).next_seq - 1

    def _append_txn(self, handle: None, claim: Claim, records: Sequence[LogRecord], *, durable: bool) -> None:
        tail = self._tail(claim)
        lines = []
        index_lines = []
        offset = tail.size
        for record in records:
            line = frame(_record_encoder.encode(record))
            if record.kind in _INDEXED_KINDS:
                index_lines.append(frame(b'{"seq":%d,"offset":%d}' % (record.seq, offset)))
            offset += len(line)
            lines.append(line)
        fd = self._fd(self._log_fds, claim.run_id, LOG)
        # Exclusive from the first byte to the fsync: a reader meeting a tail without its end waits on this. A
        # reader holds it shared only while it reads the file again, but one stopped right then would hold it for
        # ever: the append waits a bounded time and says so rather than hang the run.
        flock_within(fd, fcntl.LOCK_EX, APPEND_WAIT_TIMEOUT, lambda: _stuck_reader(claim.run_id))
        try:
            write_all(fd, b"".join(lines))
            if durable:
                os.fdatasync(fd)
        except OSError:
            # A disk full half-way: cut the group back to the last whole record, so nothing half-written is left
            # for the next open to trip on (the group was never acknowledged).
            with contextlib.suppress(OSError):
                os.ftruncate(fd, tail.size)
            raise
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        tail.size = offset
        tail.next_seq = records[-1].seq + 1
        if index_lines:
            # The index only speeds look-ups and every entry is checked against the log when read
            # (checkpoint_offsets), so it needs no fsync of its own.
            index_fd = self._fd(self._index_fds, claim.run_id, "checkpoints", "index.jsonl")
            index_size = os.fstat(index_fd).st_size  # one call per checkpoint group, not per record
            try:
                write_all(index_fd, b"".join(index_lines))
            except OSError:
                # A disk full half-way: a torn entry would swallow the next one appended after it; `fsck --repair`
                # restores the entries the log calls for.
                with contextlib.suppress(OSError):
                    os.ftruncate(index_fd, index_size)
                raise

    def read_log(self, run_id: str) -> LogRead:
        path = os.path.join(self._existing_run_dir(run_id), LOG)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - kept open across the lock below
        except FileNotFoundError:
            return LogRead(records=[], problems=[])
        except OSError as exc:
            raise _unreadable(run_id, exc) from None
        with handle:
            data = handle.read()
            if data and not data.endswith(b"\n"):
                # A writer mid-append holds the log exclusively; once it is ours to share, a tail still without
                # its end is a crash's torn record, not a write in flight.
                flock_within(handle.fileno(), fcntl.LOCK_SH, APPEND_WAIT_TIMEOUT, lambda: _stuck_writer(run_id))
                try:
                    handle.seek(0)
                    data = handle.read()
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return read_framed(data)  # (``read_records(unframe_all(data))`` in one pass: the same records and problems)

    # line files other than the log: terminal events, control ----------------------------------------------
    def _append_line(self, run_id: str, name: str, payload: bytes) -> None:
        """Append one framed line durably, under the lock that serializes this file's writers, after
        ``_complete_lines`` has cut off any torn tail."""
        path = self._path(run_id, name)
        created = not os.path.exists(path)
        fd = append_fd(path)
        try:
            write_all(fd, frame(payload))
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.run_dir(run_id))  # the new file's name must outlive a crash too

    def _complete_lines(self, run_id: str, name: str) -> bytes:
        """The file's complete lines, its torn tail (a writer killed mid-append) moved to ``<name>.torn`` and cut
        off: a line appended after it would be glued to the torn bytes and lost with them. Only under the file's
        lock: a writer holding it may be mid-line, and a reader must not cut what a live writer is finishing."""
        path = self._path(run_id, name)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return b""
        end = data.rfind(b"\n") + 1
        if end < len(data):
            self._quarantine(run_id, data[end:], name)
            os.truncate(path, end)
            fd = os.open(path, os.O_WRONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return data[:end]

    # the restart checkpoint -------------------------------------------------------------------------------
    def _put_restart_checkpoint_txn(self, handle: None, run_id: str, data: bytes) -> None:
        atomic_write(self._path(run_id, RESTART_CHECKPOINT), frame(data))

    def read_restart_checkpoint(self, run_id: str) -> StoredDescriptor | None:
        path = os.path.join(self._existing_run_dir(run_id), RESTART_CHECKPOINT)
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _unreadable(run_id, exc) from None
        return read_descriptor(raw)

    def _delete_restart_checkpoint_txn(self, handle: None, run_id: str) -> None:
        try:
            os.unlink(self._path(run_id, RESTART_CHECKPOINT))
        except FileNotFoundError:
            return
        fsync_dir(self.run_dir(run_id))

    def list_restart_checkpoints(self) -> list[str]:
        return [name for name in self.list_runs() if os.path.exists(os.path.join(self._runs, name, RESTART_CHECKPOINT))]

    # terminal events --------------------------------------------------------------------------------------
    def _add_terminal_event_txn(self, handle: None, run_id: str, event: RecoveryOwnerTerminalEvent) -> bool:
        key = event_key(event)
        if any(event_key(known) == key for known in self._events(run_id, complete=True)):
            return False
        self._append_line(run_id, TERMINAL_EVENTS, _record_encoder.encode(event))
        return True

    def terminal_events(self, run_id: str) -> list[RecoveryOwnerTerminalEvent]:
        self._existing_run_dir(run_id)
        return self._events(run_id, complete=False)

    def _events(self, run_id: str, *, complete: bool) -> list[RecoveryOwnerTerminalEvent]:
        """The run's terminal events (``complete``: under the run's lock, a torn tail cut off first). A damaged
        line is an error, not a skip: it may be the very event asked about, and "at most once" would break."""
        path = self._path(run_id, TERMINAL_EVENTS)
        if complete:
            data = self._complete_lines(run_id, TERMINAL_EVENTS)
        else:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except FileNotFoundError:
                return []
        events = []
        for _, item in unframe_all(data):
            if isinstance(item, LogProblem):
                if item.kind == "torn":
                    continue  # a record being appended right now, or never finished: not yet an event
                raise CorruptRecordError(
                    f"terminal events of run {run_id!r} ({path}) hold a line that fails its checksum at byte "
                    f"{item.position}; restore the file or remove that line by hand"
                )
            events.append(_event_decoder.decode(item))
        return events

    # the control channel ----------------------------------------------------------------------------------
    def post_control(self, run_id: str, data: bytes, *, after: int | None = None) -> int:
        """Under ``control.lock``, not the run's lock: a sender must get through while the owner is stopped (a
        cancel is wanted most then), and control posts need ordering only among themselves.

        Each line carries its position (``<position> <data>``), as each log record carries its seq: a damaged
        line, even one whose newline was hit, never shifts the positions after it, which the owner records as
        seen. A torn tail was never acknowledged, so its position is given to the next post."""
        check_one_line("a control record", data)
        self._existing_run_dir(run_id)
        stuck = StoreError(
            f"run {run_id!r}: another process holds the control lock in the middle of a post and does not let go "
            "(stopped with SIGSTOP?); end that process and post again"
        )
        with self._locked(run_id, timeout=CLAIM_LOCK_TIMEOUT, name="control.lock", stuck=stuck):
            lines = self._complete_lines(run_id, CONTROL)
            last = max((position for position, _ in _control_records(lines)), default=0)
            if after is not None and last != after:
                return 0  # a record came since the caller read: nothing posted (see Store.post_control)
            position = max(last, lines.count(b"\n")) + 1  # the count covers a damaged last line
            self._append_line(run_id, CONTROL, b"%d %s" % (position, data))
        return position

    def read_control(self, run_id: str) -> list[tuple[int, bytes]]:
        path = os.path.join(self._existing_run_dir(run_id), CONTROL)
        try:
            with open(path, "rb") as handle:
                return _control_records(handle.read())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _unreadable(run_id, exc) from None

    # artifacts and trace ----------------------------------------------------------------------------------
    def _put_artifact_txn(self, handle: None, run_id: str, filename: str, digest: str, data: bytes) -> None:
        path = self._path(run_id, "artifacts", filename)
        if not os.path.exists(path):  # the name holds the digest: a file there holds these bytes already
            atomic_write(path, data)

    def _artifact_bytes(self, run_id: str, filename: str) -> bytes | None:
        path = os.path.join(self._existing_run_dir(run_id), "artifacts", os.path.basename(filename))
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        stored = trace_batches.pack(lines)  # a batch as one compressed line
        write_all(self._fd(self._trace_fds, run_id, "trace.jsonl"), b"".join(frame(line) for line in stored))

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        path = os.path.join(self._existing_run_dir(run_id), "trace.jsonl")
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return
        for _, item in unframe_all(data):
            if not isinstance(item, LogProblem):
                yield from trace_batches.unpack(item)

    # handles ----------------------------------------------------------------------------------------------
    def _drop_handles(self, run_id: str) -> None:
        for table in (self._log_fds, self._lock_fds, self._index_fds, self._trace_fds, self._summary_fds):
            fd = table.pop(run_id, None)
            if fd is not None:
                os.close(fd)
        fd = self._lock_fds.pop(f"{run_id}/control.lock", None)
        if fd is not None:
            os.close(fd)
        for key in [key for key in self._tails if key[0] == run_id]:
            del self._tails[key]
        with self._thread_lock:
            self._forget_owner(run_id)

    # a full disk and fsck ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def disk_full_said(self, run_id: str, *, then: str = "") -> Iterator[None]:
        """A full disk inside the body becomes one ``DiskFullError`` naming the store and the fix (``then``: what
        to do once space is freed; default: resume the run)."""
        try:
            yield
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            raise DiskFullError(
                f"no space left on the disk of store {self.shown} (writing run {run_id!r}); nothing half-written "
                f"was kept: free space, then {then or f'`safepoint resume {run_id}`'}"
            ) from None

    @contextlib.contextmanager
    def held_for_repair(self, run_id: str) -> Iterator[None]:
        """The run's lock for a repair (``safepoint.store.fsck``), waited for a bounded time; this process's open
        handles and tails of the run are dropped after it, as the files under them were written again."""
        self._existing_run_dir(run_id)
        try:
            with self._locked(run_id, timeout=CLAIM_LOCK_TIMEOUT):
                yield
        finally:
            self._drop_handles(run_id)

    def terminal_events_loose(self, run_id: str) -> list[dict[str, object]]:
        """The intact lines of the terminal events as plain data, the damaged ones left out (fsck rebuilds an owner
        record from them; ``terminal_events`` refuses a damaged file, as a recovery must)."""
        data = b""
        with contextlib.suppress(FileNotFoundError), open(self._path(run_id, TERMINAL_EVENTS), "rb") as handle:
            data = handle.read()
        found = []
        for _, item in unframe_all(data):
            if not isinstance(item, LogProblem):
                with contextlib.suppress(msgspec.DecodeError):
                    decoded = msgspec.json.decode(item)
                    if isinstance(decoded, dict):
                        found.append(decoded)
        return found

    def close(self) -> None:
        runs = {*self._log_fds, *self._lock_fds, *self._index_fds, *self._trace_fds, *self._summary_fds, *self._owners}
        for run_id in runs:
            self._drop_handles(run_id.partition("/")[0])


@contextlib.contextmanager
def _removed_on_failure(folder: str) -> Iterator[None]:
    try:
        yield
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _control_records(data: bytes) -> list[tuple[int, bytes]]:
    """``(position, data)`` of each intact control line; a damaged line or a torn tail is skipped."""
    found = []
    for _, item in unframe_all(data):
        if isinstance(item, LogProblem):
            continue
        position, _, record = item.partition(b" ")
        if position.isdigit():
            found.append((int(position), record))
    return found


def _stuck_writer(run_id: str) -> StoreError:
    return StoreError(
        f"run {run_id!r}: another process holds the log's lock in the middle of an append and does not let go "
        "(stopped with SIGSTOP?); end that process and read again"
    )


def _stuck_reader(run_id: str) -> StoreError:
    return StoreError(
        f"run {run_id!r}: a reader holds the log's lock and does not let go (a safepoint command stopped with "
        "Ctrl-Z or SIGSTOP?); end it, then resume the run"
    )
