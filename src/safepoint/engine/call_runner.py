"""The call runner: one tool call carried through the ledger, by ONE generator that serves sync and asyncio.

The walk of one ``run.call("send_email", {...}, call_id="c1")``, top to bottom:

1. ``run.Run.call`` -> ``Run.call_result`` -> ``CallRunner.execute`` (``aexecute`` for ``Run.acall``).
2. ``CallRunner.execute`` starts the generator ``CallRunner.drive`` and serves what it yields: an ``Invocation``
   (run the tool now: ``run_tool_sync``; ``run_tool_async`` in ``aexecute``) or an ``AwaitApproval`` (wait for a
   person: the injected ``ApprovalWaiter``). Only these two differ between sync and async; the driver's own pieces
   (everything below) run on the caller's thread in ``execute`` and on the run's bookkeeping thread in
   ``aexecute`` (``engine.offloop``), so an event loop never waits on a hash, a patch or an fsync.
3. ``drive``, a call the ledger does not know yet:
   - ``FileChanges.before``: the before-state of every path the tool will write (staged);
   - ``LedgerMachine.plan``: the ``planned`` entry (staged; a large content argument is logged as a patch);
   - if the call needs approval: ``Conversation.checkpoint("tool_start")``, ``LogWriter.commit`` (durable), yield
     ``AwaitApproval``; then ``LedgerMachine.settle(..., "approved")`` and ``LogWriter.commit``;
   - ``CommandCapture.before_command`` for a tool that runs programs (the user's changes so far are settled);
   - ``LedgerMachine.start`` -> ``Conversation.checkpoint("tool_start")`` -> ``LogWriter.commit`` ->
     ``Store.append`` with ONE fsync: the ledger says ``started`` before the tool runs (promise 1);
   - yield ``Invocation``: the tool runs (``ToolContext.attempt`` says which attempt this is);
   - ``FileChanges.after`` / ``CommandCapture.after_command``: the after-state (staged);
   - ``_tool_message`` (the observation, once) and ``LedgerMachine.finish`` (outcome, ``result_ref``, how the
     value is rebuilt), then ``_settled``: ``Conversation.leave_pending``, the ``tool_end`` checkpoint and
     ``LogWriter.commit`` -> ``Store.append`` (the second fsync).
4. A call the ledger knows (a resume): ``LedgerMachine.replay_decision`` (``core.replay``) takes the recorded
   outcome (``_take_outcome``: never a second run, promise 3), reports it uncertain (``_report_uncertain``),
   waits for a person's decision (``DecisionNeeded``), or runs it again through step 3's ``started`` onwards.
5. ``execute`` returns a ``CallResult``: the tool's own value, the observation the model sees, the status.

The runner is handed its parts (ledger machine, log writer, file changes, content, the conversation, the restart
checkpoint writer); it never sees the session that composes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import typing
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec
import msgspec.inspect

from safepoint.core.command_findings import PROTECTED_EFFECT
from safepoint.core.hashing import input_hash
from safepoint.core.nesting import arguments_problem
from safepoint.core.replay import ProbeResult, ReplayDecision
from safepoint.core.resume import INTERNAL_PREFIX, INTERNAL_TOOLS
from safepoint.engine import decision_choices, failpoints, large_values
from safepoint.engine.approval_wait import ApprovalOutcome as ApprovalOutcome  # re-exported: the waiters' types
from safepoint.engine.approval_wait import ApprovalWaiter, begin_wait
from safepoint.engine.approval_wait import AwaitApproval as AwaitApproval
from safepoint.engine.command_capture import CommandCapture
from safepoint.engine.content import Content
from safepoint.engine.file_changes import FileBefore, FileChanges
from safepoint.engine.large_values import expand_input as expand_input  # where actions read it from
from safepoint.engine.ledger_machine import LedgerMachine
from safepoint.engine.log_writer import SECRET_ARGUMENTS, LogWriter, now, redacted_arguments
from safepoint.engine.offloop import Bookkeeper, through
from safepoint.engine.progress import Progress
from safepoint.engine.tool_activity import TOOLS
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry
from safepoint.errors import DecisionNeeded, Interrupted, ResumeError, SafepointError, StoreError, ToolFailure
from safepoint.protocol import RestartPayload
from safepoint.records import (
    Checkpoint,
    CheckpointKind,
    LedgerStatus,
    Message,
    ResultEncoding,
    ToolCall,
    ToolLedgerEntry,
)

_encoder = msgspec.json.Encoder()
COMPACT_BYTES = 1024  # a file writer's content argument at least this long is logged as a patch


# what the driver asks for, and what it is answered ------------------------------------------------------------------
@dataclass(frozen=True)
class Invocation:
    """A request, from the call driver, to run a tool now."""

    tool: Tool
    ctx: ToolContext
    args: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    text: str  # the observation (the error's text for a failure)
    value: Any = None  # the tool's own return value
    encoding: ResultEncoding | None = None  # how ``value`` is rebuilt from ``text`` after a crash


Request = Invocation | AwaitApproval
CallDriver = Generator[Request, Outcome | ApprovalOutcome, "CallResult"]
CANCELLED_BEFORE_RUN = "cancelled before it ran (the task running the call was cancelled); it did not run"


class CallResult(msgspec.Struct, frozen=True):
    """What one call came to. ``value``: the tool's return value as it is recorded, the same before and after a
    crash: a ``str`` or ``None`` as it is, anything else as the JSON round-trip of it (a tuple or set comes back as a
    list, a Struct or dataclass as a dict, bytes as base64 text, NaN as ``None``); ``None`` when the call did not
    succeed. ``observation``: the text the
    model sees (``error: ...`` for a failure). ``status``: the ledger's status for the call now."""

    call_id: str
    status: LedgerStatus
    value: Any
    observation: str


# the parts the runner is handed --------------------------------------------------------------------------------------
class Conversation(Protocol):
    """The run's history and step state, as far as one call touches them."""

    def tool_message(self, call: ToolCall, text: str) -> tuple[Message, str]:
        """Append the call's tool message; returns it and its ``result_ref`` (``log:N``)."""
        ...

    def on_branch(self, call_id: str) -> Message | None:
        """The call's tool message on the current branch, if it is there."""
        ...

    def checkpoint(self, kind: CheckpointKind) -> Checkpoint: ...

    def leave_pending(self, call_id: str) -> None: ...

    def context_for(self, call: ToolCall, step_id: str, attempt: int) -> ToolContext: ...


class RestartWrites(Protocol):
    def write(self, payload: RestartPayload) -> None: ...


# running the tool itself ---------------------------------------------------------------------------------------------
def _rendered(value: Any) -> Outcome:
    if value is None:
        return Outcome(True, "ok", None, "none")
    if isinstance(value, str):
        return Outcome(True, value, value, "text")
    text = _encoder.encode(value).decode()
    # The value handed back is the recorded one, so a caller gets the same thing whether or not a crash came between
    # (the tool's own object would be a set or bytes the first time and a list or base64 text after a resume).
    return Outcome(True, text, msgspec.json.decode(text), "json")


def recorded_value(text: str, encoding: ResultEncoding | None) -> Any:
    """The value a finished call returned, rebuilt from its recorded observation."""
    if encoding == "text":
        return text
    if encoding == "json":
        try:
            return msgspec.json.decode(text)
        except msgspec.DecodeError:
            return None  # the observation was lost to damage (it says so); the value with it
    return None


@dataclass(frozen=True)
class _Arguments:
    """What a tool's signature says of its arguments (after the context): their types, which are required,
    and whether it takes any others (``**kwargs``). Built once per tool function."""

    types: dict[str, Any]  # name -> annotation msgspec can check (``Any``: unannotated, or a type it cannot)
    required: tuple[str, ...]
    open: bool  # **kwargs: names beyond ``types`` are taken as they are


def _opaque(info: Any, seen: set[int]) -> bool:
    """Does the type hold a plain class msgspec takes only through a hook (``CustomType``) anywhere inside?"""
    if isinstance(info, msgspec.inspect.CustomType):
        return True
    if id(info) in seen:
        return False  # a recursive Struct: already being looked at
    seen.add(id(info))
    for value in msgspec.structs.astuple(info) if isinstance(info, msgspec.Struct) else ():
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            inner = item.type if isinstance(item, msgspec.inspect.Field) else item
            if isinstance(inner, msgspec.inspect.Type) and _opaque(inner, seen):
                return True
    return False


def _checkable(hint: Any) -> Any:
    """The annotation, or ``Any`` for one msgspec cannot validate (a plain class: passed to the tool as is)."""
    try:
        return Any if _opaque(msgspec.inspect.type_info(hint), set()) else hint
    except (TypeError, ValueError):
        return Any


@functools.cache
def _arguments(fn: Callable[..., Any]) -> _Arguments | None:
    """None: a signature that cannot be read as keyword arguments (``*args``): the call is not checked here."""
    wrapped = getattr(fn, "__wrapped_fn__", None)  # Run.ledgered: the plain function takes no context
    if wrapped is not None:
        fn = wrapped
    try:
        parameters = list(inspect.signature(fn).parameters.values())[0 if wrapped else 1 :]  # 1st: the context
    except (TypeError, ValueError):
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation naming what its module cannot resolve: check names only, not types
        hints = {}
    types: dict[str, Any] = {}
    required: list[str] = []
    takes_more = False
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            takes_more = True
        elif parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            return None
        else:
            types[parameter.name] = _checkable(hints.get(parameter.name, Any))
            if parameter.default is inspect.Parameter.empty:
                required.append(parameter.name)
    return _Arguments(types, tuple(required), takes_more)


def _type_name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list"}
    return "null" if value is None else names.get(type(value), "an object" if isinstance(value, dict) else "a value")


def _bad_arguments(invocation: Invocation) -> Outcome | None:
    """The arguments checked against the tool's annotations before it runs (rejected: msgspec converting them
    into a Struct made per tool, whose error text names JSON paths and its own wording). One sentence for the
    model, naming the argument and the type it takes; the call fails without running."""
    tool, args = invocation.tool, invocation.args
    spec = _arguments(tool.fn)
    if spec is None:
        return None
    expected = ", ".join(
        f"{name}: {_type_name(hint)}" + ("" if name in spec.required else " (optional)")
        for name, hint in spec.types.items()
    )
    problem = ""
    missing = [name for name in spec.required if name not in args]
    unknown = [name for name in args if name not in spec.types]
    if missing:
        problem = f"argument {missing[0]!r} ({_type_name(spec.types[missing[0]])}) is missing"
    elif unknown and not spec.open:
        problem = f"it takes no argument {unknown[0]!r}"
    else:
        for name, value in args.items():
            hint = spec.types.get(name, Any)
            if hint is Any:
                continue
            try:
                msgspec.convert(value, type=hint, strict=True)
            except msgspec.ValidationError as exc:
                where = str(exc).rpartition(" - at `$")[2].rstrip("`")
                inside = f" (at {name}{where})" if where and " - at `$" in str(exc) else ""
                problem = f"argument {name!r} must be {_type_name(hint)}, not {_json_type(value)}{inside}"
                break
    if not problem:
        return None
    return Outcome(
        False, f"bad arguments for {tool.name}: {problem}; its arguments are {expected or 'none'}. It did not run."
    )


def _failure(exc: Exception) -> Outcome:
    """A tool that raised has ended: its outcome is known (failed), unlike one whose process died."""
    return Outcome(False, str(exc) if isinstance(exc, ToolFailure) else f"{type(exc).__name__}: {exc}")


def run_tool_sync(invocation: Invocation) -> Outcome:
    if (refused := _bad_arguments(invocation)) is not None:
        return refused
    try:
        if invocation.tool.is_async:  # no loop runs here (execute refuses that case before `started`)
            return _rendered(asyncio.run(invocation.tool.fn(invocation.ctx, **invocation.args)))
        return _rendered(invocation.tool.fn(invocation.ctx, **invocation.args))
    except (Interrupted, DecisionNeeded):
        raise  # a subagent stopped, or waits for a person: no outcome is recorded, so a restart resumes the call
    except Exception as exc:
        return _failure(exc)


def _running(invocation: Invocation) -> contextlib.AbstractContextManager[None]:
    """Count the tool as running while it runs: a control record written meanwhile is not a person's. A tool that
    hosts a nested agent is not counted itself; its nested calls are, one by one."""
    return contextlib.nullcontext() if invocation.tool.hosts_calls else TOOLS.running()


def _counted_sync(invocation: Invocation) -> Outcome:
    with _running(invocation):
        return run_tool_sync(invocation)


async def run_tool_async(invocation: Invocation) -> Outcome:
    if not invocation.tool.is_async:
        return await asyncio.to_thread(run_tool_sync, invocation)  # a blocking tool must not stall the loop
    if (refused := _bad_arguments(invocation)) is not None:
        return refused
    try:
        return _rendered(await invocation.tool.fn(invocation.ctx, **invocation.args))
    except (Interrupted, DecisionNeeded):
        raise
    except Exception as exc:
        return _failure(exc)


def needs_approval(entry: ToolLedgerEntry, tool_needs: bool, approval_mode: str) -> bool:
    if entry.status != "planned":
        return False  # approved already (durably), or it has run: never asked twice
    # A command that reaches the store or a .git is held whatever the mode: `--approval none` trusts the agent
    # with risky effects, not with the run's own ledger or the hooks the user's git runs.
    held = PROTECTED_EFFECT in entry.side_effects
    return tool_needs or held or (approval_mode == "high" and entry.risk_level == "high")


class CallRunner:
    def __init__(
        self,
        *,
        registry: ToolRegistry,
        ledger: LedgerMachine,
        log: LogWriter,
        files: FileChanges,
        content: Content,
        conversation: Conversation,
        restart: RestartWrites,
        capture: Callable[[], CommandCapture],
        approval_mode: str,
        progress: Progress | None = None,
        settle_start: Callable[[], None] = lambda: None,
    ) -> None:
        self.registry = registry
        self.settle_start = settle_start  # a capture starting in the background finishes before a tool runs
        self.progress = progress
        self.ledger = ledger
        self.log = log
        self.files = files
        self.content = content
        self.conversation = conversation
        self.restart = restart
        self.capture = capture
        self.approval_mode = approval_mode
        self.approvals: ApprovalWaiter | None = None  # set by the layer that can wait (restart.approvals.attach)
        self.bookkeeper = Bookkeeper()  # where the bookkeeping runs: the caller's thread, or off the loop
        self._capture_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # the two entry points: they differ only in how they serve the driver ------------------------------------------
    def execute(self, call: ToolCall, step_id: str) -> CallResult:
        if call.tool in self.registry and self.registry.get(call.tool).is_async and _loop_running():
            raise SafepointError(f"{call.tool} is an async tool and an event loop runs: use `await run.acall(...)`")
        driver = self.drive(call, step_id)
        request, result = self.bookkeeper.run(_advance, driver, None)
        while result is None:
            assert request is not None
            answer = self._wait(request) if isinstance(request, AwaitApproval) else _counted_sync(request)
            request, result = self.bookkeeper.run(_advance, driver, answer)
        self._told(call, step_id, result)
        return result

    async def aexecute(self, call: ToolCall, step_id: str) -> CallResult:
        tool = self.registry.get(call.tool) if call.tool in self.registry else None
        if tool is not None and tool.captures_workspace:
            # Two commands running at once could not be told apart in the workspace: they take turns.
            loop = asyncio.get_running_loop()
            turn = self._capture_turns.setdefault(loop, asyncio.Lock())  # a lock belongs to one event loop
            async with turn:
                return await self._aexecute(call, step_id)
        return await self._aexecute(call, step_id)

    async def _aexecute(self, call: ToolCall, step_id: str) -> CallResult:
        """The driver served from a loop: its pieces run on the bookkeeping thread (``engine.offloop``), the tool
        and the approval wait as ``aexecute``'s own. A cancellation leaves the ledger saying what happened: a call
        that had not run is recorded failed (it did not run), one whose tool was cancelled while it ran is
        ``uncertain``, a blocking tool (on a thread, which cannot be stopped) is waited for and its outcome kept;
        then the cancellation is raised."""
        driver = self.drive(call, step_id)
        (request, result), cancelled = await self.bookkeeper.arun(_advance, driver, None)
        while result is None:
            assert request is not None
            answer: Outcome | ApprovalOutcome
            if cancelled and isinstance(request, AwaitApproval):
                # Planned (and durable), never started: a resume asks again. The wait is begun all the same, and
                # stopped at once: its line (what a person posts after it counts) is durable, so an approval
                # posted before the resume is a person's, not taken for tampering by a wait that starts later.
                request.stop.stop()
                await self._abandon_wait(driver, call, request, begin_wait(self._wait, request))
                raise asyncio.CancelledError
            if cancelled:
                assert isinstance(request, Invocation)
                answer = Outcome(False, CANCELLED_BEFORE_RUN)  # `started` is durable, the tool never ran: it failed
            elif isinstance(request, AwaitApproval):
                waiting = begin_wait(self._wait, request)
                try:
                    answer = await asyncio.shield(waiting)
                except asyncio.CancelledError:
                    await self._abandon_wait(driver, call, request, waiting)
                    raise
            elif not request.tool.is_async:
                # A blocking tool on a thread runs to its end whatever happens to the task: its outcome is kept.
                answer, cancelled = await through(asyncio.to_thread(_counted_sync, request))
            else:
                # Counted as running from a worker thread: the count's listeners read the control channel (a store
                # read that must not run on the loop), and a cancellation never leaves the count raised.
                counted = _running(request)
                _, cancelled = await through(asyncio.to_thread(counted.__enter__))
                try:
                    if cancelled:
                        answer = Outcome(False, CANCELLED_BEFORE_RUN)
                    else:
                        try:
                            answer = await run_tool_async(request)
                        except asyncio.CancelledError:
                            # Cancelled while it ran: its effect may be half done. The ledger says so durably now,
                            # so this process and any resume treat it as the crash it resembles (promise 2).
                            await self.bookkeeper.arun(self._cancelled_while_running, driver, call)
                            raise
                finally:
                    await through(asyncio.to_thread(counted.__exit__, None, None, None))
            (request, result), stopped = await self.bookkeeper.arun(_advance, driver, answer)
            cancelled = cancelled or stopped
        self._told(call, step_id, result)
        if cancelled:
            raise asyncio.CancelledError
        return result

    async def _abandon_wait(
        self, driver: CallDriver, call: ToolCall, request: AwaitApproval, waiting: asyncio.Future[ApprovalOutcome]
    ) -> None:
        """Cancelled while it waited for a person: the wait is stopped and its thread has ended before the
        cancellation goes on. A decision it took just before (the person's answer, marked seen) is the call's,
        durably: an approval leaves it ``approved`` (the next session runs it without asking again), a denial or
        a timeout refuses it. Otherwise it stays ``planned`` and a resume asks again."""
        request.stop.stop()
        taken: ApprovalOutcome | None = None
        with contextlib.suppress(Exception):  # WaitAbandoned, or what ended the wait: no decision either way
            taken, _ = await through(waiting)
        driver.close()
        if taken is not None:
            await self.bookkeeper.arun(self._decided_then_cancelled, call, taken)

    def _decided_then_cancelled(self, call: ToolCall, answer: ApprovalOutcome) -> None:
        planned = self.ledger.entries[call.call_id]
        self.log.trace("approval_answered", call_id=call.call_id, decision=answer.decision)
        if answer.approved:
            self.ledger.settle(planned, "approved", "approved", answer.why)
            self.log.commit()  # the person's approval is the call's, with the mark that it was taken
        else:
            self._refused(call, planned, answer)

    def _cancelled_while_running(self, driver: CallDriver, call: ToolCall) -> None:
        driver.close()
        entry = self.ledger.get(call.call_id)
        if entry is not None and entry.status == "started":
            self.ledger.settle(entry, "uncertain")
            self.log.trace("call_cancelled", call_id=call.call_id, tool_name=call.tool)
            self.log.commit()

    def _told(self, call: ToolCall, step_id: str, result: CallResult) -> None:
        if self.progress is not None:
            self.progress.call_finished(
                self.progress.step_of(step_id), call.call_id, call.tool, call.args, result.status, result.observation
            )

    def _wait(self, request: AwaitApproval) -> ApprovalOutcome:
        if self.approvals is None:
            raise SafepointError(decision_choices.cannot_wait(self.ledger.run_id, request.call))
        return self.approvals(request)

    # the driver --------------------------------------------------------------------------------------------------
    def drive(self, call: ToolCall, step_id: str) -> CallDriver:
        """Carry one call through the ledger; yields once if the tool must run. Returns its ``CallResult``.

        A call the ledger knows is decided from its entry first: taking a recorded outcome or reporting an
        uncertain one needs no tool, so a tool missing at resume never turns a possible payment into an error.
        """
        ledger = self.ledger
        if large_values.read_as_note(call, self.content):  # the ledger's copy, proven by its hash, or none
            if (found := large_values.recovered_call(call, ledger.get(call.call_id), self.files, self.content)) is None:
                return self._lost_arguments(call, step_id)
            call = found
        if (problem := arguments_problem(call.args)) is not None:
            # Untrusted input, checked before anything recursive or strict (the input hash, the log's encoder)
            # meets it and dies of a RecursionError or a UnicodeEncodeError; recorded with its arguments left out,
            # so a resume answers the same.
            why = f"bad arguments for {call.tool}: {problem}. It did not run."
            return self._refuse_unrun(ToolCall(call_id=call.call_id, tool=call.tool, args={}), step_id, why)
        existing = ledger.get(call.call_id)
        tool = self.registry.get(call.tool) if call.tool in self.registry else None
        if existing is None:
            if tool is None:
                return self._refuse_unrun(call, step_id, str(self.registry.unknown(call.tool)))
            befores = self.files.before(call.call_id, tool.writes(call.args)) if tool.writes else []
            planned = ledger.plan(tool, call, step_id, self._logged_input(tool, call, befores))
        else:
            if (
                existing.tool_name == call.tool
                and existing.input_hash != input_hash(call.args)
                and redacted_arguments(call.args)
            ):
                # The log keeps the arguments redacted; the input hash is of the real ones. Recorded outcomes are
                # taken as they are; a call that would have to run again never runs with the redacted text.
                decision = ledger.replay_decision(existing, self.probe)
                if decision.action == "take_outcome":
                    return self._take_outcome(call, existing, decision)
                secret = ReplayDecision(action="report_uncertain", replayable=False, why=SECRET_ARGUMENTS)
                return self._report_uncertain(call, existing, secret)
            if existing.input_hash != input_hash(call.args) or existing.tool_name != call.tool:
                raise ResumeError(
                    f"call id {call.call_id!r} is recorded for another call ({existing.tool_name} with other input); "
                    "give every distinct tool call its own call id"
                )
            decision = ledger.replay_decision(existing, self.probe)
            if decision.action == "take_outcome":
                return self._take_outcome(call, existing, decision)
            if decision.action in ("skip", "report_uncertain"):
                return self._report_uncertain(call, existing, decision)
            if decision.action == "wait_decision":
                raise decision_choices.call_waits(call, decision.why)
            if tool is None:
                raise ResumeError(
                    f"call {call.call_id} must run ({decision.why}) but tool {call.tool!r} is not registered; "
                    "resume with the same tools (--tools MODULE:ATTR)"
                )
            if existing.status == "started":
                person = ledger.current_decision(call.call_id)
                if person is not None and person.decision == "replay":
                    ledger.settle(existing, "uncertain", "replay", decision.why)
                else:
                    ledger.settle(existing, "uncertain")
            planned = ledger.entries[call.call_id]
            ran = existing.status in ("started", "uncertain")  # an attempt may have written before it died
            befores = self.files.before(call.call_id, tool.writes(call.args), ran=ran) if tool.writes else []
        if needs_approval(planned, tool.needs_approval, self.approval_mode):
            self.conversation.checkpoint("tool_start")  # a restart resumes this call's wait, not the model's turn
            self.log.commit()  # `safepoint approve` reads the call's input hash from the ledger
            if self.progress is not None:
                self.progress.approval_wait(call.call_id, call.tool, call.args, planned.risk_level)
            answer = yield AwaitApproval(call, planned)
            assert isinstance(answer, ApprovalOutcome)
            self.log.trace("approval_answered", call_id=call.call_id, decision=answer.decision)
            if not answer.approved:
                return self._refused(call, planned, answer)
            planned = ledger.settle(planned, "approved", "approved", answer.why)
            self.log.commit()  # the approval is durable before anything is dispatched
            # Before `started`: a restart that finds the flag knows the call may have gone out and waits for
            # nothing; the ledger's `started` (durable next) is what decides whether it runs again.
            self.restart.write(msgspec.structs.replace(answer.wait, dispatched_before_restart=True))
        failpoints.hit("before_started", call.tool)
        if tool.captures_workspace:
            hints = tool.capture_hints(call.args) if tool.capture_hints else ()
            # The user's changes so far are settled, not blamed on the command; what it starts from is kept
            # durably first, so a crash while it runs still leaves its changes attributable and reversible.
            self.capture().before_command(hints, call.call_id)
        else:
            # The workspace's state at the start (the user's dirty files) is taken before any tool can change it:
            # the agent's first write_file must not read as the user's.
            self.settle_start()
        started = ledger.start(planned)
        self.conversation.checkpoint("tool_start")
        self.log.commit()  # durable: the ledger says `started` before the tool runs
        self.log.trace(
            "tool_started",
            call_id=call.call_id,
            tool_name=call.tool,
            attempt=ledger.attempts(call.call_id),
            step_id=step_id,
            idempotency=started.idempotency,
            replay_policy=started.replay_policy,
            risk_level=started.risk_level,
        )
        if self.progress is not None:
            self.progress.call_started(self.progress.step_of(step_id), call.call_id, call.tool, call.args)
        failpoints.hit("after_started", call.tool)
        ctx = self.conversation.context_for(call, step_id, ledger.attempts(call.call_id))
        outcome = yield Invocation(tool, ctx, call.args)
        assert isinstance(outcome, Outcome)
        failpoints.hit("after_tool", call.tool)
        self.files.after(call.call_id, befores)
        notes: list[str] = []
        if tool.captures_workspace:
            capture = self.capture()
            capture.after_command(call.call_id)
            notes, capture.warnings = capture.warnings, []
        status: LedgerStatus = "succeeded" if outcome.ok else "failed"
        text = outcome.text if outcome.ok else f"error: {outcome.text}"
        if notes:  # what the capture could not keep is said where the model and the user see the call
            text += "".join(f"\n[safepoint] {note}" for note in notes)
        message, ref = self._tool_message(call, text)
        if outcome.ok:
            ledger.finish(started, status, ref, encoding=outcome.encoding)
        else:
            ledger.finish(started, status, ref, error=outcome.text[:500])
        self._settled(call)
        if tool.captures_workspace:
            self.capture().settled()
        self.log.trace("tool_finished", call_id=call.call_id, tool_name=call.tool, status=status)
        failpoints.hit("after_outcome", call.tool)
        return CallResult(call.call_id, status, outcome.value if outcome.ok else None, message.content)

    def _logged_input(self, tool: Tool, call: ToolCall, befores: list[FileBefore]) -> dict[str, Any]:
        """A file writer's new content is logged as a patch against the file's before-state, so 100 one-line edits
        of a large file cost 100 small patches here too (the file patch recorded after it is the same bytes)."""
        args = call.args
        value = args.get(tool.content_arg) if tool.content_arg else None
        if isinstance(value, str) and len(value) >= COMPACT_BYTES and len(befores) == 1:
            before = befores[0]
            if before.content is not None:
                patch = self.files.patch(before, value.encode())
                args = {**args, tool.content_arg: {"$patch": f"blob:{patch}", "base": before.hash}}  # type: ignore[dict-item]  # the key is a str here (content_arg is set)
        # Any other large value (a new file's content, a patch, a Python tool's argument) is kept as a blob of its
        # redacted text: the log holds a reference (``core.large_values``), not a megabyte per call.
        # Safepoint's own calls keep their input exact and inline, as the log did: it is their journal (rollback
        # actions, conflicts covered), read back from the ledger entry by ``engine.conflicts`` and the resolvers.
        if call.tool in INTERNAL_TOOLS and call.call_id.startswith(INTERNAL_PREFIX):
            return args
        logged: dict[str, Any] = large_values.externalize(args, self.content, self.log.redact_bytes)
        return logged

    def _tool_message(self, call: ToolCall, text: str) -> tuple[Message, str]:
        """The observation, and the ref the ledger keeps as ``result_ref``: the result is stored once, here. An
        internal call's result is kept as a blob instead: the model never asked for it. Redacted like any
        record (a compensator's observation is the external system's text): blobs stay exact only for files."""
        if call.tool in self.registry and self.registry.get(call.tool).internal:
            digest = self.content.put(self.log.redact_bytes(text.encode()))
            return Message(
                seq=-1, role="tool", content=text, tool_call_id=call.call_id, name=call.tool
            ), f"blob:{digest}"
        return self.conversation.tool_message(call, text)

    def _settled(self, call: ToolCall) -> None:
        """The call is settled: it leaves the pending list, and the tool-end checkpoint makes that durable."""
        self.conversation.leave_pending(call.call_id)
        self.conversation.checkpoint("tool_end")
        self.log.commit()

    def _lost_arguments(self, call: ToolCall, step_id: str) -> CallResult:
        """A call whose arguments are lost in the history and the ledger: one that never ran is failed (the model
        told why); a recorded outcome stands; an interrupted one is uncertain or waits; none runs from the note."""
        why, existing = self.content.lost_args[call.call_id], self.ledger.get(call.call_id)
        if existing is None or existing.status in ("planned", "approved"):
            return self._refuse_unrun(
                msgspec.structs.replace(call, args={}), step_id, f"{why}. It did not run", existing
            )
        decision, person = self.ledger.replay_decision(existing, self.probe), self.ledger.current_decision(call.call_id)
        if decision.action == "take_outcome":
            return self._take_outcome(call, existing, decision)
        if decision.action == "run" or (person is not None and person.decision == "replay"):
            raise ResumeError(large_values.cannot_run(call, why))
        if decision.action in ("skip", "report_uncertain"):
            return self._report_uncertain(call, existing, decision)
        raise decision_choices.call_waits(call, decision.why, lost=decision_choices.lost_reason(why))

    def probe(self, entry: ToolLedgerEntry) -> ProbeResult | None:
        """What the tool's probe says of an interrupted call (None: it has none, or the call is not uncertain)."""
        tool = self.registry.get(entry.tool_name) if entry.tool_name in self.registry else None
        if tool is None or tool.probe is None or entry.status not in ("started", "uncertain"):
            return None
        try:
            args = expand_input(entry, self.files, self.content)
        except StoreError:
            # Its recorded input is gone (content fsck quarantined): the probe cannot look, so the call is what it
            # is, uncertain (rejected: failing the whole resume over one call's lost evidence).
            return "unknown"
        call = ToolCall(call_id=entry.call_id, tool=entry.tool_name, args=args)
        ctx = self.conversation.context_for(call, entry.step_id, self.ledger.attempts(entry.call_id))
        try:
            return tool.probe(ctx, args)
        except Exception:  # a probe that cannot tell is "unknown", never a reason to re-run
            return "unknown"

    # settling a call without running it --------------------------------------------------------------------------
    def _take_outcome(self, call: ToolCall, entry: ToolLedgerEntry, decision: ReplayDecision) -> CallResult:
        if entry.status not in ("succeeded", "failed"):
            # Settled by its probe: the effect is in place, so the call counts as done; its file changes are
            # recorded against the before-state kept when it started (the probe vouches for their author).
            if entry.status == "started":
                entry = self.ledger.settle(entry, "uncertain")
            self.files.settle(call.call_id, certain=True)
            text = f"[safepoint] this call was interrupted, but its effect is in place ({decision.why})."
            message, ref = self._tool_message(call, text)
            entry = self.ledger.finish(entry, "succeeded", ref, decision="probe", reason=decision.why)
            value = None  # its value was never recorded: the process that had it died
        else:
            # Finished before the crash: the recorded observation, never a second run (promise 3), and never a
            # second copy of it on the branch.
            on_branch = self.conversation.on_branch(call.call_id)
            recorded = on_branch.content if on_branch else self.content.recorded(entry.result_ref)
            if on_branch is not None:
                message = on_branch
            else:
                text = recorded if recorded is not None else self.content.load_result(entry.result_ref)
                message = self._tool_message(call, text)[0]
            # A record lost to damage takes the value with it: None, and the observation says so.
            succeeded = entry.status == "succeeded"
            value = recorded_value(recorded, entry.result_encoding) if succeeded and recorded is not None else None
        self._settled(call)
        self.log.trace(
            "call_outcome_taken", call_id=call.call_id, tool_name=call.tool, status=entry.status, why=decision.why
        )
        return CallResult(call.call_id, entry.status, value, message.content)

    def _report_uncertain(self, call: ToolCall, entry: ToolLedgerEntry, decision: ReplayDecision) -> CallResult:
        if entry.status == "started":
            action: Literal["skip", "report_uncertain"] = "skip" if decision.action == "skip" else "report_uncertain"
            entry = self.ledger.settle(entry, "uncertain", action, decision.why)
        # Not run again, its effect unknown: whatever it may have changed is recorded as its change, its author
        # uncertain, so a rollback asks about it instead of never seeing it.
        self.files.settle(call.call_id, certain=False)
        if decision.action == "skip":
            reason = "a person chose not to run it again"
        elif decision.why == SECRET_ARGUMENTS:
            reason = SECRET_ARGUMENTS
        else:
            reason = f"it is {entry.idempotency} with replay policy {entry.replay_policy}: never repeated automatically"
        message, _ = self._tool_message(
            call,
            f"[safepoint] {call.tool}({call.call_id}) started before an interruption and no outcome was recorded. "
            f"It was NOT run again: {reason}. Its effect may or may not have happened; check before relying on it "
            "and do not simply call it again.",
        )
        self._settled(call)
        self.log.trace("call_uncertain", call_id=call.call_id, tool_name=call.tool, action=decision.action, why=reason)
        return CallResult(call.call_id, entry.status, None, message.content)

    def _refused(self, call: ToolCall, planned: ToolLedgerEntry, answer: ApprovalOutcome) -> CallResult:
        """A call a person denied, or that nobody approved in time: it never ran, and the model is told why."""
        message, ref = self._tool_message(call, f"error: not run: {answer.why}")
        self.ledger.finish(
            planned, "failed", ref, error=f"not run: {answer.why}", decision=answer.decision, reason=answer.why
        )
        self._settled(call)
        return CallResult(call.call_id, "failed", None, message.content)

    def refuse(self, call: ToolCall, step_id: str, why: str) -> CallResult:
        """Record a call that must not run (a tool nobody registered, or one not granted): failed, never started."""
        if call.call_id in self.ledger.entries:
            return self.execute(call, step_id)  # decided already (a resume): its recorded outcome stands
        result = self._refuse_unrun(call, step_id, why)
        self._told(call, step_id, result)
        return result

    def _refuse_unrun(
        self, call: ToolCall, step_id: str, why: str, planned: ToolLedgerEntry | None = None
    ) -> CallResult:
        """A call failed before it was planned (an unknown tool, arguments nested too deep), or before it started
        (``planned``: its arguments lost): recorded failed."""
        entry = planned or ToolLedgerEntry(
            call_id=call.call_id,
            step_id=step_id,
            tool_name=call.tool,
            input_hash=input_hash(call.args),
            status="planned",
            risk_level="high",
            idempotency="non_idempotent",
            replay_policy="never",
            run_id=self.ledger.run_id,
            input=call.args,
            planned_at=now(),
        )
        self.conversation.leave_pending(call.call_id)
        message, ref = self._tool_message(call, f"error: {why}")
        if call.call_id not in self.ledger.entries or planned is not None:
            if planned is None:
                self.ledger.record(entry)
            self.ledger.finish(entry, "failed", ref, error=why)
            self.log.trace("call_refused", call_id=call.call_id, tool_name=call.tool, why=why)
        return CallResult(call.call_id, "failed", None, message.content)


def _advance(driver: CallDriver, answer: Outcome | ApprovalOutcome | None) -> tuple[Request | None, CallResult | None]:
    """One piece of the driver: up to its next request, or its result (a StopIteration cannot cross a thread's
    future, so the end is returned as a value)."""
    try:
        return (next(driver) if answer is None else driver.send(answer)), None
    except StopIteration as done:
        return None, done.value


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
