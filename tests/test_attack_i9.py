"""Attacks on issue 9's merge (§2-§4): each test is a broken promise found by a reviewer-attacker, marked xfail
(strict) until it is fixed."""

from __future__ import annotations

import os
import shutil

import pytest

import safepoint
from safepoint.engine.session import load_view


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agent-runtime"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = handle.read()
    return out


def _run_in_a_fresh_process(tmp_path, workspace, commands, **env):
    """`safepoint run` of run_command calls, in a child process as a user runs it: the capture misses a renamed
    folder in the first session a process opens (a later session in the same process catches it)."""
    import json
    import subprocess
    import sys

    from tests.conftest import cli_env

    turns = [{"tool_calls": [{"tool": "run_command", "args": {"command": c}}]} for c in commands]
    script = tmp_path / "scenario.json"
    script.write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "done"}]}))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fanotify", [True, False], ids=["fanotify", "inotify"])
@pytest.mark.xfail(strict=True, reason="a folder renamed by a command: the files under its new name are never captured")
def test_a_folder_renamed_by_a_command_is_rolled_back_whole(tmp_path, workspace, fanotify):
    """`mv d d2` in `safepoint run`: rollback brings d/ back but leaves d2/ with a second copy of every file (d2/*
    were never recorded as created: not rolled back, not committed, never shown). `mv src lib`, the everyday
    refactor, leaves the tree doubled after a rollback."""
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "k").write_text("keep\n")
    (workspace / "d" / "sub" / "s").write_text("s\n")
    before = _tree(workspace)
    extra = {} if fanotify else {"SAFEPOINT_NO_FANOTIFY": "1"}
    _run_in_a_fresh_process(tmp_path, workspace, ["mv d d2"], **extra)
    tm = safepoint.open(workspace=str(workspace))
    first = load_view(tm.store, "r").checkpoints[0].checkpoint.checkpoint_id
    paths = {p.path for p in load_view(tm.store, "r").patches}
    assert {"d2/k", "d2/sub/s"} <= paths, paths
    tm.rollback_files("r", first, include_uncertain=True)
    assert _tree(workspace) == before


@pytest.mark.xfail(
    strict=True, reason="a folder renamed by a command: commit records the deletion without the new files"
)
def test_commit_after_a_folder_rename_never_drops_the_code(tmp_path, workspace):
    """`mv src pkg` in a clean checkout, then `safepoint commit`: the commit deletes src/main.py and does not add
    pkg/main.py (never captured), so HEAD on the user's branch loses the code."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True, text=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("code\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    _run_in_a_fresh_process(tmp_path, workspace, ["mv src pkg"])
    safepoint.open(workspace=str(workspace)).commit("r")
    tree = git("ls-tree", "-r", "--name-only", "HEAD").stdout.split()
    assert "pkg/main.py" in tree or "src/main.py" in tree, tree


@pytest.mark.xfail(strict=True, reason="a write through a hard link the agent made changes the user's file unseen")
def test_a_hard_link_the_agent_made_never_changes_the_users_file_silently(workspace):
    """`ln f g; echo agent >> g`: the user's f now ends in 'agent', and rollback removes g, reports no conflict
    and nothing unrestorable, and leaves f changed for good. It must put f back, or at least say it cannot."""
    (workspace / "f").write_text("user\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "ln f g"}, call_id="c1")
        run.call("run_command", {"command": "echo agent >> g"}, call_id="c2")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable} | {c.path for c in plan.conflicts}
    assert (workspace / "f").read_text() == "user\n" or "f" in said


# ------------------------------------------------------------------------------ the store out of the agent's reach


@pytest.mark.parametrize(
    "command", ["git clean -fdx", "rm -rf .agent-runtime", "rm -rf .[a-z]*", "mv .agent-runtime ../elsewhere"]
)
@pytest.mark.xfail(
    strict=True, reason="a command deletes the run's own store: the run, its ledger and every undo are gone"
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
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("run_command", {"command": command}, call_id="c1")
    assert tm.status("r")
    tm.rollback_files("r", start, include_uncertain=True)
    assert (workspace / ".env").read_text() == "KEY=secret\n"


@pytest.mark.xfail(strict=True, reason="a command can write into the run's own ledger")
def test_a_command_cannot_write_into_the_ledger(workspace):
    """`echo junk >> .agent-runtime/runs/r/ledger.jsonl` runs and succeeds: the agent damages its own log (the
    run then shows a problem). The tools refuse the store ("inside safepoint's store; tools may not touch it");
    run_command does not."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(
            "run_command", {"command": "echo junk >> .agent-runtime/runs/r/ledger.jsonl"}, call_id="c1"
        )
    ledger = workspace / ".agent-runtime" / "runs" / "r" / "ledger.jsonl"
    assert b"junk" not in ledger.read_bytes(), result.observation


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
@pytest.mark.xfail(strict=True, reason="the built-in tools write into .git/ (hooks, config): promise 9")
def test_the_tools_never_write_into_git(workspace, tool, args):
    """Promise 9: `.git/` is out of the agent's reach. The tools refuse the store, but `write_file
    .git/hooks/pre-commit` succeeds: a hook that runs the model's code the next time the user commits (the same
    for `.git/config`'s core.fsmonitor, and a nested repository's `.git`)."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(["git", "init", "-q", str(workspace / "sub")], check=True)
    before = _tree(workspace / ".git"), _tree(workspace / "sub" / ".git")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "failed", result.observation
    assert (_tree(workspace / ".git"), _tree(workspace / "sub" / ".git")) == before


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


@pytest.mark.xfail(strict=True, reason="one flipped byte in a blob record wedges the run: every resume exits 1")
def test_a_flipped_byte_in_a_blob_record_never_wedges_the_run(tmp_path):
    """A run killed after `run_command` ran; one byte flipped in the middle of the blob record that holds the
    command's capture state. Every resume exits 1 ("content sha256:... is not stored in run 'r'") for good:
    the damage is neither reported as damage nor routed around (promise 8), and the run can never go on."""
    from tests.test_ledger_damage import APPEND

    assert _damaged_resumes(tmp_path, APPEND, "flip") == []


@pytest.mark.xfail(strict=True, reason="two neighbouring records swapped wedge the run: every resume exits 1")
def test_two_swapped_records_never_wedge_the_run(tmp_path):
    """The last two records of the log swapped (a careless hand, a sort): every resume exits 1 with "append at
    seq 20 but the log ends at 20; another writer slipped in; resume the run" although nobody else writes;
    resuming again says the same, for good. The disorder must be reported as damage and routed around."""
    from tests.test_ledger_damage import NOTIFY

    assert _damaged_resumes(tmp_path, NOTIFY, "swap") == []


# ------------------------------------------------------------------------------ special files


@pytest.mark.xfail(strict=True, reason="write_file replaces a user's FIFO; rollback then deletes it and says nothing")
def test_write_file_over_a_fifo_never_loses_it(workspace):
    """The user's named pipe `p` (a tool's control pipe): `write_file p` replaces it with a regular file (read_file
    and apply_patch refuse special files, write_file does not), and rollback then *removes* `p` altogether,
    reporting no conflict and nothing unrestorable. The FIFO must be refused, or come back, or be reported."""
    os.mkfifo(workspace / "p")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("write_file", {"path": "p", "content": "x"}, call_id="c1")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable} | {c.path for c in plan.conflicts}
    import stat

    kept = os.path.lexists(workspace / "p") and stat.S_ISFIFO(os.lstat(workspace / "p").st_mode)
    assert result.status == "failed" or kept or "p" in said, result.observation


@pytest.mark.xfail(strict=True, reason="a folder's mode changed by a command is neither captured nor put back")
def test_a_folders_mode_a_command_changed_is_put_back(workspace):
    """`chmod 500 d` (or `chmod -R go-rwx`, `chmod 000 d`): file modes are captured and restored (`chmod`
    patches), a folder's are not: after rollback `d` stays 0500 and nothing says so. For a user who is not root,
    that folder is now closed to writes."""
    (workspace / "d").mkdir()
    (workspace / "d" / "k").write_text("k\n")
    os.chmod(workspace / "d", 0o755)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "chmod 500 d"}, call_id="c1")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable}
    assert os.stat(workspace / "d").st_mode & 0o777 == 0o755 or "d" in said


# ------------------------------------------------------------------------------ ignored files a command reaches


@pytest.mark.parametrize(
    "command",
    [
        "find . -name '.env*' -delete",
        "for f in .env*; do rm $f; done",
        "ls -A | grep env | xargs rm",
    ],
)
@pytest.mark.xfail(strict=True, reason="an ignored file a command deletes without naming it literally is lost silently")
def test_an_ignored_file_a_command_deletes_is_kept_or_said(workspace, command):
    """§2: "keep what the command line names, ignored or not, or say loudly that it cannot". `rm .env*` is kept
    (the glob is expanded), but `find -delete`, a `for` loop or `xargs rm` delete the gitignored `.env` with no
    word at all: the call's result says nothing, rollback reports no unrestorable path, the secret is gone."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)

    git("-c", "init.defaultBranch=main", "init", "-q")
    git("config", "user.name", "T")
    git("config", "user.email", "t@example.com")
    (workspace / ".gitignore").write_text(".env*\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    (workspace / ".env").write_text("KEY=secret\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert not (workspace / ".env").exists()
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = ".env" in {u.path for u in plan.unrestorable} or "rollback cannot put it back" in result.observation
    assert (workspace / ".env").exists() or said


# ------------------------------------------------------------------------------ wrong arguments


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("run_command", {"command": "echo", "timeout": 1e308}),
        ("write_file", {"path": ".", "content": "x"}),
        ("write_file", {"path": "sub/..", "content": "x"}),
    ],
    ids=["huge-timeout", "write-root", "write-root-dotdot"],
)
@pytest.mark.xfail(strict=True, reason="wrong arguments still reach the model as raw Python error text")
def test_wrong_arguments_are_refused_in_words(workspace, tool, args):
    """§3: "wrong argument types reach the model as raw Python error text". A timeout of 1e308 gives the model
    "OverflowError: cannot convert float infinity to integer"; `write_file .` gives "OSError: [Errno 39]
    Directory not empty: '.../.agent-runtime/runs/r/tmp/.safepoint-....part' -> '...'" (the store's inner paths)."""
    (workspace / "sub").mkdir()
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "failed"
    assert "Error:" not in result.observation and ".agent-runtime" not in result.observation, result.observation


@pytest.mark.xfail(strict=True, reason="deeply nested tool arguments raise RecursionError out of call_result")
def test_deeply_nested_arguments_are_a_failed_call_not_a_traceback(workspace):
    """§3 fixed this for scenario files, not for a call's arguments: `run.call_result("write_file", {"path": "a",
    "content": [[[...3000 deep...]]]})` raises RecursionError ("while serializing an object") to the caller. A
    model's arguments are untrusted input: the call must fail in words."""
    nested: list = []
    inner = nested
    for _ in range(3000):
        inner.append([])
        inner = inner[0]
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("write_file", {"path": "a", "content": nested}, call_id="c1")
    assert result.status == "failed"


@pytest.mark.xfail(strict=True, reason="a damaged owner.json wedges the run for good, although a missing one is fine")
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
    done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    if done.returncode == ExitCode.WAITING_DECISION:
        done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", "--skip", "call_2", env=env)
    assert _effects(tmp_path, "send_notification") == 1
    assert done.returncode == ExitCode.OK, done.stderr


# ------------------------------------------------------------------------------ what people do, in words


@pytest.mark.parametrize(("verb", "said"), [("cancel", "cancelled by"), ("reset", "context reset by")])
@pytest.mark.xfail(strict=True, reason="resume of a cancelled or reset run still says 'Closed during restart recovery'")
def test_resume_of_a_cancelled_run_says_it_was_cancelled(tmp_path, verb, said):
    """§4: `cancel` and `reset` are reported as what they are. `status` and `explain` now say "cancelled by user
    at T", but `safepoint resume r` on that run says "run 'r' is closed (Closed during restart recovery without
    reporting a result., at T)": the very wording the issue names, with a stray period."""
    from tests.conftest import cli_env, safepoint_in_process
    from tests.test_ledger_damage import NOTIFY, RUN, _killed_run

    _killed_run(tmp_path, NOTIFY)
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    assert safepoint_in_process(verb, RUN, "-w", tmp_path / "ws", env=env).returncode == 0
    done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    assert said in done.stderr and "restart recovery" not in done.stderr, done.stderr


# ------------------------------------------------------------------------------ deep trees


@pytest.mark.parametrize("tool", ["list_files", "search_files"])
@pytest.mark.xfail(strict=True, reason="a deep folder tree gives the model 'RecursionError: maximum recursion depth'")
def test_a_deep_tree_is_listed_or_refused_in_words(workspace, tool):
    """A tree 1,100 folders deep (2,200 bytes of path, within PATH_MAX; a runaway build or a test fixture):
    `list_files` and `search_files` fail with "RecursionError: maximum recursion depth exceeded" as their whole
    answer, for the whole workspace, so the model can no longer list or search anything."""
    deep = workspace.joinpath(*["d"] * 1100)
    deep.mkdir(parents=True)
    (deep / "f").write_text("deep\n")
    (workspace / "top.txt").write_text("deep at the top\n")
    args = {} if tool == "list_files" else {"pattern": "deep"}
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert "RecursionError" not in result.observation and "top.txt" in result.observation, result.observation


@pytest.mark.xfail(strict=True, reason="a command over the kernel's argument limit is blamed on the reaper")
def test_a_command_too_long_to_start_says_so(workspace):
    """A model writing a 300 KB file through a here-doc: the command line is over the kernel's 128 KiB limit for
    one argument (E2BIG). The model is told "could not start the command's supervisor process (safepoint's
    reaper); try again", which is wrong (nothing is wrong with the reaper) and sends it into retrying for ever."""
    command = "cat > big.txt <<'EOF'\n" + "line of text\n" * 25000 + "EOF"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert result.status == "failed"
    assert "try again" not in result.observation and "too long" in result.observation, result.observation
