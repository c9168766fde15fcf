"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary folder, a free loopback port, trust auth.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` system user (``runuser``).
``start()`` raises ``Unavailable`` (the caller skips) when the binaries or that user are missing.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

import psycopg

_TEMPLATE = "safepoint_template"


class Unavailable(Exception):
    """This machine cannot run a throwaway server; the message says why."""


class PgServer:
    def __init__(self, base: str, port: int, as_user: list[str]) -> None:
        self.base = base
        self.data = os.path.join(base, "data")
        self.port = port
        self._as_user = as_user
        self._template = False  # whether the migrated template (``_TEMPLATE``) exists yet

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str, *, schema: bool = True) -> str:
        """A new database: with safepoint's schema already set up (``schema``: copied from a template migrated once
        per server; migrating every test's database again was most of what opening one cost, 0.13-0.19 s against
        0.02-0.04 s), or empty (for the tests of setting one up)."""
        template = ""
        if schema:
            if not self._template:
                self._make_template()
            template = f' TEMPLATE "{_TEMPLATE}"'
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{template}')
        return self.url(name)

    def _make_template(self) -> None:
        from safepoint.store.postgres_schema import ensure_schema

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{_TEMPLATE}"')
        with psycopg.connect(self.url(_TEMPLATE)) as conn:  # one transaction, committed on leaving
            ensure_schema(conn, "the tests' template", upgrade=True)
        self._template = True

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                [*self._as_user, "pg_ctl", "-D", self.data, "stop", "-m", "immediate", "-w"],
                capture_output=True,
                timeout=30,
                check=False,
            )
        shutil.rmtree(self.base, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


def start(folder: str | None = None) -> PgServer:
    """A running server whose files live in a new folder under ``folder`` (default: TMPDIR)."""
    for tool in ("initdb", "pg_ctl"):
        if shutil.which(tool) is None:
            raise Unavailable(f"PostgreSQL's {tool} is not on PATH")
    as_user: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable("running as root and there is no 'postgres' system user to run the server as") from None
        runuser = shutil.which("runuser")
        if runuser is None:
            raise Unavailable("running as root and runuser is missing, so the server cannot run as 'postgres'")
        as_user = [runuser, "-u", "postgres", "--"]
    base = tempfile.mkdtemp(prefix="safepoint-pg-", dir=folder)
    os.chmod(base, 0o700)
    if owner is not None:
        os.chown(base, owner.pw_uid, owner.pw_gid)
    try:
        data = os.path.join(base, "data")
        # --no-sync only skips initdb's own flush of the fresh cluster; the server itself runs with fsync=on.
        _run([*as_user, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"], "initdb")
        with open(os.path.join(data, "pg_hba.conf"), "w") as handle:
            handle.write("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        for attempt in range(5):
            port = _free_port()
            with open(os.path.join(data, "postgresql.auto.conf"), "w") as handle:
                handle.write(
                    f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{base}'\n"
                    "fsync = on\nmax_connections = 100\n"
                )
            if owner is not None:
                for name in ("pg_hba.conf", "postgresql.auto.conf"):
                    os.chown(os.path.join(data, name), owner.pw_uid, owner.pw_gid)
            log = os.path.join(base, "server.log")
            done = subprocess.run(
                [*as_user, "pg_ctl", "-D", data, "-l", log, "-w", "-t", "30", "start"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode == 0:
                server = PgServer(base, port, as_user)
                _wait_ready(server)
                return server
            if attempt == 4:
                with contextlib.suppress(OSError), open(log) as handle:
                    tail = handle.read()[-2000:]
                raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {tail}")
        raise AssertionError("unreachable")
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise


def _wait_ready(server: PgServer) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            with psycopg.connect(server.url(), connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
