"""The embedded default store: plain files under ``.agent-runtime/``, the seed's layout (§8.10).

::

    .agent-runtime/
    └── runs/<run_id>/
        ├── run.json                 the run's header (atomic write)
        ├── owner.json               owner id and generation (atomic write)
        ├── lock                     flock'd for the few microseconds of each append or claim
        ├── ledger.jsonl             the run's ordered log: ledger entries, file patches, messages, checkpoints
        ├── checkpoints/index.jsonl  the separate checkpoint index: seq and byte offset of each checkpoint
        ├── artifacts/               large tool outputs and blobs, one file each (atomic write)
        ├── tmp/                     the run's workspace writes in flight (swept when the run is claimed)
        └── trace.jsonl              trace events (not fsync'd: recovery never reads them)

Fencing: every append takes the run's lock, compares the writer's generation with ``owner.json`` and refuses a
stale one. A lock held for a whole run (the obvious alternative) would let a SIGSTOP'd owner block a takeover
forever; a short lock per append cannot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence

import msgspec

from tidemark.errors import (
    ConfigError,
    CorruptRecordError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from tidemark.store.base import Claim, LogProblem, LogRead, LogRecord, OwnerState, Store
from tidemark.store.durable_io import append_fd, atomic_write, fsync_dir, write_all
from tidemark.store.framing import check_line, frame, read_records, unframe_all
from tidemark.store.ownership import check_current, next_owner, now, stuck_lock

_RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(LogRecord)
_owner_decoder = msgspec.json.Decoder(OwnerState)
_INDEXED_KINDS = frozenset({"checkpoint"})
CLAIM_LOCK_TIMEOUT = 10.0  # a claim waits this long for an append in progress; a stopped owner would hold it forever
HEARTBEAT_SECONDS = 10.0  # an owner renews its heartbeat this often (from its appends)


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ConfigError(
            f"run id {run_id!r} is not valid: use 1-128 letters, digits, '_', '-' or '.', not starting with '.'"
        )
    return run_id


class _Tail:
    """What this process knows of a log's end, so appends need not re-read the file."""

    __slots__ = ("next_seq", "size")

    def __init__(self, next_seq: int, size: int) -> None:
        self.next_seq = next_seq
        self.size = size


class FileStore(Store):
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = f"file:{self.root}"
        self._runs = os.path.join(self.root, "runs")  # made by the first create_run: reading never creates a store
        self._tails: dict[tuple[str, int], _Tail] = {}
        self._log_fds: dict[str, int] = {}
        self._lock_fds: dict[str, int] = {}
        self._index_fds: dict[str, int] = {}
        self._trace_fds: dict[str, int] = {}

    # paths ------------------------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> str:
        return os.path.join(self._runs, check_run_id(run_id))

    def _path(self, run_id: str, *parts: str) -> str:
        return os.path.join(self.run_dir(run_id), *parts)

    def _existing_run_dir(self, run_id: str) -> str:
        path = self.run_dir(run_id)
        if not os.path.exists(os.path.join(path, "run.json")):
            raise RunNotFoundError(f"run {run_id!r} not found in store {self.url}; list runs with `tidemark status`")
        return path

    # runs -------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, header: bytes) -> None:
        """Build the run's folder under a temporary name, then rename it into place: a crash half-way leaves
        an invisible ``.new-*`` folder, never a half-made run that blocks its own id."""
        self._make_root()
        path = self.run_dir(run_id)
        if os.path.exists(path):
            raise RunExistsError(f"run {run_id!r} already exists in {self.url}; pick another --run-id")
        staging = tempfile.mkdtemp(dir=self._runs, prefix=f".new-{run_id}-")
        for folder in ("checkpoints", "artifacts", "tmp"):
            os.mkdir(os.path.join(staging, folder))
        os.close(append_fd(os.path.join(staging, "ledger.jsonl")))
        atomic_write(os.path.join(staging, "run.json"), frame(header))
        try:
            os.rename(staging, path)  # fails if another process created the run meanwhile
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            raise RunExistsError(f"run {run_id!r} already exists in {self.url}; pick another --run-id") from None
        fsync_dir(self._runs)

    def local_dir(self) -> str | None:
        return self.root

    def _make_root(self) -> None:
        os.makedirs(self._runs, exist_ok=True)
        ignore = os.path.join(self.root, ".gitignore")
        if not os.path.exists(ignore):  # the store holds copies of the user's files: never commit it by accident
            with open(ignore, "w") as handle:
                handle.write("# tidemark's store: not for version control\n*\n")

    def scratch_dir(self, run_id: str) -> str | None:
        return self._path(run_id, "tmp")

    def run_header(self, run_id: str) -> bytes:
        path = os.path.join(self._existing_run_dir(run_id), "run.json")
        with open(path, "rb") as handle:
            payload = check_line(handle.read().rstrip(b"\n"))
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
    def _locked(self, run_id: str, *, timeout: float | None = None) -> Iterator[None]:
        fd = self._lock_fds.get(run_id)
        if fd is None:
            fd = os.open(self._path(run_id, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._lock_fds[run_id] = fd
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise stuck_lock(run_id) from None
                    time.sleep(0.01)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def owner(self, run_id: str) -> OwnerState | None:
        # Read every time (a few microseconds): a cache keyed on inode and mtime could be fooled by an inode
        # reused within one clock tick and let a fenced-off writer through.
        path = self._path(run_id, "owner.json")
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return None
        payload = check_line(raw.rstrip(b"\n"))
        if payload is None:
            raise CorruptRecordError(f"owner record of run {run_id!r} ({path}) fails its checksum")
        return _owner_decoder.decode(payload)

    def _write_owner(self, run_id: str, state: OwnerState) -> None:
        atomic_write(self._path(run_id, "owner.json"), frame(_record_encoder.encode(state)))

    def claim(self, run_id: str, owner_id: str, *, takeover: bool = False) -> Claim:
        self._existing_run_dir(run_id)
        with self._locked(run_id, timeout=CLAIM_LOCK_TIMEOUT):
            state = next_owner(run_id, self.owner(run_id), owner_id, takeover=takeover)
            self._write_owner(run_id, state)
        return Claim(run_id=run_id, owner_id=owner_id, generation=state.generation)

    def release(self, claim: Claim) -> None:
        try:
            with self._locked(claim.run_id):
                current = self.owner(claim.run_id)
                if current is not None and current.generation == claim.generation:
                    self._write_owner(
                        claim.run_id, msgspec.structs.replace(current, released=True, heartbeat_at=now())
                    )
        finally:
            self._drop_handles(claim.run_id)

    def heartbeat(self, claim: Claim) -> None:
        with self._locked(claim.run_id):
            current = self._check_generation(claim)
            self._write_owner(claim.run_id, msgspec.structs.replace(current, heartbeat_at=now()))

    def _check_generation(self, claim: Claim) -> OwnerState:
        return check_current(claim, self.owner(claim.run_id))

    # the log ----------------------------------------------------------------------------------------------
    def _fd(self, table: dict[str, int], run_id: str, *parts: str) -> int:
        """An append fd kept open per run: opening a file per append would cost more than the write."""
        fd = table.get(run_id)
        if fd is None:
            fd = append_fd(self._path(run_id, *parts))
            table[run_id] = fd
        return fd

    def _tail(self, claim: Claim) -> _Tail:
        key = (claim.run_id, claim.generation)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._repair_tail(claim.run_id)
            self._tails[key] = tail
        return tail

    def _repair_tail(self, run_id: str) -> _Tail:
        """Move a torn tail aside (kept in ``ledger.jsonl.torn``, never deleted) so appends start clean."""
        path = self._path(run_id, "ledger.jsonl")
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return _Tail(1, 0)
        last_seq = 0
        good_end = 0
        for offset, item in unframe_all(data):
            if isinstance(item, LogProblem):
                if item.kind == "torn":
                    self._quarantine(run_id, data[offset:])
                    os.truncate(path, offset)
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    return _Tail(last_seq + 1, offset)
                good_end = data.find(b"\n", offset) + 1
                continue
            with contextlib.suppress(msgspec.DecodeError):
                last_seq = max(last_seq, _record_decoder.decode(item).seq)
            good_end = data.find(b"\n", offset) + 1
        return _Tail(last_seq + 1, good_end)

    def _quarantine(self, run_id: str, data: bytes) -> None:
        fd = append_fd(self._path(run_id, "ledger.jsonl.torn"))
        try:
            write_all(fd, frame(b'{"quarantined_at":"%s","bytes":%d}' % (now().encode(), len(data))) + data + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.run_dir(run_id))  # the quarantine file must outlive the truncation that follows

    def append(self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True) -> None:
        if not records:
            return
        with self._locked(claim.run_id):
            self._check_generation(claim)
            tail = self._tail(claim)
            if records[0].seq != tail.next_seq:
                raise StoreError(
                    f"run {claim.run_id!r}: append at seq {records[0].seq} but the log ends at {tail.next_seq - 1}; "
                    "another writer slipped in; resume the run to continue from what is stored"
                )
            lines = []
            index_lines = []
            offset = tail.size
            for record in records:
                line = frame(_record_encoder.encode(record))
                if record.kind in _INDEXED_KINDS:
                    index_lines.append(frame(b'{"seq":%d,"offset":%d}' % (record.seq, offset)))
                offset += len(line)
                lines.append(line)
            fd = self._fd(self._log_fds, claim.run_id, "ledger.jsonl")
            write_all(fd, b"".join(lines))
            if durable:
                os.fdatasync(fd)
            tail.size = offset
            tail.next_seq = records[-1].seq + 1
            if index_lines:
                # The index only speeds look-ups and every entry is checked against the log when read
                # (checkpoint_offsets), so it needs no fsync of its own.
                write_all(self._fd(self._index_fds, claim.run_id, "checkpoints", "index.jsonl"), b"".join(index_lines))

    def read_log(self, run_id: str) -> LogRead:
        path = os.path.join(self._existing_run_dir(run_id), "ledger.jsonl")
        try:
            data = _read_settled(path)
        except FileNotFoundError:
            return LogRead(records=[], problems=[])
        return read_records(unframe_all(data))

    def checkpoint_offsets(self, run_id: str) -> list[tuple[int, int]]:
        """``(seq, byte offset)`` of each checkpoint, from the separate index, each checked against the log: an
        index entry the log does not confirm (torn, or cut away with a torn tail) is left out."""
        run_dir = self._existing_run_dir(run_id)
        try:
            with open(os.path.join(run_dir, "checkpoints", "index.jsonl"), "rb") as handle:
                index = handle.read()
            with open(os.path.join(run_dir, "ledger.jsonl"), "rb") as handle:
                log = handle.read()
        except FileNotFoundError:
            return []
        found = []
        for _, item in unframe_all(index):
            if isinstance(item, LogProblem):
                continue
            entry = msgspec.json.decode(item)
            seq, offset = int(entry["seq"]), int(entry["offset"])
            end = log.find(b"\n", offset)
            payload = check_line(log[offset:end]) if end > 0 else None
            if payload is not None and _record_decoder.decode(payload).seq == seq:
                found.append((seq, offset))
        return found

    # artifacts and trace ----------------------------------------------------------------------------------
    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        safe = _ARTIFACT_NAME.sub("_", name)[:100] or "artifact"
        filename = f"{safe}.{digest[:16]}"
        path = self._path(claim.run_id, "artifacts", filename)
        with self._locked(claim.run_id):
            self._check_generation(claim)
        if not os.path.exists(path):
            atomic_write(path, data)
        return f"artifact:{filename}:sha256:{digest}"

    def get_artifact(self, run_id: str, ref: str) -> bytes:
        try:
            _, filename, _, digest = ref.split(":", 3)
        except ValueError:
            raise StoreError(f"{ref!r} is not an artifact ref (artifact:NAME:sha256:HEX)") from None
        path = os.path.join(self._existing_run_dir(run_id), "artifacts", os.path.basename(filename))
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise CorruptRecordError(f"artifact {filename} of run {run_id!r} is missing from {path}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise CorruptRecordError(f"artifact {filename} of run {run_id!r} fails its checksum ({path})")
        return data

    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        write_all(self._fd(self._trace_fds, run_id, "trace.jsonl"), b"".join(frame(line) for line in lines))

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        path = os.path.join(self._existing_run_dir(run_id), "trace.jsonl")
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return
        for _, item in unframe_all(data):
            if not isinstance(item, LogProblem):
                yield item

    # handles ----------------------------------------------------------------------------------------------
    def _drop_handles(self, run_id: str) -> None:
        for table in (self._log_fds, self._lock_fds, self._index_fds, self._trace_fds):
            fd = table.pop(run_id, None)
            if fd is not None:
                os.close(fd)
        for key in [key for key in self._tails if key[0] == run_id]:
            del self._tails[key]

    def close(self) -> None:
        for run_id in {*self._log_fds, *self._lock_fds, *self._index_fds, *self._trace_fds}:
            self._drop_handles(run_id)


def _read_settled(path: str) -> bytes:
    """The log's bytes; a last line without its end is read again once, briefly later, since a live writer may be
    in the middle of appending it (only a tail that stays torn is one)."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data and not data.endswith(b"\n"):
        time.sleep(0.02)
        with open(path, "rb") as handle:
            data = handle.read()
    return data
