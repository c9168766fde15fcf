"""Promise 9, the store's half: the store and every `.git` out of the agent's reach, the store's files private.

Beside `tests/test_attack_store.py`'s cases: more spellings of a path into `.git` for the tools, the commands a
real agent types that reach the store or `.git` (held for a decision, whatever the approval mode) and the ones that
do not (they run), a store deleted anyway (one line, never a traceback), the store's modes under a permissive
umask, and safepoint's own git commands that never run a planted hook or fsmonitor.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.errors import ExitCode, StoreError
from tests.attacks import tree
from tests.conftest import cli_env, safepoint_in_process


def git(workspace, *args):
    subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)


def repo(workspace):
    git(workspace, "-c", "init.defaultBranch=main", "init", "-q")
    git(workspace, "config", "user.name", "T")
    git(workspace, "config", "user.email", "t@example.com")
    (workspace / "t.txt").write_text("t\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")


# ------------------------------------------------------------------------------ the tools


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write_file", {"path": ".GIT/config", "content": "[core]\n\tfsmonitor = ./x\n"}),
        ("write_file", {"path": "sub/../.git/hooks/pre-push", "content": "echo pwned\n"}),
        ("write_file", {"path": "hooks-link/pre-commit", "content": "echo pwned\n"}),
        ("write_file", {"path": ".git", "content": "gitdir: /elsewhere\n"}),
        ("read_file", {"path": ".git/config"}),
        ("apply_patch", {"patch": "--- a/.git/config\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"}),
        ("write_file", {"path": ".agent-runtime/runs/r/owner.json", "content": "{}"}),
        ("write_file", {"path": ".Agent-Runtime/x", "content": "{}"}),
    ],
    ids=["case", "dotdot", "link-into-git", "git-file", "read-config", "patch-deletes", "store", "store-case"],
)
def test_the_tools_refuse_every_spelling_of_git_and_the_store(workspace, tool, args):
    repo(workspace)
    (workspace / "hooks-link").symlink_to(workspace / ".git" / "hooks")
    (workspace / ".git" / "config").write_text("x\n") if tool == "apply_patch" else None
    before = tree(workspace / ".git")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "failed", result.observation
    assert "tools may not touch it" in result.observation
    assert "\n" not in result.observation.strip()
    assert tree(workspace / ".git") == before
    assert not (workspace / ".Agent-Runtime").exists() or os.path.samefile(
        workspace / ".Agent-Runtime", workspace / ".agent-runtime"
    )


def test_rollback_and_files_beside_git_keep_working(workspace):
    """Names that only look like `.git` are the user's: `.github/`, `.gitignore`, `x.git`; rollback puts them back."""
    repo(workspace)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        for i, path in enumerate([".github/workflows/ci.yml", ".gitignore", "x.git", "t.txt"]):
            result = run.call_result("write_file", {"path": path, "content": "new\n"}, call_id=f"c{i}")
            assert result.status == "succeeded", result.observation
    tm.rollback_files("r", start)
    assert (workspace / "t.txt").read_text() == "t\n"
    assert not (workspace / ".github" / "workflows" / "ci.yml").exists() and not (workspace / "x.git").exists()


# ------------------------------------------------------------------------------ the commands

HELD = [
    "git clean -fdx",
    "git clean -fdX",
    "git clean -xdf .",
    "rm -rf .agent-runtime",
    "rm -rf ./.agent-runtime/runs",
    "rm -rf .[a-z]*",
    "rm -rf .*",
    "rm -fr .a*",
    "mv .agent-runtime ../elsewhere",
    "echo x >> .git/hooks/pre-commit",
    "cp evil.sh .git/hooks/pre-commit",
    "sed -i s/a/b/ .git/config",
    "git config core.fsmonitor ./fsmonitor.sh",
    "git config --local core.hooksPath hooks",
    "git config alias.st '!sh -c x'",
    "git config --global core.pager 'sh -c x'",
    "chmod -R 777 .git",
    "chmod -R u+w .git/hooks",
    "bash -c 'rm -rf .git'",
    "cd sub && rm -rf .git",
    "find . -name x; truncate -s 0 .agent-runtime/runs/r/ledger.jsonl",
]
NOT_HELD = [
    "rm -rf build",
    "rm -rf *",
    "git clean -fd",
    "git config user.name Someone",
    "git config core.fsmonitor",
    "cat .git/config",
    "ls -a .git",
    "git status",
    "echo x > .github/notes.txt",
    "rm -f x.git .gitignore",
]


@pytest.mark.parametrize("command", HELD)
def test_a_command_that_reaches_the_store_or_git_is_held(command):
    from safepoint.core.command_reach import classify_with_reach

    verdict = classify_with_reach(command)
    assert "store_or_git" in verdict.side_effects, verdict
    assert verdict.risk_level == "high"
    assert verdict.replay_policy != "auto"


@pytest.mark.parametrize("command", NOT_HELD)
def test_an_everyday_command_beside_them_is_not_held(command):
    from safepoint.core.command_reach import classify_with_reach

    assert "store_or_git" not in classify_with_reach(command).side_effects


@pytest.mark.parametrize("command", ["echo x >> .git/hooks/pre-commit", "git config core.fsmonitor ./x"])
def test_a_held_command_never_runs_without_a_decision_even_with_approval_none(workspace, command):
    repo(workspace)
    before = tree(workspace / ".git")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval="none", approval_timeout_s=0.2) as run:
        result = run.call_result("run_command", {"command": command}, call_id="c1")
        ok = run.call_result("run_command", {"command": "echo fine > out.txt"}, call_id="c2")
    assert result.status != "succeeded" and "approval" in result.observation, result.observation
    assert ok.status == "succeeded", ok.observation
    assert tree(workspace / ".git") == before


def test_an_approved_command_runs(workspace):
    """The hold is a decision, not a ban: `safepoint approve` lets `git clean -fdx` go (the store goes too, and
    the run says so in one line: the next test)."""
    repo(workspace)
    (workspace / "junk.o").write_text("x")
    (workspace / ".gitignore").write_text("*.o\n")
    tm = safepoint.open(workspace=str(workspace))

    def approve():
        for _ in range(3000):  # the call may not wait yet; bounded, so a call that never waits cannot hang
            try:
                tm.approve("r", "c1")
                return
            except Exception:
                threading.Event().wait(0.02)

    helper = threading.Thread(target=approve, daemon=True)
    helper.start()
    with tm.start("t", run_id="r", approval_timeout_s=120) as run:
        result = run.call_result("run_command", {"command": "git clean -fdx -e .agent-runtime"}, call_id="c1")
    helper.join()
    states = [e.status for e in load_view(tm.store, "r").ledger_entries if e.call_id == "c1"]
    assert "approved" in states and states.index("approved") < states.index("started")  # held: approved, then run
    assert result.status == "succeeded", result.observation
    assert not (workspace / "junk.o").exists()


def test_a_store_deleted_anyway_stops_the_run_in_one_line(tmp_path, workspace):
    """A path the classifier cannot see (read from a file at run time: `rm -rf "$(cat d.txt)"`; a name the line
    itself spells, `D=.agent-runtime; rm -rf $D`, is held now) runs; the run finds its store gone and stops with
    one line and exit 1, never a traceback or "taken over"."""
    script = tmp_path / "s.json"
    (workspace / "d.txt").write_text(".agent-runtime\n")
    turns = [
        {"tool_calls": [{"tool": "run_command", "args": {"command": 'rm -rf "$(cat d.txt)"'}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "x"}}]},
        {"text": "done"},
    ]
    script.write_text(json.dumps({"task": "t", "turns": turns}))
    done = safepoint_in_process("run", script, "--workspace", workspace, "--run-id", "r", env=cli_env())
    assert done.returncode == ExitCode.FAILED, done.stderr
    assert "Traceback" not in done.stderr and "taken over" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "was removed while the run was open" in lines[0], done.stderr

    tm = safepoint.open(workspace=str(workspace))
    with pytest.raises(StoreError, match="was removed while the run was open"), tm.start("t", run_id="r2") as run:
        run.call_result("run_command", {"command": 'rm -rf "$(cat d.txt)"'}, call_id="c1")


# ------------------------------------------------------------------------------ private files


def test_every_store_file_is_private_under_a_permissive_umask(tmp_path, workspace):
    script = tmp_path / "s.json"
    turns = [
        {"tool_calls": [{"tool": "run_command", "args": {"command": "echo hi > out.txt"}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "x" * 100_000}}]},
        {"text": "done"},
    ]
    script.write_text(json.dumps({"task": "t", "turns": turns}))
    old = os.umask(0)
    try:
        done = safepoint_in_process("run", script, "--workspace", workspace, "--run-id", "r", env=cli_env())
        assert done.returncode == 0, done.stderr
        tm = safepoint.open(workspace=str(workspace))
        store = tm.store
        claim = store.claim("r", "me", takeover=True)
        store.put_artifact(claim, "big.txt", b"y" * 10)
        store.put_schedule("nightly", b"{}")
        store.post_control("r", b"{}")
        store.release(claim)
    finally:
        os.umask(old)
    root = workspace / ".agent-runtime"
    seen = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            seen.append((os.path.relpath(path, root), oct(mode), os.path.isdir(path)))
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    wrong = [(p, m) for p, m, is_dir in seen if m != (oct(0o700) if is_dir else oct(0o600))]
    assert wrong == []
    assert {".gitignore", "runs/r/ledger.jsonl", "runs/r/owner.json", "runs/r/lock"} <= {p for p, _, _ in seen}
    assert any(p.startswith("runs/r/artifacts/") for p, _, _ in seen)
    assert any(p.startswith("schedules/") for p, _, _ in seen)


# ------------------------------------------------------------------------------ safepoint's own git commands


def test_safepoints_git_commands_never_run_a_planted_hook_or_fsmonitor(tmp_path, workspace):
    """An fsmonitor and every hook planted (as an agent's command could before the hold, or the user's own
    setup): a run of file and command changes, `commit`, `diff` and rollback run git many times; none runs them."""
    repo(workspace)
    mark = tmp_path / "ran"
    payload = f'#!/bin/sh\necho "$0" >> {mark}\n'
    hooks = workspace / ".git" / "hooks"
    for name in [
        "pre-commit",
        "post-commit",
        "commit-msg",
        "post-index-change",
        "post-checkout",
        "reference-transaction",
        "prepare-commit-msg",
        "pre-auto-gc",
    ]:
        (hooks / name).write_text(payload)
        (hooks / name).chmod(0o755)
    monitor = workspace / ".git" / "fsmonitor.sh"
    monitor.write_text(payload)
    monitor.chmod(0o755)
    git(workspace, "config", "core.fsmonitor", str(monitor))
    git(workspace, "config", "core.hooksPath", str(hooks))
    git(workspace, "status")  # the plant works: a plain git runs it
    assert mark.exists()
    mark.unlink()
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "t.txt", "content": "changed\n"}, call_id="c1")
        run.call_result("run_command", {"command": "echo made > made.txt"}, call_id="c2")
        start_two = run.checkpoint()
        run.call_result("write_file", {"path": "t.txt", "content": "again\n"}, call_id="c3")
    tm.rollback_files("r", start_two)
    for args in (["explain", "r"], ["commit", "r"], ["commit", "r", "--yes", "-m", "the agent's work"]):
        done = safepoint_in_process(*args, "-w", workspace, env=cli_env())
        assert "Traceback" not in done.stderr, done.stderr
    tm.rollback_files("r", start)
    assert not mark.exists(), mark.read_text()
