"""Database commands: ``safepoint db migrate``."""

from __future__ import annotations

import typer
from rich.console import Console

from safepoint.cli.common import JsonOpt, StoreOpt, WorkspaceOpt, emit
from safepoint.store.names import safe_url
from safepoint.store.url import default_store_url, migrate_store


def register(app: typer.Typer, out: Console) -> None:
    db = typer.Typer(no_args_is_help=True, help="The store's database: its schema version.")

    @db.command()
    def migrate(store: StoreOpt = None, workspace: WorkspaceOpt = ".", as_json: JsonOpt = False) -> None:
        """Bring a PostgreSQL store's schema to this safepoint's version (a no-op when it is there already).

        Opening a store sets up a fresh database but never upgrades one in use: run this once all its users upgraded.
        """
        url = store or default_store_url(workspace)
        shown = safe_url(url)
        change = migrate_store(url)
        if change is None:
            emit({"store": shown, "migrated": False, "applied": []}, as_json)
            if not as_json:
                out.print(f"store {shown}: the file store has no schema version; nothing to migrate")
            return
        data = {"store": shown, "migrated": bool(change.applied), "before": change.before, "after": change.after}
        emit(data | {"applied": change.applied}, as_json)
        if as_json:
            return
        if not change.applied:
            out.print(f"store {shown}: schema at version {change.after}, nothing to migrate")
            return
        out.print(f"store {shown}: schema version {change.before} -> {change.after}")
        for line in change.applied:
            out.print(f"  applied {line}")

    app.add_typer(db, name="db")
