"""A Pydantic AI agent on the tool ledger, offline (a scripted ``FunctionModel``): run it twice, it pays once.

    pip install 'safepoint[pydantic-ai]'
    python examples/pydantic_ai_agent.py WORKSPACE          # run it again: the same run, nothing done twice

The first run records the model's turns and the tool's outcome; the second resumes the same run, gets both from
the ledger, and neither calls the model nor appends again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import safepoint
from safepoint.integrations.pydantic_ai import SafepointCapability, ToolPolicy

paid = 0


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    global paid
    paid += 1
    if not any(m.kind == "response" for m in messages):
        return ModelResponse(parts=[ToolCallPart("append_line", {"text": "hello"}, tool_call_id="call_1")])
    return ModelResponse(parts=[TextPart("done")])


def main(workspace: str) -> None:
    sp = safepoint.open(None, workspace=workspace)
    run_id = "pydantic-ai-example"
    # An existing run is resumed (a finished call is taken from the ledger; an uncertain one waits for a decision:
    # `sp.resume(run_id, builtins=False, skip=[...])`).
    run = (
        sp.resume(run_id, builtins=False)
        if run_id in sp.list_runs()
        else sp.start("greet", builtins=False, run_id=run_id)
    )
    notes = Path(workspace, "notes.txt")
    policy = ToolPolicy(idempotency="non_idempotent", replay_policy="ask", risk_level="medium")
    agent = Agent(FunctionModel(model), capabilities=[SafepointCapability(run, tools={"append_line": policy})])

    @agent.tool_plain
    def append_line(text: str) -> str:
        """Append a line to notes.txt."""
        with notes.open("a") as f:
            f.write(text + "\n")
        return f"appended {text}"

    with run:
        print(agent.run_sync("greet").output, f"(model turns paid for: {paid})")
    print(notes.read_text(), end="")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
