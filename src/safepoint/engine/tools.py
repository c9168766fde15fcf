"""Tools: a callable plus what it declares about repeating it (§8.7), and the registry the loop looks them up in.

::

    @tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", side_effects=("email",))
    def send_email(ctx: ToolContext, to: str, body: str) -> str:
        mailer.send(to, body, idempotency_key=ctx.idempotency_key)
        return "sent"
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from safepoint.core.classify import Classification, check_definition, declared, normalize
from safepoint.core.replay import ProbeResult
from safepoint.engine.processes import ProcessNotes
from safepoint.errors import ConfigError, ToolRegistrationError, UnknownToolError
from safepoint.records import Idempotency, ReplayPolicy, RiskLevel, ToolDefinition
from safepoint.workspace.files import Workspace


@dataclass(frozen=True)
class ToolContext:
    """What a tool is handed besides its arguments."""

    run_id: str
    call_id: str
    step_id: str
    idempotency_key: str  # the same on every attempt of this call: pass it to external APIs
    workspace: Workspace
    save_artifact: Callable[[str, bytes], str] = field(repr=False)
    processes: ProcessNotes = field(default_factory=lambda: ProcessNotes(None), repr=False)
    before_hashes: dict[str, str] = field(default_factory=dict)  # for a probe: what each path held when it started
    # Which attempt this is: 1 the first time, 2 after a crash re-ran it, ... (the ledger's `started` entries).
    # A probe is handed the attempt it asks about (the one that was interrupted).
    attempt: int = 1
    # The environment a command gets is the user's less its credentials (``core.environment``): ``pass_env`` names
    # the ones the user hands over on purpose, ``withhold_env`` more to hold back (the provider's key variable).
    pass_env: tuple[str, ...] = ()
    withhold_env: tuple[str, ...] = ()
    # The run's redaction, for output a tool cuts before it is recorded: a secret cut in half at the cut no longer
    # has its shape, so the whole is redacted first (rejected: redacting only the kept head and tail).
    redact: Callable[[bytes], bytes] = field(default=lambda data: data, repr=False)


ToolFn = Callable[..., Any]
Classifier = Callable[[dict[str, Any]], Classification]
Probe = Callable[[ToolContext, dict[str, Any]], ProbeResult]
WritesFn = Callable[[dict[str, Any]], list[str]]
Compensator = Callable[[ToolContext, dict[str, Any], str], Any]  # (ctx, the original input, its recorded result)


@dataclass(frozen=True)
class Tool:
    definition: ToolDefinition
    fn: ToolFn
    classifier: Classifier | None = None
    probe: Probe | None = None
    writes: WritesFn | None = None  # the workspace paths a call will write, so their before-state is kept first
    # compensate_external_action: undoes a finished call's effect (created an issue -> close it), at most once.
    compensator: Compensator | None = None
    compensator_definition: ToolDefinition | None = None  # how the compensation itself may be replayed
    compensates: bool = False  # this tool is a compensation; its ledger entries link to the original call
    # The call's changes inside the workspace are found by a scan around it (run_command, or a tool that runs
    # programs): use it when the paths cannot be named up front with ``writes``.
    captures_workspace: bool = False
    capture_hints: WritesFn | None = None  # paths the call may change, to keep ahead (run_command: from its line)
    content_arg: str | None = None  # the argument holding a written file's new content (logged as a patch)
    # safepoint's own calls (rollback, resolution, compensation): ledgered like any call, but the model never asked
    # for them, so their results stay out of the conversation.
    internal: bool = False
    # The call waits for a person (`safepoint approve`) before it runs, whatever the run's approval setting.
    needs_approval: bool = False
    # The call runs a nested agent (spawn_subagent) whose own calls are ledgered and counted as running one by one
    # (``engine.tool_activity``): the call itself is not, or a person's answer to a nested call would be taken for
    # a tool's while the whole subagent runs.
    hosts_calls: bool = False

    def __post_init__(self) -> None:
        check_definition(self.definition)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def classify(self, args: dict[str, Any]) -> Classification:
        return normalize(self.classifier(args)) if self.classifier else declared(self.definition)


@overload
def tool(fn: ToolFn, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    idempotency: Idempotency = "non_idempotent",
    replay_policy: ReplayPolicy = "ask",
    risk_level: RiskLevel = "medium",
    side_effects: Iterable[str] = (),
    description: str | None = None,
    classifier: Classifier | None = None,
    probe: Probe | None = None,
    writes: WritesFn | None = None,
    compensator: Compensator | None = None,
    captures_workspace: bool = False,
    capture_hints: WritesFn | None = None,
    content_arg: str | None = None,
    needs_approval: bool = False,
) -> Callable[[ToolFn], Tool]: ...


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    idempotency: Idempotency = "non_idempotent",
    replay_policy: ReplayPolicy = "ask",
    risk_level: RiskLevel = "medium",
    side_effects: Iterable[str] = (),
    description: str | None = None,
    classifier: Classifier | None = None,
    probe: Probe | None = None,
    writes: WritesFn | None = None,
    compensator: Compensator | None = None,
    captures_workspace: bool = False,
    capture_hints: WritesFn | None = None,
    content_arg: str | None = None,
    needs_approval: bool = False,
) -> Tool | Callable[[ToolFn], Tool]:
    """Declare a tool. The defaults are the cautious ones: an undeclared tool is assumed unsafe to repeat."""

    def wrap(func: ToolFn) -> Tool:
        definition = ToolDefinition(
            name=name or func.__name__,
            idempotency=idempotency,
            replay_policy=replay_policy,
            risk_level=risk_level,
            side_effects=tuple(side_effects),
            description=description if description is not None else (inspect.getdoc(func) or ""),
        )
        return Tool(
            definition=definition,
            fn=func,
            classifier=classifier,
            probe=probe,
            writes=writes,
            compensator=compensator,
            captures_workspace=captures_workspace,
            capture_hints=capture_hints,
            content_arg=content_arg,
            needs_approval=needs_approval,
        )

    return wrap(fn) if fn is not None else wrap


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, item: Tool) -> Tool:
        if not isinstance(item, Tool):
            raise ToolRegistrationError(f"{item!r} is not a tool; decorate it with @safepoint.tool(...)")
        if item.name in self._tools:
            raise ToolRegistrationError(f"a tool named {item.name!r} is registered already; give it another name")
        self._tools[item.name] = item
        return item

    def put(self, item: Tool) -> Tool:
        """Register or replace (the runtime's own internal tools are bound to one session)."""
        self._tools[item.name] = item
        return item

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str) -> UnknownToolError:
        known = ", ".join(sorted(self._tools)) or "none"
        return UnknownToolError(f"unknown tool {name!r}; registered tools: {known}")

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return sorted(self._tools)

    def definitions(self) -> list[ToolDefinition]:
        return [self._tools[name].definition for name in self.names()]


def load_tool_specs(specs: Iterable[str]) -> list[Tool]:
    """Tools named ``MODULE:ATTR`` (a Tool or a list of them), as ``--tools`` gives them. A module in the current
    folder is found too, as ``python -m`` would find it (the console script's own folder is first on the path)."""
    import importlib
    import os
    import sys

    tools: list[Tool] = []
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.append(here)  # after everything installed: a local file never shadows a real package
    try:
        for spec in specs:
            module_name, _, attr = spec.partition(":")
            if not module_name or not attr:
                raise ConfigError(f"--tools {spec}: give MODULE:ATTR of a tool (for example mytools:send_email)")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name:
                    what = f"importing {module_name} failed ({exc})"
                    raise ConfigError(f"--tools {spec}: {what}; fix the module") from None
                raise ConfigError(
                    f"--tools {spec}: cannot load it (no module {module_name!r} here or installed); "
                    "give MODULE:ATTR of a tool"
                ) from None
            except Exception as exc:  # the user's module runs on import: whatever it raises is their error to fix
                raise ConfigError(
                    f"--tools {spec}: importing {module_name} failed ({type(exc).__name__}: {exc}); fix the module"
                ) from None
            try:
                value = getattr(module, attr)
            except AttributeError:
                raise ConfigError(
                    f"--tools {spec}: {module_name} has no {attr!r}; give MODULE:ATTR of a tool"
                ) from None
            found = value if isinstance(value, list | tuple) else [value]
            for item in found:
                if not isinstance(item, Tool):
                    raise ConfigError(f"--tools {spec}: {item!r} is not a tool; decorate it with @safepoint.tool")
            tools.extend(found)
    finally:
        if added:
            sys.path.remove(here)
    return tools
