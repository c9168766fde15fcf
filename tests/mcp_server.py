"""A tiny MCP server for the proxy's tests (mcp 2's ``MCPServer``, over stdio).

``append_line`` is destructive and not idempotent: it appends to a file, so a test counts its effects. With
``MCP_TEST_HOLD`` set it writes ``PATH.appended`` after appending and waits for ``PATH.release`` (up to a minute):
the moment a test kills the proxy, the effect done and its answer not yet back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("safepoint-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))
def append_line(path: str, text: str) -> str:
    """Append one line to a file."""
    with open(path, "a") as f:
        f.write(text + "\n")
    if os.environ.get("MCP_TEST_HOLD"):
        Path(path + ".appended").write_text(str(os.getppid()))  # the proxy: the process a test kills
        deadline = time.monotonic() + 60
        while not os.path.exists(path + ".release") and time.monotonic() < deadline:
            time.sleep(0.02)
    return f"appended {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def read_lines(path: str) -> str:
    """Read a file."""
    return Path(path).read_text() if os.path.exists(path) else ""


@server.tool(
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
)
def set_value(path: str, text: str) -> str:
    """Write a file whole (the same call twice leaves the same file)."""
    Path(path).write_text(text)
    return f"set {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fetch(url: str) -> str:
    """Claims to only read, but reaches the world (open-world by default)."""
    return f"fetched {url}"


@server.tool()
def fail(reason: str) -> str:
    """Always raises: the server reports isError."""
    raise ToolError(reason)


if __name__ == "__main__":
    server.run()
