"""The last findings of issue 11, and the attacker's own cases beside them: a tool approving its own held call
through the control channel, ignore rules the run itself widened before a command deleted the user's files, an
encrypted store's scratch files, and command lines whose reach is built at run time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import cli_env, safepoint_in_process

KEY = "ab" * 32


def _store_files(workspace):
    root = workspace / ".agent-runtime"
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _clear_words_in(workspace, words):
    return sorted(
        (str(path.relative_to(workspace)), word)
        for path, data in _store_files(workspace).items()
        for word in words
        if word.encode() in data
    )


# ------------------------------------------------------------------------------ §3 an encrypted store, every byte


def _git(workspace, *args):
    subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)


def test_an_encrypted_store_keeps_no_name_content_command_or_model_text_in_clear_through_a_crash(tmp_path):
    """Files (tracked, ignored, written by a tool and by commands), commands, model text, a crash while a command
    ran (its journal on disk), a resume, the user's edit and a rollback with a conflict: no byte of the store holds
    a workspace file name, a file's content, a command line or the model's text."""
    pytest.importorskip("cryptography")
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    (ws / "tracked-zebra.txt").write_text("contentZEBRA\n")
    _git(ws, "add", "-A")
    _git(ws, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x")
    (ws / ".gitignore").write_text("ignored-dir/\n")
    (ws / "ignored-dir").mkdir()
    (ws / "ignored-dir" / "secretname-okapi.txt").write_text("contentOKAPI\n")
    scenario = {
        "task": "task-text-narwhal",
        "turns": [
            {
                "text": "model-text-walrus",
                "tool_calls": [{"tool": "write_file", "args": {"path": "agent-heron.txt", "content": "cHERON\n"}}],
            },
            {
                "tool_calls": [
                    {
                        "tool": "run_command",
                        "args": {"command": "echo cIBEX > cmd-ibex.txt; rm ignored-dir/secretname-okapi.txt"},
                    }
                ]
            },
            {"tool_calls": [{"tool": "run_command", "args": {"command": "echo cLYNX >> tracked-zebra.txt"}}]},
            {"text": "final-text-quokka"},
        ],
    }
    (tmp_path / "s.json").write_text(json.dumps(scenario))
    env = cli_env(SAFEPOINT_KEY=KEY)
    run = [sys.executable, "-m", "safepoint", "run", str(tmp_path / "s.json"), "--run-id", "r", "-w", str(ws)]
    crashed = subprocess.run(
        run, env={**env, "SAFEPOINT_FAILPOINT": "after_tool:run_command"}, capture_output=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr
    words = ["zebra", "ZEBRA", "okapi", "OKAPI", "heron", "HERON", "ibex", "IBEX", "LYNX", "walrus", "narwhal"]
    journal = ws / ".agent-runtime" / "runs" / "r" / "tmp" / "capture-command.msgpack"
    assert journal.stat().st_size > 0  # the crash left the command's journal: it is checked too
    assert _clear_words_in(ws, words) == []
    resumed = safepoint_in_process("resume", "r", "-w", ws, "--skip", "call_2", env=env)
    assert resumed.returncode == 0, resumed.stderr
    (ws / "cmd-ibex.txt").write_text("user-edit-YAK\n")  # the user's edit: rollback keeps it (a conflict)
    back = safepoint_in_process("rollback", "r", "-w", ws, "--to", "step:1", "--include-uncertain", env=env)
    assert back.returncode == 7, back.stdout  # ExitCode.CONFLICTS: the user's edit is kept
    assert (ws / "cmd-ibex.txt").read_text() == "user-edit-YAK\n"
    assert _clear_words_in(ws, [*words, "YAK", "quokka", "cmd-"]) == []
