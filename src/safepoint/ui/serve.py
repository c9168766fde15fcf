"""Serving the review page: a socket bound on loopback only (any other address is refused before anything
listens), uvicorn on it, the address with its token said once."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from safepoint.errors import ConfigError

if TYPE_CHECKING:
    from safepoint.api import Safepoint


def loopback(host: str) -> str:
    """The address to bind for ``host``: ``localhost`` or a loopback address; anything else is refused (the page
    acts on your runs: it is never served to the network)."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ConfigError(
            f"safepoint ui serves on loopback only (127.0.0.1, ::1 or localhost), not {host!r}; "
            "reach it from elsewhere through an SSH tunnel (ssh -L)"
        )
    return str(address)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on a loopback ``host`` (``port`` 0: a free one)."""
    address = loopback(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {address} port {port} ({exc.strerror}); pass another --port, or 0"
        ) from None
    sock.listen(64)
    return sock


def serve(sp: Safepoint, *, host: str = "127.0.0.1", port: int = 8780, say: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C; ``say`` is told the address to open (it carries the token)."""
    import uvicorn

    from safepoint.ui.app import create_app, new_token
    from safepoint.ui.guard import loopback_hosts

    sock = bind(host, port)
    bound = sock.getsockname()[1]
    token = new_token()
    shown = f"[{sock.getsockname()[0]}]" if sock.family == socket.AF_INET6 else sock.getsockname()[0]
    app = create_app(sp, token=token, hosts=loopback_hosts(bound) | {f"{shown}:{bound}"})  # --host 127.0.0.2 too
    say(f"safepoint ui: http://{shown}:{bound}/?token={token}")
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
