"""Who may use the review page: the person who started it, from this machine, in their own browser tab.

Every request passes, in order:

1. **Host**: the ``Host`` header names this server (``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT``).
   A DNS-rebinding page (evil.example resolved to 127.0.0.1) sends its own name and is refused, before anything.
2. **Token**: a random token made per server. The link ``safepoint ui`` prints carries it once (``?token=``); the
   page then keeps it in an HttpOnly, SameSite=Strict cookie and drops it from the address. A program sends it as
   the ``X-Safepoint-Token`` header. Without it, nothing is shown: other users of this machine reach loopback too.
3. **Writes** (any method but GET and HEAD): an ``Origin`` other than this server's, or ``Sec-Fetch-Site`` saying
   another site, is refused; the page's forms carry the token in a field (the cookie alone never writes: a
   browser sends it with a request another tab forges), and the JSON API wants the header (a custom header
   cannot be sent cross-site without a preflight, which this server never allows) and a JSON body.

Every answer carries a Content-Security-Policy with no script source at all, and frames are refused
(clickjacking on the approve button). Rejected: CORS headers for other local tools (nothing here needs them).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "safepoint_ui"
HEADER = "x-safepoint-token"
FIELD = "csrf"  # the form field that carries the token
SAFE_METHODS = ("GET", "HEAD")
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
        b"base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: under no-referrer Chromium sends `Origin: null` with the page's own forms,
    # which the write check must refuse (a sandboxed frame or a data: page sends that too).
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def loopback_hosts(port: int) -> frozenset[str]:
    """The Host headers this server answers to. On port 80 a browser leaves the default port out of ``Host`` and
    ``Origin``, so the bare names are this server's too (only there: on another port a bare name is port 80's)."""
    names = ("127.0.0.1", "localhost", "[::1]")
    bare = frozenset(names) if port == 80 else frozenset()
    return frozenset(f"{name}:{port}" for name in names) | bare


def same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class Guard:
    """ASGI middleware: the checks above, then the app (``hosts``: the Host headers allowed)."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: Iterable[str]) -> None:
        self.app = app
        self.token = token
        self.hosts = frozenset(h.lower() for h in hosts)
        self.origins = frozenset(f"http://{h}" for h in self.hosts)
        # A cookie is sent to every port of a host: one name per port, so two pages (two stores) open side by
        # side do not log each other out.
        ports = {h.rpartition(":")[2] for h in self.hosts if h.rpartition(":")[2].isdigit()}
        self.cookie = f"{COOKIE}_{ports.pop()}" if len(ports) == 1 else COOKIE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # websockets: none served
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        api = scope["path"].startswith("/api/")
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            shown = host[:80] or "none"
            await _refuse(
                send, 403, f"this server answers only for {min(self.hosts)}; the host {shown!r} is refused", api
            )
            return
        method = scope["method"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if method in SAFE_METHODS and "token" in query:
            await self._enter(send, scope, query)
            return
        cookie = _cookies(headers.get("cookie", "")).get(self.cookie)
        by_header = same(headers.get(HEADER), self.token)
        if not (by_header or same(cookie, self.token)):
            await _refuse(
                send,
                401,
                "open the address `safepoint ui` printed (it carries the token), or send X-Safepoint-Token",
                api,
            )
            return
        if method in SAFE_METHODS:
            await self.app(scope, receive, _secured(send))
            return
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.origins:
            await _refuse(send, 403, f"a write from {origin[:80]!r} is refused: only this page may write", api)
            return
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            await _refuse(send, 403, "a write from another site is refused: only this page may write", api)
            return
        if api:
            if not by_header:
                await _refuse(send, 403, "a write to the API needs the X-Safepoint-Token header", api)
                return
            if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
                await _refuse(send, 415, "the API takes a JSON body (Content-Type: application/json)", api)
                return
            await self.app(scope, receive, _secured(send))
            return
        body = await _read_body(receive)
        if body is None:
            await _refuse(send, 413, "a form of this page is a few fields; this one is too large", api)
            return
        form = dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
        if not same(form.get(FIELD), self.token):
            await _refuse(
                send, 403, "this form is stale or forged (its token is missing or wrong): reload the page", api
            )
            return
        scope = dict(scope, state={**scope.get("state", {}), "form": form})
        await self.app(scope, _replay(body), _secured(send))

    async def _enter(self, send: Send, scope: Scope, query: dict[str, str]) -> None:
        """``?token=``: kept in the cookie, then the same address without it (it must not stay in the history)."""
        if not same(query.pop("token"), self.token):
            await _refuse(send, 401, "that token is not this server's: open the address `safepoint ui` printed", False)
            return
        rest = urlencode(query)
        raw = scope.get("raw_path") or scope["path"].encode("utf-8")
        # Always a path of this server: "//evil.example" would be another host's address to a browser.
        target = "/" + raw.decode("latin-1").lstrip("/\\") + (f"?{rest}" if rest else "")
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", target.encode("latin-1", errors="replace")),
                    (b"set-cookie", f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        out.setdefault(name, value)
    return out


def _secured(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message, headers=[*message.get("headers", []), *SECURITY_HEADERS])
        await send(message)

    return wrapped


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body; None past 1 MiB (a form of the page is a few fields)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > 1 << 20:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def _refuse(send: Send, status: int, message: str, api: bool) -> None:
    from html import escape

    body: bytes
    if api:
        body, kind = json.dumps({"error": message, "status": status}).encode(), b"application/json"
    else:
        page: Any = f"<!doctype html><title>refused</title><p>safepoint ui: {escape(message)}</p>"
        body, kind = page.encode(), b"text/html; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})
