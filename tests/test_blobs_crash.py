"""Crash tests at the blob fault points (issue 10 §2), on both stores, in a real child killed with SIGKILL: at
``blob_written`` (the group's blobs are durable, its log group is not) and at ``log_group_durable`` (both are).
After each: nothing the log references is missing (fsck is clean at once), the resume completes without sending
twice, and a rollback to the run's first checkpoint gives the workspace back byte for byte."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

import safepoint
from safepoint.engine import failpoints

from .conftest import cli_env

POINTS = ("blob_written@1", "blob_written@2", "log_group_durable@1", "log_group_durable@2")


def _big() -> str:
    rng = random.Random(10)
    return "".join(f"{i}: {rng.getrandbits(64):x}\n" for i in range(3000))


def _scenario(big: str) -> dict[str, object]:
    def call(tool: str, **args: str) -> dict[str, object]:
        return {"tool_calls": [{"tool": tool, "args": args}]}

    return {
        "task": "rewrite the big file, tell the team, rewrite it again",
        "turns": [
            call("write_file", path="big.txt", content=big + "first edit\n"),
            call("send_notification", to="#dev", message="ready"),
            call("write_file", path="big.txt", content="second edit\n" + big),
            call("write_file", path="other.txt", content=big[::-1]),
            {"text": "done"},
        ],
    }


@pytest.fixture(params=["file", "postgres"])
def store_url(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "store")
    return request.getfixturevalue("fresh_url")


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_a_blob_point_loses_nothing_the_log_references(point, store_url, tmp_path):
    assert point.split("@")[0] in failpoints.STORAGE_POINTS
    workspace = tmp_path / "ws"
    workspace.mkdir()
    big = _big()
    (workspace / "big.txt").write_text(big)
    script = tmp_path / "scenario.json"
    script.write_text(json.dumps(_scenario(big)))
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
        # The ordering: whatever the log holds, the blobs it references are there and whole.
        assert tm.fsck("r").clean, tm.fsck("r").problems
        assert tm.store.list_blobs()  # the big before-version went out of the log
    finally:
        tm.close()

    resumed = cli("resume", "r", "--json")
    assert resumed.returncode == 0, f"exit {resumed.returncode}: {resumed.stderr[-2000:]}"
    assert json.loads(resumed.stdout.splitlines()[-1])["status"] == "completed"
    assert (workspace / "big.txt").read_text() == "second edit\n" + big
    assert (workspace / "other.txt").read_text() == big[::-1]
    assert len(outbox.read_text().splitlines()) <= 1

    tm = safepoint.open(store_url, workspace=str(workspace))
    try:
        assert tm.fsck(None).clean
        first = tm.checkpoints("r")[0].checkpoint_id
        plan = tm.rollback_files("r", first)
        assert not plan.conflicts
        assert (workspace / "big.txt").read_text() == big
        # A kill after call_4 ran leaves its creation to the probe: the resume records it as the call's change.
        assert not (workspace / "other.txt").exists()
    finally:
        tm.close()


def test_rollback_reverts_a_file_created_by_a_call_its_probe_settled(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "scenario.json"
    script.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [
                    {"tool_calls": [{"tool": "write_file", "args": {"path": "new.txt", "content": "made\n"}}]},
                    {"text": "done"},
                ],
            }
        )
    )
    common = ["--workspace", str(workspace), "--store", str(tmp_path / "store")]
    run = [sys.executable, "-m", "safepoint", "run", str(script), "--run-id", "r", *common]
    killed = subprocess.run(
        run, env=dict(cli_env(), SAFEPOINT_FAILPOINT="after_tool"), capture_output=True, check=False
    )
    assert killed.returncode == -9
    resume = [sys.executable, "-m", "safepoint", "resume", "r", *common]
    assert subprocess.run(resume, env=cli_env(), capture_output=True, check=False).returncode == 0
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    tm.rollback_files("r", tm.checkpoints("r")[0].checkpoint_id)
    assert not (workspace / "new.txt").exists()
