"""The view snapshot in the stores (``store.view_index``): the owner writes it at close once enough records came
since the last one (fenced), an open reads it and the log after it (not the log), and gives the view the whole
log gives; a damaged or stale snapshot is refused (said) and the whole log read; a process killed right after
writing one, or before, resumes as from the log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import safepoint
from safepoint.core.run_view import build_view
from safepoint.engine.session import load_view
from safepoint.engine.tools import tool
from safepoint.errors import StaleGenerationError
from safepoint.store import view_index
from safepoint.store.sealed import unwrap

from .conftest import cli_env
from .store_runs import open_kind

KEY = bytes(range(32))


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


@pytest.fixture(params=["file", "file-sealed", "postgres"])
def opened(request, tmp_path, workspace, monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 30)
    tm = open_kind(request, tmp_path, workspace)
    yield tm
    tm.close()


def _run(tm, run_id, calls, first=0, *, resume=False):
    run = tm.resume(run_id, tools=[noop]) if resume else tm.start("t", tools=[noop], run_id=run_id)
    for n in range(first, first + calls):
        if n % 5 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.close()


def _reads(monkeypatch, store):
    """The whole-log reads of the backend under ``store``."""
    backend = type(unwrap(store)[0])
    read: list[str] = []
    real = backend.read_log

    def counting(self, run_id):
        read.append(run_id)
        return real(self, run_id)

    monkeypatch.setattr(backend, "read_log", counting)
    return read


def _whole(store, run_id):
    return build_view(view_index.header_info(store, run_id), store.read_log(run_id))


def test_an_open_reads_the_snapshot_and_the_log_after_it(opened, monkeypatch):
    store = opened.store
    _run(opened, "r", 2)
    assert store.read_view_snapshot("r") is None  # too few records for one
    _run(opened, "r", 24, first=2, resume=True)
    assert store.read_view_snapshot("r") is not None
    _run(opened, "r", 3, first=26, resume=True)  # a few records after it
    reads = _reads(monkeypatch, store)
    refused: list[str] = []
    view = view_index.read_view(store, view_index.header_info(store, "r"), refused)
    assert reads == [] and refused == []
    monkeypatch.undo()
    assert view == _whole(store, "r")
    assert view.ledger["c28"].status == "succeeded"


def test_a_damaged_or_stale_snapshot_is_refused_and_the_log_read(tmp_path, workspace, monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 30)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        _run(tm, "r", 26)
        path = os.path.join(tm.store.run_dir("r"), "view_snapshot.bin")
        good = Path(path).read_bytes()
        whole = _whole(tm.store, "r")
        with open(path, "r+b") as handle:  # a flipped byte
            handle.seek(len(good) - 30)
            handle.write(b"\xff")
        assert tm.store.read_view_snapshot("r") is None
        assert load_view(tm.store, "r") == whole
        with open(path, "wb") as handle:  # torn
            handle.write(good[: len(good) // 2])
        assert load_view(tm.store, "r") == whole
        # the log rewritten under it: the record it ends at is not the one it names any more
        with open(path, "wb") as handle:
            handle.write(good)
        log = os.path.join(tm.store.run_dir("r"), "ledger.jsonl")
        data = Path(log).read_bytes()
        lines = data.split(b"\n")
        with open(log, "wb") as handle:  # the first record gone: every offset after it moves
            handle.write(b"\n".join(lines[1:]))
        refused: list[str] = []
        view = view_index.read_view(tm.store, view_index.header_info(tm.store, "r"), refused)
        assert refused and "no longer holds" in refused[0]
        assert view == _whole(tm.store, "r")
        assert view.problems  # the hole the edit made is reported, as by a whole read
    finally:
        tm.close()


def test_a_stale_owner_cannot_write_a_snapshot(opened):
    store = opened.store
    _run(opened, "r", 4)
    old = store.claim("r", "one")
    store.claim("r", "two", takeover=True)
    with pytest.raises(StaleGenerationError):
        store.put_view_snapshot(old, b"anything", seq=1)
    assert store.read_view_snapshot("r") is None


CHILD = r"""
import sys
from pathlib import Path
import safepoint
from safepoint.engine import failpoints
from safepoint.engine.tools import tool
from safepoint.store import view_index
view_index.SNAPSHOT_EVERY = 30
view_index.due_after = lambda covered: 10**9  # the close's snapshot (the writer's own: test_snapshot_writer.py)
real = view_index.refresh
def refresh(*args, **kwargs):
    if sys.argv[3] == "before_snapshot":
        failpoints.hit("before_snapshot")
    written = real(*args, **kwargs)
    failpoints.hit("after_snapshot")
    return written
view_index.refresh = refresh
@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"
tm = safepoint.open(sys.argv[1], workspace=sys.argv[2])
run = tm.start("t", tools=[noop], run_id="r")
for n in range(26):
    if n % 5 == 0:
        run.step()
    run.call("noop", {"n": n}, call_id=f"c{n}")
run.close()
"""


@pytest.mark.parametrize("point", ["before_snapshot", "after_snapshot"])
@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_killed_before_or_after_the_snapshot_resumes_as_from_the_log(point, backend, tmp_path, workspace, request):
    """SIGKILL with the log durable and no snapshot yet, or with the snapshot durable and the run not released:
    the resume takes the run over and continues as from the log, and the view stays the whole log's."""
    store = request.getfixturevalue("fresh_url") if backend == "postgres" else str(tmp_path / "store")
    env = dict(cli_env(), SAFEPOINT_FAILPOINT=point)
    killed = subprocess.run([sys.executable, "-c", CHILD, store, str(workspace), point], env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    tm = safepoint.open(store, workspace=str(workspace))
    try:
        assert (tm.store.read_view_snapshot("r") is not None) == (point == "after_snapshot")
        assert load_view(tm.store, "r") == _whole(tm.store, "r")
        run = tm.resume("r", tools=[noop], takeover=True)
        run.step()
        run.call("noop", {"n": 99}, call_id="c99")
        run.close()
        view = load_view(tm.store, "r")
        assert view == _whole(tm.store, "r")
        assert [view.ledger[f"c{n}"].status for n in (0, 25, 99)] == ["succeeded"] * 3
    finally:
        tm.close()
