"""A crash at the new fault point for large inputs (issue 10 §2): SIGKILL after the blobs of a call's large input
(and of the model's message that asked for it) are durable and before the log group that references them, on
both stores, in a real child. The run resumes and completes, nothing the log references is missing, the file is
written exactly once and exactly, and the log stays small."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

import safepoint
from safepoint.engine import failpoints

from .conftest import cli_env

MB = 1_000_000


def _big() -> str:
    rng = random.Random(21)
    return "".join(f"{i}: {rng.getrandbits(128):x}\n" for i in range(MB // 40))


@pytest.fixture(params=["file", "postgres"])
def store_url(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "store")
    return request.getfixturevalue("fresh_url")


@pytest.mark.parametrize("point", ["blob_written@1", "blob_written@2"])
def test_a_kill_after_a_large_inputs_blob_and_before_its_log_group_leaves_a_resumable_run(point, store_url, tmp_path):
    assert point.split("@")[0] in failpoints.STORAGE_POINTS
    workspace = tmp_path / "ws"
    workspace.mkdir()
    big = _big()
    script = tmp_path / "scenario.json"
    turns = [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "new.txt", "content": big}}]},
        {"tool_calls": [{"tool": "send_notification", "args": {"to": "#dev", "message": "written"}}]},
        {"text": "done"},
    ]
    script.write_text(json.dumps({"task": "write a new megabyte file, then say so", "turns": turns}))
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    common = ["--workspace", str(workspace), "--store", store_url]

    def cli(*args: str, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        run_env = dict(env, SAFEPOINT_FAILPOINT=failpoint) if failpoint else env
        return subprocess.run(
            [sys.executable, "-m", "safepoint", *args, *common],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    killed = cli("run", str(script), "--run-id", "r", "--json", failpoint=point)
    assert killed.returncode == -9, f"exit {killed.returncode}: {killed.stderr[-2000:]}"
    tm = safepoint.open(store_url, workspace=str(workspace))
    try:
        assert tm.fsck("r").clean, tm.fsck("r").problems
        assert tm.store.list_blobs()  # the input's blob was written before the kill
    finally:
        tm.close()

    resumed = cli("resume", "r", "--json")
    assert resumed.returncode == 0, f"exit {resumed.returncode}: {resumed.stderr[-2000:]}"
    assert json.loads(resumed.stdout.splitlines()[-1])["status"] == "completed"
    assert (workspace / "new.txt").read_text() == big
    assert len(outbox.read_text().splitlines()) == 1  # said once

    tm = safepoint.open(store_url, workspace=str(workspace))
    try:
        assert tm.fsck(None).clean
        log = sum(len(record.body) for record in tm.store.read_log("r").records)
        assert log < 64_000, log  # the megabyte is in a blob, not in the log
        history = tm.restored_history("r")
        calls = [c for row in history.messages for c in row.message.tool_calls if c.tool == "write_file"]
        assert calls and all(c.args["content"] == big for c in calls)
    finally:
        tm.close()
