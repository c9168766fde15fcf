"""``delete_run`` on the file store beyond the conformance suite: a crash between the rename aside and the removal
leaves nothing under the run's id, and what it left is swept."""

from __future__ import annotations

import os
import shutil

from safepoint.store.file_store import DELETED_PREFIX, FileStore


def test_a_run_renamed_aside_by_a_crashed_delete_is_gone_and_swept_by_the_next(tmp_path):
    store = FileStore(str(tmp_path / "store"))
    for run_id in ("a", "b", "c"):
        store.create_run(run_id, b"{}")
    runs = os.path.join(store.root, "runs")
    # What a delete killed after its rename leaves: the folder aside, the id free.
    aside = os.path.join(runs, f"{DELETED_PREFIX}a-x")
    os.mkdir(aside)
    shutil.move(store.run_dir("a"), os.path.join(aside, "a"))
    assert store.list_runs() == ["b", "c"]
    store.create_run("a", b'{"again":true}')
    assert store.run_header("a") == b'{"again":true}'
    store.delete_run("b", force=True)
    assert sorted(os.listdir(runs)) == ["a", "c"]
    claim = store.claim("c", "me")
    store.delete_run("c", claim=claim)
    assert store.list_runs() == ["a"]
