"""Pydantic AI on the tool ledger: ``Agent(model, capabilities=[SafepointCapability(run)])`` (extra ``pydantic-ai``).

::

    sp = safepoint.open(None, workspace=".")
    run = sp.start("book the trip", builtins=False)          # after a crash: sp.resume(run_id, builtins=False)
    ledger = SafepointCapability(run, tools={"pay": ToolPolicy(replay_policy="never", needs_approval=True)})
    agent = Agent(model, capabilities=[ledger], output_type=[str, DeferredToolRequests])
    result = agent.run_sync("book it")                        # the same prompt again after a crash

One capability does three things:

- **Model turns are recorded.** Each model response is durable in the run's history (before any of its tool calls
  runs) under the digest of what the model was asked (each message's parts as the log keeps them, redacted;
  timestamps and other metadata left out), with the digests of the arguments of the calls it asked for. When the
  same request comes again (the agent run again after a crash), the recorded response is handed back instead of
  asking the model: a resumed run does not pay for it twice. A request that differs (another question, the turn
  after an approval given in a later process) is asked of the model (rejected: finding turns by position, which
  answered a new question with an old record and replayed the approval request forever).
- **Every tool call goes through the ledger** (``Run.acall``), under the call id ``pai-<turn>-<tool_call_id>``: the
  model's tool call id, with the turn that asked for it, because models such as ``TestModel`` repeat their ids
  from one response to the next (and some send empty ones). Each agent run keeps its own map of ids to turns
  (``for_run``): two runs sharing the capability at once, their models repeating ids, never take each other's turn
  (rejected: one map for all runs, where the later response's turn named the earlier run's call, which then met
  another call's record). A turn's number is taken before any await and written in its record, so a run read back
  numbers its turns as they were numbered live, whatever order concurrent writes reached the log in. The same
  ledger call made twice at once (the same request run twice, answered from one record) waits for the first one
  (``Flights``) and takes its outcome, instead of losing its handler to it. A finished call returns its recorded
  value; an interrupted one is re-run only as its ``ToolPolicy`` allows (default: the cautious one,
  ``non_idempotent``/``ask``): ``sp.resume`` raises ``DecisionNeeded`` until a person says ``replay`` or ``skip``.
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

import copy
import hashlib
import itertools
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from pydantic_ai import ApprovalRequired, CallToolsNode, ModelMessagesTypeAdapter, ModelRetry, RunContext, ToolDenied
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_jsonable_python

from safepoint.core.resume import model_call_id
from safepoint.engine.log_writer import REDACTED_MARK
from safepoint.engine.tools import ToolContext, tool
from safepoint.errors import ToolFailure
from safepoint.integrations.flights import Flights
from safepoint.integrations.recorded_values import recordable
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel
from safepoint.run import Run

TURN = "pydantic-ai-turn"  # a recorded model response: JSON {"key", "asked": {tool_call_id: digest}, "response"}
DENIED = "pydantic-ai-denied"  # "<call id>": a person denied the call; no later approval runs it
APPROVAL_USED = "[pydantic-ai] approval used "  # "<tool_call_id> <digest> <call id>"
NOT_RUN = "[safepoint] {tool}({call_id}) did not run: {why}."
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
        self.recorded: dict[str, tuple[int, str, dict[str, str]]] = {}  # request key -> (turn, response, asked)
        self.count = 0  # turns read back: the next one's number (live turns draw from ``_numbers``)
        self._numbers: Iterator[int] = iter(())  # shared by every agent run's copy (``for_run``)
        self.flights = Flights()  # one live run of a ledger call id at a time, across this capability's runs
        self.turn_of: dict[str, int] = {}  # tool call id -> the turn whose response asked for it (the latest)
        self.asked: dict[str, str] = {}  # tool call id -> the digest of the arguments the model asked with
        # The same two maps for the turns of this agent run alone (``for_run``), asked first: a call's own run's turn,
        # whatever another run's model said meanwhile under the same id. The shared ones answer a run that goes on
        # from a history (an approval given in a later run).
        self.mine: dict[str, int] = {}
        self.mine_asked: dict[str, str] = {}
        self.handlers: dict[str, Callable[[], Awaitable[Any]]] = {}  # call id -> the live call's handler
        self.failures: dict[str, BaseException] = {}  # call id -> what the tool raised, to raise it again
        self.live: dict[str, Any] = {}  # call id -> what the tool returned, when the ledger keeps another form of it
        self.used: dict[str, dict[str, str]] = {}  # tool call id -> {ledger call id: the approved digest it ran under}
        self.denied: set[str] = set()  # ledger call ids a person denied
        self._digests: dict[bytes, str] = {}  # digest of a message's parts -> digest of their redacted text
        # Every message the log holds, not the conversation a resume rewinds to: a record is durable once written.
        for message in run.session.lifetime_said():
            if message.name == TURN:
                self._learn(message.content)
            elif message.name == DENIED:
                self.denied.add(message.content)
            elif message.role == "system" and message.content.startswith(APPROVAL_USED):
                tool_call_id, digest, call_id = message.content[len(APPROVAL_USED) :].split(" ")
                self.used.setdefault(tool_call_id, {}).setdefault(call_id, digest)
        self._numbers = itertools.count(self.count)  # next() is atomic: two runs never draw one number

    async def for_run(self, ctx: RunContext[Any]) -> SafepointCapability:
        """This agent run's view: the records, approvals, handlers and flights shared, the map of its tool call ids
        to turns its own (see the module docstring)."""
        view = copy.copy(self)
        view.mine, view.mine_asked = {}, {}
        return view

    def _learn(self, content: str) -> tuple[int, str, dict[str, str]] | None:
        """A recorded turn read back: known by its request, and its calls by their ids (the latest turn wins)."""
        try:
            data = json.loads(content)
            key, response, asked = data["key"], data["response"], data["asked"]
        except (ValueError, KeyError, TypeError):
            return None  # a record of the positional format before it: matched by no request, so never replayed
        turn = data.get("turn", self.count)  # a record before numbered records: its place in the log
        if not isinstance(turn, int) or turn < 0:
            return None
        entry = (turn, str(response), {str(k): str(v) for k, v in dict(asked).items()})
        self.recorded.setdefault(str(key), entry)
        for tool_call_id, digest in entry[2].items():
            self.turn_of[tool_call_id] = turn
            self.asked[tool_call_id] = digest
        self.count = max(self.count, turn + 1)
        return entry

    # model turns -------------------------------------------------------------------------------------------------
    def request_key(self, messages: list[ModelMessage]) -> str:
        """What identifies a request: each message's kind, instructions and parts (kind, content, tool name, call
        id, arguments), as the log keeps them (redacted: a replayed response holds redacted arguments, and the
        next request carries it). Timestamps, run ids and usage are left out: they differ in every process.
        Each message is redacted once and remembered by its digest (a turn redacts only the messages it adds)."""
        parts = []
        for message in messages:
            plain = {
                "kind": message.kind,
                "instructions": getattr(message, "instructions", None),
                "parts": [
                    [
                        part.part_kind,
                        getattr(part, "tool_name", None),
                        getattr(part, "tool_call_id", None),
                        to_jsonable_python(getattr(part, "content", None), fallback=repr),
                        to_jsonable_python(getattr(part, "args", None), fallback=repr),
                    ]
                    for part in message.parts
                ],
            }
            raw = _encoder.encode(plain)
            digest = hashlib.sha256(raw).digest()
            known = self._digests.get(digest)
            if known is None:
                text = str(self.run.session.log.redactor.text(raw.decode("utf-8", "surrogatepass")))
                known = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
                self._digests[digest] = known
            parts.append(known)
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    async def wrap_model_request(self, ctx: RunContext[Any], *, request_context: Any, handler: Any) -> ModelResponse:
        key = self.request_key(list(request_context.messages))
        entry = self.recorded.get(key)
        if entry is not None:
            turn, data, asked = entry
            response = ModelMessagesTypeAdapter.validate_json(data)[0]
            assert isinstance(response, ModelResponse)
        else:
            # A turn is a step of the run: its before-step checkpoint covers what came before (the last turn's tool
            # results), its after-step checkpoint the response, so a resume keeps it in the history it restores
            # (rejected: a bare commit, which a resume rewinds past) and it is durable before its tools run.
            await self.run.astep()  # off the loop, as the checkpoint below (their fsyncs)
            response = await handler(request_context)
            data = ModelMessagesTypeAdapter.dump_json([response]).decode()
            asked = {
                p.tool_call_id: args_digest(p.args_as_dict()) for p in response.parts if isinstance(p, ToolCallPart)
            }
            turn = next(self._numbers)  # before any await: another run's turn written first keeps its own number
            record = json.dumps({"key": key, "asked": asked, "response": data, "turn": turn}, separators=(",", ":"))
            await self.run.aadd_message("assistant", record, name=TURN)
            await self.run.acheckpoint()
            self.recorded.setdefault(key, (turn, data, asked))
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                self.turn_of[part.tool_call_id] = self.mine[part.tool_call_id] = turn
                # The digest of the arguments as the model asked (recorded before redaction, so a replayed turn
                # whose arguments lost a secret still binds its approval to the real ones).
                digest = asked.get(part.tool_call_id) or args_digest(part.args_as_dict())
                self.asked[part.tool_call_id] = self.mine_asked[part.tool_call_id] = digest
        return response

    async def before_node_run(self, ctx: RunContext[Any], *, node: Any) -> Any:
        """A person's ``ToolDenied`` is kept durably before the graph goes on: Pydantic AI never hands a denied
        call to the tool, so without this a stale copy of the history approved later would run it."""
        if isinstance(node, CallToolsNode) and node.tool_call_results:
            calls = {p.tool_call_id: p for p in node.model_response.parts if isinstance(p, ToolCallPart)}
            for tool_call_id, decided in node.tool_call_results.items():
                call = calls.get(tool_call_id)
                if isinstance(decided, ToolDenied) and call is not None and self.call_id(call) not in self.denied:
                    self.denied.add(self.call_id(call))
                    await self.run.aadd_message("system", self.call_id(call), name=DENIED)
                    await self.run.acheckpoint()
        return node

    # tool calls --------------------------------------------------------------------------------------------------
    def call_id(self, call: ToolCallPart) -> str:
        turn = self.mine.get(call.tool_call_id, self.turn_of.get(call.tool_call_id))
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
        shown = (
            self.mine_asked.get(call.tool_call_id)
            or self.asked.get(call.tool_call_id)
            or args_digest(call.args_as_dict())
        )
        approved = metadata.get("safepoint_args_digest") or shown
        if approved != digest:
            raise ApprovalRequired(
                metadata={
                    "safepoint_args_digest": digest,
                    "call_id": call_id,
                    "why": "approved for other arguments; approve these",
                }
            )
        uses = self.used.setdefault(call.tool_call_id, {})
        earlier = uses.get(call_id)
        if earlier is not None and earlier != digest:
            why = "its approval was used by other arguments; approve these"
            raise ApprovalRequired(metadata={"safepoint_args_digest": digest, "call_id": call_id, "why": why})
        # The same approval (tool call id, arguments) already used by another call: a stale approval presented
        # again (pydantic-ai #5536), asked again, unless the person approved this very call (its call id passed
        # back in the metadata the request carried). New arguments under a repeated id were shown and approved.
        other = next((c for c, d in uses.items() if c != call_id and d == digest), None)
        if earlier is None and other is not None and metadata.get("call_id") != call_id:
            why = f"approval used by {other}; approve this call"
            raise ApprovalRequired(metadata={"safepoint_args_digest": digest, "call_id": call_id, "why": why})
        if earlier is None:
            uses[call_id] = digest
            # Staged: durable with the call's `started`, so a used approval and the call that used it go together.
            self.run.add_message("system", f"{APPROVAL_USED}{call.tool_call_id} {digest} {call_id}")

    def register(self, name: str) -> None:
        policy = self.policy(name)

        async def invoke(ctx: ToolContext, /, **arguments: Any) -> Any:
            try:
                value = await self.handlers[ctx.call_id]()
            except Exception as exc:
                self.failures[ctx.call_id] = exc  # recorded as failed; raised again to the agent as it was
                raise
            kept, differs = recordable(value)  # a pydantic model, a generator: kept as JSON or text (see there)
            if differs:
                self.live[ctx.call_id] = value
            return kept

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
        if call_id in self.denied:
            return NOT_RUN.format(tool=name, call_id=call.tool_call_id, why="a person denied it")
        known = model_call_id(call_id) in self.run.session.ledger  # the id as the ledger keys it
        if not known and REDACTED_MARK in _encoder.encode(to_jsonable_python(args)).decode("utf-8", "replace"):
            # A recorded turn came back redacted: running it would send "[REDACTED:...]" where the value was.
            why = "its recorded arguments lost a secret to redaction; ask for it again with the value"
            return NOT_RUN.format(tool=name, call_id=call.tool_call_id, why=why)
        if self.policy(name).needs_approval or tool_def.kind == "unapproved":
            self.check_approval(ctx, call, call_id, args)
        self.register(name)
        async with self.flights.ahold(call_id):  # the same call live in another run: waited for, its outcome taken
            self.handlers[call_id] = lambda: handler(args)
            try:
                result = await self.run.acall_result(name, to_jsonable_python(args), call_id=call_id)
            finally:
                self.handlers.pop(call_id, None)
            failure = self.failures.pop(call_id, None)
            live = self.live.pop(call_id, result.value)
        if result.status == "succeeded":
            return live
        if failure is not None:
            raise failure  # this run's own failure, as the tool raised it (a ModelRetry asks the model again)
        text = result.observation
        if result.status == "failed" and text.startswith("error: ModelRetry: "):
            raise ModelRetry(text.removeprefix("error: ModelRetry: "))  # recorded before a crash: the same retry
        if result.status == "failed":
            raise ToolFailure(text.removeprefix("error: "))
        return text  # uncertain, not run again: the model is told what is known
