"""The one contract every storage backend implements, and the records it moves.

A backend knows durability and nothing about agents: it keeps, per run, one ordered log of checksummed records
(ledger entries, file patches, messages, checkpoints, blobs, ...), large artifacts, a trace, and the run's
ownership (who may write, under which generation). Everything else (resume, rollback, gc) is built on these in
the core and the runtime. ``tidemark.store.conformance`` is the suite every backend must pass.

Why one ordered log per run rather than a file per record kind: one log is prefix-consistent, so a record's
presence proves every earlier record is present, and one fsync makes a whole group durable (the tool-start group
is one fsync, the tool-end group another). Separate ledger/history/checkpoint files would need an fsync each and
cross-file repair after a crash.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import Literal

import msgspec

ProblemKind = Literal["torn", "corrupt", "gap"]


class LogRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a run's log. ``body`` is the JSON of a record from ``tidemark.records``."""

    kind: str
    body: msgspec.Raw
    seq: int = 0
    gen: int = 0


class LogProblem(msgspec.Struct, frozen=True, kw_only=True):
    """A record that could not be trusted: reported, never loaded."""

    kind: ProblemKind
    position: int  # byte offset (files) or sequence number (databases)
    detail: str


class LogRead(msgspec.Struct, frozen=True, kw_only=True):
    records: list[LogRecord]
    problems: list[LogProblem]


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """The right to write one run, fenced by ``generation``: a write under an older generation is refused."""

    run_id: str
    owner_id: str
    generation: int


class OwnerState(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a run now, as stored."""

    owner_id: str
    generation: int
    pid: int
    host: str
    claimed_at: str
    heartbeat_at: str
    released: bool = False


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
    def claim(self, run_id: str, owner_id: str, *, takeover: bool = False) -> Claim:
        """Become the run's only writer under a new, higher generation.

        Raises ``RunLockedError`` while another owner is alive, unless ``takeover``.
        """

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
