"""The model behind the loop. A provider turns a context into one assistant turn (text and tool calls)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tidemark.errors import ScenarioError
from tidemark.records import Message, ToolCall, ToolDefinition
from tidemark.runtime.scenario import Scenario


@dataclass(frozen=True)
class Context:
    """What the model sees: the system region (with recovery notes at high priority) and the conversation."""

    system: str
    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)


@dataclass(frozen=True)
class ModelTurn:
    text: str
    tool_calls: list[ToolCall]


class OutputStream(Protocol):
    """Where a provider sends the text of a turn as it is generated, for the user to see. The agent's stream
    records ``visible_output_started`` durably before the first character goes out (seed 003 §4.1)."""

    def text(self, chunk: str) -> None: ...


class Provider(Protocol):
    model: str

    def complete(self, context: Context, turn: int, stream: OutputStream | None = None) -> ModelTurn: ...


class ScriptedProvider:
    """Plays a scenario turn by turn; after a resume it continues with the turn after the last completed one."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.model = scenario.model
        self.contexts: list[Context] = []

    def complete(self, context: Context, turn: int, stream: OutputStream | None = None) -> ModelTurn:
        self.contexts.append(context)
        if turn >= len(self.scenario.turns):
            return ModelTurn(text="(end of script)", tool_calls=[])
        scripted = self.scenario.turns[turn]
        seen = context.system + "\n" + "\n".join(message.content for message in context.messages)
        for expected in scripted.expect_in_context:
            if expected not in seen:
                raise ScenarioError(f"turn {turn + 1} expects {expected!r} in the model's context, and it is not there")
        if stream is not None and scripted.streamed and scripted.text:
            # A streamed turn shows its text in two pieces, so a fault point can fall between them.
            half = max(1, len(scripted.text) // 2)
            stream.text(scripted.text[:half])
            stream.text(scripted.text[half:])
        return ModelTurn(text=scripted.text, tool_calls=self.scenario.calls(turn))
