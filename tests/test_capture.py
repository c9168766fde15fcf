"""Changes made by commands, git awareness, and the recovery commands as a user meets them on the CLI."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

import safepoint
from safepoint.core.rollback import UNKNOWN
from safepoint.engine.command_capture import WINDOW_SLACK_NS
from safepoint.engine.session import load_view
from safepoint.workspace import scan as scan_module
from safepoint.workspace.git import refs_snapshot

from .conftest import safepoint_in_process, wait_for


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(path):
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    (path / "tracked.txt").write_text("committed\n")
    (path / ".gitignore").write_text("build/\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "init")


@pytest.fixture(params=["inotify", "scan"])
def watch_mode(request, monkeypatch):
    if request.param == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    return request.param


def test_a_commands_changes_are_recorded_and_rolled_back(workspace, watch_mode):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "a.txt", "content": "agent\n"}, call_id="w1")
        start = run.checkpoint()
        run.call(
            "run_command", {"command": "echo more >> a.txt; echo new > b.txt; mkdir d; echo x > d/c.txt"}, call_id="c1"
        )
        run.call("run_command", {"command": "rm a.txt; chmod +x b.txt"}, call_id="c2")
    patches = [(p.tool_call_id, p.path, p.op) for p in load_view(tm.store, "r").patches]
    assert ("c1", "a.txt", "modify") in patches and ("c1", "b.txt", "create") in patches
    assert ("c1", "d/c.txt", "create") in patches
    assert ("c2", "a.txt", "delete") in patches and ("c2", "b.txt", "chmod") in patches
    assert not any(path.startswith(".agent-runtime") for _, path, _ in patches)
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts and not plan.unrestorable
    assert (workspace / "a.txt").read_text() == "agent\n"
    assert not (workspace / "b.txt").exists() and not (workspace / "d" / "c.txt").exists()


def test_user_edits_before_a_command_are_not_blamed_on_it(workspace, watch_mode):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")  # starts the capture
        start = run.checkpoint()
        (workspace / "mine.txt").write_text("the user's\n")
        run.call("run_command", {"command": "echo agent > theirs.txt"}, call_id="c1")
    c1 = [p.path for p in load_view(tm.store, "r").patches if p.tool_call_id == "c1"]
    assert c1 == ["theirs.txt"]
    tm.rollback_files("r", start)
    assert (workspace / "mine.txt").read_text() == "the user's\n"
    assert not (workspace / "theirs.txt").exists()


def test_a_user_file_a_command_changes_is_put_back_once_seen(workspace, watch_mode):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("run_command", {"command": "true"}, call_id="c0")
        (workspace / "notes.txt").write_text("the user's notes\n")  # seen changing: its content is kept
        start = run.checkpoint()
        run.call("run_command", {"command": "sed -i s/notes/NOTES/ notes.txt"}, call_id="c1")
    assert (workspace / "notes.txt").read_text() == "the user's NOTES\n"
    tm.rollback_files("r", start)
    assert (workspace / "notes.txt").read_text() == "the user's notes\n"


def test_without_git_a_never_seen_file_is_detected_but_not_guessed(workspace):
    (workspace / "old.txt").write_text("from before the run\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        # an opaque program: the command line does not say which files it writes
        run.call("run_command", {"command": "python3 -c \"open('old.txt', 'w').write('changed\\n')\""}, call_id="c1")
    [patch] = load_view(tm.store, "r").patches
    assert patch.before_hash == UNKNOWN and patch.path == "old.txt"
    plan = tm.rollback_files("r", start)
    assert [u.path for u in plan.unrestorable] == ["old.txt"]
    assert (workspace / "old.txt").read_text() == "changed\n"  # left as it is, and said so


def test_in_git_a_clean_tracked_file_is_restored_from_head(workspace, watch_mode):
    make_repo(workspace)
    (workspace / "build").mkdir()
    before = refs_snapshot(str(workspace))
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "echo broken > tracked.txt; echo o > build/out.o"}, call_id="c1")
    patches = load_view(tm.store, "r").patches
    assert [p.path for p in patches] == ["tracked.txt"]  # ignored paths are never captured
    assert patches[0].before_ref.startswith("git:")
    tm.rollback_files("r", start)
    assert (workspace / "tracked.txt").read_text() == "committed\n"
    assert refs_snapshot(str(workspace)) == before  # HEAD, refs, index and stash untouched


def test_head_is_recorded_per_checkpoint_and_commit_takes_only_the_agents_paths(workspace):
    make_repo(workspace)
    (workspace / "user.txt").write_text("the user's work in progress\n")
    head = subprocess.run(["git", "-C", str(workspace), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "feature.py", "content": "x = 1\n"}, call_id="w1")
        run.call("write_file", {"path": "edited.py", "content": "y = 1\n"}, call_id="w2")
        run.checkpoint()
    (workspace / "edited.py").write_text("y = 2  # the user's tweak\n")
    view = load_view(tm.store, "r")
    assert {c.checkpoint.git_head for c in view.checkpoints} == {head.strip()}
    [started] = view.workspace_states  # the git state when the run started: the user's dirty paths among it
    assert started.is_repo and started.head == head.strip() and started.branch == "main"
    assert started.dirty == ("user.txt",)
    before = refs_snapshot(str(workspace))
    done = tm.commit("r")
    sha = done.commit
    assert done.committed == ["feature.py"] and done.left_out == ["edited.py"]
    files = subprocess.run(
        ["git", "-C", str(workspace), "show", "--name-only", "--format=", sha], capture_output=True, text=True
    ).stdout.split()
    assert files == ["feature.py"]
    status = subprocess.run(["git", "-C", str(workspace), "status", "--porcelain"], capture_output=True, text=True)
    assert "?? user.txt" in status.stdout and "?? edited.py" in status.stdout
    assert refs_snapshot(str(workspace))["stash"] == before["stash"]


def test_the_cli_shows_rollback_conflicts_and_resolution_as_a_user_meets_them(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    original = "import os\n\n\ndef f():\n    return 1\n"
    (workspace / "app.py").write_text(original)
    scenario = tmp_path / "sc.json"
    scenario.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [
                    {
                        "tool_calls": [
                            {"tool": "write_file", "args": {"path": "app.py", "content": original.replace("1", "2")}},
                            {"tool": "run_command", "args": {"command": "echo log > out.log"}},
                        ]
                    },
                    {"text": "done"},
                ],
            }
        )
    )

    def safepoint_cli(*args):
        return safepoint_in_process(*args, "--workspace", workspace)

    assert safepoint_cli("run", str(scenario), "--run-id", "r").returncode == 0
    first = json.loads(safepoint_cli("checkpoints", "r", "--json").stdout)[0]["checkpoint_id"]
    (workspace / "app.py").write_text("# the user's comment\n" + original.replace("1", "2"))
    dry = safepoint_cli("rollback", "r", "--to", first, "--dry-run", "--json")
    assert dry.returncode == 7 and (workspace / "out.log").exists()
    done = safepoint_cli("rollback", "r", "--to", first, "--json")
    assert done.returncode == 7 and not (workspace / "out.log").exists()
    conflicts = json.loads(safepoint_cli("conflicts", "r", "--json").stdout)
    assert conflicts == [
        {
            "path": "app.py",
            "expected_hash": conflicts[0]["expected_hash"],
            "actual_hash": conflicts[0]["actual_hash"],
            "agent_patch_ref": conflicts[0]["agent_patch_ref"],
            "resolution": "pending",
        }
    ]
    shown = safepoint_cli("conflicts", "r").stdout
    assert "-    return 1" in shown and "+# the user's comment" in shown
    assert safepoint_cli("resolve", "r", "app.py", "--manual-merge").returncode == 0
    assert (workspace / "app.py").read_text() == "# the user's comment\n" + original
    assert json.loads(safepoint_cli("conflicts", "r", "--json").stdout) == []


def test_no_command_but_commit_touches_head_refs_index_or_stash(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_repo(workspace)
    (workspace / "staged.txt").write_text("staged by the user\n")
    git(workspace, "add", "staged.txt")
    (workspace / "tracked.txt").write_text("committed\nunstaged edit\n")
    (workspace / "stashed.txt").write_text("x\n")
    git(workspace, "stash", "push", "-q", "--include-untracked", "--", "stashed.txt")
    scenario = tmp_path / "sc.json"
    scenario.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [
                    {
                        "tool_calls": [
                            {"tool": "write_file", "args": {"path": "new.py", "content": "x = 1\n"}},
                            {
                                "tool": "run_command",
                                "args": {"command": "echo more >> tracked.txt; git status >/dev/null"},
                            },
                        ]
                    },
                    {"tool_calls": [{"tool": "write_file", "args": {"path": "new.py", "content": "x = 2\n"}}]},
                    {"text": "done"},
                ],
            }
        )
    )

    def cli(*args):
        result = safepoint_in_process(*args, "--workspace", workspace)
        assert result.returncode in (0, 7), result.stderr
        return result

    before = refs_snapshot(str(workspace))
    cli("run", str(scenario), "--run-id", "r")
    first = json.loads(cli("checkpoints", "r", "--json").stdout)[0]["checkpoint_id"]
    for args in (
        ("status",),
        ("explain", "r"),
        ("ledger", "r"),
        ("history", "r", "--all"),
        ("rollback", "r", "--to", first, "--dry-run"),
        ("commit", "r"),
        ("restore", "r", "--to", first),
        ("resume", "r"),
        ("rollback", "r", "--to", first),
        ("conflicts", "r"),
    ):
        cli(*args)
        assert refs_snapshot(str(workspace)) == before, args
    assert (workspace / "tracked.txt").read_text() == "committed\nunstaged edit\n"


def test_files_a_command_line_names_are_kept_ahead_even_never_seen_without_git(workspace, watch_mode):
    (workspace / "config.ini").write_text("from before the run\n")
    (workspace / "logs").mkdir()
    (workspace / "logs" / "a.log").write_text("old log\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "sed -i s/before/after/ config.ini && rm -rf logs"}, call_id="c1")
    assert (workspace / "config.ini").read_text() == "from after the run\n"
    plan = tm.rollback_files("r", start)
    assert not plan.unrestorable
    assert (workspace / "config.ini").read_text() == "from before the run\n"
    assert (workspace / "logs" / "a.log").read_text() == "old log\n"


def test_commit_leaves_out_a_file_that_held_the_users_uncommitted_work(workspace):
    make_repo(workspace)
    (workspace / "tracked.txt").write_text("committed\nthe user's WIP\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        run.call("write_file", {"path": "tracked.txt", "content": "committed\nthe user's WIP\nagent\n"}, call_id="w1")
        run.call("write_file", {"path": "fresh.py", "content": "x = 1\n"}, call_id="w2")
    changes = tm.agent_changes("r")
    assert changes.would_commit == ["fresh.py"] and changes.left_out == ["tracked.txt"]


def test_a_file_uncovered_by_a_gitignore_edit_is_the_users_not_the_commands(workspace, watch_mode):
    make_repo(workspace)
    (workspace / ".gitignore").write_text("build/\n.env\n")
    git(workspace, "commit", "-qam", "ignore .env")
    (workspace / ".env").write_text("SECRET=1\n")
    # The user's file must predate the command clearly: file times come from a coarse clock, so capture only
    # calls a change older than its window's start minus WINDOW_SLACK_NS someone else's. Wait for the clock.
    changed = (workspace / ".env").stat().st_ctime_ns
    wait_for(lambda: time.time_ns() > changed + WINDOW_SLACK_NS, "the clock to pass the user's file time")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "sleep 0.1; sed -i '/.env/d' .gitignore"}, call_id="c1")
    assert [p.path for p in load_view(tm.store, "r").patches] == [".gitignore"]
    tm.rollback_files("r", start)
    assert (workspace / ".env").read_text() == "SECRET=1\n"
    assert (workspace / ".gitignore").read_text() == "build/\n.env\n"


def test_concurrent_async_calls_are_not_blamed_on_a_command(workspace):
    import asyncio

    tm = safepoint.open(workspace=str(workspace))

    async def both(run):
        return await asyncio.gather(
            run.acall("run_command", {"command": "sleep 0.3; echo c > from_command.txt"}, call_id="c1"),
            run.acall("run_command", {"command": "echo d > from_second.txt"}, call_id="c2"),
            run.acall("write_file", {"path": "from_tool.txt", "content": "t\n"}, call_id="w1"),
        )

    with tm.start("t", run_id="r") as run:
        asyncio.run(both(run))
    owners = {p.path: p.tool_call_id for p in load_view(tm.store, "r").patches}
    assert owners == {"from_command.txt": "c1", "from_second.txt": "c2", "from_tool.txt": "w1"}
