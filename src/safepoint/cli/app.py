"""``safepoint``: parse, call the library API, render. Exit codes are ``ExitCode``'s (0 done, 3 waiting for a
decision, others errors). Commands import the library when they run, so ``--help`` starts fast."""

import copy
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.main import get_command_name
from typer.models import CommandInfo

from safepoint.cli import db, history, lifecycle, mcp, protocol, review, supervise, ui
from safepoint.cli.common import (
    JsonOpt,
    KeyFileOpt,
    Out,
    StoreOpt,
    TakeoverOpt,
    ToolsOpt,
    WorkspaceOpt,
    close_opened,
    emit,
    exit_code_for,
    open_safepoint_at,
    plain,
)
from safepoint.errors import ConfigError, DecisionNeeded, ExitCode, SafepointError, is_disk_full

if TYPE_CHECKING:
    from collections.abc import Callable

    from safepoint import Tool
    from safepoint.api import Run, Safepoint
    from safepoint.records import ConflictResolution

# Plain help and usage errors (rich_markup_mode=None): rich's help formatter imports markdown-it and doubles the
# start-up of `safepoint --help`.
app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion (typer's: bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Crash-safe AI-agent runs.",
)
out = Out()


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"safepoint {version('safepoint')}\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _common(
    _version: Annotated[
        bool | None,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = None,
) -> None:
    """Crash-safe AI-agent runs."""


def _load_tools(specs: list[str] | None) -> "list[Tool]":
    from safepoint.api import load_tools

    return load_tools(specs or [])


_open = open_safepoint_at


def _emit(data: Any, as_json: bool, render: "Callable[[Any], Any] | None" = None) -> None:
    """``--json``: the result as plain data; otherwise ``render(plain data)`` when given."""
    emit(data, as_json)
    if not as_json and render is not None:
        out.print(render(plain(data)))


def _emit_plain(data: Any, as_json: bool, render: "Callable[[Any], str]") -> None:
    """``--json``: the result as plain data; otherwise a plain text table (no rich: it fits the terminal)."""
    emit(data, as_json)
    if not as_json:
        sys.stdout.write(render(plain(data)))


def _finish(
    run_id: str,
    status: str,
    as_json: bool,
    detail: str = "",
    *,
    spaced: bool = True,
    choices: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """The last line of ``run``/``resume``: under ``--json`` one compact object (the ``finished`` event), after
    the progress events, so the output stays one JSON value a line."""
    from safepoint.cli.progress import Printer

    if as_json:
        import json

        done: dict[str, Any] = {"event": "finished", "run_id": run_id, "status": status}
        done |= {"detail": detail} if detail else {}
        if choices:  # the decisions resume accepts for each waiting call (DecisionNeeded.choices)
            done["choices"] = {call_id: list(accepted) for call_id, accepted in choices.items()}
        sys.stdout.write(json.dumps(done) + "\n")
    else:
        Printer(as_json=False).finished(run_id, status, spaced=spaced)
    raise typer.Exit(exit_code_for(status))


def _watch(run: "Run", sp: "Safepoint", quiet: bool, as_json: bool) -> None:
    """Progress: each step printed as it happens (``--json``: one event a line), through the library's hook."""
    if quiet:
        return
    import os
    import shlex

    from safepoint.cli.progress import Printer

    here = os.path.abspath(".")
    inside = here == sp.root or here.startswith(sp.root.rstrip(os.sep) + os.sep)
    run.on_event(Printer(as_json=as_json, where="" if inside else f" -w {shlex.quote(sp.root)}"))


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print no progress, only the final status.")]


ApprovalOpt = Annotated[
    str, typer.Option("--approval", help="'high': high-risk calls wait for `safepoint approve`; 'none': they do not.")
]


def _stopped(run_id: str, status: str) -> None:
    """A run stopped by SIGTERM or Ctrl-C says so, and what continues it (on stderr: --json stays clean)."""
    if status == "interrupted":
        sys.stderr.write(
            f"safepoint: run {run_id} stopped at a safe point (SIGTERM or Ctrl-C); "
            f"`safepoint resume {run_id}` continues it\n"
        )


PassEnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--pass-env",
        help="Hand this credential variable to the run's commands (repeatable); by default they get none.",
    ),
]


@app.command()
def run(
    scenario: Annotated[str | None, typer.Argument(help="Scenario JSON file for the scripted model.")] = None,
    workspace: WorkspaceOpt = ".",
    run_id: Annotated[str | None, typer.Option("--run-id", help="The new run's id (default: a fresh one).")] = None,
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
    key_file: KeyFileOpt = None,
    tools: ToolsOpt = None,
    pass_env: PassEnvOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run: of a scenario (scripted model), or of --task with a model server (--model, --base-url)."""
    from safepoint.api import stop_at_safe_point_on_sigterm

    if approval not in ("none", "high"):
        raise ConfigError(f"--approval {approval!r}: choose 'none' or 'high'")
    stop_at_safe_point_on_sigterm()  # SIGTERM or Ctrl-C: stop at the next safe point, keep the restart checkpoint
    extra = _load_tools(tools)
    sp = _open(store, workspace, key_file)
    options: dict[str, Any] = {
        "approval": approval,
        "approval_timeout_s": approval_timeout,
        "successor_of": successor_of,
        "run_id": run_id,
        "tools": extra,
        "pass_env": pass_env or (),
    }
    if scenario is not None:
        from safepoint.standins.scenario import load_scenario

        handle = sp.start_scenario(load_scenario(scenario), source=scenario, **options)
    else:
        if task is None or model is None:
            raise ConfigError("give a scenario file, or --task and --model (and --base-url) for a model server")
        from safepoint.providers.select import openai_config

        config = openai_config(model, base_url, api_key_env) | {"system": system}
        handle = sp.start(task, model=model, provider=config, **options)
    if not as_json:
        out.print(f"run id: {handle.run_id}")
    _watch(handle, sp, quiet, as_json)
    with handle:
        status = sp.run_agent(handle)  # the run's own model: its scenario or server
    _stopped(handle.run_id, status)
    _finish(handle.run_id, status, as_json, spaced=not quiet)


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    workspace: WorkspaceOpt = ".",
    replay: Annotated[list[str] | None, typer.Option("--replay", help="Run this uncertain call again.")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="Do not run this uncertain call again.")] = None,
    takeover: Annotated[bool, typer.Option("--takeover", help="Fence off a live owner and resume anyway.")] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Continue with another model (an interrupted turn is not replayed).")
    ] = None,
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    tools: ToolsOpt = None,
    pass_env: PassEnvOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Resume a run after a crash or restart: recovery checks first, then from its latest complete checkpoint."""
    from safepoint.api import stop_at_safe_point_on_sigterm

    stop_at_safe_point_on_sigterm()
    extra = _load_tools(tools)
    sp = _open(store, workspace, key_file)
    if sp.nothing_to_resume(run_id, replay=replay or (), skip=skip or ()):
        if not as_json:  # resuming is idempotent: finished stays finished
            from safepoint.cli.render import completed_already

            sys.stdout.write(completed_already(run_id, sp.explain(run_id, probe_workspace=False, limit=0)))
            raise typer.Exit(ExitCode.OK)
        _finish(run_id, "completed", True)
    provider, prompt = sp.provider_for(run_id, model=model)  # a model that cannot be reached: refused first
    try:
        handle = sp.resume(
            run_id,
            tools=extra,
            replay=replay or (),
            skip=skip or (),
            takeover=takeover,
            model=model,  # None: the run's own model (a submission may have asked for another); no switch
            pass_env=pass_env or (),
        )
    except DecisionNeeded as exc:
        if as_json:
            _finish(run_id, "waiting_decision", True, str(exc), choices=exc.choices)
        sys.stderr.write(f"safepoint: {exc}\n")
        raise typer.Exit(exc.exit_code) from None
    if not as_json and not quiet and handle.recovery_note is not None:
        from safepoint.cli import render

        out.print(render.note_panel(handle.recovery_note))
    _watch(handle, sp, quiet, as_json)
    with handle:
        status = sp.run_agent(handle, provider, system=prompt)
    _stopped(handle.run_id, status)
    _finish(handle.run_id, status, as_json, spaced=not quiet)


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="One run (default: every run of the store).")] = None,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one run, or every run of the store."""
    sp = _open(store, workspace, key_file)
    rows = sp.status(run_id)
    emit(rows[0] if run_id else rows, as_json)
    if as_json:
        return
    if not rows:  # said in one plain line: an empty table tells less
        sys.stdout.write(f"no runs in {sp.shown_url}; start one with `safepoint run`\n")
        return
    from safepoint.cli.plain import status_table  # the most run command: no rich to load

    sys.stdout.write(status_table(rows))


@app.command()
def ledger(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every tool call of a run with its ledger state."""
    from safepoint.cli.plain import ledger_table

    _emit_plain(_open(store, workspace, key_file).ledger(run_id), as_json, ledger_table)


@app.command()
def checkpoints(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The checkpoints of a run, each with the call it belongs to (`--to step:N` names the one after step N)."""
    from safepoint.cli.plain import checkpoint_table

    _emit_plain(_open(store, workspace, key_file).checkpoints(run_id), as_json, checkpoint_table)


@app.command()
def explain(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
    limit: Annotated[int | None, typer.Option(min=0, help="List at most this many calls.")] = None,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many calls first (ledger order).")] = 0,
) -> None:
    """What happened to every call, and where and why a resume would continue."""
    from safepoint.cli import render

    found = _open(store, workspace, key_file).explain(run_id, limit=limit, offset=offset)
    _emit(found, as_json, render.explain_view)


@app.command()
def rollback(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    to: Annotated[
        str,
        typer.Option(
            "--to", help="The checkpoint to go back to (see `safepoint checkpoints`), or step:N (after step N)."
        ),
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; change nothing.")] = False,
    include_uncertain: Annotated[
        bool,
        typer.Option(
            "--include-uncertain", help="Also revert changes made while a command ran whose author is uncertain."
        ),
    ] = False,
    takeover: TakeoverOpt = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """rollback_files: revert the agent's file changes after a checkpoint, never the user's (conflicts instead)."""
    from safepoint.cli import render
    from safepoint.records import RollbackFiles

    sp = _open(store, workspace, key_file)
    plan = sp.recover(
        run_id,
        RollbackFiles(checkpoint_id=sp.checkpoint_for(run_id, to)),
        dry_run=dry_run,
        include_uncertain=include_uncertain,
        takeover=takeover,
    )
    data = plain(plan) | {"dry_run": dry_run}
    _emit(data, as_json, lambda shown: render.rollback_view(shown | {"run_id": run_id}))
    raise typer.Exit(ExitCode.CONFLICTS if data["conflicts"] else ExitCode.OK)


@app.command()
def conflicts(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Files a rollback did not touch because they changed after the agent wrote them."""
    from safepoint.cli import render

    found = _open(store, workspace, key_file).conflicts(run_id)
    if as_json:
        keys = ("path", "expected_hash", "actual_hash", "agent_patch_ref", "resolution")
        emit([{key: getattr(c, key) for key in keys} for c in found], True)
    else:
        out.print(render.conflicts_view(plain(found)))


@app.command()
def resolve(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    path: Annotated[str, typer.Argument(help="The conflicting file (see `safepoint conflicts`).")],
    keep_user: Annotated[bool, typer.Option("--keep-user", help="Keep the file as it is now.")] = False,
    apply_agent: Annotated[bool, typer.Option("--apply-agent", help="Revert it anyway, over the later edits.")] = False,
    manual_merge: Annotated[
        bool, typer.Option("--manual-merge", help="Write a three-way merge; markers where both changed the same lines.")
    ] = False,
    takeover: TakeoverOpt = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Settle one conflict: keep_user, apply_agent or manual_merge."""
    flags: list[tuple[ConflictResolution, bool]] = [
        ("keep_user", keep_user),
        ("apply_agent", apply_agent),
        ("manual_merge", manual_merge),
    ]
    chosen = [name for name, flag in flags if flag]
    if len(chosen) != 1:
        raise ConfigError("choose exactly one of --keep-user, --apply-agent, --manual-merge")
    result = _open(store, workspace, key_file).resolve(run_id, path, chosen[0], takeover=takeover)
    emit(result, as_json)
    if not as_json:
        tail = "" if result.clean else " (with conflict markers: edit the file to finish)"
        out.print(f"{path}: {result.resolution}{tail}")


@app.command()
def restore(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    to: Annotated[
        str, typer.Option("--to", help="The checkpoint to restore the session to, or step:N (after step N).")
    ],
    with_files: Annotated[bool, typer.Option("--with-files", help="Also roll the files back to it.")] = False,
    include_uncertain: Annotated[
        bool, typer.Option("--include-uncertain", help="With --with-files: also changes whose author is uncertain.")
    ] = False,
    takeover: TakeoverOpt = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """restore_session: the conversation and run state go back to a checkpoint, as a new branch; effects outside
    the workspace after it are not undone (they are listed, with the compensations --tools declare)."""
    from safepoint.cli import render
    from safepoint.records import RestoreSession

    sp = _open(store, workspace, key_file)
    restored = sp.recover(
        run_id,
        RestoreSession(checkpoint_id=sp.checkpoint_for(run_id, to)),
        with_files=with_files,
        include_uncertain=include_uncertain,
        tools=_load_tools(tools),
        takeover=takeover,
    )
    data = plain(restored)
    emit(data, as_json)
    if not as_json:
        out.print(render.restore_view(run_id, data))
    raise typer.Exit(ExitCode.CONFLICTS if data["conflicts"] else ExitCode.OK)


@app.command()
def compensate(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    ledger_entry_id: Annotated[
        str, typer.Argument(help="The finished call to take back (its call_id in `safepoint ledger`).")
    ],
    assume_done: Annotated[bool, typer.Option("--assume-done", help="Compensate an uncertain call.")] = False,
    replay: Annotated[bool, typer.Option("--replay", help="Run an interrupted compensation again.")] = False,
    skip: Annotated[bool, typer.Option("--skip", help="Leave an interrupted compensation as it is.")] = False,
    takeover: TakeoverOpt = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """compensate_external_action: run a tool's compensator for one finished call, at most once."""
    from safepoint.records import CompensateExternalAction

    if replay and skip:
        raise ConfigError("choose one of --replay and --skip")
    try:
        result = _open(store, workspace, key_file).recover(
            run_id,
            CompensateExternalAction(ledger_entry_id=ledger_entry_id),
            tools=_load_tools(tools),
            assume_done=assume_done,
            decision="replay" if replay else "skip" if skip else None,
            takeover=takeover,
        )
    except DecisionNeeded as exc:
        if as_json:
            _json_error(str(exc), exc.exit_code)
        sys.stderr.write(f"safepoint: {exc}\n")
        raise typer.Exit(exc.exit_code) from None
    emit(result, as_json)
    if not as_json:
        out.print(plain(result)["result"])


@app.command()
def commit(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Create the commit (without it: show what would be committed).")
    ] = False,
    message: Annotated[
        str | None, typer.Option("--message", "-m", help="The commit message (default: names the run and its task).")
    ] = None,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Commit the agent's changes only, on the current branch, when you ask; your other changes stay as they are."""
    sp = _open(store, workspace, key_file)
    if not yes:
        changes = sp.agent_changes(run_id, require_git=True)
        emit(changes, as_json)
        if not as_json:
            out.print("would commit: " + (", ".join(changes.would_commit) or "nothing"))
            for reason in changes.reasons:
                out.print(f"left out {reason.path}: {reason.why}", markup=False)
            out.print("run again with --yes to commit")
        return
    done = sp.commit(run_id, message)
    emit(done, as_json)
    if not as_json:
        out.print(f"committed {len(done.committed)} path(s) as {done.commit[:12]}")
        for reason in done.reasons:
            out.print(f"left out {reason.path}: {reason.why}", markup=False)


@app.command()
def trace(
    run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
    call: Annotated[str | None, typer.Option("--call", help="Only the events about this call.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From an ISO time (UTC), a duration ago (90s, 10m, 2h, 1d) or a checkpoint id."),
    ] = None,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's timeline: every checkpoint, call, recovery decision, rollback and conflict, one line each."""
    from safepoint.api import mask_passwords, trace_key_fields
    from safepoint.cli.trace import timeline

    events = _open(store, workspace, key_file).trace(run_id, call_id=call, since=since)
    if as_json:
        import json

        lines = "".join(json.dumps(plain(e), separators=(",", ":"), default=str) + "\n" for e in events)
        sys.stdout.write(mask_passwords(lines))
        return
    if not events:
        sys.stdout.write(
            f"run {run_id}: no trace events{' about ' + call if call else ''}{' since ' + since if since else ''}\n"
        )
        return
    sys.stdout.write(mask_passwords(timeline([plain(e) for e in events], [trace_key_fields(e) for e in events])))


def _render_classification(report: dict[str, Any]) -> str:
    def listed(items: list[str]) -> str:
        return ", ".join(items) if items else "-"

    lines = [
        f"idempotency:   {report['idempotency']}",
        f"replay_policy: {report['replay_policy']}",
        f"risk_level:    {report['risk_level']}",
        f"side_effects:  {listed(report['side_effects'])}",
        f"write_targets: {listed(report['write_targets'])}",
        f"rules:         {report['rules']}",
        "reasons:",
        *(f"  - {reason}" for reason in report["reasons"]),
    ]
    return "\n".join(lines)


@app.command()
def classify(
    command: Annotated[str, typer.Argument(help="The command line, as run_command would get it (quote it).")],
    workspace: WorkspaceOpt = ".",
    rules: Annotated[
        str | None,
        typer.Option("--rules", help="A TOML or JSON rules file (default: the workspace's .safepoint/commands.toml)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """How run_command judges a line: may a resume re-run it on its own, and which files does it write."""
    from safepoint.api import classify as classify_line

    report = classify_line(command, workspace=workspace, rules=rules)
    if as_json:
        emit(report, True)
    else:
        sys.stdout.write(_render_classification(plain(report)) + "\n")  # plain: reasons hold [..], not markup


@app.command()
def fsck(
    run_id: Annotated[str | None, typer.Argument(help="The run to check (default: every run of the store).")] = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="Quarantine what is corrupt (never deleted) and make the run usable.")
    ] = False,
    workspace: WorkspaceOpt = ".",
    store: StoreOpt = None,
    key_file: KeyFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every checksum and reference of the store; exit 0 when clean, 12 when problems were found."""
    from safepoint.cli import render

    result = _open(store, workspace, key_file).fsck(run_id, repair=repair)
    if as_json:
        emit(result, True)
    else:
        sys.stdout.write(render.fsck_lines(plain(result)))
    raise typer.Exit(ExitCode.OK if result.clean else ExitCode.DAMAGED)


@app.command()
def demo(keep: Annotated[bool, typer.Option(help="Keep the demo workspace.")] = False) -> None:
    """A scripted coding agent is SIGKILLed mid-run and resumed (nothing is sent twice), then rolled back."""
    from safepoint.cli.demo import run_demo

    raise typer.Exit(run_demo(out.console(), keep=keep))


protocol.register(app, out)
supervise.register(app, out)
db.register(app, out)
review.register(app, out)
mcp.register(app, out)
ui.register(app, out)
lifecycle.register(app, out)
history.register(app, out)


def _json_error(message: str, code: int) -> None:
    """Under ``--json`` an error is also a JSON object on stdout, the last line (after any progress events):
    ``{"error": ..., "exit_code": ...}``; stderr keeps its one line for people."""
    import json

    sys.stdout.write(json.dumps({"error": message, "exit_code": int(code)}) + "\n")
    sys.stdout.flush()


def _fail(message: str, code: int, as_json: bool) -> None:
    from safepoint.api import mask_passwords  # a driver's message may quote the store URL

    shown = mask_passwords(" ".join(message.split()))
    if as_json:
        _json_error(shown, code)
    sys.stderr.write(f"safepoint: {shown}\n")
    sys.exit(code)


def _command_name(info: CommandInfo) -> str | None:
    """The name typer gives a registered command (its own, else its function's, as typer.main names it)."""
    return info.name or (get_command_name(info.callback.__name__) if info.callback else None)


def narrowed(args: list[str]) -> typer.Typer:
    """The app that parses ``safepoint ARGS``: for ``safepoint COMMAND ...`` a copy holding that command alone (with
    the root's callback and options), since typer turns every registered command into click's at each start,
    inspecting each signature (37 commands: about 30 ms of CPU on every CLI child, for the one it runs). The whole
    app otherwise: root help and options, a name that is no command (its "Did you mean" lists them all) and shell
    completion (its words come from the environment, not ``args``). Rejected: a click group building commands
    on first lookup (typer's group reads its ``commands`` dict directly for suggestions and help)."""
    name = args[0] if args else ""
    if not name or name.startswith("-") or "_SAFEPOINT_COMPLETE" in os.environ:
        return app
    commands = [c for c in app.registered_commands if _command_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def main() -> None:
    """Usage errors are typer's (exit 2); a SafepointError is one line on stderr, never a traceback. With
    ``--json`` every error (usage errors too) is also a JSON object on stdout."""
    as_json = "--json" in sys.argv[1:]
    parser = narrowed(sys.argv[1:])
    try:
        if not as_json:
            parser(prog_name="safepoint")  # `python -m safepoint` too: its usage and its shell completion say so
        else:
            code = parser(prog_name="safepoint", standalone_mode=False)  # usage errors raise: said as JSON below
            sys.exit(code if isinstance(code, int) else 0)
    except SafepointError as exc:
        _fail(str(exc), exc.exit_code, as_json)
    except OSError as exc:
        # A full disk outside the store (the workspace, a command's capture): one line too, never a traceback.
        if not is_disk_full(exc):
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        _fail(f"no space left on the disk{where}; free space, then resume the run", ExitCode.DISK_FULL, as_json)
    except Exception as exc:
        usage = getattr(exc, "format_message", None)  # click's UsageError and its kin (typer's own click)
        if not as_json or usage is None:
            raise
        _fail(f"{usage()} (see --help)", getattr(exc, "exit_code", ExitCode.USAGE), as_json)
    finally:
        close_opened()
