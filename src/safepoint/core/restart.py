"""Restart recovery's rules (seed 003 §3-§5), without I/O: the seven assertions, then the replay disposition.

The runtime gathers the facts (the stored restart checkpoint, the recovery owner, what the log and the control
channel say, the parent's view of its child) and this module judges them. The assertions run in a fixed order and
the first failure wins: a descriptor must be sound before the conversation it points into is looked up, and the
agent's place in the tree before the identities and authority that hang on it. Only a run that passes them all is
given a disposition; anything but ``Resumable`` closes the run (§5) instead of replaying it.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from safepoint.protocol import (
    DESCRIPTOR_VERSION,
    PAYLOAD_MODES,
    RECOVERY_FAILURE_REASONS,
    CancelRequest,
    ContextResetRequest,
    ExecutionConfig,
    RecoveryFailureReason,
    ReplayForbidden,
    ReplayForbiddenReason,
    RestartPayload,
    Resumable,
    RuntimeRestartCheckpoint,
    RuntimeRestartCheckpointReplayDisposition,
    RuntimeRestartReactionLoopState,
    RuntimeRestartScheduledWorkContext,
    RuntimeRestartToolApprovalWait,
    ScheduledWorkContext,
    SubagentSpawned,
    SuccessorAccepted,
)
from safepoint.records import OwnerState, StoredDescriptor


@dataclass(frozen=True)
class ParentFacts:
    """The parent run as a subagent's recovery sees it."""

    run_id: str
    exists: bool
    owner: OwnerState | None = None
    parent_run_id: str | None = None  # the parent's own parent: a child may not be its parent's ancestor
    spawned: Mapping[str, SubagentSpawned] = field(default_factory=dict)  # call id -> the latest child it started
    tools_allowed: tuple[str, ...] | None = None  # the parent's own grants (None: every tool)
    grant_expires_at_ms: int | None = None
    closed: bool = False


@dataclass(frozen=True)
class RestartFacts:
    agent_id: str
    now_ms: int
    descriptor: StoredDescriptor | None
    owner: OwnerState | None
    run_exists: bool = True
    conversation_len: int = 0  # messages in the log's history now
    lost_calls: tuple[str, ...] = ()  # pending calls a damaged log lost with the turn that asked for them
    assistant_turns: Container[int] = frozenset()  # turns whose assistant message is in the history
    context_epoch: int = 0  # rewinds of the conversation so far
    recovery_class: str = "root"  # as the run's header says
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    parent: ParentFacts | None = None
    scheduled: ScheduledWorkContext | None = None
    closed: bool = False  # the run's lifecycle was explicitly closed
    cancel: CancelRequest | None = None  # a cancel not yet acted on (the run's own, or a whole-stream one above)
    reset: ContextResetRequest | None = None
    successor: SuccessorAccepted | None = None
    resuming_model: str | None = None  # the model the restart would continue with
    reaping: bool = False  # the reaper judges work whose heartbeat outlived its lease
    reap_detail: str = ""  # why the reaper closes it (recovery cannot resume it, or it outlived --reap-after)


@dataclass(frozen=True)
class RecoveryVerdict:
    checked: tuple[RecoveryFailureReason, ...]  # the assertions evaluated, in order
    failed: RecoveryFailureReason | None
    detail: str
    disposition: RuntimeRestartCheckpointReplayDisposition | None
    checkpoint: RuntimeRestartCheckpoint | None = None
    payload: RestartPayload | None = None
    config: ExecutionConfig | None = None

    @property
    def resumable(self) -> bool:
        return self.failed is None and isinstance(self.disposition, Resumable)

    @property
    def summary(self) -> str:
        if self.failed is not None:
            return f"{self.failed}: {self.detail}"
        if isinstance(self.disposition, ReplayForbidden):
            return f"ReplayForbidden({self.disposition.reason}): {self.disposition.detail}"
        return f"Resumable: {self.detail}" if self.detail else "Resumable"


class _Failed(Exception):
    def __init__(self, reason: RecoveryFailureReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_checkpoint_decoder = msgspec.json.Decoder(RuntimeRestartCheckpoint)
_config_decoder = msgspec.json.Decoder(ExecutionConfig)
_payload_decoder = msgspec.json.Decoder(RestartPayload)
_PAYLOAD_KINDS: dict[object, type[msgspec.Struct]] = {kind.__struct_config__.tag: kind for kind in PAYLOAD_MODES}


def _parse(data: bytes | str, what: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _Failed("partial_recovery_descriptor", f"{what} is cut short: {exc}") from None


def _missing(obj: Any, struct: type[msgspec.Struct], prefix: str = "") -> list[str]:
    """The required fields of ``struct`` that the parsed JSON ``obj`` lacks or holds as null, nested structs
    included. Checked on the parsed JSON, not read from msgspec's error text, so that a missing field is partial
    whatever else is wrong and wherever it sits; a value of the wrong shape is left to the typed decoding."""
    if not isinstance(obj, dict):
        return []
    missing: list[str] = []
    for info in msgspec.structs.fields(struct):
        value = obj.get(info.encode_name)
        if value is None:
            if info.required:
                missing.append(prefix + info.encode_name)
        elif isinstance(info.type, type) and issubclass(info.type, msgspec.Struct):
            missing += _missing(value, info.type, f"{prefix}{info.encode_name}.")
    return missing


def _require(obj: Any, struct: type[msgspec.Struct] | None, what: str) -> None:
    if obj is None:
        raise _Failed("partial_recovery_descriptor", f"{what} is empty (JSON null)")
    missing = _missing(obj, struct) if struct is not None else []
    if missing:
        raise _Failed("partial_recovery_descriptor", f"{what} lacks {', '.join(missing)}")


def _payload_kind(obj: Any) -> type[msgspec.Struct] | None:
    """The payload struct a parsed payload names (None for an unknown kind: the typed decoding calls it invalid)."""
    if not isinstance(obj, dict):
        return None
    if obj.get("payload_kind") is None:
        raise _Failed("partial_recovery_descriptor", "restart payload lacks payload_kind")
    kind = obj["payload_kind"]
    return _PAYLOAD_KINDS.get(kind) if isinstance(kind, str) else None


def decode_descriptor(
    agent_id: str, stored: StoredDescriptor
) -> tuple[RuntimeRestartCheckpoint, RestartPayload, ExecutionConfig]:
    """The checkpoint, its payload and its execution config, or the descriptor assertion that fails.

    Cut short or missing core metadata (a required field absent or null, at any depth) is partial; whole but wrong
    (unknown mode, a value of the wrong type, a payload of another mode, a newer descriptor version, another agent's
    id) is invalid. Every partial check runs before any invalid one, so a descriptor that is both is partial."""
    if not stored.intact:
        raise _Failed("partial_recovery_descriptor", stored.detail or "the restart checkpoint fails its checksum")
    raw = _parse(stored.data, "restart checkpoint")
    _require(raw, RuntimeRestartCheckpoint, "restart checkpoint")
    config_json = raw.get("execution_config_json") if isinstance(raw, dict) else None
    payload_json = raw.get("payload_json") if isinstance(raw, dict) else None
    if isinstance(config_json, str):
        _require(_parse(config_json, "execution config"), ExecutionConfig, "execution config")
    if isinstance(payload_json, str):
        parsed = _parse(payload_json, "restart payload")
        _require(parsed, _payload_kind(parsed), "restart payload")
    try:
        checkpoint = _checkpoint_decoder.decode(stored.data)
        config = _config_decoder.decode(checkpoint.execution_config_json or "")
        payload = _payload_decoder.decode(checkpoint.payload_json or "")
    except msgspec.ValidationError as exc:
        raise _Failed("invalid_recovery_descriptor", f"restart checkpoint: {exc}") from None
    if config.descriptor_version > DESCRIPTOR_VERSION:
        raise _Failed(
            "invalid_recovery_descriptor",
            f"descriptor version {config.descriptor_version} is newer than this safepoint reads ({DESCRIPTOR_VERSION})",
        )
    if PAYLOAD_MODES[type(payload)] != checkpoint.mode:
        raise _Failed(
            "invalid_recovery_descriptor",
            f"mode {checkpoint.mode!r} carries a {PAYLOAD_MODES[type(payload)]!r} payload",
        )
    if checkpoint.agent_id != agent_id:
        raise _Failed(
            "invalid_recovery_descriptor", f"the checkpoint is agent {checkpoint.agent_id!r}'s, not {agent_id!r}'s"
        )
    if checkpoint.updated_at < checkpoint.created_at:
        raise _Failed("invalid_recovery_descriptor", "the checkpoint was updated before it was created")
    return checkpoint, payload, config


def _conversation(facts: RestartFacts, config: ExecutionConfig | None) -> None:
    if not facts.run_exists:
        raise _Failed("missing_conversation", f"run {facts.agent_id!r} no longer exists in the store")
    if config is not None and facts.conversation_len < config.history_len:
        raise _Failed(
            "missing_conversation",
            f"the checkpoint points at message {config.history_len} but the conversation has {facts.conversation_len}",
        )
    if facts.lost_calls:
        # The turn that asked for them is gone with the records cut off the log: what they were, and whether they
        # ran, is unknown. Asking the model again could repeat them; the run is closed instead.
        raise _Failed(
            "missing_conversation",
            f"call(s) {', '.join(facts.lost_calls)} named beside the log (the restart checkpoint, the trace, an "
            "approval) are gone from the damaged log with the turn that asked for them; they may have run",
        )


def _structure(
    facts: RestartFacts, checkpoint: RuntimeRestartCheckpoint | None, config: ExecutionConfig | None
) -> None:
    claimed_class = checkpoint.recovery_class if checkpoint else facts.recovery_class
    if facts.recovery_class != "subagent":
        if claimed_class == "subagent" or (config and config.parent_run_id):
            raise _Failed("invalid_structural_owner_identity", "a root run's checkpoint claims a parent")
        return
    parent = facts.parent
    if facts.parent_run_id is None or facts.parent_call_id is None or parent is None:
        raise _Failed("invalid_structural_owner_identity", "a subagent without a parent run")
    if config is not None and (config.parent_run_id, config.parent_call_id) != (
        facts.parent_run_id,
        facts.parent_call_id,
    ):
        raise _Failed("invalid_structural_owner_identity", "the checkpoint names another parent than the run does")
    if not parent.exists:
        raise _Failed("invalid_structural_owner_identity", f"parent run {parent.run_id!r} no longer exists (orphan)")
    if parent.parent_run_id == facts.agent_id:
        raise _Failed("invalid_structural_owner_identity", f"parent {parent.run_id!r} is this run's own child")
    if facts.parent_call_id not in parent.spawned:
        raise _Failed(
            "invalid_structural_owner_identity",
            f"parent {parent.run_id!r} has no record of spawning this run with call {facts.parent_call_id!r}",
        )


def _identity(facts: RestartFacts, checkpoint: RuntimeRestartCheckpoint | None) -> None:
    owner = facts.owner
    if owner is None or checkpoint is None:
        return  # no owner: the durable check says so; no checkpoint: nothing claims an identity
    if (checkpoint.recovery_class, checkpoint.recovery_owner_id) != (owner.recovery_class, owner.owner_id):
        raise _Failed(
            "recovery_identity_mismatch",
            f"the checkpoint is owned by {checkpoint.recovery_class}/{checkpoint.recovery_owner_id} but the run's "
            f"recovery owner is {owner.recovery_class}/{owner.owner_id}",
        )
    if owner.agent_id != facts.agent_id:
        raise _Failed("recovery_identity_mismatch", f"the recovery owner answers for agent {owner.agent_id!r}")


def _durable(facts: RestartFacts, config: ExecutionConfig | None) -> None:
    owner = facts.owner
    if owner is None:
        raise _Failed("invalid_durable_owner_identity", "the run has no recovery owner record")
    if owner.terminal_at is not None:
        raise _Failed(
            "invalid_durable_owner_identity",
            # The seed's terminal status ends with a full stop; inside the parentheses it would be a stray one.
            f"the recovery owner was closed at {owner.terminal_at} ({(owner.terminal_status or '').rstrip('.')}) in "
            f"generation {owner.generation}",
        )
    if config is not None and config.generation > owner.generation:
        raise _Failed(
            "invalid_durable_owner_identity",
            f"the checkpoint was written by generation {config.generation}, after the owner's {owner.generation}",
        )


def _authority(facts: RestartFacts, config: ExecutionConfig | None) -> None:
    if facts.recovery_class != "subagent" or facts.parent is None:
        return
    parent = facts.parent
    spawned = parent.spawned.get(facts.parent_call_id or "")
    if spawned is not None and spawned.child_run_id != facts.agent_id:
        spawned = None  # the call started another child since: its grants are not this run's (successor_accepted)
    # What the child claims (its checkpoint, else its spawn record) is bounded by what the parent granted at the spawn
    # and by what the parent holds now: the checkpoint is the child's own word, the spawn record the parent's.
    deadlines = (config.grant_expires_at_ms if config else None, spawned.grant_expires_at_ms if spawned else None)
    expires = min((at for at in deadlines if at is not None), default=None)
    if expires is not None and expires <= facts.now_ms:
        raise _Failed(
            "invalid_inherited_execution_authority",
            f"the grants inherited from {parent.run_id!r} expired {(facts.now_ms - expires) / 1000:.0f} s ago",
        )
    if parent.grant_expires_at_ms is not None and parent.grant_expires_at_ms <= facts.now_ms:
        raise _Failed("invalid_inherited_execution_authority", f"the parent {parent.run_id!r}'s own grants expired")
    if (parent.owner is not None and parent.owner.terminal_at is not None) or parent.closed:
        raise _Failed("invalid_inherited_execution_authority", f"the parent {parent.run_id!r} was closed")
    tools = config.tools_allowed if config else (spawned.tools_allowed if spawned else None)
    bounds = (
        ("its spawn did not grant", spawned.tools_allowed if spawned else None),
        ("its parent no longer grants", parent.tools_allowed),
    )
    for what, granted in bounds:
        if granted is not None:
            beyond = sorted(set(tools) - set(granted)) if tools is not None else ["(every tool)"]
            if beyond:
                raise _Failed(
                    "invalid_inherited_execution_authority", f"the child holds tools {what}: {', '.join(beyond)}"
                )


def _forbidden(reason: ReplayForbiddenReason, detail: str) -> ReplayForbidden:
    return ReplayForbidden(reason=reason, detail=detail)


def replay_disposition(
    facts: RestartFacts, payload: RestartPayload | None, config: ExecutionConfig | None
) -> RuntimeRestartCheckpointReplayDisposition:
    """§4: whether the interrupted work may continue. The first reason that applies wins; the order puts what the
    user or the supervisor decided before what the run's own state implies."""
    if facts.reaping:
        why = facts.reap_detail or "no heartbeat within the lease"
        return _forbidden("runtime_work_reap", f"{why}; the reaper closed the work")
    if facts.closed:
        return _forbidden("agent_closed", "the agent was closed")
    if facts.cancel is not None:
        if facts.cancel.whole_stream:
            return _forbidden(
                "user_cancelled_whole_stream", f"the user cancelled the whole stream at {facts.cancel.at}"
            )
        return _forbidden("user_cancelled", f"the user cancelled the run at {facts.cancel.at}")
    if facts.successor is not None:
        return _forbidden("successor_accepted", f"run {facts.successor.successor_run_id!r} took over this work")
    if facts.parent is not None and facts.parent_call_id is not None:
        latest = facts.parent.spawned.get(facts.parent_call_id)
        if latest is not None and latest.child_run_id != facts.agent_id:
            return _forbidden("successor_accepted", f"the parent started {latest.child_run_id!r} in this run's place")
    if facts.reset is not None:
        return _forbidden("context_reset", f"the user reset the context at {facts.reset.at}")
    if config is not None and config.context_epoch < facts.context_epoch:
        return _forbidden("context_reset", "the conversation was rewound after this checkpoint was written")
    occurrences = (  # the run's header and the checkpoint's scheduled-work payload may each name the occurrence
        facts.scheduled,
        payload.scheduled_work_context if isinstance(payload, RuntimeRestartScheduledWorkContext) else None,
    )
    for scheduled in occurrences:
        if scheduled is not None and facts.now_ms > scheduled.scheduled_for_ms + scheduled.cron_exec_timeout_ms:
            late = (facts.now_ms - scheduled.scheduled_for_ms) / 1000
            window = scheduled.cron_exec_timeout_ms / 1000
            return _forbidden("cron_exec_timeout", f"due {late:.0f} s ago, past its {window:.0f} s window")
    if config is not None and facts.resuming_model is not None and facts.resuming_model != config.model:
        return _forbidden(
            "model_switch", f"written under model {config.model!r}, resumed with {facts.resuming_model!r}"
        )
    if (
        isinstance(payload, RuntimeRestartReactionLoopState)
        and payload.visible_output_started
        and payload.turn not in facts.assistant_turns
    ):
        return _forbidden(
            "visible_output_started", f"turn {payload.turn + 1} was already streaming to the user when the run stopped"
        )
    return Resumable()


CHECKED_ORDER: tuple[RecoveryFailureReason, ...] = RECOVERY_FAILURE_REASONS  # the order they are checked in


def check_recovery(facts: RestartFacts) -> RecoveryVerdict:
    """Run the assertions in order (the first failure ends it), then the disposition."""
    checkpoint: RuntimeRestartCheckpoint | None = None
    payload: RestartPayload | None = None
    config: ExecutionConfig | None = None
    checked: list[RecoveryFailureReason] = []
    try:
        checked += ["partial_recovery_descriptor", "invalid_recovery_descriptor"]
        if facts.descriptor is not None:
            checkpoint, payload, config = decode_descriptor(facts.agent_id, facts.descriptor)
        checked.append("missing_conversation")
        _conversation(facts, config)
        checked.append("invalid_structural_owner_identity")
        _structure(facts, checkpoint, config)
        checked.append("recovery_identity_mismatch")
        _identity(facts, checkpoint)
        checked.append("invalid_durable_owner_identity")
        _durable(facts, config)
        checked.append("invalid_inherited_execution_authority")
        _authority(facts, config)
    except _Failed as failure:
        checked = checked[: checked.index(failure.reason) + 1]  # a partial descriptor never got to the invalid check
        return RecoveryVerdict(tuple(checked), failure.reason, failure.detail, None, checkpoint, payload, config)
    disposition = replay_disposition(facts, payload, config)
    detail = "" if checkpoint is not None else "no restart checkpoint: the run continues from its log"
    if isinstance(disposition, Resumable) and isinstance(payload, RuntimeRestartToolApprovalWait):
        detail = f"call {payload.call_id} waits for approval ({payload.timeout_remaining_ms / 1000:.0f} s left)"
    return RecoveryVerdict(tuple(checked), None, detail, disposition, checkpoint, payload, config)
