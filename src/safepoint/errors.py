"""Every failure safepoint raises on purpose is a ``SafepointError``; each message names the thing and the fix.

The tree (the exit code a command ends with, from ``ExitCode``)::

    SafepointError                      1  FAILED
    ├── ConfigError                     2  USAGE     bad store URL, missing workspace, bad tool registration
    │   ├── StoreURLError
    │   ├── StoreKeyError                            an encrypted store's key missing or wrong, a key for a plain store
    │   ├── WorkspaceError
    │   │   └── GitError                             git failed, timed out, or refused what was asked
    │   ├── ToolRegistrationError                    e.g. a non_idempotent tool with replay_policy auto
    │   └── NoCompensatorError                       compensate on a tool that declares no compensator
    ├── ScenarioError                   2  USAGE     a scenario file that cannot be played
    ├── UnknownToolError                1            the model asked for a tool nobody registered
    ├── StoreError                      1            the store cannot do what was asked
    │   ├── CorruptRecordError                       a torn or corrupt record (reported, never loaded)
    │   │   └── TamperedRecordError                  a record of an encrypted store that fails authentication
    │   ├── RunNotFoundError            4  NOT_FOUND
    │   ├── RunExistsError              2  USAGE
    │   ├── RunLockedError              5  LOCKED    another live process owns the run
    │   ├── DiskFullError              13  DISK_FULL the store's disk is full: free space, then resume
    │   └── StaleGenerationError        6  STALE     this process was fenced off by a newer owner
    ├── ResumeError                     1            nothing safe to resume from, or a decision that does not apply
    │   ├── UnknownReferenceError       2  USAGE     a checkpoint, call or conflict the run does not have
    │   ├── ResumeOptionError           2  USAGE     --replay/--skip of a call that is not waiting for that decision
    │   ├── RecoveryClosedError         9  CLOSED    restart recovery closed the run (an assertion, ReplayForbidden)
    │   └── DamagedLogError            12  DAMAGED   the run's log lost its first records: never resumed on its word
    ├── DecisionNeeded                  3  WAITING_DECISION  a call may have taken effect; a person decides
    ├── RunCancelled                   10  CANCELLED the user cancelled the run while it worked
    ├── WorkVoided                      1            a context reset or a successor voided the work in flight
    ├── Interrupted                    11  INTERRUPTED  SIGTERM or Ctrl-C: stopped at a safe point, checkpoint kept
    ├── LedgerTransitionError           1            a status change the ledger forbids (a bug, never user input)
    ├── ProviderError                   8  PROVIDER  the model server failed or refused the request
    └── ToolFailure                     1            a tool reported failure (recorded in the ledger as ``failed``)

The CLI turns each into one line on stderr and its exit code; the daemon reads its workers' exit codes with the
same enum. Internal exceptions that only carry control flow (the classifier's ``ParseFailure``, caught where the
command is walked) and never reach a caller stay beside the code that raises and catches them.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from safepoint.protocol import CancelRequest, ReplayForbiddenReason


class ExitCode(enum.IntEnum):
    """The exit codes of every ``safepoint`` command and daemon worker (documented in the README)."""

    OK = 0
    FAILED = 1
    USAGE = 2  # bad input: a scenario, a store URL, an option, a checkpoint or call that does not exist
    WAITING_DECISION = 3  # an uncertain call waits for --replay/--skip, or a call waits for approval
    NOT_FOUND = 4
    LOCKED = 5  # another live process owns the run
    STALE = 6  # this process was fenced off by a newer owner
    CONFLICTS = 7  # a rollback or resolve left conflicts for the user
    PROVIDER = 8
    CLOSED = 9  # restart recovery closed the run instead of resuming it
    CANCELLED = 10
    INTERRUPTED = 11  # SIGTERM or Ctrl-C: stopped at a safe point; the next start resumes
    DAMAGED = 12  # fsck found problems in the store (repaired with --repair, or not): each is printed
    DISK_FULL = 13  # the store's disk is full: free space, then resume (nothing half-written is left)


class SafepointError(Exception):
    """Root of every error safepoint raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILED


class ConfigError(SafepointError):
    exit_code = ExitCode.USAGE


class StoreURLError(ConfigError):
    pass


class StoreKeyError(ConfigError):
    """An encrypted store opened without its key or with another one, or a key given for a store that is not
    encrypted. The message names where the key came from and its key id, never the key."""


class WorkspaceError(ConfigError):
    pass


class GitError(WorkspaceError):
    """git failed, timed out, or refused what was asked; the message names the repository or path and the fix."""


class ToolRegistrationError(ConfigError):
    pass


class NoCompensatorError(ConfigError):
    """The tool declares no compensator: its effect must be undone by hand."""


class ScenarioError(SafepointError):
    exit_code = ExitCode.USAGE


class UnknownToolError(SafepointError):
    pass


class StoreError(SafepointError):
    pass


class CorruptRecordError(StoreError):
    pass


class TamperedRecordError(CorruptRecordError):
    """A record of an encrypted store that fails authentication: changed, moved from another run or place, or
    written with another key. Never decrypted into garbage, never loaded."""


class RunNotFoundError(StoreError):
    exit_code = ExitCode.NOT_FOUND


class RunExistsError(StoreError):
    exit_code = ExitCode.USAGE


class RunLockedError(StoreError):
    exit_code = ExitCode.LOCKED


class DiskFullError(StoreError):
    """The disk under the store (or the workspace) is full. What was being written is undone (a log append cut back
    to its last whole record, a run half-created removed), so once space is freed the run resumes cleanly."""

    exit_code = ExitCode.DISK_FULL


def is_disk_full(exc: BaseException) -> bool:
    """An ``OSError`` that says the disk (or the user's quota) is full."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class StaleGenerationError(StoreError):
    exit_code = ExitCode.STALE


class ResumeError(SafepointError):
    pass


class UnknownReferenceError(ResumeError):
    """A checkpoint, call or conflict path the run does not have: bad input, said with where to look."""

    exit_code = ExitCode.USAGE


class ResumeOptionError(ResumeError):
    """``--replay``/``--skip`` that cannot apply: a call that is not uncertain, both for one call, a finished run.
    Checked before the run is claimed, so nothing is written."""

    exit_code = ExitCode.USAGE


class RecoveryClosedError(ResumeError):
    """Restart recovery did not resume the run; it was closed and its parent (if any) told."""

    exit_code = ExitCode.CLOSED


class DamagedLogError(ResumeError):
    """The run's log lost records a resume would need to know what already ran (its beginning was cut): it is
    never resumed on its word. Refused before the run is claimed, so nothing is written."""

    exit_code = ExitCode.DAMAGED


class DecisionNeeded(SafepointError):
    """A call may have taken effect and its policy says a person decides (``--replay`` / ``--skip``).
    ``choices``: call id -> the decisions the engine accepts for it (``("replay", "skip")``, or ``("skip",)`` for
    a call that cannot run again); empty when the raiser does not know them (a subagent's, a framework's)."""

    exit_code = ExitCode.WAITING_DECISION

    def __init__(self, message: str, choices: Mapping[str, tuple[str, ...]] | None = None) -> None:
        super().__init__(message)
        self.choices: dict[str, tuple[str, ...]] = dict(choices or {})


class RunCancelled(SafepointError):
    """The user cancelled the run while it was working (``safepoint cancel``)."""

    exit_code = ExitCode.CANCELLED

    def __init__(self, request: CancelRequest, position: int | None) -> None:
        super().__init__(f"cancelled by {request.by} at {request.at}")
        self.request = request
        self.position = position  # None: a whole-stream cancel sent to an ancestor


class WorkVoided(SafepointError):
    """The work in flight lost its meaning: the context was reset, or a successor took it over."""

    def __init__(self, reason: ReplayForbiddenReason, detail: str, position: int) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.position = position


class Interrupted(SafepointError):
    """The process was asked to stop (SIGTERM, Ctrl-C): it stops at a safe point and leaves the restart checkpoint."""

    exit_code = ExitCode.INTERRUPTED


class LedgerTransitionError(SafepointError):
    """A status change the state machine forbids: a bug in the caller, never a user error."""


class ProviderError(SafepointError):
    exit_code = ExitCode.PROVIDER


class ToolFailure(SafepointError):
    """Raised by a tool to report an ordinary failure; the ledger records it as ``failed``."""
