"""What ``safepoint gc`` keeps of a run: the rules, with no I/O (records in, decisions out).

A run's store blobs are its file versions, patches and large payloads (``core.blobs``). Once a run is finished,
most of them serve only a rollback to an old checkpoint; gc frees those, and keeps:

- the latest ``keep`` checkpoints at step boundaries (``before_step``, ``after_step``; a run with none: its
  latest ``keep`` checkpoints), the latest complete checkpoint, every checkpoint a person labelled (``safepoint
  label``), and every checkpoint whose files are those of one of these or later (a rollback there reads nothing
  older);
- for each kept checkpoint, what a rollback to it reads: the content of every file the run changed after it, as
  the reader rebuilds it (walking back along the patches to the first version the run stored: ``FileChanges.
  _version``), and the agent's versions a conflict would offer;
- everything a conflict, the ledger (a call's recorded result, a content argument kept as a patch, a rollback's
  or resolution's journal) or a before-state of a call without a patch (an uncertain call) names; a large value
  of a call's input or of a message (``core.large_values``) as long as the run is kept, whatever its checkpoints.

An unfinished run (not completed, failed, cancelled or closed) keeps everything: its resume, its uncertain calls
and its conflicts may need any of it, and it is not gc's to judge. So does a run another process owns right now.
A blob no run's log references (a crash between a blob's write and its log group, a run forgotten) is freed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

from safepoint.core.cut_short import cut_short
from safepoint.core.large_values import references
from safepoint.core.rollback import ABSENT, UNKNOWN
from safepoint.core.run_view import CheckpointAt, RunView
from safepoint.records import FilePatchEntry

FINISHED = frozenset({"completed", "failed", "cancelled", "closed"})
STEP_BOUNDARIES = frozenset({"before_step", "after_step"})
DEFAULT_KEEP = 3
_REF = re.compile(rb"blob:(sha256:[0-9a-f]{64})")
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Retention:
    """What a run keeps: its checkpoints (ids) and the store blobs (digests) they need, of all it references."""

    run_id: str
    referenced: frozenset[str]  # the store blobs the run's log references
    needed: frozenset[str]
    kept_checkpoints: tuple[str, ...]
    pruned_checkpoints: tuple[str, ...]
    whole: bool  # kept whole (unfinished, or owned by a live process): nothing of it is pruned
    why_whole: str = ""

    @property
    def prunable(self) -> frozenset[str]:
        return self.referenced - self.needed


def stored_references(view: RunView) -> frozenset[str]:
    """The digests of the store blobs the run's log references (inline blobs live and die with the log)."""
    return frozenset(digest for digest, blob in view.blobs.items() if blob.stored)


def retention(
    view: RunView,
    *,
    keep: int,
    labels: frozenset[str] = frozenset(),
    live: bool = False,
    rebased: frozenset[str] = frozenset(),
    gone: frozenset[str] = frozenset(),
) -> Retention:
    """What ``view``'s run keeps under the policy above. ``labels``: the checkpoint ids people labelled; ``live``:
    another process owns the run right now; ``rebased``: versions gc stores whole for it (``rebase_targets``);
    ``gone``: blobs an earlier gc freed that the store does not hold again, which the reader walks past as it
    does (``engine.file_changes``: neither a base nor a patch to rebuild from)."""
    referenced = stored_references(view) | rebased
    ids = tuple(at.checkpoint.checkpoint_id for at in view.checkpoints)
    if live or view.status not in FINISHED:
        why = "another process owns it right now" if live else f"it is {view.status}, not finished"
        return Retention(view.info.run_id, referenced, referenced, ids, (), whole=True, why_whole=why)
    # A finished run is never resumed, so a rollback a crash cut short on it is finished only by the command
    # ``explain`` names (``core.cut_short``): what it rolls back to stays until then (rejected: keeping its target
    # checkpoint alone, which the half-done rollback's own file versions may not be in).
    unfinished = cut_short(view.info.run_id, view.ledger.values())
    if unfinished:
        why = f"a rollback a crash cut short is unfinished (`{unfinished[0].fix}` finishes it)"
        return Retention(view.info.run_id, referenced, referenced, ids, (), whole=True, why_whole=why)
    kept = _kept_checkpoints(view, max(keep, 0), labels)
    since = min((at.checkpoint.patches_len for at in kept), default=len(view.patches))
    needed = set(_named_elsewhere(view, since)) & referenced
    if kept:
        needed |= _for_rollback(view, since, referenced, (frozenset(view.blobs) - gone) | rebased, gone - rebased)
    kept_ids = {at.checkpoint.checkpoint_id for at in kept}
    return Retention(
        view.info.run_id,
        referenced,
        frozenset(needed),
        tuple(i for i in ids if i in kept_ids),
        tuple(i for i in ids if i not in kept_ids),
        whole=False,
    )


def rebase_targets(
    view: RunView, *, keep: int, labels: frozenset[str] = frozenset(), gone: frozenset[str] = frozenset()
) -> list[tuple[int, str]]:
    """The versions to store whole so the oldest kept checkpoint's files need nothing older: a run keeps a file's
    later versions as patches against the earlier ones, and without a whole version at the boundary a rollback
    there rebuilds it from the run's first version, every patch in between, so nothing could be freed. Each as
    ``(index of the first patch after the boundary that changes the file, the version before it)``; a version
    stored already, absent or never captured is not one (nor, for an unfinished run, anything)."""
    if view.status not in FINISHED:
        return []
    kept = _kept_checkpoints(view, max(keep, 0), labels)
    if not kept:
        return []
    since = min(at.checkpoint.patches_len for at in kept)
    seen: set[str] = set()
    targets = []
    for index in range(since, len(view.patches)):
        patch = view.patches[index]
        if patch.path in seen:
            continue
        seen.add(patch.path)
        stored = patch.before_hash in view.blobs and patch.before_hash not in gone
        if not stored and patch.before_hash not in (ABSENT, UNKNOWN):
            targets.append((index, patch.before_hash))
    return targets


def rebuild_chain(
    view: RunView, digest: str, before: int, gone: frozenset[str] = frozenset()
) -> list[FilePatchEntry] | None:
    """How the reader rebuilds version ``digest`` from the patches before index ``before``: the patches to apply,
    oldest last, ending at a version the log holds a blob of (the first's ``before_hash``) or at nothing (an
    absent before-state). None when the chain ends elsewhere (in git, or not recorded)."""
    producers: dict[str, list[int]] = {}
    for position, entry in enumerate(view.patches):
        producers.setdefault(entry.after_hash, []).append(position)
    chain: list[FilePatchEntry] = []
    while digest not in view.blobs or digest in gone:
        index = next((i for i in producers.get(digest, ()) if i < before and _usable(view.patches[i], gone)), None)
        if index is None:
            return None
        patch = view.patches[index]
        chain.append(patch)
        if patch.before_hash in (ABSENT, UNKNOWN):
            break
        digest, before = patch.before_hash, index
    return chain


def _kept_checkpoints(view: RunView, keep: int, labels: frozenset[str]) -> list[CheckpointAt]:
    complete = [at for at in view.checkpoints if at.complete]
    # A run driven call by call (the library's own loop) may have no step boundary: its checkpoints count then.
    boundaries = [at for at in complete if at.checkpoint.kind in STEP_BOUNDARIES] or complete
    chosen = boundaries[-keep:] if keep else []
    named = labels | _named_ids(view)
    chosen += [at for at in view.checkpoints if at.checkpoint.checkpoint_id in named]
    newest_complete = view.latest_complete_checkpoint()
    if newest_complete is not None:
        chosen.append(newest_complete)
    # Every checkpoint whose files are those of a chosen one or later is kept too: a rollback there reads nothing
    # the chosen ones do not (the file versions from the oldest of them on).
    since = min((at.checkpoint.patches_len for at in chosen), default=len(view.patches) + 1)
    chosen_ids = {at.checkpoint.checkpoint_id for at in chosen}
    return [
        at for at in view.checkpoints if at.checkpoint.patches_len >= since or at.checkpoint.checkpoint_id in chosen_ids
    ]


def _named_ids(view: RunView) -> frozenset[str]:
    """Checkpoints the log itself still points at: a restore's target (a later resume rebuilds from there)."""
    return frozenset(rewind.checkpoint_id for rewind in view.restores if rewind.checkpoint_id)


def _named_elsewhere(view: RunView, since: int) -> set[str]:
    """Blobs the ledger, the conflicts and the before-states of calls without a patch name: kept, except the
    content arguments of settled calls whose changes all precede the oldest kept checkpoint (``since``): a
    rollback past them is gone, no resume re-runs a settled call, and its argument is the file patch that goes
    with them (only a compensation of that old call would read it, and say it is gone)."""
    old = {patch.tool_call_id for patch in view.patches[:since]} - {p.tool_call_id for p in view.patches[since:]}
    found: set[str] = set()
    settled = {call_id for call_id, entry in view.ledger.items() if entry.status in ("succeeded", "failed")}
    for entry in view.ledger_entries:
        if entry.call_id in old and entry.call_id in settled:
            if entry.result_ref:
                found.update(match.decode() for match in _REF.findall(entry.result_ref.encode()))
            # A large value of its input (``core.large_values``) is the input itself, not a file's history: kept
            # as long as the entry is, for explain, the ui and a compensation to read.
            found.update(references(entry.input))
            continue
        found.update(match.decode() for match in _REF.findall(_encoder.encode(entry)))
    for conflict in view.conflicts.values():
        found.update(match.decode() for match in _REF.findall(_encoder.encode(conflict)))
    for message in view.message_records.values():  # the history a resume restores and `history` shows
        if message.content_ref:
            found.add(message.content_ref.removeprefix("blob:"))
        for call in message.tool_calls:
            found.update(references(call.args))
    patched = {patch.tool_call_id for patch in view.patches}
    for call_id, states in view.befores.items():
        if call_id not in patched:
            found.update(s.before_ref[5:] for s in states if s.before_ref and s.before_ref.startswith("blob:"))
    return found


def _for_rollback(
    view: RunView, since: int, stored: frozenset[str], present: frozenset[str], gone: frozenset[str]
) -> set[str]:
    """What rolling back to a checkpoint at patch ``since`` or later reads: every version of the files changed
    from there on (before and after each patch, rebuilt as the reader does), their patches, and the before-states
    the calls of those patches recorded."""
    patches = view.patches
    producers: dict[str, list[int]] = {}
    for index, patch in enumerate(patches):
        producers.setdefault(patch.after_hash, []).append(index)
    needed: set[str] = set()
    calls = set()
    for index in range(since, len(patches)):
        patch = patches[index]
        calls.add(patch.tool_call_id)
        needed |= _walk(patch.before_hash, index, patches, producers, present, gone)
        needed |= _walk(patch.after_hash, index + 1, patches, producers, present, gone)
        needed.update((_ref(patch.patch_ref), _ref(patch.before_ref)))
    for call_id in calls:
        needed.update(_ref(state.before_ref) for state in view.befores.get(call_id, ()))
    return needed & stored


def _walk(
    digest: str,
    before: int,
    patches: list[FilePatchEntry],
    producers: dict[str, list[int]],
    present: frozenset[str],
    gone: frozenset[str],
) -> set[str]:
    """The blobs the reader uses to rebuild ``digest`` from the patches before index ``before``: it stops at the
    first version the run's log holds a blob for (whether that blob is still stored or not), else goes to the
    oldest patch that produced it. A version in git is walked past (git may have lost it: keeping more is safe)."""
    needed: set[str] = set()
    seen: set[tuple[str, int]] = set()
    while (digest, before) not in seen:
        seen.add((digest, before))
        if digest in present:
            needed.add(digest)
            return needed
        index = next((i for i in producers.get(digest, ()) if i < before and _usable(patches[i], gone)), None)
        if index is None:
            return needed
        patch = patches[index]
        needed.add(_ref(patch.patch_ref))
        digest, before = patch.before_hash, index
    return needed


def _usable(patch: FilePatchEntry, gone: frozenset[str]) -> bool:
    """A patch the reader applies: kept as a blob, and not one gc freed that is still gone."""
    ref = _ref(patch.patch_ref)
    return bool(ref) and ref not in gone


def _ref(ref: str | None) -> str:
    return ref[5:] if ref and ref.startswith("blob:") else ""


# What people and gc leave on a run's control channel (records nobody owning the run needs to write) ------------
class LabelRecord(msgspec.Struct, frozen=True, kw_only=True, tag="label", tag_field="type"):
    """``safepoint label RUN CKPT NAME``: gc keeps the checkpoint (and what a rollback to it reads)."""

    checkpoint_id: str
    name: str
    at: str
    by: str = "user"


class PrunedRecord(msgspec.Struct, frozen=True, kw_only=True, tag="gc_pruned", tag_field="type"):
    """Written by gc before it removes a run's blobs: which it removed and which checkpoints it kept, so a reader
    (fsck, a rollback) tells "freed by gc" from "lost"."""

    digests: list[str]
    kept: list[str]
    at: str
    pruned_checkpoints: list[str] = []  # what a rollback can no longer reach (the run's checkpoints then, not kept)


_lifecycle_decoder = msgspec.json.Decoder(LabelRecord | PrunedRecord)


def lifecycle_records(controls: list[tuple[int, bytes]]) -> tuple[dict[str, list[str]], frozenset[str]]:
    """The labels (checkpoint id -> names) and the digests gc pruned, from a run's control records (others, and
    any that do not decode, are not ours and are skipped)."""
    labels, pruned, _ = lifecycle_state(controls)
    return labels, pruned


def lifecycle_state(
    controls: list[tuple[int, bytes]],
) -> tuple[dict[str, list[str]], frozenset[str], frozenset[str]]:
    """``lifecycle_records`` and the checkpoints gc left unreachable."""
    labels: dict[str, list[str]] = {}
    pruned: set[str] = set()
    unreachable: set[str] = set()
    for _, data in controls:
        if b'"label"' not in data and b'"gc_pruned"' not in data:
            continue
        try:
            record = _lifecycle_decoder.decode(data)
        except msgspec.DecodeError:
            continue
        if isinstance(record, LabelRecord):
            labels.setdefault(record.checkpoint_id, []).append(record.name)
        else:
            pruned.update(record.digests)
            unreachable.update(record.pruned_checkpoints)
    return labels, frozenset(pruned), frozenset(unreachable)
