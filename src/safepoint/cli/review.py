"""Looking at runs: ``safepoint diff`` (the agent's changes), ``safepoint approvals`` (what waits for a person) and
``safepoint watch`` (a run followed live, from any terminal), on the library API (imported when a command runs)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from safepoint.cli.common import (
    JsonOpt,
    KeyFileOpt,
    Out,
    StoreOpt,
    TakeoverOpt,
    WorkspaceOpt,
    emit,
    open_safepoint_at,
    plain,
)
from safepoint.cli.plain import visible
from safepoint.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    pass

POLL_SECONDS = 0.5
_DIFF_COLOURS = {"+": "32", "-": "31", "@": "36"}


def _coloured(text: str, on: bool) -> str:
    # A diff's lines end at "\n" only, and what a line holds is shown, never obeyed (rejected: splitlines and raw
    # text, where a "\r" or U+2028 the agent wrote showed as a forged "-" line).
    out = []
    parts = text.split("\n")
    for number, raw in enumerate(parts):
        if number == len(parts) - 1 and not raw:
            break
        line = visible(raw).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
        code = "1" if line.startswith(("+++", "---")) else _DIFF_COLOURS.get(line[:1])
        out.append(f"\x1b[{code}m{line}\x1b[0m\n" if code and on else line + "\n")
    return "".join(out)


def _stat_lines(files: list[dict[str, Any]], width: int) -> str:
    """``git diff --stat``'s shape: path | count +++--- (binary and the rest said in words)."""
    if not files:
        return ""
    name_width = min(max(len(f["path"]) for f in files), max(20, width - 30))
    lines = []
    for f in files:
        path = f["path"] if len(f["path"]) <= name_width else "…" + f["path"][-(name_width - 1) :]
        if f["kind"] == "text":
            total = f["added"] + f["removed"]
            bar_room = max(10, width - name_width - 12)
            scale = min(1.0, bar_room / total) if total else 1.0
            bar = "+" * round(f["added"] * scale) + "-" * round(f["removed"] * scale)
            lines.append(f" {path.ljust(name_width)} | {total:>4} {bar}")
        else:
            what = {"binary": "binary", "too_large": "too large to show", "not_kept": "not kept"}[f["kind"]]
            lines.append(f" {path.ljust(name_width)} | {what}")
    added = sum(f["added"] for f in files)
    removed = sum(f["removed"] for f in files)
    lines.append(f" {len(files)} file(s) changed, {added} insertion(s)(+), {removed} deletion(s)(-)")
    return "\n".join(lines) + "\n"


def register(app: typer.Typer, out: Out) -> None:
    @app.command()
    def diff(
        run_id: Annotated[str, typer.Argument(help="The run whose changes to show.")],
        call: Annotated[
            str | None, typer.Option("--call", help="Only this call's changes (see `safepoint ledger`).")
        ] = None,
        stat: Annotated[bool, typer.Option("--stat", help="Per file: lines added and removed, no diff.")] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The agent's changes as a unified diff (per run, or per call with --call), coloured on a terminal."""
        import shutil

        found = open_safepoint_at(store, workspace, key_file).diff(run_id, call)
        if as_json:
            emit(found, True)
            return
        files = plain(found)["files"]
        scope = f"call {call} of run {run_id}" if call else f"run {run_id}"
        if not files:
            sys.stdout.write(f"no changes by {scope}\n")
            return
        if stat:
            sys.stdout.write(_stat_lines(files, shutil.get_terminal_size((80, 24)).columns))
            return
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        for f in files:
            if f["kind"] == "not_kept":
                sys.stdout.write(f"{f['path']}: changed, but cannot be shown: {f['why']}\n")
            else:
                sys.stdout.write(_coloured(f["diff"], colour))

    @app.command()
    def approvals(
        run_id: Annotated[str | None, typer.Argument(help="Only this run (default: every run of the store).")] = None,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Calls waiting for a person's approval, across runs, with the commands that approve or deny each."""
        import shlex

        from safepoint.api import answer_command

        sp = open_safepoint_at(store, workspace, key_file)
        waiting = sp.approvals(run_id)
        if as_json:
            emit(waiting, True)
            return
        if not waiting:
            sys.stdout.write("no call waits for approval\n")
            return
        here = os.path.abspath(".")
        inside = here == sp.root or here.startswith(sp.root.rstrip(os.sep) + os.sep)
        where = "" if inside else f" -w {shlex.quote(sp.root)}"  # the commands work from where you stand
        for item in plain(waiting):
            item["approve"] = answer_command("approve", item["run_id"], item["call_id"], where)
            item["deny"] = answer_command("deny", item["run_id"], item["call_id"], where)
            who = "a live process waits on it" if item["attended"] else "nobody runs it now: resume continues the wait"
            sys.stdout.write(
                visible(
                    f"{item['run_id']} {item['call_id']}: {item['tool']} {item['target']} ({item['risk_level']} "
                    f"risk, {item['seconds_left']:.0f} s left; {who})\n"
                    f"  approve: {item['approve']}\n  deny:    {item['deny']}\n"
                )
            )

    @app.command()
    def settle(
        run_id: Annotated[str, typer.Argument(help="The run the call belongs to.")],
        call_id: Annotated[str, typer.Argument(help="The uncertain call you checked (see `safepoint explain`).")],
        happened: Annotated[bool, typer.Option("--happened", help="Its effect is there: never run it again.")] = False,
        did_not_happen: Annotated[
            bool,
            typer.Option("--did-not-happen", help="It had no effect: the resume runs it again when its policy allows."),
        ] = False,
        by: Annotated[str, typer.Option("--by", help="Who checked (recorded with the time).")] = "user",
        takeover: TakeoverOpt = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Settle an uncertain call someone checked by hand: --happened or --did-not-happen."""
        if happened == did_not_happen:
            raise ConfigError("choose one of --happened and --did-not-happen")
        settled = open_safepoint_at(store, workspace, key_file).settle(
            run_id, call_id, happened=happened, by=by, takeover=takeover
        )
        emit(settled, as_json)
        if not as_json:
            sys.stdout.write(f"run {run_id}: call {call_id} {settled.outcome}\n")

    @app.command()
    def watch(
        run_id: Annotated[str, typer.Argument(help="The run to follow.")],
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Follow a run live (from any terminal) until it stops, or Ctrl-C (exit 11); exits with the run's code."""
        import time

        from safepoint.cli.common import exit_code_for
        from safepoint.cli.progress import Printer

        follower = open_safepoint_at(store, workspace, key_file).follow(run_id)
        printer = Printer(as_json=as_json)
        try:
            while True:
                for event in follower.poll():
                    printer(event)
                if follower.ended():
                    break
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            sys.stderr.write(f"safepoint: stopped watching run {run_id} (the run itself goes on)\n")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        status = follower.final_status()
        printer.finished(run_id, status)
        raise typer.Exit(exit_code_for(status))
