"""An OpenAI Agents SDK agent on safepoint's store, offline (a scripted ``Model``): a run that waits for approval
survives its process.

    pip install 'safepoint[openai-agents]'
    python examples/openai_agents_session.py WORKSPACE           # appends a line, then waits to send it
    python examples/openai_agents_session.py WORKSPACE approve   # another process: approves and finishes

The first process appends to notes.txt (ledgered), then the model asks to send the notes, a tool that needs
approval: the run stops, and its ``RunState`` is kept in the store. The second process loads it, approves, and the
run finishes: the append is not done again, the model's earlier turns are not asked for again.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

import safepoint
from safepoint.integrations.openai_agents import SafepointSession
from safepoint.integrations.openai_agents_tools import ToolPolicy, durable_model, durable_tools, run_durably

set_tracing_disabled(True)  # offline: no trace export
paid = 0


class Scripted(Model):
    """Asks for the tools, one turn each, then answers; what it says depends only on what it was asked."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        global paid
        paid += 1
        items = [item for item in input if isinstance(item, dict)]
        done = {item.get("call_id") for item in items if item.get("type") == "function_call_output"}
        if "call_append" not in done:
            output = [function_call("append_line", {"text": "hello"}, call_id="call_append")]
        elif "call_send" not in done:
            output = [function_call("send_notes", {"to": "team@example.com"}, call_id="call_send")]
        else:
            output = [assistant_message("sent")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


def agent_for(session: SafepointSession, notes: Path) -> Agent[Any]:
    @function_tool
    def append_line(text: str) -> str:
        """Append a line to notes.txt."""
        with notes.open("a") as f:
            f.write(text + "\n")
        return f"appended {text}"

    @function_tool(needs_approval=True)
    def send_notes(to: str) -> str:
        """Send the notes (a person approves first)."""
        return f"sent {notes.read_text().count(chr(10))} line(s) to {to}"

    policies = {"send_notes": ToolPolicy(replay_policy="never")}  # never sent twice, even if a person asks
    tools = durable_tools(session, [append_line, send_notes], policies=policies)
    return Agent(name="notes", model=durable_model(session, Scripted()), tools=tools)


async def main(workspace: str, approve: bool = False) -> None:
    sp = safepoint.open(None, workspace=workspace)
    notes = Path(workspace, "notes.txt")
    with SafepointSession.open(sp, "notes-example") as session:
        agent = agent_for(session, notes)
        state = await session.load_state(agent)
        if state is None:
            result = await run_durably(agent, "append hello, then send the notes", session=session)
        elif approve:
            for item in state.get_interruptions():
                state.approve(item)
            result = await run_durably(agent, state, session=session)
        else:
            result = None
            print("still waiting; run again with `approve`")
        if result is not None and result.interruptions:
            waiting = ", ".join(f"{i.name}({i.raw_item.arguments})" for i in result.interruptions)
            print(f"waiting for approval: {waiting}; run again with `approve` (model turns paid for: {paid})")
        elif result is not None:
            print(result.final_output, f"(model turns paid for: {paid})")
    print(notes.read_text(), end="")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else ".", approve=sys.argv[2:3] == ["approve"]))
