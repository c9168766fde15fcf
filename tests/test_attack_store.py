"""Attacks on issue 9's merge: the store and .git out of the agent's reach, damaged logs routed around. These are issue
11's promises ("the store defends itself"); each is a broken promise found by a reviewer-attacker, marked xfail
(strict) until it is fixed."""

from __future__ import annotations

import shutil

import pytest

import safepoint
from tests.attacks import tree

# ------------------------------------------------------------------------------ the store out of the agent's reach


@pytest.mark.parametrize(
    "command", ["git clean -fdx", "rm -rf .agent-runtime", "rm -rf .[a-z]*", "mv .agent-runtime ../elsewhere"]
)
def test_a_command_never_destroys_the_store(workspace, command):
    """Promise 9: the store is out of the agent's reach. `git clean -fdx` (an everyday agent command; the store's
    own .gitignore makes it fair game) deletes `.agent-runtime` whole: the call ends in a FileNotFoundError
    traceback ("... was taken over" through the CLI), `status` says there are no runs, and nothing can be rolled
    back: the user's ignored `.env` the command also deleted is gone for good. `rm -rf .[a-z]*` takes `.git` too."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / "t.txt").write_text("t\n")
    (workspace / ".gitignore").write_text(".env\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    (workspace / ".env").write_text("KEY=secret\n")
    tm = safepoint.open(workspace=str(workspace))
    # Held for a decision nobody gives: the wait ends soon instead of after the default 600 s.
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:
        start = run.checkpoint()
        run.call_result("run_command", {"command": command}, call_id="c1")
    assert tm.status("r")
    tm.rollback_files("r", start, include_uncertain=True)
    assert (workspace / ".env").read_text() == "KEY=secret\n"


def test_a_command_cannot_write_into_the_ledger(workspace):
    """`echo junk >> .agent-runtime/runs/r/ledger.jsonl` runs and succeeds: the agent damages its own log (the
    run then shows a problem). The tools refuse the store ("inside safepoint's store; tools may not touch it");
    run_command does not."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r", approval_timeout_s=0.2) as run:  # held; nobody decides
        result = run.call_result(
            "run_command", {"command": "echo junk >> .agent-runtime/runs/r/ledger.jsonl"}, call_id="c1"
        )
    ledger = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    # The command's text is in the ledger (its planned entry); the line it would append is not.
    assert b"junk" not in ledger.read_bytes().splitlines(), result.observation
    assert result.status != "succeeded", result.observation


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\necho pwned\n"}),
        ("write_file", {"path": "./.git/../.git/config", "content": "[core]\n\tfsmonitor = ./x\n"}),
        ("write_file", {"path": "sub/.git/hooks/pre-commit", "content": "#!/bin/sh\necho pwned\n"}),
        ("apply_patch", {"patch": "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1 @@\n+echo pwned\n"}),
    ],
    ids=["hook", "config", "nested-hook", "patch"],
)
def test_the_tools_never_write_into_git(workspace, tool, args):
    """Promise 9: `.git/` is out of the agent's reach. The tools refuse the store, but `write_file
    .git/hooks/pre-commit` succeeds: a hook that runs the model's code the next time the user commits (the same
    for `.git/config`'s core.fsmonitor, and a nested repository's `.git`)."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(["git", "init", "-q", str(workspace / "sub")], check=True)
    before = tree(workspace / ".git"), tree(workspace / "sub" / ".git")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "failed", result.observation
    assert (tree(workspace / ".git"), tree(workspace / "sub" / ".git")) == before


# ------------------------------------------------------------------------------ a damaged log


def _damaged_resumes(tmp_path, call, damage):
    """Kill a run right after its non-idempotent call ran, damage its log one way at every line, resume; return
    the lines after which the run could not go on (exit 1) or the effect repeated."""
    from safepoint.errors import ExitCode
    from tests.conftest import cli_env, safepoint_in_process
    from tests.test_ledger_damage import RUN, _effects, _killed_run

    original = tmp_path / "original"
    log = _killed_run(original, call)
    lines = log.read_bytes().splitlines(keepends=True)
    bad = []
    for i, line in enumerate(lines):
        new = list(lines)
        if damage == "flip":
            if b'"kind":"blob"' not in line:
                continue
            flipped = bytearray(line)
            flipped[len(line) // 2] ^= 0x01
            new[i] = bytes(flipped)
        else:  # two neighbouring lines swapped
            if i + 1 >= len(lines):
                continue
            new[i], new[i + 1] = new[i + 1], new[i]
        base = tmp_path / f"d{i}"
        shutil.copytree(original, base)
        (base / log.relative_to(original)).write_bytes(b"".join(new))
        env = cli_env(SAFEPOINT_OUTBOX=str(base / "outbox.jsonl"))
        checked = safepoint_in_process("fsck", RUN, "-w", base / "ws", "--repair", env=env)
        if checked.returncode != ExitCode.DAMAGED or "Traceback" in checked.stderr:  # the damage is named
            bad.append((i, line[:60], "fsck", checked.returncode, checked.stdout + checked.stderr))
            continue
        done = safepoint_in_process("resume", RUN, "-w", base / "ws", env=env)
        if done.returncode == ExitCode.WAITING_DECISION:
            done = safepoint_in_process("resume", RUN, "-w", base / "ws", "--skip", "call_2", env=env)
        again = safepoint_in_process("resume", RUN, "-w", base / "ws", env=env)
        stuck = done.returncode not in (ExitCode.OK, ExitCode.CLOSED) and again.returncode not in (
            ExitCode.OK,
            ExitCode.CLOSED,
            ExitCode.USAGE,  # a finished run: nothing to resume
        )
        if stuck or _effects(base, call["tool"]) != 1 or "Traceback" in done.stderr:
            bad.append((i, line[:60], done.returncode, done.stderr.strip()[-200:]))
    return bad


def test_a_flipped_byte_in_a_blob_record_never_wedges_the_run(tmp_path):
    """A run killed after `run_command` ran; one byte flipped in the middle of the blob record that holds the
    command's capture state. Every resume exits 1 ("content sha256:... is not stored in run 'r'") for good:
    the damage is neither reported as damage nor routed around (promise 8), and the run can never go on."""
    from tests.test_ledger_damage import APPEND

    assert _damaged_resumes(tmp_path, APPEND, "flip") == []


def test_two_swapped_records_never_wedge_the_run(tmp_path):
    """The last two records of the log swapped (a careless hand, a sort): every resume exits 1 with "append at
    seq 20 but the log ends at 20; another writer slipped in; resume the run" although nobody else writes;
    resuming again says the same, for good. The disorder must be reported as damage and routed around."""
    from tests.test_ledger_damage import NOTIFY

    assert _damaged_resumes(tmp_path, NOTIFY, "swap") == []


def test_a_damaged_owner_record_never_wedges_the_run(tmp_path):
    """A run killed after its call ran; its `owner.json` then holds garbage (a bad sector, a careless hand).
    Deleting owner.json is routed around (resume goes on), but a damaged one makes every resume exit 1 with
    "owner record of run 'r' (...) fails its checksum", naming no fix: the run can never go on or be rolled back.
    Promise 8: detected and reported, but not routed around."""
    from safepoint.errors import ExitCode
    from tests.conftest import cli_env, safepoint_in_process
    from tests.test_ledger_damage import NOTIFY, RUN, _effects, _killed_run

    log = _killed_run(tmp_path, NOTIFY)
    (log.parent / "owner.json").write_bytes(b"\x00garbage{\n")
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    checked = safepoint_in_process("fsck", RUN, "-w", tmp_path / "ws", "--repair", env=env)
    assert checked.returncode == ExitCode.DAMAGED, checked.stdout + checked.stderr
    assert "owner.json" in checked.stdout, checked.stdout
    done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    if done.returncode == ExitCode.WAITING_DECISION:
        done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", "--skip", "call_2", env=env)
    assert _effects(tmp_path, "send_notification") == 1
    assert done.returncode == ExitCode.OK, done.stderr
