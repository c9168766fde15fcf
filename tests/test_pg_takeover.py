"""Issue 14 §1-§4 with real processes: a stalled owner costs a takeover, not its run; the reaper closes only what
recovery cannot resume or what outlived --reap-after, and says which; the daemon runs at most --concurrency workers
(startup recovery waits its turn); leases are judged on the database's clock, not a host's."""

from __future__ import annotations

import json
import signal
from datetime import timedelta

import psycopg
import pytest

from safepoint.engine.session import load_view
from safepoint.errors import RunLockedError
from safepoint.store import liveness
from safepoint.store.postgres import PostgresStore

from .conftest import cli_env
from .test_daemon import call, daemon_once, done, lines, of, opened, safepoint, wait_until, write_scenario


def _stall_scenario(tmp_path, marker):
    return write_scenario(
        tmp_path,
        [
            {"text": "slow", "tool_calls": [call("run_command", command=f"touch {marker}; sleep 0.5")]},
            {"text": "tell", "tool_calls": [call("send_notification", to="#ops", message="done")]},
            {"text": "ok"},
        ],
    )


def test_a_stalled_owner_is_taken_over_and_its_run_resumed_not_reaped(tmp_path, workspace, fresh_url):
    store_args = ["--store", fresh_url]
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    marker = tmp_path / "running"
    owner_proc = safepoint(
        workspace, "run", str(_stall_scenario(tmp_path, marker)), "--run-id", "r", env=env, store=store_args
    )
    wait_until(marker.exists, "the slow tool starting")
    owner_proc.send_signal(signal.SIGSTOP)  # stalled: alive, holding the run, no heartbeat
    store = opened(workspace, store_args)
    try:
        before = store.owner("r")
        assert before is not None and before.pid == owner_proc.pid

        def stale() -> bool:
            owner = store.owner("r")
            assert owner is not None
            # on the database's clock, as the daemon judges it
            return (store.clock() - liveness.datetime.fromisoformat(owner.heartbeat_at)).total_seconds() > 2.5

        wait_until(stale, "the owner's heartbeat going stale")
        events = daemon_once(workspace, "--lease", "2", env=env, store=store_args)
        assert not of(events, "reaped")
        (taken,) = of(events, "taken_over", "r")
        assert taken["fenced_generation"] == before.generation and taken["pid"] == owner_proc.pid
        (started,) = of(events, "worker_started", "r")
        assert started["kind"] == "resume"
        (exited,) = of(events, "worker_exited", "r")
        assert exited["exit_code"] in (0, 3), exited  # completed, or waiting on the uncertain command
        view = load_view(store, "r")
        assert view.status in ("completed", "waiting_decision")
        assert view.recoveries[-1].action == "resumed"
        assert not store.terminal_events("r")  # nothing closed: a takeover, not a reap
        records = len(store.read_log("r").records)
    finally:
        owner_proc.send_signal(signal.SIGCONT)
    _, err = owner_proc.communicate(timeout=60)
    assert owner_proc.returncode == 6, err  # StaleGenerationError: it was taken over while stopped
    assert len(store.read_log("r").records) == records  # and wrote nothing when it woke
    assert lines(outbox) <= 1  # the notification after the stalled call: at most once, by whoever ran it
    store.close()


def test_past_reap_after_the_work_is_closed_and_the_reason_says_why(tmp_path, workspace, fresh_url):
    store_args = ["--store", fresh_url]
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    marker = tmp_path / "running"
    owner_proc = safepoint(
        workspace, "run", str(_stall_scenario(tmp_path, marker)), "--run-id", "r", env=env, store=store_args
    )
    wait_until(marker.exists, "the slow tool starting")
    owner_proc.send_signal(signal.SIGSTOP)
    store = opened(workspace, store_args)
    try:
        wait_until(
            lambda: (
                (store.clock() - liveness.datetime.fromisoformat(store.owner("r").heartbeat_at)).total_seconds() > 2.5
            ),
            "the heartbeat going stale",
        )
        events = daemon_once(workspace, "--lease", "2", "--reap-after", "2", env=env, store=store_args)
        (reaped,) = of(events, "reaped", "r")
        assert "--reap-after 2 s" in reaped["why"]
        assert not of(events, "worker_started")
        (event,) = store.terminal_events("r")
        assert event.event_type == "runtime_work_reap"
        assert "--reap-after" in json.loads(event.payload_json)["detail"]
        explained = done(workspace, "explain", "r", store=store_args)
        assert "--reap-after" in explained.stdout, explained.stdout
    finally:
        owner_proc.send_signal(signal.SIGCONT)
    owner_proc.communicate(timeout=60)
    store.close()


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_startup_recovery_runs_at_most_concurrency_workers_at_once(tmp_path, workspace, backend, request):
    store_args = [] if backend == "file" else ["--store", request.getfixturevalue("fresh_url")]
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
    runs = ["a", "b", "c"]
    for run_id in runs:
        assert done(workspace, "run", str(scenario), "--run-id", run_id, env=crash, store=store_args).returncode == -9
    events = daemon_once(
        workspace, "--concurrency", "1", "--poll", "0.2", env=cli_env(SAFEPOINT_OUTBOX=str(outbox)), store=store_args
    )
    running, most = 0, 0
    for event in events:
        running += {"worker_started": 1, "worker_exited": -1}.get(event["event"], 0)
        most = max(most, running)
    assert most == 1, events
    assert sorted(e["run_id"] for e in of(events, "worker_exited")) == runs
    assert all(e["status"] == "completed" for e in of(events, "worker_exited"))
    assert lines(outbox) == 3  # each run's notification, once


def test_a_claim_judges_a_remote_owner_on_the_databases_clock_not_this_hosts(fresh_url, monkeypatch):
    store = PostgresStore(fresh_url)
    try:
        store.create_run("r", b"{}")
        store.claim("r", "me")
        # The owner is on another machine (its pid means nothing here), with a heartbeat fresh on the database's clock.
        with psycopg.connect(fresh_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE safepoint.recovery_owners SET holder_state = convert_to(jsonb_set(convert_from(holder_state, "
                "'UTF8')::jsonb, '{host}', to_jsonb('elsewhere@0123456789ab#1'::text))::text, 'UTF8') "
                "WHERE agent_id = 'r'"
            )

        real = liveness.datetime

        class Skewed(real):  # this host's clock runs an hour ahead
            @classmethod
            def now(cls, tz=None):
                return real.now(tz) + timedelta(hours=1)

        monkeypatch.setattr(liveness, "datetime", Skewed)
        assert liveness.owner_alive(store.owner("r")) is False  # this host's clock alone would call it dead
        with pytest.raises(RunLockedError):  # the database's says it is alive: no claim without a takeover
            store.claim("r", "another")
    finally:
        store.close()


def test_same_hostname_on_another_machine_is_judged_by_heartbeat_not_by_pid(fresh_url):
    store = PostgresStore(fresh_url)
    try:
        store.create_run("r", b"{}")
        store.claim("r", "me")
        owner = store.owner("r")
        assert owner is not None and owner.host.startswith(f"{liveness.this_host()}#")
        # A container with this very hostname (another pid namespace): this process's pid, alive here, is not its.
        hostname = liveness.socket.gethostname()
        twin = owner.__class__(
            **{
                **{f: getattr(owner, f) for f in owner.__struct_fields__},
                "host": f"{hostname}@ffffffffffff#1",
                "heartbeat_at": (store.clock() - timedelta(hours=1)).isoformat(timespec="microseconds"),
            }
        )
        assert not liveness.on_this_host(twin)
        assert liveness.owner_alive(twin, store.clock()) is False  # judged by its stale heartbeat
    finally:
        store.close()
