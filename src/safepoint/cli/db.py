"""Database commands: ``safepoint db migrate``."""

from __future__ import annotations

import typer

from safepoint.cli.common import JsonOpt, Out, StoreOpt, WorkspaceOpt, emit


def register(app: typer.Typer, out: Out) -> None:
    db = typer.Typer(no_args_is_help=True, help="The store's database: its schema version.")

    @db.command()
    def migrate(store: StoreOpt = None, workspace: WorkspaceOpt = ".", as_json: JsonOpt = False) -> None:
        """Bring a PostgreSQL store's schema to this safepoint's version (a no-op when it is there already).

        Opening a store sets up a fresh database but never upgrades one in use: run this once all its users upgraded.
        """
        from safepoint.api import migrate as migrate_store

        done = migrate_store(store, workspace=workspace)
        emit(done, as_json)
        if as_json:
            return
        if done.after is None:
            out.print(f"store {done.store}: the file store has no schema version; nothing to migrate")
        elif not done.applied:
            out.print(f"store {done.store}: schema at version {done.after}, nothing to migrate")
        else:
            out.print(f"store {done.store}: schema version {done.before} -> {done.after}")
            for line in done.applied:
                out.print(f"  applied {line}")

    app.add_typer(db, name="db")
