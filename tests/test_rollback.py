"""rollback_files, conflicts and their resolution, restore_session, compensate_external_action (§8.8, §8.9)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.core.hashing import content_hash
from safepoint.engine.conflicts import merge_revert
from safepoint.engine.session import load_view
from safepoint.engine.tools import ToolContext
from safepoint.errors import NoCompensatorError
from safepoint.standins.scenario import parse_scenario


def write(run, path, content, call_id):
    return run.call("write_file", {"path": path, "content": content}, call_id=call_id)


def test_rollback_reverts_the_agents_changes_newest_first(workspace):
    (workspace / "a.txt").write_text("original\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "a.txt", "one\n", "c1")
        write(run, "a.txt", "two\n", "c2")
        write(run, "sub/new.txt", "new\n", "c3")
    plan = tm.rollback_files("r", start)
    assert (workspace / "a.txt").read_text() == "original\n"
    assert not (workspace / "sub" / "new.txt").exists()
    assert not plan.conflicts
    assert {a.path: a.undoes for a in plan.actions} == {"a.txt": ("c2", "c1"), "sub/new.txt": ("c3",)}


def test_a_file_the_user_changed_is_a_conflict_and_is_not_touched(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "a.txt", "agent\n", "c1")
        write(run, "b.txt", "agent b\n", "c2")
    (workspace / "a.txt").write_text("agent\nuser line\n")
    plan = tm.rollback_files("r", start)
    assert (workspace / "a.txt").read_text() == "agent\nuser line\n"
    assert not (workspace / "b.txt").exists()
    [conflict] = plan.conflicts
    assert conflict.path == "a.txt" and conflict.resolution == "pending"
    assert conflict.expected_hash == content_hash(b"agent\n")
    assert conflict.actual_hash == content_hash(b"agent\nuser line\n")
    [described] = tm.conflicts("r")
    assert "+agent" in described.agent_change and "+user line" in described.changed_since


def test_a_user_edit_between_two_agent_writes_stops_the_revert_there(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "a.txt", "agent 1\n", "c1")
        (workspace / "a.txt").write_text("user\n")
        write(run, "a.txt", "agent 2\n", "c2")
    plan = tm.rollback_files("r", start)
    assert (workspace / "a.txt").read_text() == "user\n"  # c2 undone; c1 would overwrite the user's edit
    assert [c.path for c in plan.conflicts] == ["a.txt"]


@pytest.mark.parametrize(
    ("resolution", "expected"),
    [
        ("keep_user", "line1\nAGENT\nline3\nuser tail\n"),
        ("apply_agent", "line1\nline2\nline3\n"),
        ("manual_merge", "line1\nline2\nline3\nuser tail\n"),
    ],
)
def test_resolutions(workspace, resolution, expected):
    (workspace / "f.txt").write_text("line1\nline2\nline3\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "line1\nAGENT\nline3\n", "c1")
    (workspace / "f.txt").write_text("line1\nAGENT\nline3\nuser tail\n")
    tm.rollback_files("r", start)
    result = tm.resolve("r", "f.txt", resolution)
    assert (workspace / "f.txt").read_text() == expected
    assert result.resolution == resolution
    assert tm.conflicts("r") == []
    assert load_view(tm.store, "r").conflicts["f.txt"].resolution == resolution


def test_apply_agent_keeps_the_overwritten_user_version_recoverable(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "f.txt", "agent\n", "c1")
    (workspace / "f.txt").write_text("precious user work\n")
    tm.rollback_files("r", start)
    tm.resolve("r", "f.txt", "apply_agent")
    assert not (workspace / "f.txt").exists()
    view = load_view(tm.store, "r")
    resolve_patch = [p for p in view.patches if p.tool_call_id.startswith("safepoint:resolve:")][-1]
    assert resolve_patch.before_hash == content_hash(b"precious user work\n")
    with tm._session("r", read_only=True) as session:
        assert session.files.version("f.txt", resolve_patch.before_hash) == b"precious user work\n"


def test_merge_revert_takes_the_agents_change_out_and_keeps_the_users():
    base = b"a\nb\nc\nd\ne\n"
    agent = b"a\nB\nc\nd\ne\n"
    current = b"a\nB\nc\nd\nE\n"
    merged, clean = merge_revert(base, agent, current)
    assert clean and merged == b"a\nb\nc\nd\nE\n"


def test_a_rollback_is_recorded_and_can_itself_be_rolled_back(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "a.txt", "agent\n", "c1")
        before_rollback = run.checkpoint()
    tm.rollback_files("r", start)
    assert not (workspace / "a.txt").exists()
    tm.rollback_files("r", before_rollback)
    assert (workspace / "a.txt").read_text() == "agent\n"


def test_binary_files_symlinks_and_modes_roll_back_exactly(workspace):
    blob = bytes(range(256)) * 40
    (workspace / "img.bin").write_bytes(blob)
    (workspace / "tool.sh").write_text("#!/bin/sh\n")
    os.chmod(workspace / "tool.sh", 0o755)
    tm = safepoint.open(workspace=str(workspace))

    @safepoint.tool(idempotency="conditional", replay_policy="auto", risk_level="low", writes=lambda a: a["paths"])
    def mess(ctx: ToolContext, paths: list[str]) -> str:
        (workspace / "img.bin").write_bytes(blob[::-1])
        os.chmod(workspace / "tool.sh", 0o600)
        os.symlink("img.bin", workspace / "link")
        return "ok"

    with tm.start("t", tools=[mess], run_id="r") as run:
        start = run.checkpoint()
        run.call("mess", {"paths": ["img.bin", "tool.sh", "link"]}, call_id="c1")
    patches = {p.path: p for p in load_view(tm.store, "r").patches}
    assert patches["tool.sh"].op == "chmod" and patches["link"].op == "create"
    tm.rollback_files("r", start)
    assert (workspace / "img.bin").read_bytes() == blob
    assert stat.S_IMODE(os.stat(workspace / "tool.sh").st_mode) == 0o755
    assert not os.path.lexists(workspace / "link")


def test_a_crash_half_way_through_a_rollback_is_finished_by_the_next_command(workspace, monkeypatch):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        for index in range(5):
            write(run, f"f{index}.txt", "agent\n", f"c{index}")

    class Crash(BaseException):
        pass

    from safepoint.workspace.files import Workspace

    original = Workspace.restore
    calls = []

    def crashing(self, rel, data, mode):
        calls.append(rel)
        if len(calls) == 3:
            raise Crash
        return original(self, rel, data, mode)

    monkeypatch.setattr(Workspace, "restore", crashing)
    with pytest.raises(Crash):
        tm.rollback_files("r", start)
    monkeypatch.setattr(Workspace, "restore", original)
    remaining = sorted(p.name for p in workspace.iterdir() if p.name.startswith("f"))
    assert len(remaining) == 3  # two were removed before the crash
    entry = load_view(tm.store, "r").ledger["safepoint:rollback:1"]
    assert entry.status == "started"  # the journal: planned actions durable, outcome unknown
    plan = tm.rollback_files("r", start)  # finishes the interrupted rollback first
    assert not [p for p in workspace.iterdir() if p.name.startswith("f")]
    assert not plan.conflicts
    assert load_view(tm.store, "r").ledger["safepoint:rollback:1"].status == "succeeded"


TWO_STEPS = {
    "task": "t",
    "turns": [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a", "content": "1"}}]},
        {"tool_calls": [{"tool": "write_file", "args": {"path": "b", "content": "2"}}]},
        {"text": "done"},
    ],
}


def two_step_run(workspace):
    """A finished scripted run that wrote ``a`` in step 1 and ``b`` in step 2."""
    tm = safepoint.open(workspace=str(workspace))
    script = parse_scenario(json.dumps(TWO_STEPS).encode())
    run = tm.start(script.task, run_id="r", model=script.model)
    with run:
        tm.run_agent(run, safepoint.ScriptedProvider(script))
    return tm, script


def test_restore_session_branches_the_conversation_and_leaves_files(workspace):
    tm, script = two_step_run(workspace)
    view = load_view(tm.store, "r")
    after_first = next(c for c in view.checkpoints if c.checkpoint.kind == "after_step").checkpoint
    restored = tm.restore_session("r", after_first.checkpoint_id)
    history = tm.history("r")
    assert len(history.current) == after_first.history_len and history.abandoned
    assert (workspace / "b").exists()  # files are left alone without --with-files
    assert restored.kind == "after_step" and restored.next_turn == after_first.next_turn
    assert load_view(tm.store, "r").latest_complete_checkpoint().checkpoint.checkpoint_id == restored.checkpoint_id
    resumed = tm.resume("r")
    assert "restored this session to checkpoint" in resumed.recovery_note
    assert "write_file(call_2) succeeded" in resumed.recovery_note  # left on the abandoned branch, and said so
    assert resumed.completed_steps == 1
    with resumed:
        assert tm.run_agent(resumed, safepoint.ScriptedProvider(script)) == "completed"
    tm.restore_session("r", after_first.checkpoint_id, with_files=True)
    assert not (workspace / "b").exists() and (workspace / "a").exists()
    resumed = tm.resume("r")
    with resumed:
        assert tm.run_agent(resumed, safepoint.ScriptedProvider(script)) == "completed"
    assert (workspace / "b").read_text() == "2"  # the repeated call ran again on the new branch, so b is back
    ledger = load_view(tm.store, "r").ledger
    assert any(call_id.startswith("call_2~b") for call_id in ledger)


def test_compensation_runs_once_and_links_to_the_original(workspace):
    issues: dict[str, str] = {}

    def close_issue(ctx: ToolContext, args: dict, result: str) -> str:
        issues[result] = "closed"
        return f"closed {result}"

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="medium", compensator=close_issue)
    def create_issue(ctx: ToolContext, title: str) -> str:
        issues["ISSUE-1"] = "open"
        return "ISSUE-1"

    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[create_issue], run_id="r") as run:
        run.call("create_issue", {"title": "x"}, call_id="c1")
        run.call_result("read_file", {"path": "nothing"}, call_id="c2")  # fails: nothing to compensate
    assert tm.compensate("r", "c1", tools=[create_issue]) == "closed ISSUE-1"
    assert issues == {"ISSUE-1": "closed"}
    with pytest.raises(safepoint.ResumeError, match="at most once"):
        tm.compensate("r", "c1", tools=[create_issue])
    entry = load_view(tm.store, "r").ledger["safepoint:compensate:c1"]
    assert entry.compensates == "c1" and entry.status == "succeeded"
    with pytest.raises(NoCompensatorError, match="by hand"):
        tm.compensate("r", "c2", tools=[create_issue])


def test_no_recovery_action_is_called_undo():
    import safepoint.api
    import safepoint.cli.app

    for module in (safepoint.api, safepoint.cli.app):
        names = [name for name in dir(module) if "undo" in name.lower()]
        assert names == []
    for name in dir(safepoint.api.Safepoint):
        assert "undo" not in name.lower()


# property: no byte the user wrote is ever lost -----------------------------------------------------------------
PATHS = ["a.txt", "b.txt", "d/c.txt"]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("agent"), st.sampled_from(PATHS), st.integers(0, 3)),
        st.tuples(st.just("command"), st.sampled_from(PATHS), st.integers(0, 3)),
        st.tuples(st.just("command_rm"), st.sampled_from(PATHS), st.just(0)),
        st.tuples(st.just("user"), st.sampled_from(PATHS), st.integers(0, 3)),
        st.tuples(st.just("user_delete"), st.sampled_from(PATHS), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(""), st.just(0)),
        st.tuples(st.just("rollback"), st.just(""), st.integers(0, 5)),
        st.tuples(st.just("resolve"), st.sampled_from(PATHS), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=14,
)


def reproduce(session, path, data):
    """The bytes ``data`` from the run's records (its blobs and patches, or git for a clean tracked file)."""
    digest = content_hash(data)
    refs = [p.before_ref for p in session.patches if p.before_hash == digest and p.before_ref]
    return session.files.version(path, digest, refs[-1] if refs else None)


@pytest.fixture(scope="module")
def committed_repo(tmp_path_factory):
    """A repository with a.txt committed, made once: each example copies it (three git processes fewer each)."""
    root = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
    (root / "a.txt").write_text("committed a\n")
    subprocess.run(["git", "-C", str(root), "add", "a.txt"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], check=True
    )
    return root


@pytest.mark.parametrize("with_git", [False, True], ids=["plain", "git"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_no_byte_the_user_wrote_is_lost(tmp_path_factory, committed_repo, with_git, ops):
    root = tmp_path_factory.mktemp("ws")
    if with_git:
        shutil.copytree(committed_repo, root, dirs_exist_ok=True)
    tm = safepoint.open(workspace=str(root))
    run = tm.start("t", run_id="r")
    checkpoints = [run.checkpoint()]

    def snapshot():
        return {p: (root / p).read_bytes() if (root / p).exists() else None for p in PATHS}

    def check_recoverable(before, session):
        after = snapshot()
        for path, old in before.items():
            if old is not None and after[path] != old:
                # safepoint changed it (a tool, a command, a rollback): the old bytes must be reproducible
                assert reproduce(session, path, old) == old

    for counter, (kind, path, value) in enumerate(ops, 1):
        if kind in ("agent", "command", "command_rm"):
            before = snapshot()
            if kind == "agent":
                write(run, path, f"agent {counter} v{value}\n", f"c{counter}")
            elif kind == "command":
                target = root / path
                target.parent.mkdir(parents=True, exist_ok=True)
                run.call("run_command", {"command": f"printf 'cmd {counter}\\n' > {path}"}, call_id=f"c{counter}")
            else:
                run.call("run_command", {"command": f"rm -f {path}"}, call_id=f"c{counter}")
            check_recoverable(before, run.session)
        elif kind == "user":
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(f"user {counter} v{value}\n")
        elif kind == "user_delete":
            if (root / path).exists():
                (root / path).unlink()
        elif kind == "checkpoint":
            checkpoints.append(run.checkpoint())
        elif kind in ("rollback", "resolve"):
            run.close()
            before = snapshot()
            if kind == "rollback":
                target_checkpoint = checkpoints[value % len(checkpoints)]
                with tm._session("r") as session:
                    agent_last = {}
                    for patch in session.patches:
                        agent_last[patch.path] = patch.after_hash
                    plan = safepoint.engine.actions.rollback_files(session, target_checkpoint)
                    touched = {a.path for a in plan.actions}
                    for path_, old in before.items():
                        if path_ in touched:
                            # only files still exactly as the agent left them are reverted
                            held = content_hash(old) if old is not None else ""
                            assert held == agent_last.get(path_)
                    check_recoverable(before, session)
            else:
                choice = ["keep_user", "apply_agent", "manual_merge"][value]
                pending = {c.path: c for c in tm.conflicts("r")}
                if path in pending and choice == "manual_merge" and "to merge with" in pending[path].why:
                    # the agent's last change removed the file: the conflict says there is no merge, and it is refused
                    with pytest.raises(safepoint.ResumeError, match=NO_MERGE_WORDS):
                        tm.resolve("r", path, choice)
                    assert snapshot() == before
                elif path in pending:
                    with tm._session("r") as session:
                        safepoint.engine.actions.resolve(session, path, choice)
                        check_recoverable(before, session)
                    if choice == "keep_user":
                        assert snapshot() == before
            run = tm.resume("r")
    run.close()


def test_a_write_rerun_after_a_crash_never_overwrites_an_edit_made_meanwhile(workspace):
    (workspace / "f.txt").write_text("original\n")
    tm = safepoint.open(workspace=str(workspace))

    class Crash(BaseException):
        pass

    from safepoint.engine import builtin

    run = tm.start("t", run_id="r")
    original_fn = builtin.write_file.fn
    try:
        object.__setattr__(builtin.write_file, "fn", lambda ctx, path, content: (_ for _ in ()).throw(Crash()))
        with pytest.raises(Crash):
            run.call("write_file", {"path": "f.txt", "content": "agent\n"}, call_id="w1")
    finally:
        object.__setattr__(builtin.write_file, "fn", original_fn)
    run.session.store.release(run.session.claim)
    (workspace / "f.txt").write_text("USER WORK\n")  # edited after the crash, before the resume
    with pytest.raises(safepoint.DecisionNeeded):
        tm.resume("r")
    assert (workspace / "f.txt").read_text() == "USER WORK\n"
    resumed = tm.resume("r", replay=["w1"])  # the person decides to write anyway: the user's bytes are kept
    with resumed:
        resumed.call("write_file", {"path": "f.txt", "content": "agent\n"}, call_id="w1")
        patch = [p for p in resumed.session.patches if p.tool_call_id == "w1"][-1]
        assert resumed.session.files.version("f.txt", patch.before_hash) == b"USER WORK\n"


def test_a_rollback_does_not_move_the_run_back_to_its_first_step(workspace):
    tm, _ = two_step_run(workspace)
    view = load_view(tm.store, "r")
    first = view.checkpoints[0].checkpoint.checkpoint_id
    before = view.latest_complete_checkpoint().checkpoint
    tm.rollback_files("r", first)
    after = load_view(tm.store, "r").latest_complete_checkpoint().checkpoint
    assert (after.step, after.next_turn) == (before.step, before.next_turn)
    explained = tm.explain("r")
    assert explained.workspace_drift == []  # the rollback's own removals are the run's, not someone else's


# The property test's failure on main, as fixed cases -----------------------------------------------------------
def git_workspace(root):
    import subprocess

    subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
    (root / "a.txt").write_text("committed a\n")
    subprocess.run(["git", "-C", str(root), "add", "a.txt"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], check=True
    )


@pytest.mark.parametrize("with_git", [False, True], ids=["plain", "git"])
@pytest.mark.parametrize("agent_again", [False, True], ids=["user-last", "agent-over-user"])
def test_a_file_the_agent_created_and_a_rollback_removed_is_the_users_once_recreated(workspace, with_git, agent_again):
    """The agent created b.txt, a rollback removed it, the user wrote a b.txt of their own (and the agent may
    have written over that): the agent's creation and its rollback cancel out, so a second rollback leaves the
    user's file and raises no conflict (on main it raised one whose manual merge then refused)."""
    if with_git:
        git_workspace(workspace)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "b.txt", "agent 1 v0\n", "c1")
    tm.rollback_files("r", start)
    assert not (workspace / "b.txt").exists()
    (workspace / "b.txt").write_text("user 3 v0\n")
    if agent_again:
        with tm.resume("r") as run:
            write(run, "b.txt", "agent 4 v1\n", "c4")
    plan = tm.rollback_files("r", start)
    assert (workspace / "b.txt").read_text() == "user 3 v0\n"
    assert plan.conflicts == [] and tm.conflicts("r") == []
    assert [a.undoes for a in plan.actions] == ([("c4",)] if agent_again else [])
    tm.rollback_files("r", start)  # again: still nothing to settle, nothing touched
    assert (workspace / "b.txt").read_text() == "user 3 v0\n" and tm.conflicts("r") == []


@pytest.mark.parametrize("with_git", [False, True], ids=["plain", "git"])
def test_a_file_the_agent_removed_and_the_user_wrote_again_offers_no_merge(workspace, with_git):
    """The agent's last change removed the file and the user wrote one there since: there is no version of the
    agent's to merge with. The conflict says so and names the two choices left; --manual-merge is refused in
    those words and changes nothing; --apply-agent puts back the file as it was before the agent."""
    if with_git:
        git_workspace(workspace)
    else:
        (workspace / "a.txt").write_text("committed a\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        write(run, "a.txt", "agent 1\n", "c1")
        run.call("run_command", {"command": "rm -f a.txt"}, call_id="c2")
    (workspace / "a.txt").write_text("user 3\n")
    plan = tm.rollback_files("r", start)
    [conflict] = tm.conflicts("r")
    assert [c.path for c in plan.conflicts] == ["a.txt"] and conflict.expected_hash == ""
    assert NO_MERGE_WORDS in conflict.why and "--keep-user" in conflict.why and "--apply-agent" in conflict.why
    with pytest.raises(safepoint.ResumeError, match=NO_MERGE_WORDS):
        tm.resolve("r", "a.txt", "manual_merge")
    assert (workspace / "a.txt").read_text() == "user 3\n" and [c.path for c in tm.conflicts("r")] == ["a.txt"]
    tm.resolve("r", "a.txt", "apply_agent")
    assert (workspace / "a.txt").read_text() == "committed a\n" and tm.conflicts("r") == []


NO_MERGE_WORDS = "the agent removed it, so there is no version of the agent's to merge with"
