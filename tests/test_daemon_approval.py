"""The issue's supervisor test with real processes: a daemon killed while a tool waits for approval. After the
restart the wait goes on with its remaining timeout, and approving runs the tool exactly once."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from safepoint.engine.session import load_view
from safepoint.store.liveness import owner_alive

from .test_protocol import NOTIFY, Cli, scenario, wait_until, waiting_for_approval


def generation_of_wait(cli: Cli, run_id: str) -> int:
    checkpoint = cli.checkpoint(run_id)
    if checkpoint is None or checkpoint.mode != "tool_approval_wait":
        return 0
    generation: int = json.loads(checkpoint.execution_config_json or "{}")["generation"]
    return generation


def test_a_daemon_killed_during_an_approval_wait_continues_it_and_the_tool_runs_once(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    sc = scenario(tmp_path, [{"text": "paying", "tool_calls": [NOTIFY]}, {"text": "paid"}])
    first = cli.start("run", sc, "--run-id", "r", "--approval", "high", "--approval-timeout", "300")
    wait_until(lambda: waiting_for_approval(cli, "r"), "the first wait")
    started = cli.payload("r")
    wait_until(lambda: cli.payload("r")["timeout_remaining_ms"] < started["timeout_remaining_ms"], "time to pass")
    before_kill = cli.payload("r")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)

    daemon = cli.start("daemon", "--poll", "0.1", "--json")
    wait_until(lambda: generation_of_wait(cli, "r") >= 2, "the daemon's worker to take the wait over")
    worker = cli.store().owner("r")
    assert worker is not None and owner_alive(worker)
    taken_over = cli.payload("r")
    assert taken_over["timeout_remaining_ms"] <= before_kill["timeout_remaining_ms"]  # the time left, not afresh
    wait_until(lambda: cli.payload("r")["timeout_remaining_ms"] < taken_over["timeout_remaining_ms"], "time to pass")
    in_worker = cli.payload("r")
    daemon.send_signal(signal.SIGKILL)  # the supervisor dies; its worker must die with it
    daemon.wait(timeout=30)
    wait_until(lambda: not owner_alive(worker), "the worker to die with its daemon")
    assert cli.sent() == 0

    again = cli.start("daemon", "--poll", "0.1", "--json")
    wait_until(lambda: generation_of_wait(cli, "r") > worker.generation, "the next daemon to take the wait over")
    continued = cli.payload("r")
    assert continued["wait_started_at_ms"] == started["wait_started_at_ms"]  # the same wait, not a new one
    assert continued["timeout_remaining_ms"] <= in_worker["timeout_remaining_ms"] < started["timeout_remaining_ms"]
    assert not continued.get("dispatched_before_restart", False)  # nothing was sent
    assert cli("approve", "r", "call_1").returncode == 0
    wait_until(lambda: load_view(cli.store(), "r").status == "completed", "the approved call to run")
    again.send_signal(signal.SIGTERM)
    again.communicate(timeout=60)
    assert again.returncode == 0
    assert cli.sent() == 1  # approved once, run once, across three owners
    view = load_view(cli.store(), "r")
    assert view.ledger["call_1"].status == "succeeded"
    assert cli.checkpoint("r") is None
