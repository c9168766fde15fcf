"""Every command a message of the library or the CLI tells the user to run (a quoted `safepoint ...`) exists, with
those options and the arguments it requires: a suggestion followed literally is never a usage error. Checked on the
source's strings (docstrings and ``--help`` texts, which name commands rather than give a fix, are left out), each
parsed by the CLI's own parser without running it. Placeholders in capitals (RUN_ID, CALL_ID) stand for an
argument; a message that knows the run names it (the f-string's value)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import typer.main

import safepoint
from safepoint.cli.app import app

SRC = Path(safepoint.__file__).parent
QUOTED = re.compile(r"`(safepoint [^`]*)`")


def _text(node: ast.AST) -> str | None:
    """A string literal as the message reads (an f-string's values as X), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    return None


def _skipped(nodes: list[ast.AST]) -> set[int]:
    """ids of the nodes not to read on their own: docstrings, ``help=`` texts, and an f-string's constant parts
    (read with the whole f-string)."""
    skip: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and _text(first.value) is not None:
                skip.add(id(first.value))
        elif isinstance(node, ast.keyword) and node.arg == "help":
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    return skip


@functools.cache
def suggested() -> list[tuple[str, str]]:
    """(where, the quoted command) of every message string in the package."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text()
        if "`safepoint " not in source:
            continue  # no message here can quote a command (cheap: most modules are skipped unparsed)
        nodes = list(ast.walk(ast.parse(source)))  # one walk per module; the nodes stay alive (ids stay theirs)
        skip = _skipped(nodes)
        for node in nodes:
            text = _text(node)
            if text is None or id(node) in skip:
                continue
            for command in QUOTED.findall(text):
                found.append((f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}", command))
    return found


def argv_of(command: str) -> list[str]:
    """The command's words: "..." (the rest of what you would give), [optional parts] and the alternatives after a
    "|" left out."""
    words = re.sub(r"\s*\|\s*--[\w-]+", "", re.sub(r"\[[^\]]*\]", "", command)).split()[1:]
    return [w for w in words if w != "..."]


@functools.cache
def _cli() -> Any:
    return typer.main.get_command(app)


def problem(argv: list[str]) -> str | None:
    """Why the CLI's parser refuses ``argv`` (None: it takes it)."""
    current = _cli()
    name = []
    while hasattr(current, "commands") and argv and argv[0] in current.commands:
        name.append(argv[0])
        current = current.commands[argv.pop(0)]
    if hasattr(current, "commands"):
        return "no such command" if argv else None  # a group named alone: its --help lists the commands
    if argv[:1] == ["--help"]:
        return None
    try:
        current.make_context(" ".join(name), list(argv), resilient_parsing=False)
    except Exception as exc:  # typer's own click raises its UsageError kin
        message = getattr(exc, "format_message", None)
        return message() if message else repr(exc)
    return None


def test_the_walk_finds_the_messages_it_checks():
    commands = [command for _, command in suggested()]
    assert len(commands) > 40
    assert any(c.startswith("safepoint fsck") for c in commands)
    assert any("--successor-of" in c for c in commands)


def test_every_suggested_command_parses_as_written():
    refused = []
    for where, command in suggested():
        if (why := problem(argv_of(command))) is not None:
            refused.append(f"{where}: `{command}`: {why}")
    assert refused == []


def test_the_check_refuses_what_the_cli_would():
    assert problem(argv_of("safepoint ledger")) is not None  # its run is required
    assert problem(argv_of("safepoint resume X --replay")) is not None  # the option needs its call
    assert problem(argv_of("safepoint resume X --bogus")) is not None
    assert problem(argv_of("safepoint nosuch X")) is not None
    assert problem(argv_of("safepoint resolve X PATH --keep-user | --apply-agent")) is None
