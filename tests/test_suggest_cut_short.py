"""A rollback a crash cut short on a finished run: a resume finishes such an action only for a run it resumes, and a
completed run is never resumed, so it stayed half done with nobody told (``resume``: "nothing to resume";
``explain``: "uncertain but safe to run again", and nothing would). Now ``explain`` and ``resume`` name it with the
command that finishes it, and that command, followed literally, finishes it. In process; the crash is the
failpoint's moment (``started`` durable, nothing reverted), raised as a BaseException past the command."""

from __future__ import annotations

import json
import shlex

import pytest

from safepoint.engine import failpoints
from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process


class Crash(BaseException):
    pass


def killed_in(monkeypatch, point: str, tool: str, command) -> None:
    """``command()`` (a CLI call in this process) killed at fault point ``point`` of ``tool``: what a SIGKILL
    there leaves, without a process."""

    def dies(at: str, name: str | None = None) -> None:
        if at == point and name == tool:
            raise Crash()

    with monkeypatch.context() as patched:
        patched.setattr(failpoints, "hit", dies)
        with pytest.raises(Crash):
            command()


def test_a_rollback_cut_short_on_a_completed_run_is_named_with_a_fix_that_finishes_it(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    writes = [{"tool": "write_file", "args": {"path": p, "content": "x = 1\n"}} for p in ("a.py", "b.py")]
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [{"tool_calls": writes}, {"text": "ok"}]}))

    def cli(*args: str):
        return safepoint_in_process(*args, "-w", str(ws), env=cli_env())

    assert cli("run", str(tmp_path / "s.json"), "--run-id", "r1").returncode == ExitCode.OK

    killed_in(monkeypatch, "after_started", "rollback_files", lambda: cli("rollback", "r1", "--to", "step:0"))
    assert (ws / "a.py").exists() and (ws / "b.py").exists()  # nothing reverted yet
    preview = cli("rollback", "r1", "--to", "step:0", "--dry-run")  # a preview: answered, nothing written
    assert preview.returncode == ExitCode.OK and "would revert" in preview.stdout, preview.stderr
    assert (ws / "a.py").exists() and (ws / "b.py").exists()
    mistyped = cli("rollback", "r1", "--to", "ckpt_999999")  # refused in one line: and nothing written
    assert mistyped.returncode == ExitCode.USAGE and "`safepoint checkpoints r1`" in mistyped.stderr
    assert (ws / "a.py").exists() and (ws / "b.py").exists()

    resumed = cli("resume", "r1")
    assert resumed.returncode == ExitCode.OK
    [_, hint] = resumed.stdout.splitlines()
    fix = hint.partition("was cut short by a crash: ")[2]
    assert fix.startswith("safepoint rollback r1 --to ckpt_"), resumed.stdout
    [cut] = json.loads(cli("explain", "r1", "--json").stdout)["cut_short"]
    assert cut["fix"] == fix and cut["tool"] == "rollback_files"
    assert fix in " ".join(cli("explain", "r1").stdout.split())

    followed = cli(*shlex.split(fix)[1:])  # literally
    assert followed.returncode == ExitCode.OK, followed.stderr
    assert not (ws / "a.py").exists() and not (ws / "b.py").exists()
    assert json.loads(cli("explain", "r1", "--json").stdout)["cut_short"] == []
    assert cli("resume", "r1").stdout == "run r1: completed already; nothing to resume\n"


def test_the_rollback_and_explain_name_the_conflict_commands_for_this_run_and_they_work(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write = {"tool": "write_file", "args": {"path": "my file.py", "content": "x = 1\n"}}
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [{"tool_calls": [write]}, {"text": "ok"}]}))

    def cli(*args: str):
        return safepoint_in_process(*args, "-w", str(ws), env=cli_env(COLUMNS="200"))

    assert cli("run", str(tmp_path / "s.json"), "--run-id", "r1").returncode == ExitCode.OK
    (ws / "my file.py").write_text("x = 1\n# mine\n")
    rolled = cli("rollback", "r1", "--to", "step:0")
    assert rolled.returncode == ExitCode.CONFLICTS
    said = " ".join(rolled.stdout.split())
    assert "`safepoint conflicts r1`" in said and "`safepoint resolve r1 'my file.py' --keep-user`" in said, said
    assert "(`safepoint conflicts r1`)" in " ".join(cli("explain", "r1").stdout.split())
    for command in ("safepoint conflicts r1", "safepoint resolve r1 'my file.py' --keep-user"):
        done = cli(*shlex.split(command)[1:])  # literally
        assert done.returncode == ExitCode.OK, (command, done.stderr)
    assert (ws / "my file.py").read_text() == "x = 1\n# mine\n"


def test_step_n_names_the_state_after_a_step_a_crash_cut_before_its_after_step(tmp_path, monkeypatch):
    """Killed after step 1's write was recorded, before its after_step checkpoint; resumed to the end. The user's
    `rollback --to step:1` was refused ("no complete checkpoint after step 1"): step 2's before_step holds it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    turns = [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.py", "content": "a = 1\n"}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "b.py", "content": "b = 1\n"}}]},
        {"text": "ok"},
    ]
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": turns}))

    def cli(*args: str):
        return safepoint_in_process(*args, "-w", str(ws), env=cli_env())

    killed_in(
        monkeypatch, "after_outcome", "write_file", lambda: cli("run", str(tmp_path / "s.json"), "--run-id", "r1")
    )
    assert cli("resume", "r1").returncode == ExitCode.OK
    rolled = cli("rollback", "r1", "--to", "step:1")
    assert rolled.returncode == ExitCode.OK, rolled.stderr
    assert (ws / "a.py").exists() and not (ws / "b.py").exists()
