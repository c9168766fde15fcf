"""Which decisions the engine takes for a call that waits for one, and the one line that offers exactly those.

A call whose outcome is uncertain waits for ``--replay`` or ``--skip``; but ``--replay`` is refused for a call
that cannot run again: its arguments were redacted before they were stored (a secret), or they are lost (their
blob quarantined or freed, and the ledger keeps no whole copy). Every message that asks for a decision offers only
what will be accepted, and ``--replay`` of such a call is refused before the run is claimed (nothing written).
The test is the runner's own (``large_values.read_as_note`` / ``recovered_call``), run on the log as read, so
the offer and the run cannot disagree (rejected: a second, looser rule here, such as "a blob of its input is
missing", which differs where the ledger's copy is whole but the history's is not).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from typing import Any, cast

import msgspec

from safepoint.core.progress import answer_command
from safepoint.core.run_view import RunView
from safepoint.engine import large_values
from safepoint.engine.content import LOST_NOTE, Content
from safepoint.engine.file_changes import FileChanges
from safepoint.engine.log_writer import SECRET_ARGUMENTS, redacted_arguments
from safepoint.errors import DecisionNeeded, StoreError
from safepoint.records import RunInfo, ToolCall, ToolLedgerEntry
from safepoint.store.base import Blobs, Store
from safepoint.workspace.files import Workspace


class _ReadOnly:
    """``FileChanges``' records for a check that only reads file versions (a write is a bug here)."""

    def add(self, body: msgspec.Struct) -> int:
        raise StoreError(f"a read-only check stored a {type(body).__name__}")

    def trace(self, event: str, **data: Any) -> None:
        return None


class _NoFiles:
    """File versions for a check made without the workspace: a ledger copy patched on a file version cannot be
    rebuilt here, so it counts as no whole copy (the check with the workspace, at resume, is the exact one)."""

    def version(self, path: str, digest: str, ref: str | None = None) -> bytes:
        raise StoreError(f"{path}: its version is not read without the workspace")


class _Judge:
    """The runner's test, for many calls of one run read once: the history's calls by id, the run's content and
    file versions made at the first call that needs them (a cost per run, not per waiting call)."""

    def __init__(self, store: Blobs, view: RunView, workspace: Workspace | None) -> None:
        self.store, self.view, self.workspace = store, view, workspace
        self._asked: dict[str, ToolCall] | None = None
        self._content: Content | None = None
        self._files: FileChanges | _NoFiles | None = None

    def asked(self, call_id: str) -> ToolCall | None:
        """The call as the history holds it (the latest message that asked it), or None (an own loop's call)."""
        if self._asked is None:
            self._asked = {}
            for seq in sorted(self.view.message_records):
                self._asked.update((call.call_id, call) for call in self.view.message_records[seq].tool_calls)
        return self._asked.get(call_id)

    def content(self) -> Content:
        if self._content is None:
            self._content = large_values.reader(self.store, self.view)
        return self._content

    def files(self) -> FileChanges | _NoFiles:
        if self._files is None:
            view = self.view
            self._files = _NoFiles()
            if self.workspace is not None:
                befores = {k: list(v) for k, v in view.befores.items()}
                self._files = FileChanges(
                    view.info.run_id,
                    self.workspace,
                    self.content(),
                    _ReadOnly(),
                    list(view.patches),
                    befores,
                    view.blobs,
                )
        return self._files

    def refusal(self, entry: ToolLedgerEntry) -> str:
        if redacted_arguments(entry.input):
            return SECRET_ARGUMENTS
        asked = self.asked(entry.call_id)
        if asked is None:
            return ""
        content = self.content()
        said = large_values.resolve_call(asked, content)
        if not large_values.read_as_note(said, content):
            return ""
        # A stand-in without the workspace: only its ``version`` is read, and it refuses (a StoreError, caught).
        files = cast("FileChanges", self.files())
        try:
            if large_values.recovered_call(said, entry, files, content) is not None:
                return ""
        except StoreError:
            pass  # a file version the ledger's copy is patched on is lost too: no whole copy
        return lost_reason(content.lost_args[entry.call_id])


def replay_refusal(store: Blobs, view: RunView, workspace: Workspace | None, entry: ToolLedgerEntry) -> str:
    """Why ``--replay`` of ``entry`` is refused ("" when the call can run again), in words a person reads."""
    return _Judge(store, view, workspace).refusal(entry)


def lost_reason(note: str) -> str:
    """Why a call whose arguments read back as ``note`` (``Content.found_lost``'s) cannot run again."""
    return f"{note.removeprefix(LOST_NOTE).strip()}, and the ledger keeps no whole copy of them"


def refusals(store: Blobs, view: RunView, workspace: Workspace | None, call_ids: Iterable[str]) -> dict[str, str]:
    """``replay_refusal`` of each of ``call_ids`` the ledger holds (the call id -> why; "" when it can run)."""
    judge = _Judge(store, view, workspace)
    return {call_id: judge.refusal(view.ledger[call_id]) for call_id in call_ids if call_id in view.ledger}


def choices_of(refused: str) -> tuple[str, ...]:
    """The decisions accepted for a waiting call: ``("replay", "skip")``, or ``("skip",)`` when a replay is refused."""
    return ("skip",) if refused else ("replay", "skip")


def replay_refused(entry: ToolLedgerEntry, why: str) -> str:
    """The one line refusing ``--replay CALL``, with the decision that is accepted."""
    call_id = entry.call_id
    return (
        f"--replay {call_id}: {entry.tool_name}({call_id}) cannot run again: {why}; resume with --skip {call_id} "
        "(the model is told it may have happened) and let it call again"
    )


def waiting(run_id: str, calls: Sequence[tuple[str, str, str]], *, own_loop: bool = False) -> str:
    """The one line of ``DecisionNeeded`` for ``calls`` (tool, call id, why a replay is refused or ""): each
    call named with the options that will be accepted for it, its real id in them (never a placeholder).
    ``own_loop``: the run is a program's own loop, which `safepoint resume` refuses ("resume it from there"): the
    options are said as ``sp.resume``'s arguments, ``replay=['ID']``, never as flags that command would refuse."""

    def option(name: str, call_id: str) -> str:
        return f"{name}=[{call_id!r}]" if own_loop else f"--{name} {shlex.quote(call_id)}"

    names = ", ".join(f"{tool}({call_id})" for tool, call_id, _ in calls)
    offers = []
    for tool, call_id, refused in calls:
        who = f" {tool}({call_id})" if len(calls) > 1 else ""
        skip = option("skip", call_id)
        if refused:
            offers.append(f"{skip} to leave{who or ' it'} (it cannot run again: {refused})")
        else:
            offers.append(f"{option('replay', call_id)} to run{who or ' it'} again or {skip} to leave it")
    return f"run {run_id!r} waits for a decision on {names}: resume with " + "; ".join(offers)


def decision_needed(
    store: Blobs, view: RunView, workspace: Workspace | None, entries: Sequence[ToolLedgerEntry]
) -> DecisionNeeded:
    """``DecisionNeeded`` for the calls ``entries`` of the run, offering for each only what will be accepted
    (``choices``: call id -> the decisions, for a program)."""
    judge = _Judge(store, view, workspace)
    refused = {entry.call_id: judge.refusal(entry) for entry in entries}
    info = view.info
    own_loop = is_own_loop(info)
    return DecisionNeeded(
        waiting(
            info.run_id,
            [(entry.tool_name, entry.call_id, refused[entry.call_id]) for entry in entries],
            own_loop=own_loop,
        ),
        choices={call_id: choices_of(why) for call_id, why in refused.items()},
    )


WAITING_WORDS = "waiting for --replay or --skip"  # what ``core.replay`` says of a call that waits


def said(why: str, refused: str) -> str:
    """``why`` a call waits, as ``explain`` shows it: a call that cannot run again waits for ``--skip`` only."""
    if not refused or WAITING_WORDS not in why:
        return why
    return why.replace(WAITING_WORDS, f"waiting for --skip (it cannot run again: {refused})")


def call_waits(call: ToolCall, why: str, *, lost: str = "") -> DecisionNeeded:
    """``DecisionNeeded`` for one call met by the runner (an own loop's ``Run.call`` after a resume); ``lost``: why
    it cannot run again (then only ``skip`` is offered)."""
    return DecisionNeeded(
        f"call {call.call_id} ({call.tool}) needs a decision: {said(why, lost)}",
        choices={call.call_id: choices_of(lost)},
    )


def cannot_wait(run_id: str, call: ToolCall) -> str:
    """A call that needs approval in a session that cannot wait for one (an engine used without a runner)."""
    return (
        f"call {call.call_id} ({call.tool}) needs approval, but this session cannot wait for one; run it through "
        f"`safepoint run`/`resume` or Run, which wait for `{answer_command('approve', run_id, call.call_id)}`"
    )


def is_own_loop(info: RunInfo) -> bool:
    """A run of a program's own loop (no scenario, no model server): `safepoint resume` refuses it, as
    ``providers.select.provider_for`` does; its program resumes it with ``sp.resume``."""
    return info.scenario is None and (info.provider or {}).get("kind") != "openai"


def commands(view: RunView, call_id: str, choices: Sequence[str]) -> list[str]:
    """Each accepted decision for ``call_id`` written out as what carries it out for this run: the command line,
    or for an own loop's run the ``sp.resume`` call its program makes."""
    run_id = view.info.run_id
    if is_own_loop(view.info):
        return [f"sp.resume({run_id!r}, {choice}=[{call_id!r}])" for choice in choices]
    return [f"safepoint resume {shlex.quote(run_id)} --{choice} {shlex.quote(call_id)}" for choice in choices]


def resumer(info: RunInfo) -> str:
    """What resumes the run, written out: the command, or for an own loop's run (which that command refuses with
    "resume it from there") its program's ``sp.resume``."""
    run_id = info.run_id
    return (
        f"`sp.resume({run_id!r})` in its program" if is_own_loop(info) else f"`safepoint resume {shlex.quote(run_id)}`"
    )


def answered_next(store: Store, run_id: str, *, attended: bool, approved: bool) -> str:
    """What acts on an approval's answer: the live owner, or (nobody runs the run) what resumes it."""
    effect = "runs the call" if approved else "tells the model it was denied"
    if attended:
        return f"the process running run {run_id} {effect} at its next check (within a second)"
    info = msgspec.json.decode(store.run_header(run_id), type=RunInfo)
    return (
        f"nobody is running run {run_id}: {resumer(info)} continues it and {effect}, or a daemon does if one "
        "serves this store"
    )
