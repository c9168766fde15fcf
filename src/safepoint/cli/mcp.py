"""``safepoint mcp-proxy -- SERVER COMMAND...``: an MCP server behind the tool ledger (stdout is the protocol's)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from safepoint.cli.common import Out, StoreOpt, WorkspaceOpt, open_safepoint_at
from safepoint.errors import ConfigError


def register(app: typer.Typer, out: Out) -> None:
    @app.command("mcp-proxy")
    def mcp_proxy(
        command: Annotated[list[str] | None, typer.Argument(help="The MCP server's command, after --.")] = None,
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        trust: Annotated[
            str | None, typer.Option("--trust", help="A TOML file of [tools.NAME] policies that override annotations.")
        ] = None,
        run: Annotated[str | None, typer.Option("--run", help="Continue this run (or start it under this id).")] = None,
        approval: Annotated[
            str, typer.Option("--approval", help="'high': high-risk calls wait for `safepoint approve` (new runs).")
        ] = "none",
        replay: Annotated[list[str] | None, typer.Option("--replay", help="Send this uncertain call again.")] = None,
        skip: Annotated[list[str] | None, typer.Option("--skip", help="Do not send this uncertain call again.")] = None,
    ) -> None:
        """Front an MCP server over stdio; every tools/call goes through one run's ledger.

        The tools' annotations decide how an interrupted call is treated, a --trust file overrides them. After a
        crash, `--run ID` continues the run: an answer the client never got is given from the ledger, and an
        uncertain destructive call is never sent again without --replay.
        """
        if not command:
            raise ConfigError("mcp-proxy: give the server's command after --, e.g. `safepoint mcp-proxy -- my-server`")
        if approval not in ("none", "high"):
            raise ConfigError(f"--approval {approval!r}: say 'none' or 'high'")
        sp = open_safepoint_at(store, workspace)
        mode: Literal["none", "high"] = "high" if approval == "high" else "none"
        code = sp.mcp_proxy(command, run_id=run, trust=trust, approval=mode, replay=replay or (), skip=skip or ())
        raise typer.Exit(code)
