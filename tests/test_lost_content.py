"""Content the records name and the store no longer holds intact (a blob gc freed, fsck quarantined, someone
removed, or one that fails to unseal in an encrypted store) never stops a resume silently or wrongly: the model
sees a note where the history held it (naming what and why), a call whose arguments are lost is never run from
that note (its ledger copy, proven by its input hash, or its recorded outcome, or a person's decision), and the
recovery note names what was lost. Rollback plans around a lost file version (``test_left_quarantine``)."""

from __future__ import annotations

import json
import os
import random

import pytest

import safepoint
from safepoint.core.hashing import input_hash
from safepoint.engine import large_values
from safepoint.engine.content import LOST_NOTE
from safepoint.errors import DecisionNeeded, ResumeError
from safepoint.report import load_view
from safepoint.standins.scenario import parse_scenario


class Crash(BaseException):
    """The process dies (while the model thinks, or while a tool runs)."""


KEY = bytes(range(32))
BIG = "".join(f"line {i} {random.Random(i).getrandbits(64):x}\n" for i in range(1000))  # ~26 KB: a store blob
RAN: list[str] = []
DIE: list[bool] = []  # set: the process dies while ``send`` runs (`started` durable, no outcome)


@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def long_report(ctx, seed: int) -> str:
    RAN.append(f"report {seed}")
    return BIG + str(seed)


@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="low")
def send(ctx, text: str) -> str:
    return _send(text)


@safepoint.tool(idempotency="non_idempotent", replay_policy="ask", risk_level="low", needs_approval=True)
def send_approved(ctx, text: str) -> str:
    return _send(text)


def _send(text: str) -> str:
    if DIE:
        raise Crash()
    RAN.append(f"send {len(text)}")
    return "sent"


class Scripted(safepoint.ScriptedProvider):
    def __init__(self, script, crash_at: int | None = None) -> None:
        super().__init__(script)
        self.crash_at = crash_at

    def complete(self, context, turn, stream=None):
        if turn == self.crash_at:
            self.crash_at = None
            raise Crash()
        return super().complete(context, turn, stream)


def script(*turns: dict[str, object]):
    return parse_scenario(json.dumps({"task": "t", "turns": [*turns, {"text": "done"}]}).encode())


@pytest.fixture(params=["file", "sealed"])
def tm(request, tmp_path, workspace):
    key = KEY if request.param == "sealed" else None
    opened = safepoint.open(str(tmp_path / "store"), workspace=str(workspace), key=key)
    RAN.clear()
    yield opened
    opened.close()


def blob_file(tm, digest: str) -> str:
    store = getattr(tm.store, "inner", tm.store)  # an encrypted store's files are its backend's
    return store._blob_path(tm.store.blob_name(digest))


def lose(tm, digest: str, how: str) -> None:
    """The blob gone (fsck's quarantine) or its bytes damaged (which, sealed, is a blob failing to unseal)."""
    if how == "quarantined":
        assert tm.store.quarantine_blob(tm.store.blob_name(digest))
        return
    path = blob_file(tm, digest)
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 0x55
    os.chmod(path, 0o600)
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def recovery_note(provider) -> str:
    system = provider.contexts[0].system
    assert "## Recovery note" in system
    return system


@pytest.mark.parametrize("how", ["quarantined", "damaged"])
def test_a_lost_tool_result_reads_as_a_note_the_call_is_not_run_again_and_the_note_names_it(tm, how):
    played = script({"tool_calls": [{"tool": "long_report", "args": {"seed": 1}}]}, {"text": "thinking"})
    run = tm.start(played.task, run_id="r", model=played.model, tools=[long_report])
    with pytest.raises(Crash), run:
        tm.run_agent(run, Scripted(played, crash_at=1))
    view = load_view(tm.store, "r")
    [told] = [m for m in view.message_records.values() if m.role == "tool"]
    assert told.content_ref is not None  # the result left the log: a store blob
    lose(tm, told.content_ref.removeprefix("blob:"), how)
    # `safepoint history` shows what a resume restores: the note, not a failure
    [shown] = [row.message.content for row in tm.restored_history("r").messages if row.message.role == "tool"]
    assert shown.startswith(LOST_NOTE)
    provider = Scripted(played)
    with tm.resume("r", tools=[long_report]) as run:
        assert tm.run_agent(run, provider) == "completed"
    assert RAN == ["report 1"]  # never run again for what was lost
    [seen] = [m.content for m in provider.contexts[0].messages if m.role == "tool"]
    assert seen.startswith(LOST_NOTE) and f"the result of long_report({told.tool_call_id})" in seen
    assert "blob:" not in seen and "$large" not in seen  # never the raw reference
    why = "fails authentication" if tm.store.sealed and how == "damaged" else ""
    assert why in seen
    note = recovery_note(provider)
    assert f"the store no longer has content those records kept: the result of long_report({told.tool_call_id})" in (
        note
    )
    assert "The run's log was damaged" not in note  # the log is whole: what is gone is a blob
    # fsck says the same of it
    [problem] = [p.problem for p in tm.fsck("r").problems]
    assert f"it held the result of long_report({told.tool_call_id})" in problem, problem


def crashed_with_large_arguments(tm, tool: str, crash_at: int):
    """A run whose model asked ``tool`` with a large argument; it dies while the model thinks (``crash_at``)."""
    played = script({"tool_calls": [{"tool": tool, "args": {"text": BIG}}]}, {"text": "thinking"})
    run = tm.start(played.task, run_id="r", model=played.model, tools=[send])
    with pytest.raises(Crash), run:
        tm.run_agent(run, Scripted(played, crash_at=crash_at))
    return played


def history_argument(tm) -> str:
    view = load_view(tm.store, "r")
    [asked] = [m for m in view.message_records.values() if m.tool_calls]
    [reference] = [v for v in asked.tool_calls[0].args.values() if isinstance(v, dict)]
    return str(reference["$large"]).removeprefix("blob:")


def test_a_settled_call_whose_arguments_are_lost_still_stands_and_is_not_run_again(tm):
    played = crashed_with_large_arguments(tm, "send", crash_at=1)
    digest = history_argument(tm)  # the ledger input shares it (the same text, the same blob)
    lose(tm, digest, "quarantined")
    provider = Scripted(played)
    with tm.resume("r", tools=[send]) as run:
        assert tm.run_agent(run, provider) == "completed"
    assert [f"send {len(BIG)}"] == RAN  # once, before the crash
    sent = provider.contexts[0].messages
    [args] = [c.args for m in sent for c in m.tool_calls]
    assert args["text"].startswith(LOST_NOTE) and "the arguments of send(" in args["text"]
    assert [m.content for m in sent if m.role == "tool"] == ["sent"]  # its recorded outcome stands
    assert "the arguments of send(" in recovery_note(provider)


def test_an_interrupted_call_whose_arguments_are_lost_everywhere_waits_and_is_refused_a_replay_in_one_line(tm):
    played = script({"tool_calls": [{"tool": "send", "args": {"text": BIG}}]}, {"text": "thinking"})
    run = tm.start(played.task, run_id="r", model=played.model, tools=[send])
    DIE.append(True)
    try:
        with pytest.raises(Crash), run:
            tm.run_agent(run, Scripted(played))
    finally:
        DIE.clear()
    lose(tm, history_argument(tm), "quarantined")  # the ledger's copy is the same blob: both lost
    entry = load_view(tm.store, "r").ledger
    [call_id] = list(entry)
    with (
        pytest.raises(DecisionNeeded, match=rf"waits for a decision on send\({call_id}\)"),
        tm.resume("r", tools=[send]) as run,
    ):
        tm.run_agent(run, Scripted(played))
    with pytest.raises(ResumeError) as refused, tm.resume("r", tools=[send], replay=(call_id,)) as run:
        tm.run_agent(run, Scripted(played))
    said = str(refused.value)
    assert f"send({call_id}) cannot run again" in said and f"--skip {call_id}" in said and "\n" not in said
    assert RAN == []  # never run with the note as its text
    provider = Scripted(played)
    with tm.resume("r", tools=[send], skip=(call_id,)) as run:
        assert tm.run_agent(run, provider) == "completed"
    assert RAN == []
    assert load_view(tm.store, "r").ledger[call_id].status == "uncertain"


def test_the_ledger_copy_of_lost_history_arguments_is_used_only_when_its_hash_proves_it(monkeypatch):
    from safepoint.records import ToolCall, ToolLedgerEntry

    args = {"text": BIG}
    call = ToolCall(call_id="c1", tool="send", args={"text": LOST_NOTE + " ..."})
    entry = ToolLedgerEntry(
        call_id="c1",
        step_id="step_1",
        tool_name="send",
        input_hash=input_hash(args),
        status="started",
        risk_level="low",
        idempotency="non_idempotent",
        replay_policy="never",
        run_id="r",
        input={},
        planned_at="2026-01-01T00:00:00+00:00",
    )

    def reads(value):  # the ledger copy as read back (files and content are not needed then)
        monkeypatch.setattr(large_values, "expand_input", lambda entry, files, content: dict(value))

    reads(args)
    assert large_values.recovered_call(call, entry, None, None).args == args
    assert large_values.recovered_call(call, None, None, None) is None
    reads({"text": BIG + "x"})
    assert large_values.recovered_call(call, entry, None, None) is None  # a near miss


def test_only_arguments_read_back_with_the_note_are_taken_for_lost():
    """The same call id asked again with whole arguments (a model re-asking after a rewind) runs as given."""
    from safepoint.engine.content import Content
    from safepoint.records import ToolCall

    content = Content("r", {}, {}, lambda body: 0)
    reference = {"$large": "blob:sha256:" + "1" * 64, "size": 5000}
    said = large_values.resolve_call(ToolCall(call_id="c1", tool="send", args={"text": reference}), content)
    assert said.args["text"].startswith(LOST_NOTE) and "the arguments of send(c1) in the history" in said.args["text"]
    assert large_values.read_as_note(said, content)
    assert not large_values.read_as_note(ToolCall(call_id="c1", tool="send", args={"text": BIG}), content)


def test_rollback_past_a_lost_file_version_says_which_file_it_cannot_restore_and_writes_no_wrong_file(tm, workspace):
    (workspace / "a.txt").write_text(BIG)  # the user's file: its version before the agent's write is a store blob
    with tm.start("t", run_id="r") as run:
        run.step()
        run.call("write_file", {"path": "a.txt", "content": "agent a\n"}, call_id="w1")
        run.call("write_file", {"path": "b.txt", "content": "agent b\n"}, call_id="w2")
        run.checkpoint()
        run.finish("completed")
    view = load_view(tm.store, "r")
    [before] = [p.before_ref for p in view.patches if p.path == "a.txt"]
    assert before is not None and view.blobs[before.removeprefix("blob:")].stored
    lose(tm, before.removeprefix("blob:"), "damaged")
    first = tm.checkpoints("r")[0].checkpoint_id
    plan = tm.rollback_files("r", first)
    assert [a.path for a in plan.actions] == ["b.txt"] and not (workspace / "b.txt").exists()
    [spared] = plan.unrestorable
    assert spared.path == "a.txt" and "the store no longer has it" in spared.why
    assert (workspace / "a.txt").read_text() == "agent a\n"  # left as it is, never a wrong content


def test_on_postgres_a_quarantined_result_reads_as_a_note_and_fsck_names_it(fresh_url, workspace):
    tm = safepoint.open(fresh_url, workspace=str(workspace))
    try:
        RAN.clear()
        played = script({"tool_calls": [{"tool": "long_report", "args": {"seed": 2}}]}, {"text": "thinking"})
        run = tm.start(played.task, run_id="r", model=played.model, tools=[long_report])
        with pytest.raises(Crash), run:
            tm.run_agent(run, Scripted(played, crash_at=1))
        [told] = [m for m in load_view(tm.store, "r").message_records.values() if m.role == "tool"]
        assert told.content_ref is not None
        lose(tm, told.content_ref.removeprefix("blob:"), "quarantined")
        [problem] = [p.problem for p in tm.fsck("r").problems]
        assert "it held the result of long_report(call_1)" in problem, problem
        provider = Scripted(played)
        with tm.resume("r", tools=[long_report]) as run:
            assert tm.run_agent(run, provider) == "completed"
        assert RAN == ["report 2"]
        [seen] = [m.content for m in provider.contexts[0].messages if m.role == "tool"]
        assert seen.startswith(LOST_NOTE) and "the result of long_report(call_1)" in seen
        assert "the result of long_report(call_1)" in recovery_note(provider)
    finally:
        tm.close()


def test_a_planned_call_whose_arguments_are_lost_never_runs_and_the_model_is_told(tm, monkeypatch):
    from safepoint.engine import failpoints

    played = script({"tool_calls": [{"tool": "send_approved", "args": {"text": BIG}}]}, {"text": "thinking"})
    run = tm.start(played.task, run_id="r", model=played.model, tools=[send_approved])

    def hit(point: str, tool: str | None = None) -> None:
        if point == "approval_wait":
            raise Crash()  # planned, waiting for a person (its checkpoint durable), never started

    with monkeypatch.context() as patched:
        patched.setattr(failpoints, "hit", hit)
        with pytest.raises(Crash), run:
            tm.run_agent(run, Scripted(played))
    assert {c: e.status for c, e in load_view(tm.store, "r").ledger.items()} == {"call_1": "planned"}
    lose(tm, history_argument(tm), "quarantined")  # the ledger's copy is the same blob
    provider = Scripted(played)
    with tm.resume("r", tools=[send_approved]) as run:
        assert tm.run_agent(run, provider) == "completed"
    assert RAN == []
    entry = load_view(tm.store, "r").ledger["call_1"]
    assert entry.status == "failed" and "the arguments of send_approved(call_1) in the history" in (entry.error or "")
    [told] = [m.content for m in provider.contexts[-1].messages if m.role == "tool"]
    assert told.startswith("error: ") and "It did not run" in told
