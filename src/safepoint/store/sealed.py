"""Encryption at rest, for every backend at once: ``SealedStore`` wraps a store and seals each payload on its way
in and opens it on its way out, so the file store and the PostgreSQL store (and any backend that passes the
conformance suite) are encrypted by one piece of code, and the suite runs on the sealed form of each.

What is sealed (AES-256-GCM, ``safepoint.store.crypt``), with the place each is bound to (its additional
authenticated data: a sealed value copied to another run, record or slot fails authentication)::

    run header                 run id
    log record's body          run id, record kind, seq    (ledger entries, messages, checkpoints, file patches,
                                                            blobs: the user's file versions)
    restart checkpoint         run id                      (its payload and configuration; see below)
    terminal event's payload   run id, event key
    control record             run id
    schedule                   job id
    artifact                   run id, artifact name       (content-derived nonce: the same artifact stored twice
                                                            is the same bytes, so it keeps its one name)
    blob                       its name                    (store-wide, shared by runs: bound to its name, which
                                                            is an HMAC of the content's hash: see ``blob_name``;
                                                            kept in binary, ``sp1b`` + nonce and ciphertext)
    trace line                 run id

What stays in clear, because the store itself reads it to work: run ids and job ids (names of folders and rows),
each log record's kind, seq and generation (the order and fencing checks, the checkpoint index), the owner record
(who may write, under which generation, and its liveness), a terminal event's key (at most one per key), a control
record's position, an artifact's name and the SHA-256 of its stored (sealed) bytes, every frame's CRC-32 (of the
sealed bytes, so ``fsck`` checks them without the key), and the restart checkpoint's mode, times and recovery
identity (the seed's own columns in PostgreSQL; its payload and execution configuration are sealed). Sizes are
visible too: sealing hides what a record says, not how long it is.

A value that fails authentication is handled as a damaged one of its part always was: a log record is reported
as a problem and never loaded, a restart checkpoint is not intact, a control or trace line is skipped, and a run
header, terminal event, schedule or artifact is a ``TamperedRecordError``, one line naming the run and record.

The key is checked once, before the first record is read: the store's encryption record (``Store.
encryption_record``) names the key id it was made with. A key opens a store that holds nothing yet and records
itself before the first write; it is refused on a store that holds runs without encryption (half a store
encrypted would be worse than either); a store that has the record and no key is refused (``StoreKeyError``).
"""

from __future__ import annotations

import binascii
import contextlib
import hmac
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from safepoint.errors import CorruptRecordError, TamperedRecordError
from safepoint.protocol import RecoveryOwnerTerminalEvent, RuntimeRestartCheckpoint
from safepoint.records import Claim, LogProblem, LogRead, LogRecord, OwnerState, RecoveryIdentity, StoredDescriptor
from safepoint.store import trace_batches
from safepoint.store.base import BlobStat, Store
from safepoint.store.blob_refs import referenced_names
from safepoint.store.crypt import (
    PREFIX,
    Cipher,
    StoreKey,
    check_key,
    check_not_orphaned,
    is_sealed,
    marker_for,
    not_encrypted,
    place,
    read_marker,
)
from safepoint.store.framing import check_one_line
from safepoint.store.log_after import LogPosition
from safepoint.store.names import artifact_file, artifact_ref, parse_artifact_ref, safe_url

_checkpoint_decoder = msgspec.json.Decoder(RuntimeRestartCheckpoint)
_encoder = msgspec.json.Encoder()
_MOVED = "it was changed, moved from another run or place, or written with another key"


class SealedStore(Store):
    """``inner`` with every payload sealed by ``key``; ``key=None`` gives a store that refuses every call with the
    one-line "give its key" error (``fsck`` still checks its checksums through ``inner``)."""

    def __init__(self, inner: Store, key: StoreKey | None) -> None:
        self.inner = inner
        self.url = inner.url
        self.key = key
        self.cipher = Cipher(key) if key is not None else None
        self.shown: str = getattr(inner, "shown", None) or safe_url(inner.url)
        inner.sealed = True
        self.sealed = True
        self._checked = False
        self._checking = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        # What only one backend has (the file store's run_dir, a test's look inside): the backend's.
        return getattr(self.__dict__.get("inner"), name)

    # the key, checked once ----------------------------------------------------------------------------------------
    def _ready(self, *, writing: bool = False) -> Cipher:
        if self._checked and self.cipher is not None:
            return self.cipher
        with self._checking:
            stored = self.inner.encryption_record()
            marker = None if stored is None else read_marker(stored, self.shown)
            check_key(marker, self.key, self.shown)
            if self.key is None or self.cipher is None:  # no key and no record: a store that is not encrypted
                raise not_encrypted_without_key(self.shown)
            if marker is None:
                first = self.inner.first_run_header()
                if first is not None and is_sealed(first[1]):
                    # The record was lost but the runs are sealed: a key that opens them records it again.
                    if open_header(self.cipher, first[0], first[1]) is None:
                        check_not_orphaned(first[1], self.key, self.shown)
                    writing = True
                elif self.inner.holds_runs():
                    raise not_encrypted(self.shown, self.key)
                if not writing:
                    return self.cipher  # nothing to read yet; the record is written with the first write
                self.inner.record_encryption(marker_for(self.key))
                again = self.inner.encryption_record()
                if again is None:  # a process without a key wrote first: this store stays unencrypted
                    raise not_encrypted(self.shown, self.key)
                check_key(read_marker(again, self.shown), self.key, self.shown)
            self._checked = True
            return self.cipher

    def encryption_record(self) -> bytes | None:
        return self.inner.encryption_record()

    def holds_runs(self) -> bool:
        return self.inner.holds_runs()

    # runs and the log -----------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, header: bytes) -> None:
        cipher = self._ready(writing=True)
        self.inner.create_run(run_id, cipher.seal(header, place(run_id, "header")))

    def run_header(self, run_id: str) -> bytes:
        cipher = self._ready()
        header = open_header(cipher, run_id, self.inner.run_header(run_id))
        if header is None:
            raise TamperedRecordError(
                f"header of run {run_id!r} in store {self.shown} fails authentication ({_MOVED}); the run cannot "
                "be read: restore it from a backup"
            )
        return header

    def list_runs(self) -> list[str]:
        self._ready()
        return self.inner.list_runs()

    def append(
        self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True, summary: bytes | None = None
    ) -> None:
        cipher = self._ready(writing=True)
        sealed = [
            msgspec.structs.replace(
                record,
                body=msgspec.Raw(
                    b'"%s"' % cipher.seal(bytes(record.body), place(claim.run_id, "log", record.kind, record.seq))
                ),
            )
            for record in records
        ]
        if summary is not None and records:
            # Bound to the log's end it describes: an older summary put back under a newer stamp does not open.
            summary = cipher.seal(summary, place(claim.run_id, "summary", records[-1].seq))
        if names := referenced_names(records, self.blob_name):  # the backend cannot read them once sealed
            self.inner.note_blob_refs(claim.run_id, names)
        self.inner.append(claim, sealed, durable=durable, summary=summary)

    def read_summary(self, run_id: str) -> tuple[int, bytes] | None:
        cipher = self._ready()
        found = self.inner.read_summary(run_id)
        if found is None:
            return None
        opened = cipher.open(found[1], place(run_id, "summary", found[0]))
        return None if opened is None else (found[0], opened)  # one that does not open: the log is read instead

    def read_log(self, run_id: str) -> LogRead:
        return self._opened(run_id, self.inner.read_log(run_id))

    def log_position(self, run_id: str) -> LogPosition | None:
        self._ready()
        return self.inner.log_position(run_id)  # of the sealed lines, as stored

    def read_log_after(self, run_id: str, after: LogPosition) -> LogRead | None:
        self._ready()
        read = self.inner.read_log_after(run_id, after)
        return None if read is None else self._opened(run_id, read, start=after.seq + 1)

    def put_view_snapshot(self, claim: Claim, data: bytes, *, seq: int) -> None:
        cipher = self._ready(writing=True)
        self.inner.put_view_snapshot(claim, cipher.seal(data, place(claim.run_id, "view_snapshot")), seq=seq)

    def view_snapshot_seq(self, run_id: str) -> int | None:
        self._ready()
        return self.inner.view_snapshot_seq(run_id)

    def read_view_snapshot(self, run_id: str) -> bytes | None:
        cipher = self._ready()
        sealed = self.inner.read_view_snapshot(run_id)
        return None if sealed is None else cipher.open(sealed, place(run_id, "view_snapshot"))  # None: not trusted

    def _opened(self, run_id: str, read: LogRead, start: int = 1) -> LogRead:
        cipher = self._ready()
        records: list[LogRecord] = []
        problems = list(read.problems)
        lost = False
        for record in read.records:
            opened = open_record(cipher, run_id, record)
            if opened is None:
                detail = f"seq {record.seq} ({record.kind}) fails authentication: {_MOVED}"
                problems.append(LogProblem(kind="corrupt", position=record.seq, detail=detail))
                lost = True
                continue
            if lost and (not records or record.seq != records[-1].seq + 1):
                first = records[-1].seq + 1 if records else start
                detail = f"records {first}..{record.seq - 1} are missing before seq {record.seq}"
                problems.append(LogProblem(kind="gap", position=record.seq, detail=detail))
            lost = False
            records.append(opened)
        return LogRead(records=records, problems=problems)

    def delete_run(self, run_id: str, *, claim: Claim | None = None, force: bool = False) -> None:
        self._ready()
        self.inner.delete_run(run_id, claim=claim, force=force)

    # ownership: in clear (the store reads it to fence writers), checked for the key like every call --------------
    def claim(
        self,
        run_id: str,
        holder: str,
        *,
        takeover: bool = False,
        identity: RecoveryIdentity | None = None,
        reopen: bool = False,
    ) -> Claim:
        self._ready()
        return self.inner.claim(run_id, holder, takeover=takeover, identity=identity, reopen=reopen)

    def close_owner(self, claim: Claim, terminal_status: str) -> None:
        self._ready()
        self.inner.close_owner(claim, terminal_status)

    def owner(self, run_id: str) -> OwnerState | None:
        self._ready()
        return self.inner.owner(run_id)

    def release(self, claim: Claim) -> None:
        self._ready()
        self.inner.release(claim)

    def clock(self) -> datetime:
        return self.inner.clock()  # the backend's (a database's) time, not this host's

    def try_claim(self, run_id: str, holder: str) -> Claim | None:
        self._ready()
        return self.inner.try_claim(run_id, holder)

    def wait_for_work(self, timeout: float) -> bool:
        return self.inner.wait_for_work(timeout)

    def pass_runs(self, since: datetime | None) -> list[str]:
        return self.inner.pass_runs(since)  # run ids are not sealed: the backend's indexes answer

    def occurrence_runs(self, job_id: str, separator: str) -> list[str]:
        return self.inner.occurrence_runs(job_id, separator)

    def heartbeat(self, claim: Claim) -> None:
        self._ready()
        self.inner.heartbeat(claim)

    # the restart checkpoint and terminal events -----------------------------------------------------------------
    def upsert_restart_checkpoint(self, claim: Claim, data: bytes) -> None:
        cipher = self._ready(writing=True)
        sealed = cipher.seal(data, place(claim.run_id, "restart_checkpoint"))
        try:
            checkpoint = _checkpoint_decoder.decode(data)
        except msgspec.DecodeError:  # stored as it was given (judging it is recovery's job), sealed whole
            self.inner.upsert_restart_checkpoint(claim, sealed)
            return
        # The seed's columns keep what says which agent and when; the payload and configuration are sealed, as
        # the whole descriptor, in payload_json (it is read back byte for byte from there).
        clear = msgspec.structs.replace(checkpoint, payload_json=sealed.decode(), execution_config_json=None)
        self.inner.upsert_restart_checkpoint(claim, _encoder.encode(clear))

    def read_restart_checkpoint(self, run_id: str) -> StoredDescriptor | None:
        cipher = self._ready()
        stored = self.inner.read_restart_checkpoint(run_id)
        if stored is None or not stored.intact:
            return stored
        data = open_restart_checkpoint(cipher, run_id, stored.data)
        if data is None:
            return StoredDescriptor(data=stored.data, intact=False, detail=f"fails authentication: {_MOVED}")
        return StoredDescriptor(data=data, intact=True)

    def delete_restart_checkpoint(self, claim: Claim) -> None:
        self._ready()
        self.inner.delete_restart_checkpoint(claim)

    def list_restart_checkpoints(self) -> list[str]:
        self._ready()
        return self.inner.list_restart_checkpoints()

    def record_terminal_event(self, claim: Claim, event: RecoveryOwnerTerminalEvent) -> bool:
        cipher = self._ready(writing=True)
        if event.payload_json is not None:
            sealed = cipher.seal(event.payload_json.encode(), _event_place(claim.run_id, event))
            event = msgspec.structs.replace(event, payload_json=sealed.decode())
        return self.inner.record_terminal_event(claim, event)

    def terminal_events(self, run_id: str) -> list[RecoveryOwnerTerminalEvent]:
        cipher = self._ready()
        events = []
        for event in self.inner.terminal_events(run_id):
            if event.payload_json is not None:
                payload = open_event_payload(cipher, run_id, event)
                if payload is None:
                    raise TamperedRecordError(
                        f"terminal event {event.event_type!r} (generation {event.generation}) of run {run_id!r} in "
                        f"store {self.shown} fails authentication ({_MOVED}); restore the store from a backup"
                    )
                event = msgspec.structs.replace(event, payload_json=payload.decode())
            events.append(event)
        return events

    # control and schedules ------------------------------------------------------------------------------------------
    def post_control(self, run_id: str, data: bytes, *, after: int | None = None) -> int:
        check_one_line("a control record", data)  # what every backend refuses, refused before it is sealed
        cipher = self._ready(writing=True)
        return self.inner.post_control(run_id, cipher.seal(data, place(run_id, "control")), after=after)

    def read_control(self, run_id: str) -> list[tuple[int, bytes]]:
        cipher = self._ready()
        found = []
        for position, sealed in self.inner.read_control(run_id):
            data = open_control(cipher, run_id, sealed)
            if data is not None:  # as a damaged line is: skipped, its position kept (fsck reports it)
                found.append((position, data))
        return found

    def put_schedule(self, job_id: str, data: bytes | None) -> None:
        cipher = self._ready(writing=True)
        self.inner.put_schedule(job_id, None if data is None else cipher.seal(data, place("", "schedule", job_id)))

    def list_schedules(self) -> dict[str, bytes]:
        cipher = self._ready()
        found = {}
        for job_id, sealed in self.inner.list_schedules().items():
            data = cipher.open(sealed, place("", "schedule", job_id))
            if data is None:
                raise TamperedRecordError(
                    f"schedule {job_id!r} in store {self.shown} fails authentication ({_MOVED}); write it again "
                    "or delete it"
                )
            found[job_id] = data
        return found

    # artifacts and trace --------------------------------------------------------------------------------------------
    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        return self.inner.put_artifact(claim, name, self._sealed_artifact(claim.run_id, name, data, writing=True))

    def artifact_ref_for(self, run_id: str, name: str, data: bytes) -> str:
        return artifact_ref(*artifact_file(name, self._sealed_artifact(run_id, name, data, writing=False)))

    def _sealed_artifact(self, run_id: str, name: str, data: bytes, *, writing: bool) -> bytes:
        where = place(run_id, "artifact", _artifact_name(artifact_file(name, b"")[0]))
        return self._ready(writing=writing).seal(data, where, deterministic=True)

    def get_artifact(self, run_id: str, ref: str) -> bytes:
        cipher = self._ready()
        filename, _ = parse_artifact_ref(ref)
        data = open_artifact(cipher, run_id, filename, self.inner.get_artifact(run_id, ref))
        if data is None:
            raise TamperedRecordError(
                f"artifact {filename} of run {run_id!r} in store {self.shown} fails authentication ({_MOVED})"
            )
        return data

    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        cipher = self._ready(writing=True)
        # Packed before sealing: sealed bytes do not compress (the inner store keeps the sealed line as it is).
        self.inner.trace(run_id, [cipher.seal(line, place(run_id, "trace")) for line in trace_batches.pack(lines)])

    def read_trace(self, run_id: str) -> Iterator[bytes]:
        cipher = self._ready()
        for sealed in self.inner.read_trace(run_id):
            line = cipher.open(sealed, place(run_id, "trace"))
            if line is not None:  # as a damaged trace line is: skipped (recovery never depends on the trace)
                yield from trace_batches.unpack(line)

    # blobs: sealed whole, under names keyed by the store's key --------------------------------------------------------
    def blob_name(self, digest: str) -> str:
        """An HMAC of the content's hash under a key derived from the store's, not the hash itself: the plain
        SHA-256 of a file would let anyone holding the store confirm a guess of its content (a known config file,
        a password list) without the key. Rejected: the hash of the sealed bytes, which differs at every sealing
        (random nonces), so a blob two runs share would be stored twice."""
        cipher = self._ready()
        return "keyed:" + hmac.new(cipher.key.derived(b"safepoint blob name v1"), digest.encode(), "sha256").hexdigest()

    def put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        cipher = self._ready(writing=True)
        sealed: list[tuple[str, bytes]] = []
        for name, data in blobs:
            # Stored already and whole: handed down as the bytes stored, so the backend keeps them as they are (a
            # new seal differs by its random nonce, and would be taken for a damaged copy and written again).
            try:
                stored = self.inner.get_blob(name)
            except CorruptRecordError:  # not a file the store wrote (a folder, a symlink): written over
                stored = None
            if stored is not None and open_blob_bytes(cipher, name, stored) == data:
                sealed.append((name, stored))
            else:
                sealed.append((name, _binary(cipher.seal(data, place("", "blob", name)))))
        return self.inner.put_blobs(sealed)

    def get_blob(self, name: str) -> bytes | None:
        cipher = self._ready()
        sealed = self.inner.get_blob(name)
        if sealed is None:
            return None
        data = open_blob_bytes(cipher, name, sealed)
        if data is None:
            raise TamperedRecordError(f"blob {name} in store {self.shown} fails authentication ({_MOVED})")
        return data

    def list_blobs(self) -> dict[str, BlobStat]:
        self._ready()
        return self.inner.list_blobs()

    def blob_clock(self) -> float:
        return self.inner.blob_clock()

    def delete_blobs(self, names: Sequence[str]) -> int:
        self._ready()
        return self.inner.delete_blobs(names)

    def quarantine_blob(self, name: str) -> bool:
        return self.inner.quarantine_blob(name)

    def note_blob_refs(self, run_id: str, names: Sequence[str]) -> None:
        self.inner.note_blob_refs(run_id, names)

    def blob_referrers(self, names: Iterable[str]) -> dict[str, frozenset[str]] | None:
        return self.inner.blob_referrers(names)

    def drop_blob_refs(self, run_id: str, names: Iterable[str]) -> None:
        self.inner.drop_blob_refs(run_id, names)

    def complete_blob_refs(self, refs: Mapping[str, Iterable[str]]) -> None:
        self.inner.complete_blob_refs(refs)

    def sweep_blob_refs(self) -> int:
        return self.inner.sweep_blob_refs()

    def blobs_shared(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.blobs_shared()

    def blobs_exclusive(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.blobs_exclusive()

    # the rest is the backend's ------------------------------------------------------------------------------------
    def local_dir(self) -> str | None:
        return self.inner.local_dir()

    def scratch_dir(self, run_id: str) -> str | None:
        return self.inner.scratch_dir(run_id)

    def log_mark(self, run_id: str) -> int:
        return self.inner.log_mark(run_id)

    def close(self) -> None:
        self.inner.close()


def not_encrypted_without_key(shown: str) -> CorruptRecordError:
    # Reached only when a store opened as encrypted lost its record (``open_store`` wraps a keyless store only
    # when it has one): never guess that it is plain.
    return CorruptRecordError(f"store {shown} was opened as encrypted but holds no encryption record; open it again")


def _event_place(run_id: str, event: RecoveryOwnerTerminalEvent) -> bytes:
    return place(run_id, "terminal_event", event.recovery_class, event.owner_id, event.generation, event.event_type)


def _artifact_name(filename: str) -> str:
    """The name part of an artifact's file name (``<name>.<digest prefix>``): what its sealing is bound to, since
    the digest is of the sealed bytes and only known after sealing."""
    return filename.rpartition(".")[0] or filename


# opening one stored value (the layer's reads, and fsck's check of every record with the key) ------------------
def open_header(cipher: Cipher, run_id: str, sealed: bytes) -> bytes | None:
    return cipher.open(sealed, place(run_id, "header"))


def open_record(cipher: Cipher, run_id: str, record: LogRecord) -> LogRecord | None:
    """The record with its body opened, or None when the body does not authenticate in this run at this seq."""
    body = bytes(record.body)
    if len(body) < 2 or body[:1] != b'"' or body[-1:] != b'"':
        return None  # not sealed: planted, or written without the key
    opened = cipher.open(body[1:-1], place(run_id, "log", record.kind, record.seq))
    return None if opened is None else msgspec.structs.replace(record, body=msgspec.Raw(opened))


def open_restart_checkpoint(cipher: Cipher, run_id: str, stored: bytes) -> bytes | None:
    sealed = stored
    if not is_sealed(stored):
        try:
            sealed = (_checkpoint_decoder.decode(stored).payload_json or "").encode()
        except msgspec.DecodeError:
            return None
    return cipher.open(sealed, place(run_id, "restart_checkpoint"))


def open_event_payload(cipher: Cipher, run_id: str, event: RecoveryOwnerTerminalEvent) -> bytes | None:
    return cipher.open((event.payload_json or "").encode(), _event_place(run_id, event))


def open_control(cipher: Cipher, run_id: str, sealed: bytes) -> bytes | None:
    return cipher.open(sealed, place(run_id, "control"))


_BLOB_PREFIX = b"sp1b"  # a sealed value in binary: a blob may be megabytes, and base64 would add a third


def _binary(sealed: bytes) -> bytes:
    return _BLOB_PREFIX + binascii.a2b_base64(sealed[len(PREFIX) :])


def open_blob_bytes(cipher: Cipher, name: str, stored: bytes) -> bytes | None:
    if not stored.startswith(_BLOB_PREFIX):
        return None
    sealed = PREFIX + binascii.b2a_base64(stored[len(_BLOB_PREFIX) :], newline=False)
    return cipher.open(sealed, place("", "blob", name))


def open_artifact(cipher: Cipher, run_id: str, filename: str, sealed: bytes) -> bytes | None:
    return cipher.open(sealed, place(run_id, "artifact", _artifact_name(filename)))


def store_key(store: Store) -> StoreKey | None:
    """The key ``store`` was opened with (a child process that opens it again needs it), if any."""
    return store.key if isinstance(store, SealedStore) else None


def unwrap(store: Store) -> tuple[Store, Cipher | None]:
    """The backend under ``store`` and the cipher that opens its records (None: not encrypted, or no key). With a
    key, the key is checked against the store first (a wrong key, or a key for a plain store, is refused)."""
    if isinstance(store, SealedStore):
        if store.cipher is not None:
            store._ready()
        return store.inner, store.cipher
    return store, None
