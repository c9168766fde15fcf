"""What a command must not read from the processes above it: the agent's credentials in ``/proc/PID/environ``
and ``/proc/PID/cmdline``.

A command runs as the same user as the agent, so ``/proc/$PPID/...`` of every process above it is open to it
unless the kernel or the process itself closes it. Before the first command starts, the agent process:

1. copies every variable the command does not get (a withheld credential, the store URL, the provider's key) to
   the heap (``setenv``, through ``os.environ``) and overwrites its value in place in the block the kernel shows
   as ``/proc/PID/environ`` (with ``*``: the process keeps its own copy, ``os.environ``; what others read is
   blank); a store URL's password in the command line (``ps`` shows it) is blanked the same way;
2. becomes not dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its ``/proc/PID/environ``, ``mem`` and ``fd`` become
   root's, and no same-user process can ptrace it.

The cost of 2, for the rest of the process's life: no core dump, and a debugger or profiler (gdb, py-spy) must
run as root to attach. It does not stop root (CAP_SYS_PTRACE), which is why 1 is done too. The reaper server
above each command is started with no credential in its environment (``engine/launcher.py``).

Rejected: unsetting the variables (``unsetenv`` drops the pointer, the kernel still shows the original bytes);
``PR_SET_MM_ENV_START`` (needs CAP_SYS_RESOURCE).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Mapping

from safepoint.store.names import url_secrets

PR_SET_DUMPABLE = 4
_ARG_START, _ENV_START = 45, 47  # fields 48 and 50 of /proc/self/stat (arg_start, env_start), counted from 3
_lock = threading.Lock()
_state = {"argv": False, "dumpable": True}


def hide_from_commands(command_env: Mapping[str, str]) -> list[str]:
    """Before a command with environment ``command_env`` starts: blank what it does not get from this process's
    ``/proc`` files and make the process not dumpable. Returns the names blanked now (for tests and the trace).
    Linux only; elsewhere nothing to do (no /proc to read)."""
    if not sys.platform.startswith("linux"):
        return []
    with _lock:
        blanked = _blank_environ(command_env)
        if not _state["argv"]:
            _state["argv"] = True
            with contextlib.suppress(OSError, ValueError):
                _blank_argv()
        if _state["dumpable"]:
            _state["dumpable"] = False
            libc = ctypes.CDLL(None, use_errno=True)
            if getattr(libc, "prctl", None) is not None:
                libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return blanked


def _bounds(first: int) -> tuple[int, int]:
    with open("/proc/self/stat", "rb") as handle:
        raw = handle.read()
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[first]), int(fields[first + 1])


def _blank_environ(command_env: Mapping[str, str]) -> list[str]:
    try:
        start, end = _bounds(_ENV_START)
    except (OSError, ValueError, IndexError):
        return []
    if not 0 < start < end:
        return []
    block = ctypes.string_at(start, end - start)
    given = {os.fsencode(f"{k}={v}") for k, v in command_env.items()}
    blanked = []
    offset = 0
    for entry in block.split(b"\0"):
        here, offset = offset, offset + len(entry) + 1
        name, eq, value = entry.partition(b"=")
        if not eq or not value or entry in given or set(value) == {0x2A}:  # given, or blanked already
            continue
        key = os.fsdecode(name)
        if key in os.environ:
            os.environ[key] = os.environ[key]  # setenv: a copy on the heap, so C code (getenv) still finds it
        ctypes.memset(start + here + len(name) + 1, 0x2A, len(value))
        blanked.append(key)
    return blanked


def _blank_argv() -> None:
    """The password of a store URL on the command line (``--store postgresql://u:PASSWORD@...``)."""
    start, end = _bounds(_ARG_START)
    if not 0 < start < end:
        return
    block = ctypes.string_at(start, end - start)
    offset = 0
    for arg in block.split(b"\0"):
        if b"://" in arg:
            text = os.fsdecode(arg)
            for secret in url_secrets(text):
                raw = os.fsencode(secret)
                at = arg.find(raw)
                while at >= 0:
                    ctypes.memset(start + offset + at, 0x2A, len(raw))
                    at = arg.find(raw, at + len(raw))
        offset += len(arg) + 1
