"""The public surface: the root namespace and ``safepoint.protocol`` pinned, typed results, the recovery actions
dispatched by ``recover``, the CLI on the library API only, and what start-up does not import."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess

import pytest

import safepoint
import safepoint.protocol
import safepoint.results
from safepoint import (
    CompensateExternalAction,
    ConfigError,
    RestoreSession,
    RollbackFiles,
    ToolContext,
)
from safepoint.core.rollback import RollbackPlan
from safepoint.errors import ExitCode, SafepointError
from safepoint.records import Checkpoint, Message, ToolLedgerEntry, to_plain
from safepoint.results import (
    AgentChanges,
    CheckpointSummary,
    Compensated,
    ConflictView,
    Explanation,
    History,
    Resolved,
    RunSummary,
    Submitted,
)

from .conftest import PY, ROOT, cli_env

SRC = pathlib.Path(ROOT) / "src" / "safepoint"


def test_the_root_namespace_is_pinned_and_small():
    assert sorted(safepoint.__all__) == sorted(
        [
            "Checkpoint",
            "CheckpointConflict",
            "CompensateExternalAction",
            "ConfigError",
            "CorruptRecordError",
            "DecisionNeeded",
            "ExitCode",
            "FilePatchEntry",
            "Message",
            "OpenAIProvider",
            "Provider",
            "ProviderError",
            "RecoveryAction",
            "RecoveryClosedError",
            "RestoreSession",
            "ResumeError",
            "RollbackFiles",
            "Run",
            "RunLockedError",
            "RunNotFoundError",
            "Safepoint",
            "SafepointError",
            "ScriptedProvider",
            "StaleGenerationError",
            "StoreError",
            "Tool",
            "ToolCall",
            "ToolContext",
            "ToolDefinition",
            "ToolFailure",
            "ToolLedgerEntry",
            "__version__",
            "open",
            "tool",
        ]
    )
    assert len(safepoint.__all__) <= 35
    for name in safepoint.__all__:
        assert getattr(safepoint, name) is not None
    for name in (
        "ConfigError",
        "CorruptRecordError",
        "DecisionNeeded",
        "ProviderError",
        "RecoveryClosedError",
        "ResumeError",
        "RunLockedError",
        "RunNotFoundError",
        "StaleGenerationError",
        "StoreError",
        "ToolFailure",
    ):
        assert issubclass(getattr(safepoint, name), safepoint.SafepointError)
    with pytest.raises(AttributeError, match="no attribute 'classify_command'"):
        _ = safepoint.classify_command  # moved: safepoint.core.commands


def test_the_protocol_module_is_pinned():
    assert sorted(safepoint.protocol.__all__) == sorted(
        [
            "PAYLOAD_MODES",
            "RECOVERY_FAILURE_REASONS",
            "REPLAY_FORBIDDEN_REASONS",
            "SELF_HEALING_PROMPT",
            "TERMINAL_STATUS_RESTART",
            "Approval",
            "CancelRequest",
            "ContextResetRequest",
            "ControlRecord",
            "ControlSeen",
            "ExecutionConfig",
            "RecoveryClass",
            "RecoveryFailureReason",
            "RecoveryOwnerTerminalEvent",
            "RecoveryReport",
            "ReplayForbidden",
            "ReplayForbiddenReason",
            "RestartMode",
            "Resumable",
            "RuntimeRestartCheckpoint",
            "RuntimeRestartCheckpointReplayDisposition",
            "RuntimeRestartQueuedSubmission",
            "RuntimeRestartReactionLoopState",
            "RuntimeRestartScheduledWorkContext",
            "RuntimeRestartToolApprovalWait",
            "ScheduledWorkContext",
            "SubagentSpawned",
            "Submission",
            "SubtaskStopped",
            "SuccessorAccepted",
        ]
    )
    for module in (safepoint.protocol, safepoint.results):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def _issue_tool(issues: dict[str, str]) -> safepoint.Tool:
    def close_issue(ctx: ToolContext, args: dict, result: str) -> str:
        issues[result] = "closed"
        return f"closed {result}"

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="medium", compensator=close_issue)
    def create_issue(ctx: ToolContext, title: str) -> str:
        issues["ISSUE-1"] = "open"
        return "ISSUE-1"

    return create_issue


def test_recover_dispatches_the_three_recovery_actions(workspace):
    issues: dict[str, str] = {}
    create_issue = _issue_tool(issues)
    (workspace / "a.txt").write_text("original\n")
    sp = safepoint.open(workspace=str(workspace))
    with sp.start("t", tools=[create_issue], run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "a.txt", "content": "agent\n"}, call_id="w1")
        run.call("create_issue", {"title": "x"}, call_id="c1")
        run.checkpoint()

    dry = sp.recover("r", RollbackFiles(checkpoint_id=start), dry_run=True)
    assert isinstance(dry, RollbackPlan) and [a.path for a in dry.actions] == ["a.txt"]
    assert (workspace / "a.txt").read_text() == "agent\n"  # a dry run changes nothing
    plan = sp.recover("r", RollbackFiles(checkpoint_id=start))
    assert isinstance(plan, RollbackPlan) and not plan.conflicts
    assert (workspace / "a.txt").read_text() == "original\n"

    restored = sp.recover("r", RestoreSession(checkpoint_id=start))
    assert isinstance(restored, Checkpoint) and restored.checkpoint_id != start
    assert sp.checkpoints("r")[-1].checkpoint_id == restored.checkpoint_id

    done = sp.recover("r", CompensateExternalAction(ledger_entry_id="c1"), tools=[create_issue])
    assert done == Compensated(run_id="r", compensated="c1", result="closed ISSUE-1")
    assert issues == {"ISSUE-1": "closed"}
    with pytest.raises(safepoint.ResumeError, match="at most once"):
        sp.recover("r", CompensateExternalAction(ledger_entry_id="c1"), tools=[create_issue])
    with pytest.raises(ConfigError, match="not a recovery action"):
        sp.recover("r", "rollback")  # type: ignore[arg-type]  # the wrong type on purpose


def test_results_are_typed(workspace):
    (workspace / "f.txt").write_text("base\n")
    sp = safepoint.open(workspace=str(workspace))
    with sp.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("write_file", {"path": "f.txt", "content": "agent\n"}, call_id="w1")
        run.checkpoint()
    (workspace / "f.txt").write_text("agent\nuser\n")

    [row] = sp.status("r")
    assert isinstance(row, RunSummary) and row.run_id == "r" and row.calls == 1
    assert sp.status() == [row]
    assert all(isinstance(c, CheckpointSummary) and c.complete for c in sp.checkpoints("r"))
    assert all(isinstance(e, ToolLedgerEntry) for e in sp.ledger("r"))
    changes = sp.agent_changes("r")
    assert changes == AgentChanges(run_id="r", would_commit=[], left_out=["f.txt"], reasons=changes.reasons)
    assert [(r.path, r.reason) for r in changes.reasons] == [("f.txt", "changed_since")]

    plan = sp.recover("r", RollbackFiles(checkpoint_id=start))
    assert [c.path for c in plan.conflicts] == ["f.txt"]
    [conflict] = sp.conflicts("r")
    assert isinstance(conflict, ConflictView) and conflict.resolution == "pending"
    assert "+agent" in conflict.agent_change and "+user" in conflict.changed_since
    explained = sp.explain("r")
    assert isinstance(explained, Explanation)
    assert [c.path for c in explained.conflicts] == ["f.txt"]
    data = to_plain(explained)  # what `explain --json` prints: the fields README documents
    assert {"run_id", "status", "resume_from", "calls", "needs_decision", "workspace_drift", "problems"} <= set(data)
    assert {"checkpoint_id", "step", "why"} <= set(data["resume_from"])
    assert {"call_id", "step_id", "tool", "status", "idempotency", "replay_policy", "replayable", "action", "why"} <= (
        set(data["calls"][0])
    )

    resolved = sp.resolve("r", "f.txt", "keep_user")
    assert resolved == Resolved(path="f.txt", resolution="keep_user")
    assert sp.conflicts("r") == []

    history = sp.history("r")
    assert isinstance(history, History) and all(isinstance(m, Message) for m in history.current)
    assert history.current[0].content == "t" and history.abandoned == []

    queued = sp.submit("r", "more please", key="k1")
    assert isinstance(queued, Submitted) and queued.submission_key == "k1" and queued.run_id == "r"


def test_commit_outside_git_says_so(workspace):
    sp = safepoint.open(workspace=str(workspace))
    with sp.start("t", run_id="r") as run:
        run.call("write_file", {"path": "f.txt", "content": "x\n"}, call_id="w1")
    with pytest.raises(ConfigError, match="not in a git repository"):
        sp.commit("r")


# the CLI on the library API ----------------------------------------------------------------------------------------
FORBIDDEN_FROM_CLI = (
    "safepoint.engine",
    "safepoint.restart",
    "safepoint.agent",
    "safepoint.supervisor",
    "safepoint.store",
)


def _imports(path: pathlib.Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def test_the_cli_imports_only_the_library_api():
    cli = sorted((SRC / "cli").glob("*.py"))
    assert cli
    for path in cli:
        if path.name == "db.py":  # `safepoint db migrate` is the store's own command (another part)
            continue
        leaks = [name for name in _imports(path) if name.startswith(FORBIDDEN_FROM_CLI)]
        assert leaks == [], f"{path.name} imports {leaks}"


def test_the_cli_and_the_daemon_use_exit_code_not_numbers():
    """Every exit code a command or the daemon ends with is ExitCode's: no literal number in an exit."""
    paths = [*sorted((SRC / "cli").glob("*.py")), SRC / "supervisor" / "daemon.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("Exit", "exit", "_exit"):
                assert not isinstance(node.args[0], ast.Constant), f"{path.name}:{node.lineno} exits with a number"
    daemon = (SRC / "supervisor" / "daemon.py").read_text()
    assert "SETTLED_EXITS = frozenset({0" not in daemon


def test_supervise_help_defaults_are_the_librarys():
    from safepoint import supervision
    from safepoint.cli import supervise

    assert supervise.DEFAULT_EXEC_TIMEOUT_S == supervision.DEFAULT_EXEC_TIMEOUT_S
    assert supervise.DEFAULT_LEASE_S == supervision.DEFAULT_LEASE_S


HEAVY = (
    "bashlex",
    "tree_sitter",  # the command classifier's parser
    "tree_sitter_bash",
    "openai",
    "psycopg",
    "merge3",
    "croniter",
    "safepoint.core.commands",
    "safepoint.engine.session",
    "safepoint.agent.loop",
    "rich.table",  # a person's table is drawn only when there is something to show
)

_PROBE = """
import json, sys
from typer.testing import CliRunner
from safepoint.cli.app import app
result = CliRunner().invoke(app, sys.argv[1:])
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"code": result.exit_code, "heavy": heavy}}))
"""


@pytest.mark.parametrize("args", [["--help"], ["status", "--json", "-w", "{ws}"], ["status", "-w", "{ws}"]])
def test_start_up_imports_nothing_heavy(workspace, args):
    """`safepoint --help` and `safepoint status` never load the engine, the command classifier (bashlex), the
    model client, the PostgreSQL driver, merge3 or croniter (bench/startup.py measures the time)."""
    argv = [a.format(ws=workspace) for a in args]
    probe = _PROBE.format(heavy=HEAVY)
    done = subprocess.run([PY, "-c", probe, *argv], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}


def test_status_of_an_empty_store_says_so_in_one_line(workspace):
    done = subprocess.run(
        [PY, "-m", "safepoint", "status", "-w", str(workspace)], env=cli_env(), capture_output=True, text=True
    )
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stdout.startswith("no runs in file:") and done.stdout.count("\n") == 1


def test_import_safepoint_is_light():
    code = f"import sys, safepoint; print([m for m in {(*HEAVY, 'safepoint.api')!r} if m in sys.modules])"
    done = subprocess.run([PY, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["status", "nope"], ExitCode.NOT_FOUND, "nope"),
        (["rollback", "nope", "--to", "ckpt_000001"], ExitCode.NOT_FOUND, "nope"),
        (["run", "missing.json"], ExitCode.USAGE, "missing.json"),
        (["commit", "nope", "--yes"], ExitCode.USAGE, "git"),
    ],
)
def test_a_json_failure_is_one_line_on_stderr_with_its_exit_code(workspace, args, code, says):
    done = subprocess.run(
        [PY, "-m", "safepoint", *args, "--json", "-w", str(workspace)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("safepoint: ") and says in lines[0], done.stderr
    # and the same error as a JSON object on stdout, its only line (issue 13)
    assert json.loads(done.stdout) == {"error": lines[0].removeprefix("safepoint: "), "exit_code": code}
    assert "Traceback" not in done.stderr


def test_every_safepoint_error_has_an_exit_code():
    import safepoint.errors as errors

    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, SafepointError):
            assert isinstance(value.exit_code, ExitCode)
