"""A claim's owner record carries this process's start time: read from /proc once per process (it cannot change
while the process lives), not at every claim; a forked child reads its own."""

from __future__ import annotations

import os

import pytest

from safepoint.store import liveness, ownership


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = liveness.process_start_time

    def counted(pid: int) -> str:
        seen.append(pid)
        return real(pid)

    monkeypatch.setattr(liveness, "process_start_time", counted)
    monkeypatch.setattr(liveness, "_own_start", None)
    return seen


def test_claims_read_this_processs_start_time_once(reads):
    states = [ownership.next_owner(f"r{i}", None, "me", takeover=False) for i in range(5)]
    assert reads == [os.getpid()]
    start = liveness.process_start_time(os.getpid())
    assert start and {s.host.rpartition("#")[2] for s in states} == {start}
    assert liveness.process_is_alive(os.getpid(), start)  # judged against the same value, no read either
    assert reads == [os.getpid(), os.getpid()]  # only the line above's own read


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_records_its_own_start_time(reads):
    parent = liveness.own_start_time()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its claim's record names it, not the parent it was copied from
        os.close(read_end)
        try:
            state = ownership.next_owner("r", None, "child", takeover=False)
            direct = liveness.process_start_time(os.getpid())
            os.write(write_end, f"{state.pid} {state.host.rpartition('#')[2]} {direct}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as handle:
        child_pid, child_start, child_read = handle.read().split()
    os.waitpid(pid, 0)
    assert int(child_pid) == pid
    assert child_start == child_read  # its own, read from /proc in the child
    assert child_start != parent  # this test process started long before the child (ticks of 10 ms)
    assert liveness.own_start_time() == parent
