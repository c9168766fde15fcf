"""Redaction by structure: the fields rollback, restore, capture and conflicts rely on stay exact whatever a pattern
says (``records.FIELD_REDACTION``, ``Redactor.record``), the others are redacted, and every field of every record
is one or the other by decision. End to end: a file named like a pattern (or like a token) is rolled back, and a
pattern that matches everything leaves a run that still loads, resumes and rolls back."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

import safepoint
from safepoint.core.redact import Redactor
from safepoint.engine.log_writer import run_redactor
from safepoint.protocol import (
    Approval,
    ControlRecord,
    ExecutionConfig,
    RecoveryReport,
    ReplayForbidden,
    RestartPayload,
)
from safepoint.records import (
    FIELD_REDACTION,
    RECORD_TYPES,
    CheckpointConflict,
    FileBeforeState,
    FilePatchEntry,
    Message,
    RunInfo,
    ToolCall,
    ToolLedgerEntry,
    WorkspaceState,
)

EVERYTHING = Redactor(patterns=[r"[\s\S]+"])  # a pattern that matches every string there is
HASH = "sha256:" + "ab" * 32
ROOTS: list[Any] = [
    *RECORD_TYPES.values(),
    RunInfo,
    *typing.get_args(ControlRecord),
    *typing.get_args(RestartPayload),
    ExecutionConfig,
]


def _structs(roots: list[Any]) -> set[type[msgspec.Struct]]:
    """Every record type reachable from ``roots`` through their fields (tuples, unions, optionals, dicts)."""
    found: set[type[msgspec.Struct]] = set()
    stack = [msgspec.inspect.type_info(root) for root in roots]
    while stack:
        info = stack.pop()
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in found:
                continue
            found.add(info.cls)
            stack.extend(field.type for field in info.fields)
        elif isinstance(info, msgspec.inspect.UnionType):
            stack.extend(info.types)
        elif isinstance(info, msgspec.inspect.CollectionType):
            stack.append(info.item_type)
        elif isinstance(info, msgspec.inspect.DictType):
            stack.extend((info.key_type, info.value_type))
    return found


STRUCTS = sorted(_structs(ROOTS), key=lambda cls: cls.__name__)


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda cls: cls.__name__)
def test_every_field_of_every_record_is_exact_or_redacted_by_decision(cls):
    rule = FIELD_REDACTION.get(cls)
    assert rule is not None, f"{cls.__name__} has no redaction rule: add it to records.FIELD_REDACTION"
    fields = set(cls.__struct_fields__)
    listed = [*rule.exact, *rule.redacted, *rule.journal]
    assert len(listed) == len(set(listed)), f"{cls.__name__}: a field is listed twice"
    assert set(listed) == fields, (
        f"{cls.__name__}: fields not decided {sorted(fields - set(listed))}, unknown {sorted(set(listed) - fields)}"
    )


def test_the_rules_name_no_type_the_records_do_not_hold():
    assert set(FIELD_REDACTION) == set(STRUCTS)


def _round_trip(record: msgspec.Struct, redactor: Redactor = EVERYTHING) -> Any:
    data = msgspec.json.encode(redactor.record(record))
    return msgspec.json.decode(data, type=type(record))


def test_a_file_patch_its_before_state_and_a_conflict_stay_exact_under_any_pattern():
    records = [
        FilePatchEntry(
            path="notes/TICKET-123456.md", before_hash=HASH, after_hash=HASH, patch_ref="blob:" + HASH,
            tool_call_id="call_sk_live_1", created_at="2026-01-01T00:00:00+00:00", op="modify", before_ref="git:abc",
            before_mode=0o644, after_mode=0o600, author_uncertain=True,
        ),
        FileBeforeState(tool_call_id="c1", path="sk_live_" + "a" * 24 + ".txt", before_hash=HASH, before_ref="x"),
        CheckpointConflict(path="a b/ü.txt", expected_hash=HASH, actual_hash="", agent_patch_ref="blob:" + HASH),
        WorkspaceState(at="t", is_repo=True, head="f" * 40, branch="feature/TICKET-1", dirty=("x.py",)),
    ]  # fmt: skip
    for record in records:
        assert _round_trip(record) == record


def test_what_the_model_and_people_wrote_is_redacted_and_statuses_still_decode():
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    message = Message(
        seq=3,
        role="assistant",
        content=f"using {secret}",
        tool_calls=(ToolCall(call_id="call_1", tool="write_file", args={"path": "TICKET-123456.md", "c": secret}),),
    )
    out = _round_trip(message, Redactor(patterns=["TICKET-[0-9]{6}"]))
    assert secret not in msgspec.json.encode(out).decode()
    assert out.role == "assistant" and out.seq == 3
    assert out.tool_calls[0].call_id == "call_1" and out.tool_calls[0].tool == "write_file"
    # the arguments show the path to the model: redacted where they match
    assert out.tool_calls[0].args["path"] == "[REDACTED:user_0].md"
    # statuses, decisions and the vocabulary stay exact even under a pattern that matches everything
    entry = ToolLedgerEntry(
        call_id="c1", step_id="step_1", tool_name="run_command", input_hash=HASH, status="uncertain",
        risk_level="high", idempotency="non_idempotent", replay_policy="ask", input={"command": f"echo {secret}"},
        error=f"failed with {secret}", decision="report_uncertain", decision_reason=secret, result_ref="log:4",
    )  # fmt: skip
    out = _round_trip(entry)
    assert (out.status, out.decision, out.result_ref) == ("uncertain", "report_uncertain", "log:4")
    assert out.input_hash == HASH
    assert out.input == {"[REDACTED:user_0]": "[REDACTED:user_0]"} and out.error == "[REDACTED:user_0]"
    report = RecoveryReport(
        at="t", generation=2, assertions=("a",), disposition=ReplayForbidden(reason="cron_exec_timeout", detail=secret)
    )
    out = _round_trip(report)
    assert isinstance(out.disposition, ReplayForbidden) and out.disposition.reason == "cron_exec_timeout"
    assert out.disposition.detail == "[REDACTED:user_0]"
    approval = Approval(call_id="c2", input_hash=HASH, approved=True, at="t", reason=f"ok {secret}")
    out = _round_trip(approval)
    assert (out.call_id, out.input_hash) == ("c2", HASH) and secret not in out.reason


def test_safepoints_own_journal_stays_exact_a_models_call_of_the_same_name_does_not():
    journal = {"checkpoint_id": "ck_1", "actions": [{"path": "TICKET-123456.md", "target_hash": HASH}], "since": 0}
    own = ToolLedgerEntry(
        call_id="safepoint:rollback:1", step_id="s", tool_name="rollback_files", input_hash=HASH, status="started",
        risk_level="low", idempotency="conditional", replay_policy="auto", input=journal,
    )  # fmt: skip
    redactor = Redactor(patterns=["TICKET-[0-9]{6}"])
    assert _round_trip(own, redactor).input == journal
    models = msgspec.structs.replace(own, call_id="_safepoint:rollback:1")  # a model's id, escaped
    assert _round_trip(models, redactor).input["actions"][0]["path"] == "[REDACTED:user_0].md"
    # a compacted content argument: its refs stay, the rest of the arguments are redacted
    compacted = {"path": "TICKET-123456.md", "content": {"$patch": "blob:" + HASH, "base": HASH}}
    entry = msgspec.structs.replace(own, call_id="c9", tool_name="write_file", input=compacted)
    out = _round_trip(entry, redactor).input
    assert out == {"path": "[REDACTED:user_0].md", "content": {"$patch": "blob:" + HASH, "base": HASH}}
    # ...but only when they are refs: a secret in the same shape is redacted
    forged = {"$patch": "sk_live_" + "a" * 24, "base": HASH}
    out = _round_trip(msgspec.structs.replace(entry, input={"content": forged}), Redactor())
    assert "sk_live_" not in msgspec.json.encode(out).decode()


def test_the_run_header_keeps_its_workspace_and_ids_exact(tmp_path):
    info = RunInfo(
        run_id="r-TICKET-123456", task="fix TICKET-123456", model="m", created_at="t",
        workspace=str(tmp_path / "TICKET-123456"), provider={"kind": "openai", "base_url": "https://u:pw123456@h/v1"},
    )  # fmt: skip
    out = _round_trip(info, Redactor(patterns=["TICKET-[0-9]{6}"]))
    assert out.run_id == info.run_id and out.workspace == info.workspace
    assert out.task == "fix [REDACTED:user_0]"
    assert out.provider is not None and "pw123456" not in str(out.provider["base_url"])


def test_a_record_without_rules_is_redacted_whole():
    class Unknown(msgspec.Struct):
        path: str

    assert EVERYTHING.record(Unknown(path="a.txt")) == {"[REDACTED:user_0]": "[REDACTED:user_0]"}  # keys too


# end to end ------------------------------------------------------------------------------------------------------
def _redact_toml(workspace, *patterns: str) -> None:
    (workspace / ".safepoint").mkdir(exist_ok=True)
    listed = ", ".join(f"'{p}'" for p in patterns)
    (workspace / ".safepoint" / "redact.toml").write_text(f"patterns = [{listed}]\n")


def test_files_named_like_tokens_are_rolled_back(workspace):
    """A hostile agent names its files like secrets (they were recorded under ``[REDACTED:...]``, so no rollback
    found them); a command's files too (capture), and a deletion."""
    token = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    (workspace / "keep.txt").write_text("the user's\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": f"{token}.txt", "content": "x\n"}, call_id="c1")
        run.call_result("run_command", {"command": f"echo y > ghp_{'a' * 36}.md; rm keep.txt"}, call_id="c2")
    assert (workspace / f"{token}.txt").exists()
    tm.rollback_files("r", start)
    assert sorted(p.name for p in workspace.iterdir() if not p.name.startswith(".")) == ["keep.txt"]
    assert (workspace / "keep.txt").read_text() == "the user's\n"


def test_a_pattern_matching_everything_leaves_a_run_that_resumes_and_rolls_back(workspace):
    """The worst ``.safepoint/redact.toml`` (the agent's or a careless user's): every string redacted. The run
    still loads (statuses and kinds decode), a resume answers a finished call from its record, and rollback finds
    every file, conflicts included."""
    (workspace / "a.txt").write_text("the user's a\n")
    _redact_toml(workspace, r"[\s\S]+")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "agent a\n"}, call_id="c1")
        run.call_result("write_file", {"path": "b/new.txt", "content": "agent b\n"}, call_id="c2")
        run.call_result("run_command", {"command": "echo c > c.txt"}, call_id="c3")
    with tm.resume("r") as run:
        again = run.call_result("write_file", {"path": "a.txt", "content": "agent a\n"}, call_id="c1")
        assert again.status == "succeeded"
    (workspace / "c.txt").write_text("the user changed it\n")
    plan = tm.rollback_files("r", start)
    assert (workspace / "a.txt").read_text() == "the user's a\n"
    assert not (workspace / "b" / "new.txt").exists()
    assert [c.path for c in plan.conflicts] == ["c.txt"]  # the user's edit, kept and named exactly
    assert (workspace / "c.txt").read_text() == "the user changed it\n"
    stored = b"".join(p.read_bytes() for p in (workspace / ".agent-runtime").rglob("*.jsonl"))
    assert b"agent a" not in stored.replace(b'{"kind":"blob"', b"")  # arguments redacted (blobs aside: files)


def test_run_redactor_hunts_the_providers_key_whatever_its_name(tmp_path):
    key = "llmkey-" + "0123456789abcdefXYZ"
    environ = {"LLM": key, "PATH": "/usr/bin"}
    assert run_redactor(None, environ).text(f"x {key}") == f"x {key}"  # not a credential by name or shape
    assert key not in run_redactor(None, environ, withhold=["LLM"]).text(f"x {key}")
