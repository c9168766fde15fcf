"""What ``run`` and ``resume`` print while they work: the library's progress events (``Run.on_event``), as lines for
people or, with ``--json``, one JSON object a line (the shapes are in the README, "Progress events").

The events come redacted from the library; the password mask of every ``--json`` output is applied here too.
Plain writes, no rich: a line is written as it happens and flushed, and colour only on a terminal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from safepoint.api import answer_command
from safepoint.cli.common import masked, plain
from safepoint.cli.plain import visible

if TYPE_CHECKING:
    from safepoint.api import ProgressEvent

_MARKS = {"succeeded": ("ok", "32"), "failed": ("failed", "31"), "uncertain": ("uncertain", "33")}


class Printer:
    """``Run.on_event``'s observer for the terminal. ``where``: the options that find this run's store from
    anywhere (``-w DIR``), added to the approve and deny commands it prints when they are needed."""

    def __init__(self, *, as_json: bool, where: str = "", stream: TextIO | None = None) -> None:
        self.as_json = as_json
        self.where = where
        self.stream = stream or sys.stdout
        self.colour = not as_json and self.stream.isatty() and "NO_COLOR" not in os.environ
        self.mid_line = False  # streamed text left the cursor inside a line
        self.text_step = -1  # the step whose text is being shown

    def __call__(self, event: ProgressEvent) -> None:
        data: dict[str, Any] = plain(event)
        if self.as_json:
            self._write(json.dumps(masked(data)) + "\n")
            return
        shown = getattr(self, "_" + data["event"], None)
        if shown is not None:  # the model's text and command lines as they are, never as terminal commands
            shown({key: visible(value) if isinstance(value, str) else value for key, value in data.items()})

    def finished(self, run_id: str, status: str, *, spaced: bool = True) -> None:
        """The last line: the run's status (``--json``: an event of its own, ``finished``)."""
        if self.as_json:
            self._write(json.dumps({"event": "finished", "run_id": run_id, "status": status}) + "\n")
        else:
            if spaced:
                self._line("")
            self._line(f"run {run_id}: {self._paint(status, '1')}")

    # one method per event kind -----------------------------------------------------------------------------------
    def _text(self, data: dict[str, Any]) -> None:
        if data["step"] != self.text_step:  # a new turn: a blank line sets it apart from the calls before it
            self.text_step = data["step"]
            self._line("")
        self._write(data["text"])
        self.mid_line = not data["text"].endswith("\n")

    def _turn(self, data: dict[str, Any]) -> None:
        if not data["streamed"] and data["text"].strip():
            self._line("")
            self._line(data["text"].rstrip("\n"))
        elif self.mid_line:
            self._line("")  # the streamed text ends its line
        self.text_step = data["step"]

    def _call_started(self, data: dict[str, Any]) -> None:
        self._line(self._paint(f"  -> {data['tool']} {data['target']}".rstrip(), "2"))

    def _call_finished(self, data: dict[str, Any]) -> None:
        word, colour = _MARKS.get(data["status"], (data["status"], ""))
        took = f" in {_seconds(data['duration_s'])}" if data["duration_s"] is not None else " (not run now)"
        line = f"  {self._paint(word, colour)} {data['tool']} {data['target']}".rstrip() + took
        if data["detail"]:
            line += f": {data['detail']}"
        self._line(line)

    def _approval_wait(self, data: dict[str, Any]) -> None:
        self._line(
            self._paint(f"  waiting for approval: {data['tool']} {data['target']} ({data['risk_level']} risk)", "35")
        )
        self._line(f"    approve: {answer_command('approve', data['run_id'], data['call_id'], self.where)}")
        self._line(f"    deny:    {answer_command('deny', data['run_id'], data['call_id'], self.where)}")

    def _status(self, data: dict[str, Any]) -> None:
        if data["status"] in ("waiting_decision", "interrupted", "cancelled", "closed") and data["detail"]:
            self._line(self._paint(f"{data['status']}: {data['detail']}", "33"))

    # writing ------------------------------------------------------------------------------------------------------
    def _paint(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text

    def _line(self, text: str) -> None:
        if self.mid_line:
            self._write("\n")
            self.mid_line = False
            if not text:
                return  # ending the streamed line was the line break asked for
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
