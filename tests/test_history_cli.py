"""``safepoint history RUN [--json] [--limit N]`` (issue 10 §8): the conversation exactly as a resume would restore
it. Pinned against what a resumed run sends its model (captured with the scripted provider): after a crash, after a
damaged record cut the branch, after a restore; redacted as the model reads it; ``--limit`` keeps the latest."""

from __future__ import annotations

import json
import zlib

import msgspec

import safepoint
from safepoint.records import Message
from safepoint.standins.scenario import parse_scenario
from tests.conftest import safepoint_in_process
from tests.store_text import message_body

SECRET = "sk-ant-api03-" + "Qq1Ww2Ee3Rr4Tt5Yy6Uu7" * 2


class Crash(BaseException):
    """The process dies while the model thinks: nothing of the turn is recorded."""


class Scripted(safepoint.ScriptedProvider):
    """The scripted model, dying at turn ``crash_at`` (once)."""

    def __init__(self, script, crash_at: int | None = None) -> None:
        super().__init__(script)
        self.crash_at = crash_at

    def complete(self, context, turn, stream=None):
        if turn == self.crash_at:
            self.crash_at = None
            raise Crash()
        return super().complete(context, turn, stream)


def script(turns: int):
    steps = [
        {
            "text": f"step {index}: the key is {SECRET} " + "and some words " * (index + 3),
            "tool_calls": [{"tool": "list_files", "args": {"path": "."}}],
        }
        for index in range(turns)
    ]
    return parse_scenario(json.dumps({"task": "list, again and again", "turns": [*steps, {"text": "done"}]}).encode())


def crashed(workspace, turns: int = 6, crash_at: int = 4):
    played = script(turns)
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start(played.task, run_id="r", model=played.model)
    try:
        with run:
            tm.run_agent(run, Scripted(played, crash_at))
    except Crash:
        pass
    return tm, played


def shown(workspace, *args: str) -> list[dict]:
    done = safepoint_in_process("history", "r", "-w", workspace, "--json", *args)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout
    return json.loads(done.stdout)


def as_messages(rows: list[dict]) -> list[Message]:
    keep = ("seq", "role", "content", "tool_calls", "tool_call_id", "name", "turn")
    return [
        msgspec.convert({k: v for k, v in row.items() if k in keep and v is not None}, Message)
        for row in rows
        if row.get("region") == "conversation"
    ]


def first_context_of_the_resume(tm, played) -> list[Message]:
    provider = Scripted(played)
    run = tm.resume("r")
    with run:
        assert tm.run_agent(run, provider) == "completed"
    return list(provider.contexts[0].messages)


def test_history_is_what_the_resumed_run_sends_its_model(workspace):
    tm, played = crashed(workspace)
    rows = shown(workspace)
    said = as_messages(rows)
    assert [m.role for m in said][:3] == ["user", "assistant", "tool"]
    assert all("[REDACTED:" in m.content for m in said if m.role == "assistant")  # as the model reads it
    library = tm.restored_history("r")
    assert [item.message for item in library.messages if item.region == "conversation"] == said
    assert first_context_of_the_resume(tm, played) == said
    tm.close()


def test_a_damaged_record_cuts_the_conversation_where_the_resume_restores_it(workspace):
    """A tool's observation damaged on disk: the resume goes back to the checkpoint before it and takes the call's
    outcome from the ledger (saying its output was lost); history shows exactly that, not the branch as it was."""
    tm, played = crashed(workspace)
    log = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    records = [json.loads(line[9:]) for line in lines]
    tool_lines = [
        i
        for i, r in enumerate(records)
        if r["kind"] == "message" and (message_body(r["body"]) or {}).get("role") == "tool"  # a row or an object
    ]
    at = tool_lines[1]  # the second step's observation
    payload = lines[at][9:-1]  # well framed
    lines[at] = b"%08x %s\n" % (zlib.crc32(payload) ^ 1, payload)  # ... and its checksum says so
    log.write_bytes(b"".join(lines))
    rows = shown(workspace)
    said = as_messages(rows)
    taken = [row for row in rows if row.get("source") == "ledger"]
    assert len(taken) == 1 and "lost to damage" in taken[0]["content"]
    assert len(said) == 5  # task, step 1 (call and observation), step 2's call and its outcome from the ledger
    assert first_context_of_the_resume(tm, played) == said
    tm.close()


def test_after_a_restore_history_is_the_restored_branch(workspace):
    tm, played = crashed(workspace)
    points = tm.checkpoints("r")
    target = next(p for p in points if p.step == 2 and p.kind == "after_step")
    tm.restore_session("r", target.checkpoint_id)
    rows = shown(workspace)
    said = as_messages(rows)
    assert len(said) == 5 and said[-1].role == "tool"  # task, then two steps of a call and its observation
    assert first_context_of_the_resume(tm, played) == said
    everything = shown(workspace, "--all")
    assert any(row["branch"] == "abandoned" for row in everything)
    tm.close()


def test_limit_keeps_the_latest_messages_and_says_how_many_there_are(workspace):
    tm, _ = crashed(workspace)
    whole = shown(workspace)
    assert shown(workspace, "--limit", "3") == whole[-3:]
    assert shown(workspace, "--limit", "0") == []
    done = safepoint_in_process("history", "r", "-w", workspace, "--limit", "2")
    assert done.returncode == 0, done.stderr
    assert f"the latest 2 of {len(whole)} messages" in done.stdout
    assert tm.restored_history("r", limit=2).total == len(whole)
    tm.close()


def test_a_pending_call_the_resume_runs_again_is_listed_not_invented(workspace):
    """A call that started and left no outcome: its observation does not exist until the resume runs it again."""

    class Dies(BaseException):
        pass

    calls = []

    def count_lines(ctx: safepoint.ToolContext, path: str) -> str:
        calls.append(path)
        if len(calls) == 2:
            raise Dies()
        return "3 lines"

    tool = safepoint.tool(count_lines, idempotency="idempotent", replay_policy="auto")
    turns = [{"text": f"turn {i}", "tool_calls": [{"tool": "count_lines", "args": {"path": "a"}}]} for i in range(3)]
    played = parse_scenario(json.dumps({"task": "count", "turns": [*turns, {"text": "done"}]}).encode())
    tm = safepoint.open(workspace=str(workspace))
    run = tm.start(played.task, run_id="r", model=played.model, tools=[tool])
    try:
        with run:
            tm.run_agent(run, Scripted(played))
    except Dies:
        pass
    restored = tm.restored_history("r")
    assert [(p.tool, p.action) for p in restored.pending] == [("count_lines", "rerun")]
    rows = shown(workspace)
    assert rows[-1]["pending"] == "rerun" and rows[-1]["content"] is None
    provider = Scripted(played)
    resumed = tm.resume("r", tools=[tool])
    with resumed:
        assert tm.run_agent(resumed, provider) == "completed"
    sent = list(provider.contexts[0].messages)
    said = as_messages(rows)
    assert sent[: len(said)] == said and sent[len(said)].role == "tool" and len(sent) == len(said) + 1
    tm.close()
