"""What a CLI command pays to start, pinned without timing anything (bench/startup.py measures the time).

Two gains, each held by a test that fails when a change drags the cost back in:

- the commands that only read a store (``status``, ``ledger``, ``checkpoints``, ``trace``, an unknown run) import
  neither the redactor's patterns, the engine, asyncio, the lifecycle module nor rich (``safepoint.api`` loads its
  heavier re-exports when first used);
- ``safepoint COMMAND ...`` has typer build that command only, not all forty (``cli.app.narrowed``), and what the
  narrowed parser says (every command's help, its usage errors, the root's options) is what the whole app says.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main

from .conftest import PY, cli_env

# What no read command may load: the engine and what it carries (the command classifier's parsers and tables, the
# redactor's patterns), asyncio (the Run handle), the store's lifecycle (gc, label, forget), rich (these commands
# print plain text), and the drivers a file store does not need.
NOT_FOR_READING = (
    "safepoint.engine",
    "safepoint.agent",
    "safepoint.run",
    "safepoint.lifecycle",
    "safepoint.core.progress",
    "safepoint.core.redact",
    "safepoint.core.commands",
    "safepoint.cli.render",
    "safepoint.cli.progress",
    "safepoint.supervision",
    "asyncio",
    "rich",
    "regex",
    "bashlex",
    "tree_sitter",
    "openai",
    "psycopg",
    "cryptography",
    "merge3",
    "croniter",
)

_PROBE = """
import contextlib, io, json, runpy, sys
commands, heavy_names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
codes = []
for argv in commands:
    sys.argv = ["safepoint", *argv]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            runpy.run_module("safepoint", run_name="__main__")  # `python -m safepoint ARGV`, in this process
        except SystemExit as done:
            codes.append(done.code)
heavy = sorted({m for m in sys.modules for h in heavy_names if m == h or m.startswith(h + ".")})
print(json.dumps({"codes": codes, "heavy": heavy}))
"""


def _one_finished_run(workspace: Any) -> None:
    import safepoint

    sp = safepoint.open(workspace=str(workspace))
    with sp.start("start-up", run_id="r1") as run:
        run.call("list_files", {}, call_id="c1")
        run.finish()
    sp.close()


def test_reading_commands_load_nothing_heavy(workspace):
    """One fresh process runs each command in turn (as ``python -m safepoint`` does): what the last leaves in
    ``sys.modules`` is the union of what they all loaded, so one child answers for all five."""
    _one_finished_run(workspace)
    ws = ["-w", str(workspace)]
    commands = [
        ["status", *ws],
        ["status", "--json", *ws],
        ["ledger", "r1", *ws],
        ["checkpoints", "r1", "--json", *ws],
        ["trace", "r1", *ws],
        ["status", "nope", *ws],  # an unknown run: its one-line error
    ]
    probe = [PY, "-c", _PROBE, json.dumps(commands), json.dumps(NOT_FOR_READING)]
    done = subprocess.run(probe, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"codes": [0, 0, 0, 0, 0, 4], "heavy": []}


# The narrowed parser ------------------------------------------------------------------------------------------


def _paths(command: Any, path: list[str]) -> Iterator[list[str]]:
    for name, sub in getattr(command, "commands", {}).items():
        yield [*path, name]
        yield from _paths(sub, [*path, name])


def _said(command: Any, args: list[str]) -> tuple[Any, str]:
    """(exit code or usage error, what was printed) of ``safepoint ARGS`` parsed by ``command`` (a click group)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = command.main(args, prog_name="safepoint", standalone_mode=False)
        except Exception as exc:  # click's UsageError and its kin: the message and code a person gets
            code = (type(exc).__name__, exc.format_message(), getattr(exc, "exit_code", None))
    return code, out.getvalue()


def test_a_command_line_builds_its_command_only():
    from safepoint.cli.app import app, narrowed

    assert list(typer.main.get_command(narrowed(["status", "-w", "."])).commands) == ["status"]
    assert list(typer.main.get_command(narrowed(["db", "migrate"])).commands) == ["db"]
    assert len(typer.main.get_command(app).commands) > 30  # what every command line built before


@pytest.mark.parametrize(
    "args",
    [
        [],  # no command: the root's help
        ["--help"],
        ["--version"],
        ["statu"],  # no such command: "Did you mean 'status'?" lists every command
        ["-w", "status"],
    ],
)
def test_what_is_no_command_line_is_parsed_by_the_whole_app(args):
    from safepoint.cli.app import app, narrowed

    assert narrowed(args) is app


def test_shell_completion_is_parsed_by_the_whole_app(monkeypatch):
    from safepoint.cli.app import app, narrowed

    monkeypatch.setenv("_SAFEPOINT_COMPLETE", "complete_bash")  # its words come from COMP_WORDS, not argv
    assert narrowed(["status"]) is app


def test_every_command_says_what_the_whole_app_says():
    """Every command and subcommand: its help and a usage error, parsed by the narrowed app and by the whole one
    (built once: building it per command line is the cost the narrowing saves)."""
    from safepoint.cli.app import app, narrowed

    whole = typer.main.get_command(app)
    paths = list(_paths(whole, []))
    assert len(paths) > 35 and ["schedule", "add"] in paths and ["db", "migrate"] in paths
    # and what no path's --help shows: a group with no command (its help, exit 2), a missing argument, a bad value,
    # an argument too many
    bare = [["schedule"], ["db"], ["ledger"]]
    misuse = [["explain", "r1", "--limit", "-1"], ["status", "r1", "extra"]]
    for path in paths:
        for args in ([*path, "--help"], [*path, "--no-such-option"], *([path] if path in bare else [])):
            parser = narrowed(args)
            assert parser is not app, args
            expected = _said(whole, args)
            said = ("NoSuchOption", "MissingParameter", "NoArgsIsHelpError")
            assert expected[1] or expected[0][0] in said, args  # the comparison sees what was said
            assert _said(typer.main.get_command(parser), args) == expected, args
    for args in misuse:
        expected = _said(whole, args)
        assert expected[0][0] in ("BadParameter", "UsageError"), (args, expected)
        assert _said(typer.main.get_command(narrowed(args)), args) == expected, args
