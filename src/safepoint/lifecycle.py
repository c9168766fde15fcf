"""A store's lifecycle: ``label`` a checkpoint to keep, ``gc`` what no kept checkpoint needs, ``forget`` a run.

The rules of what gc keeps are ``core.retention``'s; this module reads the runs, asks the rules, and removes.
(The engine is imported when a function runs: ``safepoint.api`` re-exports these, and the CLI starts fast.)

gc and the runs at work (a blob is written before the log group that references it, so a blob can be in the store
with its reference not yet in any log): gc reads the blob clock inside ``blobs_exclusive`` before it reads any
log (no writer is then between a blob's put and its append, so every reference put before that moment is in the
logs gc reads), and removes, again inside ``blobs_exclusive``, only blobs last written before that moment (a
writer that stores a blob again, deduplicated, marks it written now). A run another process owns right now is
kept whole. A run gc cannot read whole (a damaged log) may reference any blob: gc then removes nothing, and says
why. Before it removes a run's blobs, gc records on the run's control channel which ones and which checkpoints it
kept (``core.retention.PrunedRecord``): fsck does not report them as lost, and they are never taken for damage.

A label is a control record too (``core.retention.LabelRecord``): it is written without owning the run (a person
labels a run its agent is working in), durably and checksummed, and it only ever makes gc keep more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import msgspec

from safepoint.core.blobs import open_blob, open_stored, stored_form
from safepoint.core.hashing import content_hash
from safepoint.core.patches import apply_patch
from safepoint.core.retention import (
    DEFAULT_KEEP,
    LabelRecord,
    PrunedRecord,
    Retention,
    lifecycle_records,
    lifecycle_state,
    rebase_targets,
    rebuild_chain,
    retention,
    stored_references,
)
from safepoint.core.rollback import ABSENT, UNKNOWN
from safepoint.core.run_view import RunView
from safepoint.engine import failpoints
from safepoint.errors import RunLockedError, RunNotFoundError, StoreError, UnknownReferenceError
from safepoint.records import FilePatchEntry, LogRecord
from safepoint.store.base import BlobStat, Store
from safepoint.store.liveness import owner_alive
from safepoint.store.names import safe_url
from safepoint.store.ownership import now
from safepoint.store.sealed import unwrap

Progress = Callable[[int, int], None]  # (done, total) runs read
LABEL_MAX = 200
_encoder = msgspec.json.Encoder()


class Labelled(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    checkpoint_id: str
    name: str
    position: int  # its place on the run's control channel


class RunCollected(msgspec.Struct, frozen=True, kw_only=True):
    """What gc did (or would do) to one run."""

    run_id: str
    kept_whole: bool
    why_whole: str = ""
    kept_checkpoints: int
    pruned_checkpoints: list[str]
    blobs: int  # store blobs the run references
    freed_blobs: int  # of which gc removes (or would)


class Collected(msgspec.Struct, frozen=True, kw_only=True):
    """What ``gc`` freed, or with ``dry_run`` would free."""

    store: str
    dry_run: bool
    keep: int
    runs: list[RunCollected]
    freed_blobs: int
    freed_bytes: int
    orphan_blobs: int  # of the freed: blobs no run's log references (a crash between a put and its append, a
    #                    forgotten run)
    kept_blobs: int
    kept_bytes: int
    whole_versions: int = 0  # file versions stored whole at a run's oldest kept checkpoint, so what precedes it
    #                          is freed (counted in kept_blobs)
    swept: int = 0  # leftovers of interrupted writes and deletes removed (file store)
    refused: str = ""  # why nothing was removed, when gc could not read every run


class Forgotten(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    freed_blobs: int
    freed_bytes: int
    left: str = ""  # why its blobs were left to gc (the run is deleted all the same)


def label(store: Store, run_id: str, checkpoint_id: str, name: str, *, by: str = "user") -> Labelled:
    """Label a checkpoint (its id, or ``step:N``) so gc keeps it. The run need not be owned: the label is a
    control record."""
    from safepoint.engine.log_writer import stored_run_redactor
    from safepoint.engine.session import load_view
    from safepoint.report import checkpoint_for

    checkpoint_id = checkpoint_for(store, run_id, checkpoint_id)  # an id, or step:N
    if load_view(store, run_id).checkpoint(checkpoint_id) is None:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} is not in run {run_id!r}; see `safepoint checkpoints {run_id}`"
        )
    _, _, unreachable = lifecycle_state(store.read_control(run_id))
    if checkpoint_id in unreachable:  # a label keeps nothing gc already freed: said, never taken as kept
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} of run {run_id!r} was not kept by an earlier `safepoint gc` (what it "
            f"needs was freed), so a label cannot keep it; label one of `safepoint checkpoints {run_id}` still kept"
        )
    if not name.strip() or "\n" in name or len(name) > LABEL_MAX:
        # A label of megabytes would be read with every read of the run's control channel (each session's, gc's).
        # A control character is kept and shown inert (`cli.plain.visible`), as an earlier decision holds.
        shown = name if len(name) <= 80 else f"{name[:80]}... ({len(name)} characters)"
        raise UnknownReferenceError(f"a label is one line of up to {LABEL_MAX} characters, not {shown!r}")
    redact = stored_run_redactor(store, run_id)
    record = LabelRecord(checkpoint_id=checkpoint_id, name=redact.text(name), at=now(), by=redact.text(by))
    position = store.post_control(run_id, _encoder.encode(record))
    return Labelled(run_id=run_id, checkpoint_id=checkpoint_id, name=record.name, position=position)


def labels(store: Store, run_id: str) -> dict[str, list[str]]:
    """The run's labelled checkpoints and their names."""
    return lifecycle_records(store.read_control(run_id))[0]


def check_reachable(store: Store, run_id: str, checkpoint_id: str) -> None:
    """Refuse, before anything is recorded, a rollback or restore to a checkpoint gc did not keep."""
    _, _, unreachable = lifecycle_state(store.read_control(run_id))
    if checkpoint_id in unreachable:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} of run {run_id!r} was not kept by `safepoint gc` (what it needs was "
            f"freed); pick a later one in `safepoint checkpoints {run_id}`, or label checkpoints to keep before gc"
        )


def gc(store: Store, *, keep: int = DEFAULT_KEEP, dry_run: bool = False, progress: Progress | None = None) -> Collected:
    """Free the blobs no kept checkpoint of any run needs (``core.retention``), and those no run references."""
    return _collect(store, keep=max(keep, 0), dry_run=dry_run, progress=progress)


def forget(store: Store, run_id: str, *, force: bool = False) -> Forgotten:
    """Delete a run and the blobs no other run references. A run another process owns right now, or a subagent's
    run its unfinished parent answers for, is refused unless ``force`` (which fences that process off: its next
    write is refused). A scheduled occurrence's run leaves its occurrence fired in its job's definition."""
    from safepoint.engine.session import holder_id, load_view

    view = load_view(store, run_id)
    if not force:
        _refuse_answered_for(store, view)
    references = {store.blob_name(digest) for digest, blob in view.blobs.items() if blob.stored}
    try:
        claim = store.claim(run_id, holder_id(), takeover=force)
    except RunLockedError:
        owner = store.owner(run_id)
        where = f"live process {owner.pid} on {owner.host.rpartition('#')[0]}" if owner else "another process"
        raise RunLockedError(
            f"run {run_id!r} is owned by {where}; stop it first, or forget it anyway with --force"
        ) from None
    if view.info.scheduled is not None and view.info.job_id:  # its occurrence stays fired (rejected: refusing to
        from safepoint.supervisor.schedule import keep_fired  # forget it: tidying old occurrences is forget's use)

        keep_fired(store, view.info.job_id, view.info.scheduled.scheduled_for_ms)
    else:  # a run named as a job's occurrence counts as fired for the daemon (``schedule.last_fired``: run ids)
        from safepoint.supervisor.schedule import keep_fired, occurrence_of

        for job_id in store.list_schedules():
            if (at := occurrence_of(job_id, run_id)) is not None:
                keep_fired(store, job_id, at)
    store.delete_run(run_id, claim=claim)
    failpoints.hit("forget_run_deleted")
    try:
        freed = _free_forgotten(store, run_id, references)
        if freed is None:  # the store's marks are not complete: every run is read (and the marks completed)
            done = _collect(store, keep=None, dry_run=False, progress=None, only=references)
            freed = (done.freed_blobs, done.freed_bytes)
    except StoreError as exc:  # the run is gone: what it alone referenced is an orphan gc frees
        # (a writer stopped between its blob write and its append holds the blobs' lock; rejected: failing
        # here, which said nothing was done when the run was deleted)
        why = str(exc).splitlines()[0]
        return Forgotten(
            run_id=run_id, freed_blobs=0, freed_bytes=0, left=f"its blobs are left to `safepoint gc`: {why}"
        )
    return Forgotten(run_id=run_id, freed_blobs=freed[0], freed_bytes=freed[1])


def _free_forgotten(store: Store, run_id: str, references: set[str]) -> tuple[int, int] | None:
    """Free the blobs of a deleted run no other run references, from the store's marks (``store.blob_refs``):
    one run read, not the store. None when the marks are not complete. Inside ``blobs_exclusive``: no writer is
    between a blob's put and the append that marks it meanwhile, so a blob no mark names is referenced by no log
    (a crash before the free leaves blobs gc frees, never a referenced one freed)."""
    if not references:
        return 0, 0
    with store.blobs_exclusive():
        store.drop_blob_refs(run_id, references)
        referrers = store.blob_referrers(references)
        if referrers is None:
            return None
        failpoints.hit("forget_refs_dropped")
        freed = [store.delete_blobs([name]) for name, runs in sorted(referrers.items()) if not runs]
        return sum(1 for size in freed if size), sum(freed)  # one gc freed before is not counted again


UNFINISHED = frozenset({"running", "waiting_decision", "waiting_approval", "interrupted"})


def _refuse_answered_for(store: Store, view: RunView) -> None:
    """A subagent's run its unfinished parent answers for is its parent's evidence: forgotten, the parent's resume
    could not know what the child did. Refused (``--force`` forgets it anyway: the parent's resume then settles
    its spawn call as uncertain, never spawns it afresh; ``agent.subagents``)."""
    from safepoint.engine.session import load_view

    parent_id = view.info.parent_run_id
    if not parent_id:
        return
    try:
        parent = load_view(store, parent_id)
    except StoreError:  # the parent was forgotten first: nobody answers for this run any more
        return
    spawned = parent.spawned.get(view.info.parent_call_id or "")
    if parent.status in UNFINISHED and spawned is not None and spawned.child_run_id == view.info.run_id:
        raise RunLockedError(
            f"run {view.info.run_id!r} is a subagent its unfinished parent {parent_id!r} answers for (call "
            f"{spawned.call_id!r}); resume or close {parent_id!r} first, or forget it anyway with --force (the "
            "parent's resume then takes what the subagent did as unknown)"
        )


def _collect(
    store: Store,
    *,
    keep: int | None,
    dry_run: bool,
    progress: Progress | None,
    only: set[str] | None = None,
) -> Collected:
    """``keep`` None: keep every blob a run references (``forget``'s sweep of ``only``: the blobs it left)."""
    from safepoint.engine.session import load_view
    from safepoint.store.file_store import FileStore

    with store.blobs_exclusive():
        clock = store.blob_clock()
    runs = store.list_runs()
    sizes = store.list_blobs()
    needed: set[str] = set()
    referenced: set[str] = set()
    whole_versions = 0
    results: list[tuple[Retention, dict[str, str]]] = []  # each run's retention, and its prunable blobs by name
    planned: dict[str, int] = {}  # whole versions a dry run would store (name -> stored size): counted as kept
    refused = ""
    referrers: dict[str, set[str]] | None = None if store.blob_referrers(()) is not None else {}  # to complete
    for number, run_id in enumerate(runs):
        if progress is not None:
            progress(number, len(runs))
        try:
            view = load_view(store, run_id)
            marks, pruned = lifecycle_records(store.read_control(run_id))
            owner = store.owner(run_id)
        except (StoreError, msgspec.DecodeError) as exc:
            refused = refused or f"run {run_id!r} cannot be read ({str(exc).splitlines()[0]}); see `safepoint fsck`"
            continue
        if view.problems:
            refused = refused or f"run {run_id!r} has a damaged log; see `safepoint fsck {run_id}`"
        if referrers is not None:
            for digest, blob in view.blobs.items():
                if blob.stored:
                    referrers.setdefault(store.blob_name(digest), set()).add(run_id)
        live = owner is not None and not owner.released and owner_alive(owner)
        # What an earlier gc freed and the store does not hold again: the reader walks past it (so do the rules).
        freed_before = frozenset(digest for digest in pruned if store.blob_name(digest) not in sizes)
        if keep is None:  # every blob it references is kept
            kept = retention(view, keep=0, live=True)
        else:
            whole = live or bool(view.problems)
            kept = retention(view, keep=keep, labels=frozenset(marks), live=whole, gone=freed_before)
            if not kept.whole:
                kept = _rebased(
                    store,
                    view,
                    kept,
                    keep=keep,
                    labels=frozenset(marks),
                    dry_run=dry_run,
                    sizes=sizes,
                    planned=planned,
                    gone=freed_before,
                )
        whole_versions += len(kept.referenced - stored_references(view))
        names = {digest: store.blob_name(digest) for digest in kept.referenced}
        referenced.update(names[digest] for digest in kept.referenced - pruned)
        # What a kept checkpoint needs is kept even when an earlier gc freed it once: a run continued since (restored,
        # then resumed) stores a freed version again when a new change starts from it (rejected: skipping every
        # digest freed once, which freed it again under the new checkpoint).
        needed.update(names[digest] for digest in kept.needed)
        freeing = {names[digest]: digest for digest in kept.prunable - pruned}
        results.append((kept, freeing))
    if progress is not None:
        progress(len(runs), len(runs))
    if referrers is not None and not refused and not dry_run:  # every run read whole: forget reads one from now
        store.complete_blob_refs(referrers)
    stored = store.list_blobs()
    for name, size in planned.items():  # what the real gc would have stored by now (written after the clock)
        stored.setdefault(name, BlobStat(size, clock))
    candidates = {name for name, stat in stored.items() if name not in needed and stat.written < clock}
    if only is not None:
        candidates &= only
    if refused:
        candidates = set()
    done: list[RunCollected] = []
    prune: dict[str, tuple[list[str], list[str], list[str]]] = {}  # run -> (digests, checkpoints kept, not kept)
    for kept, freeing in results:
        freed = sorted(digest for name, digest in freeing.items() if name in candidates)
        if freed:
            prune[kept.run_id] = (freed, list(kept.kept_checkpoints), list(kept.pruned_checkpoints))
        done.append(
            RunCollected(
                run_id=kept.run_id,
                kept_whole=kept.whole,
                why_whole=kept.why_whole,
                kept_checkpoints=len(kept.kept_checkpoints),
                pruned_checkpoints=list(kept.pruned_checkpoints) if freed else [],
                blobs=len(kept.referenced),
                freed_blobs=len(freed),
            )
        )
    swept = 0
    freed_bytes = sum(stored[name].size for name in candidates)
    if not dry_run and candidates:
        unrecorded: set[str] = set()
        for run_id, (digests, kept_ids, unreachable) in prune.items():
            # Said before it is done: a crash between leaves a record of blobs still there, never the reverse.
            record = PrunedRecord(digests=digests, kept=kept_ids, at=now(), pruned_checkpoints=unreachable)
            try:
                store.post_control(run_id, _encoder.encode(record))
            except RunNotFoundError:  # a run deleted meanwhile: nothing left to tell
                pass
            except StoreError as exc:  # a full disk, a lock not let go: unsaid, so none of its blobs is freed
                # (rejected: going on, as for a deleted run, which freed blobs no record named: fsck said "lost")
                refused = refused or (
                    f"what it frees of run {run_id!r} could not be recorded ({str(exc).splitlines()[0]})"
                )
                unrecorded.add(run_id)
        failpoints.hit("gc_recorded")
        if unrecorded:
            # The runs recorded have their blobs freed as said (rejected: freeing nothing at all, which left their
            # records saying their checkpoints were freed while all was there: a label or a rollback refused).
            candidates -= {store.blob_name(digest) for run_id in unrecorded for digest in prune[run_id][0]}
            freed_bytes = sum(stored[name].size for name in candidates)
            done = [
                msgspec.structs.replace(run, pruned_checkpoints=[], freed_blobs=0)
                if run.run_id in unrecorded
                else msgspec.structs.replace(
                    run,
                    freed_blobs=sum(1 for name in freeing if name in candidates),
                    pruned_checkpoints=run.pruned_checkpoints,
                )
                for run, (_, freeing) in zip(done, results, strict=True)
            ]
    if not dry_run and candidates:
        with store.blobs_exclusive():
            still = store.list_blobs()  # one stored again since (a reference on its way) shows a later time
            # A run claimed since gc read it (a rollback or restore that checked its checkpoint before gc's record
            # was posted) keeps what gc meant to free of it: it may be reading those versions now.
            busy = {
                store.blob_name(digest) for run_id in prune if _owned_live(store, run_id) for digest in prune[run_id][0]
            }
            gone = sorted(
                name for name in candidates if name in still and still[name].written < clock and name not in busy
            )
            freed_bytes = store.delete_blobs(gone)
            backend = unwrap(store)[0]
            swept = store.sweep_blob_refs()  # marks of runs deleted by a forget a crash cut short
            if isinstance(backend, FileStore):
                swept += backend.sweep_blob_temporaries() + backend.sweep_deleted()
        candidates = set(gone)
    kept_names = set(stored) - candidates
    return Collected(
        store=safe_url(store.url),
        dry_run=dry_run,
        keep=keep if keep is not None else 0,
        runs=done,
        freed_blobs=len(candidates),
        freed_bytes=freed_bytes,
        orphan_blobs=len(candidates - referenced),
        kept_blobs=len(kept_names),
        kept_bytes=sum(stored[name].size for name in kept_names),
        whole_versions=0 if refused else whole_versions,
        swept=swept,
        refused=refused,
    )


def _owned_live(store: Store, run_id: str) -> bool:
    try:
        owner = store.owner(run_id)
    except StoreError:
        return False
    return owner is not None and not owner.released and owner_alive(owner)


def _rebased(
    store: Store,
    view: RunView,
    kept: Retention,
    *,
    keep: int,
    labels: frozenset[str],
    dry_run: bool,
    sizes: dict[str, BlobStat],
    planned: dict[str, int],
    gone: frozenset[str],
) -> Retention:
    """The run's retention once the versions at its oldest kept checkpoint are stored whole (``core.retention.
    rebase_targets``): then the patches and versions before it are freed. The whole versions are blobs, put
    before the ``Blob`` references appended to the run's log under a claim of its own (so the reader's rebuild
    stops there, as the rules assume), and only when they free more than they take (``sizes``: the stored blobs).
    Without them, or when the run cannot be claimed or a version rebuilt,
    ``kept`` stands: it frees less, never what a kept checkpoint reads."""
    chains = {}
    for index, digest in rebase_targets(view, keep=keep, labels=labels, gone=gone):
        chain = rebuild_chain(view, digest, index, gone)
        if chain is not None:
            chains[digest] = chain
    if not chains:
        return kept
    rebased = retention(view, keep=keep, labels=labels, rebased=frozenset(chains), gone=gone)
    freed = rebased.prunable - kept.prunable
    if not freed:
        return kept
    try:
        forms = {digest: stored_form(_rebuild(store, view, digest, chain), digest) for digest, chain in chains.items()}
    except (StoreError, ValueError):
        return kept
    if sum(sizes.get(store.blob_name(digest), BlobStat(0, 0)).size for digest in freed) <= sum(
        len(stored) for _, stored in forms.values()
    ):
        return kept  # the whole versions would take as much as they free (small edits of one big file)
    if dry_run:
        planned.update((store.blob_name(digest), len(stored)) for digest, (_, stored) in forms.items())
        return rebased
    from safepoint.engine.session import holder_id

    try:
        claim = store.claim(view.info.run_id, holder_id())
    except StoreError:
        return kept
    try:
        records = [
            LogRecord(
                kind="blob",
                body=msgspec.Raw(_encoder.encode(reference)),
                seq=view.last_seq + number,
                gen=claim.generation,
            )
            for number, (reference, _) in enumerate(forms.values(), start=1)
        ]
        with store.blobs_shared():
            store.put_blobs([(store.blob_name(digest), stored) for digest, (_, stored) in forms.items()])
            store.append(claim, records)
        failpoints.hit("gc_rebased")
    except StoreError:
        return kept
    finally:
        with contextlib.suppress(StoreError):
            store.release(claim)
    return rebased


def _rebuild(store: Store, view: RunView, digest: str, chain: list[FilePatchEntry]) -> bytes:
    """Version ``digest`` rebuilt as the reader does: the chain's base, then its patches, each checked."""

    def read(wanted: str) -> bytes:
        blob = view.blobs[wanted]
        if not blob.stored:
            return open_blob(blob)
        stored = store.get_blob(store.blob_name(wanted))
        if stored is None:
            raise StoreError(f"blob {wanted} is missing")
        return open_stored(stored, wanted)

    oldest = chain[-1] if chain else None
    data = b"" if oldest is None or oldest.before_hash in (ABSENT, UNKNOWN) else read(oldest.before_hash)
    if oldest is None:
        data = read(digest)
    for patch in reversed(chain):
        data = apply_patch(data, read(patch.patch_ref[5:]))
        if content_hash(data) != patch.after_hash:
            raise StoreError(f"the patch for {patch.path} does not reproduce its result")
    if content_hash(data) != digest:
        raise StoreError(f"version {digest} does not rebuild")
    return data
