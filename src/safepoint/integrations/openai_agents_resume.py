"""Which agent a resumed OpenAI Agents SDK run continues in (extra ``openai-agents``).

A run that handed off (``front`` -> ``back``) and died in ``back`` is resumed the documented way, with the agent the
app starts with: ``Runner.run(front, [], session=session)``. The SDK starts every run that is not a ``RunState`` at
its starting agent (a session keeps items, not who held the turn), so ``front`` was asked again about a
conversation it no longer owned: a paid new turn, and ``back``'s recorded turn (and its uncertain call) never met.

**What the store recorded decides.** Every run given a ``SafepointSession`` records, durably, the agent that takes
the turn whenever it changes (``openai-agents-agent``, written from the SDK's ``on_agent_start`` hook, which runs
before that agent's first model call): so the last record names the agent that held the turn when the process died,
whatever a handoff's ``input_filter`` kept of the handoff's items. A session written before these records falls back
to its items: a handoff is an item pair there, the handoff's ``function_call`` and its ``function_call_output``
holding the SDK's very transfer message ``{"assistant": "<agent name>"}`` (``Handoff.get_transfer_message``). A crash
before the new agent started leaves the handoff unsaid: the run resumes in the agent that asked for it, whose
recorded turn (``durable_model``) replays the handoff without paying. The agent is found by name in the graph the app
passes (``starting_agent`` and the agents its handoffs reach, breadth first, as the SDK's own ``RunState.from_json``
finds its current agent); a name the graph does not hold is refused in one line (``HandoffAgentMissing``).

A handoff with an ``input_filter`` (or ``RunConfig(nest_handoff_history=True)``) showed the new agent a rewritten
history, which the SDK does not keep; resumed, that agent is asked from the session's items, and the turn it had in
flight answers it (``DurableModel._turn``), so a call of that turn the crash left uncertain meets the ledger.

**How ``Runner.run`` is told.** Opening a ``SafepointSession`` installs ``ResumingRunner`` as the SDK's default
runner, wrapping the runner that was there: it changes nothing but the starting agent, and only for a run given a
``SafepointSession`` and the empty input ``[]`` (continue the session); every other run goes to the wrapped runner
as it came, its ``hooks`` wrapped to record the agent (``AgentWatch``: the app's hooks are called as before).
Rejected: a synthetic handoff replayed by the first agent's model (it writes the handoff's items into the
session a second time, and the next agent's request no longer matches its recorded turn); a ``RunState`` built from
the session's items (the SDK's private resume path, with its own persistence rules); a new resume entry apps must
call instead of ``Runner.run`` (the documented way stays what it is). ``SafepointSession.agent_to_resume(agent)``
gives the same answer to an app that starts runs some other way.

**An app's own runner.** An app that calls ``set_default_agent_runner`` after a session was opened replaces this
wrapper unless it wraps the runner it finds: its runs then start in the agent given and record no agent. The
session notices at the run's first model turn (``durable_model``: no ``ResumingRunner`` marked the run's context),
says so in one ``RunnerReplacedWarning`` line (once per session), and wraps the new
runner again for the runs after it. An app that keeps its own runner continues a session with
``Runner.run(session.agent_to_resume(agent), [], session=session, hooks=session.watch(hooks))``: the same answer,
the same records, whatever runner is in effect (and no warning).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import agents.run as sdk_run
from agents import Agent, Handoff, RunHooks
from agents.run import AgentRunner

from safepoint.errors import ConfigError


class HandoffAgentMissing(ConfigError):
    """The session's run was handed off to an agent the graph given to ``Runner.run`` does not reach."""


class RunnerReplacedWarning(UserWarning):
    """A run of a session did not go through ``ResumingRunner``: the app installed a runner of its own after the
    session was opened (``set_default_agent_runner``) that does not wrap the one it found."""


class RunMark:
    """A run ``ResumingRunner`` started: the ledger ids its turns gave the SDK's call ids (``SafepointSession.
    ledger_id``). Shared by the tasks the run makes (they copy the context, and with it this one object)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: dict[str, str] = {}


# The run of this context, when a ``ResumingRunner`` started it (None: no run went through one).
through: contextvars.ContextVar[RunMark | None] = contextvars.ContextVar("safepoint_resuming_runner", default=None)


def runner_replaced(session_id: str) -> str:
    return (
        f"session {session_id!r}: a run started without safepoint's runner (set_default_agent_runner replaced it "
        "after the session was opened), so it starts in the agent given and records no handoff; install your "
        "runner around get_default_agent_runner(), or run session.agent_to_resume(agent) with "
        "hooks=session.watch(hooks)"
    )


@runtime_checkable
class Resumable(Protocol):
    """What ``ResumingRunner`` asks of a session (``SafepointSession``; named here so nothing imports it back)."""

    def agent_to_resume(self, starting_agent: Agent[Any]) -> Agent[Any]: ...

    def record_agent(self, name: str) -> None: ...


def handed_to(items: Iterable[Any]) -> str | None:
    """The agent the last handoff in ``items`` handed the turn to, or None when none did: a ``function_call_output``
    holding exactly the SDK's transfer message, for a ``function_call`` of the same call id among the items before it
    (a tool's output that merely looks like one, with no such call, is not a handoff)."""
    calls: set[str] = set()
    last: str | None = None
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, call_id = item.get("type"), item.get("call_id")
        if not isinstance(call_id, str):
            continue
        if kind == "function_call":
            calls.add(call_id)
        elif kind == "function_call_output" and call_id in calls:
            name = _transfer_target(item.get("output"))
            if name is not None:
                last = name
    return last


def _transfer_target(output: Any) -> str | None:
    if not isinstance(output, str) or not output.startswith('{"assistant"'):
        return None
    try:
        value = json.loads(output)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != {"assistant"} or not isinstance(value["assistant"], str):
        return None
    name: str = value["assistant"]
    return name if output == json.dumps({"assistant": name}) else None  # the SDK's very text, nothing like it


def agent_graph(starting_agent: Agent[Any]) -> Iterator[Agent[Any]]:
    """``starting_agent`` and every agent its handoffs reach, breadth first, each once."""
    queue: deque[Agent[Any]] = deque([starting_agent])
    seen: set[int] = set()
    while queue:
        agent = queue.popleft()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for handoff in agent.handoffs:
            target: Any = handoff
            if isinstance(handoff, Handoff):
                ref = getattr(handoff, "_agent_ref", None)  # the SDK keeps the target weakly (handoff())
                target = ref() if callable(ref) else None
            if isinstance(target, Agent):
                queue.append(target)


def resume_in(
    starting_agent: Agent[Any], name: str | None, session_id: str, *, named: Callable[[str], str] | None = None
) -> Agent[Any]:
    """The agent named ``name`` in ``starting_agent``'s graph (``starting_agent`` itself when ``name`` is None).
    With ``named``, ``name`` is the digest the store keeps for a name that looked like a secret: the agent whose
    ``named(agent.name)`` it is (and the refusal does not quote it)."""
    if name is None:
        return starting_agent
    form = named if named is not None else str
    for agent in agent_graph(starting_agent):
        if form(agent.name) == name:
            return agent
    shown = "(a name that looks like a secret, kept as a digest)" if named is not None else repr(name)
    raise HandoffAgentMissing(
        f"session {session_id!r}: its run was handed off to agent {shown}, which agent {starting_agent.name!r} "
        "does not reach through its handoffs; resume with the agents the run was built with"
    )


class AgentWatch(RunHooks[Any]):
    """The app's run hooks (``inner``), and the session told which agent takes the turn before it is asked."""

    def __init__(self, session: Resumable, inner: RunHooks[Any] | None) -> None:
        self.session = session
        self.inner = inner if inner is not None else RunHooks()

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self.session.record_agent(agent.name)  # durable before the agent's first model call
        await self.inner.on_agent_start(context, agent)

    # Every other hook goes to the app's as it came (the SDK calls each with its own arguments).
    async def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_llm_start(*args, **kwargs)

    async def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_llm_end(*args, **kwargs)

    async def on_agent_end(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_agent_end(*args, **kwargs)

    async def on_handoff(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_handoff(*args, **kwargs)

    async def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_tool_start(*args, **kwargs)

    async def on_tool_end(self, *args: Any, **kwargs: Any) -> None:
        await self.inner.on_tool_end(*args, **kwargs)


class ResumingRunner(AgentRunner):
    """The SDK's default runner, wrapped: a run continuing a ``SafepointSession`` (input ``[]``) starts in the agent
    that held the turn (see the module docstring); everything else goes to ``inner`` unchanged."""

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    @staticmethod
    def _resolved(starting_agent: Agent[Any], input: Any, options: dict[str, Any]) -> Agent[Any]:
        """The agent to start in; ``options`` get the hooks that record the agent (a session's runs only)."""
        session = options.get("session")
        if not isinstance(session, Resumable):
            return starting_agent
        hooks = options.get("hooks")
        if not isinstance(hooks, AgentWatch):
            options["hooks"] = AgentWatch(session, hooks)
        if isinstance(input, list) and not input:
            return session.agent_to_resume(starting_agent)
        return starting_agent

    @contextlib.contextmanager
    def _marked(self) -> Iterator[None]:
        """The run's context is marked while the inner runner starts it (tasks it creates copy it); reset after, so
        a later run in the same task through another runner is not taken for one of ours."""
        token = through.set(RunMark())
        try:
            yield
        finally:
            through.reset(token)

    async def run(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        agent = self._resolved(starting_agent, input, options)
        with self._marked():
            return await self.inner.run(agent, input, **options)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        agent = self._resolved(starting_agent, input, options)
        with self._marked():
            return self.inner.run_sync(agent, input, **options)

    def run_streamed(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        agent = self._resolved(starting_agent, input, options)
        with self._marked():
            return self.inner.run_streamed(agent, input, **options)


_installing = threading.Lock()  # two sessions opened at once in two threads wrap the runner once


def install() -> None:
    """Make ``ResumingRunner`` the SDK's default runner, around the one installed now (once: idempotent). An app
    that installs a runner of its own later keeps this one working only if it wraps the runner it finds."""
    with _installing:
        current = sdk_run.get_default_agent_runner()
        if not isinstance(current, ResumingRunner):
            sdk_run.set_default_agent_runner(ResumingRunner(current))


AGENT_FIELDS = frozenset({"agent", "current_agent", "source_agent", "target_agent", "last_agent"})
KEYED_NAME = "safepoint-agent-digest:"  # a saved RunState's agent name the redactor would change: its keyed digest


def key_agent_names(value: Any, keyed: Callable[[str], str | None]) -> None:
    """In a ``RunState``'s JSON, every agent reference (``{"name": ...}`` under ``agent``, ``current_agent``, ...)
    whose name ``keyed`` gives a digest for is replaced by ``KEYED_NAME + digest``, in place: kept as an identifier
    instead of being redacted with the record (which no agent's name matches again: the state could not be loaded)."""
    stack = [value]
    while stack:  # iterative: a state nested deep is no RecursionError
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if key in AGENT_FIELDS and isinstance(child, dict) and isinstance(child.get("name"), str):
                    digest = keyed(child["name"])
                    if digest is not None:
                        child["name"] = KEYED_NAME + digest
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)


def unkey_agent_names(value: Any, starting_agent: Agent[Any], digest: Callable[[str], str], session_id: str) -> None:
    """The other way, for ``starting_agent``'s graph; a digest no agent of it has is refused in one line."""
    names = {KEYED_NAME + digest(agent.name): agent.name for agent in agent_graph(starting_agent)}
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                name = child.get("name") if key in AGENT_FIELDS and isinstance(child, dict) else None
                if isinstance(name, str) and name.startswith(KEYED_NAME):
                    if name not in names:
                        raise HandoffAgentMissing(
                            f"session {session_id!r}: its saved run names an agent (a name that looks like a secret, "
                            f"kept as a digest) that agent {starting_agent.name!r} does not reach through its "
                            "handoffs; load it with the agents the run was built with"
                        )
                    child["name"] = names[name]
                stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)
