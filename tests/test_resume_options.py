"""``--replay`` and ``--skip`` name calls waiting for that decision, or the resume does nothing (issue 9 §3).

An unknown call id, a call that is not uncertain, one call given both, either on a finished run: one line, exit 2
(usage), and the run exactly as it was (its log, its owner's generation). The API raises the same typed errors.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import safepoint
from safepoint.errors import ExitCode, ResumeError, ResumeOptionError, UnknownReferenceError
from tests.conftest import cli_env, safepoint_in_process

SCENARIO = {
    "task": "t",
    "turns": [
        {"text": "writing", "tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]},
        {"text": "appending", "tool_calls": [{"tool": "run_command", "args": {"command": "echo once >> effect.txt"}}]},
        {"text": "done"},
    ],
}


@pytest.fixture(scope="module")
def crashed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run killed after its non-idempotent command ran: call_1 succeeded, call_2 waits for --replay/--skip."""
    base = tmp_path_factory.mktemp("crashed")
    ws = base / "ws"
    ws.mkdir()
    (base / "s.json").write_text(json.dumps(SCENARIO))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", base / "s.json", "-w", ws, "--run-id", "r", "--json"],
        env=cli_env(SAFEPOINT_FAILPOINT="after_tool:run_command"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return ws


@pytest.fixture
def crashed(tmp_path: Path, crashed_once: Path) -> Path:
    """Each test's own copy of the killed run's workspace (its store inside): one real kill for the module, and
    every test starts from it untouched (copied as test_ledger_damage copies its killed run)."""
    ws = tmp_path / "ws"
    shutil.copytree(crashed_once, ws, symlinks=True)
    return ws


def _state(ws: Path) -> tuple[bytes, int]:
    run_dir = ws / ".agent-runtime" / "runs" / "r"
    return (run_dir / "ledger.jsonl").read_bytes(), json.loads((run_dir / "owner.json").read_text()[9:])["generation"]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--replay", "nope"], "safepoint ledger r"),
        (["--skip", "nope"], "safepoint ledger r"),
        (["--replay", "call_1"], "succeeded, not uncertain"),
        (["--skip", "call_1"], "succeeded, not uncertain"),
        (["--skip", "call_2", "--replay", "call_2"], "both name call_2"),
        (["--replay", "call_2", "--replay", "nope"], "safepoint ledger r"),
    ],
)
def test_a_decision_that_does_not_apply_is_refused_and_changes_nothing(crashed, options, said):
    before = _state(crashed)
    done = safepoint_in_process("resume", "r", "-w", crashed, *options)
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert _state(crashed) == before, "a refused resume wrote to the run"
    assert (crashed / "effect.txt").read_text() == "once\n"


def test_an_already_uncertain_call_cannot_be_decided_again(crashed):
    """Skipped, reported to the model as uncertain, then the run is killed again before it ends: the call is no
    longer pending, and deciding it again is refused (the model decides whether to call it again)."""
    again = subprocess.run(
        [sys.executable, "-m", "safepoint", "resume", "r", "-w", crashed, "--skip", "call_2", "--json"],
        env=cli_env(SAFEPOINT_FAILPOINT="before_step"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == -signal.SIGKILL, again.stderr
    before = _state(crashed)
    for option in ("--replay", "--skip"):
        done = safepoint_in_process("resume", "r", "-w", crashed, option, "call_2")
        assert done.returncode == ExitCode.USAGE, done.stderr
        assert "already reported to the model as uncertain" in done.stderr and done.stderr.count("\n") == 1
    assert _state(crashed) == before
    assert (crashed / "effect.txt").read_text() == "once\n"


def test_a_finished_run_refuses_decisions_but_resumes_as_a_no_op(crashed):
    assert safepoint_in_process("resume", "r", "-w", crashed, "--skip", "call_2").returncode == ExitCode.OK
    assert safepoint_in_process("resume", "r", "-w", crashed).returncode == ExitCode.OK  # idempotent, as before
    done = safepoint_in_process("resume", "r", "-w", crashed, "--replay", "call_1")
    assert done.returncode == ExitCode.USAGE and "is completed" in done.stderr, done.stderr


def test_the_api_raises_the_same_typed_errors(crashed):
    sp = safepoint.open(workspace=str(crashed))
    try:
        before = _state(crashed)
        with pytest.raises(UnknownReferenceError, match="nope"):
            sp.resume("r", replay=["nope"])
        with pytest.raises(ResumeOptionError, match="both name call_2"):
            sp.resume("r", replay=["call_2"], skip=["call_2"])
        with pytest.raises(ResumeOptionError, match="not uncertain"):
            sp.resume("r", skip=["call_1"])
        with pytest.raises(ResumeOptionError):
            sp.nothing_to_resume("r", replay=["call_1"])
        assert issubclass(ResumeOptionError, ResumeError) and ResumeOptionError.exit_code == ExitCode.USAGE
        assert _state(crashed) == before
        with sp.resume("r", skip=["call_2"]) as run:
            assert sp.run_agent(run) == "completed"
    finally:
        sp.close()
    assert (crashed / "effect.txt").read_text() == "once\n"
