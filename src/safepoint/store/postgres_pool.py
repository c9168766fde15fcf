"""The PostgreSQL store's connections: the pool's check on checkout, the retry of a lost connection, the close.

A checkout is not a round trip: only a connection idle past ``IDLE_CHECK_S`` is pinged first (a server restart is
found before use). Rejected: psycopg_pool's ``check_connection`` on every checkout, one more round trip per write
(a tool call made about a dozen). A connection lost anyway (a restart between two writes, a failover) is retried
with backoff by ``one_statement``, for statements that are safe to repeat.

A store's writes (appends, heartbeats) go on a connection it holds for its lifetime (``Held``), taken from the
pool once and checked only when a write on it fails: a pool checkout cost about 35 us of client CPU per write (the
pool's context manager, its lock and the idle check), a tenth of a transition.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

Connection = psycopg.Connection[tuple[object, ...]]
_T = TypeVar("_T")

# A lost connection is retried with backoff this long before a write gives up: a worker in the middle of a tool
# rides out a server restart instead of failing the run's step.
RETRY_S = 30.0
IDLE_CHECK_S = 2.0  # a pooled connection idle longer than this is checked before use
# Errors that mean the server went away or is not taking connections yet: a retry on a new connection may work.
LOST = (pg_errors.AdminShutdown, pg_errors.CannotConnectNow, pg_errors.CrashShutdown, pg_errors.ConnectionFailure)
_last_used: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def used(conn: Connection) -> Iterator[None]:
    """Note when a checked-out connection was last used (``check_if_idle`` reads it)."""
    try:
        yield
    finally:
        _last_used[conn] = time.monotonic()


def check_if_idle(conn: Connection) -> None:
    """The pool's check on checkout: a connection used a moment ago goes out at once."""
    if time.monotonic() - _last_used.get(conn, 0.0) > IDLE_CHECK_S:
        ConnectionPool.check_connection(conn)


def one_statement(
    pool: ConnectionPool, action: Callable[[Connection], _T], error: Callable[[BaseException], Exception]
) -> _T:
    """Run ``action`` (one autocommit statement) on a pooled connection; a lost connection is retried with backoff
    for up to ``RETRY_S``, so ``action`` must be safe to repeat (a fenced write that checks the log's end and
    counts its tries: the first may have committed before its reply was lost). Other failures, and a loss past
    the deadline, raise ``error(exc)``; a lock timeout the caller set is re-raised as it is."""
    deadline = time.monotonic() + RETRY_S
    delay = 0.05
    while True:
        broken = False
        try:
            with pool.connection() as conn, used(conn):
                try:
                    return action(conn)
                except pg_errors.OperationalError:
                    broken = conn.broken
                    raise
        except pg_errors.LockNotAvailable:
            raise
        except (pg_errors.OperationalError, PoolTimeout) as exc:
            lost = broken or isinstance(exc, (PoolTimeout, *LOST))
            if not lost or time.monotonic() + delay > deadline:
                raise error(exc) from None
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


class Held:
    """The writer's own connection: taken from the pool on first use, kept, and given back (the pool drops it when
    broken) on a lost connection or at close. One thread writes on it at a time; a second thread writing meanwhile
    (async tools) uses an ordinary checkout instead of waiting."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def run(self, action: Callable[[Connection], _T], error: Callable[[BaseException], Exception]) -> _T:
        """``action`` (one autocommit statement, safe to repeat, as ``one_statement`` wants) on the held
        connection; a lost connection is given back and the action retried through ``one_statement``."""
        if not self._lock.acquire(blocking=False):
            return one_statement(self._pool, action, error)
        try:
            conn = self._conn
            if conn is None:
                try:
                    conn = self._conn = self._pool.getconn()
                except PoolTimeout:
                    return one_statement(self._pool, action, error)
            try:
                return action(conn)
            except pg_errors.OperationalError as exc:
                if not (conn.broken or isinstance(exc, LOST)) or isinstance(exc, pg_errors.LockNotAvailable):
                    raise
                self._give_back()
        except pg_errors.LockNotAvailable:
            raise
        except pg_errors.OperationalError as exc:
            raise error(exc) from None
        finally:
            self._lock.release()
        return one_statement(self._pool, action, error)

    def _give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, PoolTimeout):
                self._pool.putconn(conn)

    def close(self) -> None:
        with self._lock:
            self._give_back()


def close_pool(pool: ConnectionPool, held: Held | None = None) -> None:
    """Close a pool whose store is closed or gone. The collector may run this in one of the pool's own threads
    (any thread that allocates runs it), which cannot join itself: the close is then handed to a thread of its
    own. Rejected: leaving the pool to its ``__del__``, which the collector or the last reference dropped by a
    worker's task runs in that worker ("cannot join current thread", on stderr, and the pool's threads left)."""
    if held is not None:
        held.close()
    if threading.current_thread().name.startswith(f"{pool.name}-"):
        threading.Thread(target=pool.close, name="pool-closer", daemon=True).start()
    else:
        pool.close()


def listen(url: str, conn: Connection | None, channel: str, timeout: float) -> tuple[Connection | None, bool]:
    """Wait up to ``timeout`` for a NOTIFY on ``channel`` on ``conn`` (opened and LISTENing when None); returns the
    connection to keep and whether to look now. A NOTIFY sent while nobody listens is lost, so this is a hint on top
    of the passes, never their replacement: a lost connection says "look now" and is opened again next time."""
    if conn is None:
        try:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
            conn.execute(f"LISTEN {channel}")
        except psycopg.Error:
            time.sleep(timeout)
            return None, False
    try:
        return conn, any(True for _ in conn.notifies(timeout=timeout, stop_after=1))
    except psycopg.Error:
        with contextlib.suppress(psycopg.Error):
            conn.close()
        return None, True
