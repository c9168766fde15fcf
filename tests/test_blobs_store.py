"""Content out of the log (issue 10 §2): file versions become store-wide blobs, deduplicated across runs, durable
before the log group that references them; the log keeps only ``{hash, codec, size}``; an old log (blobs inline)
still reads; fsck reports a missing or damaged blob and quarantines the damaged one; an encrypted store's blobs say
nothing of their content."""

from __future__ import annotations

import os
import pathlib
import random

import msgspec

import safepoint
from safepoint.core.hashing import content_hash
from safepoint.engine import content as content_module
from safepoint.engine import session as session_module
from safepoint.records import Blob
from safepoint.store.fsck import fsck

_blob = msgspec.json.Decoder(Blob)


def _big(seed: int, size: int = 200_000) -> str:
    rng = random.Random(seed)
    return "".join(f"line {i} {rng.random():.12f}\n" for i in range(size // 24))


def _blob_records(store, run_id):
    return [_blob.decode(r.body) for r in store.read_log(run_id).records if r.kind == "blob"]


def _log_size(tm, run_id):
    return os.path.getsize(os.path.join(tm.store.run_dir(run_id), "ledger.jsonl"))


def test_a_large_file_version_is_a_store_blob_and_the_log_only_references_it(workspace):
    big = _big(1)
    (workspace / "big.txt").write_text(big)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "big.txt", "content": big + "one more line\n"}, call_id="c1")
    blobs = _blob_records(tm.store, "r")
    stored = [b for b in blobs if b.stored]
    assert any(b.hash == content_hash(big.encode()) for b in stored)
    assert all(b.data == b"" for b in stored)  # the log carries the reference only
    assert all(len(b.data) <= 4096 for b in blobs)
    assert _log_size(tm, "r") < len(big) // 10  # the before-version is out of the log
    assert tm.store.list_blobs()
    tm.rollback_files("r", start)
    assert (workspace / "big.txt").read_text() == big


def test_runs_share_one_blob_for_one_content(workspace):
    big = _big(2)
    tm = safepoint.open(workspace=str(workspace))
    for run_id in ("a", "b"):
        (workspace / "big.txt").write_text(big)
        with tm.start("t", run_id=run_id) as run:
            run.call("write_file", {"path": "big.txt", "content": "short\n"}, call_id="c1")
        if run_id == "a":
            first = {name: stat.size for name, stat in tm.store.list_blobs().items()}
    assert {name: stat.size for name, stat in tm.store.list_blobs().items()} == first  # b's is a's: stored once


def test_a_store_written_before_blobs_left_the_log_still_rolls_back(workspace, monkeypatch):
    """The old format, made by the old code path (every blob inline in the log), read by the new one."""

    class Inline(content_module.Content):
        def __init__(self, run_id, blobs, messages, stage, *_):
            super().__init__(run_id, blobs, messages, stage)

    big = _big(3)
    (workspace / "big.txt").write_text(big)
    tm = safepoint.open(workspace=str(workspace))
    with monkeypatch.context() as patched:
        patched.setattr(session_module, "Content", Inline)
        with tm.start("t", run_id="old") as run:
            start = run.checkpoint()
            run.call("write_file", {"path": "big.txt", "content": "replaced\n"}, call_id="c1")
    assert not any(b.stored for b in _blob_records(tm.store, "old"))
    assert _log_size(tm, "old") > len(big) // 10 and not tm.store.list_blobs()
    tm = safepoint.open(workspace=str(workspace))
    tm.rollback_files("old", start)
    assert (workspace / "big.txt").read_text() == big
    assert fsck(tm.store, None, repair=False).clean


def _one_blob_path(tm):
    [name] = tm.store.list_blobs()
    return name, tm.store._blob_path(name)


def test_fsck_reports_a_missing_blob_and_quarantines_a_damaged_one(workspace):
    big = _big(4)
    (workspace / "big.txt").write_text(big)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "big.txt", "content": "x\n"}, call_id="c1")
    assert fsck(tm.store, None, repair=False).clean
    name, path = _one_blob_path(tm)
    data = bytearray(pathlib.Path(path).read_bytes())
    data[-10] ^= 0x01
    pathlib.Path(path).write_bytes(bytes(data))
    [found] = fsck(tm.store, None, repair=False).problems
    assert found.file == "blobs" and found.run_id == "r" and "damaged" in found.problem and not found.repair
    assert os.path.exists(path)  # reported only
    [repaired] = fsck(tm.store, None, repair=True).problems
    assert "quarantined" in repaired.repair
    assert not os.path.exists(path)
    kept = os.listdir(os.path.join(tm.store.root, "blobs", "quarantine"))
    assert kept == [name.replace(":", "-")]  # moved aside, never deleted
    [missing] = fsck(tm.store, "r", repair=False).problems
    assert "missing" in missing.problem and missing.where.startswith("seq ")
    # The rollback plans around the lost version (issue 10, lost content): it says which file it cannot restore
    # and why, and leaves it as it is (nothing half-done, never a wrong content).
    plan = tm.rollback_files("r", start)
    [spared] = plan.unrestorable
    assert spared.path == "big.txt" and "the store no longer has it" in spared.why and not plan.actions
    assert (workspace / "big.txt").read_text() == "x\n"


def test_an_encrypted_stores_blobs_are_sealed_and_named_without_their_hash(workspace):
    key = os.urandom(32)
    big = _big(5)
    (workspace / "big.txt").write_text(big)
    tm = safepoint.open(workspace=str(workspace), key=key)
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "big.txt", "content": "x\n"}, call_id="c1")
    [name] = tm.store.list_blobs()
    plain = content_hash(big.encode())
    assert name.startswith("keyed:") and plain.split(":")[1] not in name
    on_disk = pathlib.Path(tm.store.inner._blob_path(name)).read_bytes()
    assert on_disk.startswith(b"sp1b") and b"line 1 " not in on_disk
    assert len(on_disk) < len(big) // 2  # sealed in binary, compressed first
    tm.rollback_files("r", start)
    assert (workspace / "big.txt").read_text() == big
    assert fsck(tm.store, None, repair=False).clean


def test_fsck_reports_a_damaged_and_a_missing_blob_on_postgres(fresh_url, workspace):
    import psycopg

    big = _big(6)
    (workspace / "big.txt").write_text(big)
    tm = safepoint.open(fresh_url, workspace=str(workspace))
    try:
        with tm.start("t", run_id="r") as run:
            run.call("write_file", {"path": "big.txt", "content": "x\n"}, call_id="c1")
        assert tm.fsck().clean
        [name] = tm.store.list_blobs()
        with psycopg.connect(fresh_url, autocommit=True) as conn:
            conn.execute("UPDATE safepoint.blobs SET data = overlay(data PLACING 'X' FROM 40) WHERE name = %s", (name,))
        [found] = tm.fsck().problems
        assert found.file == "blobs" and "damaged" in found.problem
        assert tm.store.quarantine_blob(name) and tm.store.list_blobs() == {}  # flagged, kept, no longer served
        [missing] = tm.fsck().problems
        assert "missing" in missing.problem
    finally:
        tm.close()


def test_a_blob_cut_short_is_written_again_when_its_content_is_stored_again(tmp_path):
    from safepoint.core.blobs import open_stored, stored_form
    from safepoint.store.file_store import FileStore

    store = FileStore(str(tmp_path / "store"))
    store.create_run("r", b"{}")
    data = _big(7).encode()
    reference, stored = stored_form(data)
    name = store.blob_name(reference.hash)
    store.put_blobs([(name, stored)])
    path = pathlib.Path(store._blob_path(name))
    path.write_bytes(stored[: len(stored) // 2])
    store.put_blobs([(name, stored)])
    assert open_stored(store.get_blob(name) or b"", reference.hash) == data
