"""The file store's marks of which runs reference each blob (``store.blob_refs``)::

    .agent-runtime/blob_refs/
    ├── sha256/ab/<64 hex>/<run id>   an empty file: that run's log references the blob
    └── complete                      every referencing run is marked (else forget reads every run)

A mark is created and its folder fsync'd before the log group that references the blob is appended (under the
run's lock, in ``append``'s fenced section), so a durable reference always has a durable mark. A folder per
blob, fanned out as the blobs are: looking up a blob's referrers lists one small folder, never the store.
Rejected: a list of blobs per run (forget would read every run's list), a count per blob (a crash between the
count and the log leaves it wrong with no way to tell which way).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence

from safepoint.core.blobs import check_name
from safepoint.durable import PRIVATE_FILE, fsync_dir, make_private_dirs

REFS = "blob_refs"
_BLOBS, _NOT_BLOBS = "blobs", ("quarantine", "lock", "clock")  # ``file_blobs``'s layout (it imports this)
COMPLETE = "complete"


class FileBlobRefs:
    """``BlobReferences`` over a folder; the file store mixes it in (``root``: the store's folder)."""

    root: str

    def _refs_folder(self, name: str) -> str:
        scheme, _, digest = check_name(name).partition(":")
        return os.path.join(self.root, REFS, scheme, digest[:2], digest)

    def _note_blob_refs_txn(self, handle: None, run_id: str, names: Sequence[str]) -> None:
        self.note_blob_refs(run_id, names)

    def note_blob_refs(self, run_id: str, names: Sequence[str]) -> None:
        if not names:
            return
        self._touch_blobs(names)
        top = os.path.join(self.root, REFS)
        if not os.path.isdir(top):
            # The store's first marks: complete from the start only if no blob is stored but the ones noted now
            # (any other may be referenced by a log written before marks were kept).
            fresh = _stored_names(self.root) <= set(names)
            make_private_dirs(top)
            if fresh:
                _touch(os.path.join(top, COMPLETE))
                fsync_dir(top)
            fsync_dir(self.root)
        self._mark(run_id, names)

    def _touch_blobs(self, names: Iterable[str]) -> None:
        """A reference is on its way to each blob: its time of writing moves to now (``blob_clock``), so a gc that
        read its clock before and the runs' logs before this group frees none of them. The log writer stored them
        again a moment ago (this costs a utime each), but a record copied from another run's log never passed
        through ``put_blobs`` (a LangGraph thread's copy): without this, gc freed the copy's blob as the source's
        old version. Rejected: refusing a reference to a blob not held, which would refuse a copy of a run whose
        old versions gc freed (they read as freed there too)."""
        for name in set(names):
            scheme, _, digest = check_name(name).partition(":")
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.utime(os.path.join(self.root, _BLOBS, scheme, digest[:2], digest), follow_symlinks=False)

    def _mark(self, run_id: str, names: Iterable[str]) -> None:
        folders: set[str] = set()
        top = os.path.join(self.root, REFS)
        for name in names:
            folder = self._refs_folder(name)
            mark = os.path.join(folder, run_id)
            if os.path.exists(mark):
                continue
            if not os.path.isdir(folder):
                make_private_dirs(folder)
                shard = os.path.dirname(folder)
                folders.update((shard, os.path.dirname(shard), top))
            _touch(mark)
            folders.add(folder)
        for folder in sorted(folders, key=len, reverse=True):  # a name before the folder holding it
            fsync_dir(folder)

    def blob_referrers(self, names: Iterable[str]) -> dict[str, frozenset[str]] | None:
        if not os.path.exists(os.path.join(self.root, REFS, COMPLETE)):
            return None
        return {name: frozenset(_names(self._refs_folder(name))) for name in names}

    def drop_blob_refs(self, run_id: str, names: Iterable[str]) -> None:
        folders: set[str] = set()
        for name in names:
            folder = self._refs_folder(name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, run_id))
                folders.add(folder)
        for folder in folders:
            fsync_dir(folder)
            with contextlib.suppress(OSError):  # still marked by another run: kept
                os.rmdir(folder)

    def complete_blob_refs(self, refs: Mapping[str, Iterable[str]]) -> None:
        top = os.path.join(self.root, REFS)
        if os.path.exists(os.path.join(top, COMPLETE)):
            return
        make_private_dirs(top)
        for name, runs in refs.items():
            for run_id in runs:
                self._mark(run_id, [name])
        _touch(os.path.join(top, COMPLETE))  # only once every mark above is durable
        fsync_dir(top)
        fsync_dir(self.root)

    def sweep_blob_refs(self) -> int:
        swept = 0
        top = os.path.join(self.root, REFS)
        runs = os.path.join(self.root, "runs")
        for scheme in _names(top):
            for shard in _names(os.path.join(top, scheme)):
                for digest in _names(os.path.join(top, scheme, shard)):
                    folder = os.path.join(top, scheme, shard, digest)
                    gone = [run for run in _names(folder) if not os.path.isdir(os.path.join(runs, run))]
                    for run_id in gone:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(folder, run_id))
                            swept += 1
                    if gone:
                        fsync_dir(folder)
                        with contextlib.suppress(OSError):
                            os.rmdir(folder)
        return swept


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE))


def _names(folder: str) -> list[str]:
    try:
        return [name for name in os.listdir(folder) if not name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _stored_names(root: str) -> set[str]:
    """Every stored blob's name (read once per store: at its first marks)."""
    top = os.path.join(root, _BLOBS)
    found: set[str] = set()
    for scheme in _names(top):
        if scheme in _NOT_BLOBS:
            continue
        for shard in _names(os.path.join(top, scheme)):
            found.update(f"{scheme}:{name}" for name in _names(os.path.join(top, scheme, shard)))
    return found
