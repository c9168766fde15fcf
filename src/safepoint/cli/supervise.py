"""Supervision commands: ``safepoint schedule add|list|remove|fire`` and ``safepoint daemon``.

A schedule lives in the store (``Store.put_schedule``), so every daemon on that store sees it; ``schedule fire`` is
what a daemon's worker runs for one due occurrence (a person may run it too: an occurrence fires at most once).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from safepoint.api import Safepoint
from safepoint.cli.common import JsonOpt, StoreOpt, ToolsOpt, WorkspaceOpt, emit, open_safepoint_at
from safepoint.engine import shutdown
from safepoint.errors import ConfigError, RunExistsError
from safepoint.store.liveness import OWNER_LEASE_SECONDS
from safepoint.supervisor import schedule
from safepoint.supervisor.daemon import Daemon, DaemonOptions


def _job_row(job: schedule.ScheduledJob, runs: list[str], at_ms: int) -> dict[str, Any]:
    last = schedule.last_fired(job.job_id, runs)
    return {
        "job_id": job.job_id,
        "cron": job.cron,
        "version": job.version,
        "exec_timeout_s": job.cron_exec_timeout_s,
        "workspace": job.workspace,
        "what": f"scenario: {job.scenario.get('task', '')}" if job.scenario is not None else f"task: {job.task}",
        "next_at": schedule.iso(schedule.next_occurrence(job.cron, at_ms)),
        "last_fired_at": schedule.iso(last) if last is not None else None,
        "last_run_id": schedule.occurrence_run_id(job.job_id, last) if last is not None else None,
    }


def _jobs_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="scheduled jobs (times in UTC)")
    for column in ("job", "cron", "version", "next", "last fired", "what"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["job_id"],
            row["cron"],
            str(row["version"]),
            row["next_at"],
            row["last_fired_at"] or "-",
            row["what"][:60],
        )
    return table


def _line(record: dict[str, Any]) -> str:
    """One daemon action as one human line: time, event, run, then the rest as key=value."""
    rest = " ".join(f"{key}={value}" for key, value in record.items() if key not in ("at", "event", "run_id"))
    run = f" {record['run_id']}" if "run_id" in record else ""
    return f"{record['at'][11:19]} {record['event']}{run} {rest}".rstrip()


def register(app: typer.Typer, out: Console) -> None:
    schedules = typer.Typer(no_args_is_help=True, help="Scheduled jobs: a cron expression (UTC) and what to run.")
    app.add_typer(schedules, name="schedule")

    @schedules.command("add")
    def add(
        job_id: str,
        scenario: Annotated[str | None, typer.Argument(help="Scenario JSON file for the scripted model.")] = None,
        cron: Annotated[
            str, typer.Option("--cron", help="When, in UTC: 5 fields (m h dom mon dow), or 6 with seconds last.")
        ] = "",
        exec_timeout: Annotated[
            float,
            typer.Option(
                "--exec-timeout",
                help="Seconds after its time an occurrence may still start or be resumed (cron_exec_timeout).",
            ),
        ] = schedule.DEFAULT_EXEC_TIMEOUT_S,
        task: Annotated[str | None, typer.Option("--task", help="The task, for a real model (no scenario).")] = None,
        model: Annotated[
            str | None, typer.Option("--model", help="Model name on the OpenAI-compatible server.")
        ] = None,
        base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server URL.")] = None,
        api_key_env: Annotated[
            str, typer.Option("--api-key-env", help="Environment variable holding the API key.")
        ] = "OPENAI_API_KEY",
        system: Annotated[str, typer.Option("--system", help="System prompt for a real model.")] = "",
        approval: Annotated[
            str, typer.Option("--approval", help="'high': high-risk calls wait for approval.")
        ] = "none",
        approval_timeout: Annotated[float, typer.Option("--approval-timeout")] = 600.0,
        replace: Annotated[
            bool, typer.Option("--replace", help="Change an existing job (its version goes up).")
        ] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        tools: ToolsOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Add a job: at every occurrence of --cron the daemon runs the scenario (or --task with --model)."""
        from safepoint.providers.select import openai_config
        from safepoint.standins.scenario import load_scenario, scenario_to_dict

        if not cron:
            raise ConfigError("give --cron, e.g. --cron '*/15 * * * *' (UTC)")
        if approval not in ("none", "high"):
            raise ConfigError(f"--approval {approval!r}: choose 'none' or 'high'")
        if exec_timeout <= 0:
            raise ConfigError(f"--exec-timeout {exec_timeout}: give a positive number of seconds")
        schedule.check_job_id(job_id)
        cron = schedule.check_cron(cron)
        tm = open_safepoint_at(store, workspace)
        specs = tuple(tools or ())
        registry = tm.registry(schedule.load_tools(specs))
        fields: dict[str, Any] = {}
        if scenario is not None:
            fields["scenario"] = scenario_to_dict(load_scenario(scenario))
            schedule.check_scenario_tools(fields["scenario"], registry, scenario)
        elif task is not None and model is not None:
            fields |= {
                "task": task,
                "model": model,
                "provider": openai_config(model, base_url, api_key_env) | {"system": system},
            }
        else:
            raise ConfigError("give a scenario file, or --task and --model (and --base-url) for a model server")
        at = schedule.now_ms()
        job = schedule.put_job(
            tm.store,
            schedule.ScheduledJob(
                job_id=job_id,
                cron=cron,
                workspace=tm.workspace.root,
                created_at_ms=at,
                updated_at_ms=at,
                cron_exec_timeout_s=exec_timeout,
                tools=specs,
                approval=approval,  # type: ignore[arg-type]
                approval_timeout_s=approval_timeout,
                **fields,
            ),
            replace=replace,
        )
        row = _job_row(job, tm.store.list_runs(), at)
        emit(row, as_json)
        if not as_json:
            out.print(f"job {job_id} (version {job.version}): {job.cron} UTC; next at {row['next_at']}")

    @schedules.command("list")
    def list_jobs(workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Every scheduled job, with its next occurrence and the last one fired."""
        tm = open_safepoint_at(store, workspace)
        jobs, broken = schedule.load_jobs(tm.store)
        runs = tm.store.list_runs()
        at = schedule.now_ms()
        rows = [_job_row(job, runs, at) for job in jobs.values()]
        rows += [{"job_id": job_id, "error": why} for job_id, why in broken.items()]
        emit(rows, as_json)
        if not as_json:
            out.print(_jobs_table([row for row in rows if "error" not in row]))
            for row in rows:
                if "error" in row:
                    out.print(f"job {row['job_id']} cannot be read: {row['error']}")

    @schedules.command("remove")
    def remove(job_id: str, workspace: WorkspaceOpt = ".", store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Remove a job: nothing more is fired; runs it already started are left as they are."""
        tm = open_safepoint_at(store, workspace)
        schedule.remove_job(tm.store, job_id)
        emit({"job_id": job_id, "removed": True}, as_json)
        if not as_json:
            out.print(f"job {job_id} removed")

    @schedules.command("fire")
    def fire(
        job_id: str,
        at: Annotated[int, typer.Option("--at", help="The occurrence, in ms since the epoch (UTC).")],
        attempt: Annotated[int, typer.Option("--attempt")] = 1,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        tools: ToolsOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Run one occurrence of a job now (what the daemon's worker runs). An occurrence runs at most once."""
        from safepoint.cli.app import EXIT_CODES

        opened = open_safepoint_at(store, workspace)
        job = schedule.get_job(opened.store, job_id)
        if at > schedule.now_ms():
            raise ConfigError(f"occurrence {schedule.iso(at)} of job {job_id!r} is not due yet")
        if not os.path.isdir(job.workspace):
            raise ConfigError(f"job {job_id!r}: its workspace {job.workspace!r} does not exist")
        tm = Safepoint(opened.store, job.workspace)
        run_id = schedule.occurrence_run_id(job_id, at)
        shutdown.install()  # SIGTERM: stop at the next safe point, leave the restart checkpoint
        try:
            run_id, status = schedule.fire(
                tm.store,
                tm.workspace,
                tm.registry(schedule.load_tools((*job.tools, *(tools or ())))),
                job,
                at,
                attempt=attempt,
                output=None if as_json else _write,
            )
        except RunExistsError:
            from safepoint.engine.session import load_view

            current = load_view(tm.store, run_id).status
            emit({"run_id": run_id, "status": current, "already_fired": True}, as_json)
            if not as_json:
                out.print(f"run {run_id}: occurrence fired already ({current}); not run again")
            raise typer.Exit(0) from None
        emit({"run_id": run_id, "status": status}, as_json)
        if not as_json:
            out.print(f"\nrun {run_id}: [bold]{status}[/bold]")
        raise typer.Exit(EXIT_CODES.get(status, 1))

    @app.command()
    def daemon(
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        poll: Annotated[float, typer.Option("--poll", help="Seconds between passes.")] = 1.0,
        lease: Annotated[
            float, typer.Option("--lease", help="Seconds without a heartbeat after which a run's work is reaped.")
        ] = OWNER_LEASE_SECONDS,
        grace: Annotated[
            float, typer.Option("--grace", help="On SIGTERM, seconds workers get to stop before they are killed.")
        ] = 30.0,
        once: Annotated[
            bool, typer.Option("--once", help="Startup recovery and one pass, wait for the workers, exit.")
        ] = False,
        tools: ToolsOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Supervise a store: restart recovery at startup, then reap hung runs, run queued input and schedules."""
        if poll <= 0 or lease <= 0 or grace < 0:
            raise ConfigError("--poll and --lease must be positive, --grace not negative")
        tm = open_safepoint_at(store, workspace)
        specs = tuple(tools or ())
        schedule.load_tools(specs)  # a bad --tools is refused here, not by every worker

        def show(record: dict[str, Any]) -> None:
            if as_json:
                sys.stdout.write(json.dumps(record, default=str) + "\n")
                sys.stdout.flush()
            else:
                out.print(_line(record), markup=False, highlight=False, soft_wrap=True)

        supervisor = Daemon(
            tm.store,
            DaemonOptions(
                workspace=tm.workspace.root, poll_s=poll, lease_s=lease, grace_s=grace, once=once, tools=specs
            ),
            show,
        )
        supervisor.install_signals()
        try:
            code = supervisor.run()
        finally:
            tm.close()
        raise typer.Exit(code)


def _write(chunk: str) -> None:
    sys.stdout.write(chunk)
    sys.stdout.flush()
