"""``fsck``'s check of the store's blobs (``store.base.Blobs``): every blob a run's log references is there and
holds the content its hash names; every stored blob is whole.

A missing blob is reported with the run and record that reference it (nothing can bring it back; rollback past it
says so). A damaged one is reported and, with ``--repair``, quarantined (moved aside on the file store, flagged on
PostgreSQL), never deleted: the run then reads it as missing rather than as wrong bytes. In an encrypted store
without its key, blob names and contents say nothing, so only what the key opens is checked.
"""

from __future__ import annotations

import contextlib

import msgspec

from safepoint.core.blobs import open_stored
from safepoint.core.lost_content import needs_of
from safepoint.core.retention import lifecycle_records
from safepoint.errors import CorruptRecordError, StoreError
from safepoint.records import Blob
from safepoint.results import FsckProblem
from safepoint.store import view_index
from safepoint.store.base import Store

_blob_decoder = msgspec.json.Decoder(Blob)
FILE = "blobs"


def referenced_blobs(store: Store, run_id: str) -> dict[str, int]:
    """The digests of the store blobs a run's log references, each with the seq of its first reference."""
    found: dict[str, int] = {}
    for record in store.read_log(run_id).records:
        if record.kind == "blob":
            with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
                blob = _blob_decoder.decode(record.body)
                if blob.stored:
                    found.setdefault(blob.hash, record.seq)
    return found


def check_blobs(store: Store, runs: list[str], *, repair: bool, whole_store: bool) -> list[FsckProblem]:
    """Problems of the blobs ``runs`` reference (and, for the whole store, of every stored blob)."""
    problems: list[FsckProblem] = []
    checked: set[str] = set()

    lost: dict[int, str] = {}  # the problems of one run's blobs: index in ``problems`` -> digest

    def damaged(run_id: str, name: str, where: str, why: str) -> None:
        moved = repair and store.quarantine_blob(name)
        problems.append(
            FsckProblem(
                run_id=run_id,
                file=FILE,
                where=where,
                problem=why if why.startswith("blob ") else f"blob {name} is damaged: {why}",
                repair="quarantined (kept aside, never deleted); the run reads it as missing" if moved else "",
            )
        )

    for run_id in runs:
        try:
            references = referenced_blobs(store, run_id)
            _, pruned = lifecycle_records(store.read_control(run_id))
        except StoreError:
            continue  # the run's own check reports why its log cannot be read
        for digest, seq in references.items():
            name = store.blob_name(digest)
            checked.add(name)
            where = f"seq {seq}"
            try:
                stored = store.get_blob(name)
                if stored is None and digest in pruned:
                    continue  # freed by gc: no checkpoint it kept needs it (a rollback past them says so)
                if stored is None:
                    lost[len(problems)] = digest
                    problems.append(
                        FsckProblem(
                            run_id=run_id,
                            file=FILE,
                            where=where,
                            problem=(
                                f"blob {digest} is missing: the log references it, the store does not hold it "
                                "(quarantined by fsck, or removed); what needs it stops and says so: put it back "
                                "from blobs/quarantine or a backup"
                            ),
                        )
                    )
                    continue
                open_stored(stored, digest)
            except CorruptRecordError as exc:
                lost[len(problems)] = digest
                damaged(run_id, name, where, str(exc))
        _say_what_needs(store, run_id, problems, lost)
        lost.clear()
        problems += _check_marks(store, run_id, references, pruned, repair=repair)
    if whole_store:
        for name in store.list_blobs():
            if name in checked or not name.startswith("sha256:"):
                continue  # an encrypted store's names are keyed: only a reference says which content is meant
            try:
                open_stored(store.get_blob(name) or b"", name)
            except CorruptRecordError as exc:
                damaged("", name, "", str(exc))
    return problems


def _say_what_needs(store: Store, run_id: str, problems: list[FsckProblem], lost: dict[int, str]) -> None:
    """Each lost blob's problem names what the run kept in it, in the recovery note's words (``core.lost_content``):
    the run is read only when one of its blobs is lost."""
    if not lost:
        return
    try:
        needs = needs_of(view_index.read_view(store, view_index.header_info(store, run_id)), set(lost.values()))
    except StoreError:
        return  # the run's own check reports why its log cannot be read
    for index, digest in lost.items():
        if needs.get(digest):
            problem = problems[index]
            said = f"{problem.problem}; it held {', '.join(needs[digest])}"
            problems[index] = msgspec.structs.replace(problem, problem=said)


def _check_marks(
    store: Store, run_id: str, references: dict[str, int], pruned: frozenset[str], *, repair: bool
) -> list[FsckProblem]:
    """The store's marks (``store.blob_refs``) name this run for every blob its log references: a mark lost (a
    file deleted by hand, a backup that skipped empty files) would let ``forget`` of another run sharing the blob
    free it. ``--repair`` marks them again. Nothing to check while the marks are not complete (forget then reads
    every run)."""
    names = {store.blob_name(digest): seq for digest, seq in references.items() if digest not in pruned}
    if not names:
        return []
    marks = store.blob_referrers(names)
    if marks is None:
        return []
    unmarked = sorted(name for name in names if run_id not in marks.get(name, ()))
    if not unmarked:
        return []
    if repair:
        with store.blobs_shared():
            store.note_blob_refs(run_id, unmarked)
    return [
        FsckProblem(
            run_id=run_id,
            file="blob_refs",
            where=f"seq {min(names[name] for name in unmarked)}",
            problem=(
                f"{len(unmarked)} blob(s) the log references are not marked as this run's (first {unmarked[0]}): "
                "forgetting another run that shares them would free them; `safepoint fsck --repair` marks "
                "them again"
            ),
            repair="marked again" if repair else "",
        )
    ]
