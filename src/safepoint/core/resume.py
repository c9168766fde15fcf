"""The resume plan (§8.6): where to continue from, what each recorded call means now, what needs a person.

Pure: the runtime reads the store, runs probes and hashes the workspace, then asks this module what to do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from safepoint.core.doubt import Doubt, assumed_entry, doubted_entry
from safepoint.core.ledger import NEVER_RAN, settle_after_crash
from safepoint.core.replay import ProbeResult, ReplayDecision, decide_replay
from safepoint.core.run_view import CheckpointAt, RunView
from safepoint.errors import ResumeOptionError, UnknownReferenceError
from safepoint.records import CallDecision, Checkpoint, Message, ToolCall, ToolLedgerEntry

_STEP = re.compile(r"step_(\d+)$")


@dataclass(frozen=True)
class CallReport:
    entry: ToolLedgerEntry  # as settled after the crash (started -> uncertain)
    decision: ReplayDecision


@dataclass(frozen=True)
class Drift:
    """A file the run wrote whose content is no longer what the run left there."""

    path: str
    expected_hash: str
    actual_hash: str | None
    call_id: str


@dataclass(frozen=True)
class ResumePlan:
    resume_from: CheckpointAt | None
    why: str
    calls: list[CallReport]
    needs_decision: list[CallReport]
    drift: list[Drift] = field(default_factory=list)
    damage: tuple[str, ...] = ()  # how the log is known to be damaged: its doubtful calls are uncertain
    lost_calls: tuple[str, ...] = ()  # calls the damaged log lost entirely (what they were is unknown)
    doubted: frozenset[str] = frozenset()  # calls uncertain because the log lost their records (now or before)
    stopped_by: str = ""  # the run was stopped on purpose (SIGTERM, Ctrl-C): how, as its last event says
    recent: tuple[CallReport, ...] = ()  # ``recent_calls``: those of the last completed step and the interrupted one

    @property
    def step(self) -> int:
        return self.resume_from.checkpoint.step if self.resume_from else 0


def expected_files(view: RunView) -> dict[str, tuple[str, str]]:
    """Path -> (after_hash, call_id) of the run's last finished write to each path."""
    current = view.current  # looked up per patch: not a set of every finished call
    expected: dict[str, tuple[str, str]] = {}
    for patch in view.patches:
        entry = current.get(patch.tool_call_id)
        if entry is not None and entry.status == "succeeded":
            expected[patch.path] = (patch.after_hash, patch.tool_call_id)  # "" when the run removed it
    return expected


def lost_beginning(view: RunView) -> str | None:
    """Why the run may not be resumed when its log no longer starts at seq 1, else None. Its first records (the
    task's first turns, calls that ran and their outcomes) are gone for good; from what is left a resume would
    start again from the first step and run those calls again, the non-idempotent ones too (rejected: treating the
    rest as the whole run, which a truncation through a second name or by hand would then turn into repeats)."""
    if not view.lost_seqs or view.lost_seqs[0][0] != 1:
        return None
    last = view.lost_seqs[0][1]
    run_id = view.info.run_id
    return (
        f"run {run_id!r}: its log begins at seq {last + 1}, records 1..{last} are lost for good, so what already"
        f" ran is unknown; it is not resumed (a resume would run lost calls again). See `safepoint fsck {run_id}`;"
        f" continue its work with `safepoint run ... --successor-of {run_id}`"
    )


def plan_resume(
    view: RunView,
    *,
    decisions: dict[str, CallDecision] | None = None,
    probes: dict[str, ProbeResult] | None = None,
    workspace_hashes: dict[str, str | None] | None = None,
    doubt: Doubt | None = None,
    open_only: bool = False,
) -> ResumePlan:
    """``doubt``: what a damaged log no longer accounts for; those calls are planned as ``uncertain`` (the
    runtime records them so durably first, with their tools' classification, before it asks). ``open_only``: the
    plan's ``calls`` are the unsettled ones, the recent ones and the doubted ones (a resume's: every other call is
    finished, its recorded outcome simply taken, and none of them is traced or told), not every call of the run
    (``explain``'s)."""
    started = view.attempt_counts
    decisions = {
        call_id: decision
        for call_id, decision in {**view.decisions, **(decisions or {})}.items()
        if decision.attempt == started.get(call_id, 0)  # a decision made before a later crash no longer applies
    }
    probes = probes or {}
    at = view.latest_complete_checkpoint()
    if (lost := lost_beginning(view)) is not None:
        at, why = None, lost
    elif at is None:
        why = "no complete checkpoint: the run starts again from its first step"
    else:
        why = f"latest complete checkpoint ({at.checkpoint.kind} of step {at.checkpoint.step})"
        skipped = [c for c in view.after_latest if c.seq > at.seq]
        if skipped:
            why += f"; {len(skipped)} later checkpoint(s) unusable: {skipped[0].why_incomplete}"
    first = last_completed_step(at.checkpoint) if at else 0
    current = view.current
    doubt = doubt or Doubt()
    changed: dict[str, ToolLedgerEntry] = {}
    for call_id, (call, step_id) in doubt.calls.items():
        entry = current.get(call_id)
        if entry is None:
            changed[call_id] = assumed_entry(call, step_id, view.info.run_id)
        elif entry.status in NEVER_RAN:
            changed[call_id] = doubted_entry(entry)
    if open_only:
        chosen: Iterable[str] = [*view.open_and_recent(first), *(c for c in changed if c not in current)]
    else:
        chosen = [*current, *(c for c in changed if c not in current)]
    calls = []
    for call_id in chosen:
        entry = changed.get(call_id) or current[call_id]
        settled = settle_after_crash(entry)
        decision = decide_replay(settled, decision=decisions.get(entry.call_id), probe=probes.get(entry.call_id))
        calls.append(CallReport(settled, decision))
    # safepoint's own calls (rollback, resolution, compensation) are settled by their own commands, never by
    # the agent's resume: an uncertain compensation does not hold the agent up.
    needs = [r for r in calls if r.decision.action == "wait_decision" and not is_internal(r.entry)]
    drift = []
    if workspace_hashes is not None:
        for path, (expected, call_id) in expected_files(view).items():
            actual = workspace_hashes.get(path)
            if (actual or "") != expected:
                drift.append(Drift(path, expected, actual, call_id))
    recent = tuple(r for r in calls if step_number(r.entry.step_id) >= first and not is_internal(r.entry))
    return ResumePlan(
        resume_from=at,
        why=why,
        calls=calls,
        needs_decision=needs,
        drift=drift,
        stopped_by=view.events[-1].detail if view.events and view.events[-1].status == "interrupted" else "",
        damage=doubt.reasons,
        lost_calls=doubt.lost,
        doubted=frozenset(doubt.calls) | view.doubted.keys(),
        recent=recent,
    )


_FINISHED_RUN = frozenset({"completed", "closed", "cancelled"})


def check_decisions(
    view: RunView, replay: Sequence[str], skip: Sequence[str], doubted: frozenset[str] = frozenset()
) -> None:
    """``--replay``/``--skip`` name calls that wait for exactly that decision, or nothing is done at all: checked
    on the log before the run is claimed. ``doubted``: calls a damaged log leaves in doubt (they may be decided
    before the resume that records them so)."""
    if not replay and not skip:
        return
    run_id = view.info.run_id
    both = sorted(set(replay) & set(skip))
    if both:
        raise ResumeOptionError(f"--replay and --skip both name {', '.join(both)}: choose one for each call")
    ledger = view.ledger
    for call_id in [*replay, *skip]:
        if call_id not in ledger and call_id not in doubted:
            raise UnknownReferenceError(f"call {call_id!r} is not in run {run_id!r}; see `safepoint ledger {run_id}`")
    if view.status in _FINISHED_RUN:
        raise ResumeOptionError(
            f"run {run_id!r} is {view.status}: no call waits for --replay or --skip; see `safepoint explain {run_id}`"
        )
    for call_id in [*replay, *skip]:
        entry = ledger.get(call_id)
        if entry is None or entry.status == "started" or (call_id in doubted and entry.status in NEVER_RAN):
            continue
        if entry.status == "uncertain":
            raise ResumeOptionError(
                f"call {call_id!r} was already reported to the model as uncertain and is no longer pending; "
                "the model decides whether to call it again"
            )
        raise ResumeOptionError(
            f"call {call_id!r} of run {run_id!r} is {entry.status}, not uncertain: there is nothing to decide; "
            f"see `safepoint explain {run_id}`"
        )


# safepoint's own calls (rollback, resolution, compensation) have ids in a namespace no model call can take:
# providers never put a ':' in a call id, and a model or own-loop id that starts with the prefix anyway is escaped
# where it enters (``model_call_id``). Rejected: counting ``rollback_N`` beside the model's ids, where a model's
# ``rollback_2`` took the id the next rollback needed and blocked it for good.
INTERNAL_PREFIX = "safepoint:"
INTERNAL_TOOLS = frozenset({"rollback_files", "resolve_conflict"})
# Runs written before the namespace: the internal tools under ids ``rollback_N`` / ``resolve_N``, told apart from
# a model's call with such an id (or a user's tool of the same name) by their input's shape.
_LEGACY_ID = re.compile(r"(rollback|resolve)_[0-9]+")
_LEGACY_INPUT = {"rollback_files": {"checkpoint_id", "actions"}, "resolve_conflict": {"path", "blob", "expect"}}


def internal_id(kind: str, name: str) -> str:
    """The id of one of safepoint's own calls: ``safepoint:rollback:1``, ``safepoint:compensate:call_3``."""
    return f"{INTERNAL_PREFIX}{kind}:{name}"


def next_internal_id(ledger: Mapping[str, object], kind: str) -> str:
    """The next free id of safepoint's own ``kind`` of call in ``ledger`` (``safepoint:rollback:3``)."""
    prefix = f"{INTERNAL_PREFIX}{kind}:"
    number = sum(1 for call_id in ledger if call_id.startswith(prefix)) + 1
    while internal_id(kind, str(number)) in ledger:
        number += 1
    return internal_id(kind, str(number))


def is_internal(entry: ToolLedgerEntry) -> bool:
    """Is this one of safepoint's own calls (never the model's)?"""
    if entry.call_id.startswith(INTERNAL_PREFIX) or entry.compensates is not None:
        return True
    legacy = _LEGACY_INPUT.get(entry.tool_name)
    return legacy is not None and _LEGACY_ID.fullmatch(entry.call_id) is not None and legacy <= set(entry.input)


def model_call_id(call_id: str) -> str:
    """A call id from a model (or an own loop) kept out of safepoint's namespace: one that starts with the prefix
    after any leading ``_`` gets one more ``_``. Injective, so two ids never become one, and stable, so the id
    a model repeats after a crash maps to the same entry."""
    if call_id.lstrip("_").startswith(INTERNAL_PREFIX):
        return "_" + call_id
    return call_id


def pending_calls(history: Sequence[Message], call_ids: Sequence[str]) -> list[ToolCall]:
    """The calls a checkpoint names as pending, taken from the assistant messages its history holds (the latest
    message that names each, looked for from the end: they are the last turn's, not a pass over every message)."""
    wanted, calls = set(call_ids), {}
    for message in reversed(history):
        if not wanted:
            break
        for call in reversed(message.tool_calls):
            if call.call_id in wanted:
                wanted.discard(call.call_id)
                calls[call.call_id] = call
    return [calls[call_id] for call_id in call_ids if call_id in calls]


def step_number(step_id: str) -> int:
    match = _STEP.search(step_id)
    return int(match.group(1)) if match else 0


def last_completed_step(checkpoint: Checkpoint) -> int:
    return checkpoint.step if checkpoint.kind == "after_step" else checkpoint.step - 1


def recent_calls(plan: ResumePlan) -> list[CallReport]:
    """The calls a recovery note reports: those of the last completed step and of the interrupted one (found once,
    by ``plan_resume``)."""
    return list(plan.recent)
