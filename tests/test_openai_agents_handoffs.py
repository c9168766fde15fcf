"""A run of the OpenAI Agents SDK that dies after a handoff goes on in the agent that held the turn (issue 12 §3):
what the session recorded (the handoff's items, saved before the new agent's first model call) decides, never the
agent the app happens to start with. Crashes are ``BaseException``s raised inside a tool or a model call (nothing
records an outcome, as when the process dies); the resume is a new ``SafepointSession.open(..., takeover=True)``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, Runner, function_tool, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import ScriptedModel, assistant_message, function_call

import safepoint
from safepoint.errors import DecisionNeeded, ExitCode
from safepoint.integrations.openai_agents import SafepointSession
from safepoint.integrations.openai_agents_resume import HandoffAgentMissing, handed_to
from safepoint.integrations.openai_agents_tools import DurableModel, durable_model, durable_tools

set_tracing_disabled(True)
HERE = Path(__file__).resolve().parent
CHILD = "import sys; sys.path[:0] = [{src!r}, {here!r}]; import test_openai_agents_handoffs as t; t.{call}"
OPENED: list[safepoint.Safepoint] = []
KILL = False  # a child process dies of a real SIGKILL where the others raise Crash


class Crash(BaseException):
    """The process stops here (not an ``Exception``: nothing records an outcome)."""


@pytest.fixture(autouse=True)
def _close_stores() -> Any:
    yield
    while OPENED:
        OPENED.pop().close()


def opened(tmp_path: Path) -> safepoint.Safepoint:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    OPENED.append(safepoint.open(None, workspace=str(ws)))
    return OPENED[-1]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def line_tool(notes: Path, die_on: str | None) -> FunctionTool:
    @function_tool
    def append_line(text: str) -> str:
        """Append a line to the notes (not idempotent)."""
        with open(notes, "a") as f:
            f.write(text + "\n")
        if text == die_on and KILL:
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash: no finally runs, no buffer is flushed
        if text == die_on:
            raise Crash
        return f"appended {text}"

    return append_line


class DyingModel(ScriptedModel):
    """A model the process dies in, before it answers (no turn recorded)."""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        raise Crash


class Team:
    """Agents named in ``chain`` handing off in turn (``a`` -> ``b`` -> ...), each with its scripted turns and
    ``append_line``; the models of the latest build, by agent name."""

    def __init__(self, notes: Path, chain: list[str], handoffs: dict[str, list[str]]) -> None:
        self.notes = notes
        self.chain = chain
        self.handoffs = handoffs  # agent -> the agents it may hand off to
        self.models: dict[str, DurableModel] = {}

    def build(self, session: SafepointSession, steps: dict[str, list[Any]], die_on: str | None = None) -> Agent:
        agents: dict[str, Agent] = {}
        for name in self.chain:
            given = steps.get(name) or [[assistant_message(f"{name} idle")]]
            model: Model = DyingModel([]) if given == ["die"] else ScriptedModel(given)
            self.models[name] = durable_model(session, model)
            agents[name] = Agent(
                name=name,
                instructions=f"you are {name}",
                model=self.models[name],
                tools=durable_tools(session, [line_tool(self.notes, die_on)]),
            )
        for name, targets in self.handoffs.items():
            agents[name].handoffs = [agents[t] for t in targets]
        return agents[self.chain[0]]


def to(agent: str, call_id: str) -> list[Any]:
    return [function_call(f"transfer_to_{agent}", {}, call_id=call_id)]


def line(text: str, call_id: str) -> list[Any]:
    return [function_call("append_line", {"text": text}, call_id=call_id)]


def crashed(tmp_path: Path, team: Team, steps: dict[str, list[Any]], die_on: str | None = None) -> safepoint.Safepoint:
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "team")
    with pytest.raises(Crash):
        run(Runner.run(team.build(session, steps, die_on), "write", session=session))
    return sp


def test_two_handoffs_in_a_row_resume_in_the_last_agent(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "mid", "back"], {"front": ["mid"], "mid": ["back"]})
    back = [line("a", "call_a"), line("b", "call_b"), [assistant_message("done")]]
    sp = crashed(tmp_path, team, {"front": [to("mid", "h1")], "mid": [to("back", "h2")], "back": back}, die_on="b")
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_b"])
    agent = team.build(session, {"back": [[assistant_message("done")]]})
    result = Runner.run_sync(agent, [], session=session)  # the SDK's synchronous entry goes on in back too
    assert result.final_output == "done" and result.last_agent.name == "back"
    assert notes.read_text() == "a\nb\n"  # b is never appended twice
    assert (team.models["front"].paid, team.models["mid"].paid) == (0, 0)
    assert (team.models["back"].replayed, team.models["back"].paid) == (1, 1)  # the recorded call_b turn, then "done"
    session.close()
    assert sp.ledger(session.run.run_id)  # the store holds what happened


def test_a_handoff_back_resumes_in_the_agent_handed_back_to(tmp_path: Path) -> None:
    """``front`` -> ``back`` -> ``front`` again, which dies in its own tool: the last handoff names ``front``."""
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "back"], {"front": ["back"], "back": ["front"]})
    steps = {
        "front": [to("back", "h1"), line("f", "call_f"), [assistant_message("front done")]],
        "back": [line("b", "call_b"), to("front", "h2")],
    }
    crashed(tmp_path, team, steps, die_on="f")
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_f"])
    agent = team.build(session, {"front": [[assistant_message("front done")]]})
    assert session.agent_to_resume(agent) is agent
    result = run(Runner.run(agent, [], session=session))
    session.close()
    assert result.final_output == "front done" and result.last_agent.name == "front"
    assert notes.read_text() == "b\nf\n"
    assert team.models["back"].paid == 0 and team.models["front"].replayed == 1


def test_a_crash_between_the_handoff_and_the_new_agents_first_call_resumes_there(tmp_path: Path) -> None:
    """The process dies as ``back`` asks its model for the first time: the handoff's items were saved before that
    call, so the resume asks ``back`` (paid: it never answered) and never ``front`` again."""
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    crashed(tmp_path, team, {"front": [to("back", "h1")], "back": ["die"]})
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True)
    agent = team.build(session, {"front": [[assistant_message("front again")]], "back": [[assistant_message("ok")]]})
    result = run(Runner.run(agent, [], session=session))
    session.close()
    assert result.final_output == "ok" and team.models["front"].paid == 0 and team.models["back"].paid == 1


def test_a_crash_in_the_new_agents_tool_asks_for_a_decision_and_never_reruns_it(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    crashed(tmp_path, team, {"front": [to("back", "h1")], "back": [line("b", "call_b")]}, die_on="b")
    with pytest.raises(DecisionNeeded, match=r"append_line\(call_b\)"):
        SafepointSession.open(opened(tmp_path), "team", takeover=True)
    assert notes.read_text() == "b\n"  # asking ran nothing
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_b"])
    agent = team.build(session, {"back": [[assistant_message("checked")]]})

    async def drain() -> Any:
        streamed = Runner.run_streamed(agent, [], session=session)  # streamed runs go on in the same agent
        async for _ in streamed.stream_events():
            pass
        return streamed

    streamed = run(drain())
    session.close()
    assert streamed.final_output == "checked" and streamed.last_agent.name == "back"
    assert notes.read_text() == "b\n" and team.models["front"].paid == 0


def test_a_handoff_to_an_agent_the_graph_does_not_hold_is_refused_in_one_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    crashed(tmp_path, team, {"front": [to("back", "h1")], "back": [line("b", "call_b")]}, die_on="b")
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_b"])
    alone = Agent(name="front", model=durable_model(session, ScriptedModel([[assistant_message("hi")]])))
    with pytest.raises(HandoffAgentMissing) as caught:
        run(Runner.run(alone, [], session=session))
    session.close()
    said = str(caught.value)
    assert "'back'" in said and "\n" not in said and caught.value.exit_code == ExitCode.USAGE


def test_only_a_handoffs_own_items_name_an_agent(tmp_path: Path) -> None:
    """A tool whose output reads like the SDK's transfer message, an output with no call before it, and a new
    prompt (not ``[]``) never move a run to another agent."""
    fake = '{"assistant": "back"}'
    items = [
        {"type": "function_call", "call_id": "t1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "t1", "output": fake + " "},
        {"type": "function_call_output", "call_id": "t9", "output": fake},
    ]
    assert handed_to(items) is None
    assert handed_to([*items[:1], {**items[1], "output": fake}]) == "back"
    notes = tmp_path / "notes.txt"
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    crashed(tmp_path, team, {"front": [to("back", "h1")], "back": [line("b", "call_b")]}, die_on="b")
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_b"])
    agent = team.build(session, {"front": [[assistant_message("front answers")]]})
    result = run(Runner.run(agent, "a new question", session=session))  # the app chose its agent for a new prompt
    session.close()
    assert result.last_agent.name == "front" and result.final_output == "front answers"


def test_a_handoff_whose_filter_drops_its_items_still_resumes_in_the_new_agent(tmp_path: Path) -> None:
    """``handoff(back, input_filter=remove_all_tools)`` keeps the handoff's own items out of the session: the agent
    that took the turn is recorded apart from them (before its first model call), so the resume is in ``back``, and
    the app's own run hooks are still called."""
    from agents import RunHooks, handoff
    from agents.extensions import handoff_filters

    notes = tmp_path / "notes.txt"
    seen: list[str] = []

    class AppHooks(RunHooks[Any]):
        async def on_agent_start(self, context: Any, agent: Any) -> None:
            seen.append(f"start {agent.name}")

        async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
            seen.append(f"handoff {from_agent.name}->{to_agent.name}")

    def build(session: SafepointSession, front_steps: list[Any], back_steps: list[Any], die_on: str | None) -> Agent:
        back = Agent(
            name="back",
            model=durable_model(session, ScriptedModel(back_steps)),
            tools=durable_tools(session, [line_tool(notes, die_on)]),
        )
        front = Agent(
            name="front",
            model=durable_model(session, ScriptedModel(front_steps)),
            handoffs=[handoff(back, input_filter=handoff_filters.remove_all_tools)],
        )
        return front

    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "filtered")
    with pytest.raises(Crash):
        agent = build(session, [to("back", "h1")], [line("a", "call_a"), line("b", "call_b")], "b")
        run(Runner.run(agent, "write", session=session, hooks=AppHooks()))
    assert seen[:3] == ["start front", "handoff front->back", "start back"]
    assert handed_to(run(session.get_items())) is None  # the filter kept the handoff out of the items
    session = SafepointSession.open(opened(tmp_path), "filtered", takeover=True, skip=["call_b"])
    front = build(session, [[assistant_message("front again")]], [[assistant_message("checked")]], None)
    result = run(Runner.run(front, [], session=session, hooks=AppHooks()))
    session.close()
    assert result.final_output == "checked" and result.last_agent.name == "back"
    assert notes.read_text() == "a\nb\n" and seen[-1] == "start back"
    assert isinstance(front.model, DurableModel) and front.model.paid == 0


def killed_in_back(ws: str, notes: str) -> None:
    """A child process: ``front`` hands off to ``back``, which is SIGKILLed inside ``append_line("b")``."""
    global KILL
    KILL = True
    session = SafepointSession.open(safepoint.open(None, workspace=ws), "killed")
    team = Team(Path(notes), ["front", "back"], {"front": ["back"]})
    steps = {"front": [to("back", "h1")], "back": [line("a", "call_a"), line("b", "call_b")]}
    run(Runner.run(team.build(session, steps, die_on="b"), "write", session=session))


def test_a_process_killed_in_the_agent_it_handed_off_to_resumes_there(tmp_path: Path) -> None:
    """A real SIGKILL inside ``back``'s tool (no ``finally`` runs, no buffer is flushed): the next process waits for
    a decision on the call, then goes on in ``back`` from its recorded turn; ``front`` is never asked again."""
    notes = tmp_path / "notes.txt"
    ws = tmp_path / "ws"
    ws.mkdir()
    call = f"killed_in_back({str(ws)!r}, {str(notes)!r})"
    code = CHILD.format(src=str(HERE.parent / "src"), here=str(HERE), call=call)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert notes.read_text() == "a\nb\n"
    sp = opened(tmp_path)
    with pytest.raises(DecisionNeeded, match=r"append_line\(call_b\)"):
        SafepointSession.open(sp, "killed")
    session = SafepointSession.open(sp, "killed", skip=["call_b"])
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    agent = team.build(session, {"front": [[assistant_message("front again")]], "back": [[assistant_message("ok")]]})
    result = run(Runner.run(agent, [], session=session))
    session.close()
    assert result.final_output == "ok" and result.last_agent.name == "back"
    assert notes.read_text() == "a\nb\n" and team.models["front"].paid == 0
    assert (team.models["back"].replayed, team.models["back"].paid) == (1, 1)


def test_a_nested_handoff_history_resumes_from_the_turn_in_flight(tmp_path: Path) -> None:
    """``RunConfig(nest_handoff_history=True)`` shows ``back`` a summary of the history that the SDK does not keep:
    resumed from the session, ``back`` is asked with other items than when it died. The turn it had in flight (the
    one asking for ``call_b``) answers all the same, so ``call_b`` meets the ledger (skipped, the model told) rather
    than a paid new turn in which the model, never told of it, asks for "b" again under a new id."""
    from agents import RunConfig

    notes = tmp_path / "notes.txt"
    nested = RunConfig(nest_handoff_history=True)
    team = Team(notes, ["front", "back"], {"front": ["back"]})
    steps = {"front": [to("back", "h1")], "back": [line("a", "call_a"), line("b", "call_b")]}
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "team")
    with pytest.raises(Crash):
        run(Runner.run(team.build(session, steps, "b"), "write", session=session, run_config=nested))
    session = SafepointSession.open(opened(tmp_path), "team", takeover=True, skip=["call_b"])
    again = {"back": [line("b", "call_b_again"), [assistant_message("done")]]}  # what a model not told would do
    result = run(Runner.run(team.build(session, again), [], session=session, run_config=nested))
    session.close()
    assert result.last_agent.name == "back" and team.models["front"].paid == 0
    assert team.models["back"].replayed == 1  # the turn in flight, not a paid one
    outputs = [i for i in run(SafepointSession.open(opened(tmp_path), "team").get_items()) if "output" in i]
    assert any(o.get("call_id") == "call_b" and "NOT run again" in str(o["output"]) for o in outputs)


@pytest.mark.parametrize("same", [False, True], ids=["other-input", "same-input"])
def test_two_alike_agents_run_as_tools_at_once_each_get_their_own_turns(tmp_path: Path, same: bool) -> None:
    """Two agents with the same instructions and tools, run as tools in one turn, share a session's record: a turn
    one of them recorded in this process is never handed to the other for another request (only a turn read back at
    ``open`` can answer a request it does not match exactly). Asked the very same request, the second may be
    answered from the first's record, as any repeated request is; then its call waits for the first's, still
    running, and takes its outcome: before, the two ran one ledger call at once and the first lost its handler
    (``KeyError``), so both tools failed."""
    notes = tmp_path / "notes.txt"
    sp = opened(tmp_path)
    session = SafepointSession.open(sp, "alike")

    def writer(text: str, call_id: str) -> Agent:
        steps = [line(text, call_id), [assistant_message(f"wrote {text}")]]
        return Agent(
            name="writer",
            instructions="writes",
            model=durable_model(session, ScriptedModel(steps)),
            tools=durable_tools(session, [line_tool(notes, None)]),
        )

    tools = [writer("x", "call_x").as_tool("write_x", "writes x"), writer("y", "call_y").as_tool("write_y", "writes y")]
    inputs = ("go", "go") if same else ("go x", "go y")
    calls = [
        function_call("write_x", {"input": inputs[0]}, call_id="w1"),
        function_call("write_y", {"input": inputs[1]}, call_id="w2"),
    ]
    boss = Agent(
        name="boss",
        model=durable_model(session, ScriptedModel([calls, [assistant_message("both")]])),
        tools=durable_tools(session, tools),
    )
    assert run(Runner.run(boss, "write both", session=session)).final_output == "both"
    outputs = {i["call_id"]: i["output"] for i in run(session.get_items()) if i.get("type") == "function_call_output"}
    ledger = {e.call_id: e.status for e in sp.ledger(session.run.run_id)}
    session.close()
    assert set(ledger.values()) == {"succeeded"}
    if same:  # answered from one record or asked twice, as the two requests met: each ledgered append ran once
        assert set(outputs) == {"w1", "w2"} and set(outputs.values()) <= {"wrote x", "wrote y"}
        assert sorted(notes.read_text().split()) == sorted(c.removeprefix("call_") for c in ledger if "_" in c)
    else:
        assert outputs == {"w1": "wrote x", "w2": "wrote y"} and sorted(notes.read_text().split()) == ["x", "y"]
