"""``safepoint mcp-proxy`` against a real MCP server (tests/mcp_server.py) and the SDK's own stdio client.

Real processes, because a crash is the point: the proxy is SIGKILLed with a destructive call in flight (the effect
done, its answer not back), or at the engine's fault points; a restarted proxy on the same run must never append
twice. The SDK's server and client check the proxy against the real thing; the recovery matrix, which restarts the
proxy many times, talks raw JSON-RPC to the same tools served without the SDK (``mcp_server.py --raw``: the SDK's
import alone takes seconds). The annotation table and the trust file are checked without processes
(``test_mcp_policy.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

import safepoint  # noqa: E402

SERVER = str(Path(__file__).with_name("mcp_server.py"))
SRC = str(Path(__file__).resolve().parent.parent / "src")


def proxy(ws: Path, *options: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    # The SDK hands its child only a safe list of variables: what the proxy and the server need is passed here.
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "safepoint", "mcp-proxy", "-w", str(ws), *options, "--", sys.executable, SERVER],
        env={"PYTHONPATH": SRC, **(env or {})},
    )


async def _session(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]], mode: str) -> list[Any]:
    out: list[Any] = []
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        for name, args in calls:
            try:
                out.append(await client.call_tool(name, args))
            except MCPError as exc:
                out.append(exc)
    return out


def session(params: StdioServerParameters, *calls: tuple[str, dict[str, Any]], mode: str = "legacy") -> list[Any]:
    return asyncio.run(asyncio.wait_for(_session(params, list(calls), mode), 60))


def text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def ledger(ws: Path, run_id: str) -> dict[str, Any]:
    sp = safepoint.open(None, workspace=str(ws))
    try:
        return {entry.call_id: entry for entry in sp.ledger(run_id)}
    finally:
        sp.close()


def crashed_session(params: StdioServerParameters, call: tuple[str, dict[str, Any]], kill: Any = None) -> None:
    """One call during which the proxy dies (killed by ``kill()`` or by a fault point): the client sees the stream
    drop, however the SDK reports it."""

    async def go() -> None:
        async with Client(params, mode="legacy") as client:
            pending = asyncio.ensure_future(client.call_tool(*call))
            if kill is not None:
                await asyncio.to_thread(kill)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pending, 15)

    with contextlib.suppress(Exception, BaseExceptionGroup):
        asyncio.run(asyncio.wait_for(go(), 60))


def wait_for(path: Path) -> str:
    deadline = time.monotonic() + 30
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text()


class Raw:
    """A client speaking raw JSON-RPC to a proxy in front of the raw server (protocol 2025-11-25)."""

    def __init__(self, ws: Path, *options: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "safepoint", "mcp-proxy", "-w", str(ws), *options, "--"]
        self.proc = subprocess.Popen(
            [*command, sys.executable, SERVER, "--raw"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": SRC, **(env or {})},
        )
        self.ids = itertools.count(1)
        assert "result" in self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request; ``{}`` when the proxy's stream ends first (it died)."""
        request_id = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return dict(message)
        return {}

    def read(self) -> Any:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": args})

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        code = self.proc.wait(60)
        return code, self.proc.stderr.read().decode()


def said(answer: dict[str, Any]) -> str:
    return " ".join(part.get("text", "") for part in answer["result"]["content"])


def test_calls_pass_through_the_ledger_with_their_annotations(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    results = session(
        proxy(ws, "--run", "r"),
        ("append_line", {"path": str(notes), "text": "a"}),
        ("read_lines", {"path": str(notes)}),
        ("fetch", {"url": "https://example.com"}),
        ("set_value", {"path": str(tmp_path / "v"), "text": "1"}),
        ("fail", {"reason": "boom"}),
        ("nope", {}),
        mode="auto",  # the 2026-07-28 protocol: no initialize, every request carries its version
    )
    assert [text(r) for r in results[:4]] == ["appended a", "a\n", "fetched https://example.com", "set 1"]
    assert results[4].is_error and "boom" in text(results[4])  # the server's isError answer, as it gave it
    assert results[5].is_error and "nope" in text(results[5])
    entries = ledger(ws, "r")
    by_tool = {e.tool_name: e for e in entries.values()}
    assert all(call_id.startswith("mcp-") for call_id in entries)
    assert (by_tool["append_line"].idempotency, by_tool["append_line"].replay_policy) == ("non_idempotent", "ask")
    assert by_tool["append_line"].risk_level == "high"
    assert (by_tool["read_lines"].idempotency, by_tool["read_lines"].replay_policy) == ("idempotent", "auto")
    # read-only but open-world: the hint alone does not buy a blind replay
    assert (by_tool["fetch"].idempotency, by_tool["fetch"].replay_policy) == ("conditional", "ask")
    assert (by_tool["set_value"].idempotency, by_tool["set_value"].replay_policy) == ("idempotent", "auto")
    assert by_tool["fail"].status == "failed" and by_tool["nope"].status == "failed"
    assert notes.read_text() == "a\n"


def test_a_proxy_killed_mid_destructive_call_never_appends_twice(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    appended = Path(str(notes) + ".appended")

    def kill() -> None:
        os.kill(int(wait_for(appended)), signal.SIGKILL)  # the server wrote its parent's pid: the proxy
        Path(str(notes) + ".release").write_text("")  # the orphaned server may finish its call now

    crashed_session(
        proxy(ws, "--run", "r", env={"MCP_TEST_HOLD": "1"}),
        ("append_line", {"path": str(notes), "text": "a"}),
        kill,
    )
    assert notes.read_text() == "a\n"
    [call_id] = [c for c, e in ledger(ws, "r").items() if e.tool_name == "append_line"]
    assert ledger(ws, "r")[call_id].status in ("started", "uncertain")

    # Restarted on the same run: the client re-sends the call; it is not sent, and every call waits for the decision.
    again, read = session(
        proxy(ws, "--run", "r"), ("append_line", {"path": str(notes), "text": "a"}), ("read_lines", {"path": "x"})
    )
    for refused in (again, read):
        assert isinstance(refused, MCPError)
        assert call_id in refused.error.message and f"--run r --replay {call_id}" in refused.error.message
        assert refused.error.data == {"run_id": "r", "calls": [call_id]}
    assert notes.read_text() == "a\n"

    # A person says it happened (--skip): the re-sent call is answered with what is known, never sent; a new one is.
    client = Raw(ws, "--run", "r", "--skip", call_id)
    skipped = client.call("append_line", path=str(notes), text="a")
    assert skipped["result"]["isError"] is True and "NOT run again" in said(skipped) and call_id in said(skipped)
    assert said(client.call("append_line", path=str(notes), text="b")) == "appended b"
    assert client.close()[0] == 0
    assert notes.read_text() == "a\nb\n"
    assert [e.status for e in ledger(ws, "r").values()] == ["uncertain", "succeeded"]


def test_an_answer_recorded_but_never_delivered_is_given_from_the_ledger(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", env={"SAFEPOINT_FAILPOINT": "after_outcome:append_line"})
    assert client.call("append_line", path=str(notes), text="a") == {}  # killed: the answer never came
    assert client.close()[0] == -signal.SIGKILL
    assert notes.read_text() == "a\n"
    [entry] = ledger(ws, "r").values()
    assert entry.status == "succeeded"
    client = Raw(ws, "--run", "r")
    again = client.call("append_line", path=str(notes), text="a")  # re-sent: its recorded answer, not run
    assert said(again) == "appended a" and again["result"]["isError"] is False
    assert notes.read_text() == "a\n"
    assert said(client.call("append_line", path=str(notes), text="a")) == "appended a"  # once more: a new call
    assert notes.read_text() == "a\na\n"
    assert client.close()[0] == 0
    assert len(ledger(ws, "r")) == 2


def test_a_call_started_but_never_sent_runs_once_on_replay_and_idempotent_ones_without_asking(tmp_path: Path) -> None:
    ws, notes, value = tmp_path / "ws", tmp_path / "notes.txt", tmp_path / "value.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", env={"SAFEPOINT_FAILPOINT": "after_started:append_line"})
    assert client.call("append_line", path=str(notes), text="a") == {}
    client.close()
    assert not notes.exists()  # killed with `started` durable, before the request was written to the server
    [call_id] = ledger(ws, "r")
    # --replay: the person says send it again; the re-sent call runs, once. Then set_value is cut short in turn.
    client = Raw(ws, "--run", "r", "--replay", call_id, env={"SAFEPOINT_FAILPOINT": "after_started:set_value"})
    assert said(client.call("append_line", path=str(notes), text="a")) == "appended a"
    assert client.call("set_value", path=str(value), text="1") == {}
    client.close()
    assert notes.read_text() == "a\n" and ledger(ws, "r")[call_id].status == "succeeded"
    # idempotent and closed-world: re-sent when the client re-sends it, no decision asked for
    client = Raw(ws, "--run", "r")
    assert said(client.call("set_value", path=str(value), text="1")) == "set 1"
    client.close()
    assert value.read_text() == "1"
    assert notes.read_text() == "a\n"
    assert {e.tool_name: e.status for e in ledger(ws, "r").values()} == {
        "append_line": "succeeded",
        "set_value": "succeeded",
    }


def test_the_trust_file_overrides_the_annotations(tmp_path: Path) -> None:
    ws, notes, trust = tmp_path / "ws", tmp_path / "notes.txt", tmp_path / "trust.toml"
    ws.mkdir()
    trust.write_text('[tools.append_line]\nreplay_policy = "never"\n\n[tools.fetch]\nidempotency = "idempotent"\n')
    client = Raw(ws, "--run", "r", "--trust", str(trust), env={"SAFEPOINT_FAILPOINT": "after_started:append_line"})
    assert client.call("append_line", path=str(notes), text="a") == {}
    client.close()
    [call_id] = ledger(ws, "r")
    assert ledger(ws, "r")[call_id].replay_policy == "never"
    # `never`: no decision is waited for; the re-sent call is answered with what is known and not sent.
    client = Raw(ws, "--run", "r", "--trust", str(trust))
    told = client.call("append_line", path=str(notes), text="a")
    assert told["result"]["isError"] is True and "NOT run again" in said(told) and call_id in said(told)
    assert said(client.call("fetch", url="u")) == "fetched u"
    client.close()
    assert not notes.exists()
    assert {e.tool_name: e.idempotency for e in ledger(ws, "r").values()}["fetch"] == "idempotent"


def test_requests_the_ledger_cannot_take_are_refused_and_the_rest_passes_through(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, env={"SAFEPOINT_STORE": f"file:{ws / '.agent-runtime'}"})
    # A batch holding a tools/call would escape the ledger: each of its requests is refused, nothing runs.
    client.send([{"jsonrpc": "2.0", "id": "b1", "method": "tools/call", "params": {"name": "append_line"}}])
    refused = client.read()
    assert refused["id"] == "b1" and refused["error"]["code"] == -32600
    assert client.request("ping", {})["error"]["code"] == -32601  # the server's own answer, passed through
    assert client.call("append_line", path=str(notes))["result"]["isError"] is True  # the server's validation
    bad = client.request("tools/call", {"name": 7})
    assert bad["error"]["code"] == -32602
    # The server never sees the store's URL (a password may be in it); the rest of the environment it does.
    seen = client.call("read_lines", path="/proc/self/environ")  # the raw server reads its own environment
    assert "SAFEPOINT_STORE" not in said(seen) and "PYTHONPATH" in said(seen)
    code, stderr = client.close()
    assert code == 0 and "run run_" in stderr
    assert not notes.exists()


def test_a_bad_trust_file_or_no_server_command_is_one_line_and_exit_2(tmp_path: Path) -> None:
    trust = tmp_path / "trust.toml"
    trust.write_text('[tools.x]\nidempotency = "non_idempotent"\nreplay_policy = "auto"\n')
    for options in (
        ["--trust", str(trust), "--", "true"],
        ["--"],
        ["--trust", str(tmp_path / "none.toml"), "--", "true"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "safepoint", "mcp-proxy", "-w", str(tmp_path), *options],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": SRC},
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == b"" and len(done.stderr.decode().strip().splitlines()) == 1


def test_a_server_dying_mid_call_leaves_the_call_uncertain_and_the_run_held(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", env={"MCP_TEST_DIE": "1"})
    gone = client.call("append_line", path=str(notes), text="a")
    [call_id] = ledger(ws, "r")
    assert gone["error"]["code"] == -32002 and gone["error"]["data"]["calls"] == [call_id]
    assert "whether it acted is unknown" in gone["error"]["message"]
    assert client.close()[0] == 1  # the proxy ends with its server
    assert ledger(ws, "r")[call_id].status == "started"  # no outcome was made up
    client = Raw(ws, "--run", "r")
    held = client.call("append_line", path=str(notes), text="a")
    assert held["error"]["code"] == -32001 and call_id in held["error"]["message"]
    client.close()
    assert notes.read_text() == "a\n"


def test_with_approval_high_a_destructive_call_waits_for_safepoint_approve(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", "--approval", "high")
    sp = safepoint.open(None, workspace=str(ws))

    def waiting(text: str) -> str:
        client.send({"jsonrpc": "2.0", "id": text, "method": "tools/call", "params": {"name": "append_line",
                     "arguments": {"path": str(notes), "text": text}}})  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            planned = [e.call_id for e in sp.ledger("r") if e.status == "planned" and e.call_id.endswith(f"-{text}")]
            if planned:
                return planned[0]
            assert time.monotonic() < deadline, "the call never waited for approval"
            time.sleep(0.05)

    sp.approve("r", waiting("a"))
    assert said(client.read()) == "appended a"
    sp.deny("r", waiting("b"), reason="not today")
    denied = client.read()
    assert denied["result"]["isError"] is True and "not today" in said(denied)
    client.close()
    sp.close()
    assert notes.read_text() == "a\n"


def test_a_dropped_stream_keeps_the_answer_for_the_restarted_proxy(tmp_path: Path) -> None:
    ws, notes = tmp_path / "ws", tmp_path / "notes.txt"
    ws.mkdir()
    client = Raw(ws, "--run", "r", env={"MCP_TEST_HOLD": "1"})
    client.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "append_line",
                 "arguments": {"path": str(notes), "text": "a"}}})  # fmt: skip
    wait_for(Path(str(notes) + ".appended"))
    assert client.proc.stdin is not None and client.proc.stdout is not None
    client.proc.stdin.close()  # the client goes away with the call in flight
    client.proc.stdout.close()
    Path(str(notes) + ".release").write_text("")
    assert client.proc.wait(60) == 0  # the call finished and was recorded; nobody got its answer
    [entry] = ledger(ws, "r").values()
    assert entry.status == "succeeded"
    client = Raw(ws, "--run", "r")
    assert said(client.call("append_line", path=str(notes), text="a")) == "appended a"  # from the ledger
    client.close()
    assert notes.read_text() == "a\n" and len(ledger(ws, "r")) == 1
