"""``send_notification``: a stand-in for email, chat or payment calls, used by the demo and the crash tests.

It appends one JSON line to an outbox file outside the workspace (``SAFEPOINT_OUTBOX``), so a test can count how
many times the effect happened. It is non_idempotent with replay policy ``never``: after a crash that leaves it
uncertain, it is never sent again automatically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from safepoint.engine.tools import Tool, ToolContext, load_tool_specs, tool
from safepoint.errors import ToolFailure


@tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", side_effects=("notification",))
def send_notification(ctx: ToolContext, to: str, message: str) -> str:
    """Send a notification (appends to the outbox file named by SAFEPOINT_OUTBOX)."""
    outbox = os.environ.get("SAFEPOINT_OUTBOX")
    if not outbox:
        raise ToolFailure("no outbox configured; set SAFEPOINT_OUTBOX to the file notifications go to")
    line = json.dumps({"to": to, "message": message, "idempotency_key": ctx.idempotency_key, "run_id": ctx.run_id})
    with open(outbox, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return f"notification sent to {to}"


def cli_tools(specs: Iterable[str]) -> list[Tool]:
    """The tools a CLI run or a scheduled job has: this notification stand-in, plus ``--tools MODULE:ATTR``."""
    return [send_notification, *load_tool_specs(specs)]
