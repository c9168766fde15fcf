"""Read-only reports on runs (status, ledger, checkpoints, explain), as typed results (``safepoint.results``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from safepoint.core.run_summary import RunSummaryRecord, decode_summary
from safepoint.core.run_view import RunView
from safepoint.errors import ConfigError, SafepointError, ToolFailure, UnknownReferenceError
from safepoint.protocol import SELF_HEALING_PROMPT, TERMINAL_STATUS_RESTART, ReplayForbidden
from safepoint.records import RunInfo, ToolLedgerEntry, to_plain
from safepoint.results import (
    CallReport,
    CheckpointSummary,
    CutShortAction,
    DecisionWanted,
    Drift,
    Explanation,
    NotRestorable,
    OwnerView,
    Problem,
    RecoveryView,
    RestartCheckpointView,
    RestartVerdictView,
    ResumePoint,
    RunSummary,
    SubagentView,
)
from safepoint.store.liveness import owner_alive

if TYPE_CHECKING:
    from safepoint.core.replay import ProbeResult
    from safepoint.store.base import Store
    from safepoint.workspace.files import Workspace


def load_view(store: Store, run_id: str) -> RunView:
    """The run as its log tells it (the same reading as the engine's, without loading the engine: the status,
    ledger and checkpoint reports must start fast)."""
    from safepoint.store import view_index

    return view_index.read_view(store, view_index.header_info(store, run_id))  # its snapshot, then the log after


def effective_status(store: Store, view: RunView) -> str:
    """``running`` only while its owner lives; a dead owner's run is ``interrupted``, or ``waiting_decision`` when
    a call it left uncertain waits for a person (a resume would stop and ask: saying so before is the truth)."""
    status = view.status
    if status != "running":
        return status
    owner = store.owner(view.info.run_id)
    if owner is None or owner.released or not owner_alive(owner):
        from safepoint.core.resume import plan_resume

        # only an open call waits for a person: the open calls' plan (not every call decoded and planned)
        return "waiting_decision" if plan_resume(view, open_only=True).needs_decision else "interrupted"
    return "running"


def ended_by_person(store: Store, view: RunView) -> tuple[str, str, str] | None:
    """(status shown, what the person did, reason) for a run closed because a person cancelled it or reset its
    context, whether its owner acted on it or a restart recovery did (no owner ran it): the records keep the seed's
    terminal status and reason verbatim; what is shown says what happened ("cancelled by USER at ...")."""
    closed = next((r for r in reversed(view.recoveries) if r.action == "closed"), None)
    if closed is None or not isinstance(closed.disposition, ReplayForbidden):
        return None
    return _ended_by_person(store, view.info, closed.disposition.reason, closed.detail)


def _ended_by_person(store: Store, info: RunInfo, reason: str, detail: str) -> tuple[str, str, str] | None:
    from safepoint.protocol import CancelRequest, ContextResetRequest
    from safepoint.restart.judge import BY_A_PERSON, ancestor_stream_cancel, controls, person_detail

    if reason not in BY_A_PERSON:
        return None
    kind = ContextResetRequest if reason == "context_reset" else CancelRequest
    found = [r for _, r in controls(store, info.run_id) if isinstance(r, kind)]
    request = found[-1] if found else (ancestor_stream_cancel(store, info) if kind is CancelRequest else None)
    return BY_A_PERSON[reason], person_detail(request) if request is not None else detail, reason


def closed_words(store: Store, run_id: str) -> str:
    """How a closed run ended, as every command says it: "cancelled by USER at T" or "context reset by USER at T"
    for a person's act (as ``status`` and ``explain`` show it), else its recorded terminal status and time."""
    owner = store.owner(run_id)
    if owner is None or owner.terminal_at is None:
        return "closed"
    summary = stored_summary(store, run_id)
    if summary is not None:
        info = msgspec.json.decode(store.run_header(run_id), type=RunInfo)
        person = _summary_person(store, info, summary)
    else:
        person = ended_by_person(store, load_view(store, run_id))
    if person is not None:
        return person[1]
    # The seed's terminal status ends with a full stop; inside a sentence it would be a stray one.
    return f"{(owner.terminal_status or 'closed').rstrip('.')}, at {owner.terminal_at}"


def stored_summary(store: Store, run_id: str) -> RunSummaryRecord | None:
    """The run's summary as its store keeps it beside the log (``core.run_summary``), if it still describes the
    log's end; None: read the log."""
    found = store.read_summary(run_id)
    if found is None:
        return None
    summary = decode_summary(found[1])
    return summary if summary is not None and summary.last_seq == found[0] else None


def log_ends_as_read(store: Store, view: RunView) -> bool:
    """Whether the run's log still ends where ``view`` was read to (its summary, checked against the log's end by
    the store, names the same last seq); False when it cannot tell (no summary: a crash's torn tail, a restart's
    records): then the caller reads it again."""
    found = store.read_summary(view.info.run_id)
    return found is not None and found[0] == view.last_seq


def _summary_person(store: Store, info: RunInfo, summary: RunSummaryRecord) -> tuple[str, str, str] | None:
    if summary.closed_reason is None:
        return None
    return _ended_by_person(store, info, summary.closed_reason, summary.closed_detail)


def status_row(store: Store, run_id: str) -> RunSummary:
    """One run's row: from its summary when the store keeps one that still matches the log (what costs the same
    at 50,000 calls as at 100), else from its log."""
    summary = stored_summary(store, run_id)
    if summary is None:
        return _status_row_of_log(store, run_id)
    info = msgspec.json.decode(store.run_header(run_id), type=RunInfo)
    owner = store.owner(run_id)
    person = _summary_person(store, info, summary) if owner is not None and owner.terminal_at is not None else None
    status = summary.status
    if status == "running" and (owner is None or owner.released or not owner_alive(owner)):
        status = "waiting_decision" if summary.waiting else "interrupted"
    return RunSummary(
        run_id=run_id,
        status=person[0] if person else status,
        terminal_status=person[1] if person else owner.terminal_status if owner else None,
        parent=info.parent_run_id,
        task=info.task,
        step=summary.step,
        calls=summary.calls,
        problems=summary.problems,
        created_at=info.created_at,
    )


def _status_row_of_log(store: Store, run_id: str) -> RunSummary:
    view = load_view(store, run_id)
    last = view.latest_complete_checkpoint()
    owner = store.owner(run_id)
    person = ended_by_person(store, view) if owner is not None and owner.terminal_at is not None else None
    return RunSummary(
        run_id=run_id,
        status=person[0] if person else effective_status(store, view),
        terminal_status=person[1] if person else owner.terminal_status if owner else None,
        parent=view.info.parent_run_id,
        task=view.info.task,
        step=last.checkpoint.step if last else 0,
        calls=len(view.ledger),
        problems=len(view.problems),
        created_at=view.info.created_at,
    )


def status_rows(store: Store, run_id: str | None = None) -> list[RunSummary]:
    """One run (its errors raised), or every run of the store (a run that cannot be read is ``unreadable``)."""
    if run_id is not None:
        return [status_row(store, run_id)]
    rows: list[RunSummary] = []
    for rid in store.list_runs():
        try:
            rows.append(status_row(store, rid))
        except SafepointError as exc:
            rows.append(
                RunSummary(run_id=rid, status="unreadable", task=str(exc), step=0, calls=0, problems=1, created_at="")
            )
    return rows


def ledger_rows(store: Store, run_id: str) -> list[ToolLedgerEntry]:
    return list(load_view(store, run_id).ledger.values())


def checkpoint_rows(store: Store, run_id: str) -> list[CheckpointSummary]:
    """Every checkpoint, a ``tool_start``/``tool_end`` one with the call it was taken for: the call started (or
    settled) last before it, found by the ledger's times (one sort, then a binary search per checkpoint)."""
    import bisect

    view = load_view(store, run_id)
    starts = sorted((e.started_at, e.call_id) for e in view.ledger_entries if e.status == "started" and e.started_at)
    ends = sorted((e.finished_at, e.call_id) for e in view.ledger_entries if e.finished_at)

    def last_before(items: list[tuple[str, str]], at: str) -> str | None:
        index = bisect.bisect_right(items, (at, "\uffff")) - 1
        return items[index][1] if index >= 0 else None

    rows = []
    for at in view.checkpoints:
        checkpoint = at.checkpoint
        call_id = None
        if checkpoint.kind == "tool_start":
            pending = checkpoint.pending_tool_calls
            call_id = pending[0] if pending else last_before(starts, checkpoint.created_at)
        elif checkpoint.kind == "tool_end":
            call_id = last_before(ends, checkpoint.created_at)
        rows.append(
            CheckpointSummary(
                checkpoint_id=checkpoint.checkpoint_id,
                step=checkpoint.step,
                kind=checkpoint.kind,
                created_at=checkpoint.created_at,
                complete=at.complete,
                call_id=call_id,
            )
        )
    return rows


def checkpoint_for(store: Store, run_id: str, ref: str) -> str:
    """``ref`` as a checkpoint id: an id is kept as it is; ``step:N`` is the state after step N (its last
    complete ``after_step`` checkpoint; ``step:0``: the run's first complete checkpoint, before any step). A step a
    crash cut before its ``after_step`` and a resume finished has none: the next step's first complete
    ``before_step`` holds the same state (rejected: refusing ``step:N`` for the one step a crash touched, which is
    the step a user rolls back to after a crash)."""
    if not ref.startswith("step:"):
        return ref
    number = ref.removeprefix("step:")
    if not number.isdigit():
        raise UnknownReferenceError(f"--to {ref!r}: give step:N with N a step number, or a checkpoint id")
    step = int(number)
    complete = [at.checkpoint for at in load_view(store, run_id).checkpoints if at.complete]
    after = [c for c in complete if c.kind == "after_step" and c.step == step]
    following = [c for c in complete if c.kind == "before_step" and c.step == step + 1]
    found = complete[:1] if step == 0 else after[-1:] or following[:1]
    if not found:
        raise UnknownReferenceError(
            f"run {run_id!r} has no complete checkpoint after step {step}; see `safepoint checkpoints {run_id}`"
        )
    return found[0].checkpoint_id


def _hash_or_none(workspace: Workspace, path: str) -> str | None:
    try:
        return workspace.hash(path)
    except ToolFailure:  # a folder now, or a path that leads outside: not what the run left there
        return "unreadable"


_WORKSPACE_EFFECTS = frozenset({"filesystem_write", "filesystem_delete", "process"})


def not_captured(tool: str, side_effects: Iterable[str]) -> str | None:
    """What safepoint cannot see or roll back for a call: effects outside the workspace (§8.4)."""
    outside = sorted(set(side_effects) - _WORKSPACE_EFFECTS)
    if outside:
        return f"effects outside the workspace ({', '.join(outside)}) are not captured and cannot be rolled back"
    if tool == "run_command":
        return "changes the command made outside the workspace are not captured"
    return None


def explain(
    store: Store,
    run_id: str,
    workspace: str | None = None,
    *,
    limit: int | None = None,
    offset: int = 0,
    view: RunView | None = None,
) -> Explanation:
    """Why a resume would continue where it would, and what it would do with every recorded call (``offset`` and
    ``limit``: a page of them, in ledger order; the plan itself always covers every call). ``view``: the run as a
    caller read it already (the review page's timeline: one read of the log, not two)."""
    if offset < 0 or (limit is not None and limit < 0):
        raise ConfigError(f"explain {run_id}: --offset and --limit are counts of calls, 0 or more")
    # The engine, the resume planner and the command classifier behind the built-in tools: only here.
    from safepoint.core.cut_short import cut_short
    from safepoint.core.plan_page import plan_page
    from safepoint.core.resume import expected_files, plan_resume
    from safepoint.core.rollback import UNKNOWN
    from safepoint.engine import decision_choices
    from safepoint.engine.builtin import builtin_registry
    from safepoint.engine.file_changes import NOT_KEPT
    from safepoint.engine.session import RunSession
    from safepoint.restart.doubt import doubt_of
    from safepoint.workspace.files import Workspace

    view = load_view(store, run_id) if view is None else view
    hashes = None
    probes: dict[str, ProbeResult] = {}
    if workspace is not None:
        ws = Workspace(workspace)
        hashes = {path: _hash_or_none(ws, path) for path in expected_files(view)}
        # What a resume would decide: the built-in tools' probes too (they only read).
        reader = RunSession.open(store, run_id, ws, builtin_registry(), read_only=True, view=view)
        for call_id in reader.calls.open:  # a finished call is never probed: not every call decoded for this
            entry = reader.ledger[call_id]
            if entry.status == "started" and reader.calls.current_decision(call_id) is None:
                found = reader.probe(entry)
                if found is not None:
                    probes[call_id] = found
    # A page plans the open calls and the page's (``core.plan_page``); the whole listing plans every call.
    paged = limit is not None
    plan = plan_resume(view, workspace_hashes=hashes, probes=probes, doubt=doubt_of(store, view), open_only=paged)
    page = plan_page(view, plan, offset, limit, probes) if limit is not None else plan.calls[offset:]
    at = plan.resume_from
    # What each waiting call will be accepted (a call that cannot run again: --skip only), as resume offers it.
    waiting = {r.entry.call_id for r in plan.needs_decision}
    refused = decision_choices.refusals(store, view, Workspace(workspace) if workspace else None, waiting)
    files: dict[str, list[str]] = {}
    for patch in view.patches:
        files.setdefault(patch.tool_call_id, []).append(patch.path)
    person = ended_by_person(store, view)
    closed = view.status in ("closed", "cancelled")
    return Explanation(
        run_id=run_id,
        status=person[0] if person else effective_status(store, view),
        task=view.info.task,
        resume_from=ResumePoint(
            checkpoint_id=at.checkpoint.checkpoint_id if at else None,
            step=at.checkpoint.step if at else 0,
            kind=at.checkpoint.kind if at else None,
            why=plan.why,
        ),
        calls=[
            CallReport(
                call_id=r.entry.call_id,
                step_id=r.entry.step_id,
                tool=r.entry.tool_name,
                status=r.entry.status,
                idempotency=r.entry.idempotency,
                replay_policy=r.entry.replay_policy,
                risk_level=r.entry.risk_level,
                side_effects=list(r.entry.side_effects),
                replayable=r.decision.replayable,
                action=r.decision.action,
                why=decision_choices.said(r.decision.why, refused.get(r.entry.call_id, ""))
                + (
                    "; the run is closed: it is never resumed"
                    if closed and r.entry.status in ("started", "uncertain")
                    else ""
                ),
                files=files.get(r.entry.call_id, []),
                not_captured=not_captured(r.entry.tool_name, r.entry.side_effects),
            )
            for r in page
        ],
        conflicts=[c for c in view.conflicts.values() if c.resolution == "pending"],
        not_restorable=[
            NotRestorable(path=p.path, call_id=p.tool_call_id, why="content before it was never captured")
            for p in view.patches
            if p.before_hash == UNKNOWN
        ]
        + [
            NotRestorable(path=p.path, call_id=p.tool_call_id, why="larger than 64 MiB: recorded by hash only")
            for p in view.patches
            if p.patch_ref == NOT_KEPT
        ],
        needs_decision=[]  # a closed run is never resumed: nobody is asked to decide for it
        if closed
        else [
            DecisionWanted(
                call_id=r.entry.call_id,
                tool=r.entry.tool_name,
                why=decision_choices.said(r.decision.why, refused.get(r.entry.call_id, "")),
                choices=list(decision_choices.choices_of(refused.get(r.entry.call_id, ""))),
                commands=decision_choices.commands(
                    view, r.entry.call_id, decision_choices.choices_of(refused.get(r.entry.call_id, ""))
                ),
            )
            for r in plan.needs_decision
        ],
        workspace_drift=[
            Drift(path=d.path, expected_hash=d.expected_hash, actual_hash=d.actual_hash, call_id=d.call_id)
            for d in plan.drift
        ],
        workspace=view.workspace_states[-1] if view.workspace_states else None,
        problems=[Problem(kind=p.kind, position=p.position, detail=p.detail) for p in view.problems]
        # What only the records beside the log show (a hole, or a torn end, is reported above already).
        + [
            Problem(kind="gap", position=view.last_seq, detail=f"found by cross-checking the ledger: {reason}")
            for reason in plan.damage
            if not reason.startswith("record")
            and not (reason.startswith("the log ends") and any(p.kind == "torn" for p in view.problems))
        ],
        recovery=recovery_report(store, view),
        cut_short=[
            CutShortAction(call_id=c.call_id, tool=c.tool, what=c.what, fix=c.fix)
            # what a crash left unfinished is open: the open calls, not every call decoded
            for c in cut_short(run_id, (view.current[call_id] for call_id in _in_order(view.unsettled)))
        ],
    )


def _in_order(places: dict[str, int]) -> list[str]:
    return sorted(places, key=places.__getitem__)


def recovery_report(store: Store, view: RunView, depth: int = 0) -> RecoveryView:
    """The recovery protocol's view of a run (seed 003): its recovery owner, its restart checkpoint, what restart
    recovery would decide now (the assertions checked, the disposition and its reason), what earlier recoveries
    decided, the terminal events, and the same for every subagent it spawned."""
    from safepoint.restart.judge import judge

    run_id = view.info.run_id
    owner = store.owner(run_id)
    judged = judge(store, run_id, resuming_model=None, view=view)  # the same reading: the log is read once
    verdict = judged.verdict
    stored = store.read_restart_checkpoint(run_id)
    checkpoint: RestartCheckpointView | None = None
    if stored is not None:
        checkpoint = RestartCheckpointView(intact=stored.intact, detail=stored.detail)
        if verdict.checkpoint is not None:
            checkpoint = RestartCheckpointView(
                intact=stored.intact,
                detail=stored.detail,
                mode=verdict.checkpoint.mode,
                updated_at=verdict.checkpoint.updated_at,
                payload=to_plain(verdict.payload),
                execution_config=to_plain(verdict.config),
            )
    closed = owner is not None and owner.terminal_status == TERMINAL_STATUS_RESTART
    person = ended_by_person(store, view) if owner is not None and owner.terminal_at is not None else None
    prompt = SELF_HEALING_PROMPT if closed else None
    terminal = owner.terminal_status if owner else None
    if person is not None:
        from safepoint.restart.judge import stop_prompt

        prompt = stop_prompt(person[2], person[1])  # what the parent was told: a person's act, not a restart
        terminal = f"{person[1]} (recorded as: {terminal})"
    disposition = verdict.disposition
    return RecoveryView(
        recovery_owner=OwnerView(
            recovery_class=owner.recovery_class,
            owner_id=owner.owner_id,
            generation=owner.generation,
            agent_id=owner.agent_id,
            message_id=owner.message_id,
            active_at=owner.active_at,
            terminal_at=owner.terminal_at,
            terminal_status=terminal,
            heartbeat_at=owner.heartbeat_at,
        )
        if owner
        else None,
        restart_checkpoint=checkpoint,
        if_restarted_now=RestartVerdictView(
            assertions_checked=list(verdict.checked),
            failed=verdict.failed,
            disposition=type(disposition).__name__ if disposition is not None else None,
            reason=disposition.reason if isinstance(disposition, ReplayForbidden) else None,
            detail=verdict.summary,
        ),
        recoveries=list(view.recoveries),
        terminal_events=list(store.terminal_events(run_id)),
        self_healing_prompt=prompt,
        subagents=[_child(store, spawned.child_run_id, spawned.call_id, depth) for spawned in view.spawned.values()],
    )


def _child(store: Store, run_id: str, call_id: str, depth: int) -> SubagentView:
    try:
        view = load_view(store, run_id)
    except SafepointError as exc:
        return SubagentView(run_id=run_id, call_id=call_id, status="missing", detail=str(exc))
    return SubagentView(
        run_id=run_id,
        call_id=call_id,
        status=effective_status(store, view),
        recovery=recovery_report(store, view, depth + 1) if depth < 8 else None,
    )
