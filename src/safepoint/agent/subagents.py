"""``spawn_subagent``: a tool call that runs a child agent as its own run, with a subset of the parent's grants.

The child's run id is derived from the spawning call (``<parent run>.<call id>``), so the call is idempotent: run
again after a crash it finds its child and resumes it through restart recovery instead of starting a second one.
A child that recovery closes (an expired grant is ``invalid_inherited_execution_authority``, streamed text is
``visible_output_started``, ...) hands the parent the self-healing prompt: as this call's result, and at high
priority in the parent's context (``inbox``).

The parent records ``SubagentSpawned`` durably before the child exists, so the child's place in the tree
(``invalid_structural_owner_identity``) can always be checked from the parent's log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

from safepoint.engine import large_values
from safepoint.engine.session import RunSession, load_view, now
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry, tool
from safepoint.errors import DecisionNeeded, Interrupted, RecoveryClosedError, RunNotFoundError, ToolFailure
from safepoint.protocol import SELF_HEALING_PROMPT, SubagentSpawned
from safepoint.providers.base import Provider
from safepoint.records import RunInfo, RunStatus
from safepoint.restart.judge import tell_parent
from safepoint.store.base import Store
from safepoint.workspace.files import Workspace

SPAWN_SUBAGENT = "spawn_subagent"
ProviderFactory = Callable[[RunInfo], tuple[Provider, str]]


class Children(Protocol):
    """How a child run is driven: the agent loop hands its own (``agent.loop.AgentChildren``)."""

    def run(self, child: RunSession, provider: Provider, system: str) -> RunStatus:
        """Run the child's loop to its end; returns its status."""
        ...

    def resume(
        self,
        store: Store,
        child_id: str,
        workspace: Workspace,
        registry: ToolRegistry,
        model: str,
        pass_env: tuple[str, ...] = (),
    ) -> RunSession:
        """Resume an existing child through restart recovery (raises ``RecoveryClosedError`` if it closed it);
        ``pass_env``: the parent's, from before anything of the child runs again."""
        ...


def _granted(parent: RunSession, requested: list[str] | None) -> tuple[str, ...]:
    """The child's tools: what it asks for, within what the parent holds (never more)."""
    held = set(parent.info.tools_allowed) if parent.info.tools_allowed is not None else set(parent.registry.names())
    held.discard("")
    wanted = set(requested) if requested is not None else held - {SPAWN_SUBAGENT}
    beyond = sorted(wanted - held)
    if beyond:
        raise ToolFailure(f"the parent does not hold these tools, so it cannot grant them: {', '.join(beyond)}")
    return tuple(sorted(wanted))


def _expiry(parent: RunSession, expires_in_s: float | None) -> int | None:
    own = parent.info.grant_expires_at_ms
    if expires_in_s is None:
        return own
    mine = time.time_ns() // 1_000_000 + int(expires_in_s * 1000)
    return mine if own is None else min(own, mine)


def _stopped(child_id: str, why: str) -> ToolFailure:
    return ToolFailure(f"{SELF_HEALING_PROMPT} (subtask {child_id}: {why})")


def subagent_tool(parent: RunSession, child_provider: ProviderFactory, children: Children) -> Tool:
    """The tool, bound to one parent session, a way to build the child's model, and how a child is driven."""

    def registry_for(info: RunInfo) -> ToolRegistry:
        # Never the parent's spawn_subagent: it is bound to the parent. A child allowed to spawn gets its own,
        # bound to itself (its grants, its log), when its loop starts.
        allowed = set(info.tools_allowed or ()) - {SPAWN_SUBAGENT}
        return ToolRegistry([parent.registry.get(name) for name in parent.registry.names() if name in allowed])

    def finish(child: RunSession, provider: Provider, system: str) -> str:
        try:
            status = children.run(child, provider, system)
        finally:
            child.close()
        if status == "completed":
            return _answer_of(child.history)
        if status == "interrupted":
            raise Interrupted(f"subagent {child.info.run_id} stopped; it resumes with its parent")
        if status == "waiting_decision":
            raise DecisionNeeded(
                f"subagent {child.info.run_id} waits for a decision: `safepoint explain {child.info.run_id}` names "
                f"its calls and the commands that decide each; then resume {parent.info.run_id}"
            )
        if status in ("closed", "cancelled"):
            raise _stopped(child.info.run_id, status)
        raise ToolFailure(f"subagent {child.info.run_id} ended {status}; see `safepoint explain {child.info.run_id}`")

    def resume_child(child_id: str) -> str:
        view = load_view(parent.store, child_id)
        if view.status == "completed":  # its answer as it said it (a long one is a blob: ``core.large_values``)
            return _answer_of(
                large_values.resolve_messages(list(view.history), large_values.reader(parent.store, view))
            )
        provider, system = child_provider(view.info)
        try:
            child = children.resume(
                parent.store, child_id, parent.workspace, registry_for(view.info), provider.model, parent.pass_env
            )
        except RecoveryClosedError as exc:
            # Closed now or before (a close cut short is finished by that resume): the parent is told either way.
            tell_parent(parent.store, parent.info.run_id, child_id, view.info.parent_call_id or "", "closed")
            raise _stopped(child_id, str(exc)) from None
        return finish(child, provider, system)

    @tool(
        name=SPAWN_SUBAGENT,
        idempotency="idempotent",  # keyed by the child's run id: a second run resumes the same child
        replay_policy="auto",
        risk_level="medium",
        captures_workspace=True,  # the child's file changes are this call's changes
        description="Start a subagent on a subtask with some of your tools; returns its answer.",
    )
    def spawn_subagent(
        ctx: ToolContext,
        task: str,
        tools: list[str] | None = None,
        expires_in_s: float | None = None,
        scenario: dict[str, Any] | None = None,
    ) -> str:
        child_id = child_run_id(ctx.run_id, ctx.call_id)
        try:
            parent.store.run_header(child_id)
        except RunNotFoundError:
            if ctx.call_id in parent.view.spawned:  # spawned before a crash, then forgotten (`forget --force`)
                raise _stopped(
                    child_id, "its run was forgotten before it finished: what it did is unknown, check before redoing"
                ) from None
        else:
            return resume_child(child_id)
        granted = _granted(parent, tools)
        expires = _expiry(parent, expires_in_s)
        parent.add_record(
            SubagentSpawned(
                call_id=ctx.call_id, child_run_id=child_id, at=now(), tools_allowed=granted, grant_expires_at_ms=expires
            )
        )
        parent.commit()  # the parent knows its child before the child exists
        info = RunInfo(
            run_id=child_id,
            task=task,
            model=parent.model,
            created_at=now(),
            workspace=parent.info.workspace,
            scenario=scenario,
            provider=parent.info.provider if scenario is None else None,
            recovery_class="subagent",
            recovery_owner_id=f"{ctx.run_id}/{ctx.call_id}",
            parent_run_id=ctx.run_id,
            parent_call_id=ctx.call_id,
            tools_allowed=granted,
            grant_expires_at_ms=expires,
            approval=parent.info.approval,
            approval_timeout_s=parent.info.approval_timeout_s,
        )
        provider, system = child_provider(info)
        info = msgspec.structs.replace(info, model=provider.model)
        child = RunSession.create(parent.store, info, parent.workspace, registry_for(info))
        child.pass_env = parent.pass_env  # what the user handed the run's commands, its subagents' too
        child.add_message("user", task)
        child.commit()
        return finish(child, provider, system)

    # The child's own calls count as running one by one (engine.tool_activity), not the whole subagent as one.
    return dataclasses.replace(spawn_subagent, hosts_calls=True)


def child_run_id(parent_run_id: str, call_id: str) -> str:
    """The child's run id, from its parent's and the spawning call's: a valid run id whatever the call id holds
    (a call id on a restored branch carries a '~'; a model's ids can be anything)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", call_id)
    candidate = f"{parent_run_id}.{safe}"
    if len(candidate) <= 128 and safe == call_id:
        return candidate
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{parent_run_id[:90]}.{safe[:20]}-{digest}"


def _answer_of(history: Sequence[Any]) -> str:
    for message in reversed(history):
        if message.role == "assistant":
            return str(message.content)
    return ""
