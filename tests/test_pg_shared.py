"""Issue 14 §1: daemons share one PostgreSQL store. A submission wakes a sleeping daemon at once (LISTEN/NOTIFY,
the poll only a safety net); two daemons that see the same interrupted runs start one worker per run between them
(a claim with SKIP LOCKED hands each run over); a run held by a live claim is skipped, not waited for."""

from __future__ import annotations

import json
import signal

from safepoint.engine.session import load_view
from safepoint.store.postgres import PostgresStore

from .conftest import cli_env
from .test_daemon import (
    DaemonLines,
    call,
    done,
    in_process,
    lines,
    of,
    opened,
    safepoint,
    write_scenario,
)


def test_a_submission_wakes_a_sleeping_daemon_at_once(tmp_path, workspace, fresh_url):
    store_args = ["--store", fresh_url]
    scenario = write_scenario(
        tmp_path,
        [{"text": "first answer"}, {"text": "second answer", "expect_in_context": ["and one more thing"]}],
    )
    assert in_process(workspace, "run", str(scenario), "--run-id", "r", store=store_args).returncode == 0
    # A pass every 10 minutes: only the NOTIFY can bring the daemon to the submission within the wait below.
    daemon = safepoint(workspace, "daemon", "--json", "--poll", "600", store=store_args)
    try:
        seen = DaemonLines(daemon)
        seen.until("daemon_started")
        seen.until("startup_recovery")
        submitted = in_process(workspace, "submit", "r", "and one more thing", "--key", "k1", store=store_args)
        assert submitted.returncode == 0, submitted.stderr
        events = seen.until("worker_exited", timeout=120)
        (started,) = of(events, "worker_started", "r")
        assert "queued submission (k1)" in started["why"]
        (exited,) = of(events, "worker_exited", "r")
        assert exited["status"] == "completed"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=60)
    store = opened(workspace, store_args)
    assert load_view(store, "r").absorbed_submission_keys == ("k1",)
    store.close()


def test_two_daemons_resume_each_interrupted_run_once_between_them(tmp_path, workspace, fresh_url):
    store_args = ["--store", fresh_url]
    outbox = tmp_path / "outbox.jsonl"
    scenario = write_scenario(
        tmp_path,
        [
            {"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="one\n")]},
            {"text": "telling", "tool_calls": [call("send_notification", to="#dev", message="written")]},
            {"text": "done"},
        ],
    )
    crash = cli_env(SAFEPOINT_OUTBOX=str(outbox), SAFEPOINT_FAILPOINT="after_outcome:write_file")
    runs = ["a", "b", "c", "d"]
    for run_id in runs:
        assert done(workspace, "run", str(scenario), "--run-id", run_id, env=crash, store=store_args).returncode == -9
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    first = safepoint(workspace, "daemon", "--once", "--json", "--concurrency", "2", env=env, store=store_args)
    second = safepoint(workspace, "daemon", "--once", "--json", "--concurrency", "2", env=env, store=store_args)
    events = []
    for proc in (first, second):
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        events += [json.loads(line) for line in out.splitlines() if line.strip()]
    started = sorted(e["run_id"] for e in of(events, "worker_started"))
    assert started == runs, events  # one worker per run, in one daemon or the other
    assert all(e["status"] == "completed" for e in of(events, "worker_exited"))
    assert lines(outbox) == len(runs)  # each notification once
    store = opened(workspace, store_args)
    assert all(load_view(store, run_id).status == "completed" for run_id in runs)
    store.close()


def test_try_claim_skips_a_run_whose_row_another_claim_holds(fresh_url):
    store = PostgresStore(fresh_url)
    other = PostgresStore(fresh_url)
    try:
        store.create_run("r", b"{}")
        with other._owner_section("r", claiming=True):  # another supervisor in the middle of its claim
            assert store.try_claim("r", "me") is None  # skipped at once, not waited for (lock_timeout is 10 s)
        claim = store.try_claim("r", "me")
        assert claim is not None
        assert other.try_claim("r", "other") is None  # a live owner holds it now
        store.release(claim)
        assert other.try_claim("r", "other") is not None
    finally:
        store.close()
        other.close()


def test_a_pass_reads_recent_posts_and_a_post_wakes_a_listener(fresh_url):
    """A daemon's first pass reads every run posted to; later passes only held owners and recent posts."""
    store = PostgresStore(fresh_url)
    try:
        store.create_run("r", b"{}")
        store.release(store.claim("r", "me"))
        assert store.pass_runs(None) == []
        later = store.clock()
        store.post_control("r", b'{"type": "x"}')
        assert store.pass_runs(later) == ["r"]
        assert store.wait_for_work(0.01) is False  # LISTEN starts here: the post before it is the passes' to find
        store.post_control("r", b'{"type": "y"}')
        assert store.wait_for_work(30.0) is True
    finally:
        store.close()
