"""Supervisor fixes from review, with real processes: an own loop thinking between calls is not reaped, and a
command still running when the supervisor stops does not outlive it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from safepoint.engine.session import load_view

from .test_protocol import Cli, scenario, wait_until

OWN_LOOP = textwrap.dedent(
    """
    import sys, time
    import safepoint

    tm = safepoint.open(None, workspace=sys.argv[1])
    with tm.start("think between calls", run_id="own") as run:
        run.call("read_file", {"path": "a.txt"}, call_id="c1")
        open(sys.argv[2], "w").write("thinking")
        time.sleep(float(sys.argv[3]))  # the model thinks: no safepoint call, no tool
        run.call("read_file", {"path": "a.txt"}, call_id="c2")
        run.finish()
    """
)


def test_an_own_loop_thinking_between_calls_is_not_reaped(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    (cli.workspace / "a.txt").write_text("a\n")
    script = tmp_path / "own_loop.py"
    script.write_text(OWN_LOOP)
    thinking = tmp_path / "thinking"
    fast = {"SAFEPOINT_HEARTBEAT_SECONDS": "0.3"}
    daemon = cli.start("daemon", "--lease", "2", "--poll", "0.2", "--json", **fast)
    loop = subprocess.Popen(
        [sys.executable, str(script), str(cli.workspace), str(thinking), "5"],
        env=cli.env(**fast),
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = loop.communicate(timeout=120)
    assert loop.returncode == 0, err  # thought for 2.5 leases and was never fenced off
    daemon.send_signal(signal.SIGTERM)
    out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0
    assert '"reaped"' not in out
    assert cli.store().terminal_events("own") == []
    assert load_view(cli.store(), "own").status == "completed"


def test_a_command_running_when_the_supervisor_stops_does_not_outlive_it(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    pid_file, effect = tmp_path / "cmd.pid", tmp_path / "effect.txt"
    command = f"echo $$ > {pid_file}; sleep 60; echo late >> {effect}"
    sc = scenario(tmp_path, [{"tool_calls": [{"tool": "run_command", "args": {"command": command}}]}, {"text": "ok"}])
    crashed = cli("run", sc, "--run-id", "r", SAFEPOINT_FAILPOINT="before_started:run_command")
    assert crashed.returncode == -signal.SIGKILL
    daemon = cli.start("daemon", "--poll", "0.2", "--grace", "1", "--json")
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "the worker's command to start")
    shell = int(pid_file.read_text())
    daemon.send_signal(signal.SIGTERM)  # the worker is inside a 60 s command: it cannot stop at a safe point
    out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0
    assert '"killed_commands"' in out
    assert (
        not Path(f"/proc/{shell}").exists() or Path(f"/proc/{shell}/stat").read_text().split(")")[1].split()[0] == "Z"
    )
    assert not effect.exists()  # it never finished unsupervised
    assert load_view(cli.store(), "r").ledger["call_1"].status == "started"  # settled at the next start
