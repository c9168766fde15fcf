"""What commands change is always captured and reversible, on what real agents do (issue 9 §2, §3): a crash while
a command runs, ignored files a command names, a folder swapped for a link, edits made while a command runs (by
process where the platform tells, else marked uncertain), and file names that are not UTF-8."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import safepoint
from safepoint.core.rollback import ABSENT
from safepoint.engine import builtin, command_capture
from safepoint.engine.session import load_view

from .conftest import cli_env

DISABLE_ENV = "SAFEPOINT_NO_FANOTIFY"  # workspace.writers.DISABLE_ENV (spelt out: this file also runs on older code)


def _attribution_available(workspace) -> bool:
    from safepoint.workspace.ignore import IgnoreRules
    from safepoint.workspace.writers import WriterWatch

    watch = WriterWatch.start(str(workspace), IgnoreRules.for_workspace(str(workspace)))
    if watch is None:
        return False
    watch.close()
    return True


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(path, files):
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "init")


def patches_of(tm, call_id, run_id="r"):
    return [p for p in load_view(tm.store, run_id).patches if p.tool_call_id == call_id]


# ------------------------------------------------------------------------------ a crash while a command runs


def _scenario(tmp_path, command):
    script = tmp_path / "scenario.json"
    turns = [{"tool_calls": [{"tool": "run_command", "args": {"command": command}}]}, {"text": "done"}]
    script.write_text(json.dumps({"task": "t", "turns": turns}))
    return script


def _user_files(workspace, tracked):
    files = {"src/keep.txt": "the user's keep\n", "src/deep/more.txt": "more\n", "notes.txt": "user notes\n"}
    if tracked:
        make_repo(workspace, files)
    else:
        for name, text in files.items():
            (workspace / name).parent.mkdir(parents=True, exist_ok=True)
            (workspace / name).write_text(text)
    return files


def _rollback_everything(workspace):
    tm = safepoint.open(workspace=str(workspace))
    first = load_view(tm.store, "r").checkpoints[0].checkpoint.checkpoint_id
    plan = tm.rollback_files("r", first, include_uncertain=True)  # recovered changes: nobody watched who wrote them
    return tm, plan


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "git"])
def test_a_crash_after_the_command_ran_loses_none_of_its_changes(tmp_path, workspace, tracked):
    """SIGKILL after the command ran, before its outcome was recorded: the next owner records what the command
    changed as its call's (author uncertain: nobody watched), and rollback puts everything back."""
    files = _user_files(workspace, tracked)
    script = _scenario(tmp_path, "rm -rf src; sed -i s/user/agent/ notes.txt; echo new > made.txt")
    env = cli_env(SAFEPOINT_FAILPOINT="after_tool:run_command", SAFEPOINT_OUTBOX=str(tmp_path / "outbox"))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not (workspace / "src").exists() and (workspace / "notes.txt").read_text() == "agent notes\n"

    tm, plan = _rollback_everything(workspace)
    recovered = {p.path: p for p in patches_of(tm, "call_1")}
    assert set(recovered) == {"src/keep.txt", "src/deep/more.txt", "notes.txt", "made.txt"}
    assert all(p.author_uncertain for p in recovered.values())
    assert recovered["made.txt"].op == "create" and recovered["src/keep.txt"].op == "delete"
    assert not plan.unrestorable and not plan.conflicts
    for name, text in files.items():
        assert (workspace / name).read_text() == text
    assert not (workspace / "made.txt").exists()
    assert load_view(tm.store, "r").ledger["call_1"].status == "started"  # the outcome stays unknown


def test_a_crash_while_the_command_still_runs(tmp_path, workspace):
    """The agent is killed while its command is still running: the next owner kills the command first, then
    records what it changed, so nothing it did is lost to rollback."""
    files = _user_files(workspace, tracked=False)
    mark = tmp_path / "mark"
    script = _scenario(tmp_path, f"rm -rf src; sed -i s/user/agent/ notes.txt; touch {mark}; sleep 120")
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox"))
    child = subprocess.Popen(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(12000):
        if mark.exists():
            break
        time.sleep(0.01)
    assert mark.exists()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)

    tm, plan = _rollback_everything(workspace)
    assert {p.path for p in patches_of(tm, "call_1")} == {"src/keep.txt", "src/deep/more.txt", "notes.txt"}
    assert not plan.unrestorable and not plan.conflicts
    for name, text in files.items():
        assert (workspace / name).read_text() == text


def test_a_crash_before_the_command_started_blames_nothing_on_it(tmp_path, workspace):
    """Killed after `started` but before the command ran (the gate never opened): the user's edits made
    meanwhile are the user's, not the command's."""
    _user_files(workspace, tracked=False)
    script = _scenario(tmp_path, "rm -rf src")
    env = cli_env(SAFEPOINT_FAILPOINT="after_started:run_command", SAFEPOINT_OUTBOX=str(tmp_path / "outbox"))
    done = subprocess.run(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL
    assert (workspace / "src" / "keep.txt").exists()
    tm, _ = _rollback_everything(workspace)
    assert patches_of(tm, "call_1") == []


# ------------------------------------------------------------------------------ ignored files a command names


@pytest.mark.parametrize(
    ("command", "changed"),
    [
        ("rm .env", {".env": None}),
        ("echo oops > .env", {".env": "oops\n"}),
        ("rm -rf localdata", {"localdata/db.sqlite": None, "localdata/sub/cache.bin": None}),
        ("sed -i s/secret/leaked/ .env", {".env": "KEY=leaked\n"}),
    ],
)
def test_ignored_files_a_command_names_are_kept_and_put_back(workspace, command, changed):
    make_repo(workspace, {"tracked.txt": "t\n", ".gitignore": ".env\nlocaldata/\nbuild/\n"})
    originals = {".env": "KEY=secret\n", "localdata/db.sqlite": "rows\n", "localdata/sub/cache.bin": "\x00\x01"}
    for name, text in originals.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": command}, call_id="c1")
        run.call("run_command", {"command": "mkdir -p build; echo o > build/out.o"}, call_id="c2")  # made: ignored
    assert result.status == "succeeded", result.observation
    for name, text in changed.items():
        assert (workspace / name).read_text() == text if text is not None else not (workspace / name).exists()
    assert {p.path for p in patches_of(tm, "c1")} == set(changed)
    assert patches_of(tm, "c2") == []
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    for name, text in originals.items():
        assert (workspace / name).read_text() == text


def test_an_ignored_file_too_large_to_keep_is_said_loudly(workspace, monkeypatch):
    monkeypatch.setattr(command_capture, "HINT_BYTES", 10, raising=False)
    make_repo(workspace, {"tracked.txt": "t\n", ".gitignore": ".env\n"})
    (workspace / ".env").write_text("KEY=a value longer than ten bytes\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": "rm .env"}, call_id="c1")
    assert "[safepoint] .env: ignored by git and named by the command, but not kept" in result.observation
    plan = tm.rollback_files("r", start)
    assert [u.path for u in plan.unrestorable] == [".env"]


def test_a_special_file_a_command_names_is_said_loudly(workspace):
    os.mkfifo(workspace / "pipe")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": "rm pipe"}, call_id="c1")
    assert result.status == "succeeded"
    assert "[safepoint] pipe: named by the command but not a regular file; rollback cannot put it back" in (
        result.observation
    )
    plan = tm.rollback_files("r", start)
    assert [u.path for u in plan.unrestorable] == ["pipe"]  # said by rollback too


# ------------------------------------------------------------------------------ a folder swapped for a link


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_folder_swapped_for_a_link(tmp_path, workspace, where):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the workspace's\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's keep\n")
    (workspace / "other").mkdir()
    (workspace / "other" / "keep.txt").write_text("other keep\n")
    target = str(elsewhere) if where == "outside" else "other"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": f"rm -rf src && ln -s {target} src"}, call_id="c1")
    assert result.status == "succeeded", result.observation
    recorded = [(p.path, p.op) for p in patches_of(tm, "c1")]
    assert recorded == [("src/keep.txt", "delete"), ("src", "create")]  # what went, then the link made
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts
    assert not (workspace / "src").is_symlink()
    assert (workspace / "src" / "keep.txt").read_text() == "the user's keep\n"
    assert (elsewhere / "keep.txt").read_text() == "not the workspace's\n"  # never written through the link
    assert (workspace / "other" / "keep.txt").read_text() == "other keep\n"
    assert sorted(os.listdir(workspace / "other")) == ["keep.txt"]


def test_a_file_swapped_for_a_link(tmp_path, workspace):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside\n")
    (workspace / "a.txt").write_text("the user's a\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")
        start = run.checkpoint()
        run.call("run_command", {"command": f"rm a.txt && ln -s {outside} a.txt"}, call_id="c1")
    [patch] = patches_of(tm, "c1")
    assert patch.path == "a.txt" and patch.op == "modify" and patch.after_mode is None
    tm.rollback_files("r", start)
    assert not (workspace / "a.txt").is_symlink() and (workspace / "a.txt").read_text() == "the user's a\n"
    assert outside.read_text() == "outside\n"


# ------------------------------------------------------------------------------ edits made while a command runs


def _edit_during_command(tmp_path, workspace):
    """Runs a command while another process (not the command's: started before it) edits files; returns the
    patches of the command's call and the run's manager."""
    (workspace / "a.txt").write_text("a\n")
    trigger, done = tmp_path / "trigger", tmp_path / "done"
    editor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "trigger, done, ws = sys.argv[1:]\n"
            "while not os.path.exists(trigger): time.sleep(0.005)\n"
            "open(os.path.join(ws, 'user.txt'), 'w').write('the user typed this\\n')\n"
            "open(os.path.join(ws, 'a.txt'), 'a').write('and the user appended\\n')\n"
            "open(done, 'w').close()\n",
            str(trigger),
            str(done),
            str(workspace),
        ]
    )
    command = f"echo agent > a.txt; echo agent > b.txt; touch {trigger}; while [ ! -e {done} ]; do sleep 0.01; done"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert editor.wait(timeout=60) == 0
    assert result.status == "succeeded", result.observation
    return tm, start, {p.path: p for p in patches_of(tm, "c1")}


def test_edits_by_other_processes_are_not_the_commands(tmp_path, workspace, monkeypatch):
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    if os.geteuid() != 0:
        pytest.skip("fanotify and process events need privilege (CAP_SYS_ADMIN); the fallback is tested below")
    tm, start, patches = _edit_during_command(tmp_path, workspace)
    assert set(patches) == {"a.txt", "b.txt"}  # user.txt is the user's: learnt, not recorded as the command's
    assert patches["b.txt"].author_uncertain is False  # only the command wrote it
    assert patches["a.txt"].author_uncertain is True  # both did
    tm.rollback_files("r", start)
    assert (workspace / "user.txt").read_text() == "the user typed this\n"
    assert not (workspace / "b.txt").exists()


def test_without_attribution_every_change_during_a_command_is_uncertain(tmp_path, workspace, monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "1")
    _tm, _start, patches = _edit_during_command(tmp_path, workspace)
    assert set(patches) == {"a.txt", "b.txt", "user.txt"}
    assert all(p.author_uncertain for p in patches.values())


def test_a_commands_own_changes_are_certain(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "mkdir -p d/e && echo x > d/e/f && echo y > g && chmod +x g"}, call_id="c1")
    patches = patches_of(tm, "c1")
    assert {p.path for p in patches} == {"d/e/f", "g"}
    attributed = _attribution_available(workspace)
    assert all(p.author_uncertain is (not attributed) for p in patches)


# ------------------------------------------------------------------------------ file names that are not UTF-8

NAMES = [b"bad\xff\xfe.txt", b"new\nline.txt", b"back\\slash.txt", b"-rf", b"n" * 255, b'"quoted".txt', b"caf\xc3\xa9"]


def test_any_file_name_is_captured_and_rolled_back_exactly(workspace):
    root = os.fsencode(str(workspace))
    os.mkdir(os.path.join(root, b"dir\xfe"))
    paths = [*NAMES, b"dir\xfe/inner\xff"]
    for name in paths:
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(b"before " + name + b"\n")
    make_repo(workspace, {})  # their content before comes from git (the command line names none of them)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        listed = run.call("list_files", {})
        assert '"bad\\377\\376.txt"' in listed and '"new\\nline.txt"' in listed and "back\\slash.txt" in listed
        run.call("run_command", {"command": "true"}, call_id="c0")
        start = run.checkpoint()
        result = run.call_result(
            "run_command",
            {"command": 'for f in * dir*/*; do [ -f "$f" ] && echo after >> "$f"; done; rm -- -rf'},
            call_id="c1",
        )
        assert result.status == "succeeded", result.observation
        shown = run.call("read_file", {"path": '"bad\\377\\376.txt"'})  # the listed name reads the file
        assert shown.startswith("before bad")
    patches = patches_of(tm, "c1")
    assert len(patches) == len(paths)
    assert all(p.path.isprintable() for p in patches)
    # a later session (a resume) reads the capture's saved state with these names
    with tm.resume("r") as run:
        run.call("run_command", {"command": "true"}, call_id="c2")
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable and not plan.conflicts and not plan.uncertain, plan
    for name in paths:
        with open(os.path.join(root, name), "rb") as handle:
            assert handle.read() == b"before " + name + b"\n"


# ------------------------------------------------------------------------------ tools never hang


def test_tools_refuse_or_skip_special_files(tmp_path, workspace):
    os.mkfifo(workspace / "pipe")
    (tmp_path / "outside.txt").write_text("needle outside\n")
    os.symlink(tmp_path / "outside.txt", workspace / "out-link")
    (workspace / "in.txt").write_text("needle inside\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        read = run.call_result("read_file", {"path": "pipe"}, call_id="c1")
        found = run.call_result("search_files", {"pattern": "needle"}, call_id="c2")
        diff = "--- a/pipe\n+++ b/pipe\n@@ -1 +1 @@\n-x\n+y\n"
        patched = run.call_result("apply_patch", {"patch": diff}, call_id="c3")
    assert read.status == "failed" and "FIFO" in read.observation
    assert found.status == "succeeded" and found.observation == "in.txt:1: needle inside"
    assert patched.status == "failed" and "FIFO" in patched.observation


def test_a_catastrophic_regex_hits_the_search_time_limit(workspace, monkeypatch):
    monkeypatch.setattr(builtin, "SEARCH_SECONDS", 0.5, raising=False)
    (workspace / "long.txt").write_text("a" * 5000 + "b\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("search_files", {"pattern": "(a+)+$"}, call_id="c1")
    assert result.status == "failed"
    assert result.observation.count("\n") == 0
    assert "search_files hit its time limit of 0.5s in long.txt" in result.observation


def test_absent_is_still_the_state_of_a_path_behind_a_link(tmp_path, workspace):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x").write_text("x")
    os.symlink(tmp_path / "elsewhere", workspace / "link")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        assert run.session.files.state("link/x").hash == ABSENT


# ------------------------------------------------------------------------------ folders a command moves


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".agent-runtime"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as handle:
                out[os.path.relpath(full, root)] = handle.read()
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root) + "/"] = b""
    return out


_MOVES = {
    "new name": (["mv d d2"], {"d2/k", "d2/sub/s"}),
    "into another folder": (["mv d e/"], {"e/d/k", "e/d/sub/s"}),
    "deep tree": (["mv a z"], {"z/b/c/d/f"}),
    "over an empty folder": (["mv -T d empty"], {"empty/k", "empty/sub/s"}),
    "over a folder with files": (["rm -rf e && mv d e"], {"e/k", "e/sub/s"}),
    "swapped with another": (["mv d t && mv e d && mv t e"], {"e/k", "e/sub/s", "d/there"}),
    "out and back in": (["mv d {out}/d && mv {out}/d d3"], {"d3/k", "d3/sub/s"}),
    "out, then back in later": (["mv d {out}/d", "mv {out}/d d4"], {"d4/k", "d4/sub/s"}),
}


@pytest.mark.parametrize("journal", ["inotify", "scan"])
@pytest.mark.parametrize("session", ["first", "later"])
@pytest.mark.parametrize("shape", list(_MOVES))
def test_a_folder_a_command_moves_is_captured_under_its_new_name(
    tmp_path, workspace, monkeypatch, shape, session, journal
):
    """A rename keeps the ctimes of the files below the folder: the capture once took them for files that merely
    became visible, recorded only the deletions, and rollback left a second copy of the tree (issue 9 attack)."""
    from safepoint.workspace.scan import ChangeWatcher

    if journal == "scan":
        monkeypatch.setattr(ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "k").write_text("keep\n")
    (workspace / "d" / "sub" / "s").write_text("s\n")
    (workspace / "a" / "b" / "c" / "d").mkdir(parents=True)
    (workspace / "a" / "b" / "c" / "d" / "f").write_text("deep\n")
    (workspace / "e").mkdir()
    (workspace / "e" / "there").write_text("there\n")
    (workspace / "empty").mkdir()
    out = tmp_path / "outside"
    out.mkdir()
    time.sleep(0.2)  # the files' ctimes clearly predate the command, as in a real checkout
    before = _tree(workspace)
    commands, created = _MOVES[shape]
    tm = safepoint.open(workspace=str(workspace))
    if session == "later":
        with tm.start("t", run_id="r0") as run:
            run.call("run_command", {"command": "true"}, call_id="c0")
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        for index, command in enumerate(commands):
            run.call("run_command", {"command": command.format(out=out)}, call_id=f"c{index}")
    recorded = {(p.path, p.op) for p in load_view(tm.store, "r").patches}
    assert {(path, "create") for path in created} <= recorded, recorded
    plan = tm.rollback_files("r", start, include_uncertain=True)
    assert not plan.conflicts and not plan.unrestorable
    after = _tree(workspace)
    # Rollback removes the files it put there, and may leave the folder they came in empty: never a second copy.
    assert {p: v for p, v in after.items() if not p.endswith("/")} == {
        p: v for p, v in before.items() if not p.endswith("/")
    }


# ------------------------------------------------------------------------------ ignored files a command deletes


@pytest.mark.parametrize(
    "command",
    [
        "find . -name '*.log' -delete",
        "ls | grep log | xargs rm",
        "sh -c 'rm -f -- *.log'",
        "mv app.log ../away.log",
    ],
)
def test_an_ignored_file_a_command_removes_unnamed_is_said_in_the_result_and_in_rollback(tmp_path, workspace, command):
    make_repo(workspace, {".gitignore": "*.log\n", "code.py": "x\n"})
    (workspace / "app.log").write_text("the only copy\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert not (workspace / "app.log").exists()
    plan = tm.rollback_files("r", start, include_uncertain=True)
    if (workspace / "app.log").exists():  # kept ahead: the line names it in a way the classifier reads (sh -c)
        assert (workspace / "app.log").read_text() == "the only copy\n"
        assert "cannot put it back" not in result.observation and not plan.unrestorable
    else:
        assert "app.log" in result.observation and "rollback cannot put it back" in result.observation
        assert "app.log" in {u.path for u in plan.unrestorable}
    assert (workspace / "code.py").read_text() == "x\n"


def test_an_ignored_folder_a_command_removes_unnamed_is_said(workspace):
    make_repo(workspace, {".gitignore": "cache/\n", "code.py": "x\n"})
    (workspace / "cache").mkdir()
    (workspace / "cache" / "data").write_text("slow to rebuild\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        # A loop's variable names nothing (a deleting `find` names what it selects: that one is kept now)
        result = run.call_result("run_command", {"command": 'for d in ca*; do rm -rf "$d"; done'}, call_id="c1")
    assert "cache: an ignored folder" in result.observation


def test_ignored_files_a_command_makes_and_removes_or_the_user_removed_are_not_said(workspace):
    """No noise: a temporary ignored file the command made and removed, an ignored file the user removed before
    the command, and an ignored file the command line names (kept and put back) are not reported as lost."""
    make_repo(workspace, {".gitignore": "*.log\n*.tmp\n", "code.py": "x\n"})
    (workspace / "user.log").write_text("user\n")
    (workspace / "named.log").write_text("named\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "true"}, call_id="c0")
        (workspace / "user.log").unlink()
        first = run.call_result("run_command", {"command": "echo a > x.tmp && rm x.tmp"}, call_id="c1")
        second = run.call_result("run_command", {"command": "rm named.log"}, call_id="c2")
    assert "cannot put it back" not in first.observation
    assert "cannot put it back" not in second.observation
    plan = tm.rollback_files("r", start, include_uncertain=True)
    assert not plan.unrestorable
    assert (workspace / "named.log").read_text() == "named\n"
    assert not (workspace / "user.log").exists()


# ------------------------------------------------------------------------------ writes through a hard link


def _run_commands(workspace, *commands):
    tm = safepoint.open(workspace=str(workspace))
    results = []
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        for index, command in enumerate(commands):
            results.append(run.call_result("run_command", {"command": command}, call_id=f"c{index}"))
    return tm, start, results


@pytest.mark.parametrize("journal", ["inotify", "scan"])
@pytest.mark.parametrize(
    "commands", [("ln f g", "echo agent >> g"), ("ln f g && echo agent >> g",)], ids=["two calls", "one call"]
)
@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "git"])
def test_a_write_through_a_hard_link_the_agent_made_is_put_back(workspace, monkeypatch, commands, tracked, journal):
    from safepoint.workspace.scan import ChangeWatcher

    if journal == "scan":
        monkeypatch.setattr(ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    if tracked:
        make_repo(workspace, {"f": "user\n"})
    else:
        (workspace / "f").write_text("user\n")
    tm, start, _ = _run_commands(workspace, *commands)
    assert (workspace / "f").read_text() == "user\nagent\n"
    assert "f" in {p.path for p in load_view(tm.store, "r").patches}
    plan = tm.rollback_files("r", start, include_uncertain=True)
    assert not plan.conflicts
    assert not (workspace / "g").exists()
    if tracked:  # f's content before is HEAD's: put back
        assert not plan.unrestorable
        assert (workspace / "f").read_text() == "user\n"
    else:  # an untracked file nothing kept: put back where a recorded state allows it, else said
        assert (workspace / "f").read_text() == "user\n" or {u.path for u in plan.unrestorable} == {"f"}


def test_a_write_through_the_users_own_hard_link_is_put_back(workspace):
    """Two names the user made for one file: a write through one is recorded on both, with the content before
    the command kept through the name the command line names."""
    (workspace / "f").write_text("user\n")
    os.link(workspace / "f", workspace / "g")
    tm, start, _ = _run_commands(workspace, "echo agent >> g")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "f").read_text() == "user\n" and (workspace / "g").read_text() == "user\n"


def test_a_write_through_a_hard_link_with_an_unknown_past_is_said(workspace):
    """f and g are one file the user made; the command writes through g without the line naming it: nothing kept
    f's content before, so the call's result and rollback both say it cannot be put back."""
    (workspace / "f").write_text("user\n")
    os.link(workspace / "f", workspace / "g")
    tm, start, results = _run_commands(workspace, "sh -c 'x=g; echo agent >> $x'")
    assert (workspace / "f").read_text() == "user\nagent\n"
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable}
    assert "f" in said and "g" in said
    assert "hard link" in results[0].observation


def test_a_hard_link_leading_out_of_the_workspace_is_said(tmp_path, workspace):
    (workspace / "f").write_text("user\n")
    outside = tmp_path / "outside"
    _, _, results = _run_commands(workspace, f"ln f {outside}", "echo agent >> f")
    assert outside.read_text() == "user\nagent\n"
    assert "outside what safepoint watches" in results[1].observation


# ------------------------------------------------------------------------------ a folder's mode


@pytest.mark.parametrize("command", ["chmod 500 d", "chmod -R go-rwx d", "chmod 700 d/sub"])
def test_a_folders_mode_a_command_changes_is_said_with_its_undo(workspace, command):
    """No record holds a folder's mode (README, Known limits): the call's result says the change and the command
    that undoes it; a mode a user changed before the command is not blamed on it."""
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "k").write_text("k\n")
    (workspace / "other").mkdir()
    os.chmod(workspace / "d", 0o755)
    os.chmod(workspace / "d" / "sub", 0o755)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")
        os.chmod(workspace / "other", 0o700)  # the user's
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    folder = command.split()[-1]
    assert f"{folder}/: the command changed this folder's mode from 0755" in result.observation
    assert f"chmod 0755 {folder}" in result.observation
    assert "other/" not in result.observation
    os.chmod(workspace / "d", 0o755)
    os.chmod(workspace / "d" / "sub", 0o755)


def test_an_edit_of_yours_through_a_hard_link_is_yours_on_every_name(workspace):
    """You write through g between two commands, then a command writes through g: rollback gives both names your
    version, never f's older content."""
    (workspace / "f").write_text("one\n")
    os.link(workspace / "f", workspace / "g")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "cat g"}, call_id="c0")
        start = run.checkpoint()
        with open(workspace / "g", "a") as handle:
            handle.write("yours\n")
        run.call("run_command", {"command": "echo agent >> g"}, call_id="c1")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    assert not plan.unrestorable and not plan.conflicts
    assert (workspace / "f").read_text() == "one\nyours\n"
    assert (workspace / "g").read_text() == "one\nyours\n"


def test_a_folder_uncovered_and_written_into_by_a_command_keeps_your_files(workspace):
    """`build/` stops being ignored and the command writes a file in it: only that file is the command's; your
    build/old, visible now, is not taken for one the command moved in (rollback must not remove it)."""
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "build").mkdir()
    (workspace / "build" / "old").write_text("yours\n")
    time.sleep(0.2)  # build/old clearly predates the command
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "sed -i '/build/d' .gitignore && echo new > build/new"}, call_id="c1")
    assert {p.path for p in load_view(tm.store, "r").patches} == {".gitignore", "build/new"}
    tm.rollback_files("r", start, include_uncertain=True)
    assert (workspace / "build" / "old").read_text() == "yours\n"
    assert not (workspace / "build" / "new").exists()
