"""`safepoint diff`, `approvals` and `watch` (issue 13, the CLI §2-3): the agent's changes as a unified diff from the
recorded versions (per run, per call, --stat; binary named, not dumped), the calls waiting for a person across
runs with the commands that answer them, and a run followed live from another terminal."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from safepoint.errors import ExitCode

from .conftest import PY, cli_env, read_until, safepoint_in_process, wait_for

SCRIPT = {
    "task": "t",
    "turns": [
        {
            "tool_calls": [
                {"tool": "write_file", "args": {"path": "a.txt", "content": "hi\nthere\n"}},
                {"tool": "write_file", "args": {"path": "src/keep.txt", "content": "line1\nLINE2\nline3\n"}},
            ]
        },
        {"tool_calls": [{"tool": "run_command", "args": {"command": "printf '\\000\\001' > bin.dat; rm gone.txt"}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "hi\nthere\nmore\n"}}]},
        {"text": "done"},
    ],
}


@pytest.fixture
def ran(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "keep.txt").write_text("line1\nline2\n")
    (ws / "gone.txt").write_text("bye\n")
    (tmp_path / "s.json").write_text(json.dumps(SCRIPT))
    done = safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r", "-q")
    assert done.returncode == 0, done.stderr
    (ws / "src" / "keep.txt").write_text("the user's edit since\n")  # the diff is the agent's, not the file now
    return ws


def test_diff_of_a_run_is_the_net_change_of_every_path(ran):
    done = safepoint_in_process("diff", "r", "-w", ran)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1,3 @@\n+hi\n+there\n+more\n" in out
    assert "--- a/src/keep.txt\n+++ b/src/keep.txt\n" in out and "-line2\n+LINE2\n+line3\n" in out
    assert "--- a/gone.txt\n+++ /dev/null\n" in out and "-bye\n" in out
    assert "Binary file bin.dat changed (0 -> 2 bytes)" in out and "\x00" not in out
    assert "the user's edit" not in out and "\x1b[" not in out  # no colour on a pipe


def test_diff_of_one_call_and_the_stat(ran):
    one = safepoint_in_process("diff", "r", "--call", "call_4", "-w", ran)
    assert one.returncode == 0, one.stderr
    assert one.stdout == "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n hi\n there\n+more\n"
    stat = safepoint_in_process("diff", "r", "--stat", "-w", ran)
    lines = stat.stdout.splitlines()
    assert lines[0].split() == ["a.txt", "|", "3", "+++"]
    assert lines[1].split() == ["bin.dat", "|", "binary"]
    assert lines[2].split() == ["gone.txt", "|", "1", "-"]
    assert lines[3].split() == ["src/keep.txt", "|", "3", "++-"]
    assert lines[4] == " 4 file(s) changed, 5 insertion(s)(+), 2 deletion(s)(-)"
    data = json.loads(safepoint_in_process("diff", "r", "--json", "-w", ran).stdout)
    assert [(f["path"], f["kind"], f["added"], f["removed"]) for f in data["files"]] == [
        ("a.txt", "text", 3, 0),
        ("bin.dat", "binary", 0, 0),
        ("gone.txt", "text", 0, 1),
        ("src/keep.txt", "text", 2, 1),
    ]
    assert data["files"][0]["calls"] == ["call_1", "call_4"]


def test_diff_says_none_and_refuses_an_unknown_call(ran):
    nothing = safepoint_in_process("diff", "r", "--call", "call_5", "-w", ran)
    assert nothing.returncode == ExitCode.USAGE and "safepoint ledger r" in nothing.stderr
    assert nothing.stderr.count("\n") == 1
    read = safepoint_in_process("diff", "r", "--call", "call_3", "-w", ran)  # run_command wrote bin.dat, gone.txt
    assert "bin.dat" in read.stdout and "a.txt" not in read.stdout
    unknown = safepoint_in_process("diff", "nope", "-w", ran)
    assert unknown.returncode == ExitCode.NOT_FOUND and unknown.stderr.count("\n") == 1


def test_diff_of_a_large_file_is_summarised(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    big = "x" * 100 + "\n"
    write = {"tool": "write_file", "args": {"path": "big.txt", "content": big * 40_000}}
    script = {"task": "t", "turns": [{"tool_calls": [write]}, {"text": "ok"}]}
    (tmp_path / "s.json").write_text(json.dumps(script))
    assert safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r", "-q").returncode == 0
    done = safepoint_in_process("diff", "r", "-w", ws)
    assert done.stdout.startswith("File big.txt is too large to show as a diff") and len(done.stdout) < 200


NOTIFY = {"tool": "send_notification", "args": {"to": "a@b.c", "message": "m"}}


def _waiting_run(tmp_path, run_id: str) -> tuple[subprocess.Popen[str], object]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    script = {"task": "t", "turns": [{"text": "sending", "tool_calls": [NOTIFY]}, {"text": "sent"}]}
    (tmp_path / "s.json").write_text(json.dumps(script))
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    args = [PY, "-m", "safepoint", "run", str(tmp_path / "s.json"), "-w", str(ws), "--run-id", run_id]
    running = subprocess.Popen(
        [*args, "--approval", "high"], cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    read_until(running, "deny:")
    return running, ws


def test_approvals_lists_every_waiting_call_with_its_commands(tmp_path):
    running, ws = _waiting_run(tmp_path, "r")
    try:
        none_in = safepoint_in_process("approvals", "nope", "-w", ws)
        assert none_in.returncode == ExitCode.NOT_FOUND
        listed = safepoint_in_process("approvals", "-w", ws)
        assert listed.returncode == 0, listed.stderr
        assert "r call_1: send_notification a@b.c (high risk" in listed.stdout
        # from outside the workspace the commands name it (here: the test's own folder)
        assert f"approve: safepoint approve r call_1 -w {ws}\n" in listed.stdout
        assert f"deny:    safepoint deny r call_1 -w {ws}\n" in listed.stdout
        assert "a live process waits on it" in listed.stdout
        inside = subprocess.run(
            [PY, "-m", "safepoint", "approvals"], cwd=ws, env=cli_env(), capture_output=True, text=True, timeout=60
        )
        assert "approve: safepoint approve r call_1\n" in inside.stdout, inside.stdout
        data = json.loads(safepoint_in_process("approvals", "--json", "-w", ws).stdout)
        assert [(a["run_id"], a["call_id"], a["attended"]) for a in data] == [("r", "call_1", True)]
        assert 0 < data[0]["seconds_left"] <= 600
        assert safepoint_in_process("deny", "r", "call_1", "-w", ws).returncode == 0
        assert safepoint_in_process("approvals", "-w", ws).stdout == "no call waits for approval\n"
    finally:
        running.communicate(timeout=120)


def test_a_wait_whose_process_died_is_still_listed_as_unattended(tmp_path):
    running, ws = _waiting_run(tmp_path, "r")
    running.kill()
    running.communicate(timeout=60)
    data = json.loads(safepoint_in_process("approvals", "--json", "-w", ws).stdout)
    assert [(a["call_id"], a["attended"]) for a in data] == [("call_1", False)]
    listed = safepoint_in_process("approvals", "-w", ws).stdout
    assert "nobody runs it now: resume continues the wait" in listed


def test_watch_follows_a_run_from_another_terminal_until_it_ends(tmp_path):
    running, ws = _waiting_run(tmp_path, "r")
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "out"))
    with subprocess.Popen(
        [PY, "-m", "safepoint", "watch", "r"],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as watching:
        shown = read_until(watching, "deny:    safepoint deny r call_1\n")
        assert "waiting for approval: send_notification a@b.c (high risk)" in shown
        assert safepoint_in_process("approve", "r", "call_1", "-w", ws, env=env).returncode == 0
        out, err = watching.communicate(timeout=120)
    running.communicate(timeout=120)
    assert watching.returncode == 0, err
    assert "ok send_notification a@b.c in " in out and "\nsent\n" in out and out.endswith("run r: completed\n")


def test_watch_stops_on_ctrl_c_with_exit_11_and_leaves_the_run_alone(tmp_path):
    running, ws = _waiting_run(tmp_path, "r")
    with subprocess.Popen(
        [PY, "-m", "safepoint", "watch", "r"],
        cwd=ws,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal's foreground job has it: a shell's background job (a test run started with `&`) ignores
        # SIGINT, and the ignored disposition is inherited, so the watcher would never see the Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as watching:
        try:
            read_until(watching, "deny:")
            watching.send_signal(signal.SIGINT)
            _, err = watching.communicate(timeout=60)
        finally:
            if watching.poll() is None:
                watching.kill()  # a failure above must not leave the with block waiting on it for ever
    assert watching.returncode == ExitCode.INTERRUPTED
    assert err == "safepoint: stopped watching run r (the run itself goes on)\n"
    assert running.poll() is None  # the run still waits
    assert safepoint_in_process("deny", "r", "call_1", "-w", ws).returncode == 0
    running.communicate(timeout=120)
    wait_for(lambda: running.returncode is not None, "the run to end")


def test_watch_of_a_run_nobody_runs_ends_at_once_with_its_status(ran):
    done = safepoint_in_process("watch", "r", "-w", ran)
    assert done.returncode == 0 and done.stdout.endswith("run r: completed\n"), done.stdout
