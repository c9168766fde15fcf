"""``safepoint``: parse, call the library, render. Exit codes: 0 done, 3 waiting for a decision, others errors."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import msgspec
import typer
from rich.console import Console

from safepoint import report as reports
from safepoint.agent.subagents import SPAWN_SUBAGENT
from safepoint.api import Run
from safepoint.cli import db, protocol, render, supervise
from safepoint.cli.common import JsonOpt, StoreOpt, ToolsOpt, WorkspaceOpt, emit, open_safepoint_at
from safepoint.engine import shutdown
from safepoint.engine.tools import Tool
from safepoint.errors import ConfigError, DecisionNeeded, SafepointError, ScenarioError
from safepoint.providers.select import openai_config, provider_for
from safepoint.records import to_plain
from safepoint.standins.notify import send_notification
from safepoint.standins.scenario import load_scenario, scenario_to_dict

EXIT_WAITING = 3
EXIT_CONFLICTS = 7  # a rollback left conflicts for the user to resolve
app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="Crash-safe AI-agent runs."
)
out = Console()


def _load_tools(specs: list[str] | None) -> list[Tool]:
    tools: list[Tool] = [send_notification]
    for spec in specs or []:
        module_name, _, attr = spec.partition(":")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"--tools {spec}: cannot load it ({exc}); give MODULE:ATTR of a tool") from None
        tools.extend(value if isinstance(value, list | tuple) else [value])
    return tools


_open = open_safepoint_at


def _emit(data: Any, as_json: bool, table: Any = None) -> None:
    emit(data, as_json)
    if not as_json and table is not None:
        out.print(table)


EXIT_CODES = {"completed": 0, "waiting_decision": EXIT_WAITING, "closed": 9, "cancelled": 10, "interrupted": 11}


def _finish(run: Run, status: str, as_json: bool) -> None:
    code = EXIT_CODES.get(status, 1)
    if as_json:
        _emit({"run_id": run.run_id, "status": status}, True)
    else:
        out.print(f"run {run.run_id}: [bold]{status}[/bold]")
    raise typer.Exit(code)


def _shown(as_json: bool) -> Any:
    """Where streamed text goes: the terminal, as it arrives (never into --json output)."""
    if as_json:
        return None

    def write(chunk: str) -> None:
        sys.stdout.write(chunk)
        sys.stdout.flush()

    return write


ApprovalOpt = Annotated[
    str, typer.Option("--approval", help="'high': high-risk calls wait for `safepoint approve`; 'none': they do not.")
]


@app.command()
def run(
    scenario: Annotated[str | None, typer.Argument(help="Scenario JSON file for the scripted model.")] = None,
    workspace: WorkspaceOpt = ".",
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    task: Annotated[str | None, typer.Option("--task", help="The task, for a real model (no scenario).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name on the OpenAI-compatible server.")] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1.")
    ] = None,
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="Environment variable holding the API key.")
    ] = "OPENAI_API_KEY",
    system: Annotated[str, typer.Option("--system", help="System prompt for a real model.")] = "",
    approval: ApprovalOpt = "none",
    approval_timeout: Annotated[float, typer.Option("--approval-timeout", help="Seconds a call waits.")] = 600.0,
    successor_of: Annotated[
        str | None, typer.Option("--successor-of", help="This run takes over that run's work (it is never resumed).")
    ] = None,
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run: of a scenario (scripted model), or of --task with a model server (--model, --base-url)."""
    if approval not in ("none", "high"):
        raise ConfigError(f"--approval {approval!r}: choose 'none' or 'high'")
    extra = _load_tools(tools)
    tm = _open(store, workspace)
    registry = tm.registry(extra)
    options: dict[str, Any] = {
        "approval": approval,
        "approval_timeout_s": approval_timeout,
        "successor_of": successor_of,
        "run_id": run_id,
        "tools": extra,
    }
    if scenario is not None:
        script = load_scenario(scenario)
        for index in range(len(script.turns)):
            for call in script.calls(index):
                if call.tool not in registry and call.tool != SPAWN_SUBAGENT:  # refused before anything is written
                    raise ScenarioError(
                        f"{scenario}: turn {index + 1} calls unknown tool {call.tool!r}; "
                        f"known tools: {', '.join(registry.names())} (add your own with --tools MODULE:ATTR)"
                    )
        handle = tm.start(
            script.task,
            model=script.model,
            model_config=script.model_config,
            scenario=scenario_to_dict(script),
            **options,
        )
    else:
        if task is None or model is None:
            raise ConfigError("give a scenario file, or --task and --model (and --base-url) for a model server")
        config = openai_config(model, base_url, api_key_env) | {"system": system}
        handle = tm.start(task, model=model, provider=config, **options)
    if not as_json:
        out.print(f"run id: {handle.run_id}")
    provider, prompt = provider_for(handle.session.info)
    shutdown.install()  # SIGTERM: stop at the next safe point, leave the restart checkpoint
    with handle:
        status = tm.run_agent(handle, provider, system=prompt, output=_shown(as_json))
    _finish(handle, status, as_json)


@app.command()
def resume(
    run_id: str,
    workspace: WorkspaceOpt = ".",
    replay: Annotated[list[str] | None, typer.Option("--replay", help="Run this uncertain call again.")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Do not run this uncertain call again.")] = None,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner and resume anyway.")] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Continue with another model (an interrupted turn is not replayed).")
    ] = None,
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume a run after a crash or restart: recovery checks first, then from its latest complete checkpoint."""
    extra = _load_tools(tools)
    tm = _open(store, workspace)
    from safepoint.engine.session import load_view
    from safepoint.restart import inbox

    view = load_view(tm.store, run_id)
    if view.status == "completed" and not inbox.pending_submissions(tm.store, view):
        _emit({"run_id": run_id, "status": "completed"}, as_json)  # resuming is idempotent: finished stays finished
        if not as_json:
            out.print(f"run {run_id}: [bold]completed[/bold] already; nothing to resume")
        raise typer.Exit(0)
    provider, prompt = provider_for(view.info, model=model)
    try:
        handle = tm.resume(
            run_id,
            tools=extra,
            replay=replay or (),
            skip=skip or (),
            takeover=takeover,
            model=model,  # None: the run's own model (a submission may have asked for another); no switch
            output=_shown(as_json),
        )
    except DecisionNeeded as exc:
        if as_json:
            _emit({"run_id": run_id, "status": "waiting_decision", "detail": str(exc)}, True)
        else:
            sys.stderr.write(f"safepoint: {exc}\n")
        raise typer.Exit(EXIT_WAITING) from None
    if not as_json and handle.recovery is not None:
        out.print(render.note_panel(handle.recovery.note))
    shutdown.install()
    with handle:
        status = tm.run_agent(handle, provider, system=prompt, output=_shown(as_json))
    _finish(handle, status, as_json)


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument()] = None,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one run, or every run of the store."""
    tm = _open(store, workspace)
    ids = [run_id] if run_id else tm.store.list_runs()
    rows = []
    for rid in ids:
        try:
            rows.append(reports.status_row(tm.store, rid))
        except SafepointError as exc:
            if run_id:
                raise
            rows.append(
                {
                    "run_id": rid,
                    "status": "unreadable",
                    "task": str(exc),
                    "step": 0,
                    "calls": 0,
                    "problems": 1,
                    "created_at": "",
                }
            )
    _emit(rows[0] if run_id else rows, as_json, render.status_table(rows))


@app.command()
def ledger(run_id: str, workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Every tool call of a run with its ledger state."""
    rows = reports.ledger_rows(_open(store, workspace).store, run_id)
    _emit(rows, as_json, render.ledger_table(rows))


@app.command()
def checkpoints(run_id: str, workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """The checkpoints of a run."""
    rows = reports.checkpoint_rows(_open(store, workspace).store, run_id)
    _emit(rows, as_json, render.checkpoint_table(rows))


@app.command()
def explain(run_id: str, workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """What happened to every call, and where and why a resume would continue."""
    tm = _open(store, workspace)
    data = reports.explain(tm.store, run_id, tm.workspace.root)
    _emit(data, as_json, render.explain_view(data))


@app.command()
def rollback(
    run_id: str,
    to: Annotated[str, typer.Option("--to", help="The checkpoint to go back to (see `safepoint checkpoints`).")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")] = False,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner first.")] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """rollback_files: revert the agent's file changes after a checkpoint, never the user's (conflicts instead)."""
    plan = _open(store, workspace).rollback_files(run_id, to, dry_run=dry_run, takeover=takeover)
    data = msgspec.to_builtins(plan) | {"dry_run": dry_run}
    _emit(data, as_json, render.rollback_view(data))
    raise typer.Exit(EXIT_CONFLICTS if plan.conflicts else 0)


@app.command()
def conflicts(run_id: str, workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Files a rollback did not touch because they changed after the agent wrote them."""
    found = _open(store, workspace).conflicts(run_id)
    if as_json:
        keys = ("path", "expected_hash", "actual_hash", "agent_patch_ref", "resolution")
        _emit([{key: c[key] for key in keys} for c in found], True)
    else:
        out.print(render.conflicts_view(found))


@app.command()
def resolve(
    run_id: str,
    path: str,
    keep_user: Annotated[bool, typer.Option("--keep-user", help="Keep the file as it is now.")] = False,
    apply_agent: Annotated[bool, typer.Option("--apply-agent", help="Revert it anyway, over the later edits.")] = False,
    manual_merge: Annotated[
        bool, typer.Option("--manual-merge", help="Write a three-way merge; markers where both changed the same lines.")
    ] = False,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner first.")] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Settle one conflict: keep_user, apply_agent or manual_merge."""
    chosen = [
        name
        for name, flag in (("keep_user", keep_user), ("apply_agent", apply_agent), ("manual_merge", manual_merge))
        if flag
    ]
    if len(chosen) != 1:
        raise ConfigError("choose exactly one of --keep-user, --apply-agent, --manual-merge")
    result = _open(store, workspace).resolve(run_id, path, chosen[0], takeover=takeover)  # type: ignore[arg-type]
    _emit(result, as_json)
    if not as_json:
        tail = "" if result.get("clean", True) else " (with conflict markers: edit the file to finish)"
        out.print(f"{path}: {chosen[0]}{tail}")


@app.command()
def restore(
    run_id: str,
    to: Annotated[str, typer.Option("--to", help="The checkpoint to restore the session to.")],
    with_files: Annotated[bool, typer.Option("--with-files", help="Also roll the files back to it.")] = False,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner first.")] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """restore_session: the conversation and run state go back to a checkpoint, as a new branch."""
    tm = _open(store, workspace)
    checkpoint = tm.restore_session(run_id, to, with_files=with_files, takeover=takeover)
    pending = [c["path"] for c in tm.conflicts(run_id)] if with_files else []
    _emit(to_plain(checkpoint) | {"conflicts": pending}, as_json)
    if not as_json:
        out.print(f"run {run_id}: session restored to {to} as {checkpoint.checkpoint_id}; `safepoint resume` continues")
        if pending:
            out.print(f"files left as they are (changed since the agent wrote them): {', '.join(pending)}")
    raise typer.Exit(EXIT_CONFLICTS if pending else 0)


@app.command()
def compensate(
    run_id: str,
    ledger_entry_id: str,
    assume_done: Annotated[bool, typer.Option("--assume-done", help="Compensate an uncertain call.")] = False,
    replay: Annotated[bool, typer.Option("--replay", help="Run an interrupted compensation again.")] = False,
    skip: Annotated[bool, typer.Option("--skip", help="Leave an interrupted compensation as it is.")] = False,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner first.")] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """compensate_external_action: run a tool's compensator for one finished call, at most once."""
    if replay and skip:
        raise ConfigError("choose one of --replay and --skip")
    try:
        result = _open(store, workspace).compensate(
            run_id,
            ledger_entry_id,
            tools=_load_tools(tools),
            assume_done=assume_done,
            decision="replay" if replay else "skip" if skip else None,
            takeover=takeover,
        )
    except DecisionNeeded as exc:
        sys.stderr.write(f"safepoint: {exc}\n")
        raise typer.Exit(EXIT_WAITING) from None
    _emit({"run_id": run_id, "compensated": ledger_entry_id, "result": result}, as_json)
    if not as_json:
        out.print(result)


@app.command()
def commit(
    run_id: str,
    yes: Annotated[
        bool, typer.Option("--yes", help="Create the commit (without it: show what would be committed).")
    ] = False,
    message: Annotated[str | None, typer.Option("--message", "-m")] = None,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Commit the agent's changes only, on the current branch, when you ask; your other changes stay as they are."""
    tm = _open(store, workspace)
    from safepoint.workspace.git import git_state

    if not git_state(tm.workspace.root).is_repo:
        raise ConfigError(f"workspace {tm.workspace.root} is not in a git repository; there is nothing to commit to")
    if not yes:
        ours, since = tm.agent_changes(run_id)
        _emit({"run_id": run_id, "would_commit": ours, "left_out": since}, as_json)
        if not as_json:
            out.print("would commit: " + (", ".join(ours) or "nothing"))
            if since:
                out.print("left out (changed after the agent wrote them): " + ", ".join(since))
            out.print("run again with --yes to commit")
        return
    sha, ours, since = tm.commit(run_id, message)
    _emit({"run_id": run_id, "commit": sha, "committed": ours, "left_out": since}, as_json)
    if not as_json:
        out.print(f"committed {len(ours)} path(s) as {sha[:12]}" + (f"; left out: {', '.join(since)}" if since else ""))


@app.command()
def history(
    run_id: str,
    all_branches: Annotated[bool, typer.Option("--all", help="Include abandoned branches.")] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The conversation of a run (its current branch)."""
    current, abandoned = _open(store, workspace).history(run_id)
    rows = [to_plain(m) | {"branch": "current"} for m in current]
    if all_branches:
        rows += [to_plain(m) | {"branch": "abandoned"} for m in abandoned]
    _emit(rows, as_json, render.history_table(rows))


@app.command()
def demo(keep: Annotated[bool, typer.Option(help="Keep the demo workspace.")] = False) -> None:
    """A scripted coding agent is SIGKILLed mid-run and resumed (nothing is sent twice), then rolled back."""
    from safepoint.cli.demo import run_demo

    raise typer.Exit(run_demo(out, keep=keep))


protocol.register(app, out)
supervise.register(app, out)
db.register(app, out)


def main() -> None:
    """Usage errors are typer's (exit 2); a SafepointError is one line on stderr, never a traceback."""
    try:
        app()
    except SafepointError as exc:
        sys.stderr.write(f"safepoint: {' '.join(str(exc).split())}\n")
        sys.exit(exc.exit_code)
