"""Rich renderings of the library's plain-data reports."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

_STATUS_STYLE = {
    "succeeded": "green",
    "completed": "green",
    "failed": "red",
    "uncertain": "yellow",
    "started": "yellow",
    "interrupted": "yellow",
    "waiting_decision": "magenta",
}


def _styled(value: str) -> Text:
    return Text(value, style=_STATUS_STYLE.get(value, ""))


def status_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="runs")
    for column in ("run_id", "status", "step", "calls", "problems", "task"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["run_id"],
            _styled(row["status"]),
            str(row["step"]),
            str(row["calls"]),
            str(row["problems"]),
            row["task"][:60],
        )
    return table


def ledger_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="tool ledger")
    for column in ("call_id", "step_id", "tool_name", "status", "idempotency", "replay_policy", "risk_level"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["call_id"],
            row["step_id"],
            row["tool_name"],
            _styled(row["status"]),
            row["idempotency"],
            row["replay_policy"],
            row["risk_level"],
        )
    return table


def checkpoint_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="checkpoints")
    for column in ("checkpoint_id", "step", "kind", "created_at", "complete"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["checkpoint_id"],
            str(row["step"]),
            row["kind"],
            row["created_at"],
            "yes" if row["complete"] else "NO",
        )
    return table


def explain_view(data: dict[str, Any]) -> Group:
    resume_from = data["resume_from"]
    head = Text.assemble(
        ("run ", "bold"),
        data["run_id"],
        "  status ",
        _styled(data["status"]),
        "\n",
        ("resume from ", "bold"),
        str(resume_from["checkpoint_id"]),
        f" (step {resume_from['step']}): ",
        resume_from["why"],
    )
    table = Table(title="calls")
    for column in ("call_id", "tool", "status", "idempotency/policy", "replayable", "why"):
        table.add_column(column, overflow="fold")
    for call in data["calls"]:
        table.add_row(
            call["call_id"],
            call["tool"],
            _styled(call["status"]),
            f"{call['idempotency']}/{call['replay_policy']}",
            "yes" if call["replayable"] else "no",
            call["why"],
        )
    parts: list[Any] = [head, table]
    if data["needs_decision"]:
        lines = [f"{d['call_id']} ({d['tool']}): {d['why']}" for d in data["needs_decision"]]
        parts.append(Panel("\n".join(lines), title="needs a decision (--replay / --skip)", style="magenta"))
    if data["workspace_drift"]:
        lines = [f"{d['path']}: changed since {d['call_id']} wrote it" for d in data["workspace_drift"]]
        parts.append(Panel("\n".join(lines), title="workspace drift", style="yellow"))
    if data["problems"]:
        lines = [f"{p['kind']} at {p['position']}: {p['detail']}" for p in data["problems"]]
        parts.append(Panel("\n".join(lines), title="damaged records (skipped)", style="red"))
    return Group(*parts)


def note_panel(note: str) -> Panel:
    return Panel(Text(note), title="recovery note injected for the model", style="cyan")
