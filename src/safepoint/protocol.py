"""The recovery protocol's records (seed 003), with its names verbatim.

§1: a recovery owner per agent, fenced by ``generation`` (``OwnerState`` in ``safepoint.store.base`` carries the
seed's columns plus who holds it now); one active ``RuntimeRestartCheckpoint`` per agent, upserted and deleted,
never appended; ``RecoveryOwnerTerminalEvent`` rows, unique per (recovery_class, owner_id, generation, event_type).
§2: the four payloads a restart checkpoint carries. §3-§4: the assertion names and the replay disposition.
§5: the terminal status and the self-healing prompt, both verbatim.

In safepoint an agent is a run: ``agent_id`` is the run id. ``owner_id`` names who answers for the agent's work:
the run itself for a root run, ``<parent run>/<spawning call>`` for a subagent, ``job:<job id>/<occurrence ms>``
for scheduled work (one owner per occurrence: the owner key is unique). ``ControlRecord`` is what people send a
run from outside (approve, deny, submit, cancel, reset, successor): they hold no claim, so these go to a separate,
unfenced channel that only the owner acts on.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

RecoveryClass = Literal["root", "subagent", "scheduled"]
RestartMode = Literal["tool_approval_wait", "queued_submission", "reaction_loop", "scheduled_work"]

# §3, in the order they are checked here: the descriptor first (is there something sound to judge?), then the
# conversation it points into, then identity from the agent's place in the tree to the authority it inherited.
RecoveryFailureReason = Literal[
    "partial_recovery_descriptor",
    "invalid_recovery_descriptor",
    "missing_conversation",
    "invalid_structural_owner_identity",
    "recovery_identity_mismatch",
    "invalid_durable_owner_identity",
    "invalid_inherited_execution_authority",
]
RECOVERY_FAILURE_REASONS: tuple[RecoveryFailureReason, ...] = get_args(RecoveryFailureReason)

# §4.1
ReplayForbiddenReason = Literal[
    "visible_output_started",
    "user_cancelled",
    "user_cancelled_whole_stream",
    "agent_closed",
    "model_switch",
    "context_reset",
    "runtime_work_reap",
    "cron_exec_timeout",
    "successor_accepted",
]
REPLAY_FORBIDDEN_REASONS: tuple[ReplayForbiddenReason, ...] = get_args(ReplayForbiddenReason)

# §5.1 and §5.2, verbatim.
TERMINAL_STATUS_RESTART = "Closed during restart recovery without reporting a result."
SELF_HEALING_PROMPT = (
    "This subtask stopped during a restart and did not report a result. Its work may be partly or fully done: "
    "check what it already produced before redoing anything, then redo or redelegate only what is actually missing."
)
SELF_HEALING = "self_healing"  # the name of the system message that carries the prompt into a context

DESCRIPTOR_VERSION = 1  # a restart checkpoint written by a newer safepoint is invalid_recovery_descriptor here


# §2.1 ----------------------------------------------------------------------------------------------------------
class RuntimeRestartToolApprovalWait(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="tool_approval_wait", tag_field="payload_kind"
):
    """A high-risk call waiting for a person. The wait resumes with ``timeout_remaining_ms``; an approval counts
    only for ``input_hash``; ``dispatched_before_restart`` keeps a call that was already sent from being sent again."""

    call_id: str
    tool_name: str
    input_hash: str
    wait_started_at_ms: int
    timeout_remaining_ms: int
    dispatched_before_restart: bool = False
    authenticated_user_inputs: tuple[str, ...] = ()
    producer_inference_request_id: str | None = None
    producer_inference_attempt_id: str | None = None
    presentation_locale: str | None = None
    client_language_chain: tuple[str, ...] = ()
    client_ip: str | None = None
    location_freshness: str | None = None
    # safepoint's own, beside the seed's: the run's control channel ended here when the wait began; only a decision
    # posted after it counts (one written before, by a command of the run, is tampering). None: an older wait.
    control_position: int | None = None


# §2.2 ----------------------------------------------------------------------------------------------------------
class RuntimeRestartQueuedSubmission(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="queued_submission", tag_field="payload_kind"
):
    """User input admitted while the agent was busy, before inference on it began; its overrides survive a restart."""

    submission_key: str
    text: str
    absorbed_submission_keys: tuple[str, ...] = ()
    override_system_prompt: str | None = None
    append_system_prompt: str | None = None
    requested_model: str | None = None
    reasoning_strength_override: str | None = None
    tools_allowed_override: tuple[str, ...] | None = None
    tool_call_prefill: dict[str, Any] | None = None  # a tool call the next turn starts with
    transient_companion_wake_start_seq: int | None = None


# §2.3 ----------------------------------------------------------------------------------------------------------
class RuntimeRestartReactionLoopState(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="reaction_loop", tag_field="payload_kind"
):
    """The think-call-observe loop between two steps. ``completed_unpersisted_tool_outputs`` maps a finished call
    to its result ref when its output is not yet in the conversation: resume takes it from there, never re-runs it.
    ``visible_output_started`` is set, durably, before the first streamed character of ``turn`` reaches the user."""

    turn: int
    consecutive_batches: int = 0
    pending_compact: bool = False
    pending_tool_calls: tuple[str, ...] = ()
    completed_unpersisted_tool_outputs: dict[str, str] = msgspec.field(default_factory=dict)
    lifetime_inference_count: int = 0
    lifetime_tool_call_count: int = 0
    visible_output_started: bool = False


# §2.4 ----------------------------------------------------------------------------------------------------------
class ScheduledWorkContext(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    cron: str
    scheduled_for_ms: int
    cron_exec_timeout_ms: int  # past scheduled_for_ms + this, the occurrence is not replayed


class RuntimeRestartScheduledWorkContext(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="scheduled_work", tag_field="payload_kind"
):
    job_id: str
    attempt: int
    version: int
    scheduled_work_context: ScheduledWorkContext
    replay_disposition: str | None = None


RestartPayload = (
    RuntimeRestartToolApprovalWait
    | RuntimeRestartQueuedSubmission
    | RuntimeRestartReactionLoopState
    | RuntimeRestartScheduledWorkContext
)
PAYLOAD_MODES: dict[type[msgspec.Struct], RestartMode] = {
    RuntimeRestartToolApprovalWait: "tool_approval_wait",
    RuntimeRestartQueuedSubmission: "queued_submission",
    RuntimeRestartReactionLoopState: "reaction_loop",
    RuntimeRestartScheduledWorkContext: "scheduled_work",
}


class ExecutionConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``execution_config_json``: what the writer ran with. The seed leaves its fields open (§8 #2); these are the
    ones recovery checks: the descriptor version, the writer's generation, the model, the context epoch and, for a
    subagent, the parent and the grants it inherited."""

    descriptor_version: int = DESCRIPTOR_VERSION
    generation: int
    model: str
    context_epoch: int = 0  # rewinds of the conversation when written: a later reset makes this checkpoint void
    history_len: int = 0
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    tools_allowed: tuple[str, ...] | None = None
    grant_expires_at_ms: int | None = None


class RuntimeRestartCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """§1.2, one per agent. ``payload_json`` and ``execution_config_json`` are JSON text, as in the seed's table."""

    agent_id: str
    mode: RestartMode
    payload_json: str | None
    created_at: int  # ms
    updated_at: int  # ms
    recovery_class: RecoveryClass | None
    recovery_owner_id: str | None
    execution_config_json: str | None


class RecoveryOwnerTerminalEvent(msgspec.Struct, frozen=True, kw_only=True):
    """§1.3; at most one per (recovery_class, owner_id, generation, event_type), so a cleanup repeated after a
    crash records nothing twice."""

    recovery_class: str
    owner_id: str
    generation: int
    event_type: str
    created_at: str
    payload_json: str | None = None


# §4 --------------------------------------------------------------------------------------------------------------
class Resumable(msgspec.Struct, frozen=True, kw_only=True, tag="Resumable", tag_field="disposition"):
    pass


class ReplayForbidden(msgspec.Struct, frozen=True, kw_only=True, tag="ReplayForbidden", tag_field="disposition"):
    reason: ReplayForbiddenReason
    detail: str = ""


RuntimeRestartCheckpointReplayDisposition = Resumable | ReplayForbidden


# What people send a run from outside ---------------------------------------------------------------------------
class Approval(msgspec.Struct, frozen=True, kw_only=True, tag="approval", tag_field="type"):
    call_id: str
    input_hash: str  # the approval counts for this input only
    approved: bool
    at: str
    by: str = "user"
    reason: str = ""


class Submission(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="submission", tag_field="type"):
    submission_key: str
    text: str
    at: str
    override_system_prompt: str | None = None
    append_system_prompt: str | None = None
    requested_model: str | None = None
    reasoning_strength_override: str | None = None
    tools_allowed_override: tuple[str, ...] | None = None


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True, tag="cancel", tag_field="type"):
    at: str
    whole_stream: bool = False  # also drop queued submissions and cancel the run's subagents
    by: str = "user"


class ContextResetRequest(msgspec.Struct, frozen=True, kw_only=True, tag="context_reset", tag_field="type"):
    at: str
    by: str = "user"


class SuccessorAccepted(msgspec.Struct, frozen=True, kw_only=True, tag="successor_accepted", tag_field="type"):
    successor_run_id: str
    at: str


class SubtaskStopped(msgspec.Struct, frozen=True, kw_only=True, tag="subtask_stopped", tag_field="type"):
    """To a parent: its child was closed by restart recovery without reporting a result (§5)."""

    child_run_id: str
    call_id: str
    reason: str
    prompt: str
    at: str


ControlRecord = Approval | Submission | CancelRequest | ContextResetRequest | SuccessorAccepted | SubtaskStopped


class SubagentSpawned(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """In the parent's log: ``call_id`` started child ``child_run_id`` with these grants."""

    call_id: str
    child_run_id: str
    at: str
    tools_allowed: tuple[str, ...] | None = None
    grant_expires_at_ms: int | None = None


class ControlSeen(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """In the run's log: control record ``position`` was acted on (a submission absorbed, a cancel obeyed)."""

    position: int
    type: str
    at: str
    key: str = ""


class RecoveryReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """In the run's log: what one restart recovery found: the assertions checked, the disposition, what was done."""

    at: str
    generation: int
    assertions: tuple[str, ...]  # the names checked, in order
    failed: RecoveryFailureReason | None = None
    disposition: RuntimeRestartCheckpointReplayDisposition | None = None
    mode: RestartMode | None = None
    detail: str = ""
    action: Literal["resumed", "closed", "none"] = "none"


# The protocol's public names (pinned by tests/test_public_api.py); DESCRIPTOR_VERSION and SELF_HEALING are
# internal markers of the stored format.
__all__ = [
    "PAYLOAD_MODES",
    "RECOVERY_FAILURE_REASONS",
    "REPLAY_FORBIDDEN_REASONS",
    "SELF_HEALING_PROMPT",
    "TERMINAL_STATUS_RESTART",
    "Approval",
    "CancelRequest",
    "ContextResetRequest",
    "ControlRecord",
    "ControlSeen",
    "ExecutionConfig",
    "RecoveryClass",
    "RecoveryFailureReason",
    "RecoveryOwnerTerminalEvent",
    "RecoveryReport",
    "ReplayForbidden",
    "ReplayForbiddenReason",
    "RestartMode",
    "Resumable",
    "RuntimeRestartCheckpoint",
    "RuntimeRestartCheckpointReplayDisposition",
    "RuntimeRestartQueuedSubmission",
    "RuntimeRestartReactionLoopState",
    "RuntimeRestartScheduledWorkContext",
    "RuntimeRestartToolApprovalWait",
    "ScheduledWorkContext",
    "SubagentSpawned",
    "Submission",
    "SubtaskStopped",
    "SuccessorAccepted",
]
