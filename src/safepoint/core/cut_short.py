"""safepoint's own rollbacks a crash cut short, each with the command that finishes it. A resume finishes one on
its own, but a finished run is never resumed (`resume` says there is nothing to do), so a half-done rollback stayed
half done with nobody told: ``explain`` and ``resume`` name it and the fix. A resolution or a compensation cut short
is not named here yet (their own commands settle them; no test has followed such a hint). Pure: the run's ledger
in, one line per action out."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from safepoint.core.resume import is_internal
from safepoint.records import ToolLedgerEntry

_UNFINISHED = frozenset({"planned", "started", "uncertain"})


@dataclass(frozen=True)
class CutShort:
    call_id: str
    tool: str
    what: str  # the action, as a person names it
    fix: str  # the command that finishes it, written out whole


def cut_short(run_id: str, entries: Iterable[ToolLedgerEntry]) -> list[CutShort]:
    """The run's own actions left unfinished by a crash, in ledger order."""
    found = []
    run = shlex.quote(run_id)
    for entry in entries:
        if entry.status not in _UNFINISHED or not is_internal(entry):
            continue
        if entry.tool_name != "rollback_files":
            continue
        to = str(entry.input.get("checkpoint_id", ""))
        # Any rollback finishes the one cut short first; to the same checkpoint, it adds nothing after it.
        fix = f"safepoint rollback {run} --to {shlex.quote(to)}"
        found.append(CutShort(entry.call_id, entry.tool_name, f"rollback_files to {to}", fix))
    return found
