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
from safepoint.engine.procenv import hide_from_commands
from safepoint.engine.processes import kill_tree, running_groups
from safepoint.errors import ToolFailure

REQUEST_MAX = reaper.REQUEST_MAX
# What the reaper server's own environment keeps of the agent's (each command's comes with its request): the
# locale, so both decode file names alike. Rejected: the agent's whole environment, which a command read from
# /proc/$PPID/environ, withheld credentials and all.
SERVER_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8")


class Launcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started the server (a forked child must start its own)
        self.launches = 0  # commands started by this process so far (a wait notices one started meanwhile)
        self.lost: str | None = None  # set when the server died other than by our hand (see ``sweep``)

    def launch(self, timeout: float, cwd: str, env: dict[str, str], command: list[str], fds: list[int]) -> int:
        """Start ``command`` under a new supervisor; returns its pid. ``fds``: the command's output, the status
        pipe and the gate (the supervisor waits for one byte on it before starting the command)."""
        request = reaper.encode_request(timeout, cwd, env, command)
        hide_from_commands(env)  # before anything runs: this process's /proc files show nothing it withholds
        with self._lock:
            self.launches += 1
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
        if self._server is None:
            return True
        code = self._server.poll()
        if code is not None and self._owner == os.getpid() and self.lost is None:
            # Killed (by a command: it runs as the same user): what its commands left went to init, beyond
            # anyone's reach. Said once; a wait then takes no decision (see restart.approvals).
            self.lost = f"safepoint's command supervisor (pid {self._server.pid}) was stopped (exit {code})"
        return code is not None

    def leftovers(self) -> list[int]:
        """Processes below the reaper server that belong to no running command: what a command left after killing
        its own supervisor (the server is a subreaper: they come to it). Empty when nothing is left."""
        server = self.server_pid()
        if server is None:
            return []
        try:  # the server's direct children, without a walk of /proc (the usual case: nothing left, ~2 ms saved)
            with open(f"/proc/{server}/task/{server}/children") as handle:
                children: set[int] | None = {int(pid) for pid in handle.read().split()}
        except (OSError, ValueError):
            children = None  # no such file (a kernel without it): walk
        if children is not None and children <= running_groups():
            return []
        busy: set[int] = set()
        for pid in running_groups():
            busy |= {pid, *reaper.descendants(pid)}
        return [pid for pid in reaper.descendants(server) if pid not in busy]

    def sweep(self) -> list[int]:
        """Kill every leftover (``leftovers``); returns their pids. After it, and while no command runs, no process
        a command of this process started is alive, unless the server itself was killed (``lost``)."""
        with self._lock:
            self._server_gone()  # notes a server killed meanwhile
            found = self.leftovers()
            for pid in found:
                kill_tree(pid)
            return found

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
                env={k: v for k, v in os.environ.items() if k in SERVER_ENV},
            )
        finally:
            theirs.close()
        self._sock, self._owner = mine, os.getpid()

    def _stop(self) -> None:
        self._server_gone()  # a server found dead is said (``lost``) before it is forgotten
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
