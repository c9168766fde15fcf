"""Findings of the review of gcattack, snapoff and ux (review6): each a test that fails on the code reviewed."""

from __future__ import annotations

import json
import shlex

import pytest

from safepoint.engine import failpoints
from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process


def _version(n: int) -> str:
    return "".join(f"v{n} line {i} {i * n * 7919 % 10007}\n" for i in range(3000))


class Crash(BaseException):
    pass


def test_gc_keeps_what_a_rollback_cut_short_on_a_finished_run_needs_so_its_named_fix_still_works(tmp_path, monkeypatch):
    """ux names `safepoint rollback RUN --to CKPT` as the fix of a rollback a crash cut short on a finished run;
    gcattack's gc treats that finished run as any other and frees the checkpoint the fix rolls back to."""
    ws = tmp_path / "ws"
    ws.mkdir()
    turns = [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.py", "content": _version(n)}}]} for n in range(5)
    ]
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "ok"}]}))

    def cli(*args: str):
        return safepoint_in_process(*args, "-w", str(ws), env=cli_env())

    assert cli("run", str(tmp_path / "s.json"), "--run-id", "r1").returncode == ExitCode.OK

    def dies(point: str, tool: str | None = None) -> None:
        if point == "after_started" and tool == "rollback_files":
            raise Crash()

    with monkeypatch.context() as patched:
        patched.setattr(failpoints, "hit", dies)
        with pytest.raises(Crash):
            cli("rollback", "r1", "--to", "step:1")
    assert (ws / "a.py").read_text() == _version(4)  # nothing reverted yet
    collected = cli("gc", "--keep", "1")
    assert collected.returncode == ExitCode.OK, collected.stderr
    [run] = json.loads(cli("gc", "--keep", "1", "--json").stdout)["runs"]
    assert run["kept_whole"] and "safepoint rollback r1 --to ckpt_" in run["why_whole"], run
    [cut] = json.loads(cli("explain", "r1", "--json").stdout)["cut_short"]
    followed = cli(*shlex.split(cut["fix"])[1:])  # literally, as the message says
    assert followed.returncode == ExitCode.OK, (cut["fix"], collected.stdout, followed.stdout, followed.stderr)
    assert (ws / "a.py").read_text() == _version(0)
