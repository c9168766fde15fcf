"""The file store's schedules (``schedules/<job_id>.json``, one framed record each) and the reader of whole-file
framed records the store and ``fsck`` share. Kept apart from ``file_store`` so that module stays one concern."""

from __future__ import annotations

import abc
import contextlib
import os

from safepoint.durable import atomic_write, fsync_dir, make_private_dirs
from safepoint.errors import CorruptRecordError
from safepoint.records import StoredDescriptor
from safepoint.store.framing import check_line, frame
from safepoint.store.names import check_job_id


def read_descriptor(raw: bytes) -> StoredDescriptor:
    """A whole-file framed record as read: intact, or damaged with why (never raised, never trusted)."""
    if not raw.endswith(b"\n"):
        return StoredDescriptor(data=raw[9:], intact=False, detail=f"cut short: {len(raw)} bytes and no end")
    payload = check_line(raw.removesuffix(b"\n"))
    if payload is None:
        return StoredDescriptor(data=raw[9:-1], intact=False, detail="checksum does not match")
    return StoredDescriptor(data=payload, intact=True)


class FileSchedules(abc.ABC):
    root: str
    _schedules: str

    @abc.abstractmethod
    def _make_root(self) -> None: ...

    # schedules --------------------------------------------------------------------------------------------
    def put_schedule(self, job_id: str, data: bytes | None) -> None:
        path = os.path.join(self._schedules, f"{check_job_id(job_id)}.json")
        if data is None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                return
            fsync_dir(self._schedules)
            return
        if not os.path.isdir(self._schedules):
            self._make_root()
            make_private_dirs(self._schedules)
            fsync_dir(self.root)
        atomic_write(path, frame(data))

    def list_schedules(self) -> dict[str, bytes]:
        try:
            names = sorted(os.listdir(self._schedules))
        except FileNotFoundError:
            return {}
        found = {}
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue  # a write in flight (.tmp-*.part), or not ours
            path = os.path.join(self._schedules, name)
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:
                stored = read_descriptor(handle.read())
                if not stored.intact:
                    raise CorruptRecordError(
                        f"schedule {name[:-5]!r} ({path}) is damaged ({stored.detail}); write it again or delete it"
                    )
                found[name[:-5]] = stored.data
        return found
