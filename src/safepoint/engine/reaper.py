"""The small process that runs one command and answers for its whole process tree (run as a script, stdlib only).

``python -I -S reaper.py GATE_FD STATUS_FD TIMEOUT PROGRAM ARGS...`` supervises one command; ``python -I -S
reaper.py --serve SOCKET_FD`` is a server that forks one supervisor per request (``engine/launcher.py`` starts it
once per agent process: a command then costs a fork, not a Python start of about 20 ms).

It makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the command starts stays its
descendant, even one that ``setsid``s or double-forks (an orphan is re-parented here, not to init). Then:

1. it waits for one byte on GATE_FD before starting anything: the agent sends it only once this process is noted
   (``ProcessNotes``), so an agent killed in between leaves a process that sees end-of-file and exits with 125
   without running the command;
2. it runs the command and waits for it, at most TIMEOUT seconds;
3. when the command's main process has ended (or the time is up), it kills every descendant still running, so
   nothing the command left behind outlives it or holds its output pipe open (the agent would wait on it);
4. it writes one JSON line to STATUS_FD (``{"status": N, "timed_out": bool, "leftovers": N}``) and exits.

Rejected: a cgroup (cgroup v1 needs a writable hierarchy, often missing; this works unprivileged), and making the
agent itself the subreaper (the library runs inside the user's process, which would then inherit every orphan).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

try:  # the C module: `signal` itself imports enum, which would add a third to this process's start-up time
    signal = __import__("_signal")
except ImportError:  # another Python implementation: the same functions and constants, under the public name
    signal = __import__("signal")

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
REQUEST_MAX = 4 << 20  # bytes of one request (command and environment): twice Linux's usual ARG_MAX
GATE_CLOSED = 125  # the agent died before letting the command start


def descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc (one listing: O(processes), no process per check)."""
    parents: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue  # gone meanwhile
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] == b"Z":
            continue  # a zombie is dead already: nothing to kill, its parent reaps it
        parents.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def _status(raw: int) -> int:
    return os.waitstatus_to_exitcode(raw) if os.WIFEXITED(raw) else 128 + os.WTERMSIG(raw)


def _reap(main: int) -> int | None:
    """Reap every ended child (orphans come here too); the main process's status once it ended."""
    status = None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == main:
            status = _status(raw)


def _kill_all() -> int:
    """Kill every descendant until none is left (a process forking meanwhile is caught on the next pass: its
    children are re-parented here). Returns how many were killed."""
    me = os.getpid()
    killed: set[int] = set()
    while True:
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)  # some child ended: look again
        except ChildProcessError:
            return len(killed)


_LIBC: list[ctypes.CDLL] = []  # the C library, loaded once by the server (before its forks), not in every fork


def _libc() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
        getattr(_LIBC[0], "prctl", None)  # ctypes keeps the looked-up function on the object: forks inherit it
    return _LIBC[0]


def supervise(gate: int, status_fd: int, timeout: float, command: list[str], env: dict[str, str] | None) -> int:
    """Steps 1-4 of the module docstring, in this process (which becomes the subreaper)."""
    os.set_inheritable(status_fd, False)  # the command must not hold the status pipe
    prctl = getattr(_libc(), "prctl", None)
    if prctl is not None:  # Linux only; elsewhere the process group still goes on a time-out
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        opened = os.read(gate, 1)
    except OSError:
        opened = b""
    os.close(gate)
    if not opened:
        return GATE_CLOSED
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # before the fork: no child's end is missed
    deadline = time.monotonic() + timeout
    main_pid = os.fork()
    if main_pid == 0:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        try:
            if env is None:
                os.execvp(command[0], command)
            else:
                os.execvpe(command[0], command, env)
        except OSError as exc:  # said on the command's output: exit code 127 alone tells the model nothing
            os.write(2, f"safepoint: could not start {command[0]}: {exc.strerror}\n".encode(errors="replace"))
        finally:
            os._exit(127)
    status: int | None = None
    timed_out = False
    while status is None:
        status = _reap(main_pid)
        if status is not None:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        if hasattr(signal, "sigtimedwait"):
            signal.sigtimedwait({signal.SIGCHLD}, remaining)
        else:  # macOS: no sigtimedwait; poll
            time.sleep(min(remaining, 0.01))
    leftovers = 0
    try:
        os.waitpid(-1, os.WNOHANG)
        pending = True  # a child is left (running, or ended just now: _kill_all reaps it)
    except ChildProcessError:
        pending = False  # nothing left at all: the usual case costs no /proc walk
    if pending:
        leftovers = _kill_all()
        if timed_out:
            leftovers = max(leftovers - 1, 0)  # the main process itself is not a leftover
    # JSON by hand: importing json (re, enum) would double this process's start-up time.
    report = f'{{"status": {-1 if status is None else status}, "timed_out": {str(timed_out).lower()}, '
    os.write(status_fd, (report + f'"leftovers": {leftovers}}}\n').encode())
    os.close(status_fd)
    return 124 if status is None else status


# the server: one per agent process, so a command costs a fork, not a Python start ------------------------------------
def encode_request(timeout: float, cwd: str, env: dict[str, str], command: list[str]) -> bytes:
    """A request to the server: NUL-separated fields (a command line or environment cannot hold a NUL)."""
    fields = [repr(timeout), cwd, str(len(env)), *(f"{k}={v}" for k, v in env.items()), *command]
    return b"\0".join(os.fsencode(field) for field in fields)


def _decode_request(data: bytes) -> tuple[float, str, dict[str, str], list[str]]:
    fields = [os.fsdecode(field) for field in data.split(b"\0")]
    count = int(fields[2])
    env = dict(entry.split("=", 1) for entry in fields[3 : 3 + count])
    return float(fields[0]), fields[1], env, fields[3 + count :]


def serve(sock_fd: int) -> int:
    """Answer requests on the socket (SOCK_SEQPACKET) until the agent closes it. Each request comes with three
    descriptors (the command's output, the status pipe, the gate); the answer is the pid of a new process (a fork
    of this one, in its own session) that supervises that command. This server is single-threaded, so forking it
    is safe; its children are reaped by the kernel (SIGCHLD ignored here, restored in each child)."""
    import socket  # only the server needs it
    import warnings  # noqa: F401  # os.execvpe imports it: once here, not in every command's fork (~1-2 ms each)

    prctl = getattr(_libc(), "prctl", None)
    if prctl is not None:
        # A subreaper too: a command that kills its own supervisor leaves its processes here, below this server,
        # where the agent finds and kills them (``Launcher.sweep``) before it waits for a person's decision; not
        # with init, out of reach. Not dumpable: a command cannot ptrace this process or its forks (the
        # supervisors), nor read their memory; each command's exec makes it dumpable again (its own business).
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

    sock = socket.socket(fileno=sock_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDONLY)
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, REQUEST_MAX, 3)
        except OSError:
            return 0
        if not data:
            return 0  # the agent is gone; the commands it started run on under their own supervisors
        timeout, cwd, env, command = _decode_request(data)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock.close()
                os.setsid()  # its own session and group: a kill of the group reaches what stayed in it
                output, status_fd, gate = fds
                os.dup2(devnull, 0)
                os.dup2(output, 1)
                os.dup2(output, 2)
                os.close(output)
                os.chdir(cwd)
                code = supervise(gate, status_fd, timeout, command, env)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())


def main(argv: list[str]) -> int:
    if argv[1] == "--serve":
        return serve(int(argv[2]))
    return supervise(int(argv[1]), int(argv[2]), float(argv[3]), argv[4:], None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
