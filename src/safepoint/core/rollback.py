"""rollback_files planning (§8.8, §8.9): revert the agent's own changes, never the user's.

The agent's patches after a checkpoint are undone newest first. A patch is undone only while the file still holds
exactly what that patch left (``after_hash``, and its mode); otherwise someone else changed the file since, and the
path becomes a ``CheckpointConflict`` with resolution ``pending``: the file is not touched, and neither is any
older patch of the same path (undoing those would work on a file that is no longer the agent's).

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


class FileState(msgspec.Struct, frozen=True, kw_only=True):
    """What a path holds now: content hash ("" when absent) and permission bits (None when absent)."""

    hash: str
    mode: int | None = None


class FileAction(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    expected_hash: str  # what the agent left there (the file must still hold this)
    target_hash: str  # what the file held before the agent's first change after the checkpoint ("" = remove)
    target_mode: int | None = None
    target_ref: str | None = None  # where the target content is kept ("blob:", "git:")
    undoes: tuple[str, ...] = ()  # the call ids whose changes this action reverts, newest first


class Unrestorable(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    call_id: str
    why: str


class RollbackPlan(msgspec.Struct, frozen=True, kw_only=True):
    checkpoint_id: str
    actions: list[FileAction]
    conflicts: list[CheckpointConflict]
    unrestorable: list[Unrestorable]


def plan_rollback(
    checkpoint_id: str,
    patches: Sequence[FilePatchEntry],
    current: Callable[[str], FileState],
    restorable: Callable[[FilePatchEntry], bool],
) -> RollbackPlan:
    """``patches``: the run's patches made after the checkpoint, oldest first. ``current(path)`` reads the
    workspace; ``restorable(patch)`` tells whether the content before ``patch`` can be reproduced."""
    by_path: dict[str, list[FilePatchEntry]] = {}
    for patch in patches:
        by_path.setdefault(patch.path, []).append(patch)
    actions: list[FileAction] = []
    conflicts: list[CheckpointConflict] = []
    unrestorable: list[Unrestorable] = []
    newest_first = list(dict.fromkeys(patch.path for patch in reversed(patches)))
    for path in newest_first:
        now = current(path)
        expected = now
        undone: list[str] = []
        target: FilePatchEntry | None = None
        for patch in reversed(by_path[path]):
            if now.hash != patch.after_hash or (patch.after_mode is not None and now.mode != patch.after_mode):
                conflicts.append(
                    CheckpointConflict(
                        path=path,
                        expected_hash=patch.after_hash,
                        actual_hash=now.hash,
                        agent_patch_ref=patch.patch_ref,
                    )
                )
                break
            if not restorable(patch):
                unrestorable.append(
                    Unrestorable(
                        path=path,
                        call_id=patch.tool_call_id,
                        why="its content before this change was not captured (not written earlier by the run, "
                        "not in git); left as it is",
                    )
                )
                break
            undone.append(patch.tool_call_id)
            target = patch
            now = FileState(hash=patch.before_hash, mode=patch.before_mode)
        no_change = target is not None and target.before_hash == expected.hash and target.before_mode == expected.mode
        if target is not None and not no_change:
            actions.append(
                FileAction(
                    path=path,
                    expected_hash=expected.hash,
                    target_hash=target.before_hash,
                    target_mode=target.before_mode,
                    target_ref=target.before_ref,
                    undoes=tuple(undone),
                )
            )
    return RollbackPlan(checkpoint_id=checkpoint_id, actions=actions, conflicts=conflicts, unrestorable=unrestorable)


ActionStep = Literal["apply", "done", "conflict"]


def action_step(action: FileAction, now: FileState) -> ActionStep:
    """What applying ``action`` means for a file in state ``now``: idempotent, so a re-run finishes a crash."""
    if now.hash == action.target_hash and (action.target_mode is None or now.mode in (None, action.target_mode)):
        return "done"
    if now.hash == action.expected_hash:
        return "apply"
    return "conflict"
