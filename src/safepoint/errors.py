"""Every failure safepoint raises on purpose is a ``SafepointError``; each message names the thing and the fix.

The tree::

    SafepointError
    ├── ConfigError                 bad store URL, missing workspace, bad tool registration
    │   ├── StoreURLError
    │   ├── WorkspaceError
    │   └── ToolRegistrationError   e.g. a non_idempotent tool with replay_policy auto
    ├── ScenarioError               a scenario file that cannot be played
    ├── UnknownToolError            the model asked for a tool nobody registered
    ├── StoreError                  the store cannot do what was asked
    │   ├── CorruptRecordError      a torn or corrupt record (reported, never loaded)
    │   ├── RunNotFoundError
    │   ├── RunExistsError
    │   ├── RunLockedError          another live process owns the run
    │   └── StaleGenerationError    this process was fenced off by a newer owner
    ├── ResumeError                 nothing safe to resume from, or a decision that does not apply
    │   └── RecoveryClosedError     restart recovery closed the run (a failed assertion or ReplayForbidden)
    ├── ProviderError               the model server failed or refused the request
    └── ToolFailure                 a tool reported failure (recorded in the ledger as ``failed``)

The CLI turns each into one line on stderr and a non-zero exit code.
"""

from __future__ import annotations


class SafepointError(Exception):
    """Root of every error safepoint raises on purpose."""

    exit_code = 1


class ConfigError(SafepointError):
    exit_code = 2


class StoreURLError(ConfigError):
    pass


class WorkspaceError(ConfigError):
    pass


class ToolRegistrationError(ConfigError):
    pass


class ScenarioError(SafepointError):
    exit_code = 2


class UnknownToolError(SafepointError):
    pass


class StoreError(SafepointError):
    pass


class CorruptRecordError(StoreError):
    pass


class RunNotFoundError(StoreError):
    exit_code = 4


class RunExistsError(StoreError):
    exit_code = 2


class RunLockedError(StoreError):
    exit_code = 5


class StaleGenerationError(StoreError):
    exit_code = 6


class ResumeError(SafepointError):
    pass


class RecoveryClosedError(ResumeError):
    """Restart recovery did not resume the run; it was closed and its parent (if any) told. Exit code 9."""

    exit_code = 9


class ProviderError(SafepointError):
    exit_code = 8


class ToolFailure(SafepointError):
    """Raised by a tool to report an ordinary failure; the ledger records it as ``failed``."""
