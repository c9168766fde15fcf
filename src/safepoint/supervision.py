"""Supervision, on top of the library API: scheduled jobs (add, list, remove, fire one occurrence) and the daemon.

A module of its own above ``safepoint.api`` because the supervisor's parts use the API (an occurrence is a run
started and driven through a ``Safepoint``): the API cannot import them back without a cycle.

::

    sp = safepoint.open(workspace=".")
    supervision.add_job(sp, "nightly", cron="0 3 * * *", scenario=load_scenario("nightly.json"))
    supervision.run_daemon(sp, emit=print)          # restart recovery, the reaper, queued input, schedules
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

from safepoint.api import Safepoint, stop_at_safe_point_on_sigterm
from safepoint.errors import ConfigError, ExitCode, RunExistsError
from safepoint.results import Finished, JobSummary
from safepoint.standins.scenario import Scenario
from safepoint.store.liveness import OWNER_LEASE_SECONDS
from safepoint.supervisor import schedule

DEFAULT_EXEC_TIMEOUT_S = schedule.DEFAULT_EXEC_TIMEOUT_S
DEFAULT_LEASE_S = OWNER_LEASE_SECONDS


def _summary(job: schedule.ScheduledJob, runs: list[str], at_ms: int) -> JobSummary:
    last = schedule.last_fired(job.job_id, runs)
    return JobSummary(
        job_id=job.job_id,
        cron=job.cron,
        version=job.version,
        exec_timeout_s=job.cron_exec_timeout_s,
        workspace=job.workspace,
        what=f"scenario: {job.scenario.get('task', '')}" if job.scenario is not None else f"task: {job.task}",
        next_at=schedule.iso(schedule.next_occurrence(job.cron, at_ms)),
        last_fired_at=schedule.iso(last) if last is not None else None,
        last_run_id=schedule.occurrence_run_id(job.job_id, last) if last is not None else None,
        needs_env=job.secret_env,
    )


def add_job(
    sp: Safepoint,
    job_id: str,
    *,
    cron: str,
    scenario: Scenario | None = None,
    source: str = "scenario",
    task: str | None = None,
    provider: dict[str, Any] | None = None,
    exec_timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
    tools: Iterable[str] = (),
    approval: Literal["none", "high"] = "none",
    approval_timeout_s: float = 600.0,
    replace: bool = False,
) -> JobSummary:
    """Add a job (``replace``: change one; its version goes up): at every occurrence of ``cron`` (UTC) the daemon
    runs ``scenario``, or ``task`` with a model server (``provider``, as ``openai_config`` makes it)."""
    from safepoint.standins.scenario import scenario_to_dict

    if exec_timeout_s <= 0:
        raise ConfigError(f"--exec-timeout {exec_timeout_s}: give a positive number of seconds")
    schedule.check_job_id(job_id)
    cron = schedule.check_cron(cron)
    specs = tuple(tools)
    registry = sp.registry(schedule.load_tools(specs))
    fields: dict[str, Any] = {}
    if scenario is not None:
        fields["scenario"] = scenario_to_dict(scenario)
        schedule.check_scenario_tools(fields["scenario"], registry, source)
    elif task is not None and provider is not None:
        fields |= {"task": task, "model": str(provider.get("model", "")), "provider": provider}
    else:
        raise ConfigError("give a scenario file, or --task and --model (and --base-url) for a model server")
    at = schedule.now_ms()
    job = schedule.put_job(
        sp.store,
        schedule.ScheduledJob(
            job_id=job_id,
            cron=cron,
            workspace=sp.root,
            created_at_ms=at,
            updated_at_ms=at,
            cron_exec_timeout_s=exec_timeout_s,
            tools=specs,
            approval=approval,
            approval_timeout_s=approval_timeout_s,
            **fields,
        ),
        replace=replace,
    )
    return _summary(job, sp.list_runs(), at)


def jobs(sp: Safepoint) -> list[JobSummary]:
    """Every scheduled job with its next occurrence and the last one fired; one that cannot be read says why."""
    found, broken = schedule.load_jobs(sp.store)
    runs = sp.list_runs()
    at = schedule.now_ms()
    rows = [_summary(job, runs, at) for job in found.values()]
    return rows + [JobSummary(job_id=job_id, error=why) for job_id, why in broken.items()]


def remove_job(sp: Safepoint, job_id: str) -> None:
    """Nothing more is fired; runs the job already started are left as they are."""
    schedule.remove_job(sp.store, job_id)


def fire(
    sp: Safepoint,
    job_id: str,
    at_ms: int,
    *,
    attempt: int = 1,
    tools: Iterable[str] = (),
    pass_env: Iterable[str] = (),
    output: Callable[[str], None] | None = None,
) -> Finished:
    """Run one occurrence of a job now, in the job's workspace (what a daemon's worker runs). An occurrence runs
    at most once: fired before, it is ``already_fired`` with the status it has. ``pass_env``: the credential
    variables its commands get, by name (as for ``Safepoint.start``)."""
    job = schedule.get_job(sp.store, job_id)
    if at_ms > schedule.now_ms():
        raise ConfigError(f"occurrence {schedule.iso(at_ms)} of job {job_id!r} is not due yet")
    if not os.path.isdir(job.workspace):
        raise ConfigError(f"job {job_id!r}: its workspace {job.workspace!r} does not exist")
    there = Safepoint(sp.store, job.workspace)
    run_id = schedule.occurrence_run_id(job_id, at_ms)
    stop_at_safe_point_on_sigterm()
    try:
        run_id, status = schedule.fire(
            there.store,
            there.workspace,
            there.registry(schedule.load_tools((*job.tools, *tools))),
            job,
            at_ms,
            attempt=attempt,
            output=output,
            pass_env=tuple(pass_env),
        )
    except RunExistsError:
        [row] = there.status(run_id)
        return Finished(run_id=run_id, status=row.status, already_fired=True)
    return Finished(run_id=run_id, status=status)


def run_daemon(
    sp: Safepoint,
    *,
    emit: Callable[[dict[str, Any]], None],
    poll_s: float = 1.0,
    lease_s: float = DEFAULT_LEASE_S,
    grace_s: float = 30.0,
    once: bool = False,
    tools: Iterable[str] = (),
    pass_env: Iterable[str] = (),
    concurrency: int | None = None,
    reap_after_s: float | None = None,
    tenant: str | None = None,
) -> ExitCode:
    """Supervise the store in the foreground until SIGTERM (or, with ``once``, one pass): restart recovery at
    startup, then take over stalled runs, resume runs with queued input and fire due schedules. ``emit`` gets each
    action. ``concurrency``: at most this many workers at once (default: the number of cores); ``reap_after_s``:
    work without a heartbeat this long is closed (``runtime_work_reap``) instead of resumed. ``tenant``
    (``CLASS[/OWNER]``, PostgreSQL): recover only runs of that recovery identity."""
    from safepoint.supervisor.daemon import Daemon, DaemonOptions

    if poll_s <= 0 or lease_s <= 0 or grace_s < 0:
        raise ConfigError("--poll and --lease must be positive, --grace not negative")
    if (concurrency is not None and concurrency < 1) or (reap_after_s is not None and reap_after_s <= 0):
        raise ConfigError("--concurrency must be at least 1 and --reap-after positive")
    if tenant is not None:
        from safepoint.store.postgres_tenant import parse_tenant

        restrict = getattr(sp.store, "restrict", None)  # a PostgreSQL store's, through an encrypting layer too
        if restrict is None:
            raise ConfigError("--tenant needs a PostgreSQL store (--store postgresql://...)")
        restrict(parse_tenant(tenant))
    specs = tuple(tools)
    schedule.load_tools(specs)  # a bad --tools is refused here, not by every worker
    supervisor = Daemon(
        sp.store,
        DaemonOptions(
            workspace=sp.root,
            poll_s=poll_s,
            lease_s=lease_s,
            grace_s=grace_s,
            once=once,
            tools=specs,
            pass_env=tuple(pass_env),
            concurrency=concurrency or os.cpu_count() or 1,
            reap_after_s=reap_after_s,
        ),
        emit,
    )
    supervisor.install_signals()
    return supervisor.run()
