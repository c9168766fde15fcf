"""safepoint: crash-safe AI-agent runs.

A durable tool ledger (a tool never runs before the ledger says ``started``), checkpoints at fixed points,
resume that never repeats what must not be repeated, and a recovery note that tells the model what happened.

The root holds what most users touch. The rest is in its module:

- ``safepoint.protocol``: the recovery protocol's records (seed 003): restart checkpoints and their payloads,
  ``Resumable``/``ReplayForbidden``, terminal events, ``SELF_HEALING_PROMPT``.
- ``safepoint.results``: the typed results the API returns (``RunSummary``, ``Explanation``, ``ConflictView``...).
- ``safepoint.records``: every seed record and enum (``RunInfo``, ``WorkspaceState``, the ``Literal`` types).
- ``safepoint.errors``: the whole error tree (``ScenarioError``, ``UnknownToolError``, ``WorkspaceError``...).
- ``safepoint.supervision``: schedules and the daemon. ``safepoint.engine.tools.ToolRegistry``;
  ``safepoint.core.commands.classify_command`` (how a shell command is judged); ``safepoint.core.restart.
  RecoveryVerdict``; ``safepoint.providers.base`` (``Context``, ``ModelTurn``, to write a provider);
  ``safepoint.standins.scenario`` (``Scenario``, ``load_scenario``).

Every name is imported when first used (PEP 562), so ``import safepoint`` and the CLI start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from safepoint.api import Run, Safepoint, open
    from safepoint.engine.tools import Tool, ToolContext, tool
    from safepoint.errors import (
        ConfigError,
        CorruptRecordError,
        DecisionNeeded,
        ExitCode,
        ProviderError,
        RecoveryClosedError,
        ResumeError,
        RunLockedError,
        RunNotFoundError,
        SafepointError,
        StaleGenerationError,
        StoreError,
        ToolFailure,
    )
    from safepoint.providers.base import Provider
    from safepoint.providers.openai_compat import OpenAIProvider
    from safepoint.providers.scripted import ScriptedProvider
    from safepoint.records import (
        Checkpoint,
        CheckpointConflict,
        CompensateExternalAction,
        FilePatchEntry,
        Message,
        RecoveryAction,
        RestoreSession,
        RollbackFiles,
        ToolCall,
        ToolDefinition,
        ToolLedgerEntry,
    )

__version__ = "0.1.0"

_WHERE = {
    "api": ("Run", "Safepoint", "open"),
    "engine.tools": ("Tool", "ToolContext", "tool"),
    "errors": (
        "ConfigError",
        "CorruptRecordError",
        "DecisionNeeded",
        "ExitCode",
        "ProviderError",
        "RecoveryClosedError",
        "ResumeError",
        "RunLockedError",
        "RunNotFoundError",
        "SafepointError",
        "StaleGenerationError",
        "StoreError",
        "ToolFailure",
    ),
    "providers.base": ("Provider",),
    "providers.openai_compat": ("OpenAIProvider",),  # the openai package takes a quarter of a second to import
    "providers.scripted": ("ScriptedProvider",),
    "records": (
        "Checkpoint",
        "CheckpointConflict",
        "CompensateExternalAction",
        "FilePatchEntry",
        "Message",
        "RecoveryAction",
        "RestoreSession",
        "RollbackFiles",
        "ToolCall",
        "ToolDefinition",
        "ToolLedgerEntry",
    ),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'safepoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"safepoint.{module}"), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Checkpoint",
    "CheckpointConflict",
    "CompensateExternalAction",
    "ConfigError",
    "CorruptRecordError",
    "DecisionNeeded",
    "ExitCode",
    "FilePatchEntry",
    "Message",
    "OpenAIProvider",
    "Provider",
    "ProviderError",
    "RecoveryAction",
    "RecoveryClosedError",
    "RestoreSession",
    "ResumeError",
    "RollbackFiles",
    "Run",
    "RunLockedError",
    "RunNotFoundError",
    "Safepoint",
    "SafepointError",
    "ScriptedProvider",
    "StaleGenerationError",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolFailure",
    "ToolLedgerEntry",
    "__version__",
    "open",
    "tool",
]
