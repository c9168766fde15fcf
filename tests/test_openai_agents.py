"""The OpenAI Agents SDK on the store (``safepoint.integrations.openai_agents``), offline with the SDK's own
``ScriptedModel`` (a ``Model`` implementation: no network).

A session is durable, fenced, redacted and sealed on both stores; a run killed inside a tool and resumed never
repeats the effect (the uncertain call waits for a decision); an interrupted run's ``RunState`` survives its process
and its approval counts for the arguments shown, once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, Runner, RunState, function_tool, set_tracing_disabled
from agents.memory.session import Session
from agents.testing import ScriptedModel, assistant_message, function_call

import safepoint
from safepoint.errors import DecisionNeeded, RunLockedError, StaleGenerationError
from safepoint.integrations.openai_agents import SafepointSession, run_id_for
from safepoint.integrations.openai_agents_tools import (
    DurableModel,
    ToolPolicy,
    args_digest,
    durable_model,
    durable_tools,
    run_durably,
)
from tests.store_text import every_store_byte

set_tracing_disabled(True)
HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")
CHILD = "import sys; sys.path[:0] = [{src!r}, {here!r}]; import test_openai_agents as t; t.{call}"
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape: the redactor knows it


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(params=["file", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "file":
        return None
    return str(request.getfixturevalue("fresh_url"))


OPENED: list[safepoint.Safepoint] = []


def opened(tmp_path: Path, url: str | None = None, **options: Any) -> safepoint.Safepoint:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    OPENED.append(safepoint.open(url, workspace=str(ws), **options))
    return OPENED[-1]


def store_bytes(sp: safepoint.Safepoint) -> bytes:
    """Every byte the store keeps (it must hold some: a check of nothing would pass whatever was written)."""
    folder = sp.store.local_dir()
    assert folder is not None
    data = every_store_byte(Path(folder))  # compressed history and blobs expanded: a grep must see what they hide
    assert len(data) > 1000
    return data


# the session -------------------------------------------------------------------------------------------------------
def test_items_are_kept_across_processes_on_both_stores(tmp_path: Path, store_url: str | None) -> None:
    sp = opened(tmp_path, store_url)
    session = SafepointSession.open(sp, "chat-1")
    assert isinstance(session, Session)  # the SDK's protocol
    user = {"role": "user", "content": "hello"}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "1"}
    run(session.add_items([user, call]))
    run(session.add_items([out]))
    run(session.add_items([]))  # nothing: no record
    assert run(session.get_items()) == [user, call, out]
    assert run(session.get_items(2)) == [call, out] and run(session.get_items(0)) == []
    run(session.get_items())[0]["content"] = "changed by the caller"
    assert run(session.get_items(3))[0] == user  # what was kept, not what a caller did to its copy
    assert run(session.pop_item()) == out
    session.close()

    again = SafepointSession.open(sp, "chat-1")
    assert run(again.get_items()) == [user, call]
    run(again.clear_session())
    assert run(again.pop_item()) is None
    run(again.add_items([user]))
    again.close()
    third = SafepointSession.open(sp, "chat-1")
    assert run(third.get_items()) == [user]
    other = SafepointSession.open(sp, "chat-2")
    assert run(other.get_items()) == []  # another session, another run
    other.close()
    third.close()


def test_get_items_reads_nothing_from_the_store_once_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "long")
    for i in range(200):
        run(session.add_items([{"role": "user", "content": f"m{i}"}]))
    reads: list[str] = []
    monkeypatch.setattr(type(sp.store), "read_log", lambda self, run_id: reads.append(run_id))
    tail = ["m197", "m198", "m199"]
    for i in range(50):  # what the SDK does every turn
        assert [i["content"] for i in run(session.get_items(3))] == tail
        run(session.add_items([{"role": "user", "content": f"x{i}"}]))
        tail = [*tail[1:], f"x{i}"]
    assert reads == []  # no whole-session read per turn: the one read was at open
    monkeypatch.undo()
    session.close()
    assert len(run(SafepointSession.open(sp, "long").get_items())) == 250


def test_a_second_writer_is_refused_and_a_displaced_one_cannot_write(tmp_path: Path, store_url: str | None) -> None:
    sp = opened(tmp_path, store_url)
    first = SafepointSession.open(sp, "shared")
    run(first.add_items([{"role": "user", "content": "one"}]))
    with pytest.raises(RunLockedError):
        SafepointSession.open(opened(tmp_path, store_url), "shared")  # another opener: refused, never forked
    second = SafepointSession.open(opened(tmp_path, store_url), "shared", takeover=True)
    with pytest.raises(StaleGenerationError):
        run(first.add_items([{"role": "user", "content": "lost"}]))  # the displaced writer is fenced off
    run(second.add_items([{"role": "user", "content": "two"}]))
    second.close()
    first.close()  # a displaced writer gives up nothing (its release cannot undo the new owner)
    third = SafepointSession.open(sp, "shared")
    assert [i["content"] for i in run(third.get_items())] == ["one", "two"]
    third.close()


def holder(ws: str) -> None:
    """A child process holding the session "shared" until its stdin says so."""
    session = SafepointSession.open(safepoint.open(None, workspace=ws), "shared")
    run(session.add_items([{"role": "user", "content": "from the child"}]))
    print("holding", flush=True)
    sys.stdin.readline()
    run(session.add_items([{"role": "user", "content": "child again"}]))
    session.close()


def test_a_session_held_by_another_process_is_refused_then_continued(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    code = CHILD.format(src=SRC, here=str(HERE), call=f"holder({str(tmp_path / 'ws')!r})")
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "holding\n"
        with pytest.raises(RunLockedError):
            SafepointSession.open(sp, "shared")  # a second writer while the first lives: refused, never forked
        child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0
    session = SafepointSession.open(sp, "shared")
    assert [i["content"] for i in run(session.get_items())] == ["from the child", "child again"]
    session.close()


def test_a_damaged_item_is_never_silently_dropped(tmp_path: Path) -> None:
    from safepoint.errors import DamagedLogError, ExitCode

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "damaged")
    for n in range(3):
        run(session.add_items([{"role": "user", "content": f"item-{n}-marker"}]))
    session.close()
    folder = sp.store.local_dir()
    assert folder is not None
    [log] = [p for p in Path(folder).rglob("*.jsonl") if b"item-1-marker" in p.read_bytes()]
    log.write_bytes(log.read_bytes().replace(b"item-1-marker", b"item-1-markeX"))  # a flipped byte on disk
    with pytest.raises(DamagedLogError, match="may have held its items") as raised:
        SafepointSession.open(sp, "damaged")
    assert raised.value.exit_code == ExitCode.DAMAGED
    session = SafepointSession.open(sp, "damaged", accept_damage=True)  # a person chose to go on
    assert [i["content"] for i in run(session.get_items())] == ["item-0-marker", "item-2-marker"]
    session.close()


HOSTILE = ["../../etc/passwd", "a\x00b", "é" * 300, "Chat", "chat", "oa_s_chat", "x" * 65, " ", "a/b\\c", "\ud800"]


def test_hostile_session_ids_get_runs_of_their_own_inside_the_store(tmp_path: Path) -> None:
    ids = {run_id_for(s) for s in HOSTILE}
    assert len(ids) == len(HOSTILE)  # injective: "Chat" and "chat" never share a folder
    assert run_id_for("chat") == "oa_s_chat"
    with pytest.raises(ValueError):
        run_id_for("")
    sp = opened(tmp_path)
    for n, session_id in enumerate(HOSTILE):
        session = SafepointSession.open(sp, session_id)
        run(session.add_items([{"role": "user", "content": f"item {n}"}]))
        session.close()
    for n, session_id in enumerate(HOSTILE):
        session = SafepointSession.open(sp, session_id)
        assert run(session.get_items()) == [{"role": "user", "content": f"item {n}"}]
        session.close()
    assert not (tmp_path / "etc").exists() and sorted(os.listdir(tmp_path)) == ["ws"]


def test_hostile_items_are_kept_or_refused_in_one_line(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "odd")
    odd = [
        {"role": "user", "content": "caf\u00e9 \u4e2d\u6587 \ud800 \x00 end"},
        {"role": "user", "content": "x" * 300_000},
    ]
    run(session.add_items(odd))
    deep: Any = "bottom"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deep"):
        run(session.add_items([{"role": "user", "content": deep}]))
    session.close()
    assert run(SafepointSession.open(sp, "odd").get_items()) == odd  # nothing of the refused one was kept


def test_items_are_redacted_before_they_are_written(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "secret")
    item = {"role": "user", "content": f"deploy with {TOKEN}"}
    run(session.add_items([item]))
    assert run(session.get_items()) == [item]  # the live process keeps what it was given
    session.close()
    stored = store_bytes(sp)
    assert TOKEN.encode() not in stored and b"deploy with" in stored  # (the text around it is there: the right bytes)
    [kept] = run(SafepointSession.open(sp, "secret").get_items())
    assert TOKEN not in kept["content"] and "[REDACTED" in kept["content"]


def test_items_are_sealed_on_an_encrypted_store(tmp_path: Path) -> None:
    key = "b2" * 32
    sp = opened(tmp_path, key=key)
    session = SafepointSession.open(sp, "sealed")
    run(session.add_items([{"role": "user", "content": "the plaintext marmalade"}]))
    session.close()
    assert b"marmalade" not in store_bytes(sp)
    again = SafepointSession.open(opened(tmp_path, key=key), "sealed")
    assert run(again.get_items()) == [{"role": "user", "content": "the plaintext marmalade"}]
    again.close()


# tools and model turns -----------------------------------------------------------------------------------------------
def append_tool(notes: Path, *, die_on: str | None = None) -> FunctionTool:
    @function_tool
    def append_line(text: str) -> str:
        """Append a line to the notes (not idempotent)."""
        with open(notes, "a") as f:
            f.write(text + "\n")
        if text == die_on:  # the effect is done, its outcome never recorded
            os.kill(os.getpid(), signal.SIGKILL)
        return f"appended {text}"

    return append_line


def script() -> list[Any]:
    return [
        [function_call("append_line", {"text": "a"}, call_id="call_a")],
        [function_call("append_line", {"text": "b"}, call_id="call_b")],
        [assistant_message("done")],
    ]


def agent_for(session: SafepointSession, steps: list[Any], tools: list[FunctionTool], **policies: ToolPolicy) -> Agent:
    model = durable_model(session, ScriptedModel(steps))
    return Agent(name="writer", model=model, tools=durable_tools(session, tools, policies=policies))


def test_calls_are_ledgered_under_the_sdk_call_id(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    session = SafepointSession.open(sp, "ledgered")
    result = run(Runner.run(agent_for(session, script(), [append_tool(notes)]), "write", session=session))
    assert result.final_output == "done" and notes.read_text() == "a\nb\n"
    assert [(e.call_id, e.status) for e in sp.ledger(session.run.run_id)] == [
        ("call_a", "succeeded"),
        ("call_b", "succeeded"),
    ]
    # The same call ids in a new request (providers number calls per response): new calls, each run once under
    # its own ledger id (a replayed turn, the same request answered from the record, keeps the first ids).
    again = run(Runner.run(agent_for(session, script(), [append_tool(notes)]), "write", session=session))
    assert again.final_output == "done" and notes.read_text() == "a\nb\na\nb\n"
    assert [e.call_id for e in sp.ledger(session.run.run_id)] == ["call_a", "call_b", "call_a~1", "call_b~1"]
    session.close()


def child(ws: str, notes: str, where: str) -> None:
    """A child process's run: killed inside the second call (``tool``), or waiting for an approval (``approval``)."""
    sp = safepoint.open(None, workspace=ws)
    session = SafepointSession.open(sp, "crash")
    if where == "tool":
        prompt = f"write, signed {TOKEN}"  # a secret in what the model is asked: kept redacted, the turn still found
        run(Runner.run(agent_for(session, script(), [append_tool(Path(notes), die_on="b")]), prompt, session=session))
    else:
        result = run(run_durably(transfer_agent(session, Path(notes), approval_steps()), "pay", session=session))
        assert [i.raw_item.call_id for i in result.interruptions] == ["t1"] and session.has_state
        os.kill(os.getpid(), signal.SIGKILL)  # dies while the run waits for a person


def spawn(tmp_path: Path, notes: Path, where: str) -> None:
    code = CHILD.format(src=SRC, here=str(HERE), call=f"child({str(tmp_path / 'ws')!r}, {str(notes)!r}, {where!r})")
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def test_a_run_killed_mid_tool_resumes_with_the_effect_once(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    spawn(tmp_path, notes, "tool")
    assert notes.read_text() == "a\nb\n"
    with pytest.raises(
        DecisionNeeded,
        match=r"append_line\(call_b\): open it with replay=\['call_b'\] to run it again or skip=\['call_b'\]",
    ):
        SafepointSession.open(sp, "crash")  # killed inside it: it may have happened, a person decides
    session = SafepointSession.open(sp, "crash", skip=["call_b"])
    # The same run goes on from the session: the model is asked what it was asked when the process died, and the
    # recorded response (call_b) comes back instead of a paid, new turn with new ids; only "done" is asked for.
    agent = agent_for(session, [[assistant_message("done")]], [append_tool(notes)])
    result = run(Runner.run(agent, [], session=session))
    assert result.final_output == "done"
    assert notes.read_text() == "a\nb\n"  # never twice
    model = agent.model
    assert isinstance(model, DurableModel) and (model.replayed, model.paid) == (1, 1)
    ledger = {e.call_id: e for e in sp.ledger(session.run.run_id)}
    assert ledger["call_a"].status == "succeeded" and ledger["call_b"].decision == "skip"
    outputs = [i for i in run(session.get_items()) if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_a", "call_b"] and "appended" not in outputs[1]["output"]
    session.close()


def test_a_replay_decision_runs_the_uncertain_call_again_once(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    spawn(tmp_path, notes, "tool")
    session = SafepointSession.open(sp, "crash", replay=["call_b"])  # a person says: run it again
    agent = agent_for(session, [[assistant_message("done")]], [append_tool(notes)])
    assert run(Runner.run(agent, [], session=session)).final_output == "done"
    assert notes.read_text() == "a\nb\nb\n"  # again, as decided, and only once more
    assert {e.call_id: e.status for e in sp.ledger(session.run.run_id)}["call_b"] == "succeeded"
    session.close()
    SafepointSession.open(sp, "crash").close()  # settled: no decision waits any more, nothing runs on opening
    assert notes.read_text() == "a\nb\nb\n"


def test_parallel_calls_of_one_turn_are_ledgered_each_under_its_id(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    session = SafepointSession.open(sp, "parallel")
    steps = [
        [function_call("append_line", {"text": t}, call_id=f"p_{t}") for t in "xyz"],
        [assistant_message("done")],
    ]
    assert (
        run(Runner.run(agent_for(session, steps, [append_tool(notes)]), "go", session=session)).final_output == "done"
    )
    assert sorted(notes.read_text().split()) == ["x", "y", "z"]
    assert sorted(e.call_id for e in sp.ledger(session.run.run_id)) == ["p_x", "p_y", "p_z"]
    again = run(Runner.run(agent_for(session, steps, [append_tool(notes)]), "go", session=session))
    assert again.final_output == "done" and sorted(notes.read_text().split()) == ["x", "x", "y", "y", "z", "z"]
    ids = sorted(e.call_id for e in sp.ledger(session.run.run_id))
    assert ids == ["p_x", "p_x~1", "p_y", "p_y~1", "p_z", "p_z~1"]
    session.close()


def test_a_finished_call_is_taken_from_the_ledger_after_a_crash(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    session = SafepointSession.open(sp, "after")
    steps: list[Any] = [*script()[:1], RuntimeError("the process dies while the model answers")]
    with pytest.raises(RuntimeError):
        run(Runner.run(agent_for(session, steps, [append_tool(notes)]), "write", session=session))
    session.close()
    session = SafepointSession.open(sp, "after")  # nothing uncertain: no decision
    agent = agent_for(session, script()[1:], [append_tool(notes)])
    assert run(Runner.run(agent, [], session=session)).final_output == "done"
    assert notes.read_text() == "a\nb\n"
    session.close()


def test_a_call_id_reused_for_other_arguments_stops_the_run_in_one_line(tmp_path: Path) -> None:
    """A call id a new recorded turn repeats is a new call (providers number calls per response: issue 12's
    attack #4); the same call id with other arguments and no recorded turn to tell them apart is refused."""
    from safepoint.errors import ExitCode
    from safepoint.integrations.openai_agents_tools import SafepointToolError

    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    session = SafepointSession.open(sp, "reuse")
    first = [[function_call("append_line", {"text": "a"}, call_id="same")], [assistant_message("done")]]
    run(Runner.run(agent_for(session, first, [append_tool(notes)]), "one", session=session))
    other = [[function_call("append_line", {"text": "zzz"}, call_id="same")], [assistant_message("done")]]
    run(Runner.run(agent_for(session, other, [append_tool(notes)]), "two", session=session))
    assert notes.read_text() == "a\nzzz\n"  # the new turn's call ran, once, under its own ledger id
    assert {e.call_id: e.status for e in sp.ledger(session.run.run_id)} == {"same": "succeeded", "same~1": "succeeded"}
    unrecorded = Agent(name="w", model=ScriptedModel(other), tools=durable_tools(session, [append_tool(notes)]))
    session.handlers.clear()
    with pytest.raises(SafepointToolError, match="call id 'same~1' is recorded for another call") as raised:
        hand = [[function_call("append_line", {"text": "yyy"}, call_id="same")], [assistant_message("done")]]
        unrecorded.model = ScriptedModel(hand)
        run(Runner.run(unrecorded, "three", session=session))
    assert raised.value.exit_code == ExitCode.FAILED and "\n" not in str(raised.value)
    assert notes.read_text() == "a\nzzz\n"  # neither the old output handed back for new arguments, nor a second run
    session.close()


def test_arguments_a_model_broke_are_ledgered_and_answered_by_the_sdk(tmp_path: Path) -> None:
    from openai.types.responses import ResponseFunctionToolCall

    sp = opened(tmp_path)
    notes = tmp_path / "notes.txt"
    session = SafepointSession.open(sp, "broken")
    deep = "[" * 500  # (100,000 of them: the SDK's own json.loads dies of a RecursionError before any tool runs)
    broken = [
        ResponseFunctionToolCall(type="function_call", name="append_line", arguments=text, call_id=f"b{n}")
        for n, text in enumerate(['{"text": "a"', deep, "[1, 2]"])
    ]
    steps = [broken, [assistant_message("done")]]
    result = run(Runner.run(agent_for(session, steps, [append_tool(notes)]), "go", session=session))
    assert result.final_output == "done" and not notes.exists()  # the tool never ran on arguments it could not read
    assert sorted(e.call_id for e in sp.ledger(session.run.run_id)) == ["b0", "b1", "b2"]
    session.close()


def test_a_recorded_turn_answers_only_the_same_question_of_the_same_session_version(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "regen")
    first = agent_for(session, [[assistant_message("one")]], [])
    assert run(Runner.run(first, "hi", session=session)).final_output == "one"
    run(session.pop_item())
    run(session.pop_item())  # "regenerate": the same question again, after the items changed
    again = agent_for(session, [[assistant_message("two")]], [])
    assert run(Runner.run(again, "hi", session=session)).final_output == "two"
    session.close()


def test_a_streamed_run_resumes_from_its_recorded_turn_and_a_tool_raises_as_it_did(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    calls: list[int] = []

    @function_tool(failure_error_function=None)  # the tool's exceptions end the run
    def flaky(x: int) -> str:
        """Fails."""
        calls.append(x)
        raise LookupError("the tool's own failure")

    async def consume(agent: Agent, prompt: Any) -> Any:
        streamed = Runner.run_streamed(agent, prompt, session=session)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    session = SafepointSession.open(sp, "stream")
    first = agent_for(session, [[function_call("flaky", {"x": 1}, call_id="f1")], [assistant_message("x")]], [flaky])
    with pytest.raises(Exception, match="the tool's own failure") as raised:
        run(consume(first, "go"))
    assert isinstance(raised.value.__cause__, LookupError)  # the live process sees what the tool raised
    session.close()
    session = SafepointSession.open(sp, "stream")  # failed is an outcome: nothing to decide
    again = agent_for(session, [[assistant_message("done")]], [flaky])
    assert run(consume(again, [])) == "done"
    assert calls == [1]  # the recorded failure is told to the model, never run again
    model = again.model
    assert isinstance(model, DurableModel) and (model.replayed, model.paid) == (1, 1)
    assert [e.status for e in sp.ledger(session.run.run_id)] == ["failed"]
    session.close()


# approvals -----------------------------------------------------------------------------------------------------------
def approval_steps() -> list[Any]:
    return [[function_call("transfer", {"amount": 10}, call_id="t1")], [assistant_message("paid")]]


def transfer_agent(session: SafepointSession, sent: Path, steps: list[Any]) -> Agent:
    @function_tool(needs_approval=True)
    def transfer(amount: int) -> str:
        """Send money."""
        with open(sent, "a") as f:
            f.write(f"{amount}\n")
        return f"sent {amount}"

    return agent_for(session, steps, [transfer], transfer=ToolPolicy(replay_policy="never"))


def test_an_approval_survives_a_process_that_died_waiting_and_counts_once(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    sent = tmp_path / "sent.txt"
    spawn(tmp_path, sent, "approval")
    assert not sent.exists()
    session = SafepointSession.open(sp, "crash")
    agent = transfer_agent(session, sent, [[assistant_message("paid")]])
    state = run(session.load_state(agent))
    assert state is not None and [i.raw_item.call_id for i in state.get_interruptions()] == ["t1"]
    state.approve(state.get_interruptions()[0])
    stale_text = session._folded.state
    assert run(run_durably(agent, state, session=session)).final_output == "paid"
    assert sent.read_text() == "10\n" and not session.has_state  # the run went on: its state is forgotten
    # The same state approved again (a retry, a second worker holding a copy): the recorded output, never a second
    # transfer.
    run(session.save_state(run(RunState.from_json(agent, json.loads(stale_text)))))
    stale = run(session.load_state(transfer_agent(session, sent, [[assistant_message("paid")]])))
    assert stale is not None
    stale.approve(stale.get_interruptions()[0])
    retry = transfer_agent(session, sent, [[assistant_message("paid")]])
    assert run(Runner.run(retry, stale, session=session)).final_output == "paid"
    assert sent.read_text() == "10\n"
    run(session.save_state(None))
    assert not session.has_state and run(session.load_state(agent)) is None
    [entry] = sp.ledger(session.run.run_id)
    assert entry.call_id == "t1" and entry.status == "succeeded"
    session.close()


def stand_in(call_id: str, approved: bool | None) -> Any:
    return SimpleNamespace(tool_name="transfer", tool_call_id=call_id, is_tool_approved=lambda name, cid: approved)


def test_an_approval_counts_for_the_arguments_shown_only(tmp_path: Path) -> None:
    from safepoint.integrations.openai_agents_tools import _Ledgered

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "digest")
    ledgered = _Ledgered(session)

    def problem(approved: bool | None, amount: int) -> str | None:
        return ledgered.approval_problem(stand_in("t1", approved), "t1", {"amount": amount}, per_call=True)

    assert problem(True, 10) == "its policy asks a person for each call, and only the whole tool was approved"
    session.record_asked("t1", args_digest({"amount": 10}))
    assert problem(None, 10) == "it was not approved"
    assert problem(True, 999) == "it was approved for other arguments"
    assert problem(True, 10) is None
    session.run.checkpoint()  # in a real call its `started` makes the staged use durable at once
    session.record_asked("t2", args_digest({"amount": 5}))
    no = ledgered.approval_problem(stand_in("t2", False), "t2", {"amount": 5}, per_call=True)
    assert no == "a person rejected it"
    session.close()
    again = SafepointSession.open(sp, "digest")  # asked, used and rejected are durable
    assert again.asked("t1") == args_digest({"amount": 10}) == again.used("t1")
    later = _Ledgered(again).approval_problem(stand_in("t2", True), "t2", {"amount": 5}, per_call=True)
    assert later == "a person rejected it"  # a later approval of a rejected call (a stale state) runs nothing
    again.close()


def test_approving_every_call_of_a_tool_counts_only_where_the_sdk_asked(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    removed: list[str] = []

    @function_tool(needs_approval=True)
    def rm(path: str) -> str:
        """Remove a file."""
        removed.append(path)
        return f"removed {path}"

    for name, policies in (("sdk", {}), ("policy", {"rm": ToolPolicy(needs_approval=True)})):
        session = SafepointSession.open(sp, name)
        steps = [
            [function_call("rm", {"path": "x"}, call_id="r1")],
            [function_call("rm", {"path": "y"}, call_id="r2")],
            [assistant_message("done")],
        ]
        agent = agent_for(session, steps, [rm], **policies)
        state = run(run_durably(agent, "clean", session=session)).to_state()
        state.approve(state.get_interruptions()[0], always_approve=True)
        assert run(run_durably(agent, state, session=session)).final_output == "done"
        outputs = [i["output"] for i in run(session.get_items()) if "output" in i]
        session.close()
        if name == "sdk":  # the person approved every call of rm in the SDK: honoured
            assert removed == ["x", "y"] and outputs == ["removed x", "removed y"]
        else:  # the policy wants each call and its arguments approved
            assert removed == ["x", "y", "x"] and "only the whole tool was approved" in outputs[1]


def test_an_edited_state_cannot_run_other_arguments(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    sent = tmp_path / "sent.txt"
    session = SafepointSession.open(sp, "edited")
    result = run(Runner.run(transfer_agent(session, sent, approval_steps()), "pay", session=session))
    run(session.save_state(result))
    kept = json.loads(session._folded.state)
    # Arguments edited, and the SDK's own record of the call (its fingerprint) dropped so it cannot tell.
    kept["context"].pop("tool_invocations")
    text = json.dumps(kept).replace('{\\"amount\\":10}', '{\\"amount\\":9999}')
    assert text != json.dumps(kept)
    run(session.save_state(None))
    agent = transfer_agent(session, sent, [[assistant_message("paid")]])
    state = run(RunState.from_json(agent, json.loads(text)))
    for item in state.get_interruptions():
        state.approve(item)
    final = run(Runner.run(agent, state, session=session))
    assert not sent.exists()  # 9,999 was never shown to anyone: not sent
    outputs = [i for i in run(session.get_items()) if i.get("type") == "function_call_output"]
    assert final.final_output == "paid" and "did not run" in outputs[-1]["output"]
    session.close()


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()  # a PostgreSQL store's pool, before the throwaway server goes


def test_a_secret_in_a_waiting_call_never_reaches_the_store_nor_runs_redacted(tmp_path: Path) -> None:
    sp = opened(tmp_path)
    sent = tmp_path / "sent.txt"
    logins: list[str] = []

    @function_tool
    def login(token: str) -> str:
        """Log in (finished before the run waits)."""
        logins.append(token)
        return "logged in"

    @function_tool(needs_approval=True)
    def deploy(token: str) -> str:
        """Deploy with a token."""
        sent.write_text(token)
        return "deployed"

    session = SafepointSession.open(sp, "secret-state")
    steps = [
        [function_call("login", {"token": TOKEN}, call_id="l1")],
        [function_call("deploy", {"token": TOKEN}, call_id="d1")],
        [assistant_message("ok")],
    ]
    assert run(run_durably(agent_for(session, steps, [login, deploy]), "deploy", session=session)).interruptions
    session.close()
    stored = store_bytes(sp)
    assert TOKEN.encode() not in stored and b"schemaVersion" in stored  # the turns, the items, the state: redacted
    session = SafepointSession.open(sp, "secret-state")
    agent = agent_for(session, [[assistant_message("ok")]], [login, deploy])
    state = run(session.load_state(agent))  # the SDK's fingerprints of the real arguments no longer bind it
    assert state is not None
    state.approve(state.get_interruptions()[0])
    assert run(run_durably(agent, state, session=session)).final_output == "ok"
    assert logins == [TOKEN] and not sent.exists()  # "[REDACTED:...]" is never deployed as the token
    output = [i for i in run(session.get_items()) if i.get("call_id") == "d1" and "output" in i][-1]["output"]
    assert "lost a secret to redaction" in output
    session.close()


def test_the_example_waits_across_processes_and_does_nothing_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    path = HERE.parent / "examples" / "openai_agents_session.py"
    spec = importlib.util.spec_from_file_location("openai_agents_session", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    run(example.main(str(tmp_path)))
    assert "waiting for approval: send_notes" in capsys.readouterr().out
    example.paid = 0
    run(example.main(str(tmp_path), approve=True))  # as another process would: everything from the store
    out = capsys.readouterr().out
    assert "sent (model turns paid for: 1)" in out and (tmp_path / "notes.txt").read_text() == "hello\n"
