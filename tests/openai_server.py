"""A fake OpenAI-compatible model server for tests: ``POST /v1/chat/completions`` answered from a script.

Each request takes the next scripted reply and streams it as Server-Sent Events, the way the real API does
(``data: {chat.completion.chunk}`` events, then ``data: [DONE]``): a role chunk, the text in pieces, each tool
call's id and name and then its arguments in pieces, a final chunk with ``finish_reason``, a usage chunk with no
choices. Every request body is recorded (``server.requests``) so a test can check what the model was sent.

A reply is a dict::

    {"text": "Hello there"}                                  # streamed in `chunks` pieces (default 3)
    {"tool_calls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "a.txt"}}]}
    {"tool_calls": [{"id": "c", "name": "t", "arguments": "{not json"}]}    # a string is sent verbatim
    {"status": 500, "error": "overloaded"}                   # an HTTP error instead of a reply
    {"text": "...", "pause_after": 2}    # stop after 2 events until `release` is set (then go on)
    {"text": "...", "cut_after": 2}      # close the connection after 2 events (no final chunk, no [DONE])
    {"text": "...", "error_after": 2}    # after 2 events, send an in-stream error event
    {"text": "...", "no_finish": true}   # end with [DONE] but never send a finish_reason
    {"text": "...", "delay": 0.05}       # seconds between events
    {"tool_calls": [...], "loose": true} # leave out the choice index, the tool-call index and the call ids

When the script runs out, a request gets HTTP 500 ("no scripted reply left").

In a test::

    with FakeOpenAI([{"text": "hi"}]) as server:
        provider = OpenAIProvider("fake-model", base_url=server.base_url)

From another process (a crash test that kills its client mid-reply)::

    python tests/openai_server.py --script replies.json --port-file port.txt \
        [--requests requests.jsonl] [--paused-file paused.txt] [--release-file release.txt] [--models m1,m2]

The script file holds a list of replies (or ``{"replies": [...], "models": [...]}``). The port is written to
``--port-file`` (atomically, once the server listens) and the base URL printed on stdout. Each request body is
appended to ``--requests`` as one JSON line; ``--paused-file`` is created when a reply pauses; a paused reply goes on
when ``--release-file`` appears or on SIGUSR1. Stop the server with SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]
PAUSE_LIMIT = 300.0  # a paused reply goes on by itself after this long, so a forgotten release never hangs a run


def _pieces(text: str, count: int) -> list[str]:
    """``text`` cut into at most ``count`` non-empty pieces, in order."""
    if not text:
        return []
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def reply_events(reply: Reply, model: str, number: int) -> list[dict[str, Any]]:
    """The chat.completion.chunk payloads of one reply (everything before ``[DONE]``)."""
    created = int(time.time())
    chunk_id = f"chatcmpl-fake-{number}"

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if delta is not None else []
        return {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        }

    count = int(reply.get("chunks", 3))
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(str(reply.get("text", "")), count)]
    calls = reply.get("tool_calls") or []
    for index, call in enumerate(calls):
        arguments = call.get("arguments", {})
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        function = {"name": call["name"], "arguments": ""}
        head = {"index": index, "id": call["id"], "type": "function", "function": function}
        events.append(chunk({"tool_calls": [head]}))
        for piece in _pieces(arguments, count):
            events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    if not reply.get("no_finish"):
        events.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = chunk(None)  # no choices: the usage report that ends a stream
    usage["usage"] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    events.append(usage)
    if reply.get("loose"):  # like some local servers: no choice index, no tool-call index, no call ids
        for event in events:
            for choice in event["choices"]:
                del choice["index"]
                for call in choice["delta"].get("tool_calls", ()):
                    del call["index"]
                    call.pop("id", None)
    return events


class FakeOpenAI:
    """The server; ``start()`` (or ``with``) serves on a free loopback port in a background thread."""

    def __init__(
        self,
        replies: list[Reply] | None = None,
        *,
        models: list[str] | None = None,
        port: int = 0,
        on_request: Callable[[dict[str, Any]], None] | None = None,
        on_pause: Callable[[], None] | None = None,
    ) -> None:
        self.replies: list[Reply] = list(replies or [])
        self.models = models  # None: any model name is accepted; else others get 404 like a real server
        self.requests: list[dict[str, Any]] = []  # every request body, in order
        self.headers: list[dict[str, str]] = []  # and its headers (lower-case names)
        self.paths: list[str] = []
        self.paused = threading.Event()  # set when a reply reaches its pause point
        self.release = threading.Event()  # set it to let paused replies go on
        self._on_request = on_request
        self._on_pause = on_pause
        self._lock = threading.Lock()
        self._served = 0
        self._thread: threading.Thread | None = None
        self.httpd = _HTTPServer(("127.0.0.1", port), _handler_for(self))

    @property
    def port(self) -> int:
        port: int = self.httpd.server_address[1]
        return port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(target=self.serve, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve until ``stop()`` (or ``httpd.shutdown()``); a short poll so that stopping is quick."""
        self.httpd.serve_forever(poll_interval=0.02)

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._lock:
            self.paths.append(path)
            self.headers.append(headers)
            self.requests.append(body)
        if self._on_request is not None:
            self._on_request(body)

    def _next_reply(self) -> tuple[Reply | None, int]:
        with self._lock:
            self._served += 1
            return (self.replies.pop(0) if self.replies else None), self._served

    def _pause(self) -> None:
        self.paused.set()
        if self._on_pause is not None:
            self._on_pause()
        self.release.wait(PAUSE_LIMIT)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a reply paused forever never holds up the process

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up is no news
            super().handle_error(request, client_address)


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, like a real server
        disable_nagle_algorithm = True  # each event leaves at once

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                names = server.models or ["fake-model"]
                self._json(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
            else:
                self._error(404, f"no route {self.path}", "not_found")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._error(400, "the request body is not JSON", "invalid_request_error")
                return
            server._record(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route {self.path}", "not_found")
                return
            model = str(body.get("model", ""))
            if server.models is not None and model not in server.models:
                self._error(404, f"model '{model}' not found", "model_not_found")
                return
            if not body.get("stream"):
                self._error(400, "this fake server only streams (send stream: true)", "invalid_request_error")
                return
            reply, number = server._next_reply()
            if reply is None:
                self._error(500, "no scripted reply left", "server_error")
                return
            if "status" in reply:
                self._error(int(reply["status"]), str(reply.get("error", "scripted failure")), "server_error")
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._stream(reply, model, number)

        def _stream(self, reply: Reply, model: str, number: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pause_after, cut_after, error_after = (
                reply.get(key) for key in ("pause_after", "cut_after", "error_after")
            )
            delay = float(reply.get("delay", 0))
            for sent, event in enumerate(reply_events(reply, model, number)):
                if sent == pause_after:
                    server._pause()
                if sent == cut_after:
                    self.close_connection = True  # no terminating chunk: the client sees a body cut short
                    return
                if sent == error_after:
                    error = {"message": str(reply.get("error", "scripted stream error")), "type": "server_error"}
                    self._event(json.dumps({"error": error}))
                    break
                if delay and sent:
                    time.sleep(delay)
                self._event(json.dumps(event))
            self._event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")

        def _event(self, data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 500 or status == 429:
                self.send_header("retry-after-ms", "10")  # a client that retries does so at once
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, kind: str) -> None:
            self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": kind}})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible chat-completions server for tests.")
    parser.add_argument("--script", required=True, help="JSON file: a list of replies, or {replies, models}")
    parser.add_argument("--port-file", help="write the port here once listening")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--requests", help="append each request body here as a JSON line")
    parser.add_argument("--paused-file", help="created when a reply pauses")
    parser.add_argument("--release-file", help="paused replies go on once this file exists (or on SIGUSR1)")
    parser.add_argument("--models", help="comma-separated model names to accept (default: any)")
    args = parser.parse_args(argv)

    with open(args.script, encoding="utf-8") as handle:
        script = json.load(handle)
    replies = script if isinstance(script, list) else script.get("replies", [])
    models = args.models.split(",") if args.models else (None if isinstance(script, list) else script.get("models"))
    log_lock = threading.Lock()

    def log_request(body: dict[str, Any]) -> None:
        if args.requests:
            with log_lock, open(args.requests, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(body) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def mark_paused() -> None:
        if args.paused_file:
            with open(args.paused_file, "w", encoding="utf-8") as handle:
                handle.write("paused\n")

    server = FakeOpenAI(replies, models=models, port=args.port, on_request=log_request, on_pause=mark_paused)
    signal.signal(signal.SIGUSR1, lambda *_: server.release.set())
    signal.signal(signal.SIGTERM, lambda *_: _stop(server))
    if args.release_file:
        release_file = args.release_file

        def watch() -> None:
            while not server.release.is_set():
                if os.path.exists(release_file):
                    server.release.set()
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()
    if args.port_file:
        tmp = f"{args.port_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"{server.port}\n")
        os.replace(tmp, args.port_file)
    print(server.base_url, flush=True)
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.release.set()
        server.httpd.server_close()
    return 0


def _stop(server: FakeOpenAI) -> None:
    server.release.set()
    # shutdown() waits for serve_forever to return, which runs in this (the main) thread: ask from another one.
    threading.Thread(target=server.httpd.shutdown, daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
