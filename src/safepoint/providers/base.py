"""The model behind the loop. A provider turns a context into one assistant turn (text and tool calls)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from safepoint.records import Message, ToolCall, ToolDefinition


@dataclass(frozen=True)
class Context:
    """What the model sees: the system region (with recovery notes at high priority) and the conversation."""

    system: str
    messages: Sequence[Message]  # a snapshot: the agent loop hands out a view, not a copy per turn
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
