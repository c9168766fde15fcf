from __future__ import annotations

import contextlib
import io
import itertools
import os
import runpy
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory):
    """Where a store keeps this machine's run state (PostgreSQL runs' scratch folders): a temporary folder, so
    the tests leave nothing in the home directory."""
    path = str(tmp_path_factory.mktemp("state"))
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = path
    yield path
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


@pytest.fixture(autouse=True, scope="session")
def _bytecode_cache(tmp_path_factory):
    """Child processes share compiled bytecode, kept under tmp (never in the source tree). Where the environment
    says PYTHONDONTWRITEBYTECODE, every ``python -m safepoint`` child would compile the package from source again:
    about 0.15 s of CPU each, over several hundred children."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.mktemp("pycache")))
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        yield


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outbox(tmp_path, monkeypatch):
    path = tmp_path / "outbox.jsonl"
    monkeypatch.setenv("SAFEPOINT_OUTBOX", str(path))
    return path


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEPOINT_FAILPOINT")}
    env.update(extra)
    return env


PY = sys.executable


def safepoint_in_process(*args: object, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m safepoint ARGS`` run inside this process: argv in; exit code, stdout and stderr out.

    For tests where what a command does is the point, not the process: it skips the interpreter start-up a child
    pays. ``env`` (default: ``cli_env()``) replaces the environment for the call. Tests that kill, race or time a
    process, or check what only a fresh process shows, start a real child instead.
    """
    argv = ["safepoint", *map(str, args)]
    saved_env, saved_argv = dict(os.environ), sys.argv
    saved_signals = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    try:
        os.environ.clear()
        os.environ.update(cli_env() if env is None else env)
        sys.argv = argv
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_module("safepoint", run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if isinstance(exit_.code, str):
            err.write(exit_.code + "\n")
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        for signum, handler in saved_signals.items():  # `run` and `resume` install a SIGTERM handler
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.005)


def read_until(process: subprocess.Popen[str], needle: str, timeout: float = 60.0) -> str:
    """What ``process`` printed on its stdout pipe up to and including ``needle`` (fails after ``timeout``).

    Reads the pipe's file descriptor directly, so ``process.communicate()`` can still collect the rest.
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while needle.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {needle!r} on the output; it showed {seen.decode(errors='replace')!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            data = os.read(fd, 4096)
            assert data, f"the output ended before {needle!r}; it showed {seen.decode(errors='replace')!r}"
            seen += data
    return seen.decode()


database_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server for the whole session (skipped where the machine has none)."""
    from . import pgserver

    try:
        server = pgserver.start()
    except pgserver.Unavailable as exc:
        pytest.skip(f"no throwaway PostgreSQL on this machine: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_url(pg_server):
    """The session's server, as a URL (its default database)."""
    return pg_server.url()


@pytest.fixture
def fresh_url(pg_server):
    """A URL naming a new, empty database."""
    return pg_server.create_database(f"t{next(database_names)}")
