"""A command's time limit covers every process it starts, and what it leaves in the background never outlives it
(issue 9 §3): setsid, double forks, nohup, a descendant holding the output pipe open; bad time limits refused."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

import safepoint


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pids(path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


BACKGROUND = {
    "setsid": "(setsid sh -c 'echo $$ >> {pids}; sleep 40' &); echo started",
    "double fork": "sh -c '(sh -c \"echo \\$\\$ >> {pids}; sleep 40\" &) &'; echo started",
    "nohup": "nohup sh -c 'echo $$ >> {pids}; sleep 40' > /dev/null 2>&1 & echo started",
    "holds stdout": "sh -c 'echo $$ >> {pids}; sleep 40' & echo started",
    "setsid holding stdout": "setsid sh -c 'echo $$ >> {pids}; exec sleep 40' & echo started",
}


@pytest.mark.parametrize("case", sorted(BACKGROUND))
def test_what_a_command_leaves_running_is_stopped_when_it_ends(workspace, tmp_path, case):
    pids = tmp_path / "pids"
    command = BACKGROUND[case].format(pids=pids) + f"; while [ ! -s {pids} ]; do sleep 0.01; done"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": command, "timeout": 30}, call_id="c1")
    assert result.status == "succeeded", result.observation
    assert "started" in result.observation
    assert "background process(es) running when it ended; they were stopped" in result.observation
    [pid] = _pids(pids)
    assert not _running(pid), f"{case}: the background process outlived its command"


DETACHED = {
    "setsid": "(setsid sh -c 'echo $$ >> {pids}; exec sleep 300' > /dev/null 2>&1 &)",
    "double fork": "sh -c '(sh -c \"echo \\$\\$ >> {pids}; exec sleep 300\" > /dev/null 2>&1 &) &'",
    "nohup": "nohup sh -c 'echo $$ >> {pids}; exec sleep 300' > /dev/null 2>&1 &",
}


@pytest.mark.parametrize("case", sorted(DETACHED))
def test_the_time_limit_covers_the_whole_tree(workspace, tmp_path, case):
    """The limit ends every process the command started, even one that left its process group and holds no
    output open (a plain group kill misses it); the call's failure names the limit in its first line."""
    pids = tmp_path / "pids"
    command = DETACHED[case].format(pids=pids) + f"\nwhile [ ! -s {pids} ]; do sleep 0.01; done; sleep 60"
    tm = safepoint.open(workspace=str(workspace))
    try:
        with tm.start("t", run_id="r") as run:
            result = run.call_result("run_command", {"command": command, "timeout": 1.5}, call_id="c1")
        [pid] = _pids(pids)
        assert not _running(pid), f"{case}: a process the command started outlived its time limit"
        assert result.status == "failed"
        first = result.observation.splitlines()[0]
        assert "hit its time limit of 1.5s" in first and "every process it started" in first
    finally:
        for pid in _pids(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("value", [0, -1, 0.0, float("nan"), float("inf"), "3", "soon", True, None, [5]])
def test_a_timeout_that_is_no_limit_is_refused_in_one_line(workspace, tmp_path, value):
    marker = tmp_path / "ran"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": f"touch {marker}", "timeout": value}, call_id="c1")
    assert result.status == "failed"
    # A number that is no limit is refused by run_command itself; a value of another type by the argument check
    # that runs before any tool (both one line naming `timeout`).
    expected = (
        "give a number of seconds above 0"
        if isinstance(value, float | int) and not isinstance(value, bool)
        else "argument 'timeout' must be float"
    )
    assert result.observation.count("\n") == 0 and expected in result.observation
    assert not marker.exists()


def test_a_command_that_ends_cleanly_reports_no_leftovers(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo hi; (sleep 0.1; echo bye) ; wait"}, call_id="c1")
    assert result.status == "succeeded"
    assert result.observation == "exit code 0\nhi\nbye\n"


def test_kill_tree_reaches_escaped_descendants(tmp_path):
    """The crash cleanup (``kill_leftovers``) kills a noted reaper's whole tree, setsid'd descendants included."""
    import subprocess
    import sys

    from safepoint.engine import reaper
    from safepoint.engine.processes import kill_tree
    from safepoint.engine.reaper import descendants

    pids = tmp_path / "pids"
    gate_read, gate_write = os.pipe()
    status_read, status_write = os.pipe()
    command = f"(setsid sh -c 'echo $$ >> {pids}; sleep 60' &); sh -c 'echo $$ >> {pids}; sleep 60'"
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", reaper.__file__, str(gate_read), str(status_write), "60", "sh", "-c", command],
        pass_fds=(gate_read, status_write),
        start_new_session=True,
    )
    os.close(gate_read)
    os.close(status_write)
    os.write(gate_write, b"x")
    os.close(gate_write)
    while len(_pids(pids)) < 2:
        time.sleep(0.01)
    tree = descendants(process.pid)
    assert set(_pids(pids)) <= set(tree)  # re-parented to the reaper, not to init
    kill_tree(process.pid)
    assert process.wait() == -signal.SIGKILL
    os.close(status_read)
    for pid in _pids(pids):
        for _ in range(500):
            if not _running(pid):
                break
            time.sleep(0.01)
        assert not _running(pid)


def test_an_agent_killed_before_the_gate_opens_runs_nothing(tmp_path):
    import subprocess
    import sys

    from safepoint.engine import reaper

    marker = tmp_path / "ran"
    gate_read, gate_write = os.pipe()
    status_read, status_write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", reaper.__file__, str(gate_read), str(status_write), "60", "touch", str(marker)],
        pass_fds=(gate_read, status_write),
    )
    os.close(gate_read)
    os.close(status_write)
    os.close(gate_write)  # the agent died before noting the process
    assert process.wait() == reaper.GATE_CLOSED
    os.close(status_read)
    assert not marker.exists()
