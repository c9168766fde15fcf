"""An MCP client (the SDK's) talking to a server through ``safepoint mcp-proxy``: every tools/call is ledgered.

    pip install 'safepoint[mcp]'
    python examples/mcp_proxy_client.py WORKSPACE SERVER_COMMAND...
    python examples/mcp_proxy_client.py /tmp/ws python tests/mcp_server.py

The proxy keeps one run, ``mcp-example``, across sessions (``--run``): run the script twice and the second
session's calls are new calls of the same run; ``safepoint ledger mcp-example -w WORKSPACE`` lists them all.
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def main(workspace: str, server: list[str]) -> None:
    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "safepoint", "mcp-proxy", "-w", workspace, "--run", "mcp-example", "--", *server],
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},  # the SDK passes its child only a safe list
    )
    async with Client(proxy) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        notes = os.path.join(os.path.abspath(workspace), "notes.txt")
        result = await client.call_tool("append_line", {"path": notes, "text": "hello"})
        print("append_line:", " ".join(getattr(p, "text", "") for p in result.content))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
