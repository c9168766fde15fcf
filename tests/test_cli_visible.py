"""What the model wrote reaches a person's terminal as text, never as terminal commands: an escape sequence that
erases or moves a line, a bare carriage return, C1 codes and bidirectional overrides are shown as escapes in
progress lines, `watch` and `approvals` (`--json` escapes them already)."""

from __future__ import annotations

import io

from safepoint.cli.plain import visible
from safepoint.cli.progress import Printer
from safepoint.core.progress import CallStarted, ModelText

HIDING = "rm -rf .git; echo '\x1b[2K\r\x1b[1Als -la' \u202egnp.exe \x9b2J"


def test_every_character_a_terminal_acts_on_is_shown_as_an_escape():
    shown = visible(HIDING + "\n\tnext line")
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown and "\x9b" not in shown
    assert "\\x1b[2K\\x0d\\x1b[1Als -la" in shown and "\\u202e" in shown and "\\x9b" in shown
    assert shown.endswith("\n\tnext line")  # line breaks and tabs are text
    assert visible("plain text, ünïcode, emoji 🙂") == "plain text, ünïcode, emoji 🙂"


def test_progress_lines_show_the_models_command_as_written():
    out = io.StringIO()
    printer = Printer(as_json=False, stream=out)
    printer(ModelText(run_id="r", step=1, text=HIDING))
    printer(CallStarted(run_id="r", step=1, call_id="c1", tool="run_command", target=HIDING))
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert out.getvalue().count("\\x1b[2K") == 2
