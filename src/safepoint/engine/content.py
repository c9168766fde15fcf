"""Content a run keeps: content-addressed blobs (file versions, patches, internal results) and the recorded
observations of its calls (``result_ref``: ``log:N`` names a tool message, ``blob:D`` a blob)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from safepoint.core.blobs import make_blob, open_blob
from safepoint.core.hashing import content_hash
from safepoint.errors import StoreError
from safepoint.records import Blob, Message


class Content:
    def __init__(
        self,
        run_id: str,
        blobs: dict[str, Blob],
        message_records: dict[int, Message],
        stage: Callable[[msgspec.Struct], int],
    ) -> None:
        self.run_id = run_id
        self.blobs = blobs
        self.message_records = message_records  # every message the log holds, by its sequence number
        self._stage = stage  # the log writer's ``add``: a new blob is durable with the group it belongs to

    def __contains__(self, digest: str) -> bool:
        return digest in self.blobs

    def put(self, data: bytes, digest: str | None = None) -> str:
        digest = digest or content_hash(data)
        if digest not in self.blobs:
            blob = make_blob(data, digest)
            self.blobs[digest] = blob
            self._stage(blob)
        return digest

    def get(self, digest: str) -> bytes:
        blob = self.blobs.get(digest)
        if blob is None:
            raise StoreError(f"content {digest} is not stored in run {self.run_id!r}")
        return open_blob(blob)

    def load_result(self, ref: str | None) -> str:
        """A call's recorded observation (or what became of it)."""
        if ref and ref.startswith("blob:") and ref[5:] in self.blobs:
            return self.get(ref[5:]).decode(errors="replace")
        return load_result(self.message_records, ref)

    def recorded(self, ref: str | None) -> str | None:
        """A call's recorded observation, None when damage lost it."""
        if ref and ref.startswith("blob:"):
            return self.get(ref[5:]).decode(errors="replace") if ref[5:] in self.blobs else None
        message = (
            self.message_records.get(int(ref[4:])) if ref and ref.startswith("log:") and ref[4:].isdigit() else None
        )
        return None if message is None else message.content


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
