"""``safepoint mcp-proxy -- SERVER COMMAND...``: a stdio proxy that puts every MCP ``tools/call`` through the ledger.

The proxy starts the server as its child and speaks MCP to the client on its own stdin/stdout. Everything but a
``tools/call`` request passes through byte for byte, both ways (``initialize``/``server/discover``, listings,
notifications, the server's own requests such as sampling and elicitation); ``tools/list`` results are read on the
way to learn each tool's annotations (``mcp_policy`` maps them, a trust file overrides them). A ``tools/call``
becomes one ``Run.acall`` of a tool that forwards it, under the proxy's own request id, so:

- ``started`` is durable before the request is written to the server (the engine commits it before the tool runs);
- the server's answer is recorded before it is written to the client, which gets it under its own request id;
- an answer the client never got (the proxy died after recording it, or the client's stream dropped) is kept: a
  restarted proxy on the same run (``--run ID``) answers the same call, re-sent, from the ledger;
- a call in flight when the proxy died is uncertain. Whether it is sent again is its policy's: ``auto`` re-sends
  it when the client re-sends it; ``ask`` holds the whole run (every ``tools/call`` gets a JSON-RPC error naming
  the call and the command that settles it, ``--replay CALL``/``--skip CALL``); ``never`` answers with a notice.

Call ids: ``mcp-<order>-<JSON-RPC id>``. JSON-RPC ids restart at 1 on every connection, so the order (one more
than the run's last) keeps a restart from colliding with an earlier session's calls. A call re-sent after a restart
carries a new JSON-RPC id: it is recognised by its tool and arguments among the earlier calls never answered, the
oldest first (rejected: requiring a ``_meta`` key from the client, which no MCP client sends). A call is marked
answered by a history record staged when the answer is written; it becomes durable with the next commit, so a
crash can lose the last marks: such a call then counts as unanswered, and an identical call right after the restart
gets its recorded answer instead of a second run (at most once, never twice).

The protocol is spoken as raw newline-delimited JSON-RPC (rejected: the ``mcp`` SDK, whose 1.x and 2.x differ, and
which would make safepoint's base install depend on one of them). JSON-RPC batches holding a ``tools/call`` are
refused (batches left the specification in 2025-06-18; a call inside one would escape the ledger). A result with
``resultType: "input_required"`` is not the tool's completion: it is recorded as a failed round, and the client's
follow-up request is a call of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shlex
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec

from safepoint.core.environment import STORE_VARIABLES
from safepoint.core.hashing import input_hash
from safepoint.engine.call_runner import CallResult
from safepoint.engine.tools import ToolContext, tool
from safepoint.errors import DecisionNeeded, ExitCode, Interrupted, SafepointError, ToolFailure
from safepoint.integrations.mcp_policy import TrustFile, classify
from safepoint.run import Run

LINE_LIMIT = 256 * 1024 * 1024  # one JSON-RPC message per line: a tool's result may be large
ANSWERED = "[mcp-proxy] answered "  # the history record that says the client got a call's answer
CALL_ID = re.compile(r"^mcp-(\d+)-")
WAITING_DECISION = -32001  # JSON-RPC server-error range: the run waits for a person's decision
SERVER_GONE = -32002  # the server exited with the call in flight: its outcome is unknown
REFUSED = -32003  # safepoint refused the call (a bad request, a stale run)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Blocked:
    """The run waits for a person's decision on ``calls``: no call goes through until it is settled."""

    run_id: str
    why: str
    calls: tuple[str, ...]
    skip_only: tuple[str, ...] = ()  # calls that cannot run again (``DecisionNeeded.choices``): --replay is refused


Opener = Callable[[], "Run | Blocked"]


class ServerGone(Exception):
    """The server's stdout closed with requests in flight."""


def call_id_text(request_id: Any) -> str:
    """A JSON-RPC id as a call id's tail: ids are ints or strings of any shape; only a safe, short form is kept."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", str(request_id))[:40] or "_"


def settle_hint(blocked: Blocked, command: list[str]) -> str:
    """What the client and the terminal are told while the run waits: the call, and the two commands that settle
    it, written out whole (the engine's own wording speaks of ``resume``, which a proxy's run is not)."""
    server = shlex.join(command)
    first = blocked.calls[0] if blocked.calls else "CALL_ID"
    proxy = f"safepoint mcp-proxy --run {shlex.quote(blocked.run_id)}"
    waiting = blocked.why.split(": resume with", 1)[0]
    again = f"`{proxy} --replay {first} -- {server}` to send it again, or " if first not in blocked.skip_only else ""
    return (
        f"{waiting}; it may have taken effect. Restart the proxy (with the same options) as "
        f"{again}`{proxy} --skip {first} -- {server}` to leave it (see `safepoint explain {blocked.run_id}`)"
    )


class Proxy:
    def __init__(self, opened: Run | Blocked, trust: TrustFile, command: list[str], out: BinaryIO) -> None:
        self.run = opened if isinstance(opened, Run) else None
        self.blocked = opened if isinstance(opened, Blocked) else None
        self.trust = trust
        self.command = command
        self.out = out
        self.token = uuid.uuid4().hex[:8]  # the proxy's own request ids never equal a client's
        self.ids = itertools.count(1)
        self.annotations: dict[str, Any] = {}  # tool name -> annotations, as last listed by the server
        self.waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}  # the proxy's request id -> its answer
        self.client_lists: set[bytes] = set()  # ids of the client's tools/list requests in flight
        self.client_calls: dict[bytes, str] = {}  # a client's tools/call id in flight -> its call id
        self.forwarded: dict[str, str] = {}  # call id -> the proxy's id the server knows it by
        self.params: dict[str, dict[str, Any]] = {}  # call id -> the request's params (its _meta rides along)
        self.tasks: set[asyncio.Task[None]] = set()
        self.client_gone = False
        self.cut_short = False  # a call was in flight when the server exited: the step is not complete
        self.child: asyncio.subprocess.Process | None = None
        self.order, self.unanswered = self._earlier_calls()

    # the run's earlier sessions ----------------------------------------------------------------------------------
    def _earlier_calls(self) -> tuple[int, dict[tuple[str, str], list[str]]]:
        """The next call's order, and the earlier calls whose answer the client never got, by tool and input."""
        if self.run is None:
            return 1, {}
        session = self.run.session
        answered = {
            m.content[len(ANSWERED) :] for m in session.history if m.role == "system" and m.content.startswith(ANSWERED)
        }
        last = 0
        waiting: dict[tuple[str, str], list[str]] = {}
        found: list[tuple[int, str, tuple[str, str]]] = []
        for entry in session.ledger.values():
            match = CALL_ID.match(entry.call_id)
            if match is None:
                continue
            order = int(match.group(1))
            last = max(last, order)
            if entry.call_id not in answered:
                found.append((order, entry.call_id, (entry.tool_name, entry.input_hash)))
        for _, call_id, key in sorted(found):
            waiting.setdefault(key, []).append(call_id)
        return last + 1, waiting

    def call_id_for(self, name: str, args: dict[str, Any], request_id: Any) -> str:
        earlier = self.unanswered.get((name, input_hash(args)))
        if earlier:
            return earlier.pop(0)  # re-sent after a restart: its recorded answer, or its policy's decision
        order, self.order = self.order, self.order + 1
        return f"mcp-{order}-{call_id_text(request_id)}"

    # the two streams ---------------------------------------------------------------------------------------------
    def to_client(self, data: bytes) -> bool:
        if self.client_gone:
            return False
        try:
            self.out.write(data if data.endswith(b"\n") else data + b"\n")
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.client_gone = True  # a dropped stream: answers from now on are kept for a restarted proxy
            return False
        return True

    def to_server(self, data: bytes) -> None:
        child = self.child
        if child is None or child.stdin is None or child.stdin.is_closing():
            return
        child.stdin.write(data if data.endswith(b"\n") else data + b"\n")

    def reply_error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.to_client(_encoder.encode({"jsonrpc": "2.0", "id": request_id, "error": error}))

    def from_client(self, line: bytes) -> None:
        message = _decode(line)
        if isinstance(message, list):
            if any(isinstance(m, dict) and m.get("method") == "tools/call" for m in message):
                for m in message:
                    if isinstance(m, dict) and "id" in m and "method" in m:
                        self.reply_error(m["id"], -32600, "safepoint mcp-proxy: send tools/call requests one by one")
                return
        elif isinstance(message, dict):
            method = message.get("method")
            if method == "tools/call" and "id" in message:
                task = asyncio.create_task(self.handle_call(message))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                return
            if method == "tools/list" and "id" in message:
                self.client_lists.add(_encoder.encode(message["id"]))
            elif method == "notifications/cancelled" and isinstance(message.get("params"), dict):
                params = message["params"]
                call_id = self.client_calls.get(_encoder.encode(params.get("requestId")))
                forwarded = self.forwarded.get(call_id) if call_id is not None else None
                if forwarded is not None:  # the server knows the call by the proxy's id
                    params = {**params, "requestId": forwarded}
                    line = _encoder.encode({**message, "params": params})
        self.to_server(line)

    def from_server(self, line: bytes) -> None:
        message = _decode(line)
        if isinstance(message, dict) and "method" not in message and "id" in message:
            request_id = message["id"]
            if isinstance(request_id, str) and request_id in self.waiters:
                waiter = self.waiters.pop(request_id)
                if not waiter.done():
                    waiter.set_result(message)
                return
            key = _encoder.encode(request_id)
            if key in self.client_lists:
                self.client_lists.discard(key)
                self.learn(message.get("result"))
        self.to_client(line)

    def learn(self, result: Any) -> None:
        """Keep the annotations of the tools a ``tools/list`` result names."""
        tools = result.get("tools") if isinstance(result, dict) else None
        for item in tools if isinstance(tools, list) else ():
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                self.annotations[item["name"]] = item.get("annotations")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request of the proxy's own to the server and wait for its answer."""
        request_id = f"safepoint-{self.token}-{next(self.ids)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = waiter
        self.to_server(_encoder.encode({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
        return await waiter

    # one tools/call ----------------------------------------------------------------------------------------------
    async def handle_call(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        name, args = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(args, dict):
            self.reply_error(request_id, -32602, "tools/call needs params.name (a string) and params.arguments")
            return
        if self.blocked is not None or self.run is None:
            assert self.blocked is not None
            data = {"run_id": self.blocked.run_id, "calls": list(self.blocked.calls)}
            self.reply_error(request_id, WAITING_DECISION, settle_hint(self.blocked, self.command), data)
            return
        await self.register(name, params)
        call_id = self.call_id_for(name, args, request_id)
        self.params[call_id] = params
        key = _encoder.encode(request_id)
        self.client_calls[key] = call_id
        try:
            result = await self.run.acall_result(name, args, call_id=call_id)
        except DecisionNeeded as exc:
            data = {"run_id": self.run.run_id, "calls": [call_id]}
            self.reply_error(request_id, WAITING_DECISION, f"{exc}; restart the proxy with --replay or --skip", data)
            return
        except Interrupted as exc:
            self.cut_short = True
            self.reply_error(request_id, SERVER_GONE, str(exc), {"run_id": self.run.run_id, "calls": [call_id]})
            return
        except SafepointError as exc:
            self.reply_error(request_id, REFUSED, f"safepoint: {exc}", {"run_id": self.run.run_id})
            return
        except Exception as exc:  # never a request left unanswered (a full disk, a bug): the client hears of it
            sys.stderr.write(f"safepoint mcp-proxy: {call_id}: {type(exc).__name__}: {exc}\n")
            self.reply_error(request_id, -32603, f"safepoint: {type(exc).__name__}: {exc}", {"calls": [call_id]})
            return
        finally:
            self.params.pop(call_id, None)
            self.forwarded.pop(call_id, None)
            self.client_calls.pop(key, None)
        if self.to_client(_encoder.encode({"jsonrpc": "2.0", "id": request_id, **answer(result)})):
            self.run.add_message("system", ANSWERED + call_id)  # durable with the next commit

    async def register(self, name: str, params: dict[str, Any]) -> None:
        """The run's tool for ``name``, classified by its annotations (listed first when the proxy has not seen
        them: a client may call a tool it never listed) and the trust file."""
        assert self.run is not None
        if name not in self.annotations:
            await self.list_tools(params)
        found = classify(name, self.annotations.get(name), self.trust)

        async def forward(ctx: ToolContext, /, **arguments: Any) -> Any:
            return await self.forward(name, arguments, ctx.call_id)

        made = tool(
            name=name,
            idempotency=found.idempotency,
            replay_policy=found.replay_policy,
            risk_level=found.risk_level,
            side_effects=("mcp",),
            description=f"MCP tool {name} ({'; '.join(found.reasons)})",
        )(forward)
        registry = self.run.session.registry
        current = registry.get(name) if name in registry else None
        if current is None or current.definition != made.definition:
            registry.put(made)

    async def list_tools(self, params: dict[str, Any]) -> None:
        # The call's protocol metadata goes along (the 2026-07-28 protocol has no session: every request says its
        # version); a progress token does not (it belongs to the call).
        meta = params.get("_meta")
        shared = (
            {k: v for k, v in meta.items() if k.startswith("io.modelcontextprotocol/")}
            if isinstance(meta, dict)
            else {}
        )
        cursor: Any = None
        for _ in range(100):  # a server paging forever must not hold the call forever
            ask: dict[str, Any] = {"_meta": shared} if shared else {}
            if cursor is not None:
                ask["cursor"] = cursor
            try:
                reply = await self.request("tools/list", ask)
            except ServerGone:
                return
            result = reply.get("result")
            self.learn(result)
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if not cursor:
                return

    async def forward(self, name: str, arguments: dict[str, Any], call_id: str) -> Any:
        """The tool the ledger runs: the call, sent to the server under the proxy's id (``started`` is durable)."""
        params = {**self.params.get(call_id, {}), "name": name, "arguments": arguments}
        request_id = f"safepoint-{self.token}-{next(self.ids)}"
        self.forwarded[call_id] = request_id
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = waiter
        self.to_server(_encoder.encode({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}))
        try:
            reply = await waiter
        except ServerGone:
            # No outcome is recorded: the call stays `started`, uncertain for the next proxy on this run.
            raise Interrupted(
                f"the MCP server exited while {name} ({call_id}) was in flight; whether it acted is unknown. "
                "Restart the proxy with --run to settle it"
            ) from None
        if "error" in reply:
            raise ToolFailure(_encoder.encode({"error": reply["error"]}).decode())
        result = reply.get("result")
        if not isinstance(result, dict):
            raise ToolFailure(_encoder.encode({"error": {"code": -32603, "message": "malformed result"}}).decode())
        if result.get("isError") is True or result.get("resultType") == "input_required":
            raise ToolFailure(_encoder.encode({"result": result}).decode())
        return result

    def commit(self) -> None:
        if self.run is not None:
            with self.run.session.runner.bookkeeper.lock:  # never inside a call's piece on the bookkeeping thread
                self.run.session.commit()

    # the session -------------------------------------------------------------------------------------------------
    async def pump_server(self) -> None:
        assert self.child is not None and self.child.stdout is not None
        while True:
            try:
                line = await self.child.stdout.readline()
            except ValueError:  # a line over LINE_LIMIT: the stream cannot be framed any more
                sys.stderr.write("safepoint mcp-proxy: the server sent a line over 256 MiB; stopping\n")
                break
            if not line:
                break
            self.from_server(line)
        for waiter in self.waiters.values():
            if not waiter.done():
                waiter.set_exception(ServerGone())
        self.waiters.clear()

    async def serve(self, stdin: BinaryIO) -> int:
        loop = asyncio.get_running_loop()
        try:
            # The server gets the proxy's environment (it was configured with its own keys), less the store's URL:
            # the store is safepoint's, not the server's (rejected: the agent commands' filtered environment, which
            # would withhold the very API keys an MCP server is started with).
            env = {k: v for k, v in os.environ.items() if k not in STORE_VARIABLES}
            self.child = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT, env=env
            )
        except OSError as exc:
            sys.stderr.write(f"safepoint mcp-proxy: cannot start the server {self.command[0]!r}: {exc}\n")
            return ExitCode.USAGE
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()

        def read_client() -> None:
            # A thread (stdin may be a terminal or a file, not only a pipe) reading the raw descriptor: a daemon
            # thread blocked in a buffered reader aborts the interpreter's exit when the server ends first.
            pending: list[bytes] = []  # the line so far, in pieces: a long line is joined once (linear)
            try:
                while chunk := os.read(stdin.fileno(), 1 << 16):
                    *whole, rest = chunk.split(b"\n")
                    for piece in whole:
                        loop.call_soon_threadsafe(lines.put_nowait, b"".join([*pending, piece, b"\n"]))
                        pending = []
                    if rest:
                        pending.append(rest)
                if pending:
                    loop.call_soon_threadsafe(lines.put_nowait, b"".join(pending))
            except OSError:
                pass  # a closed descriptor is the end of the stream
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is closed already: the server ended first
                    loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read_client, name="mcp-client", daemon=True).start()
        server = asyncio.create_task(self.pump_server())
        while True:
            nxt = asyncio.create_task(lines.get())
            done, _ = await asyncio.wait({nxt, server}, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                break  # the server is gone
            line = nxt.result()
            if line is None:
                self.client_gone = True  # answers from now on are kept for a restarted proxy, not marked given
                break
            self.from_client(line)
        self.commit()  # the answered marks, now: a client closing its end may kill this process soon after
        # Calls in flight finish and are recorded (the client may be gone: their answers wait in the ledger).
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
        if self.run is not None and not self.cut_short:
            await self.run.acheckpoint()  # this session's step is complete: the next one on the run is a new step
        if self.child.stdin is not None and not self.child.stdin.is_closing():
            self.child.stdin.close()
        try:
            code = await asyncio.wait_for(self.child.wait(), 10)
        except TimeoutError:
            self.child.terminate()
            code = await self.child.wait()
        await server
        return ExitCode.OK if code in (0, -15) or self.client_gone else ExitCode.FAILED


def answer(result: CallResult) -> dict[str, Any]:
    """The JSON-RPC answer (``result`` or ``error``) for what the call came to, fresh or recorded."""
    if result.status == "succeeded":
        if isinstance(result.value, dict):
            return {"result": result.value}
        return {"result": {"content": [{"type": "text", "text": result.observation}], "isError": False}}
    text = result.observation.removeprefix("error: ")
    recorded = _decode(text.encode()) if text.startswith("{") else None
    if isinstance(recorded, dict) and len(recorded) == 1:
        if isinstance(recorded.get("result"), dict):
            return {"result": recorded["result"]}
        if isinstance(recorded.get("error"), dict):
            return {"error": recorded["error"]}
    # safepoint's own word: a call not run again, denied, refused before it ran
    return {"result": {"content": [{"type": "text", "text": result.observation}], "isError": True}}


def _decode(line: bytes) -> Any:
    try:
        return msgspec.json.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def serve(command: list[str], opener: Opener, trust: TrustFile) -> int:
    """Run the proxy on this process's stdin/stdout until the client or the server closes; the exit code."""
    opened = opener()
    if isinstance(opened, Blocked):
        sys.stderr.write(f"safepoint mcp-proxy: {settle_hint(opened, command)}\n")
    else:
        sys.stderr.write(f"safepoint mcp-proxy: run {opened.run_id}; server: {' '.join(command)}\n")
    if not isinstance(opened, Blocked):
        opened.step()  # one step per proxy session (its before-step checkpoint is durable)
    proxy = Proxy(opened, trust, command, sys.stdout.buffer)
    try:
        return asyncio.run(proxy.serve(sys.stdin.buffer))
    finally:
        if proxy.run is not None:
            with contextlib.suppress(SafepointError):
                proxy.run.session.commit()  # the last answered marks
            proxy.run.close()
