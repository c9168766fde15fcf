"""The OpenAI Agents SDK on safepoint's store (extra ``openai-agents``): a ``Session``, ledgered tools, durable
``RunState``.

::

    sp = safepoint.open(store_url, workspace=".")
    session = SafepointSession.open(sp, "user-42")            # claims the session: a second writer is refused
    agent = Agent(name="a", model=durable_model(session, model), tools=durable_tools(session, [pay, lookup]))
    result = await Runner.run(agent, "book it", session=session)
    if result.interruptions:                                  # a tool waits for approval: keep the run durably
        await session.save_state(result)
    ...                                                       # another process, later:
    session = SafepointSession.open(sp, "user-42")
    state = await session.load_state(agent)                   # the interrupted run, from the store
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(agent, state, session=session)

**One session is one safepoint run** (run id ``oa_s_<id>``, or ``oa_h_<sha256>`` for an id that is not a safe
name: ``../``, NUL, unicode, upper case or 65+ characters; both forms are injective and never collide; on an
encrypted store ``oa_k_<hmac>`` under the store's key, and the run's task does not quote the id). Its items,
the model turns, the saved ``RunState`` and the tool ledger all live in that run's log, so they share its
guarantees: each record checksummed, made durable (fsync'd or committed) before the method returns, redacted by
the run's redactor before it is written, sealed on an encrypted store, and fenced by the run's claim. Opening a
session claims the run: a second process (or a second ``open`` in one process) is refused with
``RunLockedError`` while the first holds it, and a writer whose claim was taken over is refused with
``StaleGenerationError`` on its next write; one session is never forked. Rejected: a table of its own beside the
runs (a second fencing scheme, a second redaction and sealing path to keep in step).

**Items** are kept as the run's history messages (one record per ``add_items`` call, one per ``pop_item`` and
``clear_session``), read back from every message the log holds (``RunSession.lifetime_said``), not from the
conversation a resume rewinds, so a restart never loses an item that was acknowledged. The live items are kept in
memory from the one read of the log that ``open`` does: ``get_items(limit)`` costs ``limit``, whatever the
session's length, and a write costs one record and one fsync. What is written is redacted; the live process keeps
the items it was given, as the engine does with its own records (a resume reads the redacted text).

The SDK awaits these methods on its event loop; the writes run there too (one fsync each), as the tool ledger's
own records do, so one writer orders all of the run's records (rejected: a worker thread per write, which would
race the ledger's records on the same log writer).

Tools and model turns: ``safepoint.integrations.openai_agents_tools``. Resuming a run that a crash stopped:
``SafepointSession.open`` (with ``skip``/``replay`` when a call waits for a decision), then
``Runner.run(agent, [], session=session)``: the session holds the input and every turn the SDK saved, so the model
is asked exactly what it was asked when the process died, and ``durable_model`` answers from the record. A run that
died after a handoff goes on in the agent the handoff reached (``openai_agents_resume``), not in ``agent``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from agents import Agent, RunHooks, RunResult, RunResultStreaming, RunState
from agents.memory.session_settings import SessionSettings

from safepoint.engine.log_writer import REDACTED_MARK
from safepoint.errors import DamagedLogError, DecisionNeeded, RunExistsError, RunNotFoundError, SafepointError
from safepoint.integrations import openai_agents_resume
from safepoint.integrations.flights import Flights
from safepoint.integrations.openai_agents_resume import RunnerReplacedWarning
from safepoint.records import Message
from safepoint.run import Run
from safepoint.store.base import Store
from safepoint.store.sealed import SealedStore


class Safepoint(Protocol):
    """What ``open`` needs of ``safepoint.api.Safepoint`` (named here: nothing below the API imports it)."""

    store: Store

    def start(self, task: str, *, builtins: bool = ..., run_id: str | None = ..., model: str = ...) -> Run: ...

    def resume(
        self,
        run_id: str,
        *,
        builtins: bool = ...,
        replay: Iterable[str] = ...,
        skip: Iterable[str] = ...,
        takeover: bool = ...,
    ) -> Run: ...


ITEMS = "openai-agents-items"  # a message holding the JSON list of items one add_items call added
POP = "openai-agents-pop"  # the last item was removed
CLEAR = "openai-agents-clear"  # every item was removed
TURN = "openai-agents-turn"  # a recorded model response (openai_agents_tools.DurableModel)
STATE = "openai-agents-state"  # a saved RunState ("" once the run it held went on)
ASKED = "openai-agents-asked"  # "<call id> <digest>": a tool call a person was asked to approve, as shown
USED = "openai-agents-approval-used"  # "<call id> <digest>": the approval a call ran under (used once)
REJECTED = "openai-agents-rejected"  # "<call id>": a person rejected the call; no later approval runs it
AGENT = "openai-agents-agent"  # "<agent name>": the agent that takes the turn from here (openai_agents_resume)
AGENT_KEYED = "openai-agents-agent-keyed"  # the same, for a name the redactor would change: its keyed digest
NAMES = (ITEMS, POP, CLEAR, TURN, STATE, ASKED, USED, REJECTED, AGENT, AGENT_KEYED)

SESSION_ITEMS = "safepoint_session_items"  # a saved RunState's input, kept as a reference to the session's items

_SAFE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def run_id_for(session_id: str) -> str:
    """The run that holds a session: readable when the id is a safe name, else named by its SHA-256.

    Lower case only in the readable form, so two ids never share a folder on a case-insensitive file system; the
    prefixes ``s_``/``h_`` keep the two forms apart (a readable id that looks like a digest stays readable)."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("a session id is a non-empty string")
    if _SAFE_ID.match(session_id):
        return f"oa_s_{session_id}"
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:48]
    return f"oa_h_{digest}"


def sealed_run_id_for(session_id: str, store: SealedStore) -> str:
    """The run that holds a session on an encrypted store: an HMAC of the id under a key derived from the store's
    (its keyed blob naming, given a name of its own domain), so neither the folder nor anything unsealed names the
    session ("patient-4411-hiv-results") and nobody without the key can confirm a guess of it. Rejected: the
    plain SHA-256 of ``run_id_for``, which anyone can compute for a guessed id."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError("a session id is a non-empty string")
    keyed = store.blob_name("openai-agents session id:" + session_id.encode("utf-8", "surrogatepass").hex())
    return "oa_k_" + keyed.rpartition(":")[2][:48]


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: the form items are stored in and model inputs are hashed in. Text
    stays as it is, except where it holds a lone surrogate (no UTF-8 for it): then all of it is escaped.
    Raises ``ValueError`` for a value nested too deep to encode (hostile model output), not a RecursionError."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable)
    except RecursionError:
        raise ValueError("a session item is nested too deep to be stored") from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_jsonable)
    return text


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    raise TypeError(f"a session item holds a {type(value).__name__}, which is not JSON")


@dataclass
class _Folded:
    """What the session's records say, folded in log order."""

    items: list[Any] = field(default_factory=list)
    version: int = 0  # how many times the items changed: a recorded model turn is for one version only
    turns: dict[str, str] = field(default_factory=dict)  # turn key -> the recorded response, this version's only
    state: str = ""  # the saved RunState (JSON), "" when none
    asked: dict[str, str] = field(default_factory=dict)  # call id -> digest of the arguments shown for approval
    used: dict[str, str] = field(default_factory=dict)  # call id -> digest it ran under
    rejected: set[str] = field(default_factory=set)  # ledger call ids a person rejected
    calls: dict[str, str] = field(default_factory=dict)  # the SDK's call id -> ledger call id of its latest turn
    bound: dict[str, dict[str, str]] = field(default_factory=dict)  # turn key -> its calls' ledger ids (bind_calls)
    assigned: set[str] = field(default_factory=set)  # every ledger call id a recorded turn was given
    agent: str | None = None  # the agent that took the turn last (None: not recorded, a session from before)
    agent_keyed: bool = False  # ``agent`` is the name's keyed digest (``SafepointSession.agent_digest``)

    def bind_calls(self, response: str) -> dict[str, str]:
        """Give each tool call of a recorded turn its ledger call id: the SDK's id the first time it is seen, then
        ``<id>~<n>`` (the first ``n`` not taken), because providers number calls per response (``call_0`` in every
        turn) and a new call must never meet an old call's ledger entry. Decided in log order, so every process
        gives the same ids; injective, as a model's own ``x~1`` is then taken as any other id."""
        bound: dict[str, str] = {}
        try:
            output = json.loads(response).get("output", [])
        except (ValueError, AttributeError):
            return bound
        for item in output if isinstance(output, list) else []:
            call_id = item.get("call_id") if isinstance(item, dict) else None
            if not isinstance(call_id, str):
                continue
            chosen, n = call_id, 0
            while chosen in self.assigned:
                n += 1
                chosen = f"{call_id}~{n}"
            self.assigned.add(chosen)
            self.calls[call_id] = bound[call_id] = chosen
        return bound

    def bump(self) -> None:
        """The items changed: no turn recorded before can answer a request again, so none is kept in memory."""
        self.version += 1
        self.turns.clear()
        self.bound.clear()


def _fold(messages: Iterable[Message]) -> _Folded:
    folded = _Folded()
    for message in messages:
        name = message.name
        if name == ITEMS:
            folded.items.extend(json.loads(message.content))
            folded.bump()
        elif name == POP:
            if folded.items:
                folded.items.pop()
            folded.bump()
        elif name == CLEAR:
            folded.items.clear()
            folded.bump()
        elif name == TURN:
            key, _, response = message.content.partition(" ")
            folded.turns[key] = response
            folded.bound[key] = folded.bind_calls(response)
        elif name == STATE:
            folded.state = message.content
        elif name in (ASKED, USED):
            call_id, _, digest = message.content.rpartition(" ")
            (folded.asked if name == ASKED else folded.used).setdefault(call_id, digest)
        elif name == REJECTED:
            folded.rejected.add(message.content)
        elif name in (AGENT, AGENT_KEYED):
            folded.agent, folded.agent_keyed = message.content, name == AGENT_KEYED
    return folded


class SessionStateError(SafepointError):
    """The saved ``RunState`` no longer fits the session's items (they were popped after it was saved)."""


class SafepointSession:
    """An OpenAI Agents SDK ``Session`` kept in a safepoint run (see the module docstring).

    Build it with ``SafepointSession.open(sp, session_id)``, or around a run you opened yourself with
    ``SafepointSession(run, session_id)``. Close it (or use ``with``) to give the run up for the next process.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, run: Run, session_id: str, *, session_settings: SessionSettings | None = None) -> None:
        self.run = run
        self.session_id = session_id
        self.session_settings = session_settings
        self._folded = _fold(m for m in run.session.lifetime_said() if m.name in NAMES)
        # The turns a run in flight had recorded when the process that opened this session last stopped: only those
        # can answer a request that does not match them byte for byte (``turn_in_flight``), each once.
        self._in_flight = set(self._folded.turns)
        # The live tool calls' handlers and failures, by ledger call id: on the session, not on each
        # ``durable_tools`` wrapping, because the run's registry keeps one ledger tool per name, and a second
        # agent (a new turn's, a handoff's) wrapping the same tool must reach its own handler through it.
        self.handlers: dict[str, Callable[[], Awaitable[Any]]] = {}
        self.failures: dict[str, Exception] = {}
        self.live: dict[str, Any] = {}  # a live call's value, when the ledger keeps another form of it
        self.flights = Flights()  # a ledger call id running now: the same call made again waits for it
        # One writer at a time: a web server shares a session between worker threads (the SDK's SQLiteSession
        # locks too), and the run's one log writer must see each record and its commit together (two threads
        # interleaving them was refused as a foreign writer, or left a hole that lost acknowledged items).
        self._lock = threading.RLock()
        openai_agents_resume.install()  # Runner.run(agent, [], session=self) continues in the agent that held the turn
        self._watched = False  # the app records the agent itself (``watch``): its own runner is no surprise
        self._warned = False  # a run without safepoint's runner was reported (once)

    @classmethod
    def open(
        cls,
        sp: Safepoint,
        session_id: str,
        *,
        replay: Iterable[str] = (),
        skip: Iterable[str] = (),
        takeover: bool = False,
        accept_damage: bool = False,
        session_settings: SessionSettings | None = None,
    ) -> SafepointSession:
        """Claim the session's run: create it, or resume it (a restart, or after a crash).

        Raises ``RunLockedError`` while another process holds the session (``takeover=True`` takes it from one
        that died without its lease running out: the old holder's next write is then refused), and
        ``DecisionNeeded`` when a tool call was started and never finished and its policy asks a person: open
        again with ``skip=[call_id]`` (do not run it again: the model is told it may have happened) or
        ``replay=[call_id]`` (run it again). Raises ``DamagedLogError`` (exit code 12) when records of the
        session's log fail their checksum or are missing: they may have held items, so the session is not opened
        on its word unless ``accept_damage=True`` (go on with the items that remain).
        """
        run_id = run_id_for(session_id)
        sealed = isinstance(sp.store, SealedStore)
        if isinstance(sp.store, SealedStore):
            legacy, run_id = run_id, sealed_run_id_for(session_id, sp.store)
            if not _exists(sp.store, run_id) and _exists(sp.store, legacy):
                run_id = legacy  # a session created before ids were keyed here: kept where it is
        try:
            sp.store.run_header(run_id)
        except RunNotFoundError:
            try:
                shown = "(id sealed)" if sealed else repr(session_id)
                task = f"openai-agents session {shown if len(shown) <= 200 else shown[:200] + '...'}"
                run = sp.start(task, builtins=False, run_id=run_id, model="openai-agents")
            except RunExistsError:  # another process created it a moment ago: open it as any existing one
                pass
            else:
                return cls(run, session_id, session_settings=session_settings)
        try:
            run = sp.resume(run_id, builtins=False, replay=tuple(replay), skip=tuple(skip), takeover=takeover)
        except DecisionNeeded as exc:
            # Said in this API's words: `safepoint resume` cannot settle it (the run is this program's own loop).
            said = str(exc).replace("resume with ", "open it with ")  # its own loop's run: said as arguments
            said = re.sub(r"--(replay|skip) ([^\s;,()]+)", r"\1=['\2']", said)
            raise DecisionNeeded(f"session {session_id!r}: {said}", exc.choices) from exc
        damage = [problem for problem in run.session.view.problems if problem.kind != "torn"]  # torn: never acked
        if damage and not accept_damage:
            run.close()
            raise DamagedLogError(
                f"session {session_id!r}: {len(damage)} record(s) of run {run_id}'s log are damaged or missing "
                f"({damage[0].detail}) and may have held its items; `safepoint fsck {run_id}` shows them; "
                "open it with accept_damage=True to go on with the items that remain"
            )
        return cls(run, session_id, session_settings=session_settings)

    # the Session protocol ---------------------------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (all when None), oldest first; from memory, so flat in the session's length."""
        with self._lock:
            items = self._folded.items
            chosen = items if limit is None else items[-limit:] if limit > 0 else []
            return copy.deepcopy(chosen)  # the caller may change what it gets (the SDK does); the session stays as kept

    async def add_items(self, items: list[Any]) -> None:
        if not items:
            return
        plain = json.loads(canonical(list(items)))  # JSON now: the SDK hands in pydantic models at times
        with self._lock:
            self._write(ITEMS, canonical(plain))
            self._folded.items.extend(plain)
            self._folded.bump()

    async def pop_item(self) -> Any | None:
        with self._lock:
            if not self._folded.items:
                return None
            self._write(POP, "")
            item = self._folded.items.pop()
            self._folded.bump()
            return item

    async def clear_session(self) -> None:
        """Forget every item, and the run that waited for an approval in them: its saved ``RunState`` goes, and
        each call a person was asked about and that never ran is refused from now on (a copy of the state an app
        kept elsewhere, approved later, would run the call of a conversation that no longer exists)."""
        with self._lock:
            for call_id in [c for c in self._folded.asked if c not in self._folded.used]:
                self.record_rejected(call_id)
            if self._folded.state:
                self._write(STATE, "")
                self._folded.state = ""
            self._write(CLEAR, "")
            self._folded.items.clear()
            self._folded.bump()

    # interrupted runs -------------------------------------------------------------------------------------------
    async def save_state(self, result: RunResult | RunResultStreaming | RunState[Any, Any] | None) -> None:
        """Keep an interrupted run (a ``RunResult`` or a streamed ``RunResultStreaming`` with interruptions, or its
        ``RunState``) durably, replacing the
        one kept before; ``None`` forgets it (the run went on). The state is redacted like every record: a call
        whose arguments lost a secret to it is never run from them (see ``durable_tools``)."""
        if result is None:
            if self._folded.state:
                self._write(STATE, "")
                self._folded.state = ""
            return
        state = result.to_state() if isinstance(result, RunResult | RunResultStreaming) else result
        data = state.to_json()
        with self._lock:
            self._refer_to_items(data)
            openai_agents_resume.key_agent_names(data, self._keyed_name)
            text = canonical(data)
            self._write(STATE, text)
            self._folded.state = text

    def _refer_to_items(self, data: dict[str, Any]) -> None:
        """The state's input is the session's history (the SDK puts it there whole): when it is the session's first
        items, it is kept as a reference to them (how many, and their digest), not written again at every pause,
        which made a long session's every approval cost its whole length (rejected: storing it whole, quadratic in
        the session's life). Anything else (a plain prompt, other items) is kept as it is."""
        given = data.get("original_input")
        items = self._folded.items
        if not isinstance(given, list) or not given or len(given) > len(items):
            return
        prefix = [canonical(item) for item in items[: len(given)]]
        if prefix != [canonical(item) for item in given]:
            return
        data["original_input"] = {SESSION_ITEMS: len(given), "digest": _items_digest(prefix)}

    async def load_state(self, agent: Agent[Any], **options: Any) -> RunState[Any, Any] | None:
        """The kept interrupted run, rebuilt for ``agent`` (``options``: ``RunState.from_json``'s, such as
        ``context_deserializer``), or None when none is kept."""
        if not self._folded.state:
            return None
        data = json.loads(self._folded.state)
        given = data.get("original_input")
        if isinstance(given, dict) and SESSION_ITEMS in given:
            count = int(given[SESSION_ITEMS])
            prefix = self._folded.items[:count]
            if len(prefix) != count or _items_digest([canonical(i) for i in prefix]) != given.get("digest"):
                raise SessionStateError(
                    f"session {self.session_id!r}: the saved run's input was the session's first {count} items, "
                    "and they changed since (pop_item); start the run again from the session"
                )
            data["original_input"] = copy.deepcopy(prefix)
        _unbind_redacted_calls(data)
        openai_agents_resume.unkey_agent_names(data, agent, self.agent_digest, self.session_id)
        state: RunState[Any, Any] = await RunState.from_json(agent, data, **options)
        return state

    def agent_to_resume(self, starting_agent: Agent[Any]) -> Agent[Any]:
        """The agent a run continuing this session (``Runner.run(starting_agent, [], session=self)``) goes on in:
        the one recorded last as taking the turn (or, in a session from before those records, the one its last
        handoff's items name), found in ``starting_agent``'s graph (see ``safepoint.integrations.
        openai_agents_resume``); ``HandoffAgentMissing`` when the graph does not hold it."""
        with self._lock:
            name, keyed = self._folded.agent, self._folded.agent_keyed
            if name is None:
                name = openai_agents_resume.handed_to(self._folded.items)
        named = self.agent_digest if keyed else None
        return openai_agents_resume.resume_in(starting_agent, name, self.session_id, named=named)

    def _keyed_name(self, name: str) -> str | None:
        """The digest an agent's name is kept as when the redactor would change it, else None (kept as it is)."""
        return self.agent_digest(name) if self.redacted(name) != name else None

    def agent_digest(self, name: str) -> str:
        """How the store keeps an agent's name the redactor would change (one that looks like a key): a digest of
        it with the session's run id, keyed by the store's key on an encrypted store (``blob_name``). An identifier
        stays one (rejected: recording it redacted, which no agent's name matches again, so the resume was
        refused), and the secret it may be is never written in clear."""
        digest = hashlib.sha256(f"openai-agents agent\0{self.run.run_id}\0{name}".encode("utf-8", "surrogatepass"))
        return self.run.session.store.blob_name("sha256:" + digest.hexdigest())

    def watch(self, hooks: RunHooks[Any] | None = None) -> RunHooks[Any]:
        """Run hooks that record the agent taking the turn, then call ``hooks``: for an app that starts runs with a
        runner of its own (``Runner.run(session.agent_to_resume(agent), [], session=session, hooks=session.watch(
        hooks))``), where safepoint's runner does not add them."""
        self._watched = True
        return openai_agents_resume.AgentWatch(self, hooks)

    def check_runner(self) -> None:
        """Called as a model turn of this session's run starts: a run no ``ResumingRunner`` started (its context
        not marked) is said once, and the runner in effect wrapped again for the runs after it (see
        ``openai_agents_resume``). An app that records the agent itself (``watch``) is not told."""
        if self._watched or openai_agents_resume.through.get() is not None:
            return
        with self._lock:
            if self._warned:
                return
            self._warned = True
        warnings.warn(openai_agents_resume.runner_replaced(self.session_id), RunnerReplacedWarning, stacklevel=2)
        openai_agents_resume.install()

    def record_agent(self, name: str) -> None:
        """``name`` takes the turn: durable (before its first model call) when it is not the one recorded last."""
        with self._lock:
            digest = self._keyed_name(name)  # kept as an identifier: a digest, never the redacted text
            keyed, stored = digest is not None, digest or name
            if (stored, keyed) != (self._folded.agent, self._folded.agent_keyed):
                self._write(AGENT_KEYED if keyed else AGENT, stored)
                self._folded.agent, self._folded.agent_keyed = stored, keyed

    @property
    def has_state(self) -> bool:
        return bool(self._folded.state)

    # what the tools and the model wrapper keep here ---------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._folded.version

    def recorded_turn(self, key: str) -> str | None:
        """The turn recorded for the request ``key``; its calls' ledger ids become this run's (``ledger_id``)."""
        with self._lock:
            response = self._folded.turns.get(key)
            if response is not None:
                self._use_turn(key)
            return response

    def _use_turn(self, key: str) -> None:
        """The run in this context (marked by ``ResumingRunner``) answers its calls by the turn ``key``'s ids: two
        runs sharing the session at once, their models numbering calls alike (``call_0``), each run their own
        calls under their own ids (rejected: the session's one map of the latest turn, where the run whose turn
        came second took the other's id, and the other's call then met its record, refused, or never ran)."""
        mark = openai_agents_resume.through.get()
        if isinstance(mark, openai_agents_resume.RunMark):
            mark.calls.update(self._folded.bound.get(key, {}))

    def turn_in_flight(self, head: str, held: set[str]) -> str | None:
        """The latest turn recorded since the items last changed for a request of ``head``, when it asked for tool
        calls none of which is in ``held`` (the request's call ids): the turn its run was in when it stopped (see
        ``DurableModel._turn``). Only a turn read from the log when the session was opened, and each once: a turn
        this process recorded is in flight here, never an answer for another request (two agents alike, run as
        tools at once). A turn recorded before these heads were (no ``head``) is never taken."""
        with self._lock:
            for key, response in reversed(list(self._folded.turns.items())):
                if key not in self._in_flight:
                    continue
                try:
                    data = json.loads(response)
                except ValueError:
                    continue
                if not isinstance(data, dict) or data.get("head") != head:
                    continue
                output = data.get("output")
                calls = (
                    [i for i in output if isinstance(i, dict) and i.get("type") == "function_call"]
                    if isinstance(output, list)
                    else []
                )
                ids = {c.get("call_id") for c in calls}
                if calls and all(isinstance(i, str) for i in ids) and not ids & held:
                    self._in_flight.discard(key)
                    self._use_turn(key)
                    return response
                return None  # the latest turn of this head went on (or asked for no call): nothing is in flight
            return None

    def record_turn(self, key: str, response: str) -> None:
        with self._lock:
            self._write(TURN, f"{key} {response}")
            self._folded.turns[key] = response
            self._folded.bound[key] = self._folded.bind_calls(response)
            self._use_turn(key)

    def ledger_id(self, call_id: str) -> str:
        """The ledger's call id for the SDK's ``call_id``: the one this run's turn gave it (``_use_turn``), else the
        one its latest recorded turn was given (see ``_Folded.bind_calls``; a run no ``ResumingRunner`` started), or
        the id itself for a call no recorded turn asked for."""
        mark = openai_agents_resume.through.get()
        if isinstance(mark, openai_agents_resume.RunMark) and call_id in mark.calls:
            return mark.calls[call_id]
        return self._folded.calls.get(call_id, call_id)

    def rejected(self, call_id: str) -> bool:
        return call_id in self._folded.rejected

    def record_rejected(self, call_id: str) -> None:
        """A person said no to the call: durable, so a stale copy of its state approved later never runs it."""
        if call_id not in self._folded.rejected:
            self._write(REJECTED, call_id)
            self._folded.rejected.add(call_id)

    def asked(self, call_id: str) -> str | None:
        return self._folded.asked.get(call_id)

    def record_asked(self, call_id: str, digest: str) -> None:
        if call_id not in self._folded.asked:
            self._write(ASKED, f"{call_id} {digest}")
            self._folded.asked[call_id] = digest

    def used(self, call_id: str) -> str | None:
        return self._folded.used.get(call_id)

    def stage_used(self, call_id: str, digest: str) -> None:
        """Staged, not committed: durable with the call's own ``started``, so a used approval and the call that
        used it are in the log together or not at all."""
        with self._lock, self.run.session.runner.bookkeeper.lock:  # as ``_write``
            if call_id not in self._folded.used:
                self.run.session.add_message("system", f"{call_id} {digest}", name=USED)
                self._folded.used[call_id] = digest

    def redacted(self, text: str) -> str:
        """``text`` as the run's log keeps it."""
        return str(self.run.session.log.redactor.text(text))

    def _write(self, name: str, content: str) -> None:
        # Reentrant: the callers above hold it across their read-modify-write. The run's bookkeeping lock too: a
        # ledger call of another run sharing the session writes its records on the bookkeeping thread meanwhile
        # (rejected: the session's lock alone, under which a record and the ledger's interleaved and the log writer
        # refused the next append as another writer's).
        with self._lock, self.run.session.runner.bookkeeper.lock:
            self.run.session.add_message("system" if name != ITEMS else "user", content, name=name)
            self.run.session.commit()  # durable (and fenced: a writer that lost the session is refused) on return

    # lifetime ----------------------------------------------------------------------------------------------------
    def close(self) -> None:
        self.run.close()

    def __enter__(self) -> SafepointSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.run.__exit__(kind, exc, tb)


def _items_digest(texts: list[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode("utf-8", "surrogatepass")).hexdigest()


def _exists(store: Store, run_id: str) -> bool:
    try:
        store.run_header(run_id)
    except RunNotFoundError:
        return False
    return True


def _unbind_redacted_calls(state: dict[str, Any]) -> None:
    """Drop the SDK's own record (a fingerprint of the real arguments) of every tool call whose arguments the
    redactor changed before the state was stored: kept, it no longer matches the call and the SDK refuses the
    whole state ("completed tool invocation does not match"). Unbound, a finished call comes back from the
    ledger (never run again) and a waiting one is refused by ``durable_tools`` rather than run with
    ``[REDACTED:...]`` where the secret was."""
    redacted: set[str] = set()
    stack: list[Any] = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            arguments = item.get("arguments")
            if isinstance(arguments, str) and REDACTED_MARK in arguments and isinstance(item.get("call_id"), str):
                redacted.add(item["call_id"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    context = state.get("context")
    invocations = context.get("tool_invocations") if isinstance(context, dict) else None
    if isinstance(invocations, dict):
        for call_id in redacted:
            invocations.pop(call_id, None)
