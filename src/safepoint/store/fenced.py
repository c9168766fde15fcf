"""What every backend does the same way, said once: ownership (claim, close, release, heartbeat) and each fenced
write as "hold the run's lock, check the generation, write, let go".

A backend supplies the critical section (``_owner_section``: a flock and ``owner.json``; a transaction and the
owner row ``FOR UPDATE``) and the raw writes inside it (the ``_txn`` hooks, which run only inside that section
and take its handle), after dbos-transact's system database, whose backends override a few hooks. The rules a
section applies (who may claim, what a stale writer is) live in ``safepoint.store.ownership``.

Why the write happens inside the section and not after it: a check that lets go of the lock before writing lets a
takeover slip in between, and the stale write then lands under the new owner (promise 6).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

import msgspec

from safepoint.errors import StoreError
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, LogRecord, OwnerState, RecoveryIdentity
from safepoint.store.base import Store
from safepoint.store.blob_refs import referenced_names
from safepoint.store.names import artifact_file, artifact_ref, checked_artifact, parse_artifact_ref
from safepoint.store.ownership import check_current, check_event, claim_of, closed_owner, next_owner, now

Handle = TypeVar("Handle")  # what a critical section hands its hooks: a connection in a transaction, or nothing


def fork_error(run_id: str, seq: int, last: int | None) -> StoreError:
    """A second writer of one generation appended first: the caller's view of the log is out of date."""
    end = f"the log ends at {last}" if last is not None else "that seq is already in the log"
    return StoreError(
        f"run {run_id!r}: append at seq {seq} but {end}; "
        "another writer slipped in; resume the run to continue from what is stored"
    )


class FencedStore(Store, Generic[Handle]):
    """``Store`` with ownership and the fenced writes implemented once over a backend's hooks."""

    shown: str  # the store's URL as messages show it (no password)

    # the hooks ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _owner_section(
        self, run_id: str, *, claiming: bool = False, durable: bool = True
    ) -> contextlib.AbstractContextManager[tuple[Handle, OwnerState | None]]:
        """Hold the run's write lock (and transaction) for the ``with`` body; yield the handle and the owner record
        as stored. ``claiming``: the run must exist, and a lock stuck in another process is waited for a bounded
        time (``CLAIM_LOCK_TIMEOUT``). ``durable=False``: the section's writes may skip their flush."""

    @abc.abstractmethod
    def _write_owner_txn(self, handle: Handle, run_id: str, state: OwnerState) -> None:
        """Replace the owner record durably."""

    @abc.abstractmethod
    def _log_end_txn(self, handle: Handle, claim: Claim) -> int:
        """The seq of the log's last record (0 when empty)."""

    @abc.abstractmethod
    def _append_txn(self, handle: Handle, claim: Claim, records: Sequence[LogRecord], *, durable: bool) -> None:
        """Write records that continue the log, as one group (fsync'd or committed when ``durable``)."""

    @abc.abstractmethod
    def _put_restart_checkpoint_txn(self, handle: Handle, run_id: str, data: bytes) -> None:
        """Replace the run's restart checkpoint durably and atomically."""

    @abc.abstractmethod
    def _delete_restart_checkpoint_txn(self, handle: Handle, run_id: str) -> None:
        """Remove the run's restart checkpoint durably (no-op if none)."""

    @abc.abstractmethod
    def _add_terminal_event_txn(self, handle: Handle, run_id: str, event: RecoveryOwnerTerminalEvent) -> bool:
        """Record the event durably unless its key is taken; whether it was recorded."""

    @abc.abstractmethod
    def _put_artifact_txn(self, handle: Handle, run_id: str, filename: str, digest: str, data: bytes) -> None:
        """Store the artifact durably under ``filename`` unless it is there already."""

    @abc.abstractmethod
    def _delete_run_txn(self, handle: Handle, run_id: str) -> None:
        """Remove the run's records durably, at once (the section's lock is held)."""

    def _after_delete(self, run_id: str) -> None:
        """Work left once the removal is durable (files renamed aside are removed here; their loss is harmless)."""

    @abc.abstractmethod
    def _artifact_bytes(self, run_id: str, filename: str) -> bytes | None:
        """The stored bytes of an artifact, or None. Raises ``RunNotFoundError``."""

    # ownership ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _fenced(self, claim: Claim, *, durable: bool = True) -> Iterator[tuple[Handle, OwnerState]]:
        """The critical section of a write by ``claim``: entered only while the claim is the current generation."""
        with self._owner_section(claim.run_id, durable=durable) as (handle, current):
            if current is None and (gone := self._removed(claim.run_id)) is not None:
                raise gone  # not "taken over": nobody else owns it, the run's records are gone
            yield handle, check_current(claim, current)

    def _removed(self, run_id: str) -> StoreError | None:
        """The error to stop with when the run's records were removed under its owner (a command deleted the
        store); None while they are there. A backend whose records cannot vanish keeps this default."""
        return None

    def claim(
        self,
        run_id: str,
        holder: str,
        *,
        takeover: bool = False,
        identity: RecoveryIdentity | None = None,
        reopen: bool = False,
    ) -> Claim:
        with self._owner_section(run_id, claiming=True) as (handle, current):
            state = next_owner(run_id, current, holder, takeover=takeover, identity=identity, reopen=reopen)
            self._write_owner_txn(handle, run_id, state)
        return claim_of(run_id, state)

    def close_owner(self, claim: Claim, terminal_status: str) -> None:
        with self._fenced(claim) as (handle, current):
            self._write_owner_txn(handle, claim.run_id, closed_owner(current, terminal_status))

    def release(self, claim: Claim) -> None:
        with self._owner_section(claim.run_id) as (handle, current):
            # Not fenced: a stale holder's release is a no-op, never an error (it is how a fenced-off process ends).
            if current is not None and current.generation == claim.generation:
                released = msgspec.structs.replace(current, released=True, heartbeat_at=now())
                self._write_owner_txn(handle, claim.run_id, released)

    def heartbeat(self, claim: Claim) -> None:
        with self._fenced(claim) as (handle, current):
            self._write_owner_txn(handle, claim.run_id, msgspec.structs.replace(current, heartbeat_at=now()))

    # fenced writes --------------------------------------------------------------------------------------------
    def append(
        self, claim: Claim, records: Sequence[LogRecord], *, durable: bool = True, summary: bytes | None = None
    ) -> None:
        if not records:
            return
        with self._fenced(claim, durable=durable) as (handle, _):
            last = self._log_end_txn(handle, claim)
            if records[0].seq != last + 1:
                raise fork_error(claim.run_id, records[0].seq, last)
            if names := referenced_names(records, self.blob_name):  # marked before the group (store.blob_refs)
                self._note_blob_refs_txn(handle, claim.run_id, names)
            self._append_txn(handle, claim, records, durable=durable)
            if summary is not None:
                self._put_summary_txn(handle, claim, records[-1].seq, summary)

    def _note_blob_refs_txn(self, handle: Handle, run_id: str, names: Sequence[str]) -> None:
        """Mark, durably, that the run's log is about to reference these blobs (``store.blob_refs``). The default
        keeps no marks."""

    def put_view_snapshot(self, claim: Claim, data: bytes, *, seq: int) -> None:
        with self._fenced(claim) as (handle, _):
            self._put_view_snapshot_txn(handle, claim.run_id, data, seq)

    def _put_view_snapshot_txn(self, handle: Handle, run_id: str, data: bytes, seq: int) -> None:
        """Keep the run's view snapshot durably and atomically (``store.log_after.frame_snapshot``); the default
        keeps none."""

    def _put_summary_txn(self, handle: Handle, claim: Claim, seq: int, summary: bytes) -> None:
        """Keep ``summary``, stamped with the log's end (``seq``, the group just appended), beside the log. The
        default keeps nothing (``read_summary`` then never finds one, and readers read the log)."""

    def upsert_restart_checkpoint(self, claim: Claim, data: bytes) -> None:
        with self._fenced(claim) as (handle, _):
            self._put_restart_checkpoint_txn(handle, claim.run_id, data)

    def delete_restart_checkpoint(self, claim: Claim) -> None:
        with self._fenced(claim) as (handle, _):
            self._delete_restart_checkpoint_txn(handle, claim.run_id)

    def record_terminal_event(self, claim: Claim, event: RecoveryOwnerTerminalEvent) -> bool:
        with self._fenced(claim) as (handle, current):
            check_event(claim.run_id, event, current)
            return self._add_terminal_event_txn(handle, claim.run_id, event)

    def put_artifact(self, claim: Claim, name: str, data: bytes) -> str:
        filename, digest = artifact_file(name, data)
        with self._fenced(claim) as (handle, _):
            self._put_artifact_txn(handle, claim.run_id, filename, digest, data)
        return artifact_ref(filename, digest)

    def delete_run(self, run_id: str, *, claim: Claim | None = None, force: bool = False) -> None:
        if claim is None and not force:
            raise StoreError(
                f"run {run_id!r}: deleting a run takes its current claim or an explicit force (nobody acts for it)"
            )
        if claim is not None and claim.run_id != run_id:
            raise StoreError(f"run {run_id!r}: the claim given is for run {claim.run_id!r}")
        with self._owner_section(run_id, claiming=True) as (handle, current):
            if claim is not None:
                check_current(claim, current)
            self._delete_run_txn(handle, run_id)
        self._after_delete(run_id)

    def get_artifact(self, run_id: str, ref: str) -> bytes:
        filename, digest = parse_artifact_ref(ref)
        return checked_artifact(run_id, filename, digest, self._artifact_bytes(run_id, filename), self.shown)
