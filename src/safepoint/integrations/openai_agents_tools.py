"""The OpenAI Agents SDK's tool calls on safepoint's tool ledger, and its model turns recorded (extra
``openai-agents``); the session they live in is ``safepoint.integrations.openai_agents``.

- ``durable_tools(session, [tool, ...], policies={"pay": ToolPolicy(replay_policy="never")})`` wraps each
  ``FunctionTool`` so every call goes through the run's ledger (``Run.acall_result``: the engine's ledger machine,
  not a second ledger) under **the SDK's tool call id** as its call id; the same id in a later recorded turn (a
  provider numbering calls per response, ``call_0`` every time) is a new call, ``<id>~<n>`` (``SafepointSession.
  ledger_id``), so it is run, not answered with the old call's output. ``started`` is durable before the tool
  runs; a call the ledger finished returns its recorded output and never runs again; a call a crash left
  ``started`` is never run again on its own: reopening the session raises ``DecisionNeeded`` naming it (the
  policy's ``replay_policy="ask"``, the default for a non-idempotent tool), and ``SafepointSession.open(...,
  skip=[id])`` or ``replay=[id]`` settles it as ``safepoint resume`` does. Rejected: surfacing it as an SDK
  approval (``needs_approval``): the decision must be taken before anything else is written to the run, including
  when no ``RunState`` was ever saved (a crash in a plain run), and "it may have happened: run it again?" is not
  the SDK's "may it run?". A decision still missing when the tool is reached raises ``ToolDecisionNeeded`` (a
  ``DecisionNeeded`` the SDK lets through unwrapped).
- **Approvals are bound to the arguments shown and used once.** A tool that needs approval (the SDK's own
  ``needs_approval``, or ``ToolPolicy(needs_approval=True)``) records durably, when the SDK asks whether the call
  needs approval, the digest of the arguments the person will be shown (``ToolApprovalItem.raw_item.arguments``).
  It runs only when the SDK says the call was approved, its arguments have that very digest, and no other call
  used the approval; the use is durable with the call's ``started``. The SDK's ``always_approve`` (every call of
  the tool, no arguments shown) is honoured for a tool whose approval the SDK asks for, and refused for one with
  ``ToolPolicy(needs_approval=True)``, which wants each call approved. The SDK keeps its own fingerprint in the
  ``RunState``; this one is in the store, so an approval survives a restart and a ``RunState`` edited or replayed
  by hand cannot run other arguments, or run twice (a replayed call id returns the recorded output). A per-call
  approval this session never asked for (a state run against another session) is refused; arguments that repeat a
  key are refused (the person reads the first value, the call would run the last); a rejection seen by
  ``run_durably`` is recorded durably, so a stale copy of the state approved later never runs the call.
- ``durable_model(session, model)`` records each model response (durable before any of its tool calls runs)
  under the digest of what the model was asked and the session's version, and hands it back when the same
  request comes again: a run resumed after a crash with ``Runner.run(agent, [], session=session)`` asks the model
  exactly what it asked when the process died, gets the recorded response with the same tool call ids, and so
  meets the ledger instead of paying for the turn and inventing new ids. The session's version (how many times its
  items changed) is in the key, so a new question after ``pop_item`` or ``clear_session`` is never answered from
  an old record. Streamed runs (``Runner.run_streamed``) are recorded and replayed too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from agents import Agent, FunctionTool, ModelResponse, Runner, RunResult, RunState, Usage
from agents.exceptions import AgentsException
from agents.models.interface import Model
from agents.run_context import RunContextWrapper
from agents.tool_context import ToolContext
from openai.types.responses import Response, ResponseCompletedEvent, ResponseOutputItem
from pydantic import TypeAdapter

from safepoint.core.resume import model_call_id
from safepoint.engine.log_writer import redacted_arguments
from safepoint.engine.tools import ToolContext as LedgerContext
from safepoint.engine.tools import tool
from safepoint.errors import DecisionNeeded, SafepointError
from safepoint.integrations.openai_agents import SafepointSession, canonical
from safepoint.integrations.recorded_values import recordable
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel

_OUTPUT = TypeAdapter(list[ResponseOutputItem])
_encoder = msgspec.json.Encoder(order="sorted")
NOT_APPROVED = "[safepoint] {tool}({call_id}) did not run: {why}. A person must approve these very arguments."


@dataclass(frozen=True)
class ToolPolicy:
    """How a tool may be repeated (seed §8.7); the defaults are safepoint's cautious ones."""

    idempotency: Idempotency = "non_idempotent"
    replay_policy: ReplayPolicy = "ask"
    risk_level: RiskLevel = "medium"
    needs_approval: bool = False


class ToolDecisionNeeded(DecisionNeeded, AgentsException):
    """A call waits for a person's decision. An ``AgentsException`` so the SDK raises it as it is (it wraps any
    other exception of a tool in a ``UserError``); a ``DecisionNeeded`` so callers catch what they already do."""


class SafepointToolError(AgentsException):
    """The ledger refused a call (a lost claim, a call id reused for other arguments): ``error`` is safepoint's,
    with its exit code. Not a tool failure the model should see: the run stops."""

    def __init__(self, error: SafepointError) -> None:
        super().__init__(str(error))
        self.error = error
        self.exit_code = error.exit_code


def args_digest(args: Any) -> str:
    """The digest an approval is bound to: SHA-256 of the arguments as canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical(args).encode("utf-8", "surrogatepass")).hexdigest()


def _approved_per_call(ctx: ToolContext[Any], call_id: str) -> bool:
    """Whether the SDK's approval names this very call (``state.approve(item)``), not the whole tool. Read from
    the SDK's approval records (no public accessor tells the two apart)."""
    records = getattr(ctx, "_approvals", None)
    if not isinstance(records, dict):
        return True  # cannot tell: taken as the narrower, per-call approval, which this session must have asked
    return any(isinstance(getattr(r, "approved", None), list) and call_id in r.approved for r in records.values())


def _repeats_a_key(args_json: str) -> bool:
    """Whether the JSON text has an object with a key twice (``{"a": 1, "a": 2}``: readers disagree on its value)."""
    seen_twice = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen_twice
        keys = [key for key, _ in items]
        seen_twice = seen_twice or len(set(keys)) != len(keys)
        return dict(items)

    try:
        json.loads(args_json, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False  # not JSON: kept as text by _arguments, and no approval is bound to a parsed value
    return seen_twice


def _arguments(args_json: str) -> dict[str, Any]:
    """The call's arguments as the ledger keeps them. Text that is not a JSON object (a model's broken or hostile
    output) is kept as it came, under ``arguments_json``: the call is still ledgered, and the SDK's own tool
    answers the model about it as it would without safepoint."""
    try:
        value = json.loads(args_json) if args_json.strip() else {}
    except (ValueError, RecursionError):
        return {"arguments_json": args_json}
    return value if isinstance(value, dict) else {"arguments_json": args_json}


class _Ledgered:
    """The wrapped tools of one session: the live calls' handlers, by call id."""

    def __init__(self, session: SafepointSession) -> None:
        self.session = session
        self.handlers = session.handlers  # ledger call id -> the live call's handler
        self.failures = session.failures  # ledger call id -> what the tool raised, to raise it again as it was
        self.live = session.live  # ledger call id -> what the tool returned, when the ledger keeps another form

    def register(self, name: str, policy: ToolPolicy) -> None:
        async def invoke(ctx: LedgerContext, /, **arguments: Any) -> Any:
            try:
                value = await self.handlers[ctx.call_id]()
            except Exception as exc:
                self.failures[ctx.call_id] = exc  # recorded as failed; raised again to the SDK as the tool raised it
                raise
            kept, differs = recordable(value)  # an object the SDK shows the model as text: kept as JSON or text
            if differs:
                self.live[ctx.call_id] = value
            return kept

        made = tool(
            name=name,
            idempotency=policy.idempotency,
            replay_policy=policy.replay_policy,
            risk_level=policy.risk_level,
            side_effects=("openai-agents",),
        )(invoke)
        registry = self.session.run.session.registry
        if name not in registry or registry.get(name).definition != made.definition:
            registry.put(made)

    def approval_problem(
        self, ctx: ToolContext[Any], call_id: str, args: dict[str, Any], *, per_call: bool
    ) -> str | None:
        """Why this call (``call_id``: its ledger id) may not run under the approval it has, or None (then its use
        is staged)."""
        if self.session.rejected(call_id):
            return "a person rejected it"
        decided = ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id)
        if decided is False:
            self.session.record_rejected(call_id)
            return "a person rejected it"
        if decided is not True:
            return "it was not approved"
        shown = self.session.asked(call_id)
        digest = args_digest(args)
        if shown is None:
            # Approved without being asked here. The SDK's "approve every call of this tool" (always_approve),
            # which binds no arguments, is honoured for the SDK's own needs_approval (the person chose it there);
            # never for ToolPolicy(needs_approval=True), which asks for each call and its arguments. An approval of
            # this one call that this session never asked for came from another session or a hand-made state.
            if per_call:
                return "its policy asks a person for each call, and only the whole tool was approved"
            if _approved_per_call(ctx, ctx.tool_call_id):
                return "this session never asked a person about it"
        elif shown != digest:
            return "it was approved for other arguments"
        used = self.session.used(call_id)
        if used is not None and used != digest:
            return "its approval was used for other arguments"
        self.session.stage_used(call_id, digest)
        return None

    def wrap(self, original: FunctionTool, policy: ToolPolicy) -> FunctionTool:
        name = original.name
        inner = original.on_invoke_tool
        approval = policy.needs_approval or original.needs_approval is not False

        async def on_invoke_tool(ctx: ToolContext[Any], args_json: str) -> Any:
            call_id = self.session.ledger_id(ctx.tool_call_id)
            args = _arguments(args_json)
            run = self.session.run
            known = model_call_id(call_id) in run.session.ledger  # the id as the ledger keys it
            if not known and redacted_arguments(args):
                # A saved RunState came back through redaction: running it would send "[REDACTED:...]" where the
                # person's value was. Refused, as a resume refuses to re-run such a call.
                return NOT_APPROVED.format(tool=name, call_id=call_id, why="its arguments lost a secret to redaction")
            if approval and not known and _repeats_a_key(args_json):
                # The person is shown the raw text (where the first value reads as the value); the call would run
                # the last. Ambiguous arguments are never run under an approval.
                why = "its arguments repeat a key, so what was shown is not what would run"
                return NOT_APPROVED.format(tool=name, call_id=call_id, why=why)
            if approval and not known:
                problem = self.approval_problem(ctx, call_id, args, per_call=policy.needs_approval)
                if problem is not None:
                    return NOT_APPROVED.format(tool=name, call_id=call_id, why=problem)
            self.register(name, policy)
            # The same call still running in this process (two alike agents run as tools at once, asked the same
            # and answered from one record) is waited for and its outcome taken: its handler is never overwritten
            # and dropped under it (rejected: running both, which lost the first one's handler mid-call).
            async with self.session.flights.ahold(call_id):
                self.handlers[call_id] = lambda: inner(ctx, args_json)
                try:
                    result = await run.acall_result(name, args, call_id=call_id)
                except DecisionNeeded as exc:
                    raise ToolDecisionNeeded(str(exc)) from exc
                except SafepointError as exc:
                    raise SafepointToolError(exc) from exc
                finally:
                    self.handlers.pop(call_id, None)
                failure = self.failures.pop(call_id, None)
                live = self.live.pop(call_id, result.value)
            if result.status == "succeeded":
                return live
            if failure is not None:
                # This process's own failure (a tool built with failure_error_function=None): raised as it was.
                # A failure recorded before a restart comes back as its text (the model is told).
                raise failure
            return result.observation  # failed, or uncertain and not run again: the model is told what is known

        needs: Any = original.needs_approval
        if approval:

            async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
                asked = True
                if callable(original.needs_approval):
                    asked = await original.needs_approval(ctx, params, call_id)
                if asked or policy.needs_approval:
                    self.session.record_asked(
                        self.session.ledger_id(call_id), args_digest(params)
                    )  # durable before the person sees it
                    return True
                return False

            needs = needs_approval
        return dataclasses.replace(original, on_invoke_tool=on_invoke_tool, needs_approval=needs)


def durable_tools(
    session: SafepointSession,
    tools: Iterable[FunctionTool],
    *,
    policies: dict[str, ToolPolicy] | None = None,
    default: ToolPolicy | None = None,
) -> list[FunctionTool]:
    """The tools, each call ledgered in the session's run (see the module docstring). ``policies`` by tool name;
    the others get ``default`` (the cautious ``ToolPolicy()``: non-idempotent, ask before a replay)."""
    ledgered = _Ledgered(session)
    chosen = dict(policies or {})
    fallback = default or ToolPolicy()
    wrapped = []
    for original in tools:
        if not isinstance(original, FunctionTool):
            raise TypeError(f"durable_tools wraps FunctionTools; {original!r} is a {type(original).__name__}")
        wrapped.append(ledgered.wrap(original, chosen.get(original.name, fallback)))
    return wrapped


class DurableModel(Model):
    """A ``Model`` whose responses are recorded in the session's run and handed back for the same request."""

    def __init__(self, session: SafepointSession, model: Model) -> None:
        self.session = session
        self.model = model
        self.paid = 0  # responses asked of the wrapped model in this process
        self.replayed = 0  # responses handed back from the record
        self._digests: dict[bytes, str] = {}  # digest of an item's text -> digest of its redacted text

    def key(self, system_instructions: str | None, input: Any, tools: Any, *threads: str | None) -> str:
        """What identifies a request: the instructions, the input, the tools' names and, when the conversation is
        kept by the server, the response or conversation it continues (then the input holds only new items).

        Hashed as the log keeps it (redacted): a resumed process reads the session's items redacted, the live one
        holds the real ones. Each item is redacted once and remembered by its digest, so a turn redacts only the
        items it adds (rejected: redacting the whole input each turn, 0.3 s at 3,000 items of 1 KB)."""
        head = [system_instructions, sorted(getattr(t, "name", "") for t in tools), *threads]
        parts = [self._redacted_digest(head)]
        for item in input if isinstance(input, list) else [input]:
            parts.append(self._redacted_digest(item))
        whole = hashlib.sha256("\n".join(parts).encode()).hexdigest()
        return f"v{self.session.version}-{whole}"

    def _redacted_digest(self, value: Any) -> str:
        try:
            # msgspec: about 10x json's speed, for the common case of plain JSON values (a turn hashes every item)
            raw = hashlib.sha256(_encoder.encode(value)).digest()
        except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
            raw = hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).digest()
        known = self._digests.get(raw)
        if known is None:
            text = self.session.redacted(canonical(value))
            known = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            self._digests[raw] = known
        return known

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.session.check_runner()  # a run the app's own runner started: said before the turn
        key, head, recorded = self._turn(system_instructions, input, tools, previous_response_id, conversation_id)
        if recorded is not None:
            self.replayed += 1
            data = json.loads(recorded)
            return ModelResponse(
                output=_OUTPUT.validate_python(data["output"]),
                usage=Usage(),  # not paid for again
                response_id=data.get("response_id"),
            )
        response = await self.model.get_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        self.paid += 1
        self._record(key, head, list(response.output), response.response_id)
        return response

    def _turn(
        self, system_instructions: str | None, input: Any, tools: Any, *threads: str | None
    ) -> tuple[str, str, str | None]:
        """The request's key, its head's digest (who asks: instructions, tools, thread) and the recorded answer:
        the turn recorded for this very request, else the turn this agent had in flight when its run stopped.

        The second is for a request the record cannot match byte for byte: a handoff's ``input_filter`` (or
        ``nest_handoff_history``) showed the agent a history the SDK does not keep, so resumed from the session it
        is asked with other items. The turn in flight is the latest turn of the same head recorded since the
        session's items last changed (the SDK saves a turn's items after its tools ran, so such a turn never got
        that far) whose tool calls the request does not hold yet: answered from it, its calls meet the ledger
        (rejected: asking the model again, which never hears of the call the crash left uncertain and may ask for
        the same effect under a new id)."""
        key = self.key(system_instructions, input, tools, *threads)
        head = self._redacted_digest([system_instructions, sorted(getattr(t, "name", "") for t in tools), *threads])
        recorded = self.session.recorded_turn(key)
        if recorded is None:
            recorded = self.session.turn_in_flight(head, _call_ids(input))
        return key, head, recorded

    def _record(self, key: str, head: str, output: list[Any], response_id: str | None) -> None:
        data = {
            "output": _OUTPUT.dump_python(output, mode="json", exclude_unset=True),
            "response_id": response_id,
            "head": head,
        }
        self.session.record_turn(key, canonical(data))  # durable before any of its tool calls runs

    async def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        """Streamed as the wrapped model streams; recorded from its ``response.completed`` event before that event
        is passed on (the SDK runs the turn's tools after it). A recorded turn is replayed as that one event: the
        SDK builds the turn from it, as it does for a live stream."""
        self.session.check_runner()
        key, head, recorded = self._turn(system_instructions, input, tools, previous_response_id, conversation_id)
        if recorded is not None:
            self.replayed += 1
            data = json.loads(recorded)
            response = Response(
                id=data.get("response_id") or "safepoint-recorded",
                created_at=0,
                model="safepoint-recorded",
                object="response",
                output=_OUTPUT.validate_python(data["output"]),
                tool_choice="none",
                tools=[],
                top_p=None,
                parallel_tool_calls=False,
                status="completed",
            )
            yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)
            return
        self.paid += 1
        async for event in self.model.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        ):
            if isinstance(event, ResponseCompletedEvent):
                self._record(key, head, list(event.response.output), event.response.id)
            yield event

    async def close(self) -> None:
        closer = getattr(self.model, "close", None)
        if callable(closer):
            await closer()


def _call_ids(input: Any) -> set[str]:
    """The call ids the request's items hold (a call or its output)."""
    ids: set[str] = set()
    for item in input if isinstance(input, list) else []:
        call_id = item.get("call_id") if isinstance(item, dict) else getattr(item, "call_id", None)
        if isinstance(call_id, str):
            ids.add(call_id)
    return ids


def durable_model(session: SafepointSession, model: Model) -> DurableModel:
    """``model`` with its responses recorded in ``session``'s run (see the module docstring)."""
    return DurableModel(session, model)


async def run_durably(agent: Agent[Any], input: Any, *, session: SafepointSession, **options: Any) -> RunResult:
    """``Runner.run(agent, input, session=session, **options)``, keeping the run's ``RunState`` in the store while
    it waits for an approval (so a process that dies then loses nothing: ``session.load_state(agent)`` in the next
    one) and forgetting it once a run goes on. ``input``: a prompt, items, ``[]`` to continue the session after a
    crash, or the ``RunState`` loaded and decided."""
    if isinstance(input, RunState):
        _keep_rejections(session, input)
    result = await Runner.run(agent, input, session=session, **options)
    await session.save_state(result if result.interruptions else None)
    return result


def _keep_rejections(session: SafepointSession, state: RunState[Any, Any]) -> None:
    """Record durably each waiting call the person rejected in ``state``: the SDK never hands a rejected call to
    its tool, so without this nothing durable says no, and a stale copy of the state approved later would run it."""
    context = getattr(state, "_context", None)
    if context is None:
        return
    for item in state.get_interruptions():
        call_id = getattr(item.raw_item, "call_id", None)
        name = getattr(item, "tool_name", None) or getattr(item.raw_item, "name", None)
        if isinstance(call_id, str) and isinstance(name, str) and context.is_tool_approved(name, call_id) is False:
            session.record_rejected(session.ledger_id(call_id))
