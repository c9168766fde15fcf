"""The recovery protocol's commands (seed 003): people act on runs they do not own.

``approve``/``deny`` answer a call waiting for approval; ``submit`` queues input; ``cancel`` and ``reset`` stop
or void a run's work (``daemon`` and ``schedule`` are in ``supervise``). Each posts a durable record to the run's
control channel: a live owner acts on it at its next safe point, and with no owner a restart recovery acts at once.
"""

from typing import Annotated

import typer

from safepoint.cli.common import JsonOpt, KeyFileOpt, Out, StoreOpt, WorkspaceOpt, emit, open_safepoint_at


def register(app: typer.Typer, out: Out) -> None:
    def answer(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        call_id: Annotated[str, typer.Argument(help="The call that waits (see `safepoint approvals`).")],
        approved: bool,
        by: str,
        reason: str,
        workspace: str,
        store: str | None,
        key_file: str | None,
        as_json: bool,
    ) -> None:
        tm = open_safepoint_at(store, workspace, key_file)
        answered = (tm.approve if approved else tm.deny)(run_id, call_id, by=by, reason=reason)
        emit(answered, as_json)
        if not as_json:
            out.print(f"run {run_id}: call {call_id} {'approved' if approved else 'denied'}; {answered.next}")

    @app.command()
    def approve(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        call_id: Annotated[str, typer.Argument(help="The call that waits (see `safepoint approvals`).")],
        reason: Annotated[str, typer.Option("--reason", help="Why (recorded with the answer).")] = "",
        by: Annotated[str, typer.Option("--by", help="Who approves (recorded).")] = "user",
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Approve a call that waits for approval; it then runs once, with the input it was approved for."""
        answer(run_id, call_id, True, by, reason, workspace, store, key_file, as_json)

    @app.command()
    def deny(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        call_id: Annotated[str, typer.Argument(help="The call that waits (see `safepoint approvals`).")],
        reason: Annotated[str, typer.Option("--reason", help="Why (recorded with the answer).")] = "",
        by: Annotated[str, typer.Option("--by", help="Who denies (recorded).")] = "user",
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Deny a call that waits for approval; it never runs and the model is told."""
        answer(run_id, call_id, False, by, reason, workspace, store, key_file, as_json)

    @app.command()
    def submit(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        text: Annotated[str, typer.Argument(help="The input for the run, as the user would type it.")],
        key: Annotated[
            str | None, typer.Option("--key", help="Submission key: the same key submitted twice is admitted once.")
        ] = None,
        system_prompt: Annotated[
            str | None, typer.Option("--system-prompt", help="Replace the system prompt for this input.")
        ] = None,
        append_system_prompt: Annotated[
            str | None,
            typer.Option("--append-system-prompt", help="Text added to the system prompt for this input only."),
        ] = None,
        model: Annotated[str | None, typer.Option("--model", help="Answer this input with another model.")] = None,
        allow_tools: Annotated[
            str | None, typer.Option("--tools-allowed", help="Comma-separated tools this input may use.")
        ] = None,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Queue user input for a run: a running agent takes it at its next step, a finished one on resume."""
        tools = tuple(t.strip() for t in allow_tools.split(",") if t.strip()) if allow_tools is not None else None
        queued = open_safepoint_at(store, workspace, key_file).submit(
            run_id,
            text,
            key=key,
            override_system_prompt=system_prompt,
            append_system_prompt=append_system_prompt,
            requested_model=model,
            tools_allowed_override=tools,
        )
        emit(queued, as_json)
        if not as_json:
            out.print(f"run {run_id}: queued as {queued.submission_key}")

    @app.command()
    def cancel(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        whole_stream: Annotated[
            bool, typer.Option("--whole-stream", help="Also drop queued input and cancel its subagents.")
        ] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Cancel a run: its interrupted work is never replayed (user_cancelled)."""
        outcome = open_safepoint_at(store, workspace, key_file).cancel(run_id, whole_stream=whole_stream)
        emit({"run_id": run_id, "cancel": outcome}, as_json)
        if not as_json:
            out.print(
                f"run {run_id}: cancelled" if outcome == "closed" else f"run {run_id}: its owner stops at the next step"
            )

    @app.command()
    def reset(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Reset a run's context: the work in flight is void and is never replayed (context_reset)."""
        outcome = open_safepoint_at(store, workspace, key_file).reset_context(run_id)
        emit({"run_id": run_id, "reset": outcome}, as_json)
        if not as_json:
            out.print(f"run {run_id}: " + ("closed (context reset)" if outcome == "closed" else "reset requested"))
