"""Pydantic AI on the tool ledger: ``Agent(model, capabilities=[SafepointCapability(run)])`` (extra ``pydantic-ai``).

::

    sp = safepoint.open(None, workspace=".")
    run = sp.start("book the trip", builtins=False)          # after a crash: sp.resume(run_id, builtins=False)
    ledger = SafepointCapability(run, tools={"pay": ToolPolicy(replay_policy="never", needs_approval=True)})
    agent = Agent(model, capabilities=[ledger], output_type=[str, DeferredToolRequests])
    result = agent.run_sync("book it")                        # the same prompt again after a crash

One capability does three things:

- **Model turns are recorded.** Each model response is durable in the run's history (before any of its tool calls
  runs) and, when the agent is run again after a crash, the recorded responses are handed back in order instead of
  asking the model: a resumed run does not pay for them twice. The turn is recognised by its position, so the
  resumed run must start as the interrupted one did (same prompt, same message history).
- **Every tool call goes through the ledger** (``Run.acall``), under the call id ``pai-<turn>-<tool_call_id>``: the
  model's tool call id, with the turn that asked for it, because models such as ``TestModel`` repeat their ids
  from one response to the next. A finished call returns its recorded value; an interrupted one is re-run only as
  its ``ToolPolicy`` allows (default: the cautious one, ``non_idempotent``/``ask``): ``sp.resume`` raises
  ``DecisionNeeded`` until a person says ``replay`` or ``skip``.
- **Approvals are bound to arguments and used once** (pydantic-ai #5536: an approved tool re-ran on a retry). A
  tool that needs approval (``requires_approval=True``, or ``ToolPolicy(needs_approval=True)``) runs only when
  Pydantic AI says the call was approved *and* the arguments it runs with have the digest that was approved: the
  arguments of the call as the person saw it in ``DeferredToolRequests`` (or, when approving with
  ``ToolApproved(override_args=...)``, the digest passed as ``DeferredToolResults.metadata[id]
  ["safepoint_args_digest"]``, see ``args_digest``). An approval is consumed by the first call that uses it: the
  same approval presented again by another call asks again (``ApprovalRequired``) instead of running.

Rejected: a ``WrapperToolset`` (it sees tool calls but not model turns, and it must be added to every toolset).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from pydantic_ai import ApprovalRequired, ModelMessagesTypeAdapter, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_jsonable_python

from safepoint.engine.tools import ToolContext, tool
from safepoint.errors import ToolFailure
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel
from safepoint.run import Run

TURN = "pydantic-ai-turn"  # the name on the history message that holds one recorded model response
APPROVAL_USED = "[pydantic-ai] approval used "  # "<tool_call_id> <digest> <call id>"
_encoder = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True)
class ToolPolicy:
    """How a tool may be repeated (§8.7); the defaults are safepoint's cautious ones."""

    idempotency: Idempotency = "non_idempotent"
    replay_policy: ReplayPolicy = "ask"
    risk_level: RiskLevel = "medium"
    needs_approval: bool = False


def args_digest(args: dict[str, Any]) -> str:
    """The digest an approval is bound to: SHA-256 of the arguments as canonical JSON."""
    return "sha256:" + hashlib.sha256(_encoder.encode(to_jsonable_python(args))).hexdigest()


class SafepointCapability(AbstractCapability[Any]):
    """Ledgers every tool call of the agent it is given to, records its model turns and binds its approvals."""

    def __init__(
        self, run: Run, *, tools: dict[str, ToolPolicy] | None = None, default: ToolPolicy | None = None
    ) -> None:
        self.run = run
        self.policies = dict(tools or {})
        self.default = default or ToolPolicy()
        self.recorded = [m.content for m in run.history if m.role == "assistant" and m.name == TURN]
        self.turn = 0  # the next model turn's position in this run
        self.turn_of: dict[str, int] = {}  # tool call id -> the turn whose response asked for it (the latest)
        self.asked: dict[str, str] = {}  # tool call id -> the digest of the arguments the model asked with
        self.handlers: dict[str, Callable[[], Awaitable[Any]]] = {}  # call id -> the live call's handler
        self.failures: dict[str, BaseException] = {}  # call id -> what the tool raised, to raise it again
        self.used: dict[str, tuple[str, str]] = {}  # tool call id -> (approved digest, the call id that used it)
        for message in run.history:
            if message.role == "system" and message.content.startswith(APPROVAL_USED):
                tool_call_id, digest, call_id = message.content[len(APPROVAL_USED) :].split(" ")
                self.used[tool_call_id] = (digest, call_id)

    # model turns -------------------------------------------------------------------------------------------------
    async def wrap_model_request(self, ctx: RunContext[Any], *, request_context: Any, handler: Any) -> ModelResponse:
        turn, self.turn = self.turn, self.turn + 1
        if turn < len(self.recorded):
            response = ModelMessagesTypeAdapter.validate_json(self.recorded[turn])[0]
            assert isinstance(response, ModelResponse)
        else:
            # A turn is a step of the run: its before-step checkpoint covers what came before (the last turn's tool
            # results), its after-step checkpoint the response, so a resume keeps it in the history it restores
            # (rejected: a bare commit, which a resume rewinds past) and it is durable before its tools run.
            await self.run.astep()  # off the loop, as the checkpoint below (their fsyncs)
            response = await handler(request_context)
            data = ModelMessagesTypeAdapter.dump_json([response]).decode()
            await self.run.aadd_message("assistant", data, name=TURN)
            await self.run.acheckpoint()
            self.recorded.append(data)
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                self.turn_of[part.tool_call_id] = turn
                self.asked[part.tool_call_id] = args_digest(part.args_as_dict())
        return response

    # tool calls --------------------------------------------------------------------------------------------------
    def call_id(self, call: ToolCallPart) -> str:
        turn = self.turn_of.get(call.tool_call_id)
        return f"pai-{'h' if turn is None else turn}-{call.tool_call_id}"

    def policy(self, name: str) -> ToolPolicy:
        return self.policies.get(name, self.default)

    def check_approval(self, ctx: RunContext[Any], call: ToolCallPart, call_id: str, args: dict[str, Any]) -> None:
        """Raise ``ApprovalRequired`` unless this call was approved for these very arguments, by an approval no
        other call used."""
        digest = args_digest(args)
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"safepoint_args_digest": digest, "call_id": call_id})
        metadata = ctx.tool_call_metadata if isinstance(ctx.tool_call_metadata, dict) else {}
        # What the person saw is the call as the model asked for it (Pydantic AI hands the hooks a call whose
        # arguments an override has replaced already, so ``call.args`` cannot tell).
        shown = self.asked.get(call.tool_call_id) or args_digest(call.args_as_dict())
        approved = metadata.get("safepoint_args_digest") or shown
        if approved != digest:
            raise ApprovalRequired(
                metadata={
                    "safepoint_args_digest": digest,
                    "call_id": call_id,
                    "why": "approved for other arguments; approve these",
                }
            )
        earlier = self.used.get(call.tool_call_id)
        if earlier is not None and earlier[1] != call_id:
            raise ApprovalRequired(
                metadata={"safepoint_args_digest": digest, "call_id": call_id, "why": f"approval used by {earlier[1]}"}
            )
        if earlier is None:
            self.used[call.tool_call_id] = (digest, call_id)
            # Staged: durable with the call's `started`, so a used approval and the call that used it go together.
            self.run.add_message("system", f"{APPROVAL_USED}{call.tool_call_id} {digest} {call_id}")

    def register(self, name: str) -> None:
        policy = self.policy(name)

        async def invoke(ctx: ToolContext, /, **arguments: Any) -> Any:
            try:
                return await self.handlers[ctx.call_id]()
            except Exception as exc:
                self.failures[ctx.call_id] = exc  # recorded as failed; raised again to the agent as it was
                raise

        made = tool(
            name=name,
            idempotency=policy.idempotency,
            replay_policy=policy.replay_policy,
            risk_level=policy.risk_level,
            side_effects=("pydantic-ai",),
        )(invoke)
        registry = self.run.session.registry
        if name not in registry or registry.get(name).definition != made.definition:
            registry.put(made)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Any:
        name = tool_def.name
        call_id = self.call_id(call)
        if self.policy(name).needs_approval or tool_def.kind == "unapproved":
            self.check_approval(ctx, call, call_id, args)
        self.register(name)
        self.handlers[call_id] = lambda: handler(args)
        try:
            result = await self.run.acall_result(name, to_jsonable_python(args), call_id=call_id)
        finally:
            self.handlers.pop(call_id, None)
        failure = self.failures.pop(call_id, None)
        if result.status == "succeeded":
            return result.value
        if failure is not None:
            raise failure  # this run's own failure, as the tool raised it (a ModelRetry asks the model again)
        text = result.observation
        if result.status == "failed" and text.startswith("error: ModelRetry: "):
            raise ModelRetry(text.removeprefix("error: ModelRetry: "))  # recorded before a crash: the same retry
        if result.status == "failed":
            raise ToolFailure(text.removeprefix("error: "))
        return text  # uncertain, not run again: the model is told what is known
