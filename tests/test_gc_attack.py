"""Attacks on the storage lifecycle (issue 10 §2, §8): what a user, a crash or a hostile store does beside the
paths gc, forget and fsck were tested on. A blob fsck quarantined comes back when its content is stored again (on
PostgreSQL too), and each quarantined copy is kept; a blob file replaced by a folder or a symlink is damage fsck
reports and sets aside, never a traceback nor a file read through the link; a reference appended without its
blob in the store is refused, and one appended while gc or forget decides keeps its blob."""

from __future__ import annotations

import os
import time

import msgspec
import pytest

import safepoint
from safepoint.core.blobs import open_stored
from safepoint.errors import UnknownReferenceError
from safepoint.lifecycle import forget, gc, label, labels
from safepoint.store.fsck import fsck

from .store_runs import KEY, KINDS, open_kind
from .store_runs import finished_run as _run
from .store_runs import text_of as _text


@pytest.fixture(params=KINDS)
def opened(request, tmp_path, workspace):
    tm = open_kind(request, tmp_path, workspace)
    yield tm
    tm.close()


def _stored(store, run_id):
    from safepoint.engine.session import load_view

    return {store.blob_name(digest) for digest, blob in load_view(store, run_id).blobs.items() if blob.stored}


def _damage(store, name):
    """Flip a byte of a stored blob, whichever store holds it."""
    from safepoint.store.sealed import unwrap

    backend = unwrap(store)[0]
    if hasattr(backend, "_blob_path"):
        path = backend._blob_path(name)
        with open(path, "r+b") as handle:
            data = bytearray(handle.read())
            data[len(data) // 2] ^= 0x01
            handle.seek(0)
            handle.write(bytes(data))
    else:
        import psycopg

        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("UPDATE safepoint.blobs SET data = overlay(data PLACING 'X' FROM 40) WHERE name = %s", (name,))


def test_a_quarantined_blob_comes_back_when_its_content_is_stored_again(opened, workspace):
    """fsck --repair sets a damaged blob aside; a later run that writes the same content stores it again, and its
    rollback restores it (before: on PostgreSQL the row stayed flagged, so the new run's version was lost the
    moment it was written). Each quarantined copy is kept, a second one beside the first (before: the file store
    renamed the second over the first)."""
    content = _text(1)
    (workspace / "big.txt").write_text(content)
    _run(opened, "a", ["x\n"])
    [name] = _stored(opened.store, "a")
    for round_ in range(2):
        _damage(opened.store, name)
        found = fsck(opened.store, None, repair=False).problems
        assert found and {p.file for p in found} == {"blobs"}
        assert opened.store.quarantine_blob(name)  # what `fsck --repair` does with it
        (workspace / "big.txt").write_text(content)
        with opened.start("t", run_id=f"b{round_}") as run:
            start = run.checkpoint()
            run.call("write_file", {"path": "big.txt", "content": "y\n"}, call_id="c1")
            run.finish("completed")
        assert open_stored(opened.store.get_blob(name) or b"", _digest(content)) == content.encode()
        assert fsck(opened.store, None, repair=False).clean  # run a's version is whole again too
        opened.rollback_files(f"b{round_}", start)
        assert (workspace / "big.txt").read_text() == content
    assert _quarantined(opened.store) == 2  # both damaged copies kept for a person


def _digest(content: str) -> str:
    from safepoint.core.hashing import content_hash

    return content_hash(content.encode())


def _quarantined(store) -> int:
    from safepoint.store.sealed import unwrap

    backend = unwrap(store)[0]
    if hasattr(backend, "_blob_path"):
        return len(os.listdir(os.path.join(backend.root, "blobs", "quarantine")))
    import psycopg

    with psycopg.connect(backend.url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM safepoint.blobs WHERE quarantined").fetchone()
    return int(row[0])


@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("shape", ["folder", "symlink"])
def test_a_blob_file_replaced_by_a_folder_or_a_symlink_is_damage_fsck_sets_aside(shape, key, tmp_path, workspace):
    """Before: a folder at a blob's place made fsck, gc and every read fail with a traceback (IsADirectoryError),
    and a symlink was read (and touched) through, whatever it pointed at."""
    from safepoint.store.sealed import unwrap

    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace), key=key)
    try:
        content = _text(2)
        (workspace / "big.txt").write_text(content)
        with tm.start("t", run_id="r") as run:
            start = run.checkpoint()
            run.call("write_file", {"path": "big.txt", "content": "x\n"}, call_id="c1")
            run.finish("completed")
        [name] = _stored(tm.store, "r")
        path = unwrap(tm.store)[0]._blob_path(name)
        os.unlink(path)
        outside = tmp_path / "elsewhere"
        if shape == "folder":
            os.mkdir(path)
            (tmp_path / "inner").write_text("x")
            os.rename(tmp_path / "inner", os.path.join(path, "inner"))
        else:
            outside.write_text(content)  # even the right content: the store's blob is its own file
            os.symlink(outside, path)
        [found] = fsck(tm.store, None, repair=False).problems
        assert found.file == "blobs" and "damaged" in found.problem
        done = gc(tm.store, keep=5)
        assert not done.refused and os.path.lexists(path)  # a kept checkpoint needs it: left for fsck
        tm.rollback_files("r", start)  # plans around it: says it cannot restore, never a traceback
        assert (workspace / "big.txt").read_text() == "x\n"
        (workspace / "big.txt").write_text(content)
        with tm.start("t", run_id="again") as run:  # the content stored again takes its place, as a file
            again = run.checkpoint()
            run.call("write_file", {"path": "big.txt", "content": "y\n"}, call_id="c1")
            run.finish("completed")
        assert os.path.isfile(path) and not os.path.islink(path)
        assert fsck(tm.store, None, repair=False).clean  # run r's version is whole again too
        tm.rollback_files("again", again)
        assert (workspace / "big.txt").read_text() == content
        if shape == "symlink":
            assert outside.read_text() == content  # never written through
    finally:
        tm.close()


def test_a_reference_copied_into_a_run_while_gc_reads_keeps_its_blob(opened, workspace):
    """A record copied from one run's log into another (a LangGraph thread's copy) references a blob without
    storing it. Copied while gc reads the runs (after it read the copy's log, before it removes), the blob gc was
    freeing as the source's old version is kept: the copy's append moves its time of writing past gc's clock.
    Before, gc removed it and the copy's rollback could not restore the file."""
    store = opened.store
    (workspace / "big.txt").write_text(_text(3))
    after = _run(opened, "src", [_text(4), _text(5), _text(6)])
    info = msgspec.json.decode(store.run_header("src"))
    info["run_id"] = "copy"
    store.create_run("copy", msgspec.json.encode(info))
    old = _stored(store, "src")
    copied = []
    read_copy = store.list_runs().index("copy") + 1  # gc's progress when it has read "copy" (empty)

    def progress(done, total):
        if done == read_copy and not copied:
            claim = store.claim("copy", "copier")
            with store.blobs_shared():
                store.append(
                    claim, [msgspec.structs.replace(r, gen=claim.generation) for r in store.read_log("src").records]
                )
            store.release(claim)
            copied.append(True)

    done = gc(store, keep=0, progress=progress)
    assert copied and done.freed_blobs == 0 and not done.refused
    assert old <= set(store.list_blobs())  # every blob the copy references is there
    opened.rollback_files("copy", after[0])
    assert (workspace / "big.txt").read_text() == _text(4)


@pytest.mark.parametrize("keep_again", [0, 5])
def test_a_run_restored_and_continued_after_gc_keeps_what_its_new_checkpoints_need(keep_again, tmp_path, workspace):
    """gc frees the chain of patches that led to a finished run's last versions. Restored and resumed, the run
    goes on from those versions: a new change is kept against a version it can rebuild (stored whole), a version
    equal to a freed one is rebuilt through what is still there, and a second gc keeps what a labelled new
    checkpoint needs. Before, the new change was kept as a patch against a version nothing could rebuild any
    more, and the rollback to the new checkpoint failed half way (LostContentError)."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "big.txt").write_text(_text(10))
        _run(tm, "r", [_text(11), _text(12), _text(13)])
        assert gc(tm.store, keep=1).freed_blobs
        last = tm.checkpoints("r")[-1].checkpoint_id
        tm.restore_session("r", last)
        with tm.resume("r") as run:
            run.step()
            run.call("write_file", {"path": "big.txt", "content": _text(11)}, call_id="d1")  # a freed version
            back = run.checkpoint()
            run.step()
            run.call("write_file", {"path": "big.txt", "content": _text(14)}, call_id="d2")
            run.checkpoint()
            run.finish("completed")
        label(tm.store, "r", back, "the revert")
        gc(tm.store, keep=keep_again)
        assert fsck(tm.store, None, repair=False).clean
        plan = tm.rollback_files("r", back)
        assert not plan.unrestorable
        assert (workspace / "big.txt").read_text() == _text(11)
    finally:
        tm.close()


def test_a_freed_version_stored_again_by_a_continued_run_is_kept_by_the_next_gc(opened, workspace):
    """The run's first version of a file is freed by gc; restored and resumed, the user puts that content back
    and the agent changes it: the version is stored again as the change's before-state, and the next gc keeps it
    for the new checkpoint (before: gc skipped every digest it had freed once, so it freed it again)."""
    tm = opened
    (workspace / "big.txt").write_text(_text(20))
    _run(tm, "r", [_text(21), _text(22)])
    assert gc(tm.store, keep=1).freed_blobs
    tm.restore_session("r", tm.checkpoints("r")[-1].checkpoint_id)
    (workspace / "big.txt").write_text(_text(20))  # the user's edit: the run's first version again
    with tm.resume("r") as run:
        run.step()
        back = run.checkpoint()
        run.call("write_file", {"path": "big.txt", "content": _text(23)}, call_id="d1")
        run.checkpoint()
        run.finish("completed")
    label(tm.store, "r", back, "before d1")
    touched = tm.store.blob_clock()
    while tm.store.blob_clock() <= touched:  # the next gc reads a later tick than the store-again's
        time.sleep(0.002)
    gc(tm.store, keep=0)
    assert fsck(tm.store, None, repair=False).clean
    plan = tm.rollback_files("r", back)
    assert not plan.unrestorable
    assert (workspace / "big.txt").read_text() == _text(20)


def test_a_label_is_one_short_line(tmp_path, workspace):
    """Before: a label of any length was taken (a megabyte label is read with every read of the run's control
    channel); one over 200 characters is refused in one line now, and nothing is recorded. (A control sequence is
    kept and shown inert: test_attack_i10.)"""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "big.txt").write_text(_text(30))
        [after] = _run(tm, "r", [_text(31)])
        for name in ("x" * 201, "x" * 1_000_000, " ", "a\nb"):
            with pytest.raises(UnknownReferenceError, match="one line of up to 200 characters") as refused:
                label(tm.store, "r", after, name)
            assert len(str(refused.value)) < 300
        assert labels(tm.store, "r") == {}
        label(tm.store, "r", after, "before the refactor — ok ✓" + "x" * 170)
        assert labels(tm.store, "r") == {after: ["before the refactor — ok ✓" + "x" * 170]}
    finally:
        tm.close()


def test_gc_frees_nothing_of_a_run_whose_record_it_could_not_write(tmp_path, workspace, monkeypatch):
    """gc says on a run's control channel which blobs it frees before it frees them (so fsck and rollback tell
    "freed" from "lost"). When that record cannot be written (a full disk), that run's blobs stay, and gc says
    so. Before, the failure was taken for "the run was deleted meanwhile" and the blobs went with no record:
    fsck then reported them lost."""
    from safepoint.errors import DiskFullError

    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "big.txt").write_text(_text(40))
        _run(tm, "r", [_text(41), _text(42), _text(43)])
        before = set(tm.store.list_blobs())
        real = type(tm.store).post_control

        def full(self, run_id, data, **kwargs):
            if b"gc_pruned" in data:
                raise DiskFullError(f"no space left on the disk of store {self.url}; free space")
            return real(self, run_id, data, **kwargs)

        monkeypatch.setattr(type(tm.store), "post_control", full)
        done = gc(tm.store, keep=0)
        assert set(tm.store.list_blobs()) == before and done.freed_blobs == 0
        assert "no space left" in done.refused
        monkeypatch.undo()
        assert fsck(tm.store, None, repair=False).clean
        assert gc(tm.store, keep=0).freed_blobs  # once there is space
        assert fsck(tm.store, None, repair=False).clean
    finally:
        tm.close()


def test_a_lost_mark_is_found_by_fsck_and_marked_again(tmp_path, workspace):
    """The marks say which runs reference a blob, so forget reads the forgotten run alone. A mark deleted (by
    hand, or by a backup that skipped empty files) let forget of another run sharing the blob free it under the
    run that still needs it, and fsck said nothing. fsck reports it now and --repair marks it again."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        shared = _text(50)
        for run_id in ("a", "b"):
            (workspace / "big.txt").write_text(shared)
            with tm.start("t", run_id=run_id) as run:
                run.checkpoint()
                run.call("write_file", {"path": "big.txt", "content": f"{run_id}\n"}, call_id="c1")
                run.finish("completed")
        [name] = _stored(tm.store, "a") & _stored(tm.store, "b")
        os.unlink(os.path.join(tm.store._refs_folder(name), "a"))
        [found] = fsck(tm.store, None, repair=False).problems
        assert found.run_id == "a" and found.file == "blob_refs" and "forget" in found.problem
        [repaired] = fsck(tm.store, None, repair=True).problems
        assert repaired.repair == "marked again"
        assert fsck(tm.store, None, repair=False).clean
        forget(tm.store, "b")
        assert name in tm.store.list_blobs()
        start = tm.checkpoints("a")[0].checkpoint_id
        (workspace / "big.txt").write_text("a\n")  # as run a left it
        tm.rollback_files("a", start)
        assert (workspace / "big.txt").read_text() == shared
    finally:
        tm.close()


def test_dry_run_says_what_the_real_gc_then_does(tmp_path, workspace):
    """Every figure of `gc --dry-run` is the real gc's: what it frees, per run, and what the store keeps, with the
    whole versions it would store at the oldest kept checkpoints (before: left out of what is kept, so the dry run
    promised a smaller store than the real gc left)."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "big.txt").write_text(_text(60))
        _run(tm, "r", [_text(61 + n) for n in range(5)])
        (workspace / "big.txt").write_text(_text(70))
        _run(tm, "s", [_text(71)])
        dry = gc(tm.store, keep=2, dry_run=True)
        done = gc(tm.store, keep=2)
        assert done.whole_versions and done.freed_blobs
        assert msgspec.structs.replace(dry, dry_run=False) == done
    finally:
        tm.close()


def test_a_command_in_a_run_continued_after_gc_can_be_rolled_back(tmp_path, workspace):
    """gc freed how a file the run wrote early came to be (no kept checkpoint changes it since). The run is
    restored and resumed, and a command appends to that file: its before-state is kept, and a rollback puts it
    back. Before, the capture took the file for one the run could rebuild, recorded nothing of it, and the
    rollback said its content before the command "was not captured" (or failed half way, before the fix that
    stores such a version whole)."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "early.txt").write_text(_text(80))
        (workspace / "late.txt").write_text(_text(81))
        _run(tm, "r", [_text(82), _text(83)], path="early.txt")
        tm.restore_session("r", tm.checkpoints("r")[-1].checkpoint_id)
        with tm.resume("r") as run:
            for number in range(2):
                run.step()
                run.call("write_file", {"path": "late.txt", "content": _text(84 + number)}, call_id=f"l{number}")
                run.checkpoint()
            run.finish("completed")
        assert gc(tm.store, keep=1).freed_blobs
        tm.restore_session("r", tm.checkpoints("r")[-1].checkpoint_id)
        with tm.resume("r") as run:
            run.step()
            before = run.checkpoint()
            run.call("run_command", {"command": "printf 'appended\\n' >> early.txt"}, call_id="cmd")
            run.checkpoint()
            run.finish("completed")
        assert (workspace / "early.txt").read_text() == _text(83) + "appended\n"
        plan = tm.rollback_files("r", before)
        assert not plan.unrestorable
        assert (workspace / "early.txt").read_text() == _text(83)
    finally:
        tm.close()


def test_forget_while_a_writer_holds_the_blobs_lock_deletes_the_run_and_leaves_its_blobs_to_gc(
    tmp_path, workspace, monkeypatch
):
    """A writer between its blob write and its log append (stopped there) holds the blobs' lock; forget cannot
    free blobs meanwhile. It deletes the run and says its blobs are left to gc, which frees them once the writer
    goes on (before: the run was deleted, then forget failed with gc's message, as if it had done nothing)."""
    import safepoint.store.file_blobs as file_blobs

    monkeypatch.setattr(file_blobs, "CLAIM_LOCK_TIMEOUT", 0.2)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        (workspace / "big.txt").write_text(_text(90))
        _run(tm, "r", [_text(91)])
        own = _stored(tm.store, "r")
        with tm.store.blobs_shared():  # the stopped writer
            done = forget(tm.store, "r")
        assert done.freed_blobs == 0 and "gc" in done.left
        assert tm.store.list_runs() == [] and own <= set(tm.store.list_blobs())
        assert gc(tm.store, keep=3).orphan_blobs == len(own) and not own & set(tm.store.list_blobs())
    finally:
        tm.close()


def test_a_run_forgotten_while_gc_reads_does_not_stop_gc(tmp_path, workspace):
    """Only a record gc could not write stops it (above): a run forgotten after gc read it has nothing left to
    tell, and gc frees the others' blobs as before."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        for run_id, seed in (("a", 100), ("b", 110)):
            (workspace / "big.txt").write_text(_text(seed))
            _run(tm, run_id, [_text(seed + 1), _text(seed + 2), _text(seed + 3)])
        forgotten = []

        def progress(done, total):
            if done == total and not forgotten:  # every run read: one goes before gc records and frees
                forgotten.append(forget(tm.store, "a"))

        done = gc(tm.store, keep=0, progress=progress)
        assert forgotten and not done.refused and done.freed_blobs
        assert tm.store.list_runs() == ["b"] and fsck(tm.store, None, repair=False).clean
    finally:
        tm.close()


def test_gc_and_forget_while_another_process_is_between_its_blob_and_its_log_group(tmp_path, workspace, monkeypatch):
    """A real agent process stopped between storing a blob (the before-state run b stored first) and the log group
    that references it, holding the blobs' lock: forget of b deletes b and leaves the blob (said), gc waits and
    gives up in one line; nothing that process is about to reference is removed. Killed there and resumed, its run
    completes and rolls back exactly, and gc then removes nothing any log references."""
    import json
    import signal
    import subprocess
    import sys

    import safepoint.store.file_blobs as file_blobs
    from safepoint.errors import StoreError

    from .conftest import cli_env, wait_for

    monkeypatch.setattr(file_blobs, "CLAIM_LOCK_TIMEOUT", 0.3)
    store = str(tmp_path / "store")
    original = _text(120)
    (workspace / "big.txt").write_text(original)
    tm = safepoint.open(store, workspace=str(workspace))
    try:
        _run(tm, "b", [_text(121)])
        shared = _stored(tm.store, "b")
        (workspace / "big.txt").write_text(original)
        script = tmp_path / "s.json"
        turns = [{"tool_calls": [{"tool": "write_file", "args": {"path": "big.txt", "content": "new\n"}}]}]
        script.write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "done"}]}))
        marker = tmp_path / "paused"
        env = dict(cli_env(), SAFEPOINT_FAILPOINT="blob_written", SAFEPOINT_FAILPOINT_ACTION=f"pause:{marker}")
        common = ["--workspace", str(workspace), "--store", store]
        writer = subprocess.Popen(
            [sys.executable, "-m", "safepoint", "run", str(script), "--run-id", "a", *common],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(marker.exists, "the writer to stop between its blob and its log group")
            done = forget(tm.store, "b")
            assert "left to `safepoint gc`" in done.left and tm.store.list_runs() == ["a"]
            with pytest.raises(StoreError, match="holds the blobs' lock"):
                gc(tm.store, keep=0)
            assert shared <= set(tm.store.list_blobs())
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        resumed = subprocess.run(
            [sys.executable, "-m", "safepoint", "resume", "a", *common],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert (workspace / "big.txt").read_text() == "new\n"
        gc(tm.store, keep=5)
        assert fsck(tm.store, None, repair=False).clean
        tm.rollback_files("a", tm.checkpoints("a")[0].checkpoint_id)
        assert (workspace / "big.txt").read_text() == original
    finally:
        tm.close()
