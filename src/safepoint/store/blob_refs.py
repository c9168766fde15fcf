"""Which runs reference each store blob, kept durably by the store: how ``forget RUN`` frees the blobs only that
run referenced while reading that run alone (not every run's log, as a scan of the store would).

A run's reference to a blob is noted by the store itself when the log group holding its ``Blob`` record is
appended: in the same fenced section, before the group (the file store: a mark file made durable first;
PostgreSQL: a row in the append's transaction). Every way a reference enters a log goes through ``append``
(the log writer, gc's whole versions, a LangGraph thread's copy), so none is missed; rejected: noting at
``put_blobs``, which a copied record never passes through. An encrypted store's backend cannot read a sealed
record, so the sealing layer notes the names before handing the group down.

Crash safety. A mark may outlive what it notes (a crash after the mark and before the group, a run deleted and
its marks not yet dropped): then a blob is kept that nothing needs, never the reverse, and ``gc`` (which reads
every log anyway) sweeps marks of runs that no longer exist and frees what no log references. A store written
before marks were kept (or whose first marks came while older blobs were there) has no *complete* set of
marks: ``blob_referrers`` answers None and ``forget`` reads every run, as before, then completes the marks from
what it read (so does ``gc``); from then on forget reads one run.

Concurrency: ``forget`` drops a run's marks and reads the others inside ``blobs_exclusive``; a writer appends a
group that references stored blobs inside ``blobs_shared`` (the log writer, gc's rebase), so no mark is on its
way while forget decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from safepoint.records import Blob, LogRecord

_blob_decoder = msgspec.json.Decoder(Blob)


def referenced_names(records: Sequence[LogRecord], name_of: Callable[[str], str]) -> list[str]:
    """The store blob names the group's ``Blob`` records reference (a sealed body, unreadable here, is skipped:
    the sealing layer notes those)."""
    names: list[str] = []
    for record in records:
        if record.kind != "blob":
            continue
        try:
            blob = _blob_decoder.decode(record.body)
        except msgspec.DecodeError:
            continue
        if blob.stored:
            names.append(name_of(blob.hash))
    return names


class BlobReferences:
    """The part of ``Blobs`` that says which runs reference a blob. This default keeps nothing: ``blob_referrers``
    answers None and callers read the runs' logs."""

    def note_blob_refs(self, run_id: str, names: Sequence[str]) -> None:
        """Record durably that ``run_id``'s log references ``names`` (before the group that does is appended)."""

    def blob_referrers(self, names: Iterable[str]) -> dict[str, frozenset[str]] | None:
        """The runs noted as referencing each name (an empty set: none), or None when the store's marks are not
        known to be complete (the caller then reads every run)."""
        return None

    def drop_blob_refs(self, run_id: str, names: Iterable[str]) -> None:
        """Remove ``run_id``'s marks on ``names`` durably (its run is deleted). Only inside ``blobs_exclusive``."""

    def complete_blob_refs(self, refs: Mapping[str, Iterable[str]]) -> None:
        """Note every (blob, run) of ``refs`` (read from every run's log), then record the marks as complete."""

    def sweep_blob_refs(self) -> int:
        """Remove the marks of runs that no longer exist (a crash between a run's deletion and the drop of its
        marks); how many. Only inside ``blobs_exclusive``."""
        return 0
