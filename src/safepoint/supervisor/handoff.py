"""How the daemon hands a worker its secrets: through a pipe, never the environment or the command line.

A worker's environment block and command line are what ``/proc/PID/environ`` and ``ps`` show (the first to its
user and root, the second to everyone), for the worker's whole life. So the store URL (its password) and every
credential variable of the daemon (the provider's key among them) go through a pipe the worker reads once at
start-up (``SAFEPOINT_HANDOFF_FD`` names its descriptor): the worker puts them in ``os.environ`` (``setenv``: its own
heap, not the block the kernel shows), where ``--store``'s default and the provider find them as before.
Rejected: a 0600 file removed after reading (a crash between writing and reading leaves it on disk).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping

from safepoint.core.environment import STORE_VARIABLES, is_credential

HANDOFF_FD = "SAFEPOINT_HANDOFF_FD"


def split_environment(
    environ: Mapping[str, str], store_url: str, *, also: Iterable[str] = ()
) -> tuple[dict[str, str], dict[str, str]]:
    """``(the worker's environment, what goes through the pipe)``: credentials (and the names in ``also``, such as
    a provider key variable with a name of the user's choosing) leave the environment for the pipe."""
    extra = set(also)
    secret = {k: v for k, v in environ.items() if k in extra or k in STORE_VARIABLES or is_credential(k, v)}
    secret["SAFEPOINT_STORE"] = store_url
    plain = {k: v for k, v in environ.items() if k not in secret and k != HANDOFF_FD}
    return plain, secret


def send(fd: int, secret: Mapping[str, str]) -> None:
    """Write the secrets to the pipe and close it (the worker reads until end-of-file)."""
    with contextlib.suppress(BrokenPipeError), os.fdopen(fd, "wb") as handle:
        handle.write(json.dumps(dict(secret)).encode())


def receive(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    """In a worker, first thing: read the daemon's pipe (if ``SAFEPOINT_HANDOFF_FD`` names one) into the
    environment; returns the names received. A missing or broken pipe gives nothing (the worker then says what it
    lacks, e.g. no store, in its own words)."""
    target = os.environ if environ is None else environ
    raw_fd = target.pop(HANDOFF_FD, None)
    if raw_fd is None or not raw_fd.isdigit():
        return []
    try:
        with os.fdopen(int(raw_fd), "rb") as handle:
            data = json.loads(handle.read() or b"{}")
    except (OSError, ValueError):
        return []
    received = [str(k) for k in data if isinstance(data.get(k), str)]
    for name in received:
        target[name] = data[name]
    return received
