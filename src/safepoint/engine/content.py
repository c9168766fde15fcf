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
from safepoint.errors import StoreError
from safepoint.records import Blob, Message
from safepoint.store.base import Blobs


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
        blob = self.blobs.get(digest)
        if blob is None:
            raise StoreError(f"content {digest} is not stored in run {self.run_id!r}")
        if not blob.stored:
            return open_blob(blob)
        if self._store is None:
            raise StoreError(f"content {digest} of run {self.run_id!r} is a store blob and no store was given")
        name = self._store.blob_name(digest)
        stored = self._staged_blob(name) if self._staged_blob is not None else None
        if stored is None:
            stored = self._store.get_blob(name)
            if stored is None:
                raise StoreError(
                    f"content {digest} of run {self.run_id!r} is missing from the store's blobs: freed by `safepoint "
                    "gc` (no checkpoint it kept needs it), quarantined by fsck or removed by hand; `safepoint fsck` "
                    "says which"
                )
        return open_stored(stored, digest)

    def load_result(self, ref: str | None) -> str:
        """A call's recorded observation (or what became of it)."""
        if ref and ref.startswith("blob:") and ref[5:] in self.blobs:
            return self.get(ref[5:]).decode(errors="replace")
        if (large := self._large(ref)) is not None:
            return large
        return load_result(self.message_records, ref)

    def recorded(self, ref: str | None) -> str | None:
        """A call's recorded observation, None when damage lost it."""
        if ref and ref.startswith("blob:"):
            return self.get(ref[5:]).decode(errors="replace") if ref[5:] in self.blobs else None
        if (large := self._large(ref)) is not None:
            return large
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
        return self.get(message.content_ref.removeprefix("blob:")).decode(errors="replace")


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
