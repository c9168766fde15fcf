"""Rollback on real work (issue 9 §2): a conflict covers every change of the agent to a path and its resolution
settles the path for good; a symlink or binary file is never merged line by line; a folder the agent swapped for a
symlink comes back as a folder, and nothing is ever written through a link."""

from __future__ import annotations

import os
import stat

import pytest

import safepoint
from safepoint.core.rollback import ABSENT
from safepoint.engine.file_changes import FileBefore
from safepoint.engine.tools import ToolContext
from safepoint.errors import ConfigError, ExitCode, ToolFailure
from safepoint.workspace.files import SYMLINK_MARK, Workspace

from .conftest import safepoint_in_process


def write(run, path, content, call_id):
    return run.call("write_file", {"path": path, "content": content}, call_id=call_id)


def command(run, line, call_id):
    return run.call("run_command", {"command": line}, call_id=call_id)


def rollback_twice_more(tm, checkpoint, path, expected):
    """Rolling back again, and again, leaves a settled path as it was resolved and raises no conflict."""
    for _ in range(2):
        plan = tm.rollback_files("r", checkpoint)
        assert not plan.conflicts and all(a.path != path for a in plan.actions)
        assert tm.conflicts("r") == []
        assert (path_of(tm, path)).read_bytes() == expected


def path_of(tm, path):
    import pathlib

    return pathlib.Path(tm.root) / path


# 1. a file the agent changed twice, then the user -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("resolution", "expected"),
    [
        ("manual_merge", b"one\ntwo\nthree\nuser line\n"),
        ("apply_agent", b"one\ntwo\nthree\n"),
        ("keep_user", b"agent-2\nuser line\n"),
    ],
)
def test_two_agent_changes_then_the_user_one_conflict_settled_once_and_for_all(workspace, resolution, expected):
    (workspace / "f.txt").write_text("one\ntwo\nthree\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "agent-1\n", "c1")
        write(run, "f.txt", "agent-2\n", "c2")
    (workspace / "f.txt").write_text("agent-2\nuser line\n")
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["f.txt"] and not plan.actions
    [shown] = tm.conflicts("r")
    assert "-one" in shown.agent_change and "+agent-2" in shown.agent_change and "agent-1" not in shown.agent_change
    result = tm.resolve("r", "f.txt", resolution)
    assert result.clean
    assert (workspace / "f.txt").read_bytes() == expected
    assert tm.conflicts("r") == []
    rollback_twice_more(tm, start, "f.txt", expected)
    assert shown.undoes == ["c2", "c1"]  # the whole of the agent's work on it, not only its last change


def test_three_changes_by_a_tool_and_commands_merge_out_together(workspace):
    (workspace / "f.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "sed -i 's/alpha/ALPHA/' f.txt", "c1")
        write(run, "f.txt", "ALPHA\nbeta\ngamma\ndelta\nagent tail\n", "c2")
        command(run, "sed -i 's/gamma/GAMMA/' f.txt", "c3")
    (workspace / "f.txt").write_text("ALPHA\nbeta user\nGAMMA\ndelta\nagent tail\n")
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["f.txt"]
    [shown] = tm.conflicts("r")
    tm.resolve("r", "f.txt", "manual_merge")
    assert (workspace / "f.txt").read_text() == "alpha\nbeta user\ngamma\ndelta\n"
    rollback_twice_more(tm, start, "f.txt", b"alpha\nbeta user\ngamma\ndelta\n")
    assert shown.undoes == ["c3", "c2", "c1"]


def test_a_delete_then_a_re_create_is_one_change_to_undo(workspace):
    (workspace / "f.txt").write_text("original\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "rm f.txt", "c1")
        write(run, "f.txt", "brand new\n", "c2")
    (workspace / "f.txt").write_text("brand new\nuser\n")
    tm.rollback_files("r", start)
    [shown] = tm.conflicts("r")
    tm.resolve("r", "f.txt", "apply_agent")
    assert (workspace / "f.txt").read_text() == "original\n"
    rollback_twice_more(tm, start, "f.txt", b"original\n")
    assert shown.undoes == ["c2", "c1"]


def test_a_mode_change_and_an_edit_are_undone_together(workspace):
    (workspace / "run.sh").write_text("echo hi\n")
    os.chmod(workspace / "run.sh", 0o644)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "chmod 755 run.sh", "c1")
        write(run, "run.sh", "echo agent\n", "c2")
    (workspace / "run.sh").write_text("echo agent\necho user\n")
    tm.rollback_files("r", start)
    [shown] = tm.conflicts("r")
    tm.resolve("r", "run.sh", "apply_agent")
    assert (workspace / "run.sh").read_text() == "echo hi\n"
    assert stat.S_IMODE(os.stat(workspace / "run.sh").st_mode) == 0o644
    rollback_twice_more(tm, start, "run.sh", b"echo hi\n")
    assert shown.undoes == ["c2", "c1"]


def test_a_user_edit_between_two_agent_changes_keeps_it_and_settles(workspace):
    (workspace / "f.txt").write_text("orig\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "agent 1\n", "c1")
        (workspace / "f.txt").write_text("user 1\n")
        write(run, "f.txt", "agent 2\n", "c2")
    tm.rollback_files("r", start)
    assert (workspace / "f.txt").read_text() == "user 1\n"  # c2 undone; c1 lies under the user's edit
    [conflict] = tm.conflicts("r")
    tm.resolve("r", "f.txt", "keep_user")
    rollback_twice_more(tm, start, "f.txt", b"user 1\n")
    assert conflict.undoes == ["c1"]


def test_after_a_resolution_the_agents_later_changes_are_still_undone(workspace):
    (workspace / "f.txt").write_text("one\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "agent\n", "c1")
    (workspace / "f.txt").write_text("agent\nuser\n")
    tm.rollback_files("r", start)
    tm.resolve("r", "f.txt", "manual_merge")
    assert (workspace / "f.txt").read_text() == "one\nuser\n"
    with tm.resume("r") as run:
        write(run, "f.txt", "one\nuser\nagent again\n", "c2")
        write(run, "g.txt", "new\n", "c3")
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts
    assert (workspace / "f.txt").read_text() == "one\nuser\n"  # c2 undone, the resolution kept
    assert not (workspace / "g.txt").exists()


def test_a_rollback_to_an_earlier_checkpoint_walks_on_past_a_settled_conflict(workspace):
    (workspace / "f.txt").write_text("orig\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        first = run.checkpoint()
        write(run, "f.txt", "a0\n", "c0")
        second = run.checkpoint()
        write(run, "f.txt", "a1\n", "c1")
        write(run, "f.txt", "a2\n", "c2")
    (workspace / "f.txt").write_text("a2\nuser\n")
    tm.rollback_files("r", second)
    tm.resolve("r", "f.txt", "apply_agent")
    assert (workspace / "f.txt").read_text() == "a0\n"
    tm.rollback_files("r", second)
    assert (workspace / "f.txt").read_text() == "a0\n"
    plan = tm.rollback_files("r", first)  # c0 is the agent's too, and the file holds what it left
    assert not plan.conflicts and (workspace / "f.txt").read_text() == "orig\n"


# 2. no internal bytes in a user's symlink or binary file --------------------------------------------------------------
def link_tool(workspace):
    @safepoint.tool(idempotency="conditional", replay_policy="auto", risk_level="low", writes=lambda a: [a["path"]])
    def make_link(ctx: ToolContext, path: str, target: str) -> str:
        full = workspace / path
        if full.is_symlink() or full.exists():
            full.unlink()
        os.symlink(target, full)
        return "ok"

    return make_link


def test_manual_merge_of_a_symlink_conflict_is_refused_and_the_link_left_alone(workspace):
    (workspace / "cfg").write_text("settings\n")
    tool = link_tool(workspace)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[tool], run_id="r") as run:
        start = run.checkpoint()
        run.call("make_link", {"path": "cfg", "target": "agent-target"}, call_id="c1")
    (workspace / "cfg").unlink()
    os.symlink("user-target", workspace / "cfg")
    tm.rollback_files("r", start)
    with pytest.raises(ConfigError, match=r"symlink .*--keep-user .*--apply-agent"):
        tm.resolve("r", "cfg", "manual_merge")
    assert os.readlink(workspace / "cfg") == "user-target"
    assert [c.path for c in tm.conflicts("r")] == ["cfg"]  # still pending: nothing was written
    done = safepoint_in_process("resolve", "r", "cfg", "--manual-merge", "--workspace", workspace)
    assert done.returncode == ExitCode.USAGE and len(done.stderr.strip().splitlines()) == 1
    assert "keep-user" in done.stderr and "Traceback" not in done.stderr
    tm.resolve("r", "cfg", "apply_agent")  # a link is handled as a link: the file it replaced comes back
    assert not (workspace / "cfg").is_symlink() and (workspace / "cfg").read_text() == "settings\n"


def test_manual_merge_of_a_binary_conflict_is_refused(workspace):
    (workspace / "img.bin").write_bytes(b"\x89PNG\x00\x01")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "printf 'agent\\000bin' > img.bin", "c1")
    (workspace / "img.bin").write_bytes(b"user\x00bytes")
    tm.rollback_files("r", start)
    with pytest.raises(ConfigError, match="binary file"):
        tm.resolve("r", "img.bin", "manual_merge")
    assert (workspace / "img.bin").read_bytes() == b"user\x00bytes"
    tm.resolve("r", "img.bin", "keep_user")
    rollback_twice_more(tm, start, "img.bin", b"user\x00bytes")


# 3. a folder swapped for a symlink ------------------------------------------------------------------------------------
def swap_tool(workspace):
    """What `rm -rf src && ln -s TARGET src` does, declared so its patches are recorded as the engine does today."""

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low", writes=lambda a: a["paths"])
    def swap(ctx: ToolContext, paths: list[str], target: str) -> str:
        import shutil

        shutil.rmtree(workspace / "src")
        os.symlink(target, workspace / "src")
        return "ok"

    return swap


@pytest.mark.parametrize("paths", [["src/keep.txt", "src"], ["src", "src/keep.txt"]], ids=["file-first", "link-first"])
def test_a_folder_the_agent_swapped_for_a_link_inside_the_workspace_comes_back_as_a_folder(workspace, paths):
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's\n")
    (workspace / "other").mkdir()
    (workspace / "other" / "x.txt").write_text("x\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[swap_tool(workspace)], run_id="r") as run:
        start = run.checkpoint()
        run.call("swap", {"paths": paths, "target": "other"}, call_id="c1")
    assert (workspace / "src").is_symlink()
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts
    assert (workspace / "src").is_dir() and not (workspace / "src").is_symlink()
    assert (workspace / "src" / "keep.txt").read_text() == "the user's\n"
    assert sorted(os.listdir(workspace / "other")) == ["x.txt"]  # nothing written through the link
    again = tm.rollback_files("r", start)
    assert not again.actions and not again.conflicts


def recorded_swap(tm, workspace, target):
    """The patches a capture records for `rm -rf src && ln -s TARGET src`, written through the session's file
    changes as the engine does (src/keep.txt deleted, src created as a link)."""
    import shutil

    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        files = run.session.files
        keep = files.describe("src/keep.txt", b"the user's\n", 0o644)
        shutil.rmtree(workspace / "src")
        os.symlink(target, workspace / "src")
        files.record("c1", keep, None, None)
        files.record("c1", FileBefore("src", ABSENT, None), SYMLINK_MARK + os.fsencode(target), None)
        run.checkpoint()
        run.session.commit()
    return start


def test_a_folder_swapped_for_a_link_outside_the_workspace_comes_back(workspace, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's\n")
    tm = safepoint.open(workspace=str(workspace))
    start = recorded_swap(tm, workspace, str(elsewhere))
    dry = tm.rollback_files("r", start, dry_run=True)
    assert sorted(a.path for a in dry.actions) == ["src", "src/keep.txt"] and not dry.conflicts
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts
    assert (workspace / "src").is_dir() and (workspace / "src" / "keep.txt").read_text() == "the user's\n"
    assert os.listdir(elsewhere) == []
    again = tm.rollback_files("r", start)  # done: a second rollback finds nothing to do, and no conflict
    assert not again.actions and not again.conflicts


def test_rolling_the_rollback_back_puts_the_agents_link_back_and_forward_again(workspace, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's\n")
    tm = safepoint.open(workspace=str(workspace))
    start = recorded_swap(tm, workspace, str(elsewhere))
    after_swap = tm.checkpoints("r")[-1].checkpoint_id
    tm.rollback_files("r", start)
    assert (workspace / "src" / "keep.txt").read_text() == "the user's\n"
    plan = tm.rollback_files("r", after_swap)  # the rollback is a recorded change: undone in turn
    assert not plan.conflicts
    assert os.readlink(workspace / "src") == str(elsewhere) and os.listdir(elsewhere) == []
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts and (workspace / "src" / "keep.txt").read_text() == "the user's\n"


def test_a_link_the_agent_replaced_by_a_folder_comes_back_as_the_link(workspace):
    (workspace / "real").mkdir()
    (workspace / "real" / "r.txt").write_text("r\n")
    os.symlink("real", workspace / "lib")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "rm lib && mkdir lib && echo a > lib/a", "c1")
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts
    assert os.readlink(workspace / "lib") == "real" and os.listdir(workspace / "real") == ["r.txt"]


def test_a_folder_with_the_users_files_in_it_is_never_replaced(workspace):
    (workspace / "real").mkdir()
    os.symlink("real", workspace / "lib")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "rm lib && mkdir lib", "c1")
    (workspace / "lib" / "mine.txt").write_text("the user's\n")
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["lib"]
    assert (workspace / "lib" / "mine.txt").read_text() == "the user's\n"


def test_a_link_the_user_made_over_the_folder_is_a_conflict_and_never_written_through(workspace):
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's\n")
    (workspace / "other").mkdir()
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        command(run, "rm src/keep.txt", "c1")
    os.rmdir(workspace / "src")
    os.symlink("other", workspace / "src")  # the user's own move, after the agent
    plan = tm.rollback_files("r", start)
    assert [c.path for c in plan.conflicts] == ["src/keep.txt"] and not plan.actions
    assert os.listdir(workspace / "other") == [] and os.readlink(workspace / "src") == "other"
    [shown] = tm.conflicts("r")
    assert "symlink" in shown.why
    with pytest.raises(ConfigError, match="never writes through"):
        tm.resolve("r", "src/keep.txt", "apply_agent")
    assert os.listdir(workspace / "other") == []
    tm.resolve("r", "src/keep.txt", "keep_user")
    assert tm.conflicts("r") == []


def test_workspace_restore_never_follows_a_link_in_a_folder_on_the_way(tmp_path):
    root = tmp_path / "ws"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("keep me\n")
    os.symlink("real", root / "via")
    workspace = Workspace(str(root))
    with pytest.raises(ToolFailure, match="symlink"):
        workspace.restore("via/f", b"overwritten\n", None)
    with pytest.raises(ToolFailure, match="symlink"):
        workspace.restore("via/f", None, None)
    with pytest.raises(ToolFailure, match="symlink"):
        workspace.restore("via/new/g", b"x", None)
    assert (root / "real" / "f").read_text() == "keep me\n" and sorted(os.listdir(root / "real")) == ["f"]
    assert workspace.link_parent("via/f") == "via" and workspace.link_parent("real/f") is None
    workspace.restore("a/b/c.txt", b"made\n", 0o600)  # missing folders are created, the mode is the one given
    assert (root / "a" / "b" / "c.txt").read_text() == "made\n"
    assert stat.S_IMODE(os.stat(root / "a" / "b" / "c.txt").st_mode) == 0o600
    workspace.restore("lnk", SYMLINK_MARK + b"real", None)
    assert os.readlink(root / "lnk") == "real"
    workspace.restore("lnk", b"a file now\n", None)  # the link itself is replaced, its target untouched
    assert not (root / "lnk").is_symlink() and (root / "real" / "f").read_text() == "keep me\n"


# crashes at the worst moment ---------------------------------------------------------------------------------------
class Crash(BaseException):
    pass


def test_a_crash_inside_a_resolution_is_finished_and_the_path_stays_settled(workspace, monkeypatch):
    (workspace / "f.txt").write_text("one\ntwo\nthree\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "agent-1\n", "c1")
        write(run, "f.txt", "agent-2\n", "c2")
    (workspace / "f.txt").write_text("agent-2\nuser line\n")
    tm.rollback_files("r", start)
    original = Workspace.restore

    def crash_after_writing(self, rel, data, mode):
        original(self, rel, data, mode)
        raise Crash  # the merged file is on disk, the ledger does not know it yet

    monkeypatch.setattr(Workspace, "restore", crash_after_writing)
    with pytest.raises(Crash):
        tm.resolve("r", "f.txt", "manual_merge")
    monkeypatch.setattr(Workspace, "restore", original)
    plan = tm.rollback_files("r", start)  # finishes the interrupted resolution first, then finds nothing to do
    assert not plan.conflicts and not plan.actions
    assert (workspace / "f.txt").read_text() == "one\ntwo\nthree\nuser line\n"
    rollback_twice_more(tm, start, "f.txt", b"one\ntwo\nthree\nuser line\n")


def test_a_crash_between_removing_the_agents_link_and_restoring_the_folder(workspace, monkeypatch, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "keep.txt").write_text("the user's\n")
    tm = safepoint.open(workspace=str(workspace))
    start = recorded_swap(tm, workspace, str(elsewhere))
    original = Workspace.restore

    def crash_on_the_folder(self, rel, data, mode):
        if rel == "src/keep.txt":
            raise Crash
        return original(self, rel, data, mode)

    monkeypatch.setattr(Workspace, "restore", crash_on_the_folder)
    with pytest.raises(Crash):
        tm.rollback_files("r", start)
    monkeypatch.setattr(Workspace, "restore", original)
    assert not os.path.lexists(workspace / "src")  # the link went in its own call; the folder did not come yet
    plan = tm.rollback_files("r", start)
    assert not plan.conflicts
    assert (workspace / "src" / "keep.txt").read_text() == "the user's\n" and os.listdir(elsewhere) == []
    again = tm.rollback_files("r", start)
    assert not again.actions and not again.conflicts


# property: a resolution settles its path, whatever came before -------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

steps = st.lists(
    st.one_of(
        st.tuples(st.just("agent"), st.sampled_from(["a.txt", "b.txt"]), st.integers(0, 3)),
        st.tuples(st.just("command"), st.sampled_from(["a.txt", "b.txt"]), st.integers(0, 3)),
        st.tuples(st.just("user"), st.sampled_from(["a.txt", "b.txt"]), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=steps, choices=st.lists(st.sampled_from(["keep_user", "apply_agent", "manual_merge"]), min_size=2, max_size=2)
)
def test_after_every_resolution_rolling_back_again_changes_nothing(tmp_path_factory, ops, choices):
    root = tmp_path_factory.mktemp("ws")
    (root / "a.txt").write_text("base a\nline 2\n")
    tm = safepoint.open(workspace=str(root))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        for number, (kind, path, value) in enumerate(ops):
            if kind == "agent":
                write(run, path, f"agent {number} {value}\nline 2\n", f"c{number}")
            elif kind == "command":
                command(run, f"printf 'cmd {number}\\nline 2\\n' > {path}", f"c{number}")
            else:
                (root / path).write_text(f"user {number} {value}\nline 2\n")
    plan = tm.rollback_files("r", start)
    for conflict, choice in zip(plan.conflicts, choices * 2, strict=False):
        try:
            tm.resolve("r", conflict.path, choice)
        except safepoint.ResumeError:
            tm.resolve("r", conflict.path, "keep_user")  # nothing to merge with (the agent removed it)
    settled = {p: (root / p).read_bytes() if (root / p).exists() else None for p in ("a.txt", "b.txt")}
    for _ in range(2):
        again = tm.rollback_files("r", start)
        assert not again.conflicts and not again.actions
        assert {p: (root / p).read_bytes() if (root / p).exists() else None for p in settled} == settled
    assert tm.conflicts("r") == []
