"""The seed's records, with its field names and values verbatim (snake_case).

Chapter 8 of the seed names ``ToolLedgerEntry``, ``ToolDefinition``, ``FilePatchEntry``, ``RecoveryAction`` and
``CheckpointConflict``; ``Checkpoint`` and ``Message`` are the run state those records point into. Every record is
a frozen ``msgspec.Struct`` so that it encodes to JSON without hand-written converters and cannot be mutated in
place by accident: a state change is a new record appended to the log, never an edit of an old one.

The records a log holds by the ten thousand are ``gc=False``: Python's cyclic collector never tracks them (it
spent a third of a long run's load walking them). Safe because they cannot be part of a cycle: frozen, and they
hold only strings, numbers, tuples and JSON data, never a record that could hold them back.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec

from safepoint.protocol import (
    Approval,
    CancelRequest,
    ContextResetRequest,
    ControlSeen,
    ExecutionConfig,
    RecoveryClass,
    RecoveryReport,
    ReplayForbidden,
    Resumable,
    RuntimeRestartQueuedSubmission,
    RuntimeRestartReactionLoopState,
    RuntimeRestartScheduledWorkContext,
    RuntimeRestartToolApprovalWait,
    ScheduledWorkContext,
    SubagentSpawned,
    Submission,
    SubtaskStopped,
    SuccessorAccepted,
)

Idempotency = Literal["idempotent", "conditional", "non_idempotent"]
ReplayPolicy = Literal["auto", "ask", "never"]
RiskLevel = Literal["low", "medium", "high"]
LedgerStatus = Literal["planned", "approved", "started", "succeeded", "failed", "uncertain"]
CheckpointKind = Literal["before_step", "tool_start", "tool_end", "after_step"]
ConflictResolution = Literal["pending", "keep_user", "apply_agent", "manual_merge"]
PatchOp = Literal["create", "modify", "delete", "chmod"]
Role = Literal["system", "user", "assistant", "tool"]
RunStatus = Literal[
    "running", "waiting_decision", "waiting_approval", "completed", "failed", "interrupted", "cancelled", "closed"
]

IDEMPOTENCY_VALUES: tuple[Idempotency, ...] = ("idempotent", "conditional", "non_idempotent")
REPLAY_POLICY_VALUES: tuple[ReplayPolicy, ...] = ("auto", "ask", "never")
RISK_LEVEL_VALUES: tuple[RiskLevel, ...] = ("low", "medium", "high")

JSONValue = Any  # tool inputs and outputs are arbitrary JSON


class ToolDefinition(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a tool declares about itself (§8.7); classification may still depend on the input."""

    name: str
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel = "low"
    side_effects: tuple[str, ...] = ()
    description: str = ""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A tool call as the model asked for it."""

    call_id: str
    tool: str
    args: dict[str, JSONValue] = msgspec.field(default_factory=dict)


# How a call was settled other than by running to its end: approved/denied by a person, no answer in time
# (timeout), the subagent's grant expired during the wait (grant_expired), its effect found by a probe (probe),
# a person chose to run it again (replay) or not (skip), or it was reported uncertain and not repeated, or a
# person checked it by hand (settled: `safepoint settle`).
LedgerDecision = Literal[
    "approved", "denied", "timeout", "grant_expired", "probe", "replay", "skip", "report_uncertain", "settled"
]
ResultEncoding = Literal["text", "json", "none"]


class ToolLedgerEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One state of one tool call (§8.2). The ledger appends a new entry per transition; the last one wins.

    Beyond the seed's fields: ``run_id``, the call's ``input`` (needed to re-run it), the stable
    ``idempotency_key`` handed to the tool, ``planned_at``, ``error`` for a failed call, ``decision`` (one of
    ``LedgerDecision``) for a call settled by a person, an approval or a probe, with its free text in
    ``decision_reason``, and ``result_encoding``: how the tool's own return value is rebuilt from its recorded
    observation after a crash (``text``: the observation is the value; ``json``: msgspec JSON of the value;
    ``none``: the tool returned None).
    """

    call_id: str
    step_id: str
    tool_name: str
    input_hash: str
    status: LedgerStatus
    risk_level: RiskLevel
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    side_effects: tuple[str, ...] = ()
    started_at: str | None = None
    finished_at: str | None = None
    result_ref: str | None = None
    run_id: str = ""
    input: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    idempotency_key: str = ""
    planned_at: str | None = None
    error: str | None = None
    decision: LedgerDecision | None = None
    decision_reason: str | None = None  # who decided and why, in words (for reports and the recovery note)
    compensates: str | None = None  # for a compensating call: the ledger entry it compensates
    result_encoding: ResultEncoding | None = None


class LedgerChange(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A later state of a call's ledger entry, as what changed (issue 10 §5): the fields that differ from its
    previous state, the ones set back to their default named in ``cleared``. A reader applies it to the previous
    state (``core.ledger.apply_change``) and sees the whole entry, as it did when each state was logged whole (a
    log written so still reads). The first state of a call is always a whole ``ToolLedgerEntry``."""

    call_id: str
    status: LedgerStatus
    step_id: str | None = None
    tool_name: str | None = None
    input_hash: str | None = None
    risk_level: RiskLevel | None = None
    idempotency: Idempotency | None = None
    replay_policy: ReplayPolicy | None = None
    side_effects: tuple[str, ...] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    result_ref: str | None = None
    run_id: str | None = None
    idempotency_key: str | None = None
    planned_at: str | None = None
    error: str | None = None
    decision: LedgerDecision | None = None
    decision_reason: str | None = None
    compensates: str | None = None
    result_encoding: ResultEncoding | None = None
    cleared: tuple[str, ...] = ()


class FilePatchEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A file change made by a tool call (§8.4): hashes before and after, and a reference to the patch.

    ``after_hash`` is empty while the write is under way (the before-state is recorded durably first).
    ``before_ref`` points at the stored before-content the first time the run touches a path.
    """

    path: str
    before_hash: str
    after_hash: str
    patch_ref: str
    tool_call_id: str
    created_at: str
    op: PatchOp = "modify"
    before_ref: str | None = None  # where the before-content is kept: "blob:<hash>", "git:<blob id>", or None
    before_mode: int | None = None  # permission bits (None when absent)
    after_mode: int | None = None
    # True when the change happened while a command ran and the platform could not tell whether the command or
    # someone else (the user, another run) made it: rollback lists it and reverts it only when the user confirms.
    author_uncertain: bool = False


class FileBeforeState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A path's state just before a call may change it, durable before the call runs; the call's FilePatchEntry
    (written after) completes it. A call re-run after a crash is compared against this, not against the file as
    the crash left it, so the changes of the interrupted attempt are recorded too."""

    tool_call_id: str
    path: str
    before_hash: str
    before_ref: str | None = None
    before_mode: int | None = None


class WorkspaceState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The workspace's git state when a session of the run starts (§8.5): HEAD, branch, the user's dirty paths."""

    at: str
    is_repo: bool
    head: str | None = None
    branch: str | None = None
    dirty: tuple[str, ...] = ()
    nested_repos: tuple[str, ...] = ()
    submodules: tuple[str, ...] = ()
    is_worktree: bool = False


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One entry of the append-only message history; checkpoints point into it by ``seq``."""

    seq: int
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    turn: int | None = None
    # ``blob:sha256:...``: the content, too large for the log, kept as a blob of its redacted text (``content``
    # is then empty; ``core.large_values``). Readers that show or send it read it back (``engine.large_values``).
    content_ref: str | None = None


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Run state at a fixed point (§8.3). It references the history by length, never copies it."""

    # Empty on disk where the record's place says them (``core.checkpoint_codec``); always set once read.
    checkpoint_id: str = ""
    run_id: str = ""
    step: int
    kind: CheckpointKind
    created_at: str
    history_len: int
    ledger_seq: int = 0
    model: str
    model_config: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    # Call ids only: the calls themselves are in the assistant message the history points to, so a checkpoint
    # never copies a call's input (a step of ten 50 KB writes would otherwise log each input ten times).
    pending_tool_calls: tuple[str, ...] = ()
    next_turn: int = 0
    patches_len: int = 0  # file patches recorded before this checkpoint: rollback_files undoes the ones after
    git_head: str | None = None  # HEAD when the checkpoint was taken (None outside git)


class RollbackFiles(msgspec.Struct, frozen=True, kw_only=True, tag="rollback_files", tag_field="type"):
    checkpoint_id: str


class RestoreSession(msgspec.Struct, frozen=True, kw_only=True, tag="restore_session", tag_field="type"):
    checkpoint_id: str


class CompensateExternalAction(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="compensate_external_action", tag_field="type"
):
    ledger_entry_id: str


# §8.8: three different things, never one "undo".
RecoveryAction = RollbackFiles | RestoreSession | CompensateExternalAction


class CheckpointConflict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A file the user changed after the agent did (§8.9); it is never overwritten silently."""

    path: str
    expected_hash: str
    actual_hash: str
    agent_patch_ref: str
    resolution: ConflictResolution = "pending"


class RunInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A run's header: what it was started with."""

    run_id: str
    task: str
    model: str
    created_at: str
    workspace: str
    model_config: dict[str, JSONValue] = msgspec.field(default_factory=dict)
    scenario: dict[str, JSONValue] | None = None
    # The recovery owner (seed 003 §1.1): a root run owns itself; a subagent answers to the call that spawned it.
    recovery_class: Literal["root", "subagent", "scheduled"] = "root"
    recovery_owner_id: str | None = None  # None: the run id
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    tools_allowed: tuple[str, ...] | None = None  # the grants a subagent inherited (None: every registered tool)
    grant_expires_at_ms: int | None = None
    scheduled: ScheduledWorkContext | None = None  # an occurrence of a scheduled job
    job_id: str | None = None
    approval: Literal["none", "high"] = "none"  # "high": high-risk calls wait for `safepoint approve`
    approval_timeout_s: float = 600.0
    provider: dict[str, JSONValue] | None = None  # how to reach the model again on resume (never an API key)

    @property
    def owner_id(self) -> str:
        return self.recovery_owner_id or self.run_id


class RunEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A change of the run's own status (started, resumed, waiting for a decision, completed, failed)."""

    status: RunStatus
    at: str
    detail: str = ""
    generation: int = 0


class CallDecision(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What a person (``--replay``/``--skip``) or a probe decided for an ``uncertain`` call."""

    call_id: str
    decision: Literal["replay", "skip", "probe_done", "probe_not_done"]
    at: str
    by: str = "user"
    attempt: int = 0  # the number of `started` entries the call had: a decision settles that attempt only


class Blob(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Content addressed by ``content_hash`` of the uncompressed bytes: in the log itself (``data``), or, when
    ``stored``, a reference to the store-wide blob of that hash (``core.blobs``), made durable before this record."""

    hash: str
    codec: Literal["raw", "zstd"]
    size: int
    data: bytes = b""
    stored: bool = False


class MessageDictionary(msgspec.Struct, frozen=True, kw_only=True):
    """A zstd dictionary trained on the run's earlier (redacted) messages; later message records are compressed
    against it and name it by its log sequence number (``core.history_codec``). ``data``: the dictionary, itself
    zstd-compressed; ``size``: its size uncompressed."""

    data: bytes
    size: int


class Rewind(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The history continues from its first ``history_len`` messages: a resume from an older checkpoint, or a
    restored session. Messages after that point stay in the log (inspectable) but leave the current branch."""

    history_len: int
    checkpoint_id: str
    reason: str
    at: str
    abandoned: tuple[str, ...] = ()  # restore_session: calls of the branch left behind (kept in the ledger)


RECORD_TYPES: dict[str, type[msgspec.Struct]] = {
    "event": RunEvent,
    "message": Message,
    "ledger": ToolLedgerEntry,
    "ledger_change": LedgerChange,
    "patch": FilePatchEntry,
    "checkpoint": Checkpoint,
    "blob": Blob,
    "decision": CallDecision,
    "rewind": Rewind,
    "message_dict": MessageDictionary,
    "conflict": CheckpointConflict,
    "file_before": FileBeforeState,
    "workspace": WorkspaceState,
    "spawned": SubagentSpawned,
    "recovery": RecoveryReport,
    "control_seen": ControlSeen,
}
RECORD_KINDS: dict[type[msgspec.Struct], str] = {kind_type: kind for kind, kind_type in RECORD_TYPES.items()}


# Redaction by structure (``core.redact.Redactor.record``) --------------------------------------------------------
# What each record keeps EXACT whatever a redaction pattern says, and what is REDACTED. Exact: what rollback,
# restore, capture, fsck, approvals and the conflict machinery look things up by or compare (paths, hashes, refs,
# ids, sequence numbers, times, the vocabulary's status words): a redacted path is a file no rollback finds, a
# redacted status a record that no longer decodes, a redacted input hash an approval that never matches. File
# names are kept exactly, like file contents (the user's own; rejected: redacting the paths the model reads,
# which made a file named like a pattern escape every rollback). Redacted: what people, tools and the model wrote
# or read (text, arguments, results, reasons, configuration). ``journal``: exact in safepoint's own calls
# (rollback, resolution: their input is the list of paths, hashes and refs a re-run after a crash carries out),
# redacted in every other call. Every field of every record reachable from these types is in exactly one set
# (tests/test_redact_records.py): a new field is a decision, not an accident.
class FieldRedaction(NamedTuple):
    exact: frozenset[str]
    redacted: frozenset[str] = frozenset()
    journal: frozenset[str] = frozenset()


def _rule(exact: str, redacted: str = "", journal: str = "") -> FieldRedaction:
    return FieldRedaction(frozenset(exact.split()), frozenset(redacted.split()), frozenset(journal.split()))


FIELD_REDACTION: dict[type[msgspec.Struct], FieldRedaction] = {
    # the log's records
    RunEvent: _rule("status at generation", "detail"),
    Message: _rule("seq role tool_call_id name turn content_ref", "content tool_calls"),
    ToolCall: _rule("call_id tool", "args"),
    ToolLedgerEntry: _rule(
        "call_id step_id tool_name input_hash status risk_level idempotency replay_policy side_effects started_at "
        "finished_at result_ref run_id idempotency_key planned_at decision compensates result_encoding",
        "error decision_reason",
        "input",
    ),
    LedgerChange: _rule(
        "call_id status step_id tool_name input_hash risk_level idempotency replay_policy side_effects started_at "
        "finished_at result_ref run_id idempotency_key planned_at decision compensates result_encoding cleared",
        "error decision_reason",
    ),
    FilePatchEntry: _rule(
        "path before_hash after_hash patch_ref tool_call_id created_at op before_ref before_mode after_mode "
        "author_uncertain"
    ),
    FileBeforeState: _rule("tool_call_id path before_hash before_ref before_mode"),
    Checkpoint: _rule(
        "checkpoint_id run_id step kind created_at history_len ledger_seq model pending_tool_calls next_turn "
        "patches_len git_head",
        "model_config",
    ),
    Blob: _rule("hash codec data size stored"),
    MessageDictionary: _rule("data size"),  # trained on messages already redacted
    CallDecision: _rule("call_id decision at attempt", "by"),
    Rewind: _rule("history_len checkpoint_id at abandoned", "reason"),
    CheckpointConflict: _rule("path expected_hash actual_hash agent_patch_ref resolution"),
    WorkspaceState: _rule("at is_repo head branch dirty nested_repos submodules is_worktree"),
    SubagentSpawned: _rule("call_id child_run_id at tools_allowed grant_expires_at_ms"),
    RecoveryReport: _rule("at generation assertions failed mode action", "detail disposition"),
    Resumable: _rule(""),
    ReplayForbidden: _rule("reason", "detail"),
    ControlSeen: _rule("position type at key"),
    # the run's header
    RunInfo: _rule(
        "run_id model created_at workspace recovery_class recovery_owner_id parent_run_id parent_call_id "
        "tools_allowed grant_expires_at_ms scheduled job_id approval approval_timeout_s",
        "task model_config scenario provider",
    ),
    ScheduledWorkContext: _rule("cron scheduled_for_ms cron_exec_timeout_ms"),
    # what people send a run
    Approval: _rule("call_id input_hash approved at", "by reason"),
    Submission: _rule(
        "submission_key at requested_model tools_allowed_override",
        "text override_system_prompt append_system_prompt reasoning_strength_override",
    ),
    CancelRequest: _rule("at whole_stream", "by"),
    ContextResetRequest: _rule("at", "by"),
    SuccessorAccepted: _rule("successor_run_id at"),
    SubtaskStopped: _rule("child_run_id call_id reason at", "prompt"),
    # a restart checkpoint's payloads and configuration
    RuntimeRestartToolApprovalWait: _rule(
        "call_id tool_name input_hash wait_started_at_ms timeout_remaining_ms dispatched_before_restart "
        "producer_inference_request_id producer_inference_attempt_id presentation_locale client_language_chain "
        "location_freshness control_position",
        "authenticated_user_inputs client_ip",
    ),
    RuntimeRestartQueuedSubmission: _rule(
        "submission_key absorbed_submission_keys requested_model tools_allowed_override "
        "transient_companion_wake_start_seq",
        "text override_system_prompt append_system_prompt reasoning_strength_override tool_call_prefill",
    ),
    RuntimeRestartReactionLoopState: _rule(
        "turn consecutive_batches pending_compact pending_tool_calls completed_unpersisted_tool_outputs "
        "lifetime_inference_count lifetime_tool_call_count visible_output_started"
    ),
    RuntimeRestartScheduledWorkContext: _rule("job_id attempt version scheduled_work_context replay_disposition"),
    ExecutionConfig: _rule(
        "descriptor_version generation model context_epoch history_len parent_run_id parent_call_id tools_allowed "
        "grant_expires_at_ms"
    ),
}


def to_plain(value: Any) -> Any:
    """A record as plain data with every field, defaults included (the log omits defaults to stay small; what
    users read never does)."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        tag = {config.tag_field: config.tag} if config.tag_field is not None and config.tag is not None else {}
        return tag | {name: to_plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, list | tuple):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value


# The store's records: what a backend moves and keeps (store/base.py names the contract) ---------------------
ProblemKind = Literal["torn", "corrupt", "gap"]


class LogRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One entry of a run's log. ``body`` is the JSON of a record from ``safepoint.records``."""

    kind: str
    body: msgspec.Raw
    seq: int = 0
    gen: int = 0


class LogProblem(msgspec.Struct, frozen=True, kw_only=True):
    """A record that could not be trusted: reported, never loaded."""

    kind: ProblemKind
    position: int  # byte offset (files) or sequence number (databases)
    detail: str


class LogRead(msgspec.Struct, frozen=True, kw_only=True):
    records: list[LogRecord]
    problems: list[LogProblem]


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """The right to write one run, fenced by ``generation``: a write under an older generation is refused.
    ``holder`` names the process (it is not the seed's ``owner_id``, which names who answers for the agent)."""

    run_id: str
    holder: str
    generation: int


class RecoveryIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who answers for an agent's recovery (seed 003 §1.1): set by the run's first claim, kept by every later one."""

    recovery_class: RecoveryClass = "root"
    owner_id: str
    agent_id: str
    message_id: str | None = None


class OwnerState(msgspec.Struct, frozen=True, kw_only=True):
    """A run's recovery owner (seed 003 §1.1, ``agent.recovery_owners``: the seed's columns first) and the process
    that holds it now. Every claim, takeover or restart raises ``generation``; ``terminal_at`` set means the
    agent's work was closed under that generation."""

    recovery_class: RecoveryClass
    owner_id: str
    generation: int
    agent_id: str
    message_id: str | None
    active_at: str
    terminal_at: str | None = None
    terminal_status: str | None = None
    holder: str
    pid: int
    host: str
    claimed_at: str
    heartbeat_at: str
    lease_ms: int = 30_000  # past heartbeat_at + lease_ms the holder is presumed dead (the reaper closes its work)
    released: bool = False


class StoredDescriptor(msgspec.Struct, frozen=True, kw_only=True):
    """A restart checkpoint as read: ``intact`` is false when its checksum fails or it is cut short (the
    ``partial_recovery_descriptor`` assertion reports it; nothing loads it)."""

    data: bytes
    intact: bool
    detail: str = ""
