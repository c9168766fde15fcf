"""Resume's steps on an open session (§8.6 of seed 000, all eight): restore the history and run state of the
latest complete checkpoint, settle the interrupted calls, and tell the model what happened (the recovery note).
Judging and claiming the run come first (``agent.loop.resume_session``)."""

from __future__ import annotations

from dataclasses import dataclass

from safepoint.agent.context import RECOVERY_NOTE
from safepoint.core.doubt import Doubt, doubted_entry
from safepoint.core.ledger import NEVER_RAN
from safepoint.core.note import recovery_note
from safepoint.core.resume import (
    CallReport,
    ResumePlan,
    check_decisions,
    expected_files,
    is_internal,
    plan_resume,
    recent_calls,
)
from safepoint.engine import large_values
from safepoint.engine.session import RunSession
from safepoint.errors import ToolFailure
from safepoint.records import ToolLedgerEntry
from safepoint.restart.doubt import doubt_of


def _left_behind(session: RunSession) -> list[ToolLedgerEntry]:
    """The calls a restore_session just left on the abandoned branch (when that restore is what is resumed)."""
    events = session.view.events
    if not session.view.restores or not events or not events[-1].detail.startswith("session restored"):
        return []
    return [session.ledger[c] for c in session.view.restores[-1].abandoned if c in session.ledger]


@dataclass(frozen=True)
class Recovery:
    plan: ResumePlan
    note: str


def workspace_hashes(session: RunSession) -> dict[str, str | None]:
    hashes = {}
    for path in expected_files(session.view):
        try:
            hashes[path] = session.workspace.hash(path)
        except ToolFailure:
            hashes[path] = None
    return hashes


def mark_doubt(session: RunSession, doubt: Doubt) -> None:
    """Record, durably, the calls a damaged log no longer accounts for as ``started``: they may have run. From
    there the ordinary rules settle them (``uncertain``; re-run only if their policy allows it, or a person says
    so), here and whenever the model asks for the same call again. A call the ledger lost entirely is classified
    by its tool first; one whose tool is not registered stays out of the ledger (the runner refuses it)."""
    marked: list[ToolLedgerEntry] = []
    for call_id, (call, step_id) in doubt.calls.items():
        entry = session.ledger.get(call_id)
        if entry is None:
            if call.tool not in session.registry:
                continue
            call = large_values.resolve_call(call, session.contents)  # as the model asked (its message's blobs)
            entry = session.calls.plan(session.registry.get(call.tool), call, step_id, call.args)
            marked.append(entry)
        if entry.status in NEVER_RAN and not is_internal(entry):
            marked.append(session.calls.record(doubted_entry(entry)))
    if marked:
        session.view.add_entries(marked)  # the plan below reads the view: it must see them too
        session.commit()
        session.trace("ledger_damaged", calls=[e.call_id for e in marked if e.status == "started"])


def prepare_resume(session: RunSession, *, replay: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> ResumePlan:
    """Steps 1-3 and 5-6: checkpoint, integrity, workspace, last calls, replay decisions (nothing runs yet)."""
    doubt = doubt_of(session.store, session.view, session.contents.lost)  # and what its reads found lost
    mark_doubt(session, doubt)
    check_decisions(session.view, replay, skip, frozenset(doubt.calls))
    for call_id, choice in [(c, "replay") for c in replay] + [(c, "skip") for c in skip]:
        session.calls.decide(call_id, choice)
        session.trace("call_decided", call_id=call_id, decision=choice)
    probes = {}
    for call_id in list(session.calls.open):  # a finished call is never probed: not every call is looked at
        entry = session.ledger.get(call_id)
        if entry is not None and entry.status == "started" and session.calls.current_decision(call_id) is None:
            found = session.probe(entry)
            if found is not None:
                probes[call_id] = found
    plan = plan_resume(
        session.view,
        decisions={
            call_id: d for call_id, d in session.calls.decisions.items() if session.calls.current_decision(call_id)
        },
        probes=probes,
        workspace_hashes=workspace_hashes(session),
        doubt=doubt,
        open_only=True,
    )
    trace_plan(session, plan)
    return plan


def trace_plan(session: RunSession, plan: ResumePlan) -> None:
    """The resume's decisions in the trace: the checkpoint it continues from and why, then the replay decision
    of every call around the interruption and of every call not simply taken from the ledger (linear in the
    ledger; a finished call of an earlier step is left out, its outcome is just taken)."""
    at = plan.resume_from
    session.trace(
        "resume_plan",
        checkpoint_id=at.checkpoint.checkpoint_id if at else None,
        step=plan.step,
        why=plan.why,
        needs_decision=[r.entry.call_id for r in plan.needs_decision],
        drift=[d.path for d in plan.drift],
        damage=list(plan.damage),
    )
    recent = {r.entry.call_id for r in recent_calls(plan)}
    for report in plan.calls:
        entry, decision = report.entry, report.decision
        if entry.call_id in recent or decision.action not in ("take_outcome", "run"):
            session.trace(
                "replay_decision",
                call_id=entry.call_id,
                tool_name=entry.tool_name,
                status=entry.status,
                idempotency=entry.idempotency,
                replay_policy=entry.replay_policy,
                action=decision.action,
                replayable=decision.replayable,
                why=decision.why,
            )


def restore(session: RunSession, plan: ResumePlan) -> Recovery:
    """Steps 4, 7 and 8: restore history and state, settle the interrupted calls, inject the recovery note."""
    at = plan.resume_from
    if at is None:
        session.start_over()
    else:
        history = large_values.resolve_branch(at.history, session.view.ref_messages, session.contents)
        if session.history != history:  # both read back
            session.rewind(at.checkpoint.history_len, at.checkpoint.checkpoint_id, "resume from checkpoint")
        session.return_to(at, history)
    session.event("running", f"resumed: {plan.why}")
    step_id = f"step_{session.step}"
    for call in list(session.pending):
        session.runner.execute(call, step_id)
    # The note tells what actually happened: each call as the ledger has it now, with the decision taken.
    left = _left_behind(session)
    left_ids = {entry.call_id for entry in left}  # once, not per call: a step of 10,000 calls made it quadratic
    recent = [
        CallReport(session.ledger.get(r.entry.call_id, r.entry), r.decision)
        for r in recent_calls(plan)
        if r.entry.call_id not in left_ids
    ]
    summaries = {
        r.entry.call_id: session.contents.load_result(r.entry.result_ref)[:300] for r in recent if r.entry.result_ref
    }
    restored = (session.view.restores[-1].checkpoint_id, left) if left else None
    note = recovery_note(plan, recent, summaries, restored=restored)
    session.add_message("system", note, name=RECOVERY_NOTE)
    # No after-step checkpoint here: the interrupted step ends when its loop says so, not when resume does.
    session.commit()
    session.trace("recovery_note", checkpoint_id=at.checkpoint.checkpoint_id if at else None, calls=len(recent))
    session.log.flush_trace()  # a recovery decision: written now, not with the next batch
    return Recovery(plan, note)
