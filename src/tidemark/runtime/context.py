"""The context builder: recovery notes go to the high-priority region (the system part), ahead of the history."""

from __future__ import annotations

from collections.abc import Sequence

from tidemark.records import Message, ToolDefinition
from tidemark.runtime.provider import Context

RECOVERY_NOTE = "recovery_note"
DEFAULT_SYSTEM = "You are a careful coding agent. Use the tools to do the task, then answer without tool calls."


def build_context(history: Sequence[Message], *, system: str = "", tools: Sequence[ToolDefinition] = ()) -> Context:
    notes = [message for message in history if message.name == RECOVERY_NOTE]
    region = system or DEFAULT_SYSTEM
    if notes:
        region += "\n\n## Recovery note (read this first)\n" + notes[-1].content
    conversation = [message for message in history if message.name != RECOVERY_NOTE]
    return Context(system=region, messages=conversation, tools=list(tools))
