"""What every command shares: the common options, opening a store for a workspace, JSON output, exit codes.

Nothing here imports the library at module level: ``safepoint --help`` must not pay for the engine.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from safepoint.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from safepoint.api import Safepoint

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="SAFEPOINT_STORE", help="Store URL (default WORKSPACE/.agent-runtime)."),
]
KeyFileOpt = Annotated[
    str | None,
    typer.Option(
        "--key-file",
        help="A file holding the store's key (32 bytes: hex, base64 or raw): it encrypts a new store and opens an "
        "encrypted one. Default: SAFEPOINT_KEY_FILE, else SAFEPOINT_KEY.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
WorkspaceOpt = Annotated[str, typer.Option("--workspace", "-w", help="The agent's workspace folder.")]
ToolsOpt = Annotated[
    list[str] | None, typer.Option("--tools", help="Extra tools as MODULE:ATTR (a Tool or a list of them).")
]
TakeoverOpt = Annotated[bool, typer.Option("--takeover", help="Fence off a live owner first.")]

# How a run that ended tells its exit code (the codes themselves are ExitCode's, in errors.py).
_STATUS_EXIT = {
    "completed": ExitCode.OK,
    "waiting_decision": ExitCode.WAITING_DECISION,
    "closed": ExitCode.CLOSED,
    "cancelled": ExitCode.CANCELLED,
    "interrupted": ExitCode.INTERRUPTED,
}


class Out:
    """The terminal: rich's Console, made at the first print (``--help`` never loads it)."""

    def __init__(self) -> None:
        self._console: Console | None = None

    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console()
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        self.console().print(*objects, **options)


def exit_code_for(status: str) -> ExitCode:
    return _STATUS_EXIT.get(status, ExitCode.FAILED)


_opened: list[Safepoint] = []  # closed when the command ends (a PostgreSQL pool's threads, a file handle)


def open_safepoint_at(store: str | None, workspace: str, key_file: str | None = None) -> Safepoint:
    """``key_file``: ``--key-file``; without it the library reads SAFEPOINT_KEY_FILE or SAFEPOINT_KEY."""
    if not os.path.isdir(workspace):
        raise ConfigError(f"workspace {workspace!r} does not exist; create it or pass an existing --workspace")
    from safepoint.api import find_workspace
    from safepoint.api import open as open_safepoint

    if workspace == "." and store is None:  # no --workspace: the one this folder is in, found as git finds its repo
        workspace = find_workspace(".") or "."

    opened = open_safepoint(store, workspace=workspace, key_file=key_file)
    _opened.append(opened)
    return opened


def close_opened() -> None:
    while _opened:
        _opened.pop().close()


def plain(value: Any) -> Any:
    """A typed result as the plain data ``--json`` prints and the renderings read (every field, defaults too)."""
    from safepoint.records import to_plain

    return to_plain(value)


def emit(data: Any, as_json: bool) -> None:
    if as_json:
        import json

        sys.stdout.write(json.dumps(masked(plain(data)), indent=2) + "\n")


def masked(value: Any) -> Any:
    """Plain data with the passwords of each string masked (``--json`` shows none, whatever field quotes one).
    Each string on its own: masking the encoded JSON text let a quote opened in one string close in a later one
    and swallow every item between (rejected: the regex over ``json.dumps``'s output)."""
    from safepoint.api import mask_passwords

    if isinstance(value, str):
        return mask_passwords(value)
    if isinstance(value, dict):
        return {masked(str(key)): masked(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return mask_passwords(str(value))  # what json.dumps(default=str) printed, masked too


def write_through(chunk: str) -> None:
    """Streamed model text, shown as it arrives."""
    sys.stdout.write(chunk)
    sys.stdout.flush()
