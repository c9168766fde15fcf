"""``tidemark``: parse, call the library, render. Exit codes: 0 done, 3 waiting for a decision, others errors."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from tidemark import inspect as reports
from tidemark.api import Run, Tidemark
from tidemark.api import open as open_tidemark
from tidemark.cli import render
from tidemark.errors import ConfigError, ScenarioError, TidemarkError
from tidemark.runtime.notify import send_notification
from tidemark.runtime.provider import ScriptedProvider
from tidemark.runtime.scenario import load_scenario, scenario_to_dict
from tidemark.runtime.session import DecisionNeeded
from tidemark.runtime.tools import Tool

EXIT_WAITING = 3
app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="Crash-safe AI-agent runs."
)
out = Console()

StoreOpt = Annotated[str | None, typer.Option("--store", help="Store URL (default WORKSPACE/.agent-runtime).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="The agent's workspace folder.")]
ToolsOpt = Annotated[
    list[str] | None, typer.Option("--tools", help="Extra tools as MODULE:ATTR (a Tool or a list of them).")
]


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


def _open(store: str | None, workspace: str) -> Tidemark:
    if not os.path.isdir(workspace):
        raise ConfigError(f"workspace {workspace!r} does not exist; create it or pass an existing --workspace")
    return open_tidemark(store, workspace=workspace)


def _emit(data: Any, as_json: bool, table: Any = None) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    elif table is not None:
        out.print(table)


def _finish(run: Run, status: str, as_json: bool) -> None:
    code = 0 if status == "completed" else EXIT_WAITING if status == "waiting_decision" else 1
    if as_json:
        _emit({"run_id": run.run_id, "status": status}, True)
    else:
        out.print(f"run {run.run_id}: [bold]{status}[/bold]")
    raise typer.Exit(code)


@app.command()
def run(
    scenario: Annotated[str, typer.Argument(help="Scenario JSON file for the scripted model.")],
    workspace: WorkspaceOpt = ".",
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of a scenario."""
    script = load_scenario(scenario)
    extra = _load_tools(tools)
    tm = _open(store, workspace)
    registry = tm.registry(extra)
    for index in range(len(script.turns)):
        for call in script.calls(index):
            if call.tool not in registry:  # refused before anything is written
                raise ScenarioError(
                    f"{scenario}: turn {index + 1} calls unknown tool {call.tool!r}; "
                    f"known tools: {', '.join(registry.names())} (add your own with --tools MODULE:ATTR)"
                )
    handle = tm.start(
        script.task,
        tools=extra,
        model=script.model,
        model_config=script.model_config,
        run_id=run_id,
        scenario=scenario_to_dict(script),
    )
    if not as_json:
        out.print(f"run id: {handle.run_id}")
    with handle:
        status = tm.run_agent(handle, ScriptedProvider(script), system=script.system)
    _finish(handle, status, as_json)


@app.command()
def resume(
    run_id: str,
    workspace: WorkspaceOpt = ".",
    replay: Annotated[list[str] | None, typer.Option("--replay", help="Run this uncertain call again.")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Do not run this uncertain call again.")] = None,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner and resume anyway.")] = False,
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume a run after a crash from its latest complete checkpoint."""
    extra = _load_tools(tools)
    tm = _open(store, workspace)
    from tidemark.runtime.scenario import parse_scenario
    from tidemark.runtime.session import load_view

    view = load_view(tm.store, run_id)
    if view.status == "completed":  # resuming is idempotent: a finished run stays finished
        _emit({"run_id": run_id, "status": "completed"}, as_json)
        if not as_json:
            out.print(f"run {run_id}: [bold]completed[/bold] already; nothing to resume")
        raise typer.Exit(0)
    header = view.info
    if header.scenario is None:
        raise ConfigError(f"run {run_id!r} was not started from a scenario; resume it from your own loop")
    script = parse_scenario(json.dumps(header.scenario).encode(), f"scenario of run {run_id}")
    try:
        handle = tm.resume(run_id, tools=extra, replay=replay or (), skip=skip or (), takeover=takeover)
    except DecisionNeeded as exc:
        if as_json:
            _emit({"run_id": run_id, "status": "waiting_decision", "detail": str(exc)}, True)
        else:
            sys.stderr.write(f"tidemark: {exc}\n")
        raise typer.Exit(EXIT_WAITING) from None
    if not as_json and handle.recovery is not None:
        out.print(render.note_panel(handle.recovery.note))
    with handle:
        status = tm.run_agent(handle, ScriptedProvider(script), system=script.system)
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
    rows = [reports.status_row(tm.store, rid) for rid in ids]
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
def demo(keep: Annotated[bool, typer.Option(help="Keep the demo workspace.")] = False) -> None:
    """A scripted coding agent is killed mid-run with SIGKILL, then resumed: nothing is sent twice."""
    from tidemark.cli.demo import run_demo

    raise typer.Exit(run_demo(out, keep=keep))


def main() -> None:
    """Usage errors are typer's (exit 2); a TidemarkError is one line on stderr, never a traceback."""
    try:
        app()
    except TidemarkError as exc:
        sys.stderr.write(f"tidemark: {' '.join(str(exc).split())}\n")
        sys.exit(exc.exit_code)
