"""The README's quickstarts followed literally, on a fresh folder: the scenario file as printed, the command lines
as printed (each one parsed by the CLI, the ones that apply to that run run in order), the own-loop snippet run
as written (its three stand-ins for the user's mailer and model given), and every call of the library-API block
bound to the real signature (an option renamed, a method gone, a positional turned keyword-only: a failure here).
In process, small inputs."""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import safepoint
from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process
from .test_suggest_commands import argv_of, problem

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def block(after: str, language: str, index: int = 0) -> str:
    """The ``index``-th fenced block of ``language`` after the heading or text ``after``."""
    start = README.index(after)
    blocks = re.findall(rf"```{language}\n(.*?)```", README[start:], re.S)
    return str(blocks[index])


def command_lines(text: str) -> list[str]:
    """The `safepoint ...` command of each line of a shell block (its comment left out)."""
    return [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("safepoint ")]


def test_every_command_line_of_the_quickstart_parses():
    lines = command_lines(block("## Quickstart: the command line", "sh"))
    assert len(lines) > 15
    refused = [f"{line}: {why}" for line in lines if (why := problem(argv_of(line))) is not None]
    assert refused == []


def test_the_command_line_quickstart_as_written(tmp_path, monkeypatch):
    (tmp_path / "scenario.json").write_text(block("## Quickstart: the command line", "json"))
    json.loads((tmp_path / "scenario.json").read_text())  # the printed JSON is JSON
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)  # `cd proj`

    def cli(line: str):
        return safepoint_in_process(*shlex.split(line)[1:], env=cli_env())

    lines = command_lines(block("## Quickstart: the command line", "sh"))
    ran = cli(lines[0])
    assert lines[0] == "safepoint run ../scenario.json --run-id r1"
    assert ran.returncode == ExitCode.OK, ran.stderr
    assert (proj / "a.py").read_text() == "x = 1\n"
    # What applies to this run (a finished run with one write): each line as printed, each an answer, no error.
    expected = {
        "safepoint status": ExitCode.OK,
        "safepoint approvals": ExitCode.OK,
        "safepoint explain r1": ExitCode.OK,
        "safepoint resume r1": ExitCode.OK,  # finished: nothing to resume, said so
        "safepoint ledger r1 --json": ExitCode.OK,
        "safepoint checkpoints r1 --json": ExitCode.OK,
        "safepoint conflicts r1": ExitCode.OK,
        "safepoint trace r1": ExitCode.OK,
        "safepoint rollback r1 --to step:1": ExitCode.OK,
    }
    for line, code in expected.items():
        assert line in lines, line
        done = cli(line)
        assert done.returncode == code, (line, done.stderr)
        assert "Traceback" not in done.stderr
    diff = cli("safepoint diff r1 --stat")
    assert diff.returncode == ExitCode.OK and "a.py" in diff.stdout, diff.stdout
    # A call the run does not have, as the README's call_7: one line naming where to look, exit 2.
    refused = cli("safepoint resume r1 --replay call_7")
    assert refused.returncode == ExitCode.USAGE and refused.stderr.count("\n") == 1, refused.stderr
    assert "`safepoint ledger r1`" in refused.stderr


class Mailer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def send(self, to: str, body: str, idempotency_key: str) -> None:
        self.sent.append((to, body, idempotency_key))


def test_the_own_loop_quickstart_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mailer, fed = Mailer(), []
    calls = [SimpleNamespace(name="send_email", args={"to": "team@example.com", "body": "hi"}, id="c1")]
    namespace: dict[str, Any] = {"mailer": mailer, "model_calls": lambda: calls, "feed_back": fed.append}
    exec(compile(block("## Quickstart: your own loop", "python"), "README own loop", "exec"), namespace)
    assert [to for to, _, _ in mailer.sent] == ["team@example.com"] and fed == ["sent"]
    sp = namespace["sp"]
    [row] = sp.status()
    assert row.status == "completed"
    [entry] = sp.ledger(row.run_id)
    assert entry.call_id == "c1" and entry.status == "succeeded" and mailer.sent[0][2] == entry.idempotency_key
    sp.close()


def _calls(text: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)]


def _bind(function: Any, call: ast.Call, *, method: bool) -> str | None:
    """Why the call's arguments do not fit ``function`` (None: they do). Values are placeholders: only names,
    counts and kinds are checked."""
    args = [None] * len(call.args)
    kwargs = {keyword.arg: None for keyword in call.keywords if keyword.arg is not None}
    try:
        inspect.signature(function).bind(*([None] if method else []), *args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


def test_every_call_of_the_library_api_block_fits_the_real_signature():
    text = block("The handle's methods return typed results", "python")
    handles = {"sp": safepoint.Safepoint, "follower": None, "safepoint": safepoint}
    checked, refused = 0, []
    for call in _calls(text):
        function = call.func
        if not (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)):
            continue
        owner = function.value.id
        if owner not in handles:
            continue
        if owner == "follower":
            from safepoint.review import Follower

            target: Any = getattr(Follower, function.attr, None)
        else:
            target = getattr(handles[owner], function.attr, None)
        if target is None:
            refused.append(f"{owner}.{function.attr}: no such name")
            continue
        method = owner in ("sp", "follower")
        if (why := _bind(target, call, method=method)) is not None:
            refused.append(f"{ast.unparse(call)}: {why}")
        checked += 1
    assert checked > 20 and refused == []


def test_the_check_sees_a_call_that_does_not_fit():
    [call] = _calls("sp.settle('r1', 'call_7', happen=True)")
    assert _bind(safepoint.Safepoint.settle, call, method=True) is not None
