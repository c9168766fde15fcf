"""A PostgreSQL store never leaves its connection pool to the garbage collector (issue 11: a full run showed
``PytestUnraisableExceptionWarning: ... ConnectionPool.__del__ ... cannot join current thread``). A session's
reference cycles keep a store until the collector runs, and the collector runs in whichever thread allocates, one
of the pool's own workers included, where the pool's ``__del__`` cannot join that thread. Closed, or collected
in any thread, a store's pool is closed and its threads end. The warning is an error in this module."""

from __future__ import annotations

import gc
import threading
import time

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.store.url import open_store

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


def _pool_threads(besides: frozenset[threading.Thread] = frozenset()) -> list[str]:
    # the pool's own threads only ("safepoint-worker-N", "safepoint-scheduler"): a run's bookkeeping thread
    # ("safepoint-bookkeeping_N") another test of this worker process left to the collector is not the pool's;
    # ``besides``: pool threads alive before the test began (another test's store in this worker process)
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("safepoint-worker-", "safepoint-scheduler")) and t not in besides
    ]


def _until_no_pool_threads(besides: frozenset[threading.Thread]) -> None:
    deadline = time.monotonic() + 60
    while _pool_threads(besides):
        assert time.monotonic() < deadline, f"the pool's threads never ended: {_pool_threads(besides)}"
        time.sleep(0.02)


@pytest.fixture
def no_collector():
    """The collector runs only where the test says (it would otherwise run at any allocation, in any thread)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Collect:
    """A task for a pool's worker thread: run the collector there (as an allocation in that thread would)."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def run(self) -> None:
        gc.collect()
        self.done.set()


def test_a_store_collected_in_its_pools_own_worker_closes_the_pool(fresh_url, workspace, no_collector):
    before = frozenset(threading.enumerate())  # this test's store's threads are the ones judged
    sp = safepoint.open(fresh_url, workspace=str(workspace))
    with sp.start("t", run_id="r"):
        pass  # the session's reference cycles now hold the store until the collector runs
    assert _pool_threads(before) != []
    tasks = sp.store._pool._tasks  # type: ignore[attr-defined]  # the pool's worker queue (psycopg_pool's own)
    del sp
    collect = _Collect()
    tasks.put_nowait(collect)
    assert collect.done.wait(60)
    _until_no_pool_threads(before)  # and no "cannot join current thread" from a worker (an error in this module)


def test_a_dropped_store_is_closed_by_the_collector_and_a_closed_one_at_once(fresh_url, workspace, no_collector):
    before = frozenset(threading.enumerate())  # this test's stores' threads are the ones judged
    sp = safepoint.open(fresh_url, workspace=str(workspace))
    with sp.start("t", run_id="r"):
        pass
    del sp
    gc.collect()  # in this thread: the finalizer closes the pool
    assert _pool_threads(before) == []
    store = open_store(fresh_url)
    assert load_view(store, "r").info.run_id == "r"
    store.close()
    assert _pool_threads(before) == []
