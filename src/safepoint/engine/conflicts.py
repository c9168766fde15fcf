"""Conflicts (§8.9): a file the user changed after the agent is never overwritten; the user settles it.

A conflict covers every change of the agent to the path that its rollback would have undone. Its base (the file
before the first of them) is journaled in the rollback's ledgered call beside the seed's record, so
``--apply-agent`` and ``--manual-merge`` take all of them out at once, and the resolution, a ledgered call of its
own, settles the path for later rollbacks (``core.rollback.Settlement``). A symlink or a binary file is never
merged line by line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import merge3
import msgspec

from safepoint.core.patches import is_text, make_patch, unified_diff
from safepoint.core.resume import is_internal, next_internal_id
from safepoint.core.rollback import ABSENT, UNKNOWN, ConflictCover, FileAction, FileState
from safepoint.engine.session import RunSession
from safepoint.engine.tools import Tool, ToolContext
from safepoint.errors import ConfigError, ResumeError, StoreError, ToolFailure
from safepoint.records import CheckpointConflict, ConflictResolution, FilePatchEntry, ToolCall, ToolDefinition
from safepoint.workspace.files import SYMLINK_MARK

ROLLBACK_TOOL = "rollback_files"
RESOLVE_TOOL = "resolve_conflict"
_RESOLUTIONS: dict[str, ConflictResolution] = {
    "keep_user": "keep_user",
    "apply_agent": "apply_agent",
    "manual_merge": "manual_merge",
}


def pending_conflicts(conflicts: dict[str, CheckpointConflict]) -> list[CheckpointConflict]:
    return [c for c in conflicts.values() if c.resolution == "pending"]


def record_conflict(session: RunSession, conflict: CheckpointConflict) -> CheckpointConflict:
    session.conflicts[conflict.path] = conflict
    session.add_record(conflict)
    session.trace(
        "conflict",
        path=conflict.path,
        resolution=conflict.resolution,
        expected_hash=conflict.expected_hash,
        actual_hash=conflict.actual_hash,
        agent_patch_ref=conflict.agent_patch_ref,
    )
    return conflict


def _patch_by_result(patches: list[FilePatchEntry], path: str, after_hash: str) -> FilePatchEntry | None:
    """The latest change of ``path`` that left ``after_hash`` (matched by result, not by content-addressed
    patch_ref: equal edits share one patch)."""
    for patch in reversed(patches):
        if patch.path == path and patch.after_hash == after_hash:
            return patch
    return None


@dataclass(frozen=True)
class Cover:
    """What a pending conflict covers, and the patch count of the checkpoint its rollback went back to."""

    cover: ConflictCover
    since: int | None


def cover_index(session: RunSession) -> dict[tuple[str, str], Cover]:
    """(path, expected hash) -> what the conflict found there covers, from the rollback calls that journaled it
    (their planned conflicts, or the action that met one); the newest wins. One pass over the ledger, so listing
    many conflicts stays linear."""
    index: dict[tuple[str, str], Cover] = {}
    for entry in session.ledger.values():
        if entry.tool_name != ROLLBACK_TOOL or not is_internal(entry):
            continue
        since = entry.input.get("since")
        found = [_action_cover(item) for item in _dicts(entry.input.get("actions"))]
        found += [_cover(item) for item in _dicts(entry.input.get("conflicts"))]
        for cover in found:
            index[(cover.path, cover.expected_hash)] = Cover(cover, since if isinstance(since, int) else None)
    return index


def cover_of(
    session: RunSession, conflict: CheckpointConflict, index: dict[tuple[str, str], Cover] | None = None
) -> Cover | None:
    """What ``conflict`` covers; None for one recorded before rollbacks journaled what they cover."""
    return (cover_index(session) if index is None else index).get((conflict.path, conflict.expected_hash))


def _dicts(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _cover(item: dict[str, Any]) -> ConflictCover:
    return msgspec.convert(item, ConflictCover)


def _action_cover(item: dict[str, Any]) -> ConflictCover:
    action = msgspec.convert(item, FileAction)
    return ConflictCover(
        path=action.path,
        expected_hash=action.expected_hash,
        base_hash=action.target_hash,
        base_ref=action.target_ref,
        base_mode=action.target_mode,
        undoes=action.undoes,
    )


def conflict_of_action(session: RunSession, action: FileAction, now: FileState) -> CheckpointConflict:
    """The conflict a planned action meets when the file changed between the plan and the write (what it
    covers is the action's own, journaled with it)."""
    patch = _patch_by_result(session.patches, action.path, action.expected_hash)
    conflict = CheckpointConflict(
        path=action.path,
        expected_hash=action.expected_hash,
        actual_hash=now.hash,
        agent_patch_ref=patch.patch_ref if patch is not None else "",
    )
    return with_combined_patch(session, conflict, _action_cover(msgspec.to_builtins(action)))


def with_combined_patch(session: RunSession, conflict: CheckpointConflict, cover: ConflictCover) -> CheckpointConflict:
    """A conflict over several changes points at one patch from its base to the agent's last version (what the
    agent changed, as a whole); left as the last change's patch when either side cannot be reproduced."""
    if len(cover.undoes) < 2:
        return conflict
    try:
        base, agent = _base(session, conflict, cover), _agent(session, conflict)
    except StoreError:
        return conflict
    if (base is None and cover.base_hash != ABSENT) or (agent is None and conflict.expected_hash != ABSENT):
        return conflict
    digest = session.contents.put(make_patch(base or b"", agent or b""))
    return msgspec.structs.replace(conflict, agent_patch_ref=f"blob:{digest}")


def _base(session: RunSession, conflict: CheckpointConflict, cover: ConflictCover | None) -> bytes | None:
    """The file before the agent's changes the conflict covers; None when absent or never captured."""
    if cover is None:  # recorded before conflicts journaled their base: the last change's own
        patch = _patch_by_result(session.patches, conflict.path, conflict.expected_hash)
        if patch is None or patch.before_hash == ABSENT or not session.files.restorable(patch):
            return None
        return session.files.version(patch.path, patch.before_hash, patch.before_ref)
    if cover.base_hash in (ABSENT, UNKNOWN):
        return None
    return session.files.version(conflict.path, cover.base_hash, cover.base_ref)


def _base_missing(
    session: RunSession, conflict: CheckpointConflict, cover: ConflictCover | None, base: bytes | None
) -> bool:
    if cover is None:
        patch = _patch_by_result(session.patches, conflict.path, conflict.expected_hash)
        return patch is None or (patch.before_hash != ABSENT and base is None)
    return cover.base_hash == UNKNOWN or (cover.base_hash != ABSENT and base is None)


def _agent(session: RunSession, conflict: CheckpointConflict) -> bytes | None:
    if conflict.expected_hash == ABSENT or not session.files.can_reproduce(conflict.expected_hash):
        return None
    return session.files.version(conflict.path, conflict.expected_hash)


@dataclass(frozen=True)
class Versions:
    """Before the agent, the agent's version, the file now (None where absent); ``behind``: a symlinked folder
    the path is under now (the file is then not read through it)."""

    base: bytes | None
    agent: bytes | None
    current: bytes | None
    base_missing: bool
    behind: str | None
    cover: Cover | None


def conflict_versions(
    session: RunSession, conflict: CheckpointConflict, index: dict[tuple[str, str], Cover] | None = None
) -> Versions:
    cover = cover_of(session, conflict, index)
    try:
        base = _base(session, conflict, cover.cover if cover else None)
    except StoreError:
        base = None
    try:
        agent = _agent(session, conflict)
    except StoreError:
        agent = None
    behind = session.workspace.link_parent(conflict.path)
    current = None if behind is not None else session.workspace.snapshot(conflict.path)[0]
    missing = _base_missing(session, conflict, cover.cover if cover else None, base)
    return Versions(base, agent, current, missing, behind, cover)


def describe_conflict(
    session: RunSession, conflict: CheckpointConflict, index: dict[tuple[str, str], Cover] | None = None
) -> dict[str, Any]:
    """The three things §8.9 says the user must be told, with the three-way diff (``index``: ``cover_index``,
    built once when many are described)."""
    versions = conflict_versions(session, conflict, index)
    undoes = versions.cover.cover.undoes if versions.cover else ()
    changes = f"the agent's changes to it ({', '.join(undoes)})" if len(undoes) > 1 else "the agent's change"
    why = f"the file changed after the agent wrote it, so rolling {changes} back would overwrite that"
    no_merge = _no_merge(conflict, versions)
    if no_merge is not None:
        why = (
            f"the file was written again after {changes}, so rolling back would overwrite that; {no_merge} "
            "(keep yours with --keep-user, or put back the file as it was before the agent with --apply-agent)"
        )
    if versions.behind is not None:
        why = (
            f"its folder {versions.behind} is a symlink now, not the agent's: the file is never written through it "
            "(keep it with --keep-user, or put the folder back yourself and roll back again)"
        )
    return {
        "path": conflict.path,
        "expected_hash": conflict.expected_hash,
        "actual_hash": conflict.actual_hash,
        "agent_patch_ref": conflict.agent_patch_ref,
        "resolution": conflict.resolution,
        "why": why,
        "agent_change": unified_diff(versions.base or b"", versions.agent or b"", conflict.path),
        "changed_since": unified_diff(versions.agent or b"", versions.current or b"", conflict.path),
        "undoes": list(undoes),
    }


def _no_merge(conflict: CheckpointConflict, versions: Versions) -> str | None:
    """Why a line merge cannot take the agent's change out of the file: its version is a removal (the user
    wrote the file again since), or its content cannot be reproduced. None when it can be merged."""
    if conflict.expected_hash == ABSENT:
        return "the agent removed it, so there is no version of the agent's to merge with"
    if versions.agent is None:
        return (
            "the agent's version of it cannot be reproduced (its recorded content is missing), "
            "so there is nothing to merge"
        )
    return None


def merge_revert(base: bytes, agent: bytes, current: bytes) -> tuple[bytes, bool]:
    """Take the agent's change back out of the current file, keeping the user's edits: a three-way merge of
    ``current`` (the user's) and ``base`` (before the agent) over ``agent`` (their common ancestor).

    Where the two touch the same region but one side only added lines around what the other changed (the user
    appended a line right after the agent's edit), both are kept: a line merge would call that a conflict, and the
    user would find markers around a line nobody disputes. Markers only where both changed the same lines."""
    ancestor = agent.decode(errors="surrogateescape").splitlines(keepends=True)
    mine = current.decode(errors="surrogateescape").splitlines(keepends=True)
    before = base.decode(errors="surrogateescape").splitlines(keepends=True)
    out: list[str] = []
    clean = True
    for region in merge3.Merge3(ancestor, mine, before).merge_regions():
        kind = region[0]
        if kind == "unchanged":
            out += ancestor[region[1] : region[2]]
        elif kind in ("a", "same"):
            out += mine[region[1] : region[2]]
        elif kind == "b":
            out += before[region[1] : region[2]]
        else:
            at: tuple[int, ...] = tuple(region[1:])  # (ancestor, current, before) start and end of the region
            z, a, b = ancestor[at[0] : at[1]], mine[at[2] : at[3]], before[at[4] : at[5]]
            merged = _around(z, a, b)
            if merged is None:
                clean = False
                merged = [
                    "<<<<<<< current (yours)\n",
                    *_ended(a),
                    "=======\n",
                    *_ended(b),
                    ">>>>>>> before the agent\n",
                ]
            out += merged
    # A last line without its newline must not run into a marker or a line that follows it.
    fixed = [line + "\n" if not line.endswith("\n") and i + 1 < len(out) else line for i, line in enumerate(out)]
    return "".join(fixed).encode(errors="surrogateescape"), clean


def _around(z: list[str], a: list[str], b: list[str]) -> list[str] | None:
    """One side kept the common lines and only added lines before or after them: apply the other side's change
    in their place. Or no side added or removed a line, and no line was changed by both: merge line by line.
    None when both changed the same lines."""
    if len(z) == len(a) == len(b):
        lines = [y if x == old else x if y == old else x if x == y else None for old, x, y in zip(z, a, b, strict=True)]
        if None not in lines:
            return [line for line in lines if line is not None]
    for keeper, other in ((a, b), (b, a)):
        for start in range(len(keeper) - len(z) + 1):
            if keeper[start : start + len(z)] == z and (z or start in (0, len(keeper))):
                return keeper[:start] + other + keeper[start + len(z) :]
    return None


def _ended(lines: list[str]) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in lines]


def _not_text(data: bytes | None) -> str | None:
    """What keeps a recorded version from a line merge: a symlink, or binary content."""
    if data is None:
        return None
    if data.startswith(SYMLINK_MARK):
        return "a symlink"
    if not is_text(data):
        return "a binary file"
    return None


def resolve_tool(session: RunSession) -> Tool:
    def run(
        ctx: ToolContext,
        path: str,
        blob: str,
        expect: str,
        resolution: str,
        since: int | None = None,
        at: int | None = None,
        write: bool = True,
        mode: int | None = None,
    ) -> str:
        """Write the resolution only over the file the person saw; it settles the conflict in the same durable
        group as the write, so a retry after a crash never merges twice."""
        conflict = session.conflicts[path]
        link = ctx.workspace.link_parent(path)
        now = session.files.state(path).hash if link is None else f"behind-symlink:{link}"
        if write and now not in (expect, blob or ABSENT):
            record_conflict(session, msgspec.structs.replace(conflict, actual_hash=now, resolution="pending"))
            raise ToolFailure(f"{path} changed again after the resolution was chosen; it was left as it is")
        if write and now != (blob or ABSENT):
            ctx.workspace.restore(path, session.contents.get(blob) if blob else None, mode)  # "" = must not exist
        settled = (blob or ABSENT) if write else now
        record_conflict(
            session, msgspec.structs.replace(conflict, actual_hash=settled, resolution=_RESOLUTIONS[resolution])
        )
        if not write:
            return f"kept {path}"
        return f"wrote {path}" if blob else f"removed {path}"

    return Tool(
        definition=ToolDefinition(
            name=RESOLVE_TOOL,
            idempotency="conditional",  # it checks the file first: a re-run finishes or refuses, never clobbers
            replay_policy="auto",
            risk_level="low",
            side_effects=("filesystem_write",),
            description="Write a conflict's resolution (internal).",
        ),
        fn=run,
        writes=lambda args: [str(args["path"])] if args.get("write", True) else [],
        internal=True,
    )


def settle(session: RunSession, conflict: CheckpointConflict, resolution: ConflictResolution) -> dict[str, Any]:
    """Carry out the user's resolution of a pending conflict, as one ledgered call (the caller finished any
    interrupted one first)."""
    path = conflict.path
    outcome: dict[str, Any] = {"path": path, "resolution": resolution}
    versions = conflict_versions(session, conflict)
    data: bytes | None = None
    clean = True
    if resolution != "keep_user":
        if versions.behind is not None:
            raise ConfigError(
                f"{path}: its folder {versions.behind} is a symlink now and safepoint never writes through one; "
                "choose --keep-user, or put the folder back yourself and roll back again"
            )
        if versions.base_missing:
            raise ResumeError(
                f"{path}: the content before the agent's change was not captured, so only --keep-user is possible"
            )
    if resolution == "manual_merge":
        kind = _not_text(versions.base) or _not_text(versions.agent) or _not_text(versions.current)
        if kind is not None:
            raise ConfigError(
                f"{path} is {kind} on one side of the conflict and cannot be merged line by line; "
                "choose --keep-user (leave it as it is) or --apply-agent (put back what it was before the agent)"
            )
        no_merge = _no_merge(conflict, versions)
        if no_merge is not None:
            raise ResumeError(f"{path}: {no_merge}; choose --keep-user or --apply-agent")
        data, clean = merge_revert(versions.base or b"", versions.agent or b"", versions.current or b"")
    elif resolution == "apply_agent":
        data = versions.base  # what the rollback meant to do: the file as it was before the agent
    write = resolution != "keep_user"
    digest = "" if data is None else session.contents.put(data)
    session.registry.put(resolve_tool(session))
    args: dict[str, Any] = {
        "path": path,
        "blob": digest,
        "expect": session.files.state(path).hash if versions.behind is None else "",
        "resolution": resolution,
        "at": len(session.patches),
        "write": write,
    }
    if versions.cover is not None and versions.cover.since is not None:
        args["since"] = versions.cover.since  # the resolution settles the path from that checkpoint on
    if resolution == "apply_agent" and versions.cover is not None and versions.cover.cover.base_mode is not None:
        args["mode"] = versions.cover.cover.base_mode
    call = ToolCall(call_id=next_internal_id(session.ledger, "resolve"), tool=RESOLVE_TOOL, args=args)
    session.runner.execute(call, f"step_{session.step}")
    entry = session.ledger[call.call_id]
    if entry.status != "succeeded":
        raise ResumeError(f"{path}: {entry.error or entry.status}; see `safepoint conflicts {session.info.run_id}`")
    outcome["clean"] = clean
    session.commit()
    session.trace("conflict_resolved", path=path, resolution=resolution, call_id=call.call_id, clean=clean)
    return outcome
