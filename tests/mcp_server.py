"""A tiny MCP server for the proxy's tests (mcp 2's ``MCPServer``, over stdio).

``--raw``: the same tools served by a few lines of JSON-RPC instead of the SDK (whose import alone takes seconds
on a loaded machine), for the tests that restart the proxy many times; the SDK serves the tests that check the
proxy against the real thing.

``append_line`` is destructive and not idempotent: it appends to a file, so a test counts its effects. With
``MCP_TEST_DIE`` set the server exits right after appending; with ``MCP_TEST_HOLD`` set it writes
``PATH.appended`` (holding its parent's pid: the proxy) after appending and waits for ``PATH.release`` (up to a
minute): the moment a test kills the proxy, the effect done and its answer not yet back.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def serve_raw() -> None:
    """The tools below, over newline-delimited JSON-RPC (protocol 2025-11-25), without the SDK."""
    closed = {"openWorldHint": False}
    tools: dict[str, tuple[Any, dict[str, Any] | None]] = {
        "append_line": (append_line, {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}),
        "read_lines": (read_lines, {"readOnlyHint": True, **closed}),
        "set_value": (set_value, {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, **closed}),
        "fetch": (fetch, {"readOnlyHint": True}),
        "fail": (fail, None),
    }
    for line in sys.stdin:
        request = json.loads(line)
        method, request_id = request.get("method"), request.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "0"},
            }
        elif method == "tools/list":
            listed = [{"name": n, "inputSchema": {"type": "object"}, "annotations": a} for n, (_, a) in tools.items()]
            result = {"tools": [{k: v for k, v in t.items() if v is not None} for t in listed]}
        elif method == "tools/call":
            name, args = request["params"]["name"], request["params"].get("arguments", {})
            try:
                result = {"content": [{"type": "text", "text": tools[name][0](**args)}], "isError": False}
            except Exception as exc:
                result = {"content": [{"type": "text", "text": f"{type(exc).__name__}: {exc}"}], "isError": True}
        else:
            reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}), flush=True)


def append_line(path: str, text: str) -> str:
    """Append one line to a file."""
    with open(path, "a") as f:
        f.write(text + "\n")
    if os.environ.get("MCP_TEST_DIE"):
        os._exit(3)  # the server dies with the effect done and no answer sent
    if os.environ.get("MCP_TEST_HOLD"):
        Path(path + ".appended").write_text(str(os.getppid()))  # the proxy: the process a test kills
        deadline = time.monotonic() + 60
        while not os.path.exists(path + ".release") and time.monotonic() < deadline:
            time.sleep(0.02)
    return f"appended {text}"


def read_lines(path: str) -> str:
    """Read a file."""
    return Path(path).read_text() if os.path.exists(path) else ""


def set_value(path: str, text: str) -> str:
    """Write a file whole (the same call twice leaves the same file)."""
    Path(path).write_text(text)
    return f"set {text}"


def fetch(url: str) -> str:
    """Claims to only read, but reaches the world (open-world by default)."""
    return f"fetched {url}"


def fail(reason: str) -> str:
    """Always raises: the server reports isError."""
    raise RuntimeError(reason)


def serve_sdk() -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    def failing(reason: str) -> str:
        """Always fails: the server reports isError."""
        raise ToolError(reason)

    server = MCPServer("safepoint-test")
    closed = {"open_world_hint": False}
    server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False))(
        append_line
    )
    server.tool(annotations=ToolAnnotations(read_only_hint=True, **closed))(read_lines)
    server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, **closed)
    )(set_value)
    server.tool(annotations=ToolAnnotations(read_only_hint=True))(fetch)
    server.tool(name="fail")(failing)
    server.run()


if __name__ == "__main__":
    serve_raw() if "--raw" in sys.argv else serve_sdk()
