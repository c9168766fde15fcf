"""The store's lifecycle commands: ``safepoint gc``, ``safepoint label``, ``safepoint forget``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from safepoint.cli.common import JsonOpt, KeyFileOpt, Out, StoreOpt, WorkspaceOpt, emit, open_safepoint_at
from safepoint.cli.plain import visible
from safepoint.errors import ExitCode


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


class _Bar:
    """A one-line progress bar on a terminal's stderr (nothing when it is not one, or under --json)."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown and sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.shown or total < 20:
            return
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\rreading runs [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def register(app: typer.Typer, out: Out) -> None:
    @app.command()
    def gc(
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be freed; remove nothing.")] = False,
        keep: Annotated[
            int, typer.Option("--keep", min=0, help="Step-boundary checkpoints kept per finished run (newest).")
        ] = 3,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Free the blobs no kept checkpoint needs: unfinished, live and labelled runs' needs are kept."""
        from safepoint.api import gc as collect

        opened = open_safepoint_at(store, workspace, key_file)
        done = collect(opened.store, keep=keep, dry_run=dry_run, progress=_Bar(not as_json))
        if as_json:
            emit(done, True)
        else:
            verb = "would free" if dry_run else "freed"
            lines = [
                f"store {done.store}: {verb} {done.freed_blobs} blobs ({_size(done.freed_bytes)}, "
                f"{done.orphan_blobs} referenced by no run); kept {done.kept_blobs} ({_size(done.kept_bytes)})"
            ]
            lines += [
                f"  {run.run_id}: {run.freed_blobs} blobs; {len(run.pruned_checkpoints)} older checkpoints no longer "
                f"reachable by rollback, {run.kept_checkpoints} kept"
                for run in done.runs
                if run.freed_blobs
            ]
            if done.refused:
                lines.append(f"{'not all' if done.freed_blobs else 'nothing'} removed: {done.refused}")
            sys.stdout.write(visible("\n".join(lines)) + "\n")
        raise typer.Exit(ExitCode.DAMAGED if done.refused else ExitCode.OK)

    @app.command()
    def label(
        run_id: Annotated[str, typer.Argument(help="The run (see `safepoint status`).")],
        checkpoint: Annotated[str, typer.Argument(help="A checkpoint id, or step:N (see `safepoint checkpoints`).")],
        name: Annotated[str, typer.Argument(help="The label (one line).")],
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Label a checkpoint: gc keeps it and what a rollback to it needs. The run need not be stopped."""
        from safepoint.api import label as add_label

        done = add_label(open_safepoint_at(store, workspace, key_file).store, run_id, checkpoint, name)
        emit(done, as_json)
        if not as_json:
            sys.stdout.write(visible(f"run {run_id}: {done.checkpoint_id} labelled {done.name!r}") + "\n")

    @app.command()
    def forget(
        run_id: Annotated[str, typer.Argument(help="The run to delete (see `safepoint status`).")],
        force: Annotated[
            bool,
            typer.Option(
                "--force",
                help="Even while a live process owns it (that process is fenced off), or an unfinished parent "
                "answers for it (the parent's resume then takes what it did as unknown).",
            ),
        ] = False,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Delete a run and the blobs no other run references (nothing of it is kept)."""
        from safepoint.api import forget as forget_run

        done = forget_run(open_safepoint_at(store, workspace, key_file).store, run_id, force=force)
        emit(done, as_json)
        if not as_json:
            sys.stdout.write(
                f"run {visible(run_id)}: forgotten; freed {done.freed_blobs} blobs ({_size(done.freed_bytes)})"
                + (f"; {visible(done.left)}" if done.left else "")
                + "\n"
            )
