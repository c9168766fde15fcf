"""Supervision commands: ``safepoint schedule add|list|remove|fire`` and ``safepoint daemon``, on
``safepoint.supervision`` (imported when a command runs).

A schedule lives in the store, so every daemon on that store sees it; ``schedule fire`` is what a daemon's worker
runs for one due occurrence (a person may run it too: an occurrence fires at most once).
"""

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from safepoint.cli.common import (
    JsonOpt,
    KeyFileOpt,
    Out,
    StoreOpt,
    ToolsOpt,
    WorkspaceOpt,
    emit,
    exit_code_for,
    open_safepoint_at,
    write_through,
)
from safepoint.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from rich.table import Table

    from safepoint.results import JobSummary

# The library's defaults, repeated for --help (tests/test_public_api.py checks they agree with supervision's).
DEFAULT_EXEC_TIMEOUT_S = 3600.0
DEFAULT_LEASE_S = 30.0


def _jobs_table(rows: "list[JobSummary]") -> "Table":
    from rich.table import Table

    table = Table(title="scheduled jobs (times in UTC)")
    for column in ("job", "cron", "version", "next", "last fired", "what"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.job_id, row.cron, str(row.version), row.next_at, row.last_fired_at or "-", row.what[:60])
    return table


def _line(record: dict[str, Any]) -> str:
    """One daemon action as one human line: time, event, run, then the rest as key=value."""
    rest = " ".join(f"{key}={value}" for key, value in record.items() if key not in ("at", "event", "run_id"))
    run = f" {record['run_id']}" if "run_id" in record else ""
    return f"{record['at'][11:19]} {record['event']}{run} {rest}".rstrip()


def register(app: typer.Typer, out: Out) -> None:
    schedules = typer.Typer(
        no_args_is_help=True, rich_markup_mode=None, help="Scheduled jobs: a cron expression (UTC) and what to run."
    )
    app.add_typer(schedules, name="schedule")

    @schedules.command("add")
    def add(
        job_id: Annotated[str, typer.Argument(help="The job's name (see `safepoint schedule list`).")],
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
        ] = DEFAULT_EXEC_TIMEOUT_S,
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
        approval_timeout: Annotated[
            float, typer.Option("--approval-timeout", help="Seconds a call of the job's runs waits for approval.")
        ] = 600.0,
        replace: Annotated[
            bool, typer.Option("--replace", help="Change an existing job (its version goes up).")
        ] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        tools: ToolsOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Add a job: at every occurrence of --cron the daemon runs the scenario (or --task with --model)."""
        from safepoint import supervision
        from safepoint.providers.select import openai_config
        from safepoint.standins.scenario import load_scenario

        if not cron:
            raise ConfigError("give --cron, e.g. --cron '*/15 * * * *' (UTC)")
        if approval not in ("none", "high"):
            raise ConfigError(f"--approval {approval!r}: choose 'none' or 'high'")
        sp = open_safepoint_at(store, workspace, key_file)
        provider = None
        if scenario is None and task is not None and model is not None:
            provider = openai_config(model, base_url, api_key_env) | {"system": system}
        row = supervision.add_job(
            sp,
            job_id,
            cron=cron,
            scenario=load_scenario(scenario) if scenario is not None else None,
            source=scenario or "scenario",
            task=task,
            provider=provider,
            exec_timeout_s=exec_timeout,
            tools=tuple(tools or ()),
            approval="high" if approval == "high" else "none",
            approval_timeout_s=approval_timeout,
            replace=replace,
        )
        emit(row, as_json)
        if not as_json:
            out.print(f"job {job_id} (version {row.version}): {row.cron} UTC; next at {row.next_at}")
            if row.needs_env:
                names = ", ".join(row.needs_env)
                out.print(f"job {job_id} keeps no secret: set {names} where the daemon runs (taken when it fires)")

    @schedules.command("list")
    def list_jobs(
        workspace: WorkspaceOpt = ".", store: StoreOpt = None, key_file: KeyFileOpt = None, as_json: JsonOpt = False
    ) -> None:
        """Every scheduled job, with its next occurrence and the last one fired."""
        from safepoint import supervision

        rows = supervision.jobs(open_safepoint_at(store, workspace, key_file))
        emit(rows, as_json)
        if not as_json:
            out.print(_jobs_table([row for row in rows if row.error is None]))
            for row in rows:
                if row.error is not None:
                    out.print(f"job {row.job_id} cannot be read: {row.error}")

    @schedules.command("remove")
    def remove(
        job_id: Annotated[str, typer.Argument(help="The job to remove (see `safepoint schedule list`).")],
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Remove a job: nothing more is fired; runs it already started are left as they are."""
        from safepoint import supervision

        supervision.remove_job(open_safepoint_at(store, workspace, key_file), job_id)
        emit({"job_id": job_id, "removed": True}, as_json)
        if not as_json:
            out.print(f"job {job_id} removed")

    @schedules.command("fire")
    def fire(
        job_id: Annotated[str, typer.Argument(help="The job's name (see `safepoint schedule list`).")],
        at: Annotated[int, typer.Option("--at", help="The occurrence, in ms since the epoch (UTC).")],
        attempt: Annotated[
            int, typer.Option("--attempt", help="Which attempt of the occurrence this is (a daemon counts them).")
        ] = 1,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        tools: ToolsOpt = None,
        pass_env: Annotated[
            list[str] | None,
            typer.Option("--pass-env", help="Hand this credential variable to the run's commands (repeatable)."),
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Run one occurrence of a job now (what the daemon's worker runs). An occurrence runs at most once."""
        from safepoint import supervision

        done = supervision.fire(
            open_safepoint_at(store, workspace, key_file),
            job_id,
            at,
            attempt=attempt,
            tools=tuple(tools or ()),
            pass_env=tuple(pass_env or ()),
            output=None if as_json else write_through,
        )
        if done.already_fired:
            emit(done, as_json)
            if not as_json:
                out.print(f"run {done.run_id}: occurrence fired already ({done.status}); not run again")
            raise typer.Exit(ExitCode.OK)
        emit({"run_id": done.run_id, "status": done.status}, as_json)
        if not as_json:
            out.print(f"\nrun {done.run_id}: [bold]{done.status}[/bold]")
        raise typer.Exit(exit_code_for(done.status))

    @app.command()
    def daemon(
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        poll: Annotated[float, typer.Option("--poll", help="Seconds between passes.")] = 1.0,
        lease: Annotated[
            float,
            typer.Option("--lease", help="Seconds without a heartbeat after which a run is taken over and resumed."),
        ] = DEFAULT_LEASE_S,
        concurrency: Annotated[
            int | None,
            typer.Option("--concurrency", help="At most this many workers at once (default: the number of cores)."),
        ] = None,
        reap_after: Annotated[
            float | None,
            typer.Option(
                "--reap-after",
                help="Seconds without a heartbeat after which a run's work is closed (runtime_work_reap), "
                "not resumed (default: never; only work recovery cannot resume is closed).",
            ),
        ] = None,
        tenant: Annotated[
            str | None,
            typer.Option(
                "--tenant",
                help="Recover only runs of this recovery identity, CLASS or CLASS/OWNER (PostgreSQL stores).",
            ),
        ] = None,
        grace: Annotated[
            float, typer.Option("--grace", help="On SIGTERM, seconds workers get to stop before they are killed.")
        ] = 30.0,
        once: Annotated[
            bool, typer.Option("--once", help="Startup recovery and one pass, wait for the workers, exit.")
        ] = False,
        tools: ToolsOpt = None,
        pass_env: Annotated[
            list[str] | None,
            typer.Option(
                "--pass-env",
                help="Hand this credential variable to the commands of every run a worker resumes or "
                "fires (repeatable).",
            ),
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Supervise a store: restart recovery at startup, then take over stalled runs, run queued input and
        schedules, with at most --concurrency workers; any number of daemons may share a store."""
        from safepoint import supervision

        if poll <= 0 or lease <= 0 or grace < 0:
            raise ConfigError("--poll and --lease must be positive, --grace not negative")
        sp = open_safepoint_at(store, workspace, key_file)

        def show(record: dict[str, Any]) -> None:
            if as_json:
                sys.stdout.write(json.dumps(record, default=str) + "\n")
                sys.stdout.flush()
            else:
                out.print(_line(record), markup=False, highlight=False, soft_wrap=True)

        try:
            code = supervision.run_daemon(
                sp,
                emit=show,
                poll_s=poll,
                lease_s=lease,
                grace_s=grace,
                once=once,
                tools=tuple(tools or ()),
                pass_env=tuple(pass_env or ()),
                concurrency=concurrency,
                reap_after_s=reap_after,
                tenant=tenant,
            )
        finally:
            sp.close()
        raise typer.Exit(code)
