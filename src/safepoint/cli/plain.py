"""A plain text table for the commands people run most (``status``): aligned columns that fit the terminal, colour
only on a terminal. rich's tables cost about a sixth of the CLI's start-up; this costs nothing to import."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safepoint.results import RunSummary

# What the model wrote is shown, never obeyed by the terminal: control characters (ESC sequences that erase or
# move lines, a bare CR, C1 codes) and bidirectional overrides are printed as escapes, so the command a person is
# asked to approve reads as what it is. Newlines and tabs stay.
_INVISIBLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (
        *range(0x00, 0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
    )
}


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on (except newline and tab) shown as an escape."""
    return text.translate(_INVISIBLE)


_COLOURS = {"green": "32", "red": "31", "yellow": "33", "magenta": "35", "dim": "2"}
STATUS_COLOUR = {
    "succeeded": "green",
    "completed": "green",
    "failed": "red",
    "uncertain": "yellow",
    "started": "yellow",
    "interrupted": "yellow",
    "waiting_decision": "magenta",
    "waiting_approval": "magenta",
    "closed": "red",
    "cancelled": "red",
}


def _paint(text: str, colour: str | None, on: bool) -> str:
    if not on or not colour or colour not in _COLOURS:
        return text
    return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    colours: Sequence[Sequence[str | None]] | None = None,
    width: int | None = None,
    colour: bool | None = None,
) -> str:
    """Columns as wide as their widest cell; the last one is cut to fit ``width`` (the terminal's, 80 when it is
    not a terminal). A cell may hold several lines."""
    if width is None:
        width = shutil.get_terminal_size((80, 24)).columns
    if colour is None:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    cells = [[cell.split("\n") for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, lines in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in lines))
    fixed = sum(widths[:-1]) + 2 * (len(widths) - 1)
    widths[-1] = max(len(headers[-1]), min(widths[-1], width - fixed))

    def line(parts: Sequence[str], paints: Sequence[str | None]) -> str:
        shown = []
        for i, part in enumerate(parts):
            cut = part if len(part) <= widths[i] else part[: max(widths[i] - 1, 0)] + "…"
            padded = cut if i == len(parts) - 1 else cut.ljust(widths[i])
            shown.append(_paint(padded, paints[i], colour))
        return "  ".join(shown).rstrip()

    out = [line(headers, [None] * len(headers)), line(["-" * w for w in widths], [None] * len(widths))]
    for r, row in enumerate(cells):
        paints = colours[r] if colours else [None] * len(row)
        for k in range(max(len(lines) for lines in row)):
            parts = [lines[k] if k < len(lines) else "" for lines in row]
            out.append(line(parts, paints if k == 0 else ["dim"] * len(row)))
    return "\n".join(out) + "\n"


def status_table(rows: Sequence[RunSummary], *, colour: bool | None = None) -> str:
    """``safepoint status``: one line a run (a closed run's terminal status under its status)."""
    body = [
        [
            row.run_id,
            row.status + (f"\n{row.terminal_status}" if row.terminal_status else ""),
            str(row.step),
            str(row.calls),
            str(row.problems),
            row.task.replace("\n", " "),
        ]
        for row in rows
    ]
    paints = [[None, STATUS_COLOUR.get(row.status), None, None, "red" if row.problems else None, None] for row in rows]
    return table(["run_id", "status", "step", "calls", "problems", "task"], body, colours=paints, colour=colour)


def _when(iso: str) -> str:
    """An ISO time as people read it in a table: date and time to the second (UTC, as recorded)."""
    return iso[:19].replace("T", " ")


def ledger_table(rows: Sequence[dict[str, object]], *, colour: bool | None = None) -> str:
    """``safepoint ledger``: one line a call, the policy last (it is cut first at a narrow terminal)."""
    if not rows:
        return "none: no tool call in this run yet\n"
    body = [
        [
            str(row["call_id"]),
            str(row["step_id"]).removeprefix("step_"),
            str(row["tool_name"]),
            str(row["status"]),
            str(row["risk_level"]),
            f"{row['idempotency']}/{row['replay_policy']}",
        ]
        for row in rows
    ]
    paints = [[None, None, None, STATUS_COLOUR.get(str(row["status"])), None, None] for row in rows]
    headers = ["call_id", "step", "tool", "status", "risk", "idempotency/replay"]
    return table(headers, body, colours=paints, colour=colour)


def checkpoint_table(rows: Sequence[dict[str, object]], *, colour: bool | None = None) -> str:
    """``safepoint checkpoints``: one line a checkpoint, with the call a tool_start/tool_end one belongs to."""
    if not rows:
        return "none: no checkpoint in this run yet\n"
    body = [
        [
            str(row["checkpoint_id"]),
            str(row["step"]),
            str(row["kind"]),
            str(row.get("call_id") or "-"),
            "yes" if row["complete"] else "NO",
            _when(str(row["created_at"])),
        ]
        for row in rows
    ]
    paints = [[None, None, None, None, None if row["complete"] else "red", None] for row in rows]
    headers = ["checkpoint_id", "step", "kind", "call", "complete", "created (UTC)"]
    return table(headers, body, colours=paints, colour=colour)


def history_table(rows: Sequence[dict[str, object]], *, colour: bool | None = None) -> str:
    """``safepoint history``: one line a message, its text cut to the terminal (``--json`` has it whole)."""
    if not rows:
        return "none: no message in this run\n"
    body = []
    for row in rows:
        calls = row.get("tool_calls") or []
        named = ", ".join(f"{c['tool']}({c['call_id']})" for c in calls)  # type: ignore[attr-defined]  # plain data: a list of dicts
        content = (" ".join(str(row["content"]).split()) + (f" -> {named}" if named else "")).strip()
        body.append([str(row["seq"]), str(row["branch"]), str(row["role"]), content])
    return table(["seq", "branch", "role", "content"], body, colour=colour)
