"""The one contract every storage backend implements, and the records it moves.

A backend knows durability and nothing about agents: it keeps, per run, one ordered log of checksummed records
(ledger entries, file patches, messages, checkpoints, blobs, ...), large artifacts, a trace, and the run's
ownership (who may write, under which generation). Everything else (resume, rollback, gc) is built on these in
the core and the runtime. ``safepoint.store.conformance`` is the suite every backend must pass.

Why one ordered log per run rather than a file per record kind: one log is prefix-consistent, so a record's
presence proves every earlier record is present, and one fsync makes a whole group durable (the tool-start group
is one fsync, the tool-end group another). Separate ledger/history/checkpoint files would need an fsync each and
cross-file repair after a crash.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence

from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, LogRead, LogRecord, OwnerState, RecoveryIdentity, StoredDescriptor


class Store(abc.ABC):
    """The store interface. Methods that write take the writer's ``Claim`` and check its generation."""

    url: str

    # runs -------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def create_run(self, run_id: str, header: bytes) -> None:
        """Create an empty run; ``header`` is the encoded ``RunInfo``. Raises ``RunExistsError``."""

    @abc.abstractmethod
    def run_header(self, run_id: str) -> bytes:
        """The encoded ``RunInfo`` of a run. Raises ``RunNotFoundError``."""

    @abc.abstractmethod
    def list_runs(self) -> list[str]:
        """Run ids, oldest first."""

    # ownership --------------------------------------------------------------------------------------------
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
        """Tell other hosts the owner is alive (they presume it dead once its lease runs out)."""

    # the log ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def append(self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True) -> None:
        """Append records in order, atomically as a group with respect to the generation check.

        ``durable`` makes them survive power loss before returning (fsync or a committed transaction).
        Raises ``StaleGenerationError`` if ``claim`` is no longer the run's current generation.
        """

    @abc.abstractmethod
    def read_log(self, run_id: str) -> LogRead:
        """Every record that passes its checksum, in order, and a report of every one that does not."""

    # the restart checkpoint (seed 003 §1.2): one per agent, upserted, never appended -------------------------
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

    # terminal events (seed 003 §1.3) -----------------------------------------------------------------------
    @abc.abstractmethod
    def record_terminal_event(self, claim: Claim, event: RecoveryOwnerTerminalEvent) -> bool:
        """Record ``event`` durably unless one with its (recovery_class, owner_id, generation, event_type) exists;
        returns whether it was recorded. Fenced."""

    @abc.abstractmethod
    def terminal_events(self, run_id: str) -> list[RecoveryOwnerTerminalEvent]:
        """The run's terminal events, oldest first."""

    # the control channel: what people send a run (approve, submit, cancel, ...) without owning it ------------
    @abc.abstractmethod
    def post_control(self, run_id: str, data: bytes) -> int:
        """Append a control record durably (fsync'd, checksummed); returns its position (1, 2, ...).
        Not fenced: the sender holds no claim. Raises ``RunNotFoundError``."""

    @abc.abstractmethod
    def read_control(self, run_id: str) -> list[tuple[int, bytes]]:
        """Every intact control record with its position, in order (a torn tail is skipped, not loaded)."""

    # schedules (a store-wide table, not a run's) ------------------------------------------------------------
    @abc.abstractmethod
    def put_schedule(self, job_id: str, data: bytes | None) -> None:
        """Write a scheduled job's definition durably, or delete it when ``data`` is None."""

    @abc.abstractmethod
    def list_schedules(self) -> dict[str, bytes]:
        """Every scheduled job's definition, by job id."""

    # artifacts and trace ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        """Store a large output durably; returns its ref. Same name and data twice is a no-op."""

    @abc.abstractmethod
    def get_artifact(self, run_id: str, ref: str) -> bytes:
        """The bytes behind an artifact ref, checked against their checksum."""

    @abc.abstractmethod
    def trace(self, run_id: str, lines: Sequence[bytes]) -> None:
        """Append trace events (observability; recovery never depends on them, so no fsync)."""

    @abc.abstractmethod
    def read_trace(self, run_id: str) -> Iterator[bytes]:
        """The trace events that pass their checksum."""

    def local_dir(self) -> str | None:
        """The folder the store keeps on this machine, if any (a workspace capture must never look inside it)."""
        return None

    def scratch_dir(self, run_id: str) -> str | None:
        """A local folder for the run's workspace writes in flight, if the backend has one (else: beside the file)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook; most backends hold nothing
        """Release connections or handles."""
