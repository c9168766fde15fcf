"""Which agent a resumed OpenAI Agents SDK run continues in (extra ``openai-agents``).

A run that handed off (``front`` -> ``back``) and died in ``back`` is resumed the documented way, with the agent the
app starts with: ``Runner.run(front, [], session=session)``. The SDK starts every run that is not a ``RunState`` at
its starting agent (a session keeps items, not who held the turn), so ``front`` was asked again about a
conversation it no longer owned: a paid new turn, and ``back``'s recorded turn (and its uncertain call) never met.

**What the store recorded decides.** A handoff is an item pair in the session: the handoff's ``function_call`` and
its ``function_call_output``, whose output is the SDK's transfer message ``{"assistant": "<agent name>"}``
(``Handoff.get_transfer_message``). The SDK saves them at the end of the handoff's turn, before the new agent's first
model call, so the last such pair names the agent that held the turn when the process died. A crash before they
were saved leaves the handoff unsaid: the run resumes in the agent that asked for it, whose recorded turn
(``durable_model``) replays the handoff without paying. The agent is found by name in the graph the app passes
(``starting_agent`` and the agents its handoffs reach, breadth first, as the SDK's own ``RunState.from_json``
finds its current agent); a name the graph does not hold is refused in one line (``HandoffAgentMissing``).

**How ``Runner.run`` is told.** Opening a ``SafepointSession`` installs ``ResumingRunner`` as the SDK's default
runner, wrapping the runner that was there: it changes nothing but the starting agent, and only for a run given a
``SafepointSession`` and the empty input ``[]`` (continue the session); every other run goes to the wrapped runner
as it came. Rejected: a synthetic handoff replayed by the first agent's model (it writes the handoff's items into the
session a second time, and the next agent's request no longer matches its recorded turn); a ``RunState`` built from
the session's items (the SDK's private resume path, with its own persistence rules); a new resume entry apps must
call instead of ``Runner.run`` (the documented way stays what it is). ``SafepointSession.agent_to_resume(agent)``
gives the same answer to an app that starts runs some other way.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import agents.run as sdk_run
from agents import Agent, Handoff
from agents.run import AgentRunner

from safepoint.errors import ConfigError


class HandoffAgentMissing(ConfigError):
    """The session's run was handed off to an agent the graph given to ``Runner.run`` does not reach."""


@runtime_checkable
class Resumable(Protocol):
    """What ``ResumingRunner`` asks of a session (``SafepointSession``; named here so nothing imports it back)."""

    def agent_to_resume(self, starting_agent: Agent[Any]) -> Agent[Any]: ...


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


def resume_in(starting_agent: Agent[Any], name: str | None, session_id: str) -> Agent[Any]:
    """The agent named ``name`` in ``starting_agent``'s graph (``starting_agent`` itself when ``name`` is None)."""
    if name is None or name == starting_agent.name:
        return starting_agent
    for agent in agent_graph(starting_agent):
        if agent.name == name:
            return agent
    raise HandoffAgentMissing(
        f"session {session_id!r}: its run was handed off to agent {name!r}, which agent {starting_agent.name!r} "
        "does not reach through its handoffs; resume with the agents the run was built with"
    )


class ResumingRunner(AgentRunner):
    """The SDK's default runner, wrapped: a run continuing a ``SafepointSession`` (input ``[]``) starts in the agent
    that held the turn (see the module docstring); everything else goes to ``inner`` unchanged."""

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    @staticmethod
    def _agent(starting_agent: Agent[Any], input: Any, options: dict[str, Any]) -> Agent[Any]:
        session = options.get("session")
        if isinstance(input, list) and not input and isinstance(session, Resumable):
            return session.agent_to_resume(starting_agent)
        return starting_agent

    async def run(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        return await self.inner.run(self._agent(starting_agent, input, options), input, **options)

    def run_sync(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        return self.inner.run_sync(self._agent(starting_agent, input, options), input, **options)

    def run_streamed(self, starting_agent: Agent[Any], input: Any, **options: Any) -> Any:
        return self.inner.run_streamed(self._agent(starting_agent, input, options), input, **options)


def install() -> None:
    """Make ``ResumingRunner`` the SDK's default runner, around the one installed now (once: idempotent)."""
    current = sdk_run.get_default_agent_runner()
    if not isinstance(current, ResumingRunner):
        sdk_run.set_default_agent_runner(ResumingRunner(current))
