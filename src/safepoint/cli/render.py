"""Rich renderings of the library's typed results, read as plain data (``cli.common.plain``)."""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from safepoint.cli.plain import STATUS_COLOUR, visible


def _styled(value: str) -> Text:
    return Text(value, style=STATUS_COLOUR.get(value, ""))


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
        # Each call with what decides it, only what the engine accepts for it (its `commands`, from `choices`).
        lines = [
            f"{d['call_id']} ({d['tool']}): {d['why']}\n  " + " | ".join(d["commands"]) for d in data["needs_decision"]
        ]
        parts.append(Panel(Text("\n".join(lines)), title="needs a decision", style="magenta"))
    outside = [f"{c['call_id']} ({c['tool']}): {c['not_captured']}" for c in data["calls"] if c.get("not_captured")]
    if outside:
        parts.append(Panel("\n".join(outside), title="not captured by safepoint", style="blue"))
    if data.get("cut_short"):
        lines = [f"{c['what']} ({c['call_id']}) was cut short by a crash: {c['fix']}" for c in data["cut_short"]]
        parts.append(Panel(Text("\n".join(lines)), title="unfinished: cut short by a crash", style="red"))
    if data.get("conflicts"):
        run = data["run_id"]
        lines = [
            f"{c['path']}: changed after the agent wrote it (`safepoint conflicts {run}`)" for c in data["conflicts"]
        ]
        parts.append(Panel("\n".join(lines), title="pending conflicts", style="yellow"))
    if data.get("not_restorable"):
        lines = [f"{n['path']} ({n['call_id']}): {n['why']}" for n in data["not_restorable"]]
        parts.append(Panel("\n".join(lines), title="changes rollback cannot put back", style="red"))
    if data["workspace_drift"]:
        lines = [f"{d['path']}: changed since {d['call_id']} wrote it" for d in data["workspace_drift"]]
        parts.append(Panel("\n".join(lines), title="workspace drift", style="yellow"))
    if data.get("recovery"):
        parts.append(recovery_panel(data["run_id"], data["recovery"]))
    if data["problems"]:
        lines = [f"{p['kind']} at {p['position']}: {p['detail']}" for p in data["problems"]]
        parts.append(Panel("\n".join(lines), title="damaged records (skipped)", style="red"))
    return Group(*parts)


def note_panel(note: str) -> Panel:
    return Panel(Text(note), title="recovery note injected for the model", style="cyan")


def rollback_view(data: dict[str, Any]) -> Group:
    verb = "would revert" if data["dry_run"] else "reverted"
    table = Table(title=f"rollback_files to {data['checkpoint_id']}")
    for column in ("path", "result", "undoes"):
        table.add_column(column)
    for action in data["actions"]:
        target = "removed" if action["target_hash"] == "" else "restored"
        uncertain = " (includes a change whose author is uncertain)" if action.get("author_uncertain") else ""
        table.add_row(action["path"], f"{verb}: {target}{uncertain}", ", ".join(action["undoes"]))
    covers = data.get("covers") or [{}] * len(data["conflicts"])
    for conflict, cover in zip(data["conflicts"], covers, strict=False):
        what = "conflict: changed since the agent wrote it"
        if conflict["actual_hash"].startswith("behind-symlink:"):
            folder = conflict["actual_hash"].partition(":")[2]
            what = f"conflict: its folder {folder} is a symlink now (not the agent's)"
        table.add_row(conflict["path"], Text(what, style="yellow"), ", ".join(cover.get("undoes") or ()))
    for item in data["unrestorable"]:
        table.add_row(item["path"], Text("left as is: " + item["why"], style="red"), item["call_id"])
    for item in data.get("uncertain") or ():
        table.add_row(item["path"], Text("skipped: " + item["why"], style="magenta"), item["call_id"])
    parts: list[Any] = [table]
    if not table.rows:
        parts = [
            Text(f"rollback_files to {data['checkpoint_id']}: nothing of the agent's left to revert", style="green")
        ]
    if data["conflicts"]:
        # The commands written out for this run and its first conflict: followed as printed, they work.
        run = shlex.quote(data.get("run_id") or "RUN_ID")
        path = shlex.quote(data["conflicts"][0]["path"])
        parts.append(
            Text(
                f"See `safepoint conflicts {run}`, then `safepoint resolve {run} {path} --keep-user` (or "
                "--apply-agent, or --manual-merge) for each.",
                style="yellow",
            )
        )
    return Group(*parts)


def restore_view(run_id: str, data: dict[str, Any]) -> Group:
    """``restore``: where the run continues, and what the restore did not undo."""
    parts: list[Any] = [
        Text(
            f"run {run_id}: session restored to {data['restored_to']} as {data['checkpoint_id']}; "
            f"{data.get('resume_with') or f'`safepoint resume {run_id}`'} continues from there"
        )
    ]
    if not data["with_files"]:
        parts.append(Text("files are left as they are (add --with-files to roll them back too)"))
    if data["conflicts"]:
        parts.append(
            Text(
                "files left as they are (changed since the agent wrote them): " + ", ".join(data["conflicts"]),
                style="yellow",
            )
        )
    effects = data["not_undone"]
    if effects:
        table = Table(title="not undone: effects outside the workspace after the restore point")
        for column in ("call", "effects", "status", "what to do"):
            table.add_column(column, overflow="fold")
        for effect in effects:
            if effect["compensated_by"]:
                todo = f"compensated already by {effect['compensated_by']}"
            elif effect["compensation"]:
                todo = f"take it back: {effect['compensation']}"
            else:
                todo = "no compensator: undo it by hand if it must not stand"
            table.add_row(
                f"{effect['tool']}({effect['call_id']})", ", ".join(effect["side_effects"]), effect["status"], todo
            )
        parts.append(table)
        parts.append(
            Text(
                "Resuming may repeat them: the model is told they happened, but a call it makes again on the new "
                "branch runs again.",
                style="magenta",
            )
        )
    return Group(*parts)


def _shown_diff(text: str) -> str:
    """A diff as the terminal shows it: lines end at "\\n" only; a "\\r", a form feed or U+2028 inside a line is
    shown as an escape, never obeyed (a "\\r" would overwrite the line with a forged "-" one)."""
    return visible(text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def conflicts_view(found: list[dict[str, Any]]) -> Group:
    if not found:
        return Group(Text("no pending conflicts", style="green"))
    parts: list[Any] = []
    for conflict in found:
        body = Text()
        body.append(f"{conflict['path']}: {conflict['why']}\n", style="bold")
        body.append(f"expected (the agent's version) {conflict['expected_hash']}\n")
        body.append(f"actual (the file now)          {conflict['actual_hash']}\n\n")
        body.append("what the agent changed (before the agent -> the agent's version):\n", style="bold")
        body.append(_shown_diff(conflict["agent_change"]) or "(no textual change)\n")
        body.append("\nwhat changed since (the agent's version -> the file now):\n", style="bold")
        body.append(_shown_diff(conflict["changed_since"]) or "(no textual change)\n")
        parts.append(Panel(body, title=f"conflict: {conflict['path']} ({conflict['resolution']})", style="yellow"))
    return Group(*parts)


def recovery_panel(run_id: str, recovery: dict[str, Any]) -> Panel:
    """The recovery protocol's part of `explain`: owner, restart checkpoint, the verdict now, past recoveries."""
    lines: list[str] = []
    owner = recovery["recovery_owner"]
    if owner:
        lines.append(
            f"recovery owner {owner['recovery_class']}/{owner['owner_id']}, generation {owner['generation']}"
            + (f", closed {owner['terminal_at']}: {owner['terminal_status']}" if owner["terminal_at"] else "")
        )
    checkpoint = recovery["restart_checkpoint"]
    if checkpoint is None:
        lines.append("restart checkpoint: none (no work in flight)")
    elif not checkpoint["intact"]:
        lines.append(f"restart checkpoint: damaged ({checkpoint['detail']})")
    else:
        lines.append(f"restart checkpoint: {checkpoint.get('mode') or '?'}")
    now = recovery["if_restarted_now"]
    lines.append("assertions: " + ", ".join(now["assertions_checked"]))
    lines.append(f"if restarted now: {now['detail']}")
    for report in recovery["recoveries"]:
        disposition = report.get("disposition") or {}
        verdict = report.get("failed") or disposition.get("reason") or disposition.get("disposition", "")
        if verdict == "runtime_work_reap" and report.get("detail"):  # which: unresumable, or past --reap-after
            verdict += f": {report['detail']}"
        lines.append(f"{report['at']}: generation {report['generation']} {report['action']} ({verdict})")
    for event in recovery["terminal_events"]:
        lines.append(f"terminal event {event['event_type']} (generation {event['generation']})")
    if recovery["self_healing_prompt"]:
        lines.append("told the parent / the user: " + recovery["self_healing_prompt"])
    for child in recovery["subagents"]:
        verdict = (child.get("recovery") or {}).get("if_restarted_now", {}).get("detail", "")
        lines.append(f"subagent {child['run_id']} ({child['call_id']}): {child['status']}; {verdict}")
    return Panel("\n".join(lines), title=f"recovery protocol: {run_id}", style="cyan")


def fsck_lines(data: dict[str, Any]) -> str:
    """One line per problem (plain text: a path or a detail may hold brackets rich would read as markup)."""
    runs = len(data["runs"])
    lines = []
    for problem in data["problems"]:
        where = f" {problem['where']}" if problem["where"] else ""
        done = f" -> {problem['repair']}" if problem["repair"] else ""
        lines.append(f"run {problem['run_id']}: {problem['file']}{where}: {problem['problem']}{done}")
    checked = f"{runs} run{'s' if runs != 1 else ''} of {data['store']}"
    if not data["problems"]:
        lines.append(f"{checked}: clean")
    elif data["repaired"]:
        left = sum(1 for problem in data["problems"] if not problem["repair"])
        handled = len(data["problems"]) - left
        if left:  # never "handled" for what was not
            lines.append(f"{checked}: {handled} problem(s) handled as shown, {left} left for you (see above)")
        else:
            lines.append(f"{checked}: {handled} problem(s) found and handled as shown")
        lines += [f"kept in {folder} (nothing was deleted)" for folder in data["quarantine"]]
    else:
        lines.append(f"{checked}: {len(data['problems'])} problem(s); `safepoint fsck --repair` repairs them")
    return "".join(line + "\n" for line in lines)


def completed_already(run_id: str, explained: Any) -> str:
    """``resume`` of a completed run: nothing to resume, and any own action a crash cut short with its fix (a
    finished run is never resumed, so only that command finishes it)."""
    lines = [f"run {run_id}: completed already; nothing to resume\n"]
    for cut in explained.cut_short:
        lines.append(f"{cut.what} ({cut.call_id}) was cut short by a crash: {cut.fix}\n")
    return "".join(lines)
