"""``safepoint history RUN``: the conversation exactly as a resume would restore it (``safepoint.history``), on the
library API (imported when the command runs)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from safepoint.cli.common import JsonOpt, KeyFileOpt, Out, StoreOpt, WorkspaceOpt, emit, open_safepoint_at, plain


def rows(restored: Any, all_branches: bool) -> list[dict[str, Any]]:
    """One row a message (``--json`` keeps the list of messages it always printed, with where each comes from),
    then one a pending call (its ``content`` null: the resume does not know it yet), then abandoned messages."""
    found = [
        plain(item.message) | {"branch": "current", "region": item.region, "source": item.source}
        for item in restored.messages
    ]
    for call in restored.pending:
        found.append(
            {
                "seq": None,
                "role": "tool",
                "content": None,
                "tool_call_id": call.call_id,
                "name": call.tool,
                "branch": "current",
                "pending": call.action,
                "why": call.why,
            }
        )
    if all_branches:
        found += [plain(m) | {"branch": "abandoned"} for m in restored.abandoned]
    return found


def register(app: typer.Typer, out: Out) -> None:
    @app.command()
    def history(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        limit: Annotated[
            int | None, typer.Option("--limit", min=0, help="Only the latest N messages of the conversation.")
        ] = None,
        all_branches: Annotated[bool, typer.Option("--all", help="Include abandoned branches.")] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The conversation of a run exactly as a resume would restore it (after rewinds and restores, redacted as
        the model reads it), and the pending calls whose outcome the resume does not know yet."""
        from safepoint.cli.plain import history_table

        restored = open_safepoint_at(store, workspace, key_file).restored_history(
            run_id, limit=limit, abandoned=all_branches
        )
        found = rows(restored, all_branches)
        emit(found, as_json)
        if as_json:
            return
        where = f"from {restored.checkpoint_id} (step {restored.step})" if restored.checkpoint_id else ""
        head = f"run {run_id} ({restored.status}): {restored.why}" + (f"; restored {where}" if where else "")
        if restored.total > len(restored.messages):
            head += f"; the latest {len(restored.messages)} of {restored.total} messages"
        out.print(head, markup=False)
        sys.stdout.write(history_table([r for r in found if r.get("pending") is None]))
        for call in restored.pending:
            out.print(f"then {call.tool}({call.call_id}): {call.action} ({call.why})", markup=False)
