"""``safepoint gc``, ``label`` and ``forget`` (issue 10 §8): the retention policy, orphans, labels, live and
unfinished runs kept whole, a blob stored again while gc reads is kept, and the CLI."""

from __future__ import annotations

import json
import time

import pytest

import safepoint
from safepoint.core.hashing import content_hash
from safepoint.errors import RunLockedError, SafepointError, UnknownReferenceError
from safepoint.lifecycle import forget, gc, label, labels
from safepoint.store.fsck import fsck

from .conftest import safepoint_in_process
from .store_runs import finished_run as _finished_run
from .store_runs import text_of as _text


@pytest.fixture
def tm(tmp_path, workspace):
    opened = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    yield opened
    opened.close()


def test_gc_frees_what_no_kept_checkpoint_needs_and_rollback_to_a_kept_one_is_exact(tm, workspace):
    versions = [_text(seed) for seed in range(6)]
    (workspace / "big.txt").write_text(_text(99))
    (workspace / "log.txt").write_text(_text(98))
    after = _finished_run(tm, "r", versions, also="log.txt")
    log_at = {step: (workspace / "log.txt").read_text().splitlines()[: 2000 + step + 1] for step in range(6)}
    before = tm.store.list_blobs()
    dry = gc(tm.store, keep=2, dry_run=True)
    assert dry.freed_blobs > 0 and dry.freed_bytes > 0 and tm.store.list_blobs() == before  # said, not done
    done = gc(tm.store, keep=2)
    assert (done.freed_blobs, done.freed_bytes) == (dry.freed_blobs, dry.freed_bytes)
    assert done.whole_versions == 2  # the files as they were at the oldest kept checkpoint, so their past can go
    assert len(tm.store.list_blobs()) == len(before) - done.freed_blobs + done.whole_versions
    assert done.freed_blobs >= len(before) - 4  # all but the newest versions' patches
    [run] = done.runs
    assert run.freed_blobs == done.freed_blobs and run.pruned_checkpoints and not run.kept_whole
    assert fsck(tm.store, None, repair=False).clean  # freed by gc is not lost
    assert gc(tm.store, keep=2).freed_blobs == 0  # nothing more to free
    tm.rollback_files("r", after[-2])
    assert (workspace / "big.txt").read_text() == versions[-2]
    assert (workspace / "log.txt").read_text().splitlines() == log_at[4]
    calls = len(tm.ledger("r"))
    with pytest.raises(UnknownReferenceError, match="not kept by `safepoint gc`"):
        tm.rollback_files("r", after[0])
    with pytest.raises(UnknownReferenceError, match="not kept by `safepoint gc`"):
        tm.restore_session("r", after[0])
    assert len(tm.ledger("r")) == calls  # refused before anything was recorded


def test_a_labelled_checkpoint_is_kept(tm, workspace):
    versions = [_text(seed) for seed in range(10, 15)]
    (workspace / "big.txt").write_text(_text(98))
    after = _finished_run(tm, "r", versions)
    done = label(tm.store, "r", after[0], "before the refactor")
    assert done.checkpoint_id == after[0] and labels(tm.store, "r") == {after[0]: ["before the refactor"]}
    assert label(tm.store, "r", "step:2", "two").checkpoint_id in {c.checkpoint_id for c in tm.checkpoints("r")}
    with pytest.raises(SafepointError):
        label(tm.store, "r", "ckpt_nope", "x")
    assert gc(tm.store, keep=1).freed_blobs > 0
    tm.rollback_files("r", after[0])
    assert (workspace / "big.txt").read_text() == versions[0]


def test_unfinished_and_live_runs_are_kept_whole(tm, workspace):
    (workspace / "big.txt").write_text(_text(97))
    with tm.start("t", run_id="live") as run:
        for number in range(4):
            run.step()
            run.call("write_file", {"path": "big.txt", "content": _text(20 + number)}, call_id=f"c{number}")
            run.checkpoint()
        run.finish("completed")
        done = gc(tm.store, keep=0)  # completed, but this process still owns it
        [live] = done.runs
        assert live.kept_whole and "owns it" in live.why_whole and done.freed_blobs == 0
    with tm.start("t", run_id="unfinished") as run:
        run.step()
        run.call("write_file", {"path": "big.txt", "content": _text(30)}, call_id="c1")
    done = gc(tm.store, keep=0)
    whole = {run.run_id: run.why_whole for run in done.runs if run.kept_whole}
    assert "not finished" in whole["unfinished"] and "live" not in whole


def test_a_blob_no_run_references_is_freed_unless_stored_again_while_gc_reads(tm, workspace):
    (workspace / "big.txt").write_text(_text(96))
    _finished_run(tm, "r", [_text(40)])
    orphan = _text(41).encode()
    from safepoint.core.blobs import stored_form

    name = tm.store.blob_name(content_hash(orphan))
    tm.store.put_blobs([(name, stored_form(orphan)[1])])  # what a crash between a put and its append leaves
    stored_again = []

    def progress(done, total):  # a writer stores it again while gc reads the runs: its reference is on its way
        if not stored_again:
            stored_again.append(tm.store.put_blobs([(name, stored_form(orphan)[1])]))

    kept = gc(tm.store, keep=5, progress=progress)
    assert name in tm.store.list_blobs() and kept.orphan_blobs == 0
    # gc frees what was last written before the clock it reads (the file system's, in coarse ticks): the next gc
    # must read a later tick than the one the blob was stored again in, or it rightly keeps it.
    touched = tm.store.blob_clock()
    while tm.store.blob_clock() <= touched:
        time.sleep(0.002)
    freed = gc(tm.store, keep=5)
    assert freed.orphan_blobs == 1 and name not in tm.store.list_blobs()
    assert fsck(tm.store, None, repair=False).clean


def test_forget_deletes_a_run_and_only_the_blobs_no_other_run_references(tm, workspace):
    shared = _text(50)
    (workspace / "big.txt").write_text(shared)
    _finished_run(tm, "a", [_text(51)])
    (workspace / "big.txt").write_text(shared)
    _finished_run(tm, "b", [_text(52)])
    before = set(tm.store.list_blobs())
    done = forget(tm.store, "a")
    assert tm.list_runs() == ["b"] and done.freed_blobs >= 1
    left = set(tm.store.list_blobs())
    assert left < before and tm.store.blob_name(content_hash(shared.encode())) in left  # b's before-version
    assert fsck(tm.store, None, repair=False).clean
    with tm.start("t", run_id="c") as run:
        with pytest.raises(RunLockedError, match="--force"):
            forget(tm.store, "c")
        run.step()
    forget(tm.store, "c", force=True)
    assert tm.list_runs() == ["b"]


def test_the_cli_gc_label_and_forget(tm, workspace, tmp_path):
    (workspace / "big.txt").write_text(_text(60))
    after = _finished_run(tm, "r", [_text(61), _text(62), _text(63)])
    where = ["--store", str(tmp_path / "store"), "-w", str(workspace)]
    labelled = safepoint_in_process("label", "r", after[0], "keep me", *where, "--json")
    assert labelled.returncode == 0, labelled.stderr
    assert json.loads(labelled.stdout)["checkpoint_id"] == after[0]
    dry = safepoint_in_process("gc", "--dry-run", "--keep", "0", *where, "--json")
    assert dry.returncode == 0, dry.stderr
    said = json.loads(dry.stdout)
    assert said["dry_run"] and said["freed_blobs"] >= 1
    done = safepoint_in_process("gc", "--keep", "0", *where)
    assert done.returncode == 0 and f"freed {said['freed_blobs']} blobs" in done.stdout, done.stdout
    unknown = safepoint_in_process("forget", "nope", *where)
    assert unknown.returncode != 0 and "nope" in unknown.stderr and "Traceback" not in unknown.stderr
    gone = safepoint_in_process("forget", "r", *where)
    assert gone.returncode == 0 and "forgotten" in gone.stdout
    assert tm.list_runs() == []


@pytest.mark.parametrize("where", ["postgres", "encrypted"])
def test_gc_and_forget_on_postgres_and_on_an_encrypted_store(where, request, tmp_path, workspace):
    if where == "postgres":
        opened = safepoint.open(request.getfixturevalue("fresh_url"), workspace=str(workspace))
    else:
        opened = safepoint.open(str(tmp_path / "sealed"), workspace=str(workspace), key=bytes(range(32)))
    try:
        versions = [_text(seed) for seed in range(70, 74)]
        (workspace / "big.txt").write_text(_text(69))
        after = _finished_run(opened, "r", versions)
        done = gc(opened.store, keep=2)  # the last step's two boundaries: a rollback to its start is kept
        assert done.freed_blobs >= 2 and done.whole_versions == 1
        assert opened.fsck().clean
        opened.rollback_files("r", after[-2])
        assert (workspace / "big.txt").read_text() == versions[-2]
        assert forget(opened.store, "r").freed_blobs >= 1
        assert opened.list_runs() == [] and opened.store.list_blobs() == {}
    finally:
        opened.close()


def test_without_whole_versions_a_kept_checkpoint_keeps_the_whole_chain_of_patches(tm, workspace):
    """The rules alone (no rebasing): a rollback to the oldest kept checkpoint rebuilds its file from the run's
    first version through every patch, so none of them may go; with the version stored whole, all of them may."""
    from safepoint.core.retention import rebase_targets, retention
    from safepoint.engine.session import load_view

    (workspace / "big.txt").write_text(_text(90))
    _finished_run(tm, "r", [_text(seed) for seed in range(91, 97)])
    view = load_view(tm.store, "r")
    plain = retention(view, keep=2)
    assert plain.prunable == frozenset() and len(plain.needed) == 7
    [(index, digest)] = rebase_targets(view, keep=2)
    assert index == 5 and digest == view.patches[5].before_hash
    rebased = retention(view, keep=2, rebased=frozenset({digest}))
    assert rebased.needed == {digest, view.patches[5].patch_ref.removeprefix("blob:")}
