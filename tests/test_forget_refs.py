"""``forget RUN`` reads that run alone (issue 10): which of its blobs to free comes from the store's marks of who
references each blob (``store.blob_refs``), kept by ``append`` itself. On both stores and encrypted: a blob
another run references survives, even one whose reference came by a copied record (never through
``put_blobs``); a store without complete marks is read whole once, then marked; a forget killed between its
steps frees nothing referenced, and gc collects what it left."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import msgspec
import pytest

import safepoint
from safepoint.engine import failpoints
from safepoint.lifecycle import forget, gc
from safepoint.store.fsck import fsck

from .conftest import cli_env
from .store_runs import KINDS, open_kind
from .store_runs import finished_run as _run
from .store_runs import text_of as _text


@pytest.fixture(params=KINDS)
def opened(request, tmp_path, workspace):
    tm = open_kind(request, tmp_path, workspace)
    yield tm
    tm.close()


def _counting_reads(monkeypatch):
    """The runs whose log is read (at the store: however the reader got there)."""
    from safepoint.store.file_store import FileStore
    from safepoint.store.postgres import PostgresStore

    read: list[str] = []
    for cls in (FileStore, PostgresStore):
        real = cls.read_log

        def counting(self, run_id, _real=real):
            read.append(run_id)
            return _real(self, run_id)

        monkeypatch.setattr(cls, "read_log", counting)
    return read


def test_forget_reads_the_forgotten_run_alone_and_keeps_what_others_share(opened, workspace, monkeypatch):
    shared = _text(1)
    (workspace / "big.txt").write_text(_text(2))
    _run(opened, "a", [shared, _text(3)])
    (workspace / "big.txt").write_text(_text(2))
    after_b = _run(opened, "b", [shared, _text(4)])
    for number in range(4):
        _run(opened, f"other{number}", [_text(10 + number)], path=f"other{number}.txt")
    blobs_before = set(opened.store.list_blobs())
    read = _counting_reads(monkeypatch)
    done = forget(opened.store, "a")
    assert set(read) == {"a"}, read
    assert done.freed_blobs > 0  # its own version 3 is freed ...
    left = set(opened.store.list_blobs())
    assert left < blobs_before
    monkeypatch.undo()
    opened.rollback_files("b", after_b[0])  # ... the version b shares with it is not
    assert (workspace / "big.txt").read_text() == shared
    assert fsck(opened.store, None, repair=False).clean
    # forgetting b then frees the shared version: nobody references it any more
    forget(opened.store, "b")
    assert len(opened.store.list_blobs()) < len(left)
    assert fsck(opened.store, None, repair=False).clean


def test_a_reference_copied_into_another_run_keeps_the_blob(opened, workspace):
    """A record copied from one run's log into another (how a LangGraph thread is copied) references the blob
    without ever storing it: the copy's append marks it, so forgetting the source keeps it."""
    store = opened.store
    (workspace / "big.txt").write_text(_text(20))
    after = _run(opened, "src", [_text(21)])
    info = msgspec.json.decode(store.run_header("src"))
    info["run_id"] = "copy"
    store.create_run("copy", msgspec.json.encode(info))
    claim = store.claim("copy", "copier")
    store.append(claim, [msgspec.structs.replace(r, gen=claim.generation) for r in store.read_log("src").records])
    store.release(claim)
    before = set(store.list_blobs())
    assert forget(store, "src").freed_blobs == 0
    assert set(store.list_blobs()) == before
    opened.rollback_files("copy", after[0])
    assert (workspace / "big.txt").read_text() == _text(21)


def test_a_store_without_complete_marks_is_read_whole_once_then_marked(tmp_path, workspace, monkeypatch):
    """A store written before marks were kept: forget reads every run (as before), completes the marks, and the
    next forget reads one run."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        shared = _text(30)
        after = {}
        for run_id in ("a", "b", "c"):
            (workspace / "big.txt").write_text(_text(31))
            after[run_id] = _run(tm, run_id, [shared, _text(ord(run_id))])
        shutil.rmtree(os.path.join(tm.store.root, "blob_refs"))  # as an older safepoint left it
        read = _counting_reads(monkeypatch)
        forget(tm.store, "a")
        assert set(read) == {"a", "b", "c"}
        read.clear()
        forget(tm.store, "b")
        assert set(read) == {"b"}
        monkeypatch.undo()
        tm.rollback_files("c", after["c"][0])  # what c shares with a and b is kept
        assert (workspace / "big.txt").read_text() == shared
        assert fsck(tm.store, None, repair=False).clean
    finally:
        tm.close()


def _stored(store, run_id):
    from safepoint.engine.session import load_view

    return {store.blob_name(digest) for digest, blob in load_view(store, run_id).blobs.items() if blob.stored}


@pytest.mark.parametrize("point", failpoints.FORGET_POINTS)
@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_forget_killed_between_its_steps_frees_nothing_referenced(point, backend, tmp_path, workspace, request):
    """SIGKILL after the run's deletion, or after its marks are dropped: the blob another run shares is there,
    the forgotten run's own are left for gc, and gc frees them (its marks swept)."""
    store = request.getfixturevalue("fresh_url") if backend == "postgres" else str(tmp_path / "store")
    tm = safepoint.open(store, workspace=str(workspace))
    shared = _text(40)
    (workspace / "big.txt").write_text(_text(41))
    _run(tm, "a", [shared, _text(42)])
    (workspace / "big.txt").write_text(_text(41))
    after_b = _run(tm, "b", [shared, _text(43)])
    own = _stored(tm.store, "a") - _stored(tm.store, "b")
    assert own
    tm.close()
    command = [sys.executable, "-m", "safepoint", "forget", "a", "--store", store, "-w", str(workspace)]
    killed = subprocess.run(command, env=dict(cli_env(), SAFEPOINT_FAILPOINT=point), capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    tm = safepoint.open(store, workspace=str(workspace))
    try:
        assert tm.store.list_runs() == ["b"]
        assert own <= set(tm.store.list_blobs())  # killed before it freed anything
        assert fsck(tm.store, None, repair=False).clean
        gc(tm.store, keep=5)
        assert not own & set(tm.store.list_blobs())  # gc collects what the killed forget left
        if backend == "file":  # and the deleted run's marks
            assert not any(os.path.exists(tm.store._refs_folder(name)) for name in own)
        tm.rollback_files("b", after_b[0])
        assert (workspace / "big.txt").read_text() == shared
        assert forget(tm.store, "b").freed_blobs > 0  # the marks still answer after the sweep
    finally:
        tm.close()
