"""safepoint: crash-safe AI-agent runs.

A durable tool ledger (a tool never runs before the ledger says ``started``), checkpoints at fixed points,
resume that never repeats what must not be repeated, and a recovery note that tells the model what happened.
"""

from typing import TYPE_CHECKING, Any

from safepoint.api import Run, Safepoint, new_run_id, open
from safepoint.core.classify import Classification
from safepoint.core.commands import CommandRules, CommandVerdict, classify_command
from safepoint.core.restart import RecoveryVerdict
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry, tool
from safepoint.errors import (
    ConfigError,
    CorruptRecordError,
    DecisionNeeded,
    ProviderError,
    RecoveryClosedError,
    ResumeError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    SafepointError,
    ScenarioError,
    StaleGenerationError,
    StoreError,
    StoreURLError,
    ToolFailure,
    ToolRegistrationError,
    UnknownToolError,
    WorkspaceError,
)
from safepoint.protocol import (
    SELF_HEALING_PROMPT,
    TERMINAL_STATUS_RESTART,
    RecoveryOwnerTerminalEvent,
    ReplayForbidden,
    Resumable,
    RuntimeRestartCheckpoint,
    RuntimeRestartQueuedSubmission,
    RuntimeRestartReactionLoopState,
    RuntimeRestartScheduledWorkContext,
    RuntimeRestartToolApprovalWait,
)
from safepoint.providers.base import Context, ModelTurn, OutputStream, Provider
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
from safepoint.standins.scenario import Scenario, load_scenario

if TYPE_CHECKING:
    from safepoint.providers.openai_compat import OpenAIProvider

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "OpenAIProvider":  # the openai package takes a quarter of a second to import: only when used
        from safepoint.providers.openai_compat import OpenAIProvider

        return OpenAIProvider
    raise AttributeError(f"module 'safepoint' has no attribute {name!r}")


__all__ = [
    "SELF_HEALING_PROMPT",
    "TERMINAL_STATUS_RESTART",
    "Checkpoint",
    "CheckpointConflict",
    "Classification",
    "CommandRules",
    "CommandVerdict",
    "CompensateExternalAction",
    "ConfigError",
    "Context",
    "CorruptRecordError",
    "DecisionNeeded",
    "FilePatchEntry",
    "Message",
    "ModelTurn",
    "OpenAIProvider",
    "OutputStream",
    "Provider",
    "ProviderError",
    "RecoveryAction",
    "RecoveryClosedError",
    "RecoveryOwnerTerminalEvent",
    "RecoveryVerdict",
    "ReplayForbidden",
    "RestoreSession",
    "Resumable",
    "ResumeError",
    "RollbackFiles",
    "Run",
    "RunExistsError",
    "RunLockedError",
    "RunNotFoundError",
    "RuntimeRestartCheckpoint",
    "RuntimeRestartQueuedSubmission",
    "RuntimeRestartReactionLoopState",
    "RuntimeRestartScheduledWorkContext",
    "RuntimeRestartToolApprovalWait",
    "Safepoint",
    "SafepointError",
    "Scenario",
    "ScenarioError",
    "ScriptedProvider",
    "StaleGenerationError",
    "StoreError",
    "StoreURLError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolFailure",
    "ToolLedgerEntry",
    "ToolRegistrationError",
    "ToolRegistry",
    "UnknownToolError",
    "WorkspaceError",
    "__version__",
    "classify_command",
    "load_scenario",
    "new_run_id",
    "open",
    "tool",
]
