"""The I/O-free core: ledger state machine, replay decisions, patches, blobs, run view, resume plan, note."""

from __future__ import annotations

import msgspec
import pytest

from safepoint.core.blobs import make_blob, open_blob
from safepoint.core.classify import Classification, check_definition, normalize
from safepoint.core.hashing import idempotency_key, input_hash
from safepoint.core.ledger import check_transition, fold, settle_after_crash
from safepoint.core.note import recovery_note
from safepoint.core.replay import decide_replay
from safepoint.core.resume import plan_resume, recent_calls
from safepoint.core.run_view import build_view
from safepoint.errors import CorruptRecordError, LedgerTransitionError, ToolRegistrationError
from safepoint.records import (
    RECORD_KINDS,
    CallDecision,
    Checkpoint,
    CheckpointConflict,
    CompensateExternalAction,
    FilePatchEntry,
    LogProblem,
    LogRead,
    LogRecord,
    Message,
    RecoveryAction,
    RollbackFiles,
    RunInfo,
    ToolDefinition,
    ToolLedgerEntry,
    to_plain,
)


def entry(status="started", idempotency="non_idempotent", policy="never", risk="high", call_id="call_1", step=1):
    return ToolLedgerEntry(
        call_id=call_id,
        step_id=f"step_{step}",
        tool_name="send",
        input_hash="sha256:x",
        status=status,
        risk_level=risk,
        idempotency=idempotency,
        replay_policy=policy,
        input={"to": "a"},
    )


# ledger -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, "planned"),
        ("planned", "started"),
        ("planned", "approved"),
        ("approved", "started"),
        ("started", "succeeded"),
        ("started", "failed"),
        ("started", "uncertain"),
        ("uncertain", "started"),
    ],
)
def test_valid_transitions(before, after):
    check_transition(entry(before) if before else None, entry(after))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (None, "started"),
        ("planned", "succeeded"),
        ("succeeded", "started"),
        ("failed", "succeeded"),
        ("started", "planned"),
        ("succeeded", "uncertain"),
    ],
)
def test_invalid_transitions_are_refused(before, after):
    with pytest.raises(LedgerTransitionError, match="not a valid transition"):
        check_transition(entry(before) if before else None, entry(after))


def test_fold_keeps_the_last_state_and_first_order():
    folded = fold([entry("planned", call_id="a"), entry("planned", call_id="b"), entry("started", call_id="a")])
    assert list(folded) == ["a", "b"]
    assert folded["a"].status == "started"


def test_a_started_call_without_outcome_becomes_uncertain():
    assert settle_after_crash(entry("started")).status == "uncertain"
    assert settle_after_crash(entry("planned")).status == "planned"
    assert settle_after_crash(entry("succeeded")).status == "succeeded"


# replay decisions ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "idempotency", "policy", "risk", "action"),
    [
        ("planned", "non_idempotent", "never", "high", "run"),
        ("succeeded", "non_idempotent", "never", "high", "take_outcome"),
        ("failed", "idempotent", "auto", "low", "take_outcome"),
        ("uncertain", "idempotent", "auto", "low", "rerun"),
        ("uncertain", "conditional", "auto", "low", "rerun"),
        ("uncertain", "conditional", "ask", "medium", "wait_decision"),
        ("uncertain", "non_idempotent", "ask", "medium", "wait_decision"),
        ("uncertain", "non_idempotent", "never", "high", "report_uncertain"),
        ("uncertain", "idempotent", "auto", "high", "wait_decision"),  # high risk: never automatic
        ("uncertain", "non_idempotent", "auto", "low", "wait_decision"),  # forbidden combination: still asks
    ],
)
def test_replay_decision_table(status, idempotency, policy, risk, action):
    assert decide_replay(entry(status, idempotency, policy, risk)).action == action


def test_no_entry_means_never_started():
    assert decide_replay(None).action == "run"


def test_a_person_and_a_probe_settle_uncertain_calls():
    uncertain = entry("uncertain", "non_idempotent", "ask", "medium")
    replay = CallDecision(call_id="call_1", decision="replay", at="t")
    skip = CallDecision(call_id="call_1", decision="skip", at="t")
    assert decide_replay(uncertain, decision=replay).action == "rerun"
    assert decide_replay(uncertain, decision=skip).action == "skip"
    conditional = entry("uncertain", "conditional", "ask", "medium")
    assert decide_replay(conditional, probe="done").action == "take_outcome"
    assert decide_replay(conditional, probe="not_done").action == "rerun"
    assert decide_replay(conditional, probe="unknown").action == "wait_decision"


def test_replayable_is_the_calls_own_property():
    assert decide_replay(entry("succeeded", "idempotent", "auto", "low")).replayable is True
    assert decide_replay(entry("succeeded", "non_idempotent", "never", "high")).replayable is False


# classification -----------------------------------------------------------------------------------------------
def test_non_idempotent_auto_is_refused_at_registration():
    with pytest.raises(ToolRegistrationError, match="non_idempotent with replay_policy 'auto'"):
        check_definition(ToolDefinition(name="pay", idempotency="non_idempotent", replay_policy="auto"))


def test_normalize_never_lets_a_classifier_produce_auto_for_unsafe_calls():
    found = normalize(Classification(idempotency="non_idempotent", replay_policy="auto", risk_level="low"))
    assert found.replay_policy == "ask"
    found = normalize(Classification(idempotency="idempotent", replay_policy="auto", risk_level="high"))
    assert found.replay_policy == "ask"
    safe = Classification(idempotency="idempotent", replay_policy="auto", risk_level="low")
    assert normalize(safe) is safe


# hashing ------------------------------------------------------------------------------------------------------
def test_input_hash_ignores_key_order_and_keys_are_stable():
    assert input_hash({"a": 1, "b": [1, 2]}) == input_hash({"b": [1, 2], "a": 1})
    assert input_hash({"a": 1}) != input_hash({"a": 2})
    assert idempotency_key("r", "c1") == idempotency_key("r", "c1") != idempotency_key("r", "c2")


# patches and blobs --------------------------------------------------------------------------------------------
def test_blobs_roundtrip_and_detect_damage():
    data = b"hello " * 200
    blob = make_blob(data)
    assert blob.codec == "zstd" and len(blob.data) < len(data)
    assert open_blob(blob) == data
    damaged = msgspec.structs.replace(blob, hash="sha256:" + "0" * 64)
    with pytest.raises(CorruptRecordError):
        open_blob(damaged)


# records ------------------------------------------------------------------------------------------------------
def test_recovery_actions_use_the_seeds_type_names():
    actions = [RollbackFiles(checkpoint_id="ckpt_1"), CompensateExternalAction(ledger_entry_id="call_3")]
    encoded = msgspec.json.encode(actions)
    assert b'"type":"rollback_files"' in encoded and b'"type":"compensate_external_action"' in encoded
    assert msgspec.json.decode(encoded, type=list[RecoveryAction]) == actions


def test_conflict_defaults_to_pending_and_keeps_seed_field_names():
    conflict = CheckpointConflict(path="a", expected_hash="x", actual_hash="y", agent_patch_ref="blob:z")
    assert to_plain(conflict) == {
        "path": "a",
        "expected_hash": "x",
        "actual_hash": "y",
        "agent_patch_ref": "blob:z",
        "resolution": "pending",
    }


# run view and resume plan -------------------------------------------------------------------------------------
INFO = RunInfo(run_id="r", task="t", model="m", created_at="t", workspace="/w")


def log(*bodies, skip=()):
    records = []
    for seq, body in enumerate(bodies, 1):
        if seq in skip:
            continue
        records.append(LogRecord(kind=RECORD_KINDS[type(body)], body=msgspec.Raw(msgspec.json.encode(body)), seq=seq))
    problems = [LogProblem(kind="corrupt", position=0, detail="x")] if skip else []
    return LogRead(records=records, problems=problems)


def message(seq, role="user"):
    return Message(seq=seq, role=role, content=f"m{seq}")


def checkpoint(number, history_len, kind="after_step", step=1):
    return Checkpoint(
        checkpoint_id=f"ckpt_{number}",
        run_id="r",
        step=step,
        kind=kind,
        created_at="t",
        history_len=history_len,
        ledger_seq=0,
        model="m",
    )


def test_latest_complete_checkpoint_skips_ones_after_damage():
    read = log(message(0), checkpoint(1, 1), message(1), checkpoint(2, 2), message(2), checkpoint(3, 3), skip={5})
    view = build_view(INFO, read)
    at = view.latest_complete_checkpoint()
    assert at is not None and at.checkpoint.checkpoint_id == "ckpt_2"
    assert not view.checkpoints[-1].complete


def test_history_is_referenced_not_copied_and_rewinds_start_a_branch():
    from safepoint.records import Rewind

    read = log(
        message(0),
        message(1),
        checkpoint(1, 2),
        Rewind(history_len=1, checkpoint_id="", reason="", at="t"),
        Message(seq=1, role="assistant", content="branch"),
    )
    view = build_view(INFO, read)
    assert [m.content for m in view.history] == ["m0", "branch"]
    assert [m.content for m in view.checkpoints[0].history] == ["m0", "m1"]


def test_plan_reports_drift_and_needs_decision():
    patch = FilePatchEntry(
        path="a.py",
        before_hash="",
        after_hash="sha256:a",
        patch_ref="blob:p",
        tool_call_id="call_1",
        created_at="t",
        op="create",
    )
    read = log(
        message(0),
        checkpoint(1, 1),
        entry("planned", "conditional", "auto", "low", call_id="call_1"),
        entry("started", "conditional", "auto", "low", call_id="call_1"),
        patch,
        entry("succeeded", "conditional", "auto", "low", call_id="call_1"),
        entry("planned", "non_idempotent", "ask", "medium", call_id="call_2", step=2),
        entry("started", "non_idempotent", "ask", "medium", call_id="call_2", step=2),
        checkpoint(2, 1, kind="tool_start", step=2),
    )
    view = build_view(INFO, read)
    plan = plan_resume(view, workspace_hashes={"a.py": "sha256:user-edit"})
    assert [d.path for d in plan.drift] == ["a.py"]
    assert [r.entry.call_id for r in plan.needs_decision] == ["call_2"]
    assert plan.resume_from is not None and plan.resume_from.checkpoint.checkpoint_id == "ckpt_2"


def test_recovery_note_is_specific():
    read = log(
        message(0),
        entry("planned", "non_idempotent", "ask", "medium", call_id="call_13", step=8),
        entry("started", "non_idempotent", "ask", "medium", call_id="call_13", step=8),
        entry("succeeded", "non_idempotent", "ask", "medium", call_id="call_13", step=8),
        checkpoint(4, 1, step=8),
        entry("planned", call_id="call_15", step=9),
        entry("started", call_id="call_15", step=9),
        checkpoint(5, 1, kind="tool_start", step=9),
    )
    plan = plan_resume(build_view(INFO, read))
    note = recovery_note(plan, recent_calls(plan), {"call_13": "3 tests failed"})
    assert "Checkpoint: ckpt_5" in note
    assert "Last completed step: step_8." in note
    assert "send(call_13)" in note and "3 tests failed" in note
    assert "Do not repeat send(call_13), send(call_15)." in note
    assert "uncertain" in note


def test_a_resume_that_routed_around_damage_makes_later_checkpoints_sound_again():
    from safepoint.records import Rewind

    read = log(
        message(0),
        checkpoint(1, 1),
        message(1),
        checkpoint(2, 2),
        Rewind(history_len=1, checkpoint_id="ckpt_1", reason="resume", at="t"),
        message(1),
        checkpoint(3, 2),
        skip={3},
    )
    view = build_view(INFO, read)
    assert [c.complete for c in view.checkpoints] == [True, False, True]
    assert view.latest_complete_checkpoint().checkpoint.checkpoint_id == "ckpt_3"


def test_a_probe_that_cannot_tell_asks_a_person_even_for_an_auto_call():
    conditional = entry("uncertain", "conditional", "auto", "low")
    assert decide_replay(conditional, probe="unknown").action == "wait_decision"
    assert decide_replay(conditional).action == "rerun"  # no probe: the tool checks its condition itself


@pytest.mark.parametrize(
    ("field", "value"), [("replay_policy", "safe"), ("idempotency", "mostly"), ("risk_level", "extreme")]
)
def test_a_tool_declared_with_a_value_the_ledger_does_not_know_is_refused_at_registration(field, value):
    import safepoint
    from safepoint.errors import ToolRegistrationError

    declared = {"idempotency": "idempotent", "replay_policy": "auto", "risk_level": "low", field: value}
    with pytest.raises(ToolRegistrationError, match=f"{field} '{value}' is not one of"):

        @safepoint.tool(**declared)
        def lookup(ctx, key: str) -> str:
            return key
