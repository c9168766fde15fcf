"""gc killed (SIGKILL, a real child) at each of its moments: after it stored a run's whole versions, and after it
recorded what it frees but before it freed it. Nothing a kept checkpoint needs is lost, fsck stays clean, and the
next gc finishes the work."""

from __future__ import annotations

import subprocess
import sys

import pytest

import safepoint
from safepoint.engine import failpoints

from .conftest import cli_env
from .test_gc import _finished_run, _text


@pytest.mark.parametrize("point", failpoints.GC_POINTS)
def test_gc_killed_at_each_moment_loses_nothing_and_the_next_gc_finishes(point, tmp_path, workspace):
    store = str(tmp_path / "store")
    tm = safepoint.open(store, workspace=str(workspace))
    versions = [_text(seed) for seed in range(80, 85)]
    (workspace / "big.txt").write_text(_text(79))
    after = _finished_run(tm, "r", versions)
    blobs = set(tm.store.list_blobs())
    tm.close()
    gc = [sys.executable, "-m", "safepoint", "gc", "--keep", "2", "--store", store, "-w", str(workspace)]
    killed = subprocess.run(gc, env=dict(cli_env(), SAFEPOINT_FAILPOINT=point), capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    tm = safepoint.open(store, workspace=str(workspace))
    try:
        assert tm.fsck().clean, tm.fsck().problems
        assert blobs <= set(tm.store.list_blobs())  # killed before it removed anything
        done = subprocess.run(gc, env=cli_env(), capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert not blobs <= set(tm.store.list_blobs())  # the next one freed what the first could not
        assert tm.fsck().clean
        tm.rollback_files("r", after[-2])
        assert (workspace / "big.txt").read_text() == versions[-2]
    finally:
        tm.close()
