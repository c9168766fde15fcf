"""--tools MODULE:ATTR finds a module in the current folder (as `python -m` would) and refuses what is not a tool
in one line; a local file never shadows an installed package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .conftest import cli_env

TOOLS = """
import safepoint

@safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def hello(ctx, name: str) -> str:
    return f"hello {name}"

not_a_tool = 5
"""
SCENARIO = '{"task": "t", "turns": [{"tool_calls": [{"tool": "hello", "args": {"name": "x"}}]}, {"text": "done"}]}'


def _cli(cwd, *args):
    exe = shutil.which("safepoint", path=os.path.dirname(sys.executable))
    assert exe is not None
    return subprocess.run([exe, *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=120)


def test_tools_load_from_the_current_folder_with_the_console_script(tmp_path):
    (tmp_path / "mytools.py").write_text(TOOLS)
    (tmp_path / "s.json").write_text(SCENARIO)
    done = _cli(tmp_path, "run", "s.json", "--tools", "mytools:hello", "--run-id", "r1", "--json")
    assert done.returncode == 0, done.stderr
    ledger = _cli(tmp_path, "ledger", "r1", "--json")
    assert '"status": "succeeded"' in ledger.stdout and '"tool_name": "hello"' in ledger.stdout


def test_something_that_is_not_a_tool_is_refused_in_one_line(tmp_path):
    (tmp_path / "mytools.py").write_text(TOOLS)
    (tmp_path / "s.json").write_text(SCENARIO)
    done = _cli(tmp_path, "run", "s.json", "--tools", "mytools:not_a_tool", "--run-id", "r2")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "is not a tool" in done.stderr
    missing = _cli(tmp_path, "run", "s.json", "--tools", "nowhere:hello", "--run-id", "r3")
    assert missing.returncode == 2 and "cannot load it" in missing.stderr and missing.stderr.count("\n") == 1


def test_a_local_file_never_shadows_an_installed_module(tmp_path):
    (tmp_path / "croniter.py").write_text("raise SystemExit('the local croniter.py was imported')\n")
    (tmp_path / "mytools.py").write_text("import croniter\n" + TOOLS)
    (tmp_path / "s.json").write_text(SCENARIO)
    done = _cli(tmp_path, "run", "s.json", "--tools", "mytools:hello", "--run-id", "r4")
    assert done.returncode == 0, done.stderr


def test_a_module_that_fails_to_import_or_a_spec_without_attr_is_one_line(tmp_path):
    (tmp_path / "s.json").write_text(SCENARIO)
    (tmp_path / "raising.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    for spec, said in [("raising:x", "RuntimeError: boom"), ("broken:x", "SyntaxError"), ("os", "MODULE:ATTR")]:
        done = _cli(tmp_path, "run", "s.json", "--tools", spec, "--run-id", "r5")
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and said in done.stderr and "Traceback" not in done.stderr
