"""The view snapshot written while the run goes on (``store.view_index.due_after``), not only at close: a run
killed mid-way (the crash a resume is for) is opened from a snapshot of most of its log and the few records after
it; the writes stay amortised (each one a quarter more of the log than the last, at least ``SNAPSHOT_EVERY``);
a SIGKILL at the background writer's snapshot write, on both stores, resumes as from the log (the writer itself:
``test_snapshot_writer_background.py``)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

import safepoint
from safepoint.core.run_view import build_view
from safepoint.engine.session import load_view
from safepoint.engine.tools import tool
from safepoint.store import view_index
from safepoint.store.sealed import unwrap

from .conftest import cli_env


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


def _whole(store, run_id):
    return build_view(view_index.header_info(store, run_id), store.read_log(run_id))


def test_due_after_keeps_the_tail_short_whatever_the_run_s_length(monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 100)
    assert view_index.due_after(0) == 100
    assert view_index.due_after(100) == 200
    # a run of 1,000,000 records leaves a resume at most SNAPSHOT_EVERY records to fold after its snapshot (the
    # growth rule this replaced let the tail grow to a quarter of the run)
    assert view_index.due_after(1_000_000) == 1_000_100


@pytest.mark.parametrize("sealed", [False, True])
def test_a_run_that_never_closed_opens_from_its_writers_snapshot(sealed, tmp_path, workspace, monkeypatch):
    """No close (its process died): the snapshot its writer wrote on the way covers most of the log; an open
    reads it and the records after it, never the whole log, and sees what the whole log says."""
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 30)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace), key=bytes(range(32)) if sealed else None)
    try:
        store = tm.store
        written: list[int] = []
        real = view_index.refresh

        def counting(*args, **kwargs):
            found = real(*args, **kwargs)
            if found:
                written.append(store.view_snapshot_seq("r") or 0)
            return found

        monkeypatch.setattr(view_index, "refresh", counting)
        run = tm.start("t", tools=[noop], run_id="r")
        for n in range(80):
            if n % 5 == 0:
                run.step()
            run.call("noop", {"n": n}, call_id=f"c{n}")
        # not closed: as a SIGKILL leaves it (once the background writer is done with what it was handed)
        assert run.session._snapshots.wait_idle(60)
        end = store.log_position("r").seq
        covered = store.view_snapshot_seq("r")
        assert covered is not None and end - covered < view_index.due_after(covered) - covered + 10
        # each write came once the log grew by the rule's amount (amortised), never at every group
        assert all(b >= view_index.due_after(a) for a, b in itertools.pairwise(written))
        assert len(written) < end // 30
        backend = type(unwrap(store)[0])
        reads: list[str] = []
        whole_read = backend.read_log
        monkeypatch.setattr(backend, "read_log", lambda self, run_id: reads.append(run_id) or whole_read(self, run_id))
        refused: list[str] = []
        view = view_index.read_view(store, view_index.header_info(store, "r"), refused)
        assert reads == [] and refused == []
        monkeypatch.undo()
        assert view == _whole(store, "r")
        assert view.ledger["c79"].status == "succeeded"
        run.close()
    finally:
        tm.close()


CHILD = r"""
import os, signal, sys, threading
import safepoint
from safepoint.engine.tools import tool
from safepoint.store import view_index
from safepoint.store.sealed import unwrap
view_index.SNAPSHOT_EVERY = 30
@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"
tm = safepoint.open(sys.argv[1], workspace=sys.argv[2])
backend = type(unwrap(tm.store)[0])
writes = []
def killed_third(seq):
    writes.append(seq)
    if len(writes) == 3:
        # the writes are the background writer's, the run's calls go on meanwhile on the main thread
        print(writes[:2], threading.current_thread() is not threading.main_thread(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
if hasattr(backend, "_place_view_snapshot_txn"):  # the file store: staged and fsync'd, renamed under the lock
    real_place = backend._place_view_snapshot_txn
    def place(self, staged, path):
        if sys.argv[3] == "staged":  # the third: fsync'd beside its place, not renamed (an abandoned write)
            with open(staged, "rb") as handle:
                seq = int(handle.readline().split()[3])
            if len(writes) == 2:
                killed_third(seq)
        real_place(self, staged, path)  # renamed, its folder not fsync'd
        with open(path, "rb") as handle:
            killed_third(int(handle.readline().split()[3]))
    backend._place_view_snapshot_txn = place
else:
    real = backend._put_view_snapshot_txn
    def put(self, handle, run_id, data, seq):
        real(self, handle, run_id, data, seq)  # PostgreSQL: written, its transaction not committed
        killed_third(seq)
    backend._put_view_snapshot_txn = put
run = tm.start("t", tools=[noop], run_id="r")
for n in range(200):
    if n % 5 == 0:
        run.step()
    run.call("noop", {"n": n}, call_id=f"c{n}")
"""


@pytest.mark.parametrize(("backend", "at"), [("file", "placed"), ("file", "staged"), ("postgres", "uncommitted")])
def test_killed_at_a_snapshots_write_resumes_as_from_the_log(backend, at, tmp_path, workspace, request):
    """SIGKILL in the middle of the background writer's third snapshot (mid-run, the run never closed, its calls
    going on): the open uses the snapshot the store kept (the second: PostgreSQL's transaction uncommitted, the
    file store's third staged and not renamed; or the file store's third, renamed into place) and sees what the
    whole log says; the resume takes the run over and goes on, every call before the kill kept."""
    store = request.getfixturevalue("fresh_url") if backend == "postgres" else str(tmp_path / "store")
    command = [sys.executable, "-c", CHILD, store, str(workspace), at]
    killed = subprocess.run(command, env=cli_env(), capture_output=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    seqs, background = killed.stdout.decode().strip().rsplit(" ", 1)
    second = eval(seqs)[1]  # the seqs of the first two, committed
    assert background == "True"
    tm = safepoint.open(store, workspace=str(workspace))
    try:
        covered = tm.store.view_snapshot_seq("r")
        assert covered is not None and covered >= second
        if at != "placed":
            assert covered == second
        refused: list[str] = []
        view = view_index.read_view(tm.store, view_index.header_info(tm.store, "r"), refused)
        assert refused == []
        assert view == _whole(tm.store, "r")
        made = sorted(int(c[1:]) for c in view.ledger)
        assert made == list(range(len(made))) and len(made) > 10
        run = tm.resume("r", tools=[noop], takeover=True)
        run.step()
        run.call("noop", {"n": 999}, call_id="c999")
        run.close()
        after = load_view(tm.store, "r")
        assert after == _whole(tm.store, "r")
        assert all(after.ledger[f"c{n}"].status == "succeeded" for n in [*made[:-1], 999])
    finally:
        tm.close()


def test_a_write_up_to_a_position_covers_exactly_that_and_pauses(tmp_path, workspace, monkeypatch):
    """``refresh(upto=...)`` (a background writer's: the position of a group known durable) folds the log up to
    there and no further, from the writer's kept fold too, and calls ``pause`` as it folds."""
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 10**9)  # no write but the ones asked for here
    monkeypatch.setattr(view_index, "PACE", 8)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    run = tm.start("t", tools=[noop], run_id="r")
    store, claim, info = tm.store, run.session.claim, run.session.info
    positions = []
    for n in range(60):
        run.call("noop", {"n": n}, call_id=f"c{n}")
        if n in (20, 40):
            positions.append(store.log_position("r"))
    paused: list[int] = []
    for position in positions:  # the second one from the fold the first kept
        assert view_index.refresh(store, claim, info, every=0, upto=position, pause=lambda: paused.append(1))
        assert store.view_snapshot_seq("r") == position.seq
    assert paused
    view = load_view(store, "r")
    assert view == _whole(store, "r") and view.last_seq == store.log_position("r").seq
    run.close()
    tm.close()
