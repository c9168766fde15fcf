"""tidemark: crash-safe AI-agent runs.

A durable tool ledger (a tool never runs before the ledger says ``started``), checkpoints at fixed points,
resume that never repeats what must not be repeated, and a recovery note that tells the model what happened.
"""

from tidemark.api import Run, Tidemark, new_run_id, open
from tidemark.core.classify import Classification
from tidemark.core.commands import CommandRules, CommandVerdict, classify_command
from tidemark.errors import (
    ConfigError,
    CorruptRecordError,
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
from tidemark.runtime.provider import Context, ModelTurn, Provider, ScriptedProvider
from tidemark.runtime.scenario import Scenario, load_scenario
from tidemark.runtime.session import DecisionNeeded
from tidemark.runtime.tools import Tool, ToolContext, ToolRegistry, tool

__version__ = "0.1.0"

__all__ = [
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
    "Provider",
    "RecoveryAction",
    "RestoreSession",
    "ResumeError",
    "RollbackFiles",
    "Run",
    "RunExistsError",
    "RunLockedError",
    "RunNotFoundError",
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
