"""The file store's scheduled jobs: one framed file per job under ``schedules/``, written whole and atomically
(temp file + fsync + rename + folder fsync), read back checked. A mixin of ``FileStore`` (store-wide, no run's)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from safepoint.durable import atomic_write, fsync_dir, make_private_dirs
from safepoint.errors import CorruptRecordError
from safepoint.store.framing import frame, read_descriptor
from safepoint.store.names import check_job_id


class FileSchedules:
    root: str
    _schedules: str

    _make_root: Callable[[], None]  # FileStore's: creates the store's root folder, private

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
