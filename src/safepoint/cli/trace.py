"""``safepoint trace RUN``: the run's timeline, one line per event, readable at 80 columns.

A line is the time (UTC, to the millisecond), the writer's generation (``g2``: the attempt after a crash or a
takeover reads apart from the one before it), the event, what it is about (a call, a checkpoint or a path) and
the event's key fields (``core.trace_events`` orders them); a line longer than the terminal is cut with ``…``.
A new day starts with a line of its own. Plain text, no rich: fields hold ``[..]`` (redaction marks) that are not
markup. Gets plain data (``--json`` output's shape), never the library's objects.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

_SUBJECTS = ("call_id", "checkpoint_id", "path", "assertion")
_BARE = frozenset({"kind", "result"})  # shown without their name: a checkpoint's kind, an assertion's result
EVENT_WIDTH = 18  # the longest common names (recovery_assertion); a longer one pushes its line on


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(_value(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return " ".join(str(value).split())  # one line, whatever the field held


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def line(event: Mapping[str, Any], key: Iterable[tuple[str, Any]], width: int = 80) -> str:
    """One event as a timeline line (``key``: the fields to show, in order)."""
    at = str(event.get("at", ""))
    clock = at[11:23] if len(at) >= 23 else at
    data = event.get("data") or {}
    named = next((name for name in _SUBJECTS if data.get(name) is not None), None)
    subject = _value(data[named]) if named else ""
    shown = {named}
    if named == "call_id" and data.get("tool_name"):
        subject, shown = f"{data['tool_name']}({subject})", {named, "tool_name"}  # as the recovery note names it
    parts = [_value(value) if name in _BARE else f"{name}={_value(value)}" for name, value in key if name not in shown]
    if data.get("result") is not None:  # an assertion: its result first, then the assertion's name
        subject, parts = f"{_value(data['result'])} {subject}", [p for p in parts if p != _value(data["result"])]
    fields = " ".join(parts)
    head = f"{clock:<12} g{event.get('generation', 0)} {event.get('event', ''):<{EVENT_WIDTH}}"
    text = f"{head} {subject} {fields}".rstrip() if subject else f"{head} {fields}".rstrip()
    return _cut(text, width)


def timeline(events: list[dict[str, Any]], keys: list[list[tuple[str, Any]]], width: int | None = None) -> str:
    """Every event's line, with a line of its own where a new day starts."""
    width = width or shutil.get_terminal_size((80, 24)).columns
    out: list[str] = []
    day = ""
    for event, key in zip(events, keys, strict=True):
        at = str(event.get("at", ""))
        if at[:10] != day:
            day = at[:10]
            out.append(f"-- {day} (UTC) --")
        out.append(line(event, key, width))
    return "\n".join(out) + "\n" if out else ""
