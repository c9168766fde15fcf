"""Scheduled jobs (seed 003 §2.4, §4.1 ``cron_exec_timeout``): a cron expression and what to run at each occurrence.

A job is one store-wide record (``Store.put_schedule``), rewritten with ``version`` + 1 on every change. Each
occurrence is its own run, whose id is derived from the job and the occurrence (``<job id>-<scheduled_for_ms>``):
firing an occurrence twice, by two daemons or after a crash, is refused by the store (``RunExistsError``) instead of
running the job twice. The run's header carries the ``ScheduledWorkContext`` (the cron, the occurrence, its
execution window), and before its agent loop starts the run writes the ``RuntimeRestartScheduledWorkContext``
restart checkpoint: a restart past ``scheduled_for_ms + cron_exec_timeout_ms`` closes the occurrence
(``ReplayForbidden(cron_exec_timeout)``) instead of replaying it out of its cycle.

Every time is UTC: croniter is given timezone-aware UTC datetimes and answers in UTC, so a job fires at the same
instants whatever the host's local zone or its daylight-saving changes.
"""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from croniter import croniter

from safepoint.engine.tools import Tool, ToolRegistry
from safepoint.errors import ConfigError, RunExistsError, RunNotFoundError, ScenarioError
from safepoint.protocol import RuntimeRestartScheduledWorkContext, ScheduledWorkContext
from safepoint.records import RunInfo, RunStatus
from safepoint.supervisor import job_secrets

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from safepoint.store.base import Store
    from safepoint.workspace.files import Workspace

DEFAULT_EXEC_TIMEOUT_S = 3600.0
MAX_JOB_ID = 100  # the occurrence's run id appends "-" and 13 digits; a run id holds at most 128 characters
RUN_ID_SEPARATOR = "-"
_JOB_ID = re.compile(rf"^[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{MAX_JOB_ID - 1}}}$")


class ScheduledJob(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What runs, when. ``scenario`` (a scripted model, as ``safepoint run`` takes it) or ``task`` with ``provider``
    (an OpenAI-compatible server, as ``openai_config`` makes it; never an API key). ``tools`` are extra tools as
    ``MODULE:ATTR``, loaded by every process that runs or resumes an occurrence."""

    job_id: str
    cron: str
    workspace: str
    version: int = 1
    created_at_ms: int
    updated_at_ms: int
    cron_exec_timeout_s: float = DEFAULT_EXEC_TIMEOUT_S
    scenario: dict[str, Any] | None = None
    task: str | None = None
    model: str | None = None
    provider: dict[str, Any] | None = None
    tools: tuple[str, ...] = ()
    approval: Literal["none", "high"] = "none"
    approval_timeout_s: float = 600.0
    secret_env: tuple[str, ...] = ()  # what the job takes from the environment when it fires (job_secrets.py)
    # Fired occurrences are known from their runs (``last_fired``); a run forgotten (``safepoint forget``) takes
    # that evidence with it, so its occurrence is kept here, durable with the job: never due again.
    fired_through_ms: int = 0

    @property
    def cron_exec_timeout_ms(self) -> int:
        return int(self.cron_exec_timeout_s * 1000)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ScheduledJob)


# time -------------------------------------------------------------------------------------------------------------
def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def to_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def iso(ms: int) -> str:
    return to_datetime(ms).isoformat(timespec="milliseconds")


# cron -------------------------------------------------------------------------------------------------------------
def check_cron(expr: str) -> str:
    """Five fields (minute hour day month weekday), or six with seconds last (croniter's convention), in UTC."""
    expr = " ".join(expr.split())
    fields = len(expr.split(" "))
    if not expr or (not expr.startswith("@") and fields not in (5, 6)) or not croniter.is_valid(expr):
        raise ConfigError(
            f"cron expression {expr!r} is not valid: give 5 fields (minute hour day month weekday, in UTC), "
            "or 6 with seconds last, e.g. '*/15 * * * *'"
        )
    return expr


def next_occurrence(cron: str, after_ms: int) -> int:
    """The first occurrence strictly after ``after_ms``."""
    return to_ms(croniter(cron, to_datetime(after_ms)).get_next(datetime))


def latest_occurrence(cron: str, at_ms: int) -> int:
    """The last occurrence at or before ``at_ms`` (croniter's get_prev is strictly before its start)."""
    return to_ms(croniter(cron, to_datetime(at_ms) + timedelta(milliseconds=1)).get_prev(datetime))


def is_occurrence(cron: str, ms: int) -> bool:
    return next_occurrence(cron, ms - 1) == ms


def occurrences(cron: str, after_ms: int, until_ms: int, *, limit: int = 1000) -> list[int]:
    """Occurrences in ``(after_ms, until_ms]``, oldest first, at most ``limit`` of them."""
    found: list[int] = []
    moment = after_ms
    while len(found) < limit:
        moment = next_occurrence(cron, moment)
        if moment > until_ms:
            break
        found.append(moment)
    return found


def due(job: ScheduledJob, last_fired_ms: int | None, at_ms: int) -> list[int]:
    """The occurrences to fire now: never one at or before the last fired occurrence or the job's creation.

    Catch-up policy: of the occurrences missed since then (the daemon was down, or late), only the LATEST is fired,
    and only while it is within its execution window (``at_ms <= occurrence + cron_exec_timeout``). Firing every
    missed occurrence would burst the job's work after an outage and break its cycle, which is exactly what
    ``cron_exec_timeout`` forbids a restart to do (§4.1); the latest occurrence stands for the ones it supersedes.
    So the answer is an empty list or a list of one."""
    fired = max(job.fired_through_ms, last_fired_ms if last_fired_ms is not None else 0)
    after = max(job.created_at_ms, fired)
    if at_ms <= after:
        return []
    latest = latest_occurrence(job.cron, at_ms)
    if latest <= after or at_ms > latest + job.cron_exec_timeout_ms:
        return []
    return [latest]


def occurrence_run_id(job_id: str, scheduled_for_ms: int) -> str:
    return f"{job_id}{RUN_ID_SEPARATOR}{scheduled_for_ms}"


def occurrence_of(job_id: str, run_id: str) -> int | None:
    """The occurrence a run id names for this job, or None when it is not one of the job's runs."""
    prefix = job_id + RUN_ID_SEPARATOR
    if not run_id.startswith(prefix):
        return None
    rest = run_id[len(prefix) :]
    return int(rest) if rest.isdigit() else None


def last_fired(job_id: str, run_ids: Iterable[str]) -> int | None:
    """The latest occurrence of the job that has a run (a run exists from the moment it is fired)."""
    fired = [ms for run_id in run_ids if (ms := occurrence_of(job_id, run_id)) is not None]
    return max(fired, default=None)


# the store --------------------------------------------------------------------------------------------------------
def check_job_id(job_id: str) -> str:
    if not _JOB_ID.fullmatch(job_id):
        raise ConfigError(
            f"job id {job_id!r} is not valid: use 1-{MAX_JOB_ID} letters, digits, '_', '-' or '.', "
            "starting with a letter, a digit or '_'"
        )
    return job_id


def encode_job(job: ScheduledJob) -> bytes:
    return _encoder.encode(job)


def decode_job(data: bytes) -> ScheduledJob:
    return _decoder.decode(data)


def load_jobs(store: Store) -> tuple[dict[str, ScheduledJob], dict[str, str]]:
    """Every job that decodes, and for each one that does not, why (nobody can run it; ``schedule add`` anew)."""
    jobs: dict[str, ScheduledJob] = {}
    broken: dict[str, str] = {}
    for job_id, data in store.list_schedules().items():
        try:
            jobs[job_id] = decode_job(data)
        except msgspec.DecodeError as exc:
            broken[job_id] = str(exc)
    return jobs, broken


def get_job(store: Store, job_id: str) -> ScheduledJob:
    data = store.list_schedules().get(job_id)
    if data is None:
        raise RunNotFoundError(f"no scheduled job {job_id!r} in {store.url}; see `safepoint schedule list`")
    try:
        return decode_job(data)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"scheduled job {job_id!r} cannot be read ({exc}); add it again with --replace") from None


def put_job(store: Store, job: ScheduledJob, *, replace: bool = False) -> ScheduledJob:
    """Store a new job, or with ``replace`` a changed one: its version goes up, its creation time stays."""
    check_job_id(job.job_id)
    check_cron(job.cron)
    # No secret is stored: the task's and the base URL's are taken from the environment at fire time.
    from safepoint.engine.log_writer import run_redactor

    redactor = run_redactor(job.workspace)
    changes, names = job_secrets.job_without_secrets(job.job_id, job.task, job.provider, os.environ, redactor)
    if names:
        job = msgspec.structs.replace(job, **changes, secret_env=tuple(dict.fromkeys((*job.secret_env, *names))))
    refuse_secrets(job)  # what is left (a scenario's text, a model config) has no variable to come from
    existing = store.list_schedules().get(job.job_id)
    if existing is not None:
        if not replace:
            raise ConfigError(f"scheduled job {job.job_id!r} exists; pass --replace to change it")
        try:
            old = decode_job(existing)
            job = msgspec.structs.replace(
                job,
                version=old.version + 1,
                created_at_ms=old.created_at_ms,
                fired_through_ms=max(job.fired_through_ms, old.fired_through_ms),  # forgotten runs stay fired
            )
        except msgspec.DecodeError:
            job = msgspec.structs.replace(job, version=1)
    store.put_schedule(job.job_id, encode_job(job))
    return job


def keep_fired(store: Store, job_id: str, scheduled_for_ms: int) -> None:
    """Before an occurrence's run is forgotten: its occurrence is kept as fired in its job's definition (when the
    job is still there and reads), so neither the daemon nor ``due`` takes it as due again."""
    data = store.list_schedules().get(job_id)
    if data is None:
        return
    try:
        job = decode_job(data)
    except msgspec.DecodeError:
        return  # nobody can run it (``schedule add`` anew), so nothing fires it again either
    if scheduled_for_ms > job.fired_through_ms:
        store.put_schedule(job_id, encode_job(msgspec.structs.replace(job, fired_through_ms=scheduled_for_ms)))


def refuse_secrets(job: ScheduledJob) -> None:
    """A job is stored and run again and again: a secret in it would either be kept in the store or, redacted,
    reach every occurrence as ``[REDACTED:...]`` (a command run with it, a model told it). Refused in one line
    instead (rejected: storing it redacted, which silently changes what the job does)."""
    from safepoint.engine.log_writer import run_redactor

    redactor = run_redactor(job.workspace)
    fields = msgspec.to_builtins(job)
    for name, value in fields.items():
        # The task had its secrets put into variables by the same redactor (a placeholder where a token was can
        # read as one: "Authorization: ${...}"); secret_env holds the variables' names, not their values.
        if name not in ("task", "secret_env") and redactor.value(value) != value:
            raise ConfigError(
                f"scheduled job {job.job_id!r}: its {name} holds a secret, and a schedule is kept in the store; "
                "put the secret in an environment variable and hand it to the job's commands by name "
                "(`safepoint daemon --pass-env NAME`)"
            )


def remove_job(store: Store, job_id: str) -> None:
    get_job(store, job_id)  # an unknown job is said so, not silently ignored
    store.put_schedule(job_id, None)


# running an occurrence --------------------------------------------------------------------------------------------
def load_tools(specs: Iterable[str]) -> list[Tool]:
    """``MODULE:ATTR`` specs, plus the notification tool ``safepoint run`` always has."""
    from safepoint.standins.notify import cli_tools

    return cli_tools(specs)


def check_scenario_tools(scenario: dict[str, Any], registry: ToolRegistry, source: str) -> None:
    """Refuse a scenario that calls a tool nobody registered, before anything is stored."""
    from safepoint.standins.scenario import parse_scenario

    script = parse_scenario(_encoder.encode(scenario), source)
    for index in range(len(script.turns)):
        for call in script.calls(index):
            if call.tool not in registry:
                raise ScenarioError(
                    f"{source}: turn {index + 1} calls unknown tool {call.tool!r}; known tools: "
                    f"{', '.join(registry.names())} (add your own with --tools MODULE:ATTR)"
                )


def occurrence_info(job: ScheduledJob, scheduled_for_ms: int, workspace: str, created_at: str) -> RunInfo:
    """The header of an occurrence's run: recovery class "scheduled", its own recovery owner (one owner answers for
    one agent: the owner key is unique, so each occurrence is ``job:<job id>/<occurrence>``)."""
    if job.scenario is not None:
        task = str(job.scenario.get("task", ""))
        model = str(job.scenario.get("model") or "scripted-v1")
        model_config = dict(job.scenario.get("model_config") or {})
    elif job.task is not None and job.provider is not None:
        task, model, model_config = job.task, job.model or str(job.provider.get("model", "")), {}
    else:
        raise ConfigError(f"scheduled job {job.job_id!r} has neither a scenario nor a task with a model server")
    return RunInfo(
        run_id=occurrence_run_id(job.job_id, scheduled_for_ms),
        task=task,
        model=model,
        created_at=created_at,
        workspace=workspace,
        model_config=model_config,
        scenario=job.scenario,
        provider=job.provider,
        recovery_class="scheduled",
        recovery_owner_id=f"job:{job.job_id}/{scheduled_for_ms}",
        scheduled=ScheduledWorkContext(
            cron=job.cron, scheduled_for_ms=scheduled_for_ms, cron_exec_timeout_ms=job.cron_exec_timeout_ms
        ),
        job_id=job.job_id,
        approval=job.approval,
        approval_timeout_s=job.approval_timeout_s,
    )


def fire(
    store: Store,
    workspace: Workspace,
    registry: ToolRegistry,
    job: ScheduledJob,
    scheduled_for_ms: int,
    *,
    attempt: int = 1,
    output: Callable[[str], None] | None = None,
    pass_env: tuple[str, ...] = (),
) -> tuple[str, RunStatus]:
    """Run one occurrence of ``job`` in ``workspace`` with ``registry``'s tools, start to finish. Returns the run
    id and its status.

    Raises ``RunExistsError`` when the occurrence was fired already (by anyone): it never runs twice. A crash or a
    stop leaves the run to restart recovery (``safepoint resume`` or the daemon), which closes it instead once its
    execution window has passed."""
    from safepoint.agent.loop import Agent  # the engine and the agent loop load only when a job fires
    from safepoint.engine.session import RunSession, now
    from safepoint.providers.select import provider_for

    if not is_occurrence(job.cron, scheduled_for_ms):
        raise ConfigError(
            f"{iso(scheduled_for_ms)} ({scheduled_for_ms}) is not an occurrence of job {job.job_id!r} "
            f"({job.cron!r}, UTC)"
        )
    if scheduled_for_ms <= job.fired_through_ms:  # fired, and its run forgotten since (``keep_fired``)
        raise RunExistsError(
            f"occurrence {iso(scheduled_for_ms)} of job {job.job_id!r} was fired already (its run was forgotten)"
        )
    if job.secret_env:  # what the job does not keep, from this process's environment (one line if missing)
        task, config = job_secrets.job_with_secrets(job.job_id, job.task, job.provider, job.secret_env, os.environ)
        job = msgspec.structs.replace(job, task=task, provider=config)
    info = occurrence_info(job, scheduled_for_ms, workspace.root, now())
    provider, prompt = provider_for(info)  # a job that cannot reach its model is refused before its run exists
    session = RunSession.create(store, info, workspace, registry)
    session.pass_env = pass_env  # the credential variables the user named: every command of the occurrence gets them
    try:
        session.add_message("user", info.task)
        session.commit()
        assert info.scheduled is not None
        session.restart.write(
            RuntimeRestartScheduledWorkContext(
                job_id=job.job_id,
                attempt=attempt,
                version=job.version,
                scheduled_work_context=info.scheduled,
                replay_disposition="Resumable",
            )
        )
        status = Agent(session, provider, system=prompt, output=output).run()
        session.commit()
    finally:
        session.close()
    return info.run_id, status
