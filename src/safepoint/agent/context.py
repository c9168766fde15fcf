"""The context builder: recovery notes go to the high-priority region (the system part), ahead of the history."""

from __future__ import annotations

from collections.abc import Sequence

from safepoint.protocol import SELF_HEALING
from safepoint.providers.base import Context
from safepoint.records import Message, ToolDefinition

RECOVERY_NOTE = "recovery_note"
DEFAULT_SYSTEM = "You are a careful coding agent. Use the tools to do the task, then answer without tool calls."


def build_context(history: Sequence[Message], *, system: str = "", tools: Sequence[ToolDefinition] = ()) -> Context:
    notes = [message for message in history if message.name == RECOVERY_NOTE]
    healing = [message for message in history if message.name == SELF_HEALING]
    region = system or DEFAULT_SYSTEM
    for message in healing:  # every subtask that stopped without a result, each once (seed 003 §5.2)
        region += "\n\n## A subtask stopped (read this first)\n" + message.content
    if notes:
        region += "\n\n## Recovery note (read this first)\n" + notes[-1].content
    conversation = [message for message in history if message.name not in (RECOVERY_NOTE, SELF_HEALING)]
    return Context(system=region, messages=conversation, tools=list(tools))
