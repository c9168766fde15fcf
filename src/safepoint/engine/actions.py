"""The three recovery actions of §8.8, never one "undo": rollback_files, restore_session, compensate_external_action.

Each one that changes files runs as a ledgered call of an internal tool, so the ledger is its journal: the planned
actions and the before-state of every path are durable before the first file changes, a crash half-way leaves an
``uncertain`` call that is finished by running it again (every action is idempotent), and the call's own file
patches make the rollback itself something that can be rolled back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import merge3
import msgspec

from safepoint.core.patches import unified_diff
from safepoint.core.resume import is_internal
from safepoint.core.rollback import ABSENT, FileAction, RollbackPlan, action_step, plan_rollback
from safepoint.engine.call_runner import expand_input
from safepoint.engine.session import RunSession
from safepoint.engine.tools import Tool, ToolContext
from safepoint.errors import NoCompensatorError, ResumeError, ToolFailure, UnknownReferenceError
from safepoint.records import (
    Checkpoint,
    CheckpointConflict,
    ConflictResolution,
    FilePatchEntry,
    ToolCall,
    ToolDefinition,
)

ROLLBACK_TOOL = "rollback_files"
RESOLVE_TOOL = "resolve_conflict"
COMPENSATE_PREFIX = "compensate_"
_actions_decoder = msgspec.json.Decoder(list[FileAction])


# rollback_files ---------------------------------------------------------------------------------------------------
def plan_files(session: RunSession, checkpoint_id: str) -> RollbackPlan:
    checkpoint = session.checkpoints.get(checkpoint_id)
    if checkpoint is None:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} is not in run {session.info.run_id!r}; "
            "list them with `safepoint checkpoints`"
        )
    later = session.patches[checkpoint.patches_len :]
    return plan_rollback(checkpoint_id, later, session.files.state, session.files.restorable)


def _patch_by_result(patches: list[FilePatchEntry], path: str, after_hash: str) -> FilePatchEntry:
    """The agent's latest change of ``path`` that left ``after_hash`` (matched by result, not by content-addressed
    patch_ref: equal edits share one patch)."""
    for patch in reversed(patches):
        if patch.path == path and patch.after_hash == after_hash:
            return patch
    raise ResumeError(f"no recorded change of {path} left {after_hash}; the run's log is damaged")


def rollback_tool(session: RunSession) -> Tool:
    def run(ctx: ToolContext, checkpoint_id: str, actions: list[dict[str, Any]]) -> str:
        done: list[str] = []
        conflicts: list[str] = []
        for action in _actions_decoder.decode(json.dumps(actions)):
            now = session.files.state(action.path)
            step = action_step(action, now)
            if step == "conflict":
                patch = _patch_by_result(session.patches, action.path, action.expected_hash)
                record_conflict(session, action.path, action.expected_hash, now.hash, patch.patch_ref)
                conflicts.append(action.path)
                continue
            if step == "apply":
                data = None
                if action.target_hash != ABSENT:
                    data = session.files.version(action.path, action.target_hash, action.target_ref)
                ctx.workspace.restore(action.path, data, action.target_mode)
            done.append(action.path)
        result = {"checkpoint_id": checkpoint_id, "reverted": done, "conflicts": conflicts}
        return json.dumps(result)

    return Tool(
        definition=ToolDefinition(
            name=ROLLBACK_TOOL,
            idempotency="conditional",  # every action checks the file first, so a second run finishes the first
            replay_policy="auto",
            risk_level="low",
            side_effects=("filesystem_write",),
            description="Revert the agent's file changes made after a checkpoint (internal).",
        ),
        fn=run,
        writes=lambda args: [str(a["path"]) for a in args.get("actions", [])],
        internal=True,
    )


def record_conflict(
    session: RunSession,
    path: str,
    expected: str,
    actual: str,
    patch_ref: str,
    resolution: ConflictResolution = "pending",
) -> CheckpointConflict:
    conflict = CheckpointConflict(
        path=path, expected_hash=expected, actual_hash=actual, agent_patch_ref=patch_ref, resolution=resolution
    )
    session.conflicts[path] = conflict
    session.add_record(conflict)
    session.trace("conflict", path=path, resolution=resolution)
    return conflict


def rollback_files(session: RunSession, checkpoint_id: str, *, dry_run: bool = False) -> RollbackPlan:
    """Revert the agent's changes after ``checkpoint_id``, newest first; files the user changed become conflicts."""
    finish_interrupted(session)
    plan = plan_files(session, checkpoint_id)
    if dry_run:
        return plan
    for conflict in plan.conflicts:
        record_conflict(session, conflict.path, conflict.expected_hash, conflict.actual_hash, conflict.agent_patch_ref)
    if plan.actions:
        session.registry.put(rollback_tool(session))
        call = ToolCall(
            call_id=_next_id(session, "rollback"),
            tool=ROLLBACK_TOOL,
            args={"checkpoint_id": checkpoint_id, "actions": msgspec.to_builtins(plan.actions)},
        )
        session.runner.execute(call, f"step_{session.step}")
        entry = session.ledger[call.call_id]
        if entry.status != "succeeded":
            session.commit()
            raise ResumeError(
                f"rollback_files to {checkpoint_id} did not finish ({entry.error or entry.status}); nothing that was "
                "reverted is lost: see `safepoint ledger`, fix the cause, and run the rollback again"
            )
    session.commit()
    return plan


def finish_interrupted(session: RunSession) -> list[str]:
    """Complete any rollback or resolution a crash interrupted (their actions are idempotent)."""
    finished = []
    for call_id, entry in list(session.ledger.items()):
        if entry.tool_name in (ROLLBACK_TOOL, RESOLVE_TOOL) and entry.status in ("started", "uncertain", "planned"):
            tool = rollback_tool(session) if entry.tool_name == ROLLBACK_TOOL else resolve_tool(session)
            session.registry.put(tool)
            session.runner.execute(ToolCall(call_id=call_id, tool=entry.tool_name, args=entry.input), entry.step_id)
            finished.append(call_id)
    return finished


def _next_id(session: RunSession, prefix: str) -> str:
    count = sum(1 for call_id in session.ledger if call_id.startswith(prefix + "_"))
    return f"{prefix}_{count + 1}"


# conflicts ------------------------------------------------------------------------------------------------------
def pending_conflicts(conflicts: Mapping[str, CheckpointConflict]) -> list[CheckpointConflict]:
    return [c for c in conflicts.values() if c.resolution == "pending"]


def conflict_versions(
    session: RunSession, conflict: CheckpointConflict
) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(before the agent, the agent's version, the file now) for a three-way view; None where absent."""
    patch = _patch_by_result(session.patches, conflict.path, conflict.expected_hash)
    files = session.files
    base = agent = None
    if patch.before_hash != ABSENT and files.restorable(patch):
        base = files.version(patch.path, patch.before_hash, patch.before_ref)
    if patch.after_hash != ABSENT and files.can_reproduce(patch.after_hash):
        agent = files.version(patch.path, patch.after_hash)
    current, _ = session.workspace.snapshot(conflict.path)
    return base, agent, current


def describe_conflict(session: RunSession, conflict: CheckpointConflict) -> dict[str, Any]:
    """The three things §8.9 says the user must be told, with the three-way diff."""
    base, agent, current = conflict_versions(session, conflict)
    return {
        "path": conflict.path,
        "expected_hash": conflict.expected_hash,
        "actual_hash": conflict.actual_hash,
        "agent_patch_ref": conflict.agent_patch_ref,
        "resolution": conflict.resolution,
        "why": "the file changed after the agent wrote it, so rolling the agent's change back would overwrite that",
        "agent_change": unified_diff(base or b"", agent or b"", conflict.path),
        "changed_since": unified_diff(agent or b"", current or b"", conflict.path),
    }


def merge_revert(base: bytes, agent: bytes, current: bytes) -> tuple[bytes, bool]:
    """Take the agent's change back out of the current file, keeping the user's edits: a three-way merge of
    ``current`` (the user's) and ``base`` (before the agent) over ``agent`` (their common ancestor)."""
    merger = merge3.Merge3(
        agent.decode(errors="surrogateescape").splitlines(keepends=True),
        current.decode(errors="surrogateescape").splitlines(keepends=True),
        base.decode(errors="surrogateescape").splitlines(keepends=True),
    )
    lines = list(
        merger.merge_lines(
            name_a="current (yours)", name_b="before the agent", start_marker="<<<<<<<", end_marker=">>>>>>>"
        )
    )
    clean = not any(line.startswith("<<<<<<<") for line in lines)
    # A last line without its newline must not run into the marker that follows it.
    fixed = [line + "\n" if not line.endswith("\n") and i + 1 < len(lines) else line for i, line in enumerate(lines)]
    return "".join(fixed).encode(errors="surrogateescape"), clean


def resolve_tool(session: RunSession) -> Tool:
    def run(ctx: ToolContext, path: str, blob: str, expect: str, resolution: str) -> str:
        """Write the resolution only over the file the person saw; it settles the conflict in the same durable
        group as the write, so a retry after a crash never merges twice."""
        conflict = session.conflicts[path]
        now = session.files.state(path).hash
        if now not in (expect, blob or ABSENT):
            record_conflict(session, path, conflict.expected_hash, now, conflict.agent_patch_ref)
            raise ToolFailure(f"{path} changed again after the resolution was chosen; it was left as it is")
        if now != (blob or ABSENT):
            ctx.workspace.restore(path, session.contents.get(blob) if blob else None, None)  # "" = must not exist
        record_conflict(
            session,
            path,
            conflict.expected_hash,
            blob or ABSENT,
            conflict.agent_patch_ref,
            resolution,  # type: ignore[arg-type]
        )
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
        writes=lambda args: [str(args["path"])],
        internal=True,
    )


def resolve(session: RunSession, path: str, resolution: ConflictResolution) -> dict[str, Any]:
    conflict = session.conflicts.get(path)
    if conflict is None or conflict.resolution != "pending":
        raise UnknownReferenceError(
            f"{path!r} has no pending conflict in run {session.info.run_id!r}; see `safepoint conflicts`"
        )
    finish_interrupted(session)
    conflict = session.conflicts[path]
    if conflict.resolution != "pending":
        return {"path": path, "resolution": conflict.resolution, "finished": "an interrupted resolution"}
    outcome: dict[str, Any] = {"path": path, "resolution": resolution}
    if resolution == "keep_user":
        record_conflict(
            session, path, conflict.expected_hash, session.files.state(path).hash, conflict.agent_patch_ref, resolution
        )
        session.commit()
        return outcome
    base, agent, current = conflict_versions(session, conflict)
    patch = _patch_by_result(session.patches, conflict.path, conflict.expected_hash)
    if (patch.before_hash != ABSENT and base is None) or (resolution == "manual_merge" and agent is None):
        raise ResumeError(
            f"{path}: the content before the agent's change was not captured, so only --keep-user is possible"
        )
    data: bytes | None
    if resolution == "apply_agent":
        data, clean = base, True  # what the rollback meant to do: the file as it was before the agent
    else:
        data, clean = merge_revert(base or b"", agent or b"", current or b"")
    digest = "" if data is None else session.contents.put(data)
    session.registry.put(resolve_tool(session))
    args = {"path": path, "blob": digest, "expect": session.files.state(path).hash, "resolution": resolution}
    call = ToolCall(call_id=_next_id(session, "resolve"), tool=RESOLVE_TOOL, args=args)
    session.runner.execute(call, f"step_{session.step}")
    entry = session.ledger[call.call_id]
    if entry.status != "succeeded":
        raise ResumeError(f"{path}: {entry.error or entry.status}; see `safepoint conflicts`")
    outcome["clean"] = clean
    session.commit()
    return outcome


# restore_session ------------------------------------------------------------------------------------------------
def restore_session(session: RunSession, checkpoint_id: str, *, with_files: bool = False) -> Checkpoint:
    """The conversation and run state go back to ``checkpoint_id`` as a new branch (the old one stays in the log);
    files stay as they are unless ``with_files`` also rolls them back."""
    at = session.view.checkpoint(checkpoint_id)
    if at is None or not at.complete:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} is not a complete checkpoint of run {session.info.run_id!r}; "
            "list them with `safepoint checkpoints`"
        )
    if with_files:
        rollback_files(session, checkpoint_id)
    checkpoint = at.checkpoint
    kept = {call.call_id for message in at.history for call in message.tool_calls}
    abandoned = tuple(c for c, e in session.ledger.items() if c not in kept and not is_internal(e))
    session.rewind(checkpoint.history_len, checkpoint_id, "restore_session", abandoned)
    session.return_to(at)
    restored = session.checkpoint(checkpoint.kind)  # the same point of the plan, on the new branch
    session.event("interrupted", f"session restored to {checkpoint_id}; `safepoint resume` continues from there")
    # What was in flight belonged to the branch left behind: a restart must not judge the new one by it.
    session.restart.delete()
    return restored


# compensate_external_action -------------------------------------------------------------------------------------
def compensate(
    session: RunSession, ledger_entry_id: str, *, assume_done: bool = False, decision: str | None = None
) -> str:
    """Run the compensator of a finished call, at most once, as its own ledger entry linked to the original."""
    entry = session.ledger.get(ledger_entry_id)
    if entry is None:
        raise UnknownReferenceError(
            f"ledger entry {ledger_entry_id!r} is not in run {session.info.run_id!r}; see `safepoint ledger`"
        )
    tool = session.registry.get(entry.tool_name)
    if tool.compensator is None:
        effects = ", ".join(entry.side_effects) or "its effect"
        raise NoCompensatorError(
            f"{entry.tool_name}({ledger_entry_id}) declares no compensator: {effects} cannot be undone by safepoint; "
            "undo it by hand (for example, retract or correct what was sent), then note it in the run"
        )
    if entry.status != "succeeded" and not (entry.status in ("started", "uncertain") and assume_done):
        raise ResumeError(
            f"{entry.tool_name}({ledger_entry_id}) is {entry.status}: compensate only an effect that happened "
            "(check it, then pass --assume-done for an uncertain call)"
        )
    compensation_id = f"{COMPENSATE_PREFIX}{ledger_entry_id}"
    done = session.ledger.get(compensation_id)
    if done is not None and done.status == "succeeded":
        raise ResumeError(f"{ledger_entry_id} was compensated already by {compensation_id}; it runs at most once")
    if done is not None and done.status == "uncertain":
        raise ResumeError(
            f"{compensation_id} was interrupted and left as is (its outcome is unknown); check the external system"
        )
    if done is not None and done.status == "started" and decision is not None:
        session.calls.decide(compensation_id, decision)  # the interrupted compensation: run it again, or leave it
    session.registry.put(compensator_tool(session, tool))
    result = session.runner.execute(
        ToolCall(
            call_id=compensation_id, tool=COMPENSATE_PREFIX + tool.name, args={"ledger_entry_id": ledger_entry_id}
        ),
        f"step_{session.step}",
    )
    session.commit()
    return result.observation


def compensator_tool(session: RunSession, tool: Tool) -> Tool:
    assert tool.compensator is not None
    compensator = tool.compensator

    def run(ctx: ToolContext, ledger_entry_id: str) -> Any:
        original = session.ledger[ledger_entry_id]
        return compensator(
            ctx,
            expand_input(original, session.files, session.contents),
            session.contents.load_result(original.result_ref),
        )

    definition = tool.compensator_definition or ToolDefinition(
        name="", idempotency="non_idempotent", replay_policy="ask", risk_level="medium"
    )
    return Tool(
        definition=msgspec.structs.replace(
            definition,
            name=COMPENSATE_PREFIX + tool.name,
            description=f"Compensate an earlier {tool.name} call.",
        ),
        fn=run,
        compensates=True,
        internal=True,
    )
