"""The view snapshot is written off the tool call's path (``engine.snapshot_writer``): the call only hands the
durable group's position to the session's background writer; the writer covers exactly that position, fenced;
a close, a takeover and a failure leave a valid snapshot and fail nothing.

Each test holds the writer's store write (or its fold) on an event: what the calls do meanwhile is what a
multi-second write at 50,000 calls would let them do (before, the call that made it due waited for it)."""

from __future__ import annotations

import threading

import msgspec
import pytest

import safepoint
from safepoint.core import view_snapshot
from safepoint.core.run_view import build_view
from safepoint.engine import snapshot_writer
from safepoint.engine.session import load_view
from safepoint.engine.snapshot_writer import SnapshotWriter
from safepoint.engine.tools import tool
from safepoint.store import view_index
from safepoint.store.sealed import unwrap

KEY = bytes(range(32))


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


def _whole(store, run_id):
    return build_view(view_index.header_info(store, run_id), store.read_log(run_id))


def _calls(run, first, last):
    for n in range(first, last):
        if n % 5 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")


class Held:
    """The backend's ``put_view_snapshot`` held until released; which threads and seqs it was called with."""

    def __init__(self, monkeypatch, store):
        self.backend = type(unwrap(store)[0])
        self.real = self.backend.put_view_snapshot
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []
        self.seqs: list[int] = []
        self.outcomes: list[str] = []
        monkeypatch.setattr(self.backend, "put_view_snapshot", lambda store, *a, **k: self._put(store, *a, **k))

    def _put(self, store, claim, data, *, seq):
        self.threads.append(threading.current_thread())
        self.seqs.append(seq)
        self.entered.set()
        self.release.wait(30)  # bounded: on code that writes inline, the call waits here, then the test fails
        try:
            self.real(store, claim, data, seq=seq)
        except Exception as exc:
            self.outcomes.append(type(exc).__name__)
            raise
        self.outcomes.append("written")


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 30)


def _open(kind, tmp_path, workspace, request):
    if kind == "postgres":
        return safepoint.open(request.getfixturevalue("fresh_url"), workspace=str(workspace))
    return safepoint.open(str(tmp_path / "store"), workspace=str(workspace), key=KEY if kind == "sealed" else None)


@pytest.mark.parametrize("kind", ["file", "sealed", "postgres"])
def test_calls_go_on_while_the_write_is_held_and_it_covers_exactly_what_was_handed(
    kind, small, tmp_path, workspace, monkeypatch, request
):
    tm = _open(kind, tmp_path, workspace, request)
    try:
        held = Held(monkeypatch, tm.store)
        handed: list[int] = []
        real_due = SnapshotWriter.due
        monkeypatch.setattr(SnapshotWriter, "due", lambda self, at: handed.append(at.seq) or real_due(self, at))
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 20)
        assert held.entered.wait(30)  # the first write is held in the store
        _calls(run, 20, 60)  # calls go on, each durable, past the next due point: no call waits for the write
        assert tm.store.view_snapshot_seq("r") is None
        assert all(thread is not threading.main_thread() for thread in held.threads)
        assert len(handed) >= 2 and len(held.seqs) == 1  # later due notes wait (coalesced) behind the one held
        monkeypatch.setattr(view_index, "due_after", lambda covered: 10**9)  # no more due notes
        _calls(run, 60, 65)  # the log goes on past the last position handed
        end = tm.store.log_position("r").seq
        held.release.set()
        assert run.session._snapshots.wait_idle(30)
        assert held.outcomes == ["written", "written"]  # the held one, then one for the newest position handed
        assert held.seqs == [handed[0], handed[-1]]
        covered = tm.store.view_snapshot_seq("r")
        assert covered == handed[-1] < end  # exactly the durable position handed, not the log's end
        snapshot = view_snapshot.decode(tm.store.read_view_snapshot("r"), view_index.header_info(tm.store, "r"))
        assert snapshot is not None and snapshot.last_seq == covered
        refused: list[str] = []
        assert view_index.read_view(tm.store, view_index.header_info(tm.store, "r"), refused) == _whole(tm.store, "r")
        assert refused == []
        run.close()
    finally:
        tm.close()


def test_close_abandons_a_held_write_and_the_late_write_is_refused(small, tmp_path, workspace, monkeypatch):
    monkeypatch.setattr(snapshot_writer, "CLOSE_WAIT", 0.2)
    tm = _open("file", tmp_path, workspace, None)
    try:
        held = Held(monkeypatch, tm.store)
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 20)
        assert held.entered.wait(30)
        writer = run.session._snapshots
        thread = writer._thread
        run.close()  # waits 0.2 s for the held write, abandons it, releases the claim
        assert tm.store.owner("r").released
        held.release.set()
        thread.join(30)
        assert not thread.is_alive()
        assert held.outcomes == ["StaleGenerationError"]  # the release fenced it off: nothing written
        assert tm.store.view_snapshot_seq("r") is None
        view = view_index.read_view(tm.store, view_index.header_info(tm.store, "r"))
        assert view == _whole(tm.store, "r") and view.ledger["c19"].status == "succeeded"
        again = tm.resume("r", tools=[noop])
        _calls(again, 20, 25)
        again.close()
        assert load_view(tm.store, "r").ledger["c24"].status == "succeeded"
    finally:
        tm.close()


def test_close_abandons_a_fold_at_its_next_pause(small, tmp_path, workspace, monkeypatch):
    """A write held in its fold (not yet at the store) stops there once the close stops waiting: no write at
    all, the snapshot in place stays."""
    monkeypatch.setattr(snapshot_writer, "CLOSE_WAIT", 0.2)
    monkeypatch.setattr(view_index, "PACE", 1)
    tm = _open("file", tmp_path, workspace, None)
    try:
        held = Held(monkeypatch, tm.store)
        held.release.set()  # the store's write is not held here: the fold is
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 20)
        assert run.session._snapshots.wait_idle(30) and set(held.outcomes) == {"written"}
        before, first = list(held.outcomes), tm.store.view_snapshot_seq("r")
        in_fold, go_on = threading.Event(), threading.Event()
        real_pause = SnapshotWriter._pause

        def pause(self):
            in_fold.set()
            go_on.wait(30)
            real_pause(self)

        monkeypatch.setattr(SnapshotWriter, "_pause", pause)
        _calls(run, 20, 60)
        assert in_fold.wait(30)
        thread = run.session._snapshots._thread
        run.close()
        go_on.set()
        thread.join(30)
        assert not thread.is_alive()
        assert held.outcomes == before and tm.store.view_snapshot_seq("r") == first
        assert view_index.read_view(tm.store, view_index.header_info(tm.store, "r")) == _whole(tm.store, "r")
    finally:
        tm.close()


@pytest.mark.parametrize("kind", ["file", "postgres"])
def test_a_takeover_while_a_write_is_held_refuses_it(kind, small, tmp_path, workspace, monkeypatch, request):
    tm = _open(kind, tmp_path, workspace, request)
    try:
        held = Held(monkeypatch, tm.store)
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 20)
        assert held.entered.wait(30)
        tm.store.claim("r", "another-process", takeover=True)  # the fence is lost mid-write
        held.release.set()
        assert run.session._snapshots.wait_idle(30)
        # the held write and the one its later due notes coalesced into: both refused, nothing written
        assert set(held.outcomes) == {"StaleGenerationError"} and tm.store.view_snapshot_seq("r") is None
        run.close()  # taken over: its close writes nothing either
        assert set(held.outcomes) == {"StaleGenerationError"} and tm.store.view_snapshot_seq("r") is None
        again = tm.resume("r", tools=[noop], takeover=True)
        _calls(again, 20, 25)
        again.close()
        view = view_index.read_view(tm.store, view_index.header_info(tm.store, "r"))
        assert view == _whole(tm.store, "r") and view.ledger["c24"].status == "succeeded"
    finally:
        tm.close()


def test_a_failing_write_fails_no_call_and_is_traced_once(small, tmp_path, workspace, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the snapshot's encoder broke")

    monkeypatch.setattr(view_index, "refresh", broken)
    tm = _open("file", tmp_path, workspace, None)
    try:
        run = tm.start("t", tools=[noop], run_id="r")
        for first in range(0, 100, 20):
            _calls(run, first, first + 20)
            assert run.session._snapshots.wait_idle(30)
        monkeypatch.undo()
        run.close()
        events = [msgspec.json.decode(line) for line in tm.store.read_trace("r")]
        failed = [event for event in events if event["event"] == "snapshot_write_failed"]
        assert len(failed) == 1 and "encoder broke" in failed[0]["data"]["error"]
        assert load_view(tm.store, "r").ledger["c99"].status == "succeeded"
    finally:
        tm.close()


def test_the_process_exit_stops_the_writer_without_waiting_for_a_held_write(small, tmp_path, workspace, monkeypatch):
    """A run never closed: at the process's exit (``atexit``) the writer stops taking due notes and a write in
    flight is waited for at most ``EXIT_WAIT``; the run's claim is untouched (the next owner judges it)."""
    monkeypatch.setattr(snapshot_writer, "EXIT_WAIT", 0.2)
    tm = _open("file", tmp_path, workspace, None)
    try:
        held = Held(monkeypatch, tm.store)
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 20)
        assert held.entered.wait(30)
        writer = run.session._snapshots
        snapshot_writer._stop_all()  # what ``atexit`` calls; returns though the write is still held
        assert writer._thread.is_alive() and writer._stopped
        _calls(run, 20, 60)  # the calls of a process past its exit hook hand nothing more over
        held.release.set()
        writer._thread.join(30)
        assert held.outcomes == ["written"] and len(held.seqs) == 1  # the held one, whole; nothing after it
        assert not tm.store.owner("r").released
        assert view_index.read_view(tm.store, view_index.header_info(tm.store, "r")) == _whole(tm.store, "r")
        run.close()
    finally:
        tm.close()


def test_an_idle_writer_s_thread_ends_and_the_next_due_starts_one(small, tmp_path, workspace, monkeypatch):
    """A writer's thread holds the session's store: idle past ``IDLE_S`` it ends (a session never closed would keep
    the store, and a PostgreSQL store's pool, for the process's life), and the next due note starts one that writes."""
    monkeypatch.setattr(snapshot_writer, "IDLE_S", 0.05)
    tm = _open("file", tmp_path, workspace, None)
    try:
        run = tm.start("t", tools=[noop], run_id="r")
        _calls(run, 0, 40)  # past the first due point (30 records)
        writer = run.session._snapshots
        first = writer._thread
        assert first is not None
        first.join(30)
        assert not first.is_alive() and writer._thread is None and writer not in snapshot_writer._live
        written = writer.written
        assert written >= 1
        _calls(run, 40, 120)
        assert writer.wait_idle(30)
        assert writer.written > written  # a new thread took the next due note and wrote
        run.close()
        assert load_view(tm.store, "r").last_seq == _whole(tm.store, "r").last_seq
    finally:
        tm.close()
