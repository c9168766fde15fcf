"""``safepoint ui``: the review page (``safepoint.ui``, the ``ui`` extra), imported only when the command runs so
that every other command starts as fast as before."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer

from safepoint.cli.common import KeyFileOpt, Out, StoreOpt, WorkspaceOpt, open_safepoint_at
from safepoint.errors import ConfigError


def register(app: typer.Typer, out: Out) -> None:
    @app.command()
    def ui(
        port: Annotated[int, typer.Option("--port", help="The port to listen on (0: a free one).")] = 8780,
        host: Annotated[
            str, typer.Option("--host", help="A loopback address to listen on (127.0.0.1, ::1, localhost); no other.")
        ] = "127.0.0.1",
        workspace: WorkspaceOpt = ".",
        store: StoreOpt = None,
        key_file: KeyFileOpt = None,
    ) -> None:
        """A local review page: runs, a run's timeline and diffs, conflicts and approvals (loopback only)."""
        try:  # the ui extra, asked for here: a missing part is one line, not a traceback when the page starts
            import jinja2  # noqa: F401
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as exc:
            raise ConfigError(
                f"safepoint ui needs the ui extra ({exc.name} is missing): pip install 'safepoint[ui]'"
            ) from None
        from safepoint.ui.serve import loopback, serve

        loopback(host)  # refused before the store is opened
        sp = open_safepoint_at(store, workspace, key_file)

        def say(line: str) -> None:
            sys.stdout.write(f"{line}\n  open it in your browser (it carries this server's token); Ctrl-C stops\n")
            sys.stdout.flush()

        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a person closes the page's server
            serve(sp, host=host, port=port, say=say)
