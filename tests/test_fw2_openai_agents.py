"""OpenAI Agents adapter under what real apps do (issue 12, a colleague's notes): an app that installs its own
default runner after a session was opened, agent names that look like secrets, hostile tool inputs and outputs.
Offline, with the SDK's own ``ScriptedModel``."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import agents.run as sdk_run
from agents import Agent, FunctionTool, Runner, function_tool, set_tracing_disabled
from agents.run import AgentRunner
from agents.testing import ScriptedModel, assistant_message, function_call

import safepoint
from safepoint.integrations.openai_agents import AGENT, SafepointSession
from safepoint.integrations.openai_agents_resume import HandoffAgentMissing, ResumingRunner, RunnerReplacedWarning
from safepoint.integrations.openai_agents_tools import DurableModel, durable_model, durable_tools

set_tracing_disabled(True)


class Crash(BaseException):
    """The process stops here (not an ``Exception``: nothing records an outcome)."""


class OwnRunner(AgentRunner):
    """An app's runner that does not wrap the one it finds (the SDK's experimental hook allows it)."""

    runs = 0

    async def run(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        OwnRunner.runs += 1
        return await super().run(starting_agent, input, **options)


@pytest.fixture(autouse=True)
def _default_runner() -> Iterator[None]:
    before = sdk_run.get_default_agent_runner()
    yield
    sdk_run.set_default_agent_runner(before)


@pytest.fixture
def sp(tmp_path: Path) -> Iterator[safepoint.Safepoint]:
    ws = tmp_path / "ws"
    ws.mkdir()
    opened = safepoint.open(None, workspace=str(ws))
    yield opened
    opened.close()


def line_tool(notes: Path, die_on: str | None = None) -> FunctionTool:
    @function_tool
    def append_line(text: str) -> str:
        """Append a line to the notes (not idempotent)."""
        with open(notes, "a") as f:
            f.write(text + "\n")
        if text == die_on:
            raise Crash
        return f"appended {text}"

    return append_line


def team(
    session: SafepointSession, notes: Path, steps: dict[str, list[Any]], die_on: str | None = None
) -> tuple[Agent[Any], dict[str, DurableModel]]:
    """``front`` hands off to ``back``; each with its scripted turns (``back``'s name as given)."""
    models = {name: durable_model(session, ScriptedModel(steps.get(name, []))) for name in ("front", "back")}
    tools = durable_tools(session, [line_tool(notes, die_on)])
    back = Agent(name=steps.get("back_name", ["back"])[0], model=models["back"], tools=tools)
    front = Agent(name="front", model=models["front"], tools=tools, handoffs=[back])
    return front, models


def to(agent: str, call_id: str) -> list[Any]:
    return [function_call(f"transfer_to_{agent}", {}, call_id=call_id)]


def line(text: str, call_id: str) -> list[Any]:
    return [function_call("append_line", {"text": text}, call_id=call_id)]


def test_a_runner_installed_after_open_is_said_once_in_one_line_and_wrapped_again(
    sp: safepoint.Safepoint, tmp_path: Path
) -> None:
    session = SafepointSession.open(sp, "own")
    sdk_run.set_default_agent_runner(OwnRunner())  # after the session was opened, not wrapping what it found
    front, _ = team(session, tmp_path / "notes", {"front": [[assistant_message("one")], [assistant_message("two")]]})
    with pytest.warns(RunnerReplacedWarning) as said:
        assert asyncio.run(Runner.run(front, "hi", session=session)).final_output == "one"
    [warning] = said
    text = str(warning.message)
    assert "\n" not in text and "'own'" in text and "set_default_agent_runner" in text and "session.watch" in text
    # The runner in effect is wrapped again: the next run goes through it (the app's runner still runs) unwarned.
    assert isinstance(sdk_run.get_default_agent_runner(), ResumingRunner)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunnerReplacedWarning)
        assert asyncio.run(Runner.run(front, "again", session=session)).final_output == "two"
    assert OwnRunner.runs >= 2
    session.close()


def test_an_app_with_its_own_runner_resumes_in_the_agent_that_held_the_turn(
    sp: safepoint.Safepoint, tmp_path: Path
) -> None:
    """The documented way for an app that keeps its own runner: ``session.agent_to_resume(agent)`` and
    ``hooks=session.watch()``: the agent is recorded and found again, no warning, whatever runner is in effect."""
    notes = tmp_path / "notes"
    session = SafepointSession.open(sp, "own")
    steps = {"front": [to("back", "h1")], "back": [line("b", "call_b")]}
    front, _ = team(session, notes, steps, die_on="b")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunnerReplacedWarning)
        sdk_run.set_default_agent_runner(OwnRunner())
        with pytest.raises(Crash):
            asyncio.run(Runner.run(session.agent_to_resume(front), "write", session=session, hooks=session.watch()))
        assert [m.content for m in session.run.session.lifetime_said() if m.name == AGENT] == ["front", "back"]
        session.close()

        session = SafepointSession.open(sp, "own", takeover=True, skip=["call_b"])
        sdk_run.set_default_agent_runner(OwnRunner())  # the app installs its runner again in the new process
        front, models = team(session, notes, {"back": [[assistant_message("done")]]})
        resumed = session.agent_to_resume(front)
        assert resumed.name == "back"
        result = asyncio.run(Runner.run(resumed, [], session=session, hooks=session.watch()))
    assert result.final_output == "done" and result.last_agent.name == "back"
    assert notes.read_text() == "b\n" and models["front"].paid == 0
    session.close()


SECRETISH = "sk-proj-" + "Q7vN2xLmA9" * 3  # an agent's name the redactor takes for an OpenAI key


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.parametrize("sealed", [False, True])
def test_an_agent_named_like_a_key_is_resumed_and_its_name_never_stored_clear(tmp_path: Path, sealed: bool) -> None:
    from agents import Handoff

    ws = tmp_path / "ws"
    ws.mkdir()
    notes = tmp_path / "notes"

    def open_sp() -> safepoint.Safepoint:
        return safepoint.open(None, workspace=str(ws), key="ab" * 32 if sealed else None)

    sp = open_sp()
    session = SafepointSession.open(sp, "keyish")
    probe = Agent(name=SECRETISH)
    handoff_tool = Handoff.default_tool_name(probe)
    steps: dict[str, list[Any]] = {
        "front": [[function_call(handoff_tool, {}, call_id="h1")]],
        "back": [line("b", "call_b")],
        "back_name": [SECRETISH],
    }
    front, _ = team(session, notes, steps, die_on="b")
    with pytest.raises(Crash):
        asyncio.run(Runner.run(front, "write", session=session))
    session.close()
    sp.close()

    sp = open_sp()
    session = SafepointSession.open(sp, "keyish", takeover=True, skip=["call_b"])
    front, models = team(session, notes, {"back": [[assistant_message("done")]], "back_name": [SECRETISH]})
    assert session.agent_to_resume(front).name == SECRETISH  # not refused as an agent the graph does not hold
    result = asyncio.run(Runner.run(front, [], session=session))
    assert result.final_output == "done" and result.last_agent.name == SECRETISH
    assert notes.read_text() == "b\n" and models["front"].paid == 0
    session.close()
    sp.close()
    assert files_holding(ws, SECRETISH) == []  # no file of the store holds the secret-looking name in clear


def test_a_saved_run_state_of_an_agent_named_like_a_key_loads_and_runs_once(
    sp: safepoint.Safepoint, tmp_path: Path
) -> None:
    """The ``RunState`` names its agents (current, of each item, of a handoff): redacted with the record, none of
    them was found again and the state could not be loaded; kept as digests, it loads, and the approval runs once."""
    sent = tmp_path / "sent"

    @function_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send money."""
        with open(sent, "a") as f:
            f.write(f"{amount}\n")
        return f"sent {amount}"

    def build(session: SafepointSession, steps: list[Any]) -> Agent[Any]:
        return Agent(
            name=SECRETISH,
            model=durable_model(session, ScriptedModel(steps)),
            tools=durable_tools(session, [pay]),
        )

    session = SafepointSession.open(sp, "state")
    agent = build(session, [[function_call("pay", {"amount": 10}, call_id="p1")]])
    asked = asyncio.run(Runner.run(agent, "pay", session=session))
    assert asked.interruptions
    asyncio.run(session.save_state(asked))
    session.close()
    assert files_holding(tmp_path / "ws", SECRETISH) == []

    session = SafepointSession.open(sp, "state", takeover=True)
    agent = build(session, [[assistant_message("paid")]])
    state = asyncio.run(session.load_state(agent))
    assert state is not None
    state.approve(state.get_interruptions()[0])
    result = asyncio.run(Runner.run(agent, state, session=session))
    assert result.final_output == "paid" and result.last_agent.name == SECRETISH
    assert sent.read_text() == "10\n"
    # Loaded for a graph without that agent: refused in one line that does not quote the name.
    asyncio.run(session.save_state(asked))
    with pytest.raises(HandoffAgentMissing, match="looks like a secret") as refused:
        asyncio.run(session.load_state(Agent(name="someone-else")))
    assert SECRETISH not in str(refused.value) and "\n" not in str(refused.value)
    session.close()


def test_a_session_shared_by_two_runs_at_once_runs_each_call_once_under_its_own_id(
    sp: safepoint.Safepoint, tmp_path: Path
) -> None:
    """Two runs on one session at once, their models numbering calls alike (``call_0``): the run whose turn was
    recorded first took the second turn's ledger id (the session's one map of the latest turn), so the other run's
    call met that record and was refused; and the session's records interleaved with the ledger's on the log."""
    ran: list[str] = []

    @function_tool
    async def note(text: str) -> str:
        """Note a line (not idempotent)."""
        for _ in range(5):
            await asyncio.sleep(0)  # the other run's turn is recorded meanwhile
        ran.append(text)
        return f"noted {text}"

    session = SafepointSession.open(sp, "shared")

    def agent(text: str) -> Agent[Any]:
        steps = [[function_call("note", {"text": text}, call_id="call_0")], [assistant_message(f"done {text}")]]
        return Agent(name="a", model=durable_model(session, ScriptedModel(steps)), tools=durable_tools(session, [note]))

    async def both() -> list[Any]:
        results = await asyncio.gather(
            Runner.run(agent("a"), "x", session=session), Runner.run(agent("b"), "y", session=session)
        )
        return [r.final_output for r in results]

    assert asyncio.run(both()) == ["done a", "done b"]
    assert sorted(ran) == ["a", "b"]
    ledger = {e.call_id: e.status for e in sp.ledger(session.run.run_id)}
    assert ledger == {"call_0": "succeeded", "call_0~1": "succeeded"}
    session.close()
    SafepointSession.open(sp, "shared").close()  # nothing uncertain was left: no decision asked


class Receipt:
    """An object the SDK shows the model as its text (no JSON form)."""

    def __str__(self) -> str:
        return "receipt #7"


def test_a_tool_returning_an_object_is_recorded_succeeded_and_answered_from_the_record(
    sp: safepoint.Safepoint, tmp_path: Path
) -> None:
    """The ledger's encoder refused the object after the tool ran: the call was recorded ``failed`` (the model told
    it failed, a resume told so too) although its effect happened. Kept as its text now; the live run hands the SDK
    the object itself."""
    paid: list[int] = []

    @function_tool
    def pay(amount: int) -> Any:
        """Pay (not idempotent)."""
        paid.append(amount)
        return Receipt()

    session = SafepointSession.open(sp, "obj")
    steps = [[function_call("pay", {"amount": 5}, call_id="p1")], [assistant_message("paid")]]
    model = durable_model(session, ScriptedModel(steps))
    agent = Agent(name="a", model=model, tools=durable_tools(session, [pay]))
    result = asyncio.run(Runner.run(agent, "pay", session=session))
    assert result.final_output == "paid" and paid == [5]
    outputs = [i.output for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"]
    assert outputs and str(outputs[0]) == "receipt #7"
    [entry] = sp.ledger(session.run.run_id)
    assert entry.status == "succeeded"
    session.close()
