"""The supervisor with real processes: ``safepoint daemon`` recovers, reaps, runs queued input and fires schedules.

The daemon, its workers and every run that is killed are child processes; the commands around them (adding a job,
a submission, an uninterrupted run) are the CLI called in process. Tests wait for conditions (a file, a stale
heartbeat, a process gone) with generous deadlines; nothing asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from safepoint.engine.session import load_view
from safepoint.protocol import TERMINAL_STATUS_RESTART, RuntimeRestartCheckpoint
from safepoint.store.liveness import process_is_alive, process_start_time
from safepoint.store.url import open_store
from safepoint.supervisor import schedule

from .conftest import cli_env, safepoint_in_process

TIMEOUT = 60.0


@pytest.fixture(params=["file", "postgres"])
def store_args(request):
    if request.param == "file":
        return []
    return ["--store", request.getfixturevalue("fresh_url")]


def safepoint(workspace: Path, *args: str, env: dict[str, str] | None = None, store=()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "safepoint", *args, "--workspace", str(workspace), *store],
        env=env or cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def done(workspace: Path, *args: str, env: dict[str, str] | None = None, store=()) -> subprocess.CompletedProcess[str]:
    proc = safepoint(workspace, *args, env=env, store=store)
    out, err = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def in_process(
    workspace: Path, *args: str, env: dict[str, str] | None = None, store=()
) -> subprocess.CompletedProcess[str]:
    """A command whose process is not the point (adding a job, a submission, an uninterrupted run): the CLI called
    in process. Runs that are killed, and the daemon and its workers, are real processes."""
    return safepoint_in_process(*args, "--workspace", workspace, *store, env=env)


def daemon_once(workspace: Path, *args: str, env: dict[str, str] | None = None, store=()) -> list[dict[str, Any]]:
    result = done(workspace, "daemon", "--once", "--json", *args, env=env, store=store)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert not [e for e in events if e["event"] == "error"], events
    return events


def of(events: list[dict[str, Any]], event: str, run_id: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == event and (run_id is None or e.get("run_id") == run_id)]


def wait_until(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)


def opened(workspace: Path, store=()):
    return open_store(store[1] if store else "file:" + str(workspace / ".agent-runtime"))


def write_scenario(tmp_path: Path, turns: list[dict[str, Any]], name: str = "sc.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"task": "the task", "turns": turns}))
    return path


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


class DaemonLines:
    """A running daemon's JSON lines, read straight from its pipe (no buffered reader between select and us)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.pending = b""
        self.seen: list[dict[str, Any]] = []

    def until(self, event: str, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
        """Every line so far, once one with ``event`` has arrived (after the previous call)."""
        start = len(self.seen)
        deadline = time.monotonic() + timeout
        while not any(e["event"] == event for e in self.seen[start:]):
            assert time.monotonic() < deadline, f"the daemon never said {event}: {self.seen}"
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            assert chunk, f"the daemon ended before it said {event}: {self.seen}"
            self.pending += chunk
            *complete, self.pending = self.pending.split(b"\n")
            self.seen += [json.loads(line) for line in complete if line.strip()]
        return self.seen


# schedules ------------------------------------------------------------------------------------------------------


def test_a_due_occurrence_is_fired_by_the_daemon_completes_and_never_runs_twice(tmp_path, workspace):
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    scenario = write_scenario(
        tmp_path,
        [{"text": "telling", "tool_calls": [call("send_notification", to="#ops", message="nightly")]}, {"text": "ok"}],
    )
    added = in_process(workspace, "schedule", "add", "tick", str(scenario), "--cron", "* * * * * *", env=env)
    assert added.returncode == 0, added.stderr

    fired: list[dict[str, Any]] = []

    def daemon_fired() -> bool:  # the first occurrence after the job's creation is at most a second away
        fired.extend(of(daemon_once(workspace, env=env), "worker_exited"))
        return bool(fired)

    wait_until(daemon_fired, "a fired occurrence")
    (exited,) = fired
    run_id = exited["run_id"]
    scheduled_for = schedule.occurrence_of("tick", run_id)
    assert scheduled_for is not None and (exited["kind"], exited["exit_code"], exited["status"]) == (
        "fire",
        0,
        "completed",
    )

    store = opened(workspace)
    view = load_view(store, run_id)
    assert view.status == "completed"
    info = view.info
    assert (info.recovery_class, info.job_id, info.owner_id) == ("scheduled", "tick", f"job:tick/{scheduled_for}")
    assert info.scheduled is not None
    assert (info.scheduled.cron, info.scheduled.scheduled_for_ms, info.scheduled.cron_exec_timeout_ms) == (
        "* * * * * *",
        scheduled_for,
        3_600_000,
    )
    owner = store.owner(run_id)
    assert owner is not None and (owner.recovery_class, owner.owner_id, owner.released) == (
        "scheduled",
        f"job:tick/{scheduled_for}",
        True,
    )
    traced = [json.loads(line) for line in store.read_trace(run_id)]
    modes = [t["data"]["mode"] for t in traced if t["event"] == "restart_checkpoint"]
    assert modes[0] == "scheduled_work"  # written before the agent loop started
    assert store.read_restart_checkpoint(run_id) is None  # and gone once the work is done
    assert lines(outbox) == 1

    again = in_process(workspace, "schedule", "fire", "tick", "--at", str(scheduled_for), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"run_id": run_id, "status": "completed", "already_fired": True}
    assert lines(outbox) == 1  # the occurrence did not run twice
    assert len(load_view(store, run_id).events) == len(view.events)

    not_an_occurrence = in_process(workspace, "schedule", "fire", "tick", "--at", str(scheduled_for + 1), env=env)
    assert not_an_occurrence.returncode == 2 and "not an occurrence" in not_an_occurrence.stderr


def test_an_interrupted_occurrence_past_its_window_is_closed_at_startup_cron_exec_timeout(tmp_path, workspace):
    scenario = write_scenario(
        tmp_path, [{"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="x")]}, {"text": "ok"}]
    )
    added = in_process(
        workspace, "schedule", "add", "short", str(scenario), "--cron", "* * * * * *", "--exec-timeout", "0.5"
    )
    assert added.returncode == 0, added.stderr
    at = schedule.now_ms() // 1000 * 1000  # the latest whole second: an occurrence of "* * * * * *"
    crashed = done(
        workspace, "schedule", "fire", "short", "--at", str(at), env=cli_env(SAFEPOINT_FAILPOINT="before_step")
    )
    assert crashed.returncode == -9, crashed.stderr  # SIGKILLed as its agent loop began
    run_id = schedule.occurrence_run_id("short", at)
    store = opened(workspace)
    stored = store.read_restart_checkpoint(run_id)
    assert stored is not None
    checkpoint = msgspec.json.decode(stored.data, type=RuntimeRestartCheckpoint)
    assert (checkpoint.mode, checkpoint.recovery_class, checkpoint.recovery_owner_id) == (
        "scheduled_work",
        "scheduled",
        f"job:short/{at}",
    )
    assert checkpoint.payload_json is not None
    payload = json.loads(checkpoint.payload_json)
    assert {k: payload[k] for k in ("job_id", "attempt", "version", "replay_disposition")} == {
        "job_id": "short",
        "attempt": 1,
        "version": 1,
        "replay_disposition": "Resumable",
    }
    assert payload["scheduled_work_context"] == {
        "cron": "* * * * * *",
        "scheduled_for_ms": at,
        "cron_exec_timeout_ms": 500,
    }
    assert in_process(workspace, "schedule", "remove", "short").returncode == 0  # no new occurrence to fire
    wait_until(lambda: schedule.now_ms() > at + 500, "the end of the occurrence's window")

    events = daemon_once(workspace)
    (closed,) = of(events, "closed", run_id)
    assert closed["why"] == "startup" and "ReplayForbidden(cron_exec_timeout)" in closed["verdict"]
    assert not of(events, "worker_started")  # it was not replayed
    (event,) = store.terminal_events(run_id)
    assert (event.recovery_class, event.owner_id, event.event_type) == (
        "scheduled",
        f"job:short/{at}",
        "closed_during_restart_recovery",
    )
    assert event.payload_json is not None and json.loads(event.payload_json)["reason"] == "cron_exec_timeout"
    assert store.read_restart_checkpoint(run_id) is None
    assert load_view(store, run_id).status == "closed"
    owner = store.owner(run_id)
    assert owner is not None and owner.terminal_status == TERMINAL_STATUS_RESTART
    assert not (workspace / "a.txt").exists()  # the occurrence's work was never redone


def test_an_interrupted_occurrence_within_its_window_is_resumed_at_startup(tmp_path, workspace):
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    scenario = write_scenario(
        tmp_path,
        [{"text": "telling", "tool_calls": [call("send_notification", to="#ops", message="yearly")]}, {"text": "ok"}],
    )
    yearly = "0 0 1 1 *"  # its latest occurrence is before the job exists: the daemon never fires one itself
    added = in_process(
        workspace, "schedule", "add", "yearly", str(scenario), "--cron", yearly, "--exec-timeout", str(400 * 86400)
    )
    assert added.returncode == 0, added.stderr
    at = schedule.latest_occurrence(yearly, schedule.now_ms())
    crash = cli_env(SAFEPOINT_OUTBOX=str(outbox), SAFEPOINT_FAILPOINT="before_step")
    assert done(workspace, "schedule", "fire", "yearly", "--at", str(at), env=crash).returncode == -9
    run_id = schedule.occurrence_run_id("yearly", at)

    events = daemon_once(workspace, env=env)
    assert [e["run_id"] for e in of(events, "worker_started")] == [run_id]
    (exited,) = of(events, "worker_exited", run_id)
    assert (exited["kind"], exited["exit_code"], exited["status"]) == ("resume", 0, "completed")
    store = opened(workspace)
    view = load_view(store, run_id)
    assert view.status == "completed" and view.recoveries[-1].action == "resumed"
    assert view.recoveries[-1].mode == "scheduled_work"
    assert lines(outbox) == 1
    assert store.read_restart_checkpoint(run_id) is None


# the reaper -----------------------------------------------------------------------------------------------------


def test_a_hung_owner_is_reaped_fenced_and_stops_without_writing_when_it_wakes(tmp_path, workspace):
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    marker = tmp_path / "running"
    scenario = write_scenario(
        tmp_path,
        [
            {"text": "slow", "tool_calls": [call("run_command", command=f"touch {marker}; sleep 0.5")]},
            {"text": "tell", "tool_calls": [call("send_notification", to="#ops", message="done")]},
            {"text": "ok"},
        ],
    )
    owner_proc = safepoint(workspace, "run", str(scenario), "--run-id", "r", env=env)
    wait_until(marker.exists, "the slow tool starting")
    owner_proc.send_signal(signal.SIGSTOP)  # hung: alive, holding the run, no heartbeat
    try:
        store = opened(workspace)
        before = store.owner("r")
        assert before is not None and before.pid == owner_proc.pid

        def stale() -> bool:
            owner = store.owner("r")
            assert owner is not None
            return (datetime.now(UTC) - datetime.fromisoformat(owner.heartbeat_at)).total_seconds() > 2.5

        wait_until(stale, "the owner's heartbeat going stale")
        # Past --reap-after its work is closed, not resumed (without it, a stall costs a takeover: test_pg_takeover).
        events = daemon_once(workspace, "--lease", "2", "--reap-after", "2", env=env)
        assert of(events, "skipped", "r")  # startup: a live process holds it, so it is not recovered
        (reaped,) = of(events, "reaped", "r")
        assert reaped["fenced_generation"] == before.generation and reaped["pid"] == owner_proc.pid
        assert "ReplayForbidden(runtime_work_reap)" in reaped["verdict"]
        assert not of(events, "worker_started")

        after = store.owner("r")
        assert after is not None and after.generation > before.generation
        assert after.terminal_status == TERMINAL_STATUS_RESTART
        (event,) = store.terminal_events("r")
        assert (event.event_type, event.generation) == ("runtime_work_reap", before.generation)
        assert event.payload_json is not None and json.loads(event.payload_json)["reason"] == "runtime_work_reap"
        assert store.read_restart_checkpoint("r") is None
        assert load_view(store, "r").status == "closed"
        records = len(store.read_log("r").records)
    finally:
        owner_proc.send_signal(signal.SIGCONT)
    _, err = owner_proc.communicate(timeout=TIMEOUT)
    assert owner_proc.returncode == 6, err  # StaleGenerationError: it was taken over
    assert "taken over" in err
    assert len(store.read_log("r").records) == records  # and wrote nothing more
    assert lines(outbox) == 0  # the notification after the hung call was never sent


# startup recovery and queued input ------------------------------------------------------------------------------


def test_startup_recovery_resumes_a_killed_run_in_a_worker(tmp_path, workspace, store_args):
    outbox = tmp_path / "outbox.jsonl"
    env = cli_env(SAFEPOINT_OUTBOX=str(outbox))
    scenario = write_scenario(
        tmp_path,
        [
            {"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="one\n")]},
            {"text": "telling", "tool_calls": [call("send_notification", to="#dev", message="written")]},
            {"text": "done"},
        ],
    )
    crash = cli_env(SAFEPOINT_OUTBOX=str(outbox), SAFEPOINT_FAILPOINT="after_outcome:write_file")
    crashed = done(workspace, "run", str(scenario), "--run-id", "r", env=crash, store=store_args)
    assert crashed.returncode == -9, crashed.stderr
    store = opened(workspace, store_args)
    assert "r" in store.list_restart_checkpoints()

    events = daemon_once(workspace, env=env, store=store_args)
    (started,) = of(events, "worker_started", "r")
    assert (started["kind"], started["why"]) == ("resume", "startup")
    (exited,) = of(events, "worker_exited", "r")
    assert (exited["exit_code"], exited["status"]) == (0, "completed")
    view = load_view(store, "r")
    assert view.status == "completed"
    assert view.recoveries and view.recoveries[-1].action == "resumed"
    assert (workspace / "a.txt").read_text() == "one\n"
    assert lines(outbox) == 1
    assert "r" not in store.list_restart_checkpoints()
    store.close()  # a PostgreSQL store's pool is closed by whoever opened it

    quiet = daemon_once(workspace, env=env, store=store_args)  # nothing left to do
    assert not of(quiet, "worker_started")


def test_a_run_that_crashes_while_the_daemon_runs_is_recovered_without_a_restart(tmp_path, workspace):
    scenario = write_scenario(
        tmp_path,
        [{"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="one\n")]}, {"text": "done"}],
    )
    supervisor = safepoint(workspace, "daemon", "--json", "--poll", "0.2")
    try:
        output = DaemonLines(supervisor)
        output.until("startup_recovery")
        crash = cli_env(SAFEPOINT_FAILPOINT="after_outcome:write_file")
        assert done(workspace, "run", str(scenario), "--run-id", "r", env=crash).returncode == -9
        events = output.until("worker_exited")
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.communicate(timeout=TIMEOUT)
    assert supervisor.returncode == 0
    (started,) = of(events, "worker_started", "r")
    assert (started["kind"], started["why"]) == ("resume", "crashed")
    assert (events[-1]["run_id"], events[-1]["exit_code"], events[-1]["status"]) == ("r", 0, "completed")
    assert load_view(opened(workspace), "r").status == "completed"


def test_a_submission_queued_to_a_completed_run_is_run_by_the_daemon(tmp_path, workspace):
    scenario = write_scenario(
        tmp_path,
        [{"text": "first answer"}, {"text": "second answer", "expect_in_context": ["and one more thing"]}],
    )
    first = in_process(workspace, "run", str(scenario), "--run-id", "r")
    assert first.returncode == 0, first.stderr
    submitted = in_process(workspace, "submit", "r", "and one more thing", "--key", "k1")
    assert submitted.returncode == 0, submitted.stderr

    events = daemon_once(workspace)
    (started,) = of(events, "worker_started", "r")
    assert started["kind"] == "resume" and "queued submission (k1)" in started["why"]
    (exited,) = of(events, "worker_exited", "r")
    assert (exited["exit_code"], exited["status"]) == (0, "completed")
    view = load_view(opened(workspace), "r")
    said = [(m.role, m.content) for m in view.history if m.role in ("user", "assistant")]
    assert said[-2:] == [("user", "and one more thing"), ("assistant", "second answer")]
    assert view.absorbed_submission_keys == ("k1",)

    quiet = daemon_once(workspace)  # the submission was taken: nothing runs again
    assert not of(quiet, "worker_started")


def test_a_resumable_subagent_is_left_to_its_parent_whose_resume_finishes_it(tmp_path, workspace):
    child = {
        "task": "write it",
        "turns": [{"text": "writing", "tool_calls": [call("write_file", path="c.txt", content="c\n")]}, {"text": "ok"}],
    }
    scenario = write_scenario(
        tmp_path,
        [
            {"text": "delegating", "tool_calls": [call("spawn_subagent", task="write it", scenario=child)]},
            {"text": "parent done"},
        ],
    )
    crash = cli_env(SAFEPOINT_FAILPOINT="after_outcome:write_file")  # inside the child, which runs in-process
    assert done(workspace, "run", str(scenario), "--run-id", "p", env=crash).returncode == -9
    store = opened(workspace)
    assert {"p", "p.call_1"} <= set(store.list_restart_checkpoints())

    events = daemon_once(workspace)
    (left,) = of(events, "left_to_parent", "p.call_1")
    assert (left["parent"], left["call"]) == ("p", "call_1")
    assert [e["run_id"] for e in of(events, "worker_started")] == ["p"]  # one worker: the parent's
    (exited,) = of(events, "worker_exited", "p")
    assert (exited["exit_code"], exited["status"]) == (0, "completed")
    assert load_view(store, "p").status == "completed"
    assert load_view(store, "p.call_1").status == "completed"  # the parent's spawn call resumed its child
    assert (workspace / "c.txt").read_text() == "c\n"
    assert not store.list_restart_checkpoints()


# stopping -------------------------------------------------------------------------------------------------------


def slow_second_turn(tmp_path: Path, marker: Path, seconds: float = 0.5) -> Path:
    return write_scenario(
        tmp_path,
        [
            {"text": "writing", "tool_calls": [call("write_file", path="a.txt", content="one\n")]},
            {"text": "slow", "tool_calls": [call("run_command", command=f"touch {marker}; sleep {seconds}")]},
            {"text": "done"},
        ],
    )


def test_sigterm_stops_the_daemon_and_its_worker_leaves_the_run_resumable(tmp_path, workspace):
    marker = tmp_path / "resumed"
    scenario = slow_second_turn(tmp_path, marker)
    crash = cli_env(SAFEPOINT_FAILPOINT="after_outcome:write_file")
    assert done(workspace, "run", str(scenario), "--run-id", "r", env=crash).returncode == -9

    supervisor = safepoint(workspace, "daemon", "--json", "--poll", "0.2")
    wait_until(marker.exists, "the worker running the slow call")
    supervisor.send_signal(signal.SIGTERM)
    out, err = supervisor.communicate(timeout=TIMEOUT)
    assert supervisor.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    (exited,) = of(events, "worker_exited", "r")
    assert (exited["exit_code"], exited["status"]) == (11, "interrupted")  # stopped at its next safe point
    assert events[-1]["event"] == "daemon_stopped" and events[-1]["reason"] == "signal"

    store = opened(workspace)
    view = load_view(store, "r")
    assert view.status == "interrupted"
    assert store.read_restart_checkpoint("r") is not None  # kept for the next start
    owner = store.owner("r")
    assert owner is not None and owner.released and owner.terminal_at is None

    events = daemon_once(workspace)  # the next start resumes it
    (exited,) = of(events, "worker_exited", "r")
    assert (exited["exit_code"], exited["status"]) == (0, "completed")


def test_workers_die_with_a_killed_daemon_and_the_next_one_recovers_their_run(tmp_path, workspace):
    marker = tmp_path / "resumed"
    scenario = slow_second_turn(tmp_path, marker, seconds=5)
    crash = cli_env(SAFEPOINT_FAILPOINT="after_outcome:write_file")
    assert done(workspace, "run", str(scenario), "--run-id", "r", env=crash).returncode == -9

    supervisor = safepoint(workspace, "daemon", "--json", "--poll", "0.2")
    try:
        worker = DaemonLines(supervisor).until("worker_started")[-1]["pid"]
        start_time = process_start_time(worker)
        wait_until(marker.exists, "the worker running the slow call")
    finally:
        supervisor.kill()  # SIGKILL: no chance to stop its workers itself
        supervisor.communicate(timeout=TIMEOUT)
    wait_until(lambda: not process_is_alive(worker, start_time), "the worker dying with its daemon")
    store = opened(workspace)
    assert load_view(store, "r").status == "running"

    # The call with effects was cut off mid-way: the next daemon's resume stops for a person to decide.
    events = daemon_once(workspace)
    (exited,) = of(events, "worker_exited", "r")
    assert (exited["exit_code"], exited["status"]) == (3, "waiting_decision")
    assert load_view(store, "r").status == "waiting_decision"
    later = daemon_once(workspace)
    assert of(later, "needs_decision", "r") and not of(later, "worker_started")
