"""The background snapshot writers at the process's end (``engine.snapshot_writer``): an exit waits one
``EXIT_WAIT`` for all of them, and a forked child never touches its parent's writers."""

from __future__ import annotations

import os
import signal
import threading

from safepoint.engine import snapshot_writer


class _Held:
    """A writer whose close takes all the time it is given (a write held past it), on a clock of its own."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.given: list[float] = []

    def close(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.given.append(timeout)
        self.clock[0] += timeout
        return False


def test_an_exit_waits_one_exit_wait_for_all_the_writers(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(snapshot_writer.time, "monotonic", lambda: clock[0])
    writers = [_Held(clock) for _ in range(5)]
    monkeypatch.setattr(snapshot_writer, "_live", writers)  # _stop_all lists them
    snapshot_writer._stop_all()
    assert all(len(w.given) == 1 for w in writers)
    assert clock[0] - 1000.0 <= snapshot_writer.EXIT_WAIT  # was 5 x EXIT_WAIT


def test_a_forked_child_exits_without_its_parent_s_writers_even_when_one_held_their_lock():
    class Writer:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def close(self, timeout: float | None = None) -> bool:
            with self.lock:  # as SnapshotWriter.close takes its condition's lock
                return True

    writer = Writer()
    snapshot_writer._live.add(writer)  # type: ignore[arg-type]
    try:
        with writer.lock:  # held at the fork, as the writer's thread holds it for a moment at each note
            pid = os.fork()
            if pid == 0:  # the child: what atexit runs at its exit, then out
                signal.alarm(20)  # a child stuck on the lock ends by SIGALRM (exit status not 0), never hangs
                try:
                    snapshot_writer._stop_all()
                    code = 0 if len(snapshot_writer._live) == 0 else 3
                finally:
                    os._exit(locals().get("code", 4))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        snapshot_writer._live.discard(writer)  # type: ignore[arg-type]
