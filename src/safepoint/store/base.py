"""The store's contract, in parts: each part a small ABC with the durability and fencing it promises.

A backend knows durability and nothing about agents: it keeps, per run, one ordered log of checksummed records
(ledger entries, file patches, messages, checkpoints, blobs, ...), the run's ownership (who may write, under which
generation), its restart checkpoint and terminal events (seed 003 §1), a control channel, large artifacts and a
trace; and, store-wide, the schedules. Everything else (resume, rollback, gc) is built on these in the core and the
runtime. ``Store`` is the composition every backend implements; engine code that needs one part names that part
(``RunLog``, ``Ownership``, ...), so what it may touch is visible in its signature.
``safepoint.store.conformance`` checks a backend part by part.

Why one ordered log per run rather than a file per record kind: one log is prefix-consistent, so a record's
presence proves every earlier record is present, and one fsync makes a whole group durable (the tool-start group
is one fsync, the tool-end group another). Separate ledger/history/checkpoint files would need an fsync each and
cross-file repair after a crash.

Fencing, said once for every part: a method that takes a ``Claim`` checks, under the backend's lock for the run
and in the same critical section as its write, that the claim is still the run's current generation, and refuses
a stale one with ``StaleGenerationError`` before anything is written (DESIGN promise 6).
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from safepoint.errors import RunLockedError, StoreError
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, LogRead, LogRecord, OwnerState, RecoveryIdentity, StoredDescriptor
from safepoint.store.blob_refs import BlobReferences
from safepoint.store.log_after import LogPosition


class RunLog(abc.ABC):
    """Runs and their ordered log.

    Durability: ``create_run`` is durable when it returns; ``append(durable=True)`` survives power loss when it
    returns (fsync or a committed transaction), as a group: a reader sees a prefix of the log, never a record
    without every record before it. Fencing: ``append`` is fenced and refuses a seq that does not continue the log
    (a second writer of one generation). Reads never write and never report an append in flight as damage.
    """

    @abc.abstractmethod
    def create_run(self, run_id: str, header: bytes) -> None:
        """Create an empty run; ``header`` is the encoded ``RunInfo``. Raises ``RunExistsError``."""

    @abc.abstractmethod
    def run_header(self, run_id: str) -> bytes:
        """The encoded ``RunInfo`` of a run. Raises ``RunNotFoundError``."""

    @abc.abstractmethod
    def list_runs(self) -> list[str]:
        """Run ids, oldest first."""

    @abc.abstractmethod
    def append(
        self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True, summary: bytes | None = None
    ) -> None:
        """Append records in order, atomically as a group with respect to the generation check.

        ``durable`` makes them survive power loss before returning (fsync or a committed transaction).
        ``summary``: the run's summary as of this group (``core.run_summary``), kept beside the log, stamped with
        the log's end, under the same lock (fenced with the group); a group appended without one leaves the stored
        summary stale. Raises ``StaleGenerationError`` if ``claim`` is no longer the run's current generation.
        """

    @abc.abstractmethod
    def read_log(self, run_id: str) -> LogRead:
        """Every record that passes its checksum, in order, and a report of every one that does not."""

    @abc.abstractmethod
    def delete_run(self, run_id: str, *, claim: Claim | None = None, force: bool = False) -> None:
        """Remove the run and everything it owns (log, owner, restart checkpoint, terminal events, control,
        artifacts, trace), durably and all at once: a reader sees the whole run or none of it, and a crash half-way
        leaves no half-run under its id. Fenced by ``claim`` (its generation must be current), or ``force``: the
        caller judged that nobody acts for the run (it is never done by default). Content-addressed blobs are
        store-wide and stay (``safepoint gc`` removes those no run references). Raises ``RunNotFoundError``."""

    def log_position(self, run_id: str) -> LogPosition | None:
        """Where the run's log ends now (its last intact record), for a later ``read_log_after``; None: this
        backend cannot read after a position. Raises ``RunNotFoundError``."""
        return None

    def read_log_after(self, run_id: str, after: LogPosition) -> LogRead | None:
        """The records after ``after`` (and the problems among them), as ``read_log`` reports them; None when
        the record at ``after`` is not the one named there (the log was cut back or rewritten since) or the
        backend cannot tell: the caller reads the whole log (``store.log_after``)."""
        return None

    def put_view_snapshot(self, claim: Claim, data: bytes, *, seq: int) -> None:
        """Replace the run's view snapshot (``core.view_snapshot``: its folded log up to ``seq``) durably and
        atomically, checksummed. Fenced. A backend that keeps none ignores it (readers then read the log)."""
        return None

    def view_snapshot_seq(self, run_id: str) -> int | None:
        """The log seq the run's stored snapshot says it covers, read without the snapshot (whether a new one is
        due); None: none kept."""
        return None

    def read_view_snapshot(self, run_id: str) -> bytes | None:
        """The run's view snapshot, or None: none kept, or torn or damaged (never trusted). Raises
        ``RunNotFoundError``."""
        return None

    def read_summary(self, run_id: str) -> tuple[int, bytes] | None:
        """``(seq, summary)``: the summary the last append gave, while the log still ends at ``seq`` as it did
        then (checked, cheaply, against the log itself: its checksum, its end); None when there is none, it is
        damaged, or the log changed since. A cache: the caller then reads the log, the truth. Raises
        ``RunNotFoundError``. (A backend that keeps no summaries keeps this default: every reader reads the log.)"""
        return None


class Ownership(abc.ABC):
    """Who may write a run: one owner at a time, under a generation that only grows (seed 003 §1.1).

    Durability: every change of the owner record is durable when the method returns. Fencing: a claim raises the
    generation under the run's lock, so every later write by an older generation is refused; ``close_owner`` and
    ``heartbeat`` are fenced; ``release`` by a stale holder is a no-op (it must never undo a newer owner).
    """

    @abc.abstractmethod
    def claim(
        self,
        run_id: str,
        holder: str,
        *,
        takeover: bool = False,
        identity: RecoveryIdentity | None = None,
        reopen: bool = False,
    ) -> Claim:
        """Become the run's only writer under a new, higher generation.

        ``identity`` is recorded by the run's first claim (default: a root run that owns itself) and ignored later.
        The terminal state survives a claim unless ``reopen`` (an explicit new start by the user).
        Raises ``RunLockedError`` while another owner is alive, unless ``takeover``.
        """

    @abc.abstractmethod
    def close_owner(self, claim: Claim, terminal_status: str) -> None:
        """Set ``terminal_at`` (now) and ``terminal_status`` on the run's recovery owner. Fenced."""

    @abc.abstractmethod
    def owner(self, run_id: str) -> OwnerState | None:
        """The current owner record, if the run was ever claimed."""

    @abc.abstractmethod
    def release(self, claim: Claim) -> None:
        """Give the run up; a later claim needs no takeover."""

    @abc.abstractmethod
    def heartbeat(self, claim: Claim) -> None:
        """Tell other hosts the owner is alive (they presume it dead once its lease runs out). Fenced."""


class RestartCheckpoints(abc.ABC):
    """The restart checkpoint (seed 003 §1.2: one per agent, upserted, never appended) and the terminal events
    (§1.3: at most one per key).

    Durability: an upsert or delete is durable and atomic when it returns (readers see the old or the new one,
    checksummed); a recorded terminal event is durable. Fencing: all three writes are fenced.
    """

    @abc.abstractmethod
    def upsert_restart_checkpoint(self, claim: Claim, data: bytes) -> None:
        """Replace the run's restart checkpoint (``data`` is an encoded ``RuntimeRestartCheckpoint``) durably and
        atomically, with a checksum. Fenced."""

    @abc.abstractmethod
    def read_restart_checkpoint(self, run_id: str) -> StoredDescriptor | None:
        """The run's restart checkpoint, if it has one; a damaged one is returned with ``intact=False``."""

    @abc.abstractmethod
    def delete_restart_checkpoint(self, claim: Claim) -> None:
        """Remove the run's restart checkpoint durably (no-op if none). Fenced."""

    @abc.abstractmethod
    def list_restart_checkpoints(self) -> list[str]:
        """The runs that have a restart checkpoint (what a supervisor recovers at startup)."""

    @abc.abstractmethod
    def record_terminal_event(self, claim: Claim, event: RecoveryOwnerTerminalEvent) -> bool:
        """Record ``event`` durably unless one with its (recovery_class, owner_id, generation, event_type) exists;
        returns whether it was recorded. Fenced."""

    @abc.abstractmethod
    def terminal_events(self, run_id: str) -> list[RecoveryOwnerTerminalEvent]:
        """The run's terminal events, oldest first."""


class ControlChannel(abc.ABC):
    """What people send a run (approve, submit, cancel, ...) without owning it.

    Durability: a post is durable (fsync'd or committed, checksummed) before its position is returned; positions
    are 1, 2, ... per run and never shift, even around a damaged record. Fencing: none (the sender holds no
    claim); posts are ordered among themselves and never wait for the owner's lock.
    """

    @abc.abstractmethod
    def post_control(self, run_id: str, data: bytes, *, after: int | None = None) -> int:
        """Append a control record durably (fsync'd, checksummed); returns its position (1, 2, ...).
        Not fenced: the sender holds no claim. Raises ``RunNotFoundError``. With ``after`` (the last position the
        caller read), posted only if no record came since, atomically among posts; else nothing is posted and 0
        is returned (so a check then post, as an answer to an approval, cannot race another)."""

    @abc.abstractmethod
    def read_control(self, run_id: str) -> list[tuple[int, bytes]]:
        """Every intact control record with its position, in order (a torn tail is skipped, not loaded)."""


class Schedules(abc.ABC):
    """Scheduled jobs: a store-wide table, not a run's.

    Durability: a put or delete is durable and atomic when it returns; a damaged definition is an error when read,
    never skipped. Fencing: none (schedules belong to no run; the supervisor fires each occurrence at most once
    through the run it creates).
    """

    @abc.abstractmethod
    def put_schedule(self, job_id: str, data: bytes | None) -> None:
        """Write a scheduled job's definition durably, or delete it when ``data`` is None."""

    @abc.abstractmethod
    def list_schedules(self) -> dict[str, bytes]:
        """Every scheduled job's definition, by job id."""


class Artifacts(abc.ABC):
    """Large outputs addressed by their checksum, and the run's trace.

    Durability: an artifact is durable when its ref is returned and is checked against its SHA-256 when read. The
    trace is not fsync'd (observability only; recovery never reads it). Fencing: ``put_artifact`` is fenced, and
    the write happens under the same lock as the check, so a stale writer never adds an artifact.
    """

    @abc.abstractmethod
    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        """Store a large output durably; returns its ref. Same name and data twice is a no-op. Fenced."""

    @abc.abstractmethod
    def get_artifact(self, run_id: str, ref: str) -> bytes:
        """The bytes behind an artifact ref, checked against their checksum."""

    @abc.abstractmethod
    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        """Append trace events (observability; recovery never depends on them, so no fsync)."""

    @abc.abstractmethod
    def read_trace(self, run_id: str) -> Iterator[bytes]:
        """The trace events that pass their checksum."""


class BlobStat(NamedTuple):
    size: int  # stored bytes
    written: float  # when it was written or last stored again, on the store's ``blob_clock``


class Blobs(BlobReferences, abc.ABC):
    """Content-addressed blobs, store-wide: file versions and large payloads of every run, each kept once however
    many runs reference it (``safepoint.core.blobs`` packs and checks them; a run's log holds only references).

    Durability: ``put_blobs`` returns once every blob it was given is durable (fsync'd file and folder, or a
    committed transaction), so a log group appended after it never references a blob a crash can lose. A blob
    already stored is kept, never rewritten (its name is its content's). Fencing: none (a blob belongs to no run;
    one a stale writer adds is referenced by nothing and ``gc`` removes it). Instead, ``gc`` and writers exclude
    each other: a writer holds ``blobs_shared`` from its ``put_blobs`` to the append of the group that references
    them, and ``gc`` removes blobs only inside ``blobs_exclusive``, so it never removes a blob whose reference is
    on its way into a log. The bytes are opaque here: checking them against their hash is the reader's
    (``core.blobs.open_stored``); a backend only reports what it cannot read (``CorruptRecordError``).
    """

    def blob_name(self, digest: str) -> str:
        """The name the blob of content ``digest`` is kept under (an encrypted store's is keyed: see ``sealed``)."""
        return digest

    @abc.abstractmethod
    def put_blobs(self, blobs: Sequence[tuple[str, bytes]]) -> int:
        """Store ``(name, bytes)`` pairs durably; a name already there is kept as it is, its time of writing set
        to now (a reference to it is on its way: see ``blob_clock``). Returns the bytes written."""

    @abc.abstractmethod
    def get_blob(self, name: str) -> bytes | None:
        """The stored bytes of a blob, or None when the store does not hold it."""

    @abc.abstractmethod
    def list_blobs(self) -> dict[str, BlobStat]:
        """Every stored blob's name, stored size and time of writing (on ``blob_clock``)."""

    @abc.abstractmethod
    def blob_clock(self) -> float:
        """Now, on the clock ``list_blobs`` reports times of writing on. Taken by gc inside ``blobs_exclusive``: a
        blob written or stored again later shows this time or a later one, so gc leaves it (its reference may not
        have been in the logs gc read)."""

    @abc.abstractmethod
    def delete_blobs(self, names: Sequence[str]) -> int:
        """Remove blobs durably (a name not there is skipped); returns the stored bytes freed. Call it only inside
        ``blobs_exclusive``."""

    @abc.abstractmethod
    def blobs_shared(self) -> contextlib.AbstractContextManager[None]:
        """Held by a writer from ``put_blobs`` to the append that references them (milliseconds)."""

    @abc.abstractmethod
    def blobs_exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Held by ``gc`` while it removes blobs: no writer is between a ``put_blobs`` and its append meanwhile."""

    def quarantine_blob(self, name: str) -> bool:
        """Move a damaged blob out of the way, kept for a person (never deleted); whether there was one to move.
        A backend without a place for it keeps it where it is."""
        return False


PARTS: tuple[type[abc.ABC], ...] = (RunLog, Ownership, RestartCheckpoints, ControlChannel, Schedules, Artifacts, Blobs)


class Store(RunLog, Ownership, RestartCheckpoints, ControlChannel, Schedules, Artifacts, Blobs):
    """Every part, on one backend. Methods that write take the writer's ``Claim`` and check its generation."""

    url: str

    def local_dir(self) -> str | None:
        """The folder the store keeps on this machine, if any (a workspace capture must never look inside it)."""
        return None

    def scratch_dir(self, run_id: str) -> str | None:
        """A local folder for the run's workspace writes in flight, if the backend has one (else: beside the file)."""
        return None

    def log_mark(self, run_id: str) -> int:
        """The highest log seq a record kept beside the log says was durable (0: nothing says). A log that ends
        before it lost records at its end: recovery then treats the calls it no longer accounts for as uncertain."""
        return 0

    def create_claimed_run(
        self, run_id: str, header: bytes, holder: str, *, identity: RecoveryIdentity | None = None
    ) -> Claim:
        """``create_run``, then the run's first ``claim``: a backend may make both one commit (seed 003 §1: the
        generation is durable before its owner acts; a created run's first claim can share the creating commit)."""
        self.create_run(run_id, header)
        return self.claim(run_id, holder, identity=identity)

    def try_claim(self, run_id: str, holder: str) -> Claim | None:
        """``claim``, or None when a live owner holds the run or another claim is in the middle of taking it (a
        database skips a locked row rather than wait for it): how supervisors share work."""
        try:
            return self.claim(run_id, holder)
        except RunLockedError:
            return None

    def pass_runs(self, since: datetime | None) -> list[str]:
        """The runs a supervisor pass looks at: every run whose owner is held, crashed or never claimed, and every
        run posted to since ``since`` (the store's clock at the previous pass; None: ever). A backend that can
        answer from indexes returns only those; this default returns every run."""
        return self.list_runs()

    def occurrence_runs(self, job_id: str, separator: str) -> list[str]:
        """Run ids among which a scheduled job's latest occurrence is (default: every run)."""
        return self.list_runs()

    def wait_for_work(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for news of work (a control post, a schedule): True when some came. A
        database wakes its supervisors (LISTEN/NOTIFY); this default only sleeps (a pass finds the work)."""
        time.sleep(timeout)
        return False

    def clock(self) -> datetime:
        """The time leases and heartbeats are judged on: a shared store's own (a database's), so hosts' clocks
        never meet; this host's for a store only this host writes."""
        return datetime.now(UTC)

    def close(self) -> None:  # optional hook; most backends hold nothing
        """Release connections or handles."""

    # encryption at rest (``safepoint.store.sealed`` seals every payload; a backend only records that it does) ----
    sealed: bool = False  # opened through the encrypting layer, which checks the key against the record below

    def encryption_record(self) -> bytes | None:
        """What the store records of its encryption (``safepoint.store.crypt.Marker``), or None: not encrypted."""
        return None

    def record_encryption(self, data: bytes) -> None:
        """Record ``data`` as the store's encryption record, durably, before anything is written to a store that
        holds nothing yet; when one is there already it is kept (the caller reads it again and judges it)."""
        raise StoreError(f"store {self.url} cannot be encrypted: its backend records no encryption")

    def artifact_ref_for(self, run_id: str, name: str, data: bytes) -> str:
        """The ref ``put_artifact`` returns for ``name`` and ``data`` in ``run_id``, computed without storing
        anything (an encrypted store's ref is of the sealed bytes, which only it can compute)."""
        from safepoint.store.names import artifact_file, artifact_ref

        return artifact_ref(*artifact_file(name, data))

    def first_run_header(self) -> tuple[str, bytes] | None:
        """One run's id and stored header, if the store has a run (tells a store whose encryption record was lost
        from one that was never encrypted)."""
        runs = self.list_runs()
        return (runs[0], self.run_header(runs[0])) if runs else None

    def holds_runs(self) -> bool:
        """Whether anything was ever written to the store (a run or a schedule)."""
        return bool(self.list_runs() or self.list_schedules())
