"""The CLI's everyday surface (issue 13, the CLI §6): --version, shell completion, help on every option, --to step:N,
checkpoints naming their call, tables that read well at 80 columns and say none when empty, errors under --json as
a JSON object, and `status` saying a crashed run waits for a decision when it does."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version

import pytest
import typer.main

from safepoint.cli.app import app
from safepoint.errors import ExitCode

from .conftest import PY, cli_env, safepoint_in_process

LONG_TASK = "refactor the payment module so that every retry is idempotent and logged " * 3
SCRIPT = {
    "task": LONG_TASK,
    "turns": [
        {
            "text": "Writing the first files of a rather long change that explains itself at length. " * 4,
            "tool_calls": [
                {"tool": "write_file", "args": {"path": "src/payments/a_long_module_name.py", "content": "x"}},
                {"tool": "run_command", "args": {"command": "echo " + "word " * 40}},
            ],
        },
        {"tool_calls": [{"tool": "write_file", "args": {"path": "b.txt", "content": "b\n"}}]},
        {"text": "done"},
    ],
}  # fmt: skip


def _walk(command, path):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, [*path, name])


def test_every_parameter_of_every_command_has_help():
    missing = [
        f"{' '.join(path)} {param.name}"
        for path, command in _walk(typer.main.get_command(app), ["safepoint"])
        for param in command.params
        if not (getattr(param, "help", None) or "").strip()
    ]
    assert missing == []


def test_version():
    done = safepoint_in_process("--version")
    assert done.returncode == 0 and done.stdout == f"safepoint {version('safepoint')}\n"


def test_shell_completion_is_typer_s_and_completes_commands():
    # typer detects the shell from the parent process (shellingham): bash here, whatever runs the tests (CI's
    # make starts them from sh, which typer has no completion for)
    shown = subprocess.run(
        ["bash", "-c", f"{PY} -m safepoint --show-completion; exit $?"], env=cli_env(), capture_output=True, text=True
    )
    assert shown.returncode == 0 and "_safepoint_completion" in shown.stdout and "complete " in shown.stdout
    env = cli_env(_SAFEPOINT_COMPLETE="complete_bash", COMP_WORDS="safepoint sta", COMP_CWORD="1")
    completed = subprocess.run([PY, "-m", "safepoint"], env=env, capture_output=True, text=True)
    assert completed.stdout.split() == ["status"], completed


@pytest.fixture
def ran(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "s.json").write_text(json.dumps(SCRIPT))
    done = safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r", "-q")
    assert done.returncode == 0, done.stderr
    return ws


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["status", "r"],
        ["ledger", "r"],
        ["checkpoints", "r"],
        ["history", "r"],
        ["history", "r", "--all"],
        ["diff", "r", "--stat"],
        ["approvals"],
        ["conflicts", "r"],
    ],
)
def test_tables_fit_80_columns(ran, args):
    done = safepoint_in_process(*args, "-w", ran, env=cli_env(COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    too_wide = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert too_wide == [], done.stdout
    assert done.stdout.strip()


def test_checkpoints_name_their_call_and_step_n_finds_one(ran):
    rows = json.loads(safepoint_in_process("checkpoints", "r", "-w", ran, "--json").stdout)
    tool = [(row["kind"], row["call_id"]) for row in rows if row["kind"] in ("tool_start", "tool_end")]
    # call_2 runs in call_1's step: call_1's tool_end already holds the state its tool_start would (issue 10 §5)
    assert tool == [
        ("tool_start", "call_1"),
        ("tool_end", "call_1"),
        ("tool_end", "call_2"),
        ("tool_start", "call_3"),
        ("tool_end", "call_3"),
    ]
    assert all(row["call_id"] is None for row in rows if row["kind"] in ("before_step", "after_step"))
    shown = safepoint_in_process("checkpoints", "r", "-w", ran).stdout
    assert any(" tool_end " in line and " call_3 " in line for line in shown.splitlines())
    after_step_1 = next(r["checkpoint_id"] for r in rows if r["kind"] == "after_step" and r["step"] == 1)
    by_step = json.loads(
        safepoint_in_process("rollback", "r", "--to", "step:1", "--dry-run", "--json", "-w", ran).stdout
    )
    by_id = json.loads(
        safepoint_in_process("rollback", "r", "--to", after_step_1, "--dry-run", "--json", "-w", ran).stdout
    )
    assert by_step == by_id and by_step["checkpoint_id"] == after_step_1
    assert [a["path"] for a in by_step["actions"]] == ["b.txt"]
    from_start = json.loads(
        safepoint_in_process("rollback", "r", "--to", "step:0", "--dry-run", "--json", "-w", ran).stdout
    )
    assert from_start["checkpoint_id"] == rows[0]["checkpoint_id"] and len(from_start["actions"]) == 2
    restored = safepoint_in_process("restore", "r", "--to", "step:2", "-w", ran)
    assert restored.returncode == 0, restored.stderr


@pytest.mark.parametrize("ref", ["step:9", "step:x", "step:"])
def test_a_step_the_run_does_not_have_is_one_line(ran, ref):
    for command in (["rollback", "r", "--to", ref, "--dry-run"], ["restore", "r", "--to", ref]):
        done = safepoint_in_process(*command, "-w", ran)
        assert done.returncode == ExitCode.USAGE and done.stderr.count("\n") == 1, done.stderr
        assert "safepoint checkpoints r" in done.stderr or "step:N" in done.stderr


def test_empty_tables_say_none(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [{"text": "nothing to do"}]}))
    assert safepoint_in_process("run", tmp_path / "s.json", "-w", ws, "--run-id", "r", "-q").returncode == 0
    assert safepoint_in_process("ledger", "r", "-w", ws).stdout == "none: no tool call in this run yet\n"
    assert safepoint_in_process("diff", "r", "-w", ws).stdout == "no changes by run r\n"
    assert safepoint_in_process("approvals", "-w", ws).stdout == "no call waits for approval\n"
    assert safepoint_in_process("conflicts", "r", "-w", ws).stdout == "no pending conflicts\n"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["ledger", "nope"], ExitCode.NOT_FOUND),
        (["checkpoints", "nope"], ExitCode.NOT_FOUND),
        (["explain", "nope"], ExitCode.NOT_FOUND),
        (["history", "nope"], ExitCode.NOT_FOUND),
        (["diff", "nope"], ExitCode.NOT_FOUND),
        (["watch", "nope"], ExitCode.NOT_FOUND),
        (["approvals", "nope"], ExitCode.NOT_FOUND),
        (["resume", "nope"], ExitCode.NOT_FOUND),
        (["diff", "r", "--call", "nope"], ExitCode.USAGE),
        (["rollback", "r", "--to", "step:9"], ExitCode.USAGE),
        (["restore", "r", "--to", "ckpt_nope"], ExitCode.USAGE),
        (["resolve", "r", "nothing.txt", "--keep-user"], ExitCode.USAGE),
        (["resolve", "r", "nothing.txt"], ExitCode.USAGE),
        (["settle", "r", "call_1"], ExitCode.USAGE),
        (["settle", "r", "call_1", "--happened"], ExitCode.USAGE),
        (["approve", "r", "call_1"], ExitCode.FAILED),
        (["compensate", "r", "nope"], ExitCode.USAGE),
        (["resume", "r", "--replay", "nope"], ExitCode.USAGE),
        (["ledger"], ExitCode.USAGE),
        (["ledger", "r", "--bogus"], ExitCode.USAGE),
        (["nosuchcommand"], ExitCode.USAGE),
        (["run", "missing.json"], ExitCode.USAGE),
        (["run", "--approval", "sometimes"], ExitCode.USAGE),
    ],
)
def test_every_error_under_json_is_a_json_object_on_stdout(ran, args, code):
    done = safepoint_in_process(*args, "--json", "-w", ran)
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("safepoint: "), done.stderr
    error = json.loads(done.stdout.splitlines()[-1])
    assert error == {"error": lines[0].removeprefix("safepoint: "), "exit_code": code}


def test_without_json_an_error_stays_off_stdout(ran):
    done = safepoint_in_process("ledger", "nope", "-w", ran)
    assert done.returncode == ExitCode.NOT_FOUND and done.stdout == "" and done.stderr.count("\n") == 1


def test_status_says_a_crashed_run_waits_for_a_decision(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "tools_ask.py").write_text(
        "import safepoint\n"
        "@safepoint.tool(idempotency='non_idempotent', replay_policy='ask', risk_level='medium')\n"
        "def pay(ctx, amount: int) -> str:\n    return 'paid'\n"
    )
    script = {"task": "t", "turns": [{"tool_calls": [{"tool": "pay", "args": {"amount": 1}}]}, {"text": "ok"}]}
    (tmp_path / "s.json").write_text(json.dumps(script))
    run = [PY, "-m", "safepoint", "run", "s.json", "-w", str(ws), "--run-id", "r", "--tools", "tools_ask:pay"]
    env = cli_env(SAFEPOINT_FAILPOINT="after_started:pay")
    assert subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, timeout=120).returncode == -9
    status = json.loads(safepoint_in_process("status", "r", "-w", ws, "--json").stdout)
    assert status["status"] == "waiting_decision"
    table = safepoint_in_process("status", "-w", ws).stdout
    assert "waiting_decision" in table and "interrupted" not in table
    # a crashed run with nothing to decide is interrupted, as before
    write = {"tool": "write_file", "args": {"path": "a", "content": "x"}}
    script = {"task": "t", "turns": [{"tool_calls": [write]}]}
    (tmp_path / "s2.json").write_text(json.dumps(script))
    run2 = [PY, "-m", "safepoint", "run", "s2.json", "-w", str(ws), "--run-id", "r2"]
    env2 = cli_env(SAFEPOINT_FAILPOINT="after_started:write_file")
    assert subprocess.run(run2, cwd=tmp_path, env=env2, capture_output=True, timeout=120).returncode == -9
    assert json.loads(safepoint_in_process("status", "r2", "-w", ws, "--json").stdout)["status"] == "interrupted"
