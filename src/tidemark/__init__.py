"""tidemark: crash-safe AI-agent runs.

A durable tool ledger (a tool never runs before the ledger says ``started``), checkpoints at fixed points,
resume that never repeats what must not be repeated, and a recovery note that tells the model what happened.
"""

from typing import TYPE_CHECKING, Any

from tidemark.api import Run, Tidemark, new_run_id, open
from tidemark.core.classify import Classification
from tidemark.core.commands import CommandRules, CommandVerdict, classify_command
from tidemark.core.restart import RecoveryVerdict
from tidemark.errors import (
    ConfigError,
    CorruptRecordError,
    ProviderError,
    RecoveryClosedError,
    ResumeError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    ScenarioError,
    StaleGenerationError,
    StoreError,
    StoreURLError,
    TidemarkError,
    ToolFailure,
    ToolRegistrationError,
    UnknownToolError,
    WorkspaceError,
)
from tidemark.records import (
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
from tidemark.recovery_records import (
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
from tidemark.runtime.provider import Context, ModelTurn, OutputStream, Provider, ScriptedProvider
from tidemark.runtime.scenario import Scenario, load_scenario
from tidemark.runtime.session import DecisionNeeded
from tidemark.runtime.tools import Tool, ToolContext, ToolRegistry, tool

if TYPE_CHECKING:
    from tidemark.runtime.openai_provider import OpenAIProvider

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "OpenAIProvider":  # the openai package takes a quarter of a second to import: only when used
        from tidemark.runtime.openai_provider import OpenAIProvider

        return OpenAIProvider
    raise AttributeError(f"module 'tidemark' has no attribute {name!r}")


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
    "Scenario",
    "ScenarioError",
    "ScriptedProvider",
    "StaleGenerationError",
    "StoreError",
    "StoreURLError",
    "Tidemark",
    "TidemarkError",
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
