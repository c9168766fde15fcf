"""``durable_tool``: calls made inside LangGraph nodes, through safepoint's tool ledger.

A node runs again from its top whenever LangGraph resumes it: after a crash, after an ``interrupt()`` is answered
(LangGraph #7780: an interrupt in a loop re-ran the API calls before it on every answer), after a retry. A call
wrapped by ``durable_tool`` (or made by a ``ToolNode`` given ``ToolNodeLedger``) goes through ``Run.call``, the
engine's ledger machine: ``started`` is durable before the function runs, its value is recorded when it returns,
and the same call made again returns the recorded value without running. A call a crash left without an outcome
is ``uncertain``: one that may not be repeated (``non_idempotent``, ``replay_policy`` ``ask``) is never re-run on its
own: opening the thread's ledger raises ``DecisionNeeded`` naming it (or, with ``on_uncertain="interrupt"``,
LangGraph's ``interrupt()`` with the call in its value), and ``SafepointSaver.settle(thread, replay=[...])`` /
``skip=[...]`` (or ``Command(resume="replay"|"skip")``) settles it.

**The key of a call**: the thread (its ledger is a run of its own, ``lgt-<hash of the thread id>``, claimed like
the thread), the checkpoint the task started from and its namespace (``checkpoint_map``, ``checkpoint_ns``), the
task id (LangGraph derives it from the checkpoint and the node, so it is the same when the node runs again), the
tool, and the call's order within this run of the node (a counter per attempt: LangGraph gives each attempt its
own scratchpad). A ``ToolNode`` runs a message's tool calls at once, in threads: there the model's tool call id
takes the place of the order (with the call's position in its message when the id is empty or repeated). The
saver's lock is held around the ledger's records only, never while a tool runs: parallel calls run at once and a
durable tool may call another. A tool that asks through ``interrupt()`` is recorded as asked, not failed; made
again with the answer it runs afresh (``ToolRuns._link``). The call id is
``lg-<tool>-<digest of the rest>-<order or tool call id>``.

What is recorded is the value as JSON (a tuple comes back as a list, a message or object as its JSON form); a
``ToolNode`` call records its message's content, status and artifact and hands back a ``ToolMessage`` made from
them. A call that failed raises again: its own exception in the process that ran it, ``ToolFailure`` with the
recorded error after a restart. A skipped call raises ``ToolFailure`` (its value is not known).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from safepoint.engine.offloop import through
from safepoint.errors import ConfigError, DecisionNeeded, ResumeError, ToolFailure
from safepoint.integrations.flights import Flights
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel, RunInfo

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

    from safepoint.run import Run
    from safepoint.store.base import Store

OnUncertain = Literal["raise", "interrupt"]
F = TypeVar("F", bound=Callable[..., Any])
TOOLS_PREFIX = "lgt-"
DECISION = "safepoint_decision"  # the key of an interrupt's value that asks for a decision
# Where in a task a decision was asked through ``interrupt()``: LangGraph answers a node's interrupts by their order
# in it, so every later run of that task calls ``interrupt()`` at the same place again (it returns the answer at
# once) and the node's own interrupts keep their answers (rejected: asking only while the call waits, which shifted
# every later answer of the node by one).
ASKED = "[langgraph] decision asked at "
INTERRUPTED = "[langgraph] interrupted:"  # the recorded error of a call that stopped at interrupt() (``_failed``)
_WAITING = re.compile(r"\((lg-[^()\s]+)\)")
_encoder = msgspec.json.Encoder(order="sorted")


@dataclass(frozen=True)
class DurableCall:
    """How a call may be repeated (§8.7); the defaults are safepoint's cautious ones."""

    idempotency: Idempotency = "non_idempotent"
    replay_policy: ReplayPolicy = "ask"
    risk_level: RiskLevel = "medium"
    on_uncertain: OnUncertain | None = None  # None: the saver's (a decision holds the whole thread's ledger)


def tools_run_id(thread_id: str) -> str:
    return TOOLS_PREFIX + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class ToolRuns:
    """The ledger runs of a saver's threads, opened when a thread's first durable call is made, kept open (and
    claimed) until the saver is closed."""

    def __init__(self, store: Store, workspace: str, holder: str, on_uncertain: OnUncertain = "raise") -> None:
        self.store = store
        self.on_uncertain = on_uncertain
        self.workspace = workspace
        self.holder = holder
        # One call at a time per saver (a session is one writer). A plain lock: an async call takes it in a worker
        # thread and gives it back on the event loop's (an RLock must be released by the thread that took it).
        self.lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._handlers: dict[str, Callable[[], Any]] = {}  # call id -> the live call's body
        self._failures: dict[str, BaseException] = {}
        self._asked: dict[str, set[str]] = {}  # thread -> the places (``ASKED``) a decision was asked at
        # Attempts of tasks -> their call counter. The scratchpad is kept alive with its counter, so its id is never
        # reused while it is here (rejected: a weak reference, which LangGraph's slotted dataclass refuses).
        self._attempts: dict[int, tuple[object, list[int]]] = {}
        self._order_lock = threading.Lock()  # calls of one task may come from several threads
        self.flights = Flights()  # a call made again while its first run is still in flight waits for it
        self._sweep_at = 256

    def _thread_config(self, thread_id: str) -> dict[str, str]:
        """The thread's id as its calls' run header keeps it (``langgraph_thread.thread_config``: never a secret)."""
        from safepoint.engine.log_writer import run_redactor
        from safepoint.integrations.langgraph_thread import thread_config

        return thread_config(thread_id, run_redactor(self.workspace, store=self.store), self.store.blob_name)

    def open(self, thread_id: str, *, replay: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> Run:
        from safepoint.agent.loop import resume_session
        from safepoint.engine.session import RunSession
        from safepoint.engine.tools import ToolRegistry
        from safepoint.errors import RunLockedError, RunNotFoundError
        from safepoint.run import Run
        from safepoint.workspace.files import Workspace

        run = self._runs.get(thread_id)
        if run is not None:
            if replay or skip:
                raise ConfigError(f"LangGraph thread {thread_id!r}: its calls are open already; nothing waits")
            return run
        run_id = tools_run_id(thread_id)
        workspace = Workspace(self.workspace)
        try:
            self.store.run_header(run_id)
        except RunNotFoundError:
            info = RunInfo(
                run_id=run_id,
                task="durable tool calls of a LangGraph thread",
                model="langgraph-tools",
                created_at=_now(),
                workspace=workspace.root,
                model_config=self._thread_config(thread_id),
            )
            session = RunSession.create(self.store, info, workspace, ToolRegistry(), holder=self.holder)
            session.add_message("user", info.task)
            session.commit()
            run = Run(session)
        else:
            try:
                session, recovery = resume_session(
                    self.store, run_id, workspace, ToolRegistry(), replay=replay, skip=skip
                )
            except RunLockedError:
                raise RunLockedError(
                    f"LangGraph thread {thread_id!r}: its durable calls (run {run_id}) are made by another saver; "
                    "one writer per thread: close that saver or wait for its process to end"
                ) from None
            except DecisionNeeded as exc:
                calls = list(dict.fromkeys(_WAITING.findall(str(exc))))  # each once (a call is named twice)
                what = str(exc).partition("waits for a decision on ")[2].partition(": ")[0]
                # Only what the engine accepts (``exc.choices``): a call that cannot run again is offered skip only.
                only_skip = [call for call, choices in exc.choices.items() if "replay" not in choices]
                again = [call for call in calls if call not in only_skip]
                offer = f"saver.settle({thread_id!r}, replay={again!r}) runs it again, " if again else ""
                held = f" ({', '.join(only_skip)} cannot run again: skip only)" if only_skip else ""
                raise DecisionNeeded(
                    f"LangGraph thread {thread_id!r} waits for a decision on {what}: it may have taken effect; "
                    f"{offer}saver.settle({thread_id!r}, skip={calls!r}) leaves it{held} "
                    "(or SafepointSaver(on_uncertain='interrupt') and Command(resume='replay'|'skip'))",
                    exc.choices,
                ) from None
            run = Run(session, recovery)
        self._runs[thread_id] = run
        return run

    def release(self, thread_id: str) -> None:
        with self.lock:
            run = self._runs.pop(thread_id, None)
            if run is not None:
                run.close()
            self._asked.pop(thread_id, None)

    def delete(self, thread_id: str) -> None:
        """Remove the thread's ledger run, fenced by a claim on it (refused while another process holds it)."""
        from safepoint.errors import RunLockedError, RunNotFoundError

        with self.lock:
            run = self._runs.pop(thread_id, None)
            if run is not None:
                run.close()
            self._asked.pop(thread_id, None)
            run_id = tools_run_id(thread_id)
            try:
                claim = self.store.claim(run_id, self.holder)
            except RunNotFoundError:
                return
            except RunLockedError:
                raise RunLockedError(
                    f"LangGraph thread {thread_id!r}: its durable calls (run {run_id}) are held by another process; "
                    "delete the thread once it has ended"
                ) from None
            self.store.delete_run(run_id, claim=claim)

    def copy(self, source: str, target: str) -> None:
        """``copy_thread``'s part: the target's durable calls' ledger becomes a copy of the source's, so the copy
        takes the recorded results and stops at an uncertain call as the source does (rejected: refusing the copy
        while a call is uncertain, which still let the copy run again a call that had succeeded after its last
        checkpoint, and left a forked thread without its history of effects). Records are copied as they are (a
        durable call's result is in its log record), re-fenced by the copy's own claim."""
        from safepoint.errors import CorruptRecordError, RunNotFoundError
        from safepoint.integrations.langgraph_thread import THREAD_DIGEST

        source_run, target_run = tools_run_id(source), tools_run_id(target)
        try:
            header = self.store.run_header(source_run)
        except RunNotFoundError:
            header = None
        log = self.store.read_log(source_run) if header is not None else None
        if log is not None and (damaged := [p for p in log.problems if p.kind != "torn"]):
            raise CorruptRecordError(
                f"LangGraph thread {source!r}: its durable calls (run {source_run}) have a damaged record at "
                f"{damaged[0].position}; check them with `safepoint fsck {source_run}` before copying the thread"
            )
        self.delete(target)  # a copy over a thread replaces its calls too, as its checkpoints
        if header is None or log is None:
            return
        info = msgspec.json.decode(header, type=RunInfo)
        copied = msgspec.structs.replace(
            info,
            run_id=target_run,
            model_config={
                **{k: v for k, v in info.model_config.items() if k != THREAD_DIGEST},  # the source's, not the copy's
                **self._thread_config(target),
            },
        )
        self.store.create_run(target_run, msgspec.json.encode(copied))
        claim = self.store.claim(target_run, self.holder)
        try:
            records = [msgspec.structs.replace(r, gen=claim.generation) for r in log.records]
            with self.store.blobs_shared():  # gc and forget decide between a reference's append, not during it
                self.store.append(claim, records)
        finally:
            self.store.release(claim)

    def close(self) -> None:
        with self.lock:
            for run in self._runs.values():
                run.close()
            self._runs.clear()

    # one call --------------------------------------------------------------------------------------------------
    def order(self, scratchpad: object) -> int:
        """The next call's position in this attempt of the task (0, 1, ...)."""
        with self._order_lock:
            key = id(scratchpad)
            found = self._attempts.get(key)
            if found is None or found[0] is not scratchpad:
                if len(self._attempts) >= self._sweep_at:
                    self._sweep()
                found = self._attempts[key] = (scratchpad, [0])
            n = found[1][0]
            found[1][0] += 1
            return n

    def _sweep(self) -> None:
        """Forget the attempts LangGraph is done with: nothing but this table holds their scratchpad (rejected: a
        bound on the table, which would forget an attempt still running and give its next call the number of its
        first, and so its recorded value)."""
        for key, (scratchpad, _) in list(self._attempts.items()):
            if sys.getrefcount(scratchpad) <= 3:  # the table's tuple, this loop's name, getrefcount's argument
                del self._attempts[key]
        self._sweep_at = max(256, 2 * len(self._attempts))

    def run_for(self, thread_id: str, where: str, policy: DurableCall) -> Run:
        """The thread's ledger, open; a call waiting for a decision raises ``DecisionNeeded`` or, by the policy,
        interrupts the graph with the call named and settles it with the answer (``where``: this call's place in
        its task, see ``ASKED``)."""
        from langgraph.types import interrupt

        run = self._runs.get(thread_id)
        if run is not None:
            if where in self._asked.get(thread_id, ()):
                interrupt({DECISION: {"thread_id": thread_id, "answered": True}})  # LangGraph hands back the answer
            return run
        try:
            run = self.open(thread_id)
        except DecisionNeeded as exc:
            if (policy.on_uncertain or self.on_uncertain) != "interrupt":
                raise
            waiting = list(dict.fromkeys(_WAITING.findall(str(exc))))
            both = all("replay" in exc.choices.get(call, ("replay",)) for call in waiting)
            offered = ["replay", "skip"] if both else ["skip"]  # a call that cannot run again: skip only
            answer = interrupt({DECISION: {"thread_id": thread_id, "calls": waiting, "choices": offered}})
            if answer not in offered:
                said = " or ".join(f"Command(resume={choice!r})" for choice in offered)
                raise ConfigError(
                    f"LangGraph thread {thread_id!r}: answer the decision on {', '.join(waiting)} with {said}, "
                    f"not {answer!r}"
                ) from None
            chosen = tuple(waiting)
            run = self.open(
                thread_id, replay=chosen if answer == "replay" else (), skip=chosen if answer == "skip" else ()
            )
            run.add_message("system", ASKED + where)  # durable with the call's `started`
        self._asked[thread_id] = {m.content[len(ASKED) :] for m in run.history if m.content.startswith(ASKED)}
        return run

    def register(self, run: Run, name: str, policy: DurableCall, is_async: bool) -> None:
        from safepoint.engine.tools import ToolContext, tool

        def body(ctx: ToolContext, /, **arguments: Any) -> Any:
            try:
                return self._handlers[ctx.call_id]()
            except Exception as exc:
                raise self._failed(ctx.call_id, name, exc) from None

        async def abody(ctx: ToolContext, /, **arguments: Any) -> Any:
            try:
                return await self._handlers[ctx.call_id]()
            except Exception as exc:
                raise self._failed(ctx.call_id, name, exc) from None

        made = tool(
            name=name,
            idempotency=policy.idempotency,
            replay_policy=policy.replay_policy,
            risk_level=policy.risk_level,
            side_effects=("langgraph",),
        )(abody if is_async else body)
        registry = run.session.registry
        if name not in registry or registry.get(name).definition != made.definition:
            registry.put(made)

    def _failed(self, call_id: str, name: str, exc: Exception) -> Exception:
        """What the ledger records of a tool that raised. ``interrupt()`` (LangGraph's ``GraphInterrupt``) is not a
        failure: the tool asked a person; it is recorded as asked (``INTERRUPTED``), and the call made again (the
        node re-run with the answer) runs afresh as the next link of its call id (``_link``)."""
        from langgraph.errors import GraphBubbleUp

        self._failures[call_id] = exc
        if isinstance(exc, GraphBubbleUp):
            return ToolFailure(f"{INTERRUPTED} {name} asked through interrupt(); it runs again with the answer")
        return exc

    @staticmethod
    def _link(run: Run, call_id: str) -> str:
        """The call id this call runs under: ``call_id``, or past every link of it that stopped at an
        ``interrupt()`` (``-i1``, ``-i2``, ...). Deterministic from the ledger, so a crash after the answered run
        finds that run's record (rejected: counting answers in the key, which also changed the key of a call made
        before a node's own interrupt, so the answer ran that call again)."""
        ledger = run.session.ledger
        link, n = call_id, 0
        while (
            (entry := ledger.get(link)) is not None and entry.status == "failed" and INTERRUPTED in (entry.error or "")
        ):
            n += 1
            link = f"{call_id}-i{n}"
        return link

    def outcome(self, call_id: str, result: Any) -> Any:
        failure = self._failures.pop(call_id, None)
        if result.status == "succeeded":
            return result.value
        if failure is not None:
            raise failure  # this process's own failure (an interrupt too), as the function raised it
        raise ToolFailure(f"{call_id}: {result.observation}")

    def _refused(self, thread_id: str, name: str, exc: ResumeError) -> ResumeError:
        """The engine's refusal of a call id recorded for other input, said for a graph author: the ids are the
        adapter's, so the fix is in the node (rejected: the engine's "give every call its own call id")."""
        if "recorded for another call" not in str(exc):
            return exc
        return ResumeError(
            f"LangGraph thread {thread_id!r}: durable tool {name!r} was called at the same place of its node with "
            "other input than on an earlier attempt; a node must pass the same arguments on every attempt (a retry "
            "or a resume runs it again): compute them from the state, not from the clock, randomness or a count"
        )

    def _begin(
        self,
        thread_id: str,
        call_id: str,
        where: str,
        name: str,
        args: dict[str, Any],
        policy: DurableCall,
        handler: Callable[[], Any],
        is_async: bool,
        wait: bool = True,
    ) -> tuple[Run, str] | None:
        """Under the lock: the thread's ledger open, the tool registered, the link chosen, its handler set. None
        when ``wait`` is false and the lock is taken."""
        if not self.lock.acquire(blocking=wait):
            return None
        try:
            run = self.run_for(thread_id, where, policy)
            self.register(run, name, policy, is_async=is_async)
            link = self._link(run, call_id)
            self._handlers[link] = handler
            return run, link
        finally:
            self.lock.release()

    def call(
        self,
        thread_id: str,
        call_id: str,
        where: str,
        name: str,
        args: dict[str, Any],
        policy: DurableCall,
        handler: Callable[[], Any],
    ) -> Any:
        """One call, through the engine's entry for one ledgered call (``Run.call_result``: its pieces under the
        run's bookkeeping lock, the tool outside it). The saver's lock is held while the call is set up only, never
        while it runs: a durable tool may call another, and parallel ``Send`` branches and a ``ToolNode``'s calls
        run at once (rejected: the lock around the whole call, under which a nested call waited on itself for
        ever; and driving ``CallRunner.drive`` here, outside the engine's bookkeeping). The same call still in
        flight in this process is waited for first (``Flights``)."""
        with self.flights.hold((thread_id, call_id)):
            begun = self._begin(thread_id, call_id, where, name, args, policy, handler, False)
            assert begun is not None  # waited for the lock
            run, link = begun
            try:
                result = run.call_result(name, args, call_id=link)
            except ResumeError as exc:
                raise self._refused(thread_id, name, exc) from None
            finally:
                self._handlers.pop(link, None)
            return self.outcome(link, result)

    async def acall(
        self,
        thread_id: str,
        call_id: str,
        where: str,
        name: str,
        args: dict[str, Any],
        policy: DurableCall,
        handler: Callable[[], Any],
    ) -> Any:
        """``call`` for asyncio (``Run.acall_result``'s path: the bookkeeping off the loop, and a task cancelled
        mid-call leaves the ledger saying what happened, never a finished call ``started``)."""
        async with self.flights.ahold((thread_id, call_id)):
            begin = functools.partial(self._begin, thread_id, call_id, where, name, args, policy, handler, True)
            # On the loop when the thread's ledger is open and the lock free (in memory only); else on a worker
            # thread, which opening a ledger (a store read) or waiting for the lock needs.
            begun = begin(wait=False) if thread_id in self._runs else None
            if begun is None:
                begun, cancelled = await through(asyncio.to_thread(begin))
                if cancelled:
                    assert begun is not None
                    self._handlers.pop(begun[1], None)
                    raise asyncio.CancelledError
            assert begun is not None  # waited for the lock
            run, link = begun
            try:
                result = await run.acall_result(name, args, call_id=link)
            except ResumeError as exc:
                raise self._refused(thread_id, name, exc) from None
            finally:
                self._handlers.pop(link, None)
            return self.outcome(link, result)


def _asked(status: str, error: str | None) -> bool:
    return status == "failed" and INTERRUPTED in (error or "")


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


def _context(what: str) -> tuple[ToolRuns, dict[str, Any]]:
    """The running graph's ledger runs and configuration (a call outside a graph, or in one compiled without a
    ``SafepointSaver``, is refused in one line)."""
    from langgraph.config import get_config

    try:
        config = get_config()
    except RuntimeError:
        raise ConfigError(f"{what} was called outside a LangGraph node; call it from a node of a graph") from None
    configurable = config.get("configurable", {})
    runs = getattr(configurable.get("__pregel_checkpointer"), "tools", None)
    if not isinstance(runs, ToolRuns):
        raise ConfigError(
            f"{what}: the graph has no SafepointSaver; compile it with checkpointer=SafepointSaver(store_url)"
        )
    return runs, configurable


def _attempt_digest(configurable: dict[str, Any]) -> str:
    where = {
        "ns": configurable.get("checkpoint_ns", ""),
        "map": configurable.get("checkpoint_map", {}),
        "task": configurable.get("__pregel_task_id", ""),
    }
    return hashlib.sha256(_encoder.encode(where)).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    """``value`` as the JSON the ledger records (and hashes, to know a call made again). An object JSON cannot hold
    is recorded by its type only (``{"object": "module.Class"}``): a client or session a node makes afresh on each
    attempt is the same call on a retry or in a new process (rejected: ``dumpd``'s repr, ``<... object at 0x...>``,
    whose address differed on every attempt, so the retry was refused, and which put the address in the store).
    Pydantic models are recorded by their fields, LangChain objects as ``dumpd`` makes them (its repr dropped)."""
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=_by_type))


def _by_type(obj: Any) -> Any:
    from langchain_core.load import dumpd
    from langchain_core.load.serializable import Serializable
    from pydantic import BaseModel

    if isinstance(obj, Serializable) and obj.is_lc_serializable():
        return _no_repr(dumpd(obj))
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return {"object": f"{type(obj).__module__}.{type(obj).__qualname__}"}


def _no_repr(value: Any) -> Any:
    """``dumpd``'s output without the repr of what it could not serialize (a memory address, a secret's text)."""
    if isinstance(value, dict):
        return {
            k: _no_repr(v) for k, v in value.items() if not (k == "repr" and value.get("type") == "not_implemented")
        }
    if isinstance(value, list):
        return [_no_repr(item) for item in value]
    return value


def durable_tool(
    fn: F | None = None,
    *,
    idempotency: Idempotency = "non_idempotent",
    replay_policy: ReplayPolicy = "ask",
    risk_level: RiskLevel = "medium",
    on_uncertain: OnUncertain | None = None,
    name: str | None = None,
) -> Any:
    """Ledger each call of ``fn`` made inside a node of a graph compiled with a ``SafepointSaver`` (see the module
    docstring). ``@durable_tool`` or ``@durable_tool(idempotency=..., replay_policy=..., on_uncertain=...)``."""
    policy = DurableCall(idempotency, replay_policy, risk_level, on_uncertain)

    def wrap(fn: F) -> F:
        tool_name = name or fn.__name__
        signature = inspect.signature(fn)

        def key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[ToolRuns, str, str, str, dict[str, Any]]:
            runs, configurable = _context(f"durable tool {tool_name}")
            bound = signature.bind(*args, **kwargs)
            order = runs.order(configurable.get("__pregel_scratchpad"))
            where = f"{_attempt_digest(configurable)}-{order}"
            return (
                runs,
                str(configurable["thread_id"]),
                f"lg-{tool_name}-{where}",
                where,
                _jsonable(dict(bound.arguments)),
            )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def acalled(*args: Any, **kwargs: Any) -> Any:
                runs, thread_id, call_id, where, recorded = key(args, kwargs)
                return await runs.acall(
                    thread_id, call_id, where, tool_name, recorded, policy, lambda: fn(*args, **kwargs)
                )

            return acalled  # type: ignore[return-value]  # same signature as fn, async

        @functools.wraps(fn)
        def called(*args: Any, **kwargs: Any) -> Any:
            runs, thread_id, call_id, where, recorded = key(args, kwargs)
            return runs.call(thread_id, call_id, where, tool_name, recorded, policy, lambda: fn(*args, **kwargs))

        return called  # type: ignore[return-value]  # same signature as fn

    return wrap(fn) if fn is not None else wrap


def _call_key(request: ToolCallRequest) -> str:
    """The model's tool call id, or, when it is empty or repeated within its message (some local model servers
    send '' or one id for every call), the call's position in that message with it: two calls never share a key
    (rejected: the id alone, under which the second email was refused as "recorded for another call", or handed
    the first one's result). An id that is unique keeps its key as before."""
    call = request.tool_call
    ident = str(call.get("id") or "")
    state = request.state
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", state)
    for message in reversed(messages if isinstance(messages, list) else []):
        calls = getattr(message, "tool_calls", None)
        if not calls:
            continue
        positions = [n for n, one in enumerate(calls) if one is call]
        if not positions:
            continue
        if ident and sum(1 for one in calls if one.get("id") == ident) == 1:
            return ident
        return f"{ident}#{positions[0]}"
    if not ident:
        raise ConfigError(
            f"tool {call['name']}: its tool call has no id and is not in the state's messages; give it an id"
        )
    return ident


class ToolNodeLedger:
    """``ToolNode(tools, wrap_tool_call=ledger, awrap_tool_call=ledger.acall)``: every tool call of the node goes
    through the ledger under the model's tool call id. ``tools`` gives a tool's policy by name, ``default`` the
    rest's; a tool given ``None`` is not ledgered. A tool that asks through ``interrupt()`` is ledgered as any
    other: recorded as asked, it runs afresh with the answer (``ToolRuns._link``). A tool returning a ``Command``
    has it recorded (``_record``). Ids a model leaves empty or repeats are told apart by position (``_call_key``)."""

    def __init__(self, tools: dict[str, DurableCall | None] | None = None, default: DurableCall | None = None) -> None:
        self.policies = dict(tools or {})
        self.default = default or DurableCall()

    def _key(self, request: ToolCallRequest) -> tuple[ToolRuns, str, str, str, str, dict[str, Any], DurableCall]:
        call = request.tool_call
        runs, configurable = _context(f"tool {call['name']}")
        where = f"{_attempt_digest(configurable)}-{_call_key(request)}"
        policy = self.policies.get(call["name"], self.default)
        assert policy is not None
        thread_id, call_id = str(configurable["thread_id"]), f"lg-{call['name']}-{where}"
        return runs, thread_id, call_id, where, call["name"], _jsonable(call["args"]), policy

    def _ledgered(self, request: ToolCallRequest) -> bool:
        name = request.tool_call["name"]
        return name not in self.policies or self.policies[name] is not None

    @staticmethod
    def _record(runs: ToolRuns, thread_id: str, result: ToolMessage | Command[Any]) -> dict[str, Any]:
        """What the ledger keeps of a tool's answer: a message's content, status and artifact; a ``Command``
        (LangGraph's handoffs and state updates) as the graph's serializer makes it, after the thread's redactor
        walked it (rejected: refusing a Command after the tool ran, which recorded the booking as failed)."""
        import base64

        from langchain_core.messages import ToolMessage

        if isinstance(result, ToolMessage):
            return {
                "content": _jsonable(result.content),
                "status": result.status,
                "artifact": _jsonable(result.artifact),
            }
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        from safepoint.integrations.langgraph_thread import redact

        redactor = runs.open(thread_id).session.log.redactor
        kind, data = JsonPlusSerializer().dumps_typed(redact(redactor, result))
        return {"command": [kind, base64.b64encode(data).decode()]}

    @staticmethod
    def _answer(request: ToolCallRequest, recorded: dict[str, Any], live: list[Any]) -> Any:
        """The tool's answer from what was recorded (in the process that ran it, the very Command it returned)."""
        import base64

        from langchain_core.messages import ToolMessage

        if "command" in recorded:
            if live:
                return live[0]
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            kind, data = recorded["command"]
            return JsonPlusSerializer().loads_typed((kind, base64.b64decode(data)))
        return ToolMessage(
            content=recorded["content"],
            status=recorded["status"],
            artifact=recorded.get("artifact"),
            tool_call_id=request.tool_call["id"],
            name=request.tool_call["name"],
        )

    def __call__(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Any:
        if not self._ledgered(request):
            return execute(request)
        runs, thread_id, call_id, where, name, args, policy = self._key(request)
        live: list[Any] = []

        def run() -> dict[str, Any]:
            result = execute(request)
            live.append(result)
            return self._record(runs, thread_id, result)

        recorded = runs.call(thread_id, call_id, where, name, args, policy, run)
        return self._answer(request, recorded, live)

    async def acall(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]) -> Any:
        if not self._ledgered(request):
            return await execute(request)
        runs, thread_id, call_id, where, name, args, policy = self._key(request)
        live: list[Any] = []

        async def run() -> dict[str, Any]:
            result = await execute(request)
            live.append(result)
            return self._record(runs, thread_id, result)

        recorded = await runs.acall(thread_id, call_id, where, name, args, policy, run)
        return self._answer(request, recorded, live)
