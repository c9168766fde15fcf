"""What the library API returns: typed results, never bare dicts or tuples.

Each field keeps the name the CLI's ``--json`` output documents (README), so ``records.to_plain(result)`` is that
output. The seed's own records (``ToolLedgerEntry``, ``CheckpointConflict``, ``Message``, the recovery protocol's
``RecoveryReport`` and ``RecoveryOwnerTerminalEvent``) are returned as they are, not copied into new types.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from safepoint.protocol import RecoveryOwnerTerminalEvent, RecoveryReport
from safepoint.records import Checkpoint, CheckpointConflict, ConflictResolution, Message, WorkspaceState

ControlOutcome = Literal["requested", "closed"]  # a live owner acts at its next safe point, or it was settled now


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``status``. ``status`` is the effective one (``interrupted`` when the owner died), or
    ``unreadable`` when the run's records cannot be read (``task`` then says why)."""

    run_id: str
    status: str
    terminal_status: str | None = None
    parent: str | None = None
    task: str
    step: int
    calls: int
    problems: int
    created_at: str


class CheckpointSummary(msgspec.Struct, frozen=True, kw_only=True):
    checkpoint_id: str
    step: int
    kind: str
    created_at: str
    complete: bool
    call_id: str | None = None  # the call a tool_start / tool_end checkpoint was taken for


class ConflictView(msgspec.Struct, frozen=True, kw_only=True):
    """A pending conflict (§8.9) with the three things a user must be told: which file, what the agent changed
    (``agent_change``: before the agent -> its version), and what changed since (its version -> the file now)."""

    path: str
    expected_hash: str
    actual_hash: str
    agent_patch_ref: str
    resolution: ConflictResolution
    why: str
    agent_change: str
    changed_since: str
    undoes: list[str] = msgspec.field(default_factory=list)  # the agent's calls whose changes it covers


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """``clean`` is False when a manual merge left conflict markers; ``finished`` names an interrupted
    resolution that was completed instead of the one asked for."""

    path: str
    resolution: ConflictResolution
    clean: bool = True
    finished: str | None = None


LeftOutReason = Literal[
    "ignored_by_git",  # .gitignore'd and not tracked: git would refuse to commit it
    "outside_repository",  # inside a nested repository or a submodule (or no repository at all)
    "changed_since",  # the file changed after the agent's last write (by the user or another program)
    "author_uncertain",  # changed while a command ran and the platform could not tell who wrote it
    "user_work_before",  # it held the user's uncommitted work before the agent changed it
    "deleted_user_file",  # the agent deleted a file that held the user's uncommitted work (or was untracked)
    "no_change",  # it matches HEAD again (the agent's change was rolled back, or it wrote what HEAD holds)
]


class LeftOut(msgspec.Struct, frozen=True, kw_only=True):
    """A path the agent changed that ``commit`` leaves out, with the real reason (a name and its words)."""

    path: str
    reason: LeftOutReason
    why: str


class AgentChanges(msgspec.Struct, frozen=True, kw_only=True):
    """``would_commit``: paths holding exactly what the agent last left there, over HEAD's version; ``left_out``:
    the others, each with its reason in ``reasons`` (same order)."""

    run_id: str
    would_commit: list[str]
    left_out: list[str]
    reasons: list[LeftOut] = msgspec.field(default_factory=list)


class Committed(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    commit: str
    committed: list[str]
    left_out: list[str]
    reasons: list[LeftOut] = msgspec.field(default_factory=list)


class ExternalEffect(msgspec.Struct, frozen=True, kw_only=True):
    """A call after a restore point whose effect is outside the workspace: restoring the session does not undo
    it. ``repeat`` says whether resuming may do it again; ``compensation`` is the command that takes it back, when
    the tool declares a compensator (``compensated_by``: the call that did already)."""

    call_id: str
    tool: str
    status: str
    side_effects: list[str]
    repeat: str
    compensation: str | None = None
    compensated_by: str | None = None


class Restored(Checkpoint, frozen=True, kw_only=True):
    """``restore_session``: the new checkpoint the run continues from (every field of ``Checkpoint``), plus what
    the restore did not undo: ``not_undone`` (effects outside the workspace after ``restored_to``) and, with
    files, ``conflicts`` (paths left as they are because they changed after the agent wrote them)."""

    restored_to: str = ""
    with_files: bool = False
    not_undone: list[ExternalEffect] = msgspec.field(default_factory=list)
    conflicts: list[str] = msgspec.field(default_factory=list)
    resume_with: str = ""  # what continues the run from it, written out (an own loop's run: its program's sp.resume)


class Submitted(msgspec.Struct, frozen=True, kw_only=True):
    """Queued input: its key (the same key is admitted once) and its position in the run's control channel."""

    run_id: str
    submission_key: str
    position: int


class Answered(msgspec.Struct, frozen=True, kw_only=True):
    """``approve``/``deny``: the answer's position in the run's control channel, whether a live owner runs the
    run now (``attended``: it acts on the answer at once), and what acts on it otherwise (``next``, in words)."""

    run_id: str
    call_id: str
    approved: bool
    position: int
    attended: bool
    next: str


class Compensated(msgspec.Struct, frozen=True, kw_only=True):
    """A compensator ran for ``compensated`` (the ledger entry); ``result`` is its observation."""

    run_id: str
    compensated: str
    result: str


class History(msgspec.Struct, frozen=True, kw_only=True):
    """The current branch of the conversation, and messages of abandoned branches (``restore_session``)."""

    current: list[Message]
    abandoned: list[Message]


class Finished(msgspec.Struct, frozen=True, kw_only=True):
    """How an agent run (or a scheduled occurrence) ended; ``already_fired``: the occurrence ran before."""

    run_id: str
    status: str
    already_fired: bool = False


# explain ---------------------------------------------------------------------------------------------------------
class ResumePoint(msgspec.Struct, frozen=True, kw_only=True):
    checkpoint_id: str | None
    step: int
    kind: str | None
    why: str


class CallReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a resume would do with one recorded call, and why; ``not_captured`` names effects safepoint cannot
    see or roll back."""

    call_id: str
    step_id: str
    tool: str
    status: str
    idempotency: str
    replay_policy: str
    risk_level: str
    side_effects: list[str]
    replayable: bool
    action: str
    why: str
    files: list[str]
    not_captured: str | None


class NotRestorable(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    call_id: str
    why: str


class CutShortAction(msgspec.Struct, frozen=True, kw_only=True):
    """One of safepoint's own actions (a rollback, a resolution, a compensation) a crash left unfinished, with the
    command that finishes it (``core.cut_short``)."""

    call_id: str
    tool: str
    what: str
    fix: str


class DecisionWanted(msgspec.Struct, frozen=True, kw_only=True):
    call_id: str
    tool: str
    why: str
    choices: list[str] = msgspec.field(default_factory=lambda: ["replay", "skip"])  # what resume accepts for it
    commands: list[str] = msgspec.field(default_factory=list)  # each choice written out for this run, as it works


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    expected_hash: str
    actual_hash: str | None
    call_id: str


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    position: int
    detail: str


class OwnerView(msgspec.Struct, frozen=True, kw_only=True):
    """The run's row of ``recovery_owners`` (seed 003 §1.1), and its last heartbeat."""

    recovery_class: str
    owner_id: str
    generation: int
    agent_id: str | None
    message_id: str | None
    active_at: str
    terminal_at: str | None
    terminal_status: str | None
    heartbeat_at: str


class RestartCheckpointView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The stored restart checkpoint; ``mode`` and the rest only when it could be read."""

    intact: bool
    detail: str
    mode: str | None = None
    updated_at: int | None = None
    payload: Any = None
    execution_config: Any = None


class RestartVerdictView(msgspec.Struct, frozen=True, kw_only=True):
    """What restart recovery would decide now: the assertions checked, the first that failed, the disposition
    (``Resumable`` or ``ReplayForbidden``) and its reason."""

    assertions_checked: list[str]
    failed: str | None
    disposition: str | None
    reason: str | None
    detail: str


class SubagentView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    run_id: str
    call_id: str
    status: str
    detail: str | None = None
    recovery: RecoveryView | None = None


class RecoveryView(msgspec.Struct, frozen=True, kw_only=True):
    """The recovery protocol's view of a run (seed 003)."""

    recovery_owner: OwnerView | None
    restart_checkpoint: RestartCheckpointView | None
    if_restarted_now: RestartVerdictView
    recoveries: list[RecoveryReport]
    terminal_events: list[RecoveryOwnerTerminalEvent]
    self_healing_prompt: str | None
    subagents: list[SubagentView]


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """``explain``: where a resume would continue and why, and what it would do with every recorded call."""

    run_id: str
    status: str
    task: str
    resume_from: ResumePoint
    calls: list[CallReport]
    conflicts: list[CheckpointConflict]
    not_restorable: list[NotRestorable]
    needs_decision: list[DecisionWanted]
    workspace_drift: list[Drift]
    workspace: WorkspaceState | None
    problems: list[Problem]
    recovery: RecoveryView
    cut_short: list[CutShortAction] = msgspec.field(default_factory=list)  # own actions a crash left unfinished


# schedules -------------------------------------------------------------------------------------------------------
class JobSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A scheduled job with its next occurrence and the last one fired (times ISO, UTC); ``error`` instead when
    its record cannot be read."""

    job_id: str
    cron: str = ""
    version: int = 0
    exec_timeout_s: float = 0.0
    workspace: str = ""
    what: str = ""
    next_at: str = ""
    last_fired_at: str | None = None
    last_run_id: str | None = None
    error: str | None = None
    needs_env: tuple[str, ...] = ()  # variables the job takes its secrets from when it fires (it keeps none)


__all__ = [
    "AgentChanges",
    "Answered",
    "CallReport",
    "CheckpointSummary",
    "Committed",
    "Compensated",
    "ConflictView",
    "ControlOutcome",
    "DecisionWanted",
    "Drift",
    "Explanation",
    "ExternalEffect",
    "Finished",
    "History",
    "JobSummary",
    "LeftOut",
    "LeftOutReason",
    "NotRestorable",
    "OwnerView",
    "Problem",
    "RecoveryView",
    "Resolved",
    "RestartCheckpointView",
    "RestartVerdictView",
    "Restored",
    "ResumePoint",
    "RunSummary",
    "SubagentView",
    "Submitted",
]


class Migrated(msgspec.Struct, frozen=True, kw_only=True):
    """``safepoint db migrate``: the store (its password masked), whether anything was applied, the schema versions
    before and after (None for the file store, whose layout carries no version) and the migrations applied."""

    store: str
    migrated: bool
    before: int | None = None
    after: int | None = None
    applied: list[str] = msgspec.field(default_factory=list)


class FsckProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One thing ``fsck`` found wrong: the file (or table) and where in it, what is wrong, and what ``--repair``
    did about it (``repair`` empty: nothing; the message says what the user can do)."""

    run_id: str
    file: str
    where: str
    problem: str
    repair: str = ""


class FsckResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``fsck`` checked and found. ``repaired``: ``--repair`` was asked; ``quarantine`` lists the folders
    that now hold what was moved aside (never deleted)."""

    store: str
    runs: list[str]
    problems: list[FsckProblem]
    repaired: bool
    quarantine: list[str] = []

    @property
    def clean(self) -> bool:
        return not self.problems
