"""Issue 9 on the recovery side: changes whose author is uncertain, internal ids no model id can reach, what
``restore`` does not undo, and the real reason ``commit`` leaves a path out (in real git repositories)."""

from __future__ import annotations

import json
import subprocess

import msgspec
import pytest

import safepoint
from safepoint.core.resume import is_internal, model_call_id
from safepoint.engine.log_writer import now
from safepoint.engine.session import load_view
from safepoint.engine.tools import ToolContext
from safepoint.records import Checkpoint, FilePatchEntry, ToolLedgerEntry
from safepoint.standins.scenario import parse_scenario

from .conftest import safepoint_in_process


def write(run, path, content, call_id):
    return run.call("write_file", {"path": path, "content": content}, call_id=call_id)


# 4. changes whose author is uncertain -----------------------------------------------------------------------------
def uncertain_change(session, path, before_data, after_data, call_id):
    """A change captured while a command ran whose author the platform could not tell, recorded through the
    session's file changes as the capture does (before-state first, then the patch with the flag)."""
    files = session.files
    before = files.describe(path, before_data, 0o644 if before_data is not None else None)
    data = after_data or b""
    entry = FilePatchEntry(
        path=path,
        before_hash=before.hash,
        after_hash="" if after_data is None else safepoint.core.hashing.content_hash(after_data),
        patch_ref="blob:" + files.patch(before, data),
        tool_call_id=call_id,
        created_at=now(),
        op="modify" if before_data is not None and after_data is not None else "create",
        before_ref=before.ref,
        before_mode=before.mode,
        after_mode=0o644 if after_data is not None else None,
        author_uncertain=True,
    )
    files.patches.append(entry)
    files.records.add(entry)


def test_uncertain_changes_are_listed_and_reverted_only_when_included(workspace):
    (workspace / "notes.txt").write_text("mine\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call("run_command", {"command": "true"}, call_id="c1")
        (workspace / "notes.txt").write_text("written while c1 ran\n")
        uncertain_change(run.session, "notes.txt", b"mine\n", b"written while c1 ran\n", "c1")
        write(run, "out.txt", "sure\n", "c2")
        run.session.commit()
    dry = tm.rollback_files("r", start, dry_run=True)
    assert [(u.path, u.call_id) for u in dry.uncertain] == [("notes.txt", "c1")]
    assert "--include-uncertain" in dry.uncertain[0].why
    assert [a.path for a in dry.actions] == ["out.txt"]
    shown = safepoint_in_process("rollback", "r", "--to", start, "--dry-run", "--workspace", workspace)
    assert shown.returncode == 0 and "notes.txt" in shown.stdout and "--include-uncertain" in shown.stdout
    plan = tm.rollback_files("r", start)
    assert (workspace / "notes.txt").read_text() == "written while c1 ran\n"  # left, and said so
    assert [u.path for u in plan.uncertain] == ["notes.txt"] and not (workspace / "out.txt").exists()
    dry = tm.rollback_files("r", start, dry_run=True, include_uncertain=True)
    assert [(a.path, a.author_uncertain) for a in dry.actions] == [("notes.txt", True)]
    tm.rollback_files("r", start, include_uncertain=True)
    assert (workspace / "notes.txt").read_text() == "mine\n"


def test_a_sure_change_over_an_uncertain_one_is_undone_down_to_it(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        (workspace / "f.txt").write_text("by someone\n")
        uncertain_change(run.session, "f.txt", None, b"by someone\n", "c1")
        write(run, "f.txt", "by the agent\n", "c2")
    plan = tm.rollback_files("r", start)
    assert (workspace / "f.txt").read_text() == "by someone\n"
    assert [u.call_id for u in plan.uncertain] == ["c1"] and [a.undoes for a in plan.actions] == [("c2",)]
    done = safepoint_in_process("rollback", "r", "--to", start, "--include-uncertain", "--workspace", workspace)
    assert done.returncode == 0 and not (workspace / "f.txt").exists()


# 5. internal ids the model cannot reach -----------------------------------------------------------------------------
MODEL_IDS = [
    "rollback_1",
    "rollback_2",
    "resolve_1",
    "resolve_3",
    "compensate_1",
    "compensate_c0",
    "safepoint:rollback:1",
    "safepoint:resolve:1",
    "safepoint:compensate:c0",
    "_safepoint:rollback:1",
    "id with spaces",
    "ünïcødé/ид/🙂",
    "a/b/../c",
    "x" * 5000,
]


@pytest.mark.parametrize("model_id", MODEL_IDS, ids=lambda i: i[:24])
def test_no_model_call_id_collides_with_or_confuses_safepoints_own(workspace, model_id):
    issues: dict[str, str] = {}

    def close(ctx: ToolContext, args: dict, result: str) -> str:
        issues[result] = "closed"
        return "closed"

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low", compensator=close)
    def create_issue(ctx: ToolContext, title: str) -> str:
        issues["I-1"] = "open"
        return "I-1"

    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[create_issue], run_id="r") as run:
        start = run.checkpoint()
        run.call("create_issue", {"title": "x"}, call_id="c0")
        write(run, "a.txt", "agent\n", model_id)
        write(run, "b.txt", "agent\n", "c2")
    (workspace / "b.txt").write_text("agent\nuser\n")
    for _ in range(3):  # every rollback, every resolution, never blocked by the model's id
        tm.rollback_files("r", start)
        assert not (workspace / "a.txt").exists()
    tm.resolve("r", "b.txt", "apply_agent")
    assert tm.compensate("r", "c0", tools=[create_issue]) == "closed" and issues == {"I-1": "closed"}
    with tm.resume("r", tools=[create_issue]) as run:  # the model repeats its id after all that: its own entry
        assert write(run, "a.txt", "agent\n", model_id) is not None
    ledger = load_view(tm.store, "r").ledger
    mine = ledger[model_call_id(model_id)]
    assert mine.tool_name == "write_file" and not is_internal(mine)
    internal = [e for e in ledger.values() if is_internal(e)]
    assert {e.tool_name for e in internal} == {"rollback_files", "resolve_conflict", "compensate_create_issue"}
    assert all(e.call_id.startswith("safepoint:") for e in internal)


def test_model_ids_are_escaped_where_they_enter_and_stay_distinct():
    assert model_call_id("call_1") == "call_1"
    assert model_call_id("safepoint:rollback:1") == "_safepoint:rollback:1"
    assert model_call_id("_safepoint:rollback:1") == "__safepoint:rollback:1"
    assert len({model_call_id(i) for i in MODEL_IDS}) == len(MODEL_IDS)
    assert not any(model_call_id(i).startswith("safepoint:") for i in MODEL_IDS)


def test_a_scripted_model_using_internal_ids_runs_and_rolls_back(workspace):
    script = {
        "task": "t",
        "turns": [
            {"tool_calls": [{"tool": "write_file", "args": {"path": "a", "content": "1"}, "call_id": "rollback_1"}]},
            {
                "tool_calls": [
                    {"tool": "write_file", "args": {"path": "b", "content": "2"}, "call_id": "safepoint:rollback:1"}
                ]
            },
            {"text": "done"},
        ],
    }
    tm = safepoint.open(workspace=str(workspace))
    scenario = parse_scenario(json.dumps(script).encode())
    with tm.start(scenario.task, run_id="r", model=scenario.model) as run:
        assert tm.run_agent(run, safepoint.ScriptedProvider(scenario)) == "completed"
    first = load_view(tm.store, "r").checkpoints[0].checkpoint.checkpoint_id
    tm.rollback_files("r", first)
    assert not (workspace / "a").exists() and not (workspace / "b").exists()
    ledger = load_view(tm.store, "r").ledger
    assert ledger["rollback_1"].tool_name == "write_file" and not is_internal(ledger["rollback_1"])
    assert ledger["_safepoint:rollback:1"].tool_name == "write_file"
    assert ledger["safepoint:rollback:1"].tool_name == "rollback_files"


def entry(call_id, tool, args):
    return ToolLedgerEntry(
        call_id=call_id,
        step_id="step_1",
        tool_name=tool,
        input_hash="h",
        status="succeeded",
        risk_level="low",
        idempotency="conditional",
        replay_policy="auto",
        input=args,
    )


def test_runs_written_before_the_namespace_are_still_read_right():
    assert is_internal(entry("rollback_1", "rollback_files", {"checkpoint_id": "c", "actions": []}))
    assert is_internal(entry("resolve_2", "resolve_conflict", {"path": "a", "blob": "", "expect": ""}))
    assert not is_internal(entry("rollback_2", "write_file", {"path": "a", "content": "x"}))
    assert not is_internal(entry("rollback_3", "rollback_files", {"path": "a"}))  # a user's tool of that name
    old_compensation = msgspec.structs.replace(entry("compensate_c1", "compensate_x", {}), compensates="c1")
    assert is_internal(old_compensation)


# 6. restore says what it does not undo --------------------------------------------------------------------------------
def effect_tools(sent: list[str]):
    def close(ctx: ToolContext, args: dict, result: str) -> str:
        return f"closed {result}"

    @safepoint.tool(
        idempotency="non_idempotent",
        replay_policy="never",
        risk_level="low",
        side_effects=("network",),
        compensator=close,
    )
    def create_issue(ctx: ToolContext, title: str) -> str:
        return "ISSUE-7"

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", side_effects=("email",))
    def send_email(ctx: ToolContext, to: str) -> str:
        sent.append(to)
        return "sent"

    @safepoint.tool(idempotency="idempotent", replay_policy="auto", risk_level="low", side_effects=("network",))
    def fetch(ctx: ToolContext, url: str) -> str:
        return "page"

    return [create_issue, send_email, fetch]


def test_restore_lists_the_external_effects_it_does_not_undo_and_their_compensations(workspace):
    sent: list[str] = []
    tools = effect_tools(sent)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=tools, run_id="r") as run:
        run.call("send_email", {"to": "before@x"}, call_id="e0")
        point = run.checkpoint()
        run.call("create_issue", {"title": "x"}, call_id="i1")
        run.call("send_email", {"to": "a@x"}, call_id="e1")
        run.call("fetch", {"url": "u"}, call_id="f1")
        write(run, "a.txt", "agent\n", "w1")
        run.checkpoint()
    restored = tm.restore_session("r", point, tools=tools)
    assert isinstance(restored, Checkpoint) and restored.restored_to == point
    effects = {e.call_id: e for e in restored.not_undone}
    assert set(effects) == {"i1", "e1"}  # not the read, not the file write, not what came before the point
    assert effects["i1"].compensation == "safepoint compensate r i1" and effects["i1"].side_effects == ["network"]
    assert effects["e1"].compensation is None and effects["e1"].side_effects == ["email"]
    assert all("may repeat" in e.repeat for e in effects.values())
    assert tm.compensate("r", "i1", tools=tools) == "closed ISSUE-7"
    shown = safepoint_in_process("restore", "r", "--to", point, "--workspace", workspace)
    assert shown.returncode == 0, shown.stderr
    assert "create_issue(i1)" in shown.stdout and "compensated already" in shown.stdout
    assert "send_email(e1)" in shown.stdout and "Resuming may repeat" in shown.stdout
    data = json.loads(safepoint_in_process("restore", "r", "--to", point, "--json", "--workspace", workspace).stdout)
    assert data["restored_to"] == point and {e["call_id"] for e in data["not_undone"]} == {"i1", "e1"}
    assert next(e for e in data["not_undone"] if e["call_id"] == "i1")["compensated_by"].startswith("safepoint:")


# 7. commit gives the real reason -------------------------------------------------------------------------------------
def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_commit_gives_each_left_out_path_its_real_reason(workspace):
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.name", "Test")
    git(workspace, "config", "user.email", "test@example.com")
    for name in ("dirty.txt", "clean.txt", "edited.txt", "gone.txt", "same.txt"):
        (workspace / name).write_text(f"{name} at HEAD\n")
    (workspace / ".gitignore").write_text(".env\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")
    (workspace / "dirty.txt").write_text("the user's uncommitted work\n")
    (workspace / "untracked.txt").write_text("the user's new file\n")
    (workspace / "nested").mkdir()
    git(workspace / "nested", "init", "-q")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        write(run, "dirty.txt", "the user's uncommitted work\nagent\n", "c1")
        write(run, "clean.txt", "agent's\n", "c2")
        write(run, "edited.txt", "agent's\n", "c3")
        run.call("run_command", {"command": "rm gone.txt untracked.txt"}, call_id="c4")
        write(run, ".env", "SECRET=agent\n", "c5")
        write(run, "same.txt", "changed\n", "c6")
        write(run, "same.txt", "same.txt at HEAD\n", "c7")
        write(run, "nested/x.txt", "inner\n", "c8")
    (workspace / "edited.txt").write_text("agent's\nand the user's\n")
    changes = tm.agent_changes("r")
    assert changes.would_commit == ["clean.txt", "gone.txt"]
    reasons = {r.path: r.reason for r in changes.reasons}
    assert reasons == {
        ".env": "ignored_by_git",
        "dirty.txt": "user_work_before",
        "edited.txt": "changed_since",
        "nested/x.txt": "outside_repository",
        "same.txt": "no_change",
        "untracked.txt": "deleted_user_file",
    }
    assert changes.left_out == [r.path for r in changes.reasons]
    shown = safepoint_in_process("commit", "r", "--workspace", workspace)
    assert "left out dirty.txt: it held your uncommitted work" in shown.stdout
    assert "changed after the agent wrote them" not in shown.stdout
    done = tm.commit("r", "agent work")
    assert done.committed == ["clean.txt", "gone.txt"] and {r.path for r in done.reasons} == set(reasons)
    listed = subprocess.run(
        ["git", "-C", str(workspace), "show", "--name-status", "--format=", "HEAD"], capture_output=True, text=True
    ).stdout.split()
    assert listed == ["M", "clean.txt", "D", "gone.txt"]
    assert (workspace / "dirty.txt").read_text() == "the user's uncommitted work\nagent\n"  # left as it is


def test_commit_with_nothing_of_the_agents_says_why(workspace):
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.name", "Test")
    git(workspace, "config", "user.email", "test@example.com")
    (workspace / "f.txt").write_text("head\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "init")
    (workspace / "f.txt").write_text("user work\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        write(run, "f.txt", "user work\nagent\n", "c1")
    with pytest.raises(safepoint.ResumeError, match="uncommitted work"):
        tm.commit("r")


def test_a_rollback_interrupted_under_the_old_ids_is_finished_and_an_old_compensation_not_repeated(
    workspace, monkeypatch
):
    """A run written before the namespace: its ``rollback_1`` (cut short by a crash) and ``compensate_c0``."""
    import safepoint.engine.actions as actions
    from safepoint.records import ToolCall
    from safepoint.workspace.files import Workspace

    closed: list[str] = []

    def close(ctx: ToolContext, args: dict, result: str) -> str:
        closed.append(result)
        return "closed"

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low", compensator=close)
    def create_issue(ctx: ToolContext, title: str) -> str:
        return "I-1"

    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", tools=[create_issue], run_id="r") as run:
        start = run.checkpoint()
        run.call("create_issue", {"title": "x"}, call_id="c0")
        for index in range(3):
            write(run, f"f{index}.txt", "agent\n", f"c{index + 1}")
    with tm._session("r", [create_issue]) as session:  # what the old code did, under the old ids
        session.registry.put(actions.compensator_tool(session, session.registry.get("create_issue")))
        session.runner.execute(
            ToolCall(call_id="compensate_c0", tool="compensate_create_issue", args={"ledger_entry_id": "c0"}), "step_0"
        )
        plan = actions.plan_files(session, start)
        session.registry.put(actions.rollback_tool(session))
        original = Workspace.restore
        calls: list[str] = []

        def crash(self, rel, data, mode):
            calls.append(rel)
            if len(calls) == 2:
                raise KeyboardInterrupt  # the process dies half-way
            return original(self, rel, data, mode)

        monkeypatch.setattr(Workspace, "restore", crash)
        old_args = {"checkpoint_id": start, "actions": msgspec.to_builtins(plan.actions)}
        with pytest.raises(KeyboardInterrupt):
            session.runner.execute(ToolCall(call_id="rollback_1", tool="rollback_files", args=old_args), "step_0")
        monkeypatch.setattr(Workspace, "restore", original)
    assert closed == ["I-1"]
    assert load_view(tm.store, "r").ledger["rollback_1"].status == "started"
    tm.rollback_files("r", start)  # finishes the old rollback first, then finds nothing left
    assert not any((workspace / f"f{index}.txt").exists() for index in range(3))
    ledger = load_view(tm.store, "r").ledger
    assert ledger["rollback_1"].status == "succeeded" and is_internal(ledger["rollback_1"])
    with pytest.raises(safepoint.ResumeError, match="compensated already by compensate_c0"):
        tm.compensate("r", "c0", tools=[create_issue])
    assert closed == ["I-1"]
