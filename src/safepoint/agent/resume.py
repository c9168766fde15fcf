"""Resume after a crash or a restart (seed 003 §6 for one run, then §8.6 of seed 000): judge the run, claim it
(a restart raises the generation), and either close it (§5) or restore it and settle its interrupted calls."""

from __future__ import annotations

from collections.abc import Callable

from safepoint.agent.loop import Recovery, prepare_resume, restore
from safepoint.agent.subagents import SPAWN_SUBAGENT, subagent_tool
from safepoint.core.resume import last_completed_step
from safepoint.engine import actions
from safepoint.engine.session import RunSession, holder_id
from safepoint.engine.tools import ToolRegistry
from safepoint.errors import DecisionNeeded, RecoveryClosedError, ResumeError
from safepoint.protocol import TERMINAL_STATUS_RESTART
from safepoint.providers.select import provider_for
from safepoint.restart import inbox
from safepoint.restart.judge import close_after_restart, judge, report_of
from safepoint.store.base import Store
from safepoint.workspace.files import Workspace


def resume_session(
    store: Store,
    run_id: str,
    workspace: Workspace,
    registry: ToolRegistry,
    *,
    replay: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    takeover: bool = False,
    model: str | None = None,
    output: Callable[[str], None] | None = None,
) -> tuple[RunSession, Recovery | None]:
    """The open session and what was recovered (None: a finished run goes on with newly submitted input).

    Raises ``RecoveryClosedError`` when recovery closed the run instead (its parent, if any, is told), and
    ``DecisionNeeded`` when a call may have taken effect and a person must decide."""
    owner = store.owner(run_id)
    if owner is not None and owner.terminal_at is not None and store.read_restart_checkpoint(run_id) is None:
        # Closed, and its cleanup finished: nothing to claim, nothing to record again.
        raise RecoveryClosedError(
            f"run {run_id!r} is closed ({owner.terminal_status}, at {owner.terminal_at}); it is never resumed. "
            f"See `safepoint explain {run_id}`; continue its work with `safepoint run ... --successor-of {run_id}`"
        )
    # Claim first, then judge under the claim: a holder fenced off now cannot change what is judged.
    claim = store.claim(run_id, holder_id(), takeover=takeover)  # a restart: the generation goes up
    try:
        judged = judge(store, run_id, resuming_model=model)
    except BaseException:
        store.release(claim)
        raise
    if not judged.verdict.resumable:
        try:
            close_after_restart(store, claim, judged)
        finally:
            store.release(claim)
        raise RecoveryClosedError(
            f"run {run_id!r} was not resumed ({judged.verdict.summary}); it was closed: "
            f"{TERMINAL_STATUS_RESTART} See `safepoint explain {run_id}`"
        )
    session = RunSession.open(store, run_id, workspace, registry, claim=claim)
    if SPAWN_SUBAGENT not in registry:  # an interrupted spawn call resumes its child while the run is restored
        session.registry.put(subagent_tool(session, provider_for, output))
    try:
        session.add_record(report_of(judged.verdict, claim.generation, "resumed"))
        session.restart.current = judged.verdict.payload
        if session.view.status == "completed":
            if inbox.has_submissions(session):
                # The conversation goes on with what was submitted since; until it finishes again it is running,
                # so a crash in between is resumed, not taken for a finished run.
                session.event("running", "resumed: new input was submitted")
                return session, None
            raise ResumeError(f"run {run_id!r} already completed; there is nothing to resume")
        actions.finish_interrupted(session)  # a rollback or resolution a crash cut short is finished first
        plan = prepare_resume(session, replay=replay, skip=skip)
        if plan.needs_decision:
            waiting = ", ".join(f"{r.entry.tool_name}({r.entry.call_id})" for r in plan.needs_decision)
            session.event("waiting_decision", waiting)
            raise DecisionNeeded(
                f"run {run_id!r} waits for a decision on {waiting}: "
                "resume with --replay CALL_ID to run it again or --skip CALL_ID to leave it"
            )
        recovery = restore(session, plan)
        # An own loop numbers its steps itself: it continues after the last completed one.
        session.step = last_completed_step(plan.resume_from.checkpoint) if plan.resume_from else 0
    except BaseException:
        session.commit()
        session.close()
        raise
    return session, recovery
