"""rollback_files planning (§8.8, §8.9): revert the agent's own changes, never the user's.

For each path, the agent's patches after a checkpoint are undone newest first. A patch is undone only while the
file still holds exactly what that patch left (``after_hash``, and its mode); otherwise someone else changed the
file since, and the path becomes a ``CheckpointConflict`` with resolution ``pending``: the file is not touched.

A conflict covers every change of the agent to the path that the rollback would have undone from there on: its
base is the content before the first of them, its agent version the content after the last (``undoes`` names
them). So resolving it settles the path once and for all: a later rollback to the same checkpoint (or to a later
one) does not walk past the resolution again (a ``Settlement``), and never brings the conflict back or undoes
the resolution. A rollback to an earlier checkpoint walks on to the agent's older changes, from the file as the
resolution left it.

A change made while a command ran whose author the platform could not tell (``author_uncertain``) is reverted
only when the user includes such changes; otherwise it is listed (``uncertain``) and the path is left from there.

A path under a symlinked folder is never reached through the link: it counts as the link's (``behind``). When the
link itself is the agent's and this rollback removes it, the path is planned as absent (the folder comes back);
when it is not, the path is a conflict.

The plan is data: a list of per-path actions that say what the file must hold now (``expected_hash``) for the
action to apply and what it must hold afterwards (``target_hash``, "" for absent). Applying an action is idempotent:
a file already at its target is left alone, so a rollback interrupted half-way is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from safepoint.records import CheckpointConflict, FilePatchEntry

ABSENT = ""  # the hash of a path that does not exist
UNKNOWN = "unknown"  # the before-hash of content that was never captured (it cannot be put back)
BEHIND_LINK = "behind-symlink:"  # the state of a path whose parent folder is now a symlink (+ that folder)


class FileState(msgspec.Struct, frozen=True, kw_only=True):
    """What a path holds now: content hash ("" when absent) and permission bits (None when absent).
    ``behind``: the nearest parent folder that is a symlink now (the path is never read through it); ``folder``:
    the path is a folder now (as a file, absent)."""

    hash: str
    mode: int | None = None
    behind: str | None = None
    folder: bool = False  # a folder stands there: no file, but nothing a file may be written over either


def behind_link(folder: str) -> FileState:
    return FileState(hash=BEHIND_LINK + folder, behind=folder)


class FileAction(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    path: str
    expected_hash: str  # what the agent left there (the file must still hold this)
    target_hash: str  # what the file held before the agent's first change after the checkpoint ("" = remove)
    target_mode: int | None = None
    target_ref: str | None = None  # where the target content is kept ("blob:", "git:")
    undoes: tuple[str, ...] = ()  # the call ids whose changes this action reverts, newest first
    author_uncertain: bool = False  # it reverts a change whose author is uncertain (the user included those)


class Unrestorable(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    call_id: str
    why: str


class UncertainChange(msgspec.Struct, frozen=True, kw_only=True):
    """A change left as it is because its author is uncertain (``--include-uncertain`` reverts it)."""

    path: str
    call_id: str
    why: str


class ConflictCover(msgspec.Struct, frozen=True, kw_only=True):
    """What a conflict covers (beside the seed's ``CheckpointConflict``, whose fields stay the seed's): the file
    before the agent's first change it covers (``base_hash`` "" when absent, ``unknown`` when never captured)
    and those changes' call ids, newest first. Journaled in the rollback's ledgered call."""

    path: str
    expected_hash: str
    base_hash: str
    base_ref: str | None = None
    base_mode: int | None = None
    undoes: tuple[str, ...] = ()


class Settlement(msgspec.Struct, frozen=True, kw_only=True):
    """A resolved conflict: the patches of ``path`` with index in ``[since, until)`` are settled by it."""

    path: str
    since: int
    until: int


class RollbackPlan(msgspec.Struct, frozen=True, kw_only=True):
    checkpoint_id: str
    actions: list[FileAction]
    conflicts: list[CheckpointConflict]
    unrestorable: list[Unrestorable]
    uncertain: list[UncertainChange] = msgspec.field(default_factory=list)
    covers: list[ConflictCover] = msgspec.field(default_factory=list)  # one per conflict, in the same order


UNCERTAIN_WHY = (
    "changed while {call} ran, but the platform could not tell whether the command or someone else wrote it; "
    "left as it is (include it with --include-uncertain, or include_uncertain=True)"
)


def plan_rollback(
    checkpoint_id: str,
    patches: Sequence[FilePatchEntry],
    current: Callable[[str], FileState],
    restorable: Callable[[FilePatchEntry], bool],
    *,
    start: int = 0,
    settlements: Sequence[Settlement] = (),
    include_uncertain: bool = False,
) -> RollbackPlan:
    """``patches``: every patch of the run, oldest first; those from index ``start`` on (the checkpoint's
    ``patches_len``) are undone. ``current(path)`` reads the workspace; ``restorable(patch)`` tells whether the
    content before ``patch`` can be reproduced; ``settlements``: the conflicts resolved so far."""
    by_path: dict[str, list[int]] = {}
    for index in range(start, len(patches)):
        by_path.setdefault(patches[index].path, []).append(index)
    settled: dict[str, list[Settlement]] = {}
    for settlement in settlements:
        settled.setdefault(settlement.path, []).append(settlement)
    planner = _Planner(patches, start, restorable, include_uncertain)
    newest_first = list(dict.fromkeys(patches[i].path for i in range(len(patches) - 1, start - 1, -1)))
    states = {path: current(path) for path in newest_first}
    # Paths behind a symlinked folder wait for the others: the link may be the agent's, removed by this plan.
    for path in sorted(newest_first, key=lambda p: states[p].behind is not None):
        now = states[path]
        if now.behind is not None and planner.removes(now.behind):
            now = FileState(hash=ABSENT)  # the agent's link goes, so the folder comes back without this path
        planner.plan(path, by_path[path], now, settled.get(path, []))
    order = {path: rank for rank, path in enumerate(newest_first)}
    planner.actions.sort(key=lambda a: order[a.path])
    return RollbackPlan(
        checkpoint_id=checkpoint_id,
        actions=planner.actions,
        conflicts=planner.conflicts,
        unrestorable=planner.unrestorable,
        uncertain=planner.uncertain,
        covers=planner.covers,
    )


class _Planner:
    def __init__(
        self,
        patches: Sequence[FilePatchEntry],
        start: int,
        restorable: Callable[[FilePatchEntry], bool],
        include_uncertain: bool,
    ) -> None:
        self.patches = patches
        self.start = start
        self.restorable = restorable
        self.include_uncertain = include_uncertain
        self.actions: list[FileAction] = []
        self.conflicts: list[CheckpointConflict] = []
        self.unrestorable: list[Unrestorable] = []
        self.uncertain: list[UncertainChange] = []
        self.covers: list[ConflictCover] = []
        self.removed: set[str] = set()  # the paths an action of this plan removes

    def removes(self, folder: str) -> bool:
        """Does this plan remove what is at ``folder`` (or a parent of it)?"""
        parts = folder.split("/")
        return any("/".join(parts[:end]) in self.removed for end in range(1, len(parts) + 1))

    def _walk(self, indexes: list[int], settled: list[Settlement]) -> list[int]:
        """The path's patches a rollback walks, newest first. A settlement that covers a patch stops the walk
        when it settled everything after this checkpoint; when it settled only later changes (a rollback to a
        later checkpoint), those are passed over and the walk goes on from the file as it left it."""
        walked: list[int] = []
        for index in reversed(indexes):
            covering = [s for s in settled if s.since <= index < s.until]
            if any(s.since <= self.start for s in covering):
                break
            if not covering:
                walked.append(index)
        return walked

    def plan(self, path: str, indexes: list[int], now: FileState, settled: list[Settlement]) -> None:
        walked = self._walk(indexes, settled)
        shown = now
        if now.folder:
            # No file there, as the agent's removal left it (a rollback that brought the folder's files back
            # made it): walked as absent. A file or link comes back over it only while it is empty (applying
            # the action checks; the rollback's removals of the files in it run first).
            now = FileState(hash=ABSENT)
        expected = state = now
        undone: list[str] = []
        target: FilePatchEntry | None = None
        uncertain = False
        for position, index in enumerate(walked):
            patch = self.patches[index]
            if patch.author_uncertain and not self.include_uncertain:
                self.uncertain.append(
                    UncertainChange(
                        path=path, call_id=patch.tool_call_id, why=UNCERTAIN_WHY.format(call=patch.tool_call_id)
                    )
                )
                break
            if not _holds(state, patch):
                self._conflict(path, walked[position:], shown if state is now else state)
                break
            if not self.restorable(patch):
                self.unrestorable.append(Unrestorable(path=path, call_id=patch.tool_call_id, why=_unrestorable(patch)))
                break
            undone.append(patch.tool_call_id)
            uncertain = uncertain or patch.author_uncertain
            target = patch
            state = FileState(hash=patch.before_hash, mode=patch.before_mode)
        no_change = target is not None and target.before_hash == expected.hash and target.before_mode == expected.mode
        if target is not None and not no_change:
            if target.before_hash == ABSENT:
                self.removed.add(path)
            self.actions.append(
                FileAction(
                    path=path,
                    # Over a folder only while it is empty (checked when applied): the rollback's own removals
                    # of the files in it run first.
                    expected_hash=shown.hash if shown.folder else expected.hash,
                    target_hash=target.before_hash,
                    target_mode=target.before_mode,
                    target_ref=target.before_ref,
                    undoes=tuple(undone),
                    author_uncertain=uncertain,
                )
            )

    def _conflict(self, path: str, walked: list[int], now: FileState) -> None:
        """The file is not what the agent left: one conflict for every change of the agent a rollback would undo
        from here on, as far as they follow one another (a user's edit between two of them ends it)."""
        newest = self.patches[walked[0]]
        covered = [newest]
        for index in walked[1:]:
            patch = self.patches[index]
            older_state = FileState(hash=covered[-1].before_hash, mode=covered[-1].before_mode)
            if not self.restorable(covered[-1]) or not _holds(older_state, patch):
                break
            if patch.author_uncertain and not self.include_uncertain:
                break
            covered.append(patch)
        base = covered[-1]
        if base.before_hash == now.hash and base.before_mode == now.mode and now.behind is None:
            return  # the file is back to what it held before the agent (someone undid it): nothing to settle
        if base.before_hash == newest.after_hash and base.before_mode in (None, newest.after_mode):
            # The changes cancel out (the agent created the file and a rollback removed it): nothing of the
            # agent's is in the file, so what is there now is someone else's, left as it is. A conflict here
            # would offer to "put back" a version that is the file's own state before the agent.
            return
        self.conflicts.append(
            CheckpointConflict(
                path=path, expected_hash=newest.after_hash, actual_hash=now.hash, agent_patch_ref=newest.patch_ref
            )
        )
        self.covers.append(
            ConflictCover(
                path=path,
                expected_hash=newest.after_hash,
                base_hash=base.before_hash if self.restorable(base) else UNKNOWN,
                base_ref=base.before_ref,
                base_mode=base.before_mode,
                undoes=tuple(patch.tool_call_id for patch in covered),
            )
        )


def _unrestorable(patch: FilePatchEntry) -> str:
    """Why the content before ``patch`` cannot be put back: it was kept, and the store lost it (a record fsck
    quarantined), or it was never captured."""
    if patch.before_ref is not None and patch.before_ref.startswith("blob:"):
        return (
            "its content before this change was recorded, but the store no longer has it (damaged: see "
            "`safepoint fsck`); left as it is"
        )
    return "its content before this change was not captured (not written earlier by the run, not in git); left as it is"


def _holds(state: FileState, patch: FilePatchEntry) -> bool:
    """Does a file in ``state`` hold exactly what ``patch`` left?"""
    return state.hash == patch.after_hash and (patch.after_mode is None or state.mode == patch.after_mode)


ActionStep = Literal["apply", "done", "conflict"]


def action_step(action: FileAction, now: FileState) -> ActionStep:
    """What applying ``action`` means for a file in state ``now``: idempotent, so a re-run finishes a crash."""
    if now.behind is not None:
        return "conflict"  # never through a link
    if now.folder:
        if action.target_hash == ABSENT:
            return "done"  # no file there
        return "apply" if action.expected_hash == now.hash else "conflict"
    if now.hash == action.target_hash and (action.target_mode is None or now.mode in (None, action.target_mode)):
        return "done"
    if now.hash == action.expected_hash:
        return "apply"
    return "conflict"
