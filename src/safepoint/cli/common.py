"""What every command shares: the common options, opening a store for a workspace, JSON output."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer

from safepoint.api import Safepoint
from safepoint.api import open as open_safepoint
from safepoint.errors import ConfigError

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="SAFEPOINT_STORE", help="Store URL (default WORKSPACE/.agent-runtime)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="The agent's workspace folder.")]
ToolsOpt = Annotated[
    list[str] | None, typer.Option("--tools", help="Extra tools as MODULE:ATTR (a Tool or a list of them).")
]


def open_safepoint_at(store: str | None, workspace: str) -> Safepoint:
    if not os.path.isdir(workspace):
        raise ConfigError(f"workspace {workspace!r} does not exist; create it or pass an existing --workspace")
    return open_safepoint(store, workspace=workspace)


def emit(data: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
