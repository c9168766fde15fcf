"""Content a run keeps: content-addressed blobs (file versions, patches, internal results) and the recorded
observations of its calls (``result_ref``: ``log:N`` names a tool message, ``blob:D`` a blob).

Small content stays in the log as a ``Blob`` record with its bytes; larger content becomes a store-wide blob
(``core.blobs``), staged with the log group that references it and durable before it (``LogWriter.stage_blob``),
and the record is a reference. Reading either is ``get``, checked against the hash every time; a log written
before blobs left it holds only the first kind and reads as before.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from safepoint.core.blobs import INLINE_MAX, make_blob, open_blob, open_stored, stored_form
from safepoint.core.hashing import content_hash
from safepoint.core.lost_content import message_what
from safepoint.errors import CorruptRecordError, StoreError, TamperedRecordError
from safepoint.records import Blob, Message
from safepoint.store.base import Blobs

MISSING = "its blob is missing from the store: freed by `safepoint gc`, quarantined by fsck or removed by hand"
LOST_NOTE = "[safepoint] the content of this message was lost:"
UNLOGGED = "the log record that held it was damaged and moved to quarantine by fsck"


class LostContentError(StoreError):
    """Content the records name that the store no longer holds intact: missing, damaged, or (an encrypted store)
    failing to unseal. Only this is "lost": any other store error (unreachable, locked, full) stays an error,
    never read as a loss. ``why`` says which, in a few words a note can carry."""

    def __init__(self, message: str, digest: str, why: str) -> None:
        super().__init__(message)
        self.digest = digest
        self.why = why


class Content:
    def __init__(
        self,
        run_id: str,
        blobs: dict[str, Blob],
        message_records: dict[int, Message],
        stage: Callable[[msgspec.Struct], int],
        store: Blobs | None = None,
        stage_blob: Callable[[str, bytes], None] | None = None,
        staged_blob: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.blobs = blobs
        self.message_records = message_records  # every message the log holds, by its sequence number
        self._stage = stage  # the log writer's ``add``: a new blob is durable with the group it belongs to
        self._store = store  # where stored blobs are (None: every new blob stays in the log, as it used to)
        self._stage_blob = stage_blob  # the log writer's ``stage_blob``: durable before that group
        self._staged_blob = staged_blob  # a blob staged and not yet committed (the log writer holds it until then)
        self._stored_here: set[str] = set()  # the store blobs this session staged
        # What reading found lost, named as a person reads it (the recovery note, the doubt): filled as the
        # session reads (its history at open, a call's arguments or result), so finding it costs no extra pass.
        self.lost: dict[str, str] = {}
        self._intact: dict[str, bool] = {}  # store blobs read whole (or not) by ``intact``
        self.lost_args: dict[str, str] = {}  # call id -> what of its arguments (in the history) was lost, and why

    def __contains__(self, digest: str) -> bool:
        return digest in self.blobs

    def put(self, data: bytes, digest: str | None = None) -> str:
        digest = digest or content_hash(data)
        known = self.blobs.get(digest)
        if known is not None:
            # Stored by this session already (a large input's value, then the file it wrote): its reference is
            # durable or on its way, and gc keeps what a log references, so it is not written a second time.
            fresh = digest in self._stored_here
            if known.stored and not fresh and self._store is not None and self._stage_blob is not None:
                # Staged again (the store keeps one copy): a blob gc freed since, or fsck quarantined, comes back
                # before a new record references it, and gc sees it as just written.
                self._stage_blob(self._store.blob_name(digest), stored_form(data, digest)[1])
            return digest
        if self._store is None or self._stage_blob is None:
            blob = make_blob(data, digest)
        else:
            reference, stored = stored_form(data, digest)
            if len(stored) > INLINE_MAX:
                self._stage_blob(self._store.blob_name(digest), stored)
                self._stored_here.add(digest)
                blob = reference
            else:  # a reference would cost as much as the bytes: they stay in the log
                blob = Blob(hash=digest, codec=reference.codec, size=reference.size, data=stored.partition(b"\n")[2])
        self.blobs[digest] = blob
        self._stage(blob)
        return digest

    def get(self, digest: str) -> bytes:
        """The content, checked against its hash. ``LostContentError`` when it is gone or damaged."""
        blob = self.blobs.get(digest)
        if blob is None:
            raise LostContentError(f"content {digest} is not stored in run {self.run_id!r}", digest, UNLOGGED)
        try:
            if not blob.stored:
                return open_blob(blob)
            if self._store is None:
                raise StoreError(f"content {digest} of run {self.run_id!r} is a store blob and no store was given")
            name = self._store.blob_name(digest)
            stored = self._staged_blob(name) if self._staged_blob is not None else None
            if stored is None:
                stored = self._store.get_blob(name)
                if stored is None:
                    raise LostContentError(
                        f"content {digest} of run {self.run_id!r} is missing from the store's blobs: freed by "
                        "`safepoint gc` (no checkpoint it kept needs it), quarantined by fsck or removed by hand; "
                        "`safepoint fsck` says which",
                        digest,
                        MISSING,
                    )
            return open_stored(stored, digest)
        except CorruptRecordError as exc:
            # A damaged copy and one that fails to unseal (an encrypted store) are the same loss: the bytes the
            # hash names cannot be had (rejected: a different failure per store, which a resume would not expect).
            sealed = isinstance(exc, TamperedRecordError)
            why = "its stored copy fails authentication" if sealed else "its stored copy is damaged"
            raise LostContentError(f"content {digest} of run {self.run_id!r}: {exc}", digest, why) from exc

    def intact(self, digest: str, keep: Callable[[str, bytes], None] | None = None) -> bool:
        """Whether a store blob the records name can still be read whole (content kept in the log, or unknown
        here, is not this question's). Read once per digest per session: a rollback plans around what it finds
        lost instead of failing half way when it gets there (rejected: a stat, which misses a damaged copy and
        one that fails to unseal). ``keep``: given the bytes read, so the reader that asked needs no second read."""
        blob = self.blobs.get(digest)
        if blob is None or not blob.stored:
            return True
        known = self._intact.get(digest)
        if known is None:
            try:
                data = self.get(digest)
                known = True
                if keep is not None:
                    keep(digest, data)
            except LostContentError:
                known = False
            self._intact[digest] = known
        return known

    def found_lost(self, what: str, exc: LostContentError) -> str:
        """Keep ``what`` as lost (named once in the recovery note) and return the note a reader shows in its place."""
        self.lost.setdefault(what, exc.why)
        return f"{LOST_NOTE} {what} ({exc.why}); it was not re-created"

    def load_result(self, ref: str | None) -> str:
        """A call's recorded observation (or what became of it: a note when its content was lost)."""
        if ref and ref.startswith("blob:") and ref[5:] in self.blobs:
            try:
                return self.get(ref[5:]).decode(errors="replace")
            except LostContentError as exc:
                return self.found_lost(f"the recorded result {ref}", exc)
        if (large := self._large(ref)) is not None:
            return large
        return load_result(self.message_records, ref)

    def recorded(self, ref: str | None) -> str | None:
        """A call's recorded observation, None when damage lost it."""
        if ref and ref.startswith("blob:"):
            try:
                return self.get(ref[5:]).decode(errors="replace") if ref[5:] in self.blobs else None
            except LostContentError as exc:
                self.found_lost(f"the recorded result {ref}", exc)
                return None
        if (large := self._large(ref)) is not None:
            return None if large.startswith(LOST_NOTE) else large
        message = (
            self.message_records.get(int(ref[4:])) if ref and ref.startswith("log:") and ref[4:].isdigit() else None
        )
        return None if message is None else message.content

    def _large(self, ref: str | None) -> str | None:
        """The content of the tool message ``ref`` names when the log kept it as a blob (``core.large_values``)."""
        message = (
            self.message_records.get(int(ref[4:])) if ref and ref.startswith("log:") and ref[4:].isdigit() else None
        )
        if message is None or message.content_ref is None:
            return None
        try:
            return self.get(message.content_ref.removeprefix("blob:")).decode(errors="replace")
        except LostContentError as exc:
            return self.found_lost(message_what(message), exc)


def load_result(message_records: dict[int, Message], ref: str | None) -> str:
    """A call's recorded observation: ``log:N`` names the log record of its tool message. A record lost to
    damage is said so, never re-created by running the call again (promise 8)."""
    if not ref:
        return ""
    message = message_records.get(int(ref[4:])) if ref.startswith("log:") and ref[4:].isdigit() else None
    if message is None:
        return (
            f"[safepoint] this call finished, but its recorded output ({ref}) was lost to damage in the run's log; "
            "it was not run again"
        )
    return message.content
