"""What a run tells as it works: progress events, a call's main argument, and streamed text held back to whole
lines so it can be redacted before anyone sees it.

The events are the library's observable steps (``Run.on_event``); the CLI prints them, ``--json`` writes one a
line. Their shapes are part of the public surface (documented in the README): fields are only ever added.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from safepoint.core.large_values import is_reference
from safepoint.core.redact import Redactor

TARGET_CHARS = 80  # a main argument longer than this is cut: the line is for people, the ledger has it whole
MAIN_ARGUMENTS = ("path", "command", "cmd", "file", "url", "to", "query", "name", "target", "src", "dest")
HOLD_LIMIT = 24_000  # the private-key pattern spans at most ~20,000 characters: held no longer than that


class ModelText(msgspec.Struct, frozen=True, tag_field="event", tag="text"):
    """A piece of the model's text as it was streamed (whole lines, redacted)."""

    run_id: str
    step: int
    text: str


class ModelTurn(msgspec.Struct, frozen=True, tag_field="event", tag="turn"):
    """The model's reply for a step, recorded: its text (already shown piece by piece when ``streamed``) and how
    many tool calls it asked for."""

    run_id: str
    step: int
    text: str
    streamed: bool
    calls: int


class CallStarted(msgspec.Struct, frozen=True, tag_field="event", tag="call_started"):
    """A tool call starts: the ledger says ``started`` durably."""

    run_id: str
    step: int
    call_id: str
    tool: str
    target: str


class CallFinished(msgspec.Struct, frozen=True, tag_field="event", tag="call_finished"):
    """A tool call is settled. ``ran``: it ran in this process (else its recorded outcome was taken, or it was
    refused, denied or left uncertain without running); ``duration_s`` only when it ran; ``detail``: the first
    line of what the model is told, for a call that did not succeed."""

    run_id: str
    step: int
    call_id: str
    tool: str
    target: str
    status: str
    ran: bool
    duration_s: float | None
    detail: str


class ApprovalWait(msgspec.Struct, frozen=True, tag_field="event", tag="approval_wait"):
    """A call waits for a person: ``approve`` and ``deny`` are the commands that answer it."""

    run_id: str
    call_id: str
    tool: str
    target: str
    risk_level: str
    approve: str
    deny: str


class StatusChanged(msgspec.Struct, frozen=True, tag_field="event", tag="status"):
    """The run's status changed (``waiting_approval``, ``waiting_decision``, ``interrupted``, ``completed``...)."""

    run_id: str
    status: str
    detail: str


ProgressEvent = ModelText | ModelTurn | CallStarted | CallFinished | ApprovalWait | StatusChanged


def main_argument(args: Mapping[str, Any]) -> str:
    """The argument that says what a call is about (the path, the command...), on one line and cut to fit."""
    value: Any = next((args[k] for k in MAIN_ARGUMENTS if isinstance(args.get(k), str | int | float)), None)
    if value is None:
        value = next((v for v in args.values() if isinstance(v, str)), None)
    if value is None:  # only a large value, kept as a blob (``core.large_values``): its size, not a blob read
        value = next((f"({v['size']:,} bytes)" for v in args.values() if is_reference(v)), "")
    text = " ".join(str(value).split())
    return text if len(text) <= TARGET_CHARS else text[: TARGET_CHARS - 1] + "…"


def first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


# Built-in patterns whose match holds a space: a line holding one of these is let out whole.
SPACED_TRIGGERS = ("bearer", "authorization", "aws_secret_access_key", "-----begin")


class LineHold:
    """Streamed text, let out as soon as it is safe to redact and no sooner: whole words (a built-in secret
    holds no space, except the few ``SPACED_TRIGGERS`` name) or, when the line holds one of those or the
    redactor has secrets that may hold a space, whole lines. A private key block opened and not closed is held
    until its end line (or ``HOLD_LIMIT``). The unfinished last word is held, so a secret cut between two pieces
    is whole when it is redacted. Rejected: redacting each piece as it comes (a token cut in two passes both
    halves)."""

    def __init__(self, redactor: Redactor, sink: Callable[[str], None]) -> None:
        self.redactor = redactor
        self.sink = sink
        self.held = ""
        self.let_through = False  # anything went out since the last flush

    def feed(self, chunk: str) -> None:
        self.held += chunk
        held = self.held
        cut = held.rfind("\n") + 1
        opened = held.rfind("-----BEGIN", 0, cut)
        if opened >= 0 and "-----END" not in held[opened:cut] and len(held) < HOLD_LIMIT:
            cut = opened  # a key block still open: hold it whole
        elif not self.redactor.spans_words and not any(t in held[cut:].lower() for t in SPACED_TRIGGERS):
            cut = max(cut, max(held.rfind(" "), held.rfind("\t")) + 1)  # whole words
        if cut > 0:
            self._out(held[:cut])
            self.held = held[cut:]

    def flush(self) -> bool:
        """Let the rest out (the turn ended); True when any text of the turn went out."""
        if self.held:
            self._out(self.held)
            self.held = ""
        went, self.let_through = self.let_through, False
        return went

    def _out(self, text: str) -> None:
        self.let_through = True
        self.sink(self.redactor.text(text))


def redacted_event(event: ProgressEvent, redactor: Redactor) -> ProgressEvent:
    """Every text field of the event through the run's redactor: what is shown is redacted as what is kept."""
    shown: ProgressEvent = msgspec.convert(redactor.value(msgspec.to_builtins(event)), type=ProgressEvent)
    return shown


def answer_command(verb: str, run_id: str, call_id: str, where: str = "") -> str:
    """``safepoint approve|deny RUN CALL`` as a shell takes it, ``where`` (`` -w DIR``) with it: each word quoted
    (the call id is the model server's own string: a `;` in it ran a second command when pasted; rejected: the
    words unquoted), after ``--`` when one begins with "-" (else the parser took an option)."""
    words = " ".join(shlex.quote(word) for word in (run_id, call_id))
    if words.startswith("-") or " -" in words:  # after ``--`` nothing is an option: the store's options first
        return f"safepoint {verb}{where} -- {words}"
    return f"safepoint {verb} {words}{where}"
