"""Issue 11, the store defends itself (second attack): a store brought from elsewhere is not resumed on its own, a
hard link cannot give a file of the store or .git a second name, and a log that lost its beginning is never taken
at its word (fsck says so after every repair, resume and the daemon refuse it in one line)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import safepoint
from safepoint.core.command_findings import PROTECTED_EFFECT
from safepoint.core.command_reach import classify_with_reach
from safepoint.errors import DamagedLogError, ExitCode
from safepoint.supervisor.daemon import same_workspace

from .conftest import cli_env, safepoint_in_process

# ------------------------------------------------------------------------------------------- hard links


@pytest.mark.parametrize(
    "command",
    [
        "ln .agent-runtime/runs/r/ledger.jsonl notes.txt",
        "ln -f .git/config x",
        "ln -- .GIT/config y",  # a case-insensitive filesystem
        "ln -S .bak .git/index y",  # an option's value is not the source
        "ln -t d .git/index",  # every operand is a source with -t
        "ln --target-directory=d .agent-runtime/runs/r/owner.json",
        "cd .git && ln config ../x",  # the source placed under the cd
        "cp -l .git/HEAD h",
        "cp --link .agent-runtime/runs/r/ledger.jsonl y",
        "cp -al .agent-runtime backup",  # a tree of hard links
        "link .git/config x",  # coreutils' link: no spec, every word may be a path it writes
        "true && ln .git/hooks/pre-commit hook",
    ],
)
def test_a_hard_link_to_a_file_of_the_store_or_git_is_held(command):
    verdict = classify_with_reach(command)
    assert PROTECTED_EFFECT in verdict.side_effects, verdict
    assert verdict.replay_policy == "ask"


@pytest.mark.parametrize(
    "command",
    ["ln a.txt b.txt", "ln -f src/x.py x.py", "cp -l build/out dist/out", "cp .git/HEAD head.txt", "cp -r src dst"],
)
def test_a_link_or_copy_of_the_users_own_files_is_not_held_for_this(command):
    """A copy (a new file) or a link between the user's files gives nothing protected a second name."""
    assert PROTECTED_EFFECT not in classify_with_reach(command).side_effects


def test_the_truncation_through_a_hard_link_never_runs(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:
        run.call_result("write_file", {"path": "a.txt", "content": "evidence\n"}, call_id="first")
        run.call_result("run_command", {"command": "cp -l .agent-runtime/runs/r/ledger.jsonl n.txt"}, call_id="c1")
        run.call_result("run_command", {"command": "truncate -s 0 n.txt"}, call_id="c2")
    n = workspace / "n.txt"
    assert not n.exists() or n.stat().st_nlink == 1, "the store's log got a second name"  # truncate makes n.txt
    assert b'"first"' in (workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl").read_bytes()


# ------------------------------------------------------------------------------------------- a log cut at its start


def _cut_run(workspace, keep_from: float = 0.5):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.checkpoint()
        run.call_result("write_file", {"path": "a.txt", "content": "a\n"}, call_id="c1")
        run.call_result("run_command", {"command": "echo sent >> sent.txt"}, call_id="c2")
        run.checkpoint()
        run.call_result("write_file", {"path": "b.txt", "content": "b\n"}, call_id="c3")
    log = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    return tm, log, lines


def test_fsck_says_the_lost_beginning_before_and_after_every_repair(workspace):
    tm, log, lines = _cut_run(workspace)
    log.write_bytes(b"".join(lines[3:]))
    first = tm.fsck("r")
    assert any("records 1..3 are missing (lost for good)" in p.problem for p in first.problems), first
    tm.fsck("r", repair=True)
    for _ in range(2):
        again = tm.fsck("r")
        assert [p.problem for p in again.problems] == ["records 1..3 are missing (lost for good)"]


def test_fsck_says_a_hole_in_the_middle_of_a_log_cut_cleanly(workspace):
    """The same family: whole lines taken out of the middle leave the log in order, checksums and all."""
    tm, log, lines = _cut_run(workspace)
    log.write_bytes(b"".join(lines[:5] + lines[8:]))
    tm.fsck("r", repair=True)
    again = tm.fsck("r")
    assert any("records 6..8 are missing (lost for good)" in p.problem for p in again.problems), again


def test_an_intact_log_stays_clean(workspace):
    tm, _, _ = _cut_run(workspace)
    assert tm.fsck("r").problems == []


def test_explain_and_resume_refuse_a_log_that_lost_its_beginning(workspace):
    tm, log, lines = _cut_run(workspace)
    log.write_bytes(b"".join(lines[len(lines) // 2 :]))
    before = log.read_bytes()
    explained = tm.explain("r")
    assert "is not resumed" in explained.resume_from.why
    assert "starts again from its first step" not in explained.resume_from.why
    with pytest.raises(DamagedLogError) as refused:
        tm.resume("r")
    assert refused.value.exit_code == ExitCode.DAMAGED
    assert "lost for good" in str(refused.value) and "\n" not in str(refused.value)
    assert log.read_bytes() == before, "a refused resume wrote to the damaged log"
    assert (workspace / "sent.txt").read_text() == "sent\n", "a lost call ran again"


def test_the_cli_resume_of_a_log_that_lost_its_beginning_is_one_line_exit_12(tmp_path):
    marker = tmp_path / "RAN"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _crashed_scenario_run(tmp_path, workspace, marker)
    log = workspace / ".agent-runtime" / "runs" / "x" / "ledger.jsonl"
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[2:]))
    done = safepoint_in_process("resume", "x", "--workspace", workspace)
    assert done.returncode == ExitCode.DAMAGED, done
    assert "records 1..2 are lost for good" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not marker.exists()


# ------------------------------------------------------------------------------------------- a store from elsewhere


def test_a_workspace_is_compared_by_its_real_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert same_workspace(str(tmp_path / "link"), str(real))
    assert same_workspace(str(real) + "/", str(real))
    assert same_workspace(str(real / "sub" / ".."), str(real))
    assert not same_workspace(str(tmp_path / "other"), str(real))


def _crashed_scenario_run(tmp_path, workspace, marker):
    scenario = {
        "task": "t",
        "turns": [
            {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
            {"tool_calls": [{"tool": "run_command", "args": {"command": f"echo ran > {marker}"}}]},
            {"text": "done"},
        ],
    }
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    made = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(tmp_path / "s.json"), "--run-id", "x", "-w", str(workspace)],
        env={**cli_env(), "SAFEPOINT_FAILPOINT": "after_outcome:write_file"},
        capture_output=True,
        timeout=120,
    )
    assert made.returncode == -9, made.stderr


def _daemon_once(workspace):
    return subprocess.run(
        [sys.executable, "-m", "safepoint", "daemon", "--once", "--json", "--workspace", str(workspace)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_store_from_elsewhere_is_said_in_one_line_and_left_for_a_person(tmp_path):
    marker = tmp_path / "RAN"
    elsewhere, clone = tmp_path / "elsewhere", tmp_path / "clone"
    elsewhere.mkdir()
    _crashed_scenario_run(tmp_path, elsewhere, marker)
    clone.mkdir()
    shutil.copytree(elsewhere / ".agent-runtime", clone / ".agent-runtime")
    for path in (clone / ".agent-runtime").rglob("lock"):
        path.unlink()
    daemon = _daemon_once(clone)
    assert not marker.exists()
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.startswith("{")]
    foreign = [e for e in events if e.get("why") == "foreign workspace"]
    assert len(foreign) == 1, daemon.stdout
    assert str(elsewhere) in foreign[0]["detail"] and "by hand" in foreign[0]["detail"]


def test_the_daemon_still_resumes_a_run_of_its_workspace_reached_through_a_symlink(tmp_path):
    """Real paths: the run recorded the workspace's real path, the daemon is started through a link to it."""
    marker = tmp_path / "RAN"
    real = tmp_path / "real"
    real.mkdir()
    _crashed_scenario_run(tmp_path, real, marker)
    (tmp_path / "link").symlink_to(real)
    daemon = _daemon_once(tmp_path / "link")
    assert "foreign workspace" not in daemon.stdout
    assert marker.exists(), daemon.stdout + daemon.stderr


def test_the_daemon_leaves_a_run_whose_log_lost_its_beginning_in_one_line(tmp_path):
    marker = tmp_path / "RAN"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _crashed_scenario_run(tmp_path, workspace, marker)
    log = workspace / ".agent-runtime" / "runs" / "x" / "ledger.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[2:]))
    daemon = _daemon_once(workspace)
    assert not marker.exists(), "the daemon resumed a run whose log lost its beginning"
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.startswith("{")]
    said = [e for e in events if "lost for good" in str(e.get("detail", ""))]
    assert len(said) == 1, daemon.stdout
