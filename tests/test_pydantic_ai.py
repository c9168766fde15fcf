"""Pydantic AI on the ledger (``safepoint.integrations.pydantic_ai``), offline with its own TestModel/FunctionModel.

A run interrupted in a tool (an exception, or a SIGKILL of a child process) and run again never runs the
non-idempotent tool twice nor pays for a recorded model turn again; an approval counts only for the arguments it
was given for, and only once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import safepoint
from safepoint.errors import DecisionNeeded
from safepoint.integrations.pydantic_ai import SafepointCapability, ToolPolicy, args_digest

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")


class Script:
    """A FunctionModel's script: turn 0 asks for ``append_line``, turn 1 answers. Counts the turns paid for."""

    def __init__(self, notes: Path, crash_at_turn: int | None = None) -> None:
        self.notes = notes
        self.paid = 0
        self.crash_at_turn = crash_at_turn

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.paid += 1
        turn = sum(1 for m in messages if m.kind == "response")
        if turn == self.crash_at_turn:
            if os.environ.get("SP_TEST_CHILD"):
                os.kill(os.getpid(), signal.SIGKILL)
            raise KeyboardInterrupt  # the process stops here: the turn is not recorded
        if turn == 0:
            return ModelResponse(
                parts=[ToolCallPart("append_line", {"path": str(self.notes), "text": "a"}, tool_call_id="c1")]
            )
        return ModelResponse(parts=[TextPart("done")])


def agent_for(run: safepoint.Run, script: Script, *, crash_in_tool: bool = False) -> Agent[None, str]:
    agent = Agent(FunctionModel(script), capabilities=[SafepointCapability(run)])

    @agent.tool_plain
    def append_line(path: str, text: str) -> str:
        """Append a line (not idempotent)."""
        with open(path, "a") as f:
            f.write(text + "\n")
        if crash_in_tool:
            if os.environ.get("SP_TEST_CHILD"):
                os.kill(os.getpid(), signal.SIGKILL)
            raise KeyboardInterrupt  # not a tool failure: the process stops with the effect done
        return f"appended {text}"

    return agent


def child(ws: str, notes: str, where: str) -> None:
    """A child process's run (killed inside, at ``where``)."""
    sp = safepoint.open(None, workspace=ws)
    run = sp.start("go", builtins=False, run_id="r")
    script = Script(Path(notes), crash_at_turn=1 if where == "turn" else None)
    agent_for(run, script, crash_in_tool=where == "tool").run_sync("go")


def start(tmp_path: Path) -> tuple[safepoint.Safepoint, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    return safepoint.open(None, workspace=str(ws)), tmp_path / "notes.txt"


def test_calls_are_ledgered_under_the_turn_and_the_tool_call_id(tmp_path: Path) -> None:
    sp, _ = start(tmp_path)
    run = sp.start("go", builtins=False)
    agent = Agent(TestModel(call_tools=["add"]), capabilities=[SafepointCapability(run)])

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    agent.run_sync("one")
    agent.run_sync("two")  # TestModel repeats its tool call ids: the turn keeps the calls apart
    ids = [e.call_id for e in sp.ledger(run.run_id)]
    assert ids == ["pai-0-pyd_ai_tool_call_id__add", "pai-2-pyd_ai_tool_call_id__add"]
    assert all(e.status == "succeeded" for e in sp.ledger(run.run_id))
    assert sum(1 for m in run.history if m.name == "pydantic-ai-turn") == 4
    run.close()


def test_an_exception_mid_tool_then_resume_runs_it_once_and_pays_no_turn_twice(tmp_path: Path) -> None:
    sp, notes = start(tmp_path)
    run = sp.start("go", builtins=False, run_id="r")
    first = Script(notes)
    with pytest.raises(KeyboardInterrupt):
        agent_for(run, first, crash_in_tool=True).run_sync("go")
    run.close()
    assert first.paid == 1 and notes.read_text() == "a\n"

    with pytest.raises(DecisionNeeded, match="pai-0-c1"):  # non_idempotent, ask: a person decides
        sp.resume("r", builtins=False)
    run = sp.resume("r", builtins=False, skip=["pai-0-c1"])
    again = Script(notes)
    assert agent_for(run, again).run_sync("go").output == "done"
    assert notes.read_text() == "a\n"  # never twice
    assert again.paid == 1  # turn 0 came from the record; only turn 1 was asked for
    run.close()


def test_a_finished_call_is_taken_from_the_ledger_after_a_crash(tmp_path: Path) -> None:
    sp, notes = start(tmp_path)
    run = sp.start("go", builtins=False, run_id="r")
    first = Script(notes, crash_at_turn=1)
    with pytest.raises(KeyboardInterrupt):
        agent_for(run, first).run_sync("go")
    run.close()
    run = sp.resume("r", builtins=False)  # nothing uncertain: no decision needed
    again = Script(notes)
    result = agent_for(run, again).run_sync("go")
    assert result.output == "done" and notes.read_text() == "a\n" and again.paid == 1
    returned = [p for m in result.all_messages() for p in m.parts if p.part_kind == "tool-return"]
    assert [p.content for p in returned] == ["appended a"]  # the recorded value, handed back
    run.close()


def test_a_child_killed_mid_tool_resumes_with_the_effect_once(tmp_path: Path) -> None:
    where = "tool"  # (killed at a model turn after the tool: test_a_finished_call_..., without a process)
    sp, notes = start(tmp_path)
    code = (
        f"import sys; sys.path[:0] = [{SRC!r}, {str(HERE)!r}]; import test_pydantic_ai as t; "
        f"t.child({str(tmp_path / 'ws')!r}, {str(notes)!r}, {where!r})"
    )
    env = {**os.environ, "SP_TEST_CHILD": "1", "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert notes.read_text() == "a\n"
    with pytest.raises(DecisionNeeded, match="pai-0-c1"):  # killed in the tool: uncertain, a person decides
        sp.resume("r", builtins=False)
    run = sp.resume("r", builtins=False, skip=["pai-0-c1"])
    again = Script(notes)
    assert agent_for(run, again).run_sync("go").output == "done"
    assert notes.read_text() == "a\n" and again.paid == 1
    run.close()


def transfer_agent(run: safepoint.Run, sent: list[int]) -> Agent[None, str | DeferredToolRequests]:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(m.kind == "response" for m in messages):
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 10}, tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("ok")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(script),
        capabilities=[SafepointCapability(run, tools={"transfer": ToolPolicy(replay_policy="never")})],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain(requires_approval=True)
    def transfer(amount: int) -> str:
        sent.append(amount)
        return f"sent {amount}"

    return agent


def test_an_approval_counts_for_its_arguments_only_and_only_once(tmp_path: Path) -> None:
    sp, _ = start(tmp_path)
    run = sp.start("go", builtins=False)
    sent: list[int] = []
    agent = transfer_agent(run, sent)
    asked = agent.run_sync("pay")
    assert isinstance(asked.output, DeferredToolRequests) and [c.tool_call_id for c in asked.output.approvals] == ["t1"]
    history = asked.all_messages()

    def approve(approval: Any, metadata: dict[str, Any] | None = None) -> Any:
        results = DeferredToolResults(approvals={"t1": approval}, metadata=metadata or {})
        return agent.run_sync(message_history=history, deferred_tool_results=results).output

    # Approved, but for other arguments than the ones that would run: asked again, nothing sent.
    other = approve(ToolApproved(override_args={"amount": 999}))
    assert isinstance(other, DeferredToolRequests) and sent == []
    assert other.metadata["t1"]["safepoint_args_digest"] == args_digest({"amount": 999})
    # Approved as shown: runs once.
    assert approve(True) == "ok" and sent == [10]
    # The same approval presented again (a retry, pydantic-ai #5536): the recorded call, never a second transfer.
    assert approve(True) == "ok" and sent == [10]
    [entry] = sp.ledger(run.run_id)
    assert entry.call_id == "pai-0-t1" and entry.status == "succeeded"
    run.close()


def test_an_approval_with_changed_arguments_runs_when_its_digest_was_approved(tmp_path: Path) -> None:
    sp, _ = start(tmp_path)
    run = sp.start("go", builtins=False)
    sent: list[int] = []
    agent = transfer_agent(run, sent)
    history = agent.run_sync("pay").all_messages()
    results = DeferredToolResults(
        approvals={"t1": ToolApproved(override_args={"amount": 20})},
        metadata={"t1": {"safepoint_args_digest": args_digest({"amount": 20})}},
    )
    assert agent.run_sync(message_history=history, deferred_tool_results=results).output == "ok"
    assert sent == [20]
    run.close()


def test_an_approval_used_by_one_call_does_not_count_for_another(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from pydantic_ai import ApprovalRequired

    sp, _ = start(tmp_path)
    run = sp.start("go", builtins=False)
    capability = SafepointCapability(run)
    call = ToolCallPart("transfer", {"amount": 10}, tool_call_id="t1")
    approved = SimpleNamespace(tool_call_approved=True, tool_call_metadata=None)
    capability.check_approval(approved, call, "pai-0-t1", {"amount": 10})  # type: ignore[arg-type]  # a stand-in
    capability.check_approval(approved, call, "pai-0-t1", {"amount": 10})  # type: ignore[arg-type]  # the same call
    # A later call with the same tool call id (models repeat them) presenting the approval: asked again.
    with pytest.raises(ApprovalRequired):
        capability.check_approval(approved, call, "pai-3-t1", {"amount": 10})  # type: ignore[arg-type]
    run.checkpoint()  # in a real run the call's own `started` and tool-start checkpoint follow at once
    run.close()
    # The use is durable: a resumed run's capability knows it too.
    again = SafepointCapability(sp.resume(run.run_id, builtins=False))
    with pytest.raises(ApprovalRequired):
        again.check_approval(approved, call, "pai-3-t1", {"amount": 10})  # type: ignore[arg-type]
    again.run.close()


def test_the_example_runs_and_pays_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    path = HERE.parent / "examples" / "pydantic_ai_agent.py"
    spec = importlib.util.spec_from_file_location("pydantic_ai_agent", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(str(tmp_path))
    example.paid = 0
    example.main(str(tmp_path))  # the same run again: everything from the ledger
    out = capsys.readouterr().out
    assert "paid for: 2" in out and out.rstrip().endswith("(model turns paid for: 0)\nhello")
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
