"""No process above a command shows it a withheld credential: not the reaper server or the command's supervisor
(started with no credential in their environment), not the agent (its copy blanked in place, and not dumpable, so
its /proc files are root's), whatever user runs it. Root reads every process's memory anyway: the blanking is what
holds there; the permission is tested as an ordinary user (the machine's `postgres` user)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import cli_env

PLANTED = "Zq81-" + "withheld-credential-value"

# Every process above the command: its pid, command line, and the credential's line of its environment (or why not).
ANCESTORS = (
    'p=$$; while [ "$p" -gt 1 ]; do '
    "echo \"== $p $(tr '\\0' ' ' < /proc/$p/cmdline | cut -c1-120)\"; "
    "tr '\\0' '\\n' < /proc/$p/environ 2>&1 | grep -a -e '^ATTACK_API_KEY=' -e 'denied' -e '^SAFEPOINT_STORE='; "
    "p=$(awk '{print $4}' /proc/$p/stat); done > ancestors.out 2>&1; "
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null"
    " | grep -a '^ATTACK_API_KEY=' | sort -u | rev > all.out"
)


def _scenario(folder, commands):
    script = os.path.join(folder, "scenario.json")
    turns = [{"tool_calls": [{"tool": "run_command", "args": {"command": c}}]} for c in commands]
    with open(script, "w") as handle:
        json.dump({"task": "t", "turns": [*turns, {"text": "done"}]}, handle)
    return script


def _store_bytes(workspace) -> bytes:
    root = os.path.join(workspace, ".agent-runtime")
    out = b""
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as handle:
                out += handle.read()
    return out


def _blocks(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("== "):
            current = line[3:]
            found[current] = []
        elif current:
            found[current].append(line)
    return found


def test_no_process_above_a_command_shows_it_a_withheld_credential(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = _scenario(tmp_path, [ANCESTORS])
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", script, "-w", str(workspace), "--run-id", "r"],
        env=cli_env(ATTACK_API_KEY=PLANTED, SAFEPOINT_STORE=f"file:{workspace}/.agent-runtime"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = (workspace / "ancestors.out").read_text()
    assert PLANTED not in seen and PLANTED[::-1] not in (workspace / "all.out").read_text(), seen
    blocks = _blocks(seen)
    reapers = [lines for name, lines in blocks.items() if "reaper.py --serve" in name]
    assert len(reapers) == 2, blocks  # the command's supervisor and the server: nothing of the credential at all
    assert all(lines == [] for lines in reapers), reapers
    agent = next(lines for name, lines in blocks.items() if "-m safepoint run" in name)
    assert agent and all(set(line.partition("=")[2]) <= {"*"} for line in agent if "=" in line), agent
    assert PLANTED[::-1].encode() not in _store_bytes(workspace)


def _as_postgres() -> tuple[str, dict[str, str]]:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to run a child as another user")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user on this machine")
    python = "/usr/bin/python3"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site = next(iter(__import__("glob").glob(os.path.join(root, ".venv", "lib", "python3*", "site-packages"))), "")
    env = {"PYTHONPATH": f"{root}/src:{site}", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}
    probe = subprocess.run(
        ["runuser", "-u", "postgres", "--", "env", *(f"{k}={v}" for k, v in env.items()), python, "-c",
         "import safepoint, msgspec, typer"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"the postgres user cannot import safepoint here: {probe.stderr[-200:]}")
    return python, env


def test_as_an_ordinary_user_the_agents_environment_is_not_readable_by_its_commands():
    """PR_SET_DUMPABLE 0: the agent's /proc/PID/environ is root's; its command (same user) is refused."""
    python, env = _as_postgres()
    folder = tempfile.mkdtemp(prefix="safepoint-procenv-", dir="/tmp")
    try:
        workspace = os.path.join(folder, "ws")
        os.mkdir(workspace)
        script = _scenario(folder, [ANCESTORS])
        for path in (folder, workspace, script):
            shutil.chown(path, "postgres", "postgres")
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", "env", *(f"{k}={v}" for k, v in env.items()),
             f"ATTACK_API_KEY={PLANTED}", python, "-m", "safepoint", "run", script, "-w", workspace, "--run-id", "r"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        with open(os.path.join(workspace, "ancestors.out")) as handle:
            seen = handle.read()
        with open(os.path.join(workspace, "all.out")) as handle:
            every = handle.read()
        assert PLANTED not in seen and PLANTED[::-1] not in every, seen
        agent = next(lines for name, lines in _blocks(seen).items() if "-m safepoint run" in name)
        assert any("denied" in line for line in agent), agent  # not dumpable: not even the blanked copy
        assert PLANTED[::-1].encode() not in _store_bytes(workspace)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_store_urls_password_on_the_command_line_is_blanked_and_the_process_keeps_its_values(tmp_path):
    code = (
        "import json, os, subprocess\n"
        "from safepoint.engine.procenv import hide_from_commands\n"
        "hide_from_commands({'PATH': os.environ['PATH']})\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').decode()\n"
        "environ = open('/proc/self/environ', 'rb').read().count(b'Sekr' + b'3tPw')\n"
        "child = subprocess.run(['sh', '-c', 'echo $DB_PASSWORD'], capture_output=True, text=True).stdout.strip()\n"
        "print(json.dumps([cmdline, environ, os.environ['DB_PASSWORD'], child]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--store", "postgresql://u:Sekr3tPw@db/x?password=Sekr3tPw"],
        env=cli_env(DB_PASSWORD="Sekr3tPw-env"), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cmdline, in_environ, kept, child = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Sekr3tPw" not in cmdline and "postgresql://u:" in cmdline, cmdline
    assert in_environ == 0
    assert kept == child == "Sekr3tPw-env"  # the process and its own children still have it
