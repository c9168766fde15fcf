"""Pydantic AI adapter under what real models and apps do (issue 12, a colleague's notes): repeated and empty tool
call ids, two agent runs sharing one capability at once, and each distinct call run once, a re-run answered from
the ledger. Offline with Pydantic AI's own ``FunctionModel``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import safepoint
from safepoint.integrations.pydantic_ai import SafepointCapability


class Repeating:
    """A model that gives every call the same id (``ID``): turn 0 and turn 1 each ask for one ``note`` with the
    prompt's text; turn 2 answers. ``await``s between turns, so two runs at once interleave."""

    def __init__(self, call_id: str, tool_turns: int = 2) -> None:
        self.call_id = call_id
        self.tool_turns = tool_turns
        self.paid = 0
        self.turns: list[int] = []  # the turn of every response paid for

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.paid += 1
        await asyncio.sleep(0)
        prompt = next(str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart))
        turn = sum(1 for m in messages if m.kind == "response")
        self.turns.append(turn)
        if turn < self.tool_turns:
            return ModelResponse(parts=[ToolCallPart("note", {"text": f"{prompt}{turn}"}, tool_call_id=self.call_id)])
        return ModelResponse(parts=[TextPart(f"done {prompt}")])


def agent_with(capability: SafepointCapability, model: Repeating, ran: list[str]) -> Agent[None, str]:
    agent = Agent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    async def note(text: str) -> str:
        """Note a line (not idempotent)."""
        for _ in range(3):
            await asyncio.sleep(0)  # the other run's turns and calls go on meanwhile
        ran.append(text)
        return f"noted {text}"

    return agent


@pytest.mark.parametrize("call_id", ["", "call_0"])
def test_two_runs_at_once_with_repeated_ids_run_each_call_once_and_a_rerun_runs_none(
    tmp_path: Path, call_id: str
) -> None:
    sp = safepoint.open(None, workspace=tmp_path)
    run = sp.start("go", builtins=False, run_id="r")
    ran: list[str] = []
    model = Repeating(call_id)
    agent = agent_with(SafepointCapability(run), model, ran)

    async def both() -> list[str]:
        results = await asyncio.gather(agent.run("a"), agent.run("b"))
        return [r.output for r in results]

    assert asyncio.run(both()) == ["done a", "done b"]
    assert sorted(ran) == ["a0", "a1", "b0", "b1"]  # each distinct call once, none lost (KeyError) or merged
    paid = model.paid
    run.close()

    # Run again (the same prompts, a new process's capability): every call and turn answered from the record.
    run = sp.resume("r", builtins=False)
    agent = agent_with(SafepointCapability(run), model, ran)
    assert asyncio.run(both()) == ["done a", "done b"]
    assert sorted(ran) == ["a0", "a1", "b0", "b1"]
    assert model.paid == paid
    run.close()


def test_the_same_run_twice_at_once_runs_its_call_once(tmp_path: Path) -> None:
    """Two runs of the very same request at once are one run re-run (the capability's rule): the second, answered
    from the first's recorded turn, meets the first's call in flight, waits for it and takes its outcome, instead
    of overwriting its handler (the first then ran the second's, or failed with a KeyError)."""
    sp = safepoint.open(None, workspace=tmp_path)
    run = sp.start("go", builtins=False, run_id="r")
    ran: list[str] = []
    model = Repeating("c1", tool_turns=1)
    agent = Agent(FunctionModel(model), capabilities=[SafepointCapability(run)])
    started, release = asyncio.Event(), asyncio.Event()

    @agent.tool_plain
    async def note(text: str) -> str:
        """Note a line (not idempotent)."""
        started.set()
        await release.wait()
        ran.append(text)
        return f"noted {text}"

    async def twice() -> list[str]:
        first = asyncio.ensure_future(agent.run("a"))
        await started.wait()  # the first run's call is live; its turn is recorded
        second = asyncio.ensure_future(agent.run("a"))
        for _ in range(50):  # the second run gets as far as it can: to the same call
            await asyncio.sleep(0)
        release.set()
        return [r.output for r in await asyncio.gather(first, second)]

    assert asyncio.run(twice()) == ["done a", "done a"]
    assert ran == ["a0"]
    assert model.turns.count(0) == 1  # the call's turn paid once (the answer: by each run, or replayed)
    run.close()


class Booking(BaseModel):
    ref: str
    seats: int


def test_a_tool_returning_a_pydantic_model_is_recorded_succeeded_and_answered_from_the_record(tmp_path: Path) -> None:
    """Pydantic AI tools return models (its docs do): the ledger's encoder refused them after the tool ran, so the
    call was recorded ``failed`` and the agent run broke. Kept as JSON now; the live run gets the model itself, a
    re-run the recorded JSON, and the tool runs once. A generator (serializing would consume it) is kept as text."""
    sp = safepoint.open(None, workspace=tmp_path)
    run = sp.start("go", builtins=False, run_id="r")
    booked: list[str] = []
    shown: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(1 for m in messages if m.kind == "response")
        if turn == 0:
            return ModelResponse(
                parts=[
                    ToolCallPart("book", {"ref": "r1"}, tool_call_id="b1"),
                    ToolCallPart("seats", {}, tool_call_id="s1"),
                ]
            )
        shown.extend(str(p.model_response_str()) for p in messages[-1].parts if hasattr(p, "model_response_str"))
        return ModelResponse(parts=[TextPart("done")])

    def build(run: safepoint.Run) -> Agent[None, str]:
        agent = Agent(FunctionModel(script), capabilities=[SafepointCapability(run)])

        @agent.tool_plain
        def book(ref: str) -> Booking:
            """Book (not idempotent)."""
            booked.append(ref)
            return Booking(ref=ref, seats=2)

        @agent.tool_plain
        def seats() -> Any:
            """The free seats, one at a time."""
            return (n for n in (1, 2))

        return agent

    assert build(run).run_sync("go").output == "done"
    assert booked == ["r1"]
    assert {e.call_id: e.status for e in sp.ledger("r")} == {"pai-0-b1": "succeeded", "pai-0-s1": "succeeded"}
    assert '{"ref":"r1","seats":2}' in shown
    run.close()
    run = sp.resume("r", builtins=False)
    assert build(run).run_sync("go").output == "done"
    assert booked == ["r1"]  # answered from the record, not booked again
    run.close()
