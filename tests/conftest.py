from __future__ import annotations

import contextlib
import io
import itertools
import os
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


MEMORY_TMP_SIZE = "8g"  # a cap, not a reservation: a whole run writes about 100 MB under its basetemp
MEMORY_TMP_ENV = "SAFEPOINT_TESTS_TMPFS"  # the mount, for xdist workers (they inherit the controller's environment)


def _fanotify_works(folder: str) -> bool:
    """Whether the command capture tells writers apart in ``folder`` (fanotify marks need file handles, which tmpfs
    gives only on recent kernels)."""
    from safepoint.workspace.ignore import IgnoreRules
    from safepoint.workspace.writers import WriterWatch

    probe = tempfile.mkdtemp(dir=folder)
    try:
        rules = IgnoreRules(probe, store_rel=None, extra=None, info_exclude=None, use_gitignore=False)
        watch = WriterWatch.start(probe, rules)
        if watch is not None:
            watch.close()
        return watch is not None
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _unmount(mount: str) -> None:
    # -l: a process a test leaked (its cwd inside) must not keep the mount, or the folder, behind
    subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    with contextlib.suppress(OSError):
        os.rmdir(mount)


def _memory_mount() -> str | None:
    """A tmpfs mounted on a new folder under TMPDIR for the tests' temporary folders, or None to keep pytest's own.

    Every durable write in the product ends in fsync, and the tests make tens of thousands of them: on a disk shared
    with other work each costs milliseconds, on a tmpfs nothing. What the tests check is the same: a killed process
    (the tests' crashes) leaves the page cache behind on any file system; only a machine's crash needs the disk, and
    no test can make one. Mounted under TMPDIR, so paths look as they did (/dev/shm would not do: commands' targets
    under /dev/ are never held, so a store there is not protected), and taken only where the capture sees the same
    there as on TMPDIR's disk (fanotify or not), so the fanotify cases never turn quietly into inotify ones.
    Rejected: turning fsync off through an environment variable read by the product (a switch that weakens
    durability, one export away from production)."""
    if not sys.platform.startswith("linux") or os.environ.get("SAFEPOINT_TESTS_ON_DISK") == "1":
        return None
    mount = tempfile.mkdtemp(prefix="safepoint-tests-")
    # mode 0711: the throwaway PostgreSQL server runs as another user and keeps its own (private) folder in here
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={MEMORY_TMP_SIZE},mode=0711", "tmpfs", mount],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        os.rmdir(mount)
        return None
    if _fanotify_works(mount) != _fanotify_works(tempfile.gettempdir()):
        _unmount(mount)
        return None
    return mount


_MEMORY_MOUNT = pytest.StashKey[str]()
_BYTECODE = pytest.StashKey[str]()  # the children's bytecode folder the controller made (and removes)
BYTECODE_ENV = "SAFEPOINT_TESTS_PYCACHE"  # that folder, for the xdist workers (they inherit the environment)
_WARMED = pytest.StashKey[bool]()  # whether the controller's warm-up (warm_bytecode) was done


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """The controller (not an xdist worker: those get the controller's basetemp/popen-gwN) chooses the basetemp and,
    when it starts workers, compiles their code once for all of them."""
    if hasattr(config, "workerinput"):
        return
    mount = None if config.option.basetemp else _memory_mount()
    if mount is not None:
        config.option.basetemp = os.path.join(mount, "t")
        config.stash[_MEMORY_MOUNT] = mount
        os.environ[MEMORY_TMP_ENV] = mount
    if getattr(config.option, "numprocesses", None):
        from . import warm_bytecode

        folder = tempfile.mkdtemp(prefix="safepoint-pycache-", dir=mount)
        config.stash[_BYTECODE] = folder
        os.environ[BYTECODE_ENV] = folder
        config.stash[_WARMED] = warm_bytecode.warm(config, folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The mount holds memory: it goes with the run, a failed run's folders too (SAFEPOINT_TESTS_ON_DISK=1 keeps
    them, in pytest's own place)."""
    folder = config.stash.get(_BYTECODE, None)
    if folder is not None:
        os.environ.pop(BYTECODE_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)
    mount = config.stash.get(_MEMORY_MOUNT, None)
    if mount is not None:
        os.environ.pop(MEMORY_TMP_ENV, None)
        _unmount(mount)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    mount = config.stash.get(_MEMORY_MOUNT, None)
    if mount is not None:
        lines.append(f"temporary folders on a tmpfs at {mount} (SAFEPOINT_TESTS_ON_DISK=1: on disk)")
    if config.stash.get(_WARMED, True) is False:  # slower, never wrong: said so the lost minutes are not a mystery
        lines.append("the tests' bytecode warm-up was skipped (see tests/warm_bytecode.py): each worker rewrites them")
    return lines


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
    about 0.15 s of CPU each, over several hundred children. Under xdist the controller's folder (already holding the
    package compiled, see warm_bytecode) is shared by every worker's children."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPYCACHEPREFIX", os.environ.get(BYTECODE_ENV) or str(tmp_path_factory.mktemp("pycache")))
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


def safepoint_in_process(
    *args: object, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m safepoint ARGS`` run inside this process: argv in; exit code, stdout and stderr out.

    For tests where what a command does is the point, not the process: it skips the interpreter start-up a child
    pays. ``env`` (default: ``cli_env()``) replaces the environment for the call; ``cwd`` is the current folder
    during it (an xdist worker runs one test at a time, so changing the process's is safe). Tests that kill, race or
    time a process, or check what only a fresh process shows, start a real child instead.
    """
    argv = ["safepoint", *map(str, args)]
    saved_env, saved_argv = dict(os.environ), sys.argv
    saved_signals = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    saved_cwd = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
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
        os.chdir(saved_cwd)
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
    """A throwaway PostgreSQL server for the whole session (skipped where the machine has none). Its files go on the
    tmpfs when the tests' folders do (each commit and CREATE DATABASE fsyncs; no test crashes the machine): at the
    mount's top, as the server may run as another user, who cannot enter pytest's private basetemp."""
    from . import pgserver

    try:
        server = pgserver.start(os.environ.get(MEMORY_TMP_ENV))
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
    """A URL naming a new database of its own, holding safepoint's schema and nothing else (copied from a template
    migrated once: what a store sets up at its first open, done once per server instead of once per test)."""
    return pg_server.create_database(f"t{next(database_names)}")


@pytest.fixture
def empty_url(pg_server):
    """A URL naming a new, empty database: for the tests of what a store does with one."""
    return pg_server.create_database(f"t{next(database_names)}", schema=False)
