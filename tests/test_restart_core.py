"""Restart recovery's pure rules (``safepoint.core.restart``, seed 003 §3-§4): no disk, no processes.

Every case starts from a valid, resumable baseline (a root run, or a subagent with its parent's view) and injects
faults by name. ``FAULTS`` lists, per recovery assertion and per replay-forbidden reason, every distinct way the
rules can be made to give it, with the words its detail must carry; a property test combines faults at random.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safepoint.core.restart import (
    CHECKED_ORDER,
    ParentFacts,
    RecoveryVerdict,
    RestartFacts,
    _Failed,
    check_recovery,
    decode_descriptor,
    replay_disposition,
)
from safepoint.protocol import (
    DESCRIPTOR_VERSION,
    PAYLOAD_MODES,
    RECOVERY_FAILURE_REASONS,
    REPLAY_FORBIDDEN_REASONS,
    TERMINAL_STATUS_RESTART,
    CancelRequest,
    ContextResetRequest,
    ExecutionConfig,
    RecoveryFailureReason,
    ReplayForbidden,
    ReplayForbiddenReason,
    Resumable,
    RuntimeRestartCheckpoint,
    RuntimeRestartQueuedSubmission,
    RuntimeRestartReactionLoopState,
    RuntimeRestartScheduledWorkContext,
    RuntimeRestartToolApprovalWait,
    ScheduledWorkContext,
    SubagentSpawned,
    SuccessorAccepted,
)
from safepoint.records import OwnerState, StoredDescriptor

NOW = 1_700_000_000_000
ROOT, CHILD, CALL = "root-1", "child-1", "call-7"
CHILD_OWNER = f"{ROOT}/{CALL}"
MODEL = "m-1"
AT = "2024-05-01T10:00:00Z"


class _Drop:
    """A key to leave out of the JSON altogether."""


DROP = _Drop()


@dataclass(frozen=True)
class Verbatim:
    """A ``payload_json``/``execution_config_json`` column holding this JSON value itself instead of JSON text."""

    value: Any


def _owner(agent_id: str, recovery_class: str, owner_id: str, **over: Any) -> dict[str, Any]:
    owner: dict[str, Any] = {
        "recovery_class": recovery_class,
        "owner_id": owner_id,
        "generation": 3,
        "agent_id": agent_id,
        "message_id": None,
        "active_at": AT,
        "holder": "host-a:41",
        "pid": 41,
        "host": "host-a",
        "claimed_at": AT,
        "heartbeat_at": AT,
    }
    owner.update(over)
    return owner


def _without_drops(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_drops(v) for k, v in value.items() if v is not DROP}
    return value


@dataclass
class Spec:
    """A restart as plain data, every part editable by a fault; ``facts()`` turns it into ``RestartFacts``."""

    agent: str
    recovery_class: str
    checkpoint: dict[str, Any]  # the columns; payload_json and execution_config_json come from the two below
    payload: Any  # a dict (encoded to JSON text), a str (the column's text as is), None, DROP or Verbatim
    config: Any
    owner: dict[str, Any] | None
    facts: dict[str, Any]
    parent: dict[str, Any] | None = None
    spawned: dict[str, dict[str, Any]] = field(default_factory=dict)
    parent_owner: dict[str, Any] | None = None
    has_descriptor: bool = True
    raw: bytes | None = None  # the stored bytes themselves, instead of the encoded checkpoint
    cut: bool = False  # keep only the first half of the stored bytes
    intact: bool = True
    intact_detail: str = ""

    def column(self, value: Any) -> Any:
        if isinstance(value, dict):
            return msgspec.json.encode(_without_drops(value)).decode()
        return value.value if isinstance(value, Verbatim) else value

    def descriptor(self) -> StoredDescriptor | None:
        if not self.has_descriptor:
            return None
        doc = dict(self.checkpoint)
        doc["payload_json"] = self.column(self.payload)
        doc["execution_config_json"] = self.column(self.config)
        data = (
            self.raw if self.raw is not None else msgspec.json.encode({k: v for k, v in doc.items() if v is not DROP})
        )
        if self.cut:
            data = data[: len(data) // 2]
        return StoredDescriptor(data=data, intact=self.intact, detail=self.intact_detail)

    def build(self) -> RestartFacts:
        parent = None
        if self.parent is not None:
            parent = ParentFacts(
                **self.parent,
                owner=OwnerState(**self.parent_owner) if self.parent_owner else None,
                spawned={call: SubagentSpawned(**_without_drops(spawn)) for call, spawn in self.spawned.items()},
            )
        return RestartFacts(
            agent_id=self.agent,
            now_ms=NOW,
            descriptor=self.descriptor(),
            owner=OwnerState(**self.owner) if self.owner is not None else None,
            recovery_class=self.recovery_class,
            parent=parent,
            **self.facts,
        )


def root_spec() -> Spec:
    """A root run stopped between two steps of its reaction loop: valid and resumable."""
    return Spec(
        agent=ROOT,
        recovery_class="root",
        checkpoint={
            "agent_id": ROOT,
            "mode": "reaction_loop",
            "created_at": NOW - 60_000,
            "updated_at": NOW - 10_000,
            "recovery_class": "root",
            "recovery_owner_id": ROOT,
        },
        payload={"payload_kind": "reaction_loop", "turn": 2, "pending_tool_calls": ["c1"]},
        config={"descriptor_version": DESCRIPTOR_VERSION, "generation": 3, "model": MODEL, "history_len": 5},
        owner=_owner(ROOT, "root", ROOT),
        facts={"conversation_len": 6, "assistant_turns": frozenset({0, 1})},
    )


def child_spec() -> Spec:
    """A subagent started by ``root-1``'s call ``call-7``, with grants its parent still holds: valid and resumable."""
    spec = root_spec()
    spec.agent, spec.recovery_class = CHILD, "subagent"
    spec.checkpoint.update(agent_id=CHILD, recovery_class="subagent", recovery_owner_id=CHILD_OWNER)
    spec.config.update(
        parent_run_id=ROOT, parent_call_id=CALL, tools_allowed=["read", "grep"], grant_expires_at_ms=NOW + 60_000
    )
    spec.owner = _owner(CHILD, "subagent", CHILD_OWNER)
    spec.facts.update(parent_run_id=ROOT, parent_call_id=CALL)
    spec.parent = {"run_id": ROOT, "exists": True, "tools_allowed": ("read", "grep", "write")}
    spec.parent_owner = _owner(ROOT, "root", ROOT, generation=7)
    spec.spawned = {
        CALL: {
            "call_id": CALL,
            "child_run_id": CHILD,
            "at": AT,
            "tools_allowed": ("read", "grep"),
            "grant_expires_at_ms": NOW + 60_000,
        }
    }
    return spec


def verdict_of(spec: Spec) -> RecoveryVerdict:
    return check_recovery(spec.build())


def forbidden(verdict: RecoveryVerdict) -> ReplayForbidden:
    assert verdict.failed is None, verdict.summary
    assert isinstance(verdict.disposition, ReplayForbidden), verdict.summary
    return verdict.disposition


def checked_through(reason: RecoveryFailureReason) -> tuple[RecoveryFailureReason, ...]:
    return CHECKED_ORDER[: CHECKED_ORDER.index(reason) + 1]


# the faults ------------------------------------------------------------------------------------------------------
def _set(**over: Any) -> Callable[[Spec], None]:
    def apply(spec: Spec) -> None:
        for key, value in over.items():
            part, _, name = key.partition("__")
            target = getattr(spec, part)
            if name:
                target[name] = value
            else:
                setattr(spec, part, value)

    return apply


def _spawn(**over: Any) -> Callable[[Spec], None]:
    def apply(spec: Spec) -> None:
        if CALL in spec.spawned:
            spec.spawned[CALL] = {**spec.spawned[CALL], **over}

    return apply


def _payload(**over: Any) -> Callable[[Spec], None]:
    def apply(spec: Spec) -> None:
        if isinstance(spec.payload, dict):
            spec.payload = {**spec.payload, **over}

    return apply


def _owned_by(owner_id: str) -> Callable[[Spec], None]:
    def apply(spec: Spec) -> None:
        if isinstance(spec.checkpoint.get("recovery_owner_id"), str):  # a checkpoint that names no owner stays so
            spec.checkpoint["recovery_owner_id"] = owner_id

    return apply


def _both(*faults: Callable[[Spec], None]) -> Callable[[Spec], None]:
    def apply(spec: Spec) -> None:
        for fault in faults:
            fault(spec)

    return apply


def _scheduled_payload(spec: Spec) -> None:
    spec.checkpoint["mode"] = "scheduled_work"
    spec.payload = {
        "payload_kind": "scheduled_work",
        "job_id": "job-3",
        "attempt": 1,
        "version": 2,
        "scheduled_work_context": {
            "cron": "*/5 * * * *",
            "scheduled_for_ms": NOW - 120_000,
            "cron_exec_timeout_ms": 60_000,
        },
    }


def _drop_nested_cron(spec: Spec) -> None:
    _scheduled_payload(spec)
    spec.payload["scheduled_work_context"] = {"scheduled_for_ms": NOW, "cron_exec_timeout_ms": 60_000}


def _scheduled_run(spec: Spec) -> None:
    spec.recovery_class = spec.checkpoint["recovery_class"] = "scheduled"
    spec.checkpoint["recovery_owner_id"] = "job:job-3"
    assert spec.owner is not None
    spec.owner.update(recovery_class="scheduled", owner_id="job:job-3")


@dataclass(frozen=True)
class Fault:
    expect: RecoveryFailureReason | ReplayForbiddenReason
    apply: Callable[[Spec], None]
    words: tuple[str, ...]  # the detail must contain each
    base: Callable[[], Spec] = child_spec
    composable: bool = True  # may be combined at random with every other composable fault


FAULTS: dict[str, Fault] = {
    # partial_recovery_descriptor: cut short, or core metadata missing (absent or null), at any depth
    "checksum_fails": Fault(
        "partial_recovery_descriptor",
        _set(intact=False, intact_detail="cut short: 40 bytes and no end"),
        ("cut short: 40 bytes and no end",),
    ),
    "checksum_fails_silently": Fault(
        "partial_recovery_descriptor", _set(intact=False), ("fails its checksum",), composable=False
    ),
    "json_truncated": Fault("partial_recovery_descriptor", _set(cut=True), ("restart checkpoint is cut short",)),
    "json_empty": Fault(
        "partial_recovery_descriptor", _set(raw=b""), ("restart checkpoint is cut short",), composable=False
    ),
    "json_null": Fault(
        "partial_recovery_descriptor", _set(raw=b"null"), ("restart checkpoint is empty (JSON null)",), composable=False
    ),
    "owner_id_missing": Fault(
        "partial_recovery_descriptor", _set(checkpoint__recovery_owner_id=DROP), ("lacks recovery_owner_id",)
    ),
    "owner_id_null": Fault(
        "partial_recovery_descriptor", _set(checkpoint__recovery_owner_id=None), ("lacks recovery_owner_id",)
    ),
    "class_null": Fault(
        "partial_recovery_descriptor",
        _set(checkpoint__recovery_class=None),
        ("lacks recovery_class",),
        composable=False,
    ),
    "payload_json_null": Fault("partial_recovery_descriptor", _set(payload=None), ("lacks payload_json",)),
    "payload_json_missing": Fault(
        "partial_recovery_descriptor", _set(payload=DROP), ("lacks payload_json",), composable=False
    ),
    "config_json_null": Fault(
        "partial_recovery_descriptor", _set(config=None), ("lacks execution_config_json",), composable=False
    ),
    "payload_truncated": Fault(
        "partial_recovery_descriptor",
        _set(payload='{"payload_kind": "reaction_loop", "tu'),
        ("restart payload is cut short",),
    ),
    "config_truncated": Fault(
        "partial_recovery_descriptor",
        _set(config='{"generation": 3, "mod'),
        ("execution config is cut short",),
        composable=False,
    ),
    "payload_is_json_null": Fault(
        "partial_recovery_descriptor", _set(payload="null"), ("restart payload is empty (JSON null)",), composable=False
    ),
    "config_is_json_null": Fault(
        "partial_recovery_descriptor", _set(config="null"), ("execution config is empty (JSON null)",), composable=False
    ),
    "payload_kind_missing": Fault(
        "partial_recovery_descriptor", _payload(payload_kind=DROP), ("restart payload lacks payload_kind",)
    ),
    "payload_field_missing": Fault("partial_recovery_descriptor", _payload(turn=DROP), ("restart payload lacks turn",)),
    "payload_field_null": Fault(
        "partial_recovery_descriptor", _payload(turn=None), ("restart payload lacks turn",), composable=False
    ),
    "config_field_missing": Fault(
        "partial_recovery_descriptor", _set(config__model=DROP), ("execution config lacks model",)
    ),
    "nested_field_missing": Fault(
        "partial_recovery_descriptor",
        _drop_nested_cron,
        ("restart payload lacks scheduled_work_context.cron",),
        composable=False,
    ),
    "missing_and_wrong": Fault(  # partial is checked first, whatever msgspec would have tripped on first
        "partial_recovery_descriptor",
        _set(checkpoint__mode="bogus", checkpoint__agent_id=5, checkpoint__recovery_owner_id=DROP),
        ("lacks recovery_owner_id",),
        composable=False,
    ),
    "payload_cut_under_wrong_mode": Fault(
        "partial_recovery_descriptor",
        _set(checkpoint__mode="bogus", payload='{"payload_kind":'),
        ("restart payload is cut short",),
        composable=False,
    ),
    # invalid_recovery_descriptor: whole, but wrong
    "unknown_mode": Fault(
        "invalid_recovery_descriptor", _set(checkpoint__mode="bogus"), ("Invalid enum value 'bogus'", "$.mode")
    ),
    "payload_of_another_mode": Fault(
        "invalid_recovery_descriptor",
        _set(checkpoint__mode="queued_submission"),
        ("mode 'queued_submission' carries a 'reaction_loop' payload",),
    ),
    "newer_descriptor": Fault(
        "invalid_recovery_descriptor",
        _set(config__descriptor_version=DESCRIPTOR_VERSION + 1),
        (f"descriptor version {DESCRIPTOR_VERSION + 1} is newer than this safepoint reads ({DESCRIPTOR_VERSION})",),
    ),
    "another_agents_checkpoint": Fault(
        "invalid_recovery_descriptor",
        _set(checkpoint__agent_id="child-9"),
        ("the checkpoint is agent 'child-9''s, not 'child-1''s",),
    ),
    "updated_before_created": Fault(
        "invalid_recovery_descriptor",
        _set(checkpoint__updated_at=NOW - 70_000),
        ("updated before it was created",),
    ),
    "wrong_type": Fault(
        "invalid_recovery_descriptor",
        _set(checkpoint__created_at="yesterday"),
        ("Expected `int`, got `str`", "$.created_at"),
    ),
    "unknown_class": Fault(
        "invalid_recovery_descriptor",
        _set(checkpoint__recovery_class="stranger"),
        ("Invalid enum value 'stranger'",),
        composable=False,
    ),
    "unknown_payload_kind": Fault(
        "invalid_recovery_descriptor",
        _payload(payload_kind="nope"),
        ("Invalid value 'nope'", "$.payload_kind"),
        composable=False,  # an unknown kind's required fields are unknown: a field it lacks cannot be noticed
    ),
    "payload_kind_not_a_name": Fault(
        "invalid_recovery_descriptor",
        _payload(payload_kind=["reaction_loop"]),
        ("Expected `str` - at `$.payload_kind`",),
        composable=False,
    ),
    "json_array": Fault(
        "invalid_recovery_descriptor", _set(raw=b"[1, 2]"), ("Expected `object`, got `array`",), composable=False
    ),
    "json_string": Fault(
        "invalid_recovery_descriptor", _set(raw=b'"checkpoint"'), ("Expected `object`, got `str`",), composable=False
    ),
    "payload_json_array": Fault(
        "invalid_recovery_descriptor", _set(payload="[]"), ("Expected `object`, got `array`",), composable=False
    ),
    "config_json_number": Fault(
        "invalid_recovery_descriptor", _set(config="7"), ("Expected `object`, got `int`",), composable=False
    ),
    "payload_not_text": Fault(
        "invalid_recovery_descriptor",
        _set(payload=Verbatim({"payload_kind": "reaction_loop", "turn": 2})),
        ("Expected `str | null`, got `object`", "$.payload_json"),
        composable=False,
    ),
    "msgspec_words_in_a_value": Fault(  # the old rule read "missing required field" out of msgspec's message
        "invalid_recovery_descriptor",
        _set(checkpoint__mode="Object missing required field `mode`"),
        ("Invalid enum value",),
        composable=False,
    ),
    # missing_conversation
    "run_gone": Fault("missing_conversation", _set(facts__run_exists=False), ("run 'child-1' no longer exists",)),
    "history_short": Fault(
        "missing_conversation",
        _set(facts__conversation_len=4),
        ("points at message 5 but the conversation has 4",),
    ),
    # invalid_structural_owner_identity
    "no_parent_run": Fault(
        "invalid_structural_owner_identity", _set(facts__parent_run_id=None), ("a subagent without a parent run",)
    ),
    "no_parent_call": Fault(
        "invalid_structural_owner_identity",
        _set(facts__parent_call_id=None),
        ("a subagent without a parent run",),
        composable=False,
    ),
    "no_parent_facts": Fault(
        "invalid_structural_owner_identity", _set(parent=None), ("a subagent without a parent run",), composable=False
    ),
    "checkpoint_names_another_call": Fault(
        "invalid_structural_owner_identity",
        _set(config__parent_call_id="call-8"),
        ("the checkpoint names another parent than the run does",),
    ),
    "checkpoint_names_another_parent": Fault(
        "invalid_structural_owner_identity",
        _set(config__parent_run_id="root-9"),
        ("the checkpoint names another parent than the run does",),
        composable=False,
    ),
    "orphan": Fault(
        "invalid_structural_owner_identity",
        _set(parent__exists=False),
        ("parent run 'root-1' no longer exists (orphan)",),
    ),
    "parent_is_own_child": Fault(
        "invalid_structural_owner_identity",
        _set(parent__parent_run_id=CHILD),
        ("parent 'root-1' is this run's own child",),
    ),
    "no_spawn_record": Fault(
        "invalid_structural_owner_identity",
        _set(spawned={}),
        ("parent 'root-1' has no record of spawning this run with call 'call-7'",),
    ),
    "spawn_record_of_another_call": Fault(
        "invalid_structural_owner_identity",
        lambda spec: spec.spawned.update({"call-8": {**spec.spawned.pop(CALL), "call_id": "call-8"}}),
        ("has no record of spawning this run with call 'call-7'",),
        composable=False,
    ),
    "root_checkpoint_claims_subagent": Fault(
        "invalid_structural_owner_identity",
        _set(checkpoint__recovery_class="subagent"),
        ("a root run's checkpoint claims a parent",),
        base=root_spec,
        composable=False,
    ),
    "root_config_names_parent": Fault(
        "invalid_structural_owner_identity",
        _set(config__parent_run_id="root-0"),
        ("a root run's checkpoint claims a parent",),
        base=root_spec,
        composable=False,
    ),
    "scheduled_checkpoint_claims_subagent": Fault(
        "invalid_structural_owner_identity",
        _both(_scheduled_run, _set(checkpoint__recovery_class="subagent")),
        ("a root run's checkpoint claims a parent",),
        base=root_spec,
        composable=False,
    ),
    # recovery_identity_mismatch
    "checkpoint_owned_by_another": Fault(
        "recovery_identity_mismatch",
        _owned_by("root-1/call-9"),
        ("owned by subagent/root-1/call-9 but the run's recovery owner is subagent/root-1/call-7",),
    ),
    "checkpoint_of_another_class": Fault(
        "recovery_identity_mismatch",
        _set(checkpoint__recovery_class="root"),
        ("owned by root/root-1/call-7 but the run's recovery owner is subagent/root-1/call-7",),
    ),
    "owner_of_another_agent": Fault(
        "recovery_identity_mismatch",
        _set(owner__agent_id="child-9"),
        ("the recovery owner answers for agent 'child-9'",),
    ),
    "root_checkpoint_scheduled": Fault(
        "recovery_identity_mismatch",
        _set(checkpoint__recovery_class="scheduled"),
        ("owned by scheduled/root-1 but the run's recovery owner is root/root-1",),
        base=root_spec,
        composable=False,
    ),
    # invalid_durable_owner_identity
    "no_owner": Fault(
        "invalid_durable_owner_identity",
        _set(owner=None),
        ("the run has no recovery owner record",),
        composable=False,  # with no owner there is nothing to mismatch: the identity check stands aside
    ),
    "owner_closed": Fault(
        "invalid_durable_owner_identity",
        _set(owner__terminal_at="2024-05-01T11:00:00Z", owner__terminal_status=TERMINAL_STATUS_RESTART),
        (f"closed at 2024-05-01T11:00:00Z ({TERMINAL_STATUS_RESTART.rstrip('.')}) in generation 3",),
    ),
    "checkpoint_from_a_later_generation": Fault(
        "invalid_durable_owner_identity",
        _set(config__generation=4),
        ("written by generation 4, after the owner's 3",),
    ),
    # invalid_inherited_execution_authority
    "grant_expired": Fault(
        "invalid_inherited_execution_authority",
        _set(config__grant_expires_at_ms=NOW - 5_000),
        ("the grants inherited from 'root-1' expired 5 s ago",),
    ),
    "grant_expires_now": Fault(
        "invalid_inherited_execution_authority",
        _set(config__grant_expires_at_ms=NOW),
        ("the grants inherited from 'root-1' expired 0 s ago",),
        composable=False,
    ),
    "spawn_grant_expired": Fault(  # the parent's record bounds the child's own claim
        "invalid_inherited_execution_authority",
        _spawn(grant_expires_at_ms=NOW - 7_000),
        ("the grants inherited from 'root-1' expired 7 s ago",),
    ),
    "spawn_grant_expired_claim_open": Fault(
        "invalid_inherited_execution_authority",
        _both(_spawn(grant_expires_at_ms=NOW - 7_000), _set(config__grant_expires_at_ms=DROP)),
        ("expired 7 s ago",),
        composable=False,
    ),
    "parent_grants_expired": Fault(
        "invalid_inherited_execution_authority",
        _set(parent__grant_expires_at_ms=NOW - 1),
        ("the parent 'root-1''s own grants expired",),
    ),
    "parent_owner_closed": Fault(
        "invalid_inherited_execution_authority",
        lambda spec: spec.parent_owner.update(terminal_at="2024-05-01T11:00:00Z") if spec.parent_owner else None,
        ("the parent 'root-1' was closed",),
    ),
    "parent_closed": Fault(
        "invalid_inherited_execution_authority", _set(parent__closed=True), ("the parent 'root-1' was closed",)
    ),
    "parent_closed_no_owner": Fault(
        "invalid_inherited_execution_authority",
        _set(parent__closed=True, parent_owner=None),
        ("the parent 'root-1' was closed",),
        composable=False,
    ),
    "tools_beyond_parent": Fault(
        "invalid_inherited_execution_authority",
        _set(parent__tools_allowed=("read",)),
        ("the child holds tools its parent no longer grants: grep",),
    ),
    "tools_beyond_spawn": Fault(
        "invalid_inherited_execution_authority",
        _set(config__tools_allowed=["read", "grep", "write"]),
        ("the child holds tools its spawn did not grant: write",),
    ),
    "every_tool_under_a_restricted_parent": Fault(
        "invalid_inherited_execution_authority",
        _both(_set(config__tools_allowed=DROP), _spawn(tools_allowed=DROP)),
        ("the child holds tools its parent no longer grants: (every tool)",),
        composable=False,
    ),
    "every_tool_under_a_restricted_spawn": Fault(
        "invalid_inherited_execution_authority",
        _both(_set(config__tools_allowed=DROP), _set(parent__tools_allowed=None)),
        ("the child holds tools its spawn did not grant: (every tool)",),
        composable=False,
    ),
    # ReplayForbidden, in the order the disposition looks
    "reaping": Fault("runtime_work_reap", _set(facts__reaping=True), ("no heartbeat within the lease",)),
    "agent_closed": Fault("agent_closed", _set(facts__closed=True), ("the agent was closed",)),
    "cancelled_whole_stream": Fault(
        "user_cancelled_whole_stream",
        _set(facts__cancel=CancelRequest(at=AT, whole_stream=True)),
        (f"the user cancelled the whole stream at {AT}",),
        composable=False,  # the run has one pending cancel: "cancelled" stands for both
    ),
    "cancelled": Fault(
        "user_cancelled", _set(facts__cancel=CancelRequest(at=AT)), (f"the user cancelled the run at {AT}",)
    ),
    "successor": Fault(
        "successor_accepted",
        _set(facts__successor=SuccessorAccepted(successor_run_id="child-2", at=AT)),
        ("run 'child-2' took over this work",),
    ),
    "parent_started_another": Fault(
        "successor_accepted",
        _spawn(child_run_id="child-2"),
        ("the parent started 'child-2' in this run's place",),
        composable=False,
    ),
    "parent_started_another_with_lesser_grants": Fault(  # the successor's grants are not this run's to fail on
        "successor_accepted",
        _spawn(child_run_id="child-2", tools_allowed=("read",), grant_expires_at_ms=NOW - 1),
        ("the parent started 'child-2' in this run's place",),
        composable=False,
    ),
    "reset": Fault(
        "context_reset", _set(facts__reset=ContextResetRequest(at=AT)), (f"the user reset the context at {AT}",)
    ),
    "rewound": Fault(
        "context_reset", _set(facts__context_epoch=1), ("the conversation was rewound after this checkpoint",)
    ),
    "cron_window_passed": Fault(
        "cron_exec_timeout",
        _set(
            facts__scheduled=ScheduledWorkContext(
                cron="*/5 * * * *", scheduled_for_ms=NOW - 120_000, cron_exec_timeout_ms=60_000
            )
        ),
        ("due 120 s ago, past its 60 s window",),
    ),
    "cron_window_passed_in_payload": Fault(
        "cron_exec_timeout",
        _both(_scheduled_run, _scheduled_payload),
        ("due 120 s ago, past its 60 s window",),
        base=root_spec,
        composable=False,
    ),
    "model_switch": Fault(
        "model_switch", _set(facts__resuming_model="m-2"), ("written under model 'm-1', resumed with 'm-2'",)
    ),
    "visible_output": Fault(
        "visible_output_started",
        _payload(visible_output_started=True),
        ("turn 3 was already streaming to the user when the run stopped",),
    ),
}

DISPOSITION_ORDER: tuple[ReplayForbiddenReason, ...] = (
    "runtime_work_reap",
    "agent_closed",
    "user_cancelled_whole_stream",
    "user_cancelled",
    "successor_accepted",
    "context_reset",
    "cron_exec_timeout",
    "model_switch",
    "visible_output_started",
)


def spec_with(*names: str) -> Spec:
    spec = FAULTS[names[0]].base()
    for name in names:
        FAULTS[name].apply(spec)
    return spec


def test_fault_table_covers_every_reason() -> None:
    assert CHECKED_ORDER == RECOVERY_FAILURE_REASONS
    assert sorted(DISPOSITION_ORDER) == sorted(REPLAY_FORBIDDEN_REASONS)
    assert {fault.expect for fault in FAULTS.values()} == set(RECOVERY_FAILURE_REASONS) | set(REPLAY_FORBIDDEN_REASONS)


# baselines -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [root_spec, child_spec], ids=["root", "subagent"])
def test_baseline_is_resumable(base: Callable[[], Spec]) -> None:
    verdict = verdict_of(base())
    assert verdict.failed is None
    assert verdict.disposition == Resumable()
    assert verdict.resumable
    assert verdict.checked == CHECKED_ORDER
    assert verdict.detail == ""
    assert verdict.summary == "Resumable"
    assert verdict.checkpoint is not None and verdict.checkpoint.mode == "reaction_loop"
    assert verdict.payload == RuntimeRestartReactionLoopState(turn=2, pending_tool_calls=("c1",))
    assert verdict.config is not None and verdict.config.generation == 3 and verdict.config.model == MODEL


@pytest.mark.parametrize("base", [root_spec, child_spec], ids=["root", "subagent"])
def test_no_descriptor_continues_from_its_log(base: Callable[[], Spec]) -> None:
    spec = base()
    spec.has_descriptor = False
    spec.facts["conversation_len"] = 0  # nothing points into the conversation
    verdict = verdict_of(spec)
    assert verdict.failed is None and verdict.disposition == Resumable()
    assert verdict.checked == CHECKED_ORDER
    assert verdict.detail == "no restart checkpoint: the run continues from its log"
    assert verdict.summary == "Resumable: no restart checkpoint: the run continues from its log"
    assert (verdict.checkpoint, verdict.payload, verdict.config) == (None, None, None)


def test_every_payload_mode_is_resumable() -> None:
    payloads: dict[str, dict[str, Any]] = {
        "tool_approval_wait": {
            "payload_kind": "tool_approval_wait",
            "call_id": "c4",
            "tool_name": "pay",
            "input_hash": "h1",
            "wait_started_at_ms": NOW - 30_000,
            "timeout_remaining_ms": 12_400,
        },
        "queued_submission": {"payload_kind": "queued_submission", "submission_key": "s1", "text": "next"},
        "reaction_loop": {"payload_kind": "reaction_loop", "turn": 0},
        "scheduled_work": {
            "payload_kind": "scheduled_work",
            "job_id": "j",
            "attempt": 1,
            "version": 1,
            "scheduled_work_context": {"cron": "@hourly", "scheduled_for_ms": NOW, "cron_exec_timeout_ms": 1},
        },
    }
    assert set(payloads) == set(PAYLOAD_MODES.values())
    for mode, payload in payloads.items():
        spec = root_spec()
        spec.checkpoint["mode"], spec.payload = mode, payload
        verdict = verdict_of(spec)
        assert verdict.resumable, (mode, verdict.summary)
        assert verdict.payload is not None and PAYLOAD_MODES[type(verdict.payload)] == mode
    spec = root_spec()
    spec.checkpoint["mode"], spec.payload = "tool_approval_wait", payloads["tool_approval_wait"]
    assert verdict_of(spec).detail == "call c4 waits for approval (12 s left)"


# each fault on its own -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(FAULTS))
def test_each_fault_gives_its_reason(name: str) -> None:
    fault = FAULTS[name]
    verdict = verdict_of(spec_with(name))
    if fault.expect in RECOVERY_FAILURE_REASONS:
        assert verdict.failed == fault.expect, verdict.summary
        assert verdict.disposition is None
        assert verdict.checked == checked_through(verdict.failed)
        assert not verdict.resumable
        assert verdict.summary.startswith(f"{fault.expect}: ")
        detail = verdict.detail
    else:
        disposition = forbidden(verdict)
        assert disposition.reason == fault.expect
        assert verdict.checked == CHECKED_ORDER
        assert verdict.summary == f"ReplayForbidden({fault.expect}): {disposition.detail}"
        detail = disposition.detail
    for word in fault.words:
        assert word in detail, (name, detail)


def test_a_partial_descriptor_never_reaches_the_invalid_check() -> None:
    verdict = verdict_of(spec_with("json_truncated"))
    assert verdict.checked == ("partial_recovery_descriptor",)
    assert verdict_of(spec_with("unknown_mode")).checked == (
        "partial_recovery_descriptor",
        "invalid_recovery_descriptor",
    )


def _required_fields() -> list[tuple[type[msgspec.Struct], str]]:
    found: list[tuple[type[msgspec.Struct], str]] = [
        (RuntimeRestartCheckpoint, f.encode_name) for f in msgspec.structs.fields(RuntimeRestartCheckpoint)
    ]
    found += [(ExecutionConfig, f.encode_name) for f in msgspec.structs.fields(ExecutionConfig) if f.required]
    for kind in PAYLOAD_MODES:
        found += [(kind, f.encode_name) for f in msgspec.structs.fields(kind) if f.required]
    return found


FULL_PAYLOADS: dict[type[msgspec.Struct], msgspec.Struct] = {
    RuntimeRestartToolApprovalWait: RuntimeRestartToolApprovalWait(
        call_id="c4", tool_name="pay", input_hash="h", wait_started_at_ms=1, timeout_remaining_ms=2
    ),
    RuntimeRestartQueuedSubmission: RuntimeRestartQueuedSubmission(submission_key="s", text="t"),
    RuntimeRestartReactionLoopState: RuntimeRestartReactionLoopState(turn=2),
    RuntimeRestartScheduledWorkContext: RuntimeRestartScheduledWorkContext(
        job_id="j",
        attempt=1,
        version=1,
        scheduled_work_context=ScheduledWorkContext(cron="@daily", scheduled_for_ms=NOW, cron_exec_timeout_ms=1),
    ),
}


@pytest.mark.parametrize("struct, name", _required_fields(), ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("how", ["absent", "null"])
def test_every_required_field_absent_or_null_is_partial(struct: type[msgspec.Struct], name: str, how: str) -> None:
    spec = root_spec()
    gone = DROP if how == "absent" else None
    if struct is RuntimeRestartCheckpoint:
        if name == "payload_json":
            spec.payload = gone
        elif name == "execution_config_json":
            spec.config = gone
        else:
            spec.checkpoint[name] = gone
    elif struct is ExecutionConfig:
        spec.config[name] = gone
    else:
        spec.checkpoint["mode"] = PAYLOAD_MODES[struct]
        spec.payload = {**msgspec.to_builtins(FULL_PAYLOADS[struct]), name: gone}
    verdict = verdict_of(spec)
    assert verdict.failed == "partial_recovery_descriptor", verdict.summary
    assert name in verdict.detail and "lacks" in verdict.detail


@pytest.mark.parametrize("kind", list(FULL_PAYLOADS), ids=lambda k: k.__name__)
def test_full_payloads_are_sound(kind: type[msgspec.Struct]) -> None:
    spec = root_spec()
    spec.checkpoint["mode"] = PAYLOAD_MODES[kind]
    spec.payload = msgspec.to_builtins(FULL_PAYLOADS[kind])
    assert verdict_of(spec).failed is None


def test_decode_descriptor_returns_the_three_parts_or_raises_the_assertion() -> None:
    stored = root_spec().descriptor()
    assert stored is not None
    checkpoint, payload, config = decode_descriptor(ROOT, stored)
    assert checkpoint.agent_id == ROOT and checkpoint.recovery_owner_id == ROOT
    assert payload == RuntimeRestartReactionLoopState(turn=2, pending_tool_calls=("c1",))
    assert config == ExecutionConfig(generation=3, model=MODEL, history_len=5)
    with pytest.raises(_Failed) as raised:
        decode_descriptor("someone", stored)
    assert raised.value.reason == "invalid_recovery_descriptor"


# boundaries that are not faults ----------------------------------------------------------------------------------
def test_conversation_exactly_as_long_as_the_checkpoint_says() -> None:
    spec = child_spec()
    spec.facts["conversation_len"] = 5
    assert verdict_of(spec).resumable


def test_checkpoint_from_an_older_generation_is_durable() -> None:
    spec = child_spec()
    spec.config["generation"] = 2  # the owner moved on by a claim since: the checkpoint still stands
    assert verdict_of(spec).resumable


def test_checkpoint_written_once_has_updated_equal_to_created() -> None:
    spec = child_spec()
    spec.checkpoint["updated_at"] = spec.checkpoint["created_at"]  # the first write: restart_state sets both to now
    assert verdict_of(spec).resumable


def test_older_descriptor_version_is_read() -> None:
    spec = child_spec()
    spec.config["descriptor_version"] = DESCRIPTOR_VERSION - 1
    assert verdict_of(spec).resumable


def test_root_run_has_no_inherited_authority_to_lose() -> None:
    spec = root_spec()
    spec.config.update(tools_allowed=["anything"], grant_expires_at_ms=NOW - 1)
    assert verdict_of(spec).resumable


def test_without_a_checkpoint_the_spawn_record_carries_the_grants() -> None:
    spec = child_spec()
    spec.has_descriptor = False
    assert verdict_of(spec).resumable
    FAULTS["spawn_grant_expired"].apply(spec)
    verdict = verdict_of(spec)
    assert verdict.failed == "invalid_inherited_execution_authority"
    assert "expired 7 s ago" in verdict.detail
    spec = child_spec()
    spec.has_descriptor = False
    spec.parent = {**(spec.parent or {}), "tools_allowed": ("grep",)}
    verdict = verdict_of(spec)
    assert verdict.failed == "invalid_inherited_execution_authority"
    assert verdict.detail == "the child holds tools its parent no longer grants: read"


@pytest.mark.parametrize("owner_terminal", [False, True])
@pytest.mark.parametrize("parent_closed", [False, True])
@pytest.mark.parametrize("has_owner", [False, True])
def test_parent_closed_is_either_signal(owner_terminal: bool, parent_closed: bool, has_owner: bool) -> None:
    spec = child_spec()
    assert spec.parent is not None and spec.parent_owner is not None
    spec.parent["closed"] = parent_closed
    if owner_terminal:
        spec.parent_owner["terminal_at"] = "2024-05-01T11:00:00Z"
    if not has_owner:
        spec.parent_owner = None
    verdict = verdict_of(spec)
    if parent_closed or (has_owner and owner_terminal):
        assert verdict.failed == "invalid_inherited_execution_authority"
        assert verdict.detail == "the parent 'root-1' was closed"
    else:
        assert verdict.resumable, verdict.summary


def test_cron_window_is_inclusive() -> None:
    spec = root_spec()
    spec.facts["scheduled"] = ScheduledWorkContext(
        cron="@hourly", scheduled_for_ms=NOW - 60_000, cron_exec_timeout_ms=60_000
    )
    assert verdict_of(spec).resumable
    spec.facts["scheduled"] = ScheduledWorkContext(
        cron="@hourly", scheduled_for_ms=NOW - 60_001, cron_exec_timeout_ms=60_000
    )
    assert forbidden(verdict_of(spec)).reason == "cron_exec_timeout"


def test_visible_output_is_not_forbidden_once_the_turn_is_in_history() -> None:
    spec = spec_with("visible_output")
    assert forbidden(verdict_of(spec)).reason == "visible_output_started"
    spec.facts["assistant_turns"] = frozenset({0, 1, 2})  # the streamed turn's message made it to the log
    verdict = verdict_of(spec)
    assert verdict.resumable and verdict.disposition == Resumable()
    spec = spec_with("visible_output")
    spec.facts["assistant_turns"] = frozenset({0, 1, 3})  # another turn's message does not count
    assert forbidden(verdict_of(spec)).reason == "visible_output_started"


def test_same_or_unknown_resuming_model_is_no_switch() -> None:
    spec = child_spec()
    spec.facts["resuming_model"] = MODEL
    assert verdict_of(spec).resumable
    spec = spec_with("model_switch")
    spec.has_descriptor = False  # no checkpoint: nothing was written under another model
    spec.facts["conversation_len"] = 0
    assert verdict_of(spec).resumable


def test_same_context_epoch_is_no_reset() -> None:
    spec = child_spec()
    spec.facts["context_epoch"] = 1
    spec.config["context_epoch"] = 1
    assert verdict_of(spec).resumable


def test_replay_disposition_directly() -> None:
    facts = child_spec().build()
    loop = RuntimeRestartReactionLoopState(turn=5, visible_output_started=True)
    config = ExecutionConfig(generation=3, model=MODEL)
    assert replay_disposition(facts, loop, config) == ReplayForbidden(
        reason="visible_output_started",
        detail="turn 6 was already streaming to the user when the run stopped",
    )
    assert replay_disposition(facts, None, None) == Resumable()


# order -----------------------------------------------------------------------------------------------------------
def test_disposition_order_first_reason_wins() -> None:
    names = [n for n, f in FAULTS.items() if f.expect in REPLAY_FORBIDDEN_REASONS and f.composable]
    names.append("cancelled_whole_stream")  # replaces the plain cancel: both set the run's one pending cancel
    names.remove("cancelled")
    remaining = list(DISPOSITION_ORDER)
    remaining.remove("user_cancelled")
    while names:
        spec = child_spec()
        for name in names:
            FAULTS[name].apply(spec)
        reason = forbidden(verdict_of(spec)).reason
        assert reason == remaining[0], (names, reason)
        names = [n for n in names if FAULTS[n].expect != reason]
        remaining.pop(0)
    assert remaining == []


@pytest.mark.parametrize("later", [r for r in CHECKED_ORDER])
@pytest.mark.parametrize("earlier", [r for r in CHECKED_ORDER])
def test_first_failing_assertion_wins(earlier: RecoveryFailureReason, later: RecoveryFailureReason) -> None:
    if CHECKED_ORDER.index(earlier) >= CHECKED_ORDER.index(later):
        return
    for first in [n for n, f in FAULTS.items() if f.expect == earlier and f.composable]:
        for second in [n for n, f in FAULTS.items() if f.expect == later and f.composable]:
            verdict = verdict_of(spec_with(second, first))
            assert verdict.failed == earlier, (first, second, verdict.summary)
            assert verdict.checked == checked_through(earlier)


COMPOSABLE = sorted(name for name, fault in FAULTS.items() if fault.composable and fault.base is child_spec)


@settings(max_examples=150, deadline=None)
@given(st.sets(st.sampled_from(COMPOSABLE)), st.randoms(use_true_random=False))
def test_any_combination_of_faults_fails_on_the_earliest(names: set[str], rnd: random.Random) -> None:
    order = sorted(names)
    rnd.shuffle(order)
    spec = child_spec()
    for name in order:
        FAULTS[name].apply(spec)
    verdict = verdict_of(spec)
    failures = [FAULTS[n].expect for n in names if FAULTS[n].expect in RECOVERY_FAILURE_REASONS]
    forbids = [FAULTS[n].expect for n in names if FAULTS[n].expect in REPLAY_FORBIDDEN_REASONS]
    if failures:
        expected = min(failures, key=CHECKED_ORDER.index)
        assert verdict.failed == expected, (order, verdict.summary)
        assert verdict.checked == checked_through(expected)
        assert verdict.disposition is None
    else:
        assert verdict.failed is None, (order, verdict.summary)
        assert verdict.checked == CHECKED_ORDER
        assert verdict.disposition is not None
        if forbids:
            assert forbidden(verdict).reason == min(forbids, key=DISPOSITION_ORDER.index), order
        else:
            assert verdict.disposition == Resumable()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["checkpoint", "payload", "config"]), st.integers(0, 20), st.text(max_size=12), JSON_VALUES)
def test_any_value_anywhere_is_judged_never_raised(part: str, index: int, new_key: str, value: Any) -> None:
    spec = child_spec()
    target = getattr(spec, part)
    keys = [*target, new_key]
    target[keys[index % len(keys)]] = value
    verdict = verdict_of(spec)  # whatever the descriptor holds: a verdict, never an exception
    assert verdict.failed is None or verdict.failed in CHECKED_ORDER
    assert (verdict.failed is None) == (verdict.disposition is not None)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64) | JSON_VALUES.map(msgspec.json.encode))
def test_any_stored_bytes_are_a_descriptor_failure_or_sound(data: bytes) -> None:
    spec = child_spec()
    spec.raw = data
    verdict = verdict_of(spec)
    assert verdict.failed in ("partial_recovery_descriptor", "invalid_recovery_descriptor"), verdict.summary
