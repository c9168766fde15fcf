"""The three recovery actions of §8.8, never one "undo": rollback_files, restore_session, compensate_external_action.

Each one that changes files runs as a ledgered call of an internal tool, so the ledger is its journal: the planned
actions and the before-state of every path are durable before the first file changes, a crash half-way leaves an
``uncertain`` call that is finished by running it again (every action is idempotent), and the call's own file
patches make the rollback itself something that can be rolled back. Their call ids live in safepoint's own
namespace (``core.resume.internal_id``), which no model call id can take. Conflicts and their resolution are in
``engine.conflicts``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import msgspec

from safepoint.core.resume import internal_id, is_internal, next_internal_id
from safepoint.core.rollback import (
    ABSENT,
    ConflictCover,
    FileAction,
    FileState,
    RollbackPlan,
    Settlement,
    action_step,
    behind_link,
    plan_rollback,
)
from safepoint.engine import decision_choices
from safepoint.engine.call_runner import expand_input
from safepoint.engine.conflicts import (
    RESOLVE_TOOL,
    ROLLBACK_TOOL,
    conflict_of_action,
    record_conflict,
    resolve_tool,
    settle,
    with_combined_patch,
)
from safepoint.engine.file_changes import DIRECTORY
from safepoint.engine.session import RunSession
from safepoint.engine.tools import Tool, ToolContext
from safepoint.errors import (
    NoCompensatorError,
    ResumeError,
    ResumeOptionError,
    StoreError,
    ToolFailure,
    UnknownReferenceError,
)
from safepoint.records import ConflictResolution, FileBeforeState, ToolCall, ToolDefinition, ToolLedgerEntry
from safepoint.results import ExternalEffect, Restored
from safepoint.workspace.files import Workspace
from safepoint.workspace.staged import StagedWrites

COMPENSATE_PREFIX = "compensate_"  # the compensating tool's name: compensate_<tool>
_actions_decoder = msgspec.json.Decoder(list[FileAction])
_WORKSPACE_EFFECTS = frozenset({"filesystem_write", "filesystem_delete"})


# rollback_files ---------------------------------------------------------------------------------------------------
def current_state(session: RunSession) -> Callable[[str], FileState]:
    """What a path holds now, never read through a symlinked folder (such a path is the link's)."""

    def current(path: str) -> FileState:
        link = session.workspace.link_parent(path)
        if link is not None:
            return behind_link(link)
        state = session.files.state(path)
        return FileState(hash=state.hash, folder=True) if state.hash == DIRECTORY else state

    return current


def settlements(session: RunSession) -> list[Settlement]:
    """The resolved conflicts, from the ledger's resolutions: each settles the path's patches from its rollback's
    checkpoint up to its own write. Resolutions written before settlements existed carry no ``since``: none."""
    last_patch: dict[str, int] = {}
    for index, patch in enumerate(session.patches):
        last_patch[patch.tool_call_id] = index
    found = []
    for call_id, entry in session.ledger.items():
        if entry.tool_name != RESOLVE_TOOL or entry.status != "succeeded" or not is_internal(entry):
            continue
        since, at = entry.input.get("since"), entry.input.get("at")
        if isinstance(since, int) and isinstance(at, int):
            until = max(at, last_patch.get(call_id, -1) + 1)
            found.append(Settlement(path=str(entry.input["path"]), since=since, until=until))
    return found


def plan_files(session: RunSession, checkpoint_id: str, *, include_uncertain: bool = False) -> RollbackPlan:
    checkpoint = session.checkpoints.get(checkpoint_id)
    if checkpoint is None:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} is not in run {session.info.run_id!r}; "
            f"list them with `safepoint checkpoints {session.info.run_id}`"
        )
    return plan_rollback(
        checkpoint_id,
        session.patches,
        current_state(session),
        session.files.restorable,
        start=checkpoint.patches_len,
        settlements=settlements(session),
        include_uncertain=include_uncertain,
    )


def rollback_tool(session: RunSession) -> Tool:
    current = current_state(session)

    def run(
        ctx: ToolContext,
        checkpoint_id: str,
        actions: list[dict[str, Any]],
        since: int | None = None,
        conflicts: list[dict[str, Any]] | None = None,  # what the planned conflicts cover: journaled, not acted on
    ) -> str:
        planned = _actions_decoder.decode(json.dumps(actions))
        # Ending the batch makes every rename durable, before the engine can record the call as done.
        with ctx.workspace.staged_writes() as staged:
            if staged is not None:
                _stage(session, ctx.workspace, staged, planned)
            return _carry_out(session, ctx, checkpoint_id, planned, current)

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
        # A link is left out: the engine records a path's before-state through a final symlink (where a write
        # lands), and a rollback removes the link itself; ``_remove_link`` records it.
        writes=lambda args: [
            str(a["path"]) for a in args.get("actions", []) if not _is_link(session.workspace, str(a["path"]))
        ],
        internal=True,
    )


def _stage(session: RunSession, workspace: Workspace, staged: StagedWrites, planned: list[FileAction]) -> None:
    """The contents the actions write, staged and durable before the first file changes (``workspace.staged``):
    one parallel fsync pass instead of one per file. An action found done or in conflict later leaves its staged
    copy unused (removed when the batch ends)."""
    for action in planned:
        if action.target_hash != ABSENT and action.target_mode is not None:
            data = session.files.version(action.path, action.target_hash, action.target_ref)
            workspace.stage(staged, action.path, data, action.target_mode)
    workspace.sync_staged(staged)


def _carry_out(
    session: RunSession,
    ctx: ToolContext,
    checkpoint_id: str,
    planned: list[FileAction],
    current: Callable[[str], FileState],
) -> str:
    done: list[str] = []
    met: list[str] = []
    # Removals first, deepest first, then writes, shallowest first: a folder is emptied before a file or
    # link takes its place, and comes back before the files in it.
    for action in sorted(planned, key=lambda a: (a.target_hash != ABSENT, _depth(a.path, a.target_hash))):
        now = current(action.path)
        step = action_step(action, now)
        if step == "apply" and now.folder and not ctx.workspace.remove_empty_folder(action.path):
            step = "conflict"  # a folder with files in it: never replaced
        if step == "conflict":
            record_conflict(session, conflict_of_action(session, action, now))
            met.append(action.path)
            session.trace("rollback_action", call_id=ctx.call_id, path=action.path, action="conflict")
            continue
        if step == "apply" and action.target_hash == ABSENT and _is_link(ctx.workspace, action.path):
            _remove_link(session, ctx, action.path)
        elif step == "apply":
            data = None
            if action.target_hash != ABSENT:
                data = session.files.version(action.path, action.target_hash, action.target_ref)
            ctx.workspace.restore(action.path, data, action.target_mode)
        done.append(action.path)
        what = ("removed" if action.target_hash == ABSENT else "restored") if step == "apply" else "already_done"
        session.trace("rollback_action", call_id=ctx.call_id, path=action.path, action=what, undoes=action.undoes)
    return json.dumps({"checkpoint_id": checkpoint_id, "reverted": done, "conflicts": met})


def _depth(path: str, target: str) -> int:
    depth = path.count("/")
    return -depth if target == ABSENT else depth


def _is_link(workspace: Workspace, path: str) -> bool:
    try:
        return workspace.link_parent(path) is None and os.path.islink(workspace.locate(path))
    except ToolFailure:
        return False


def _remove_link(session: RunSession, ctx: ToolContext, path: str) -> None:
    """Remove a symlink the agent made, recorded as this call's change like any other: its before-state durable
    first (so rolling the rollback back puts the link back), the patch after."""
    files = session.files
    if any(state.path == path for state in files.befores.get(ctx.call_id, ())):
        ctx.workspace.restore(path, None, None)  # a re-run: the engine recalled the before-state and records it
        return
    data, mode = ctx.workspace.snapshot(path)
    before = files.describe(path, data, mode)
    state = FileBeforeState(
        tool_call_id=ctx.call_id, path=path, before_hash=before.hash, before_ref=before.ref, before_mode=before.mode
    )
    files.befores.setdefault(ctx.call_id, []).append(state)
    session.add_record(state)
    session.commit()
    ctx.workspace.restore(path, None, None)
    files.record(ctx.call_id, before, None, None)


def _phases(actions: list[FileAction]) -> list[list[FileAction]]:
    """Calls of their own, in order, where one path stands in another's way: the removal of what stands where a
    folder must come back (the agent's ``src`` link over the user's ``src/``), then the removal of files in a
    folder that a file or link replaces, then the rest. Each call's before- and after-states are then read with
    nothing of the next call in place, so they are the paths' own, never a link target's."""

    folders = {parent for a in actions for parent in _parents(a.path)}  # linear: a path's parents, not all pairs
    written = {a.path for a in actions if a.target_hash != ABSENT}
    clear = [a for a in actions if a.target_hash == ABSENT and a.path in folders]
    emptied = [a for a in actions if a.target_hash == ABSENT and a.path not in folders and written & _parents(a.path)]
    rest = [a for a in actions if a.target_hash != ABSENT or (a.path not in folders and not written & _parents(a.path))]
    return [phase for phase in (clear, emptied, rest) if phase]


def _parents(path: str) -> set[str]:
    parts = path.split("/")
    return {"/".join(parts[:end]) for end in range(1, len(parts))}


def rollback_files(
    session: RunSession, checkpoint_id: str, *, dry_run: bool = False, include_uncertain: bool = False
) -> RollbackPlan:
    """Revert the agent's changes after ``checkpoint_id``, newest first; files the user changed become conflicts.
    A rollback a crash cut short is finished first, except by a dry run, which writes nothing (its read-only
    session has no claim: finishing it there failed as if the run had been taken over, exit 6)."""
    if not dry_run and checkpoint_id in session.checkpoints:  # a refused rollback (no such checkpoint) writes nothing
        finish_interrupted(session)
    plan = plan_files(session, checkpoint_id, include_uncertain=include_uncertain)
    if dry_run:
        return plan
    trace_rollback_plan(session, plan)
    recorded = [
        record_conflict(session, with_combined_patch(session, c, cover))
        for c, cover in zip(plan.conflicts, plan.covers, strict=True)
    ]
    plan = msgspec.structs.replace(plan, conflicts=recorded)
    since = session.checkpoints[checkpoint_id].patches_len
    # The conflicts' covers are journaled with the first call (one with no action when there are only conflicts):
    # a resolution reads its base there, and settles the path from ``since`` on.
    phases = _phases(plan.actions) or ([[]] if plan.conflicts else [])
    for number, phase in enumerate(phases):
        args: dict[str, Any] = {"checkpoint_id": checkpoint_id, "actions": msgspec.to_builtins(phase), "since": since}
        if number == 0 and plan.covers:
            args["conflicts"] = msgspec.to_builtins(plan.covers)
        session.registry.put(rollback_tool(session))
        call = ToolCall(call_id=next_id(session, "rollback"), tool=ROLLBACK_TOOL, args=args)
        result = session.runner.execute(call, f"step_{session.step}")
        entry = session.ledger[call.call_id]
        if entry.status != "succeeded":
            session.commit()
            raise ResumeError(
                f"rollback_files to {checkpoint_id} did not finish ({entry.error or entry.status}); nothing that was "
                f"reverted is lost: see `safepoint ledger {session.info.run_id}`, fix the cause, and run the rollback "
                "again"
            )
        plan = _with_met(session, plan, phase, json.loads(str(result.value)).get("conflicts", []))
    session.commit()
    session.trace(
        "rollback_finished", checkpoint_id=checkpoint_id, reverted=len(plan.actions), conflicts=len(plan.conflicts)
    )
    return plan


def trace_rollback_plan(session: RunSession, plan: RollbackPlan) -> None:
    """The plan in the trace: how much it reverts, and each file it leaves out and why (an uncertain author, a
    version nobody kept); the conflicts are traced as they are recorded."""
    session.trace(
        "rollback_planned",
        checkpoint_id=plan.checkpoint_id,
        actions=len(plan.actions),
        conflicts=len(plan.conflicts),
        uncertain=len(plan.uncertain),
        unrestorable=len(plan.unrestorable),
    )
    for left in plan.unrestorable:
        session.trace("rollback_skipped", path=left.path, call_id=left.call_id, why=left.why)
    for change in plan.uncertain:
        session.trace("rollback_skipped", path=change.path, call_id=change.call_id, why=change.why)


def _with_met(session: RunSession, plan: RollbackPlan, phase: list[FileAction], met: list[str]) -> RollbackPlan:
    """The plan as carried out: an action that met a change made since the plan (or a folder with files in it)
    is reported as the conflict it became."""
    if not met:
        return plan
    by_path = {action.path: action for action in phase if action.path in met}
    covers = [
        ConflictCover(
            path=a.path,
            expected_hash=a.expected_hash,
            base_hash=a.target_hash,
            base_ref=a.target_ref,
            base_mode=a.target_mode,
            undoes=a.undoes,
        )
        for a in by_path.values()
    ]
    return msgspec.structs.replace(
        plan,
        actions=[a for a in plan.actions if a.path not in by_path],
        conflicts=[*plan.conflicts, *(session.conflicts[path] for path in by_path)],
        covers=[*plan.covers, *covers],
    )


def finish_interrupted(session: RunSession) -> list[str]:
    """Complete any rollback or resolution a crash interrupted (their actions are idempotent)."""
    finished = []
    for call_id in list(session.calls.open):  # a finished call is never finished again: not every call looked at
        entry = session.ledger[call_id]
        if entry.tool_name not in (ROLLBACK_TOOL, RESOLVE_TOOL) or not is_internal(entry):
            continue  # a model's call that only shares a name or an id shape is the agent's, never finished here
        if entry.status in ("started", "uncertain", "planned"):
            tool = rollback_tool(session) if entry.tool_name == ROLLBACK_TOOL else resolve_tool(session)
            session.registry.put(tool)
            args = expand_input(entry, session.files, session.contents)  # its large values read back
            session.runner.execute(ToolCall(call_id=call_id, tool=entry.tool_name, args=args), entry.step_id)
            finished.append(call_id)
    return finished


def next_id(session: RunSession, kind: str) -> str:
    return next_internal_id(session.ledger, kind)


# conflicts ------------------------------------------------------------------------------------------------------
def resolve(session: RunSession, path: str, resolution: ConflictResolution) -> dict[str, Any]:
    """Settle a pending conflict (``engine.conflicts``), after finishing any resolution a crash cut short."""
    conflict = session.conflicts.get(path)
    if conflict is None or conflict.resolution != "pending":
        raise UnknownReferenceError(
            f"{path!r} has no pending conflict in run {session.info.run_id!r}; "
            f"see `safepoint conflicts {session.info.run_id}`"
        )
    finish_interrupted(session)
    conflict = session.conflicts[path]
    if conflict.resolution != "pending":
        return {"path": path, "resolution": conflict.resolution, "finished": "an interrupted resolution"}
    return settle(session, conflict, resolution)


# restore_session ------------------------------------------------------------------------------------------------
def restore_session(
    session: RunSession, checkpoint_id: str, *, with_files: bool = False, include_uncertain: bool = False
) -> Restored:
    """The conversation and run state go back to ``checkpoint_id`` as a new branch (the old one stays in the log);
    files stay as they are unless ``with_files`` also rolls them back. Effects outside the workspace after the
    checkpoint are not undone: they are listed, with the compensations that exist."""
    at = session.view.checkpoint(checkpoint_id)
    if at is None or not at.complete:
        raise UnknownReferenceError(
            f"checkpoint {checkpoint_id!r} is not a complete checkpoint of run {session.info.run_id!r}; "
            f"list them with `safepoint checkpoints {session.info.run_id}`"
        )
    conflicts: list[str] = []
    if with_files:
        plan = rollback_files(session, checkpoint_id, include_uncertain=include_uncertain)
        conflicts = [c.path for c in plan.conflicts]
    checkpoint = at.checkpoint
    # Kept: the calls the branch's messages name, asked for (an assistant's tool calls) or answered (a tool
    # message: an own loop's ``run.call`` adds only that).
    kept = {call.call_id for message in at.history for call in message.tool_calls}
    kept |= {message.tool_call_id for message in at.history if message.tool_call_id is not None}
    abandoned = tuple(c for c, e in session.ledger.items() if c not in kept and not is_internal(e))
    not_undone = external_effects(session, [session.ledger[c] for c in abandoned])
    session.rewind(checkpoint.history_len, checkpoint_id, "restore_session", abandoned)
    session.return_to(at)
    restored = session.checkpoint(checkpoint.kind)  # the same point of the plan, on the new branch
    session.event(
        "interrupted",
        f"session restored to {checkpoint_id}; {decision_choices.resumer(session.info)} continues from there",
    )
    session.trace(
        "session_restored",
        checkpoint_id=checkpoint_id,
        new_checkpoint_id=restored.checkpoint_id,
        abandoned=list(abandoned),
        not_undone=[effect.call_id for effect in not_undone],
        with_files=with_files,
    )
    # What was in flight belonged to the branch left behind: a restart must not judge the new one by it.
    session.restart.delete()
    return Restored(
        **msgspec.structs.asdict(restored),
        restored_to=checkpoint_id,
        with_files=with_files,
        not_undone=not_undone,
        conflicts=conflicts,
        resume_with=decision_choices.resumer(session.info),
    )


def external_effects(session: RunSession, entries: list[ToolLedgerEntry]) -> list[ExternalEffect]:
    """The calls among ``entries`` that may have acted outside the workspace (anything but file changes, which
    rollback_files handles); a read (idempotent) changed nothing and is not listed."""
    compensated = {e.compensates: c for c, e in session.ledger.items() if e.compensates and e.status == "succeeded"}
    run_id = session.info.run_id
    effects = []
    for entry in entries:
        outside = sorted(set(entry.side_effects) - _WORKSPACE_EFFECTS)
        if (
            not outside
            or entry.idempotency == "idempotent"
            or entry.status not in ("succeeded", "started", "uncertain")
        ):
            continue
        happened = "it happened" if entry.status == "succeeded" else "it may have happened (its outcome is unknown)"
        repeat = (
            f"not undone: {happened}. Resuming may repeat it: the model is told of it, but a call it makes again "
            "on the new branch runs again"
        )
        tool = session.registry.get(entry.tool_name) if entry.tool_name in session.registry else None
        compensation = None
        if entry.call_id not in compensated and tool is not None and tool.compensator is not None:
            compensation = f"safepoint compensate {run_id} {entry.call_id}"
        effects.append(
            ExternalEffect(
                call_id=entry.call_id,
                tool=entry.tool_name,
                status=entry.status,
                side_effects=outside,
                repeat=repeat,
                compensation=compensation,
                compensated_by=compensated.get(entry.call_id),
            )
        )
    return effects


# compensate_external_action -------------------------------------------------------------------------------------
def compensate(
    session: RunSession, ledger_entry_id: str, *, assume_done: bool = False, decision: str | None = None
) -> str:
    """Run the compensator of a finished call, at most once, as its own ledger entry linked to the original."""
    entry = session.ledger.get(ledger_entry_id)
    if entry is None:
        raise UnknownReferenceError(
            f"ledger entry {ledger_entry_id!r} is not in run {session.info.run_id!r}; "
            f"see `safepoint ledger {session.info.run_id}`"
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
    # Found by the link, not by the id: a run written before the namespace named it compensate_<id>.
    earlier = [c for c, e in session.ledger.items() if e.compensates == ledger_entry_id]
    compensation_id = earlier[-1] if earlier else internal_id("compensate", ledger_entry_id)
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
    session.trace("compensation", call_id=compensation_id, compensates=ledger_entry_id, status=result.status)
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


# a person's finding about an uncertain call ------------------------------------------------------------------------
def settle_call(session: RunSession, call_id: str, *, happened: bool, by: str = "user") -> dict[str, Any]:
    """A person checked by hand whether an interrupted call took effect. ``happened``: the call is finished as
    succeeded, its result "settled by a person", and never run again. Not ``happened``: the next resume runs it
    again without asking when its replay policy allows that (the decision is the person's ``replay``); with policy
    ``never`` it is finished as failed, and the model is told it did not take effect. Recorded (who, when) in the
    ledger under the run's claim, durable before this returns."""
    from safepoint.engine.log_writer import now

    run_id = session.info.run_id
    entry = session.ledger.get(call_id)
    if entry is None:
        raise UnknownReferenceError(f"call {call_id!r} is not in run {run_id!r}; see `safepoint ledger {run_id}`")
    pending = any(call.call_id == call_id for call in session.pending)
    if entry.status == "started" and not pending and decision_choices.is_own_loop(session.info):
        # An own loop's call: its program asks for it again after sp.resume, which takes the decision; settle
        # has no pending call to answer (rejected: "is started: not uncertain", which it is).
        refused = decision_choices.replay_refusal(session.store, session.view, session.workspace, entry)
        offered = " or ".join(decision_choices.commands(session.view, call_id, decision_choices.choices_of(refused)))
        raise ResumeOptionError(
            f"call {call_id!r} of run {run_id!r} is uncertain and was made by the run's own loop, which settles it "
            f"when it resumes: {offered}"
        )
    if entry.status not in ("started", "uncertain") or not pending:
        told = " and the model was told so" if entry.status == "uncertain" else ""
        raise ResumeOptionError(
            f"call {call_id!r} of run {run_id!r} is {entry.status}{told}: only a call whose outcome is uncertain "
            f"and not yet decided can be settled; see `safepoint explain {run_id}`"
        )
    at = now()
    who = f"a person ({by}, {at})"
    # "Run it again" is a replay: refused, before anything is written, for a call that cannot run again.
    again = not happened and entry.replay_policy != "never"
    if again and (refused := decision_choices.replay_refusal(session.store, session.view, session.workspace, entry)):
        [skip] = decision_choices.commands(session.view, call_id, ["skip"])
        raise ResumeOptionError(
            f"call {call_id!r} of run {run_id!r} cannot run again: {refused}; settle it with --happened, or "
            f"`{skip}` (the model is told it may have happened)"
        )
    try:
        args = expand_input(entry, session.files, session.contents)
    except StoreError:
        args = {}  # its recorded input is lost: what it is told names the call, never its arguments
    call = ToolCall(call_id=call_id, tool=entry.tool_name, args=args)
    if not happened and entry.replay_policy != "never":
        reason = f"{who} checked that it did not happen: run it again"
        if entry.status == "started":
            session.calls.settle(entry, "uncertain", "replay", reason)
        session.calls.decide(call_id, "replay", by)  # the person's decision: the next resume runs it, unasked
        session.commit()
        return {
            "run_id": run_id,
            "call_id": call_id,
            "happened": False,
            "status": "uncertain",
            "outcome": f"runs again at the next {decision_choices.resumer(session.info)}, without asking",
        }
    certain = happened and session.runner.probe(entry) == "done"  # the files hold what it was to make
    if entry.status == "started":
        entry = session.calls.settle(entry, "uncertain")
    if happened:
        # Its file changes are recorded against the before-state kept when it started, as for a probe's "done";
        # unless its probe finds exactly its result there, their author is uncertain (rollback asks).
        session.files.settle(call_id, certain=certain)
        text = (
            f"[safepoint] {call.tool}({call_id}) was interrupted; {who} checked that its effect happened. It is not "
            "run again."
        )
        _, ref = session.tool_message(call, text)
        session.calls.finish(entry, "succeeded", ref, decision="settled", reason=f"settled by {who}: it happened")
        outcome = "succeeded: settled by a person, never run again"
    else:
        text = (
            f"[safepoint] {call.tool}({call_id}) was interrupted; {who} checked that it did not take effect. It is not "
            "run again (its replay policy is never): call it again if it is still needed."
        )
        _, ref = session.tool_message(call, text)
        reason = f"settled by {who}: it did not happen"
        session.calls.finish(
            entry, "failed", ref, error="did not take effect (checked by a person)", decision="settled", reason=reason
        )
        outcome = "failed: did not take effect; the model is told and may call it again"
    session.leave_pending(call_id)
    session.checkpoint("tool_end")  # the call is settled: a resume continues after it
    session.commit()
    return {
        "run_id": run_id,
        "call_id": call_id,
        "happened": happened,
        "status": session.ledger[call_id].status,
        "outcome": outcome,
    }
