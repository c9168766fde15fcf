"""Starting a command under its supervisor (``engine/reaper.py``), and collecting what it printed.

One reaper server runs per agent process, started at the first command: each command is then a fork of that small
single-threaded process (about 1 ms), not a new Python (about 20 ms). Rejected: forking the agent itself (it has
threads: the heartbeat, the capture's readers; a fork of a threaded process may deadlock in the child).
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import subprocess
import sys
import threading
import time

from safepoint.engine import reaper
from safepoint.errors import ToolFailure

REQUEST_MAX = reaper.REQUEST_MAX


class Launcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started the server (a forked child must start its own)

    def launch(self, timeout: float, cwd: str, env: dict[str, str], command: list[str], fds: list[int]) -> int:
        """Start ``command`` under a new supervisor; returns its pid. ``fds``: the command's output, the status
        pipe and the gate (the supervisor waits for one byte on it before starting the command)."""
        request = reaper.encode_request(timeout, cwd, env, command)
        with self._lock:
            for _ in range(2):
                if self._sock is None or self._owner != os.getpid() or self._server_gone():
                    self._start()
                assert self._sock is not None
                try:
                    socket.send_fds(self._sock, [request], fds)
                    answer = self._sock.recv(64)
                except OSError as exc:
                    if exc.errno in (errno.EMSGSIZE, errno.ENOBUFS):
                        # The request itself is too big for the socket: no new server would take it either, and
                        # "try again" would send a model into retrying for ever.
                        raise ToolFailure(
                            f"the command and its environment are {len(request)} bytes, too long to hand to the"
                            " command's supervisor; write long content with write_file and run a script"
                        ) from None
                    answer = b""
                if answer:
                    return int(answer)
                self._stop()  # the server died: start another once
        raise ToolFailure(
            "could not start the command's supervisor process (safepoint's reaper, which stopped twice); the command"
            " did not run: try again, and if it fails again, check that this Python can start processes"
        )

    def server_pid(self) -> int | None:
        """The reaper server's pid (the commands of this process are forks of it), if it runs."""
        server = self._server
        return server.pid if server is not None and self._owner == os.getpid() else None

    def _server_gone(self) -> bool:
        return self._server is None or self._server.poll() is not None

    def _start(self) -> None:
        self._stop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # One request holds the command and the whole environment: room for what the kernel itself would start
        # (ARG_MAX), not the default buffer's 200 KB, which refused a user's large environment (the kernel caps
        # this at its wmem_max; a request beyond that is refused as too long, in words).
        with contextlib.suppress(OSError):
            mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, REQUEST_MAX)
        try:
            self._server = subprocess.Popen(
                # -I -S: the reaper needs only the standard library, and starts faster without site-packages.
                [sys.executable, "-I", "-S", reaper.__file__, "--serve", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the agent's Ctrl-C is not the server's
            )
        finally:
            theirs.close()
        self._sock, self._owner = mine, os.getpid()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the server sees end-of-file and exits
            self._sock = None
        if self._server is not None and self._owner == os.getpid():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._server.wait(timeout=5)
        self._server = None


LAUNCHER = Launcher()


def collect(output: int, status: int, deadline: float) -> tuple[bytes, bytes, bool]:
    """Read the command's output and its supervisor's report until both end, or until ``deadline`` (monotonic);
    returns (output, report, ended). The caller closes both descriptors."""
    chunks: list[bytes] = []
    report: list[bytes] = []
    with selectors.DefaultSelector() as selector:
        selector.register(output, selectors.EVENT_READ, chunks)
        selector.register(status, selectors.EVENT_READ, report)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b"".join(chunks), b"".join(report), False
            for key, _ in selector.select(remaining):
                data = os.read(key.fd, 1 << 16)
                if data:
                    key.data.append(data)
                else:
                    selector.unregister(key.fd)
    return b"".join(chunks), b"".join(report), True
