"""Findings of the review of gcattack, snapoff and ux (review6): each a test that fails on the code reviewed."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from safepoint.errors import ExitCode

from .conftest import cli_env, safepoint_in_process
from .test_suggest_cut_short import killed_in


def _version(n: int) -> str:
    return "".join(f"v{n} line {i} {i * n * 7919 % 10007}\n" for i in range(3000))


def test_gc_keeps_what_a_rollback_cut_short_on_a_finished_run_needs_so_its_named_fix_still_works(tmp_path, monkeypatch):
    """ux names `safepoint rollback RUN --to CKPT` as the fix of a rollback a crash cut short on a finished run;
    gcattack's gc treats that finished run as any other and frees the checkpoint the fix rolls back to."""
    ws = tmp_path / "ws"
    ws.mkdir()
    turns = [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.py", "content": _version(n)}}]} for n in range(5)
    ]
    (tmp_path / "s.json").write_text(json.dumps({"task": "t", "turns": [*turns, {"text": "ok"}]}))

    def cli(*args: str):
        return safepoint_in_process(*args, "-w", str(ws), env=cli_env())

    assert cli("run", str(tmp_path / "s.json"), "--run-id", "r1").returncode == ExitCode.OK

    killed_in(monkeypatch, "after_started", "rollback_files", lambda: cli("rollback", "r1", "--to", "step:1"))
    assert (ws / "a.py").read_text() == _version(4)  # nothing reverted yet
    collected = cli("gc", "--keep", "1")
    assert collected.returncode == ExitCode.OK, collected.stderr
    [run] = json.loads(cli("gc", "--keep", "1", "--json").stdout)["runs"]
    assert run["kept_whole"] and "safepoint rollback r1 --to ckpt_" in run["why_whole"], run
    [cut] = json.loads(cli("explain", "r1", "--json").stdout)["cut_short"]
    followed = cli(*shlex.split(cut["fix"])[1:])  # literally, as the message says
    assert followed.returncode == ExitCode.OK, (cut["fix"], collected.stdout, followed.stdout, followed.stderr)
    assert (ws / "a.py").read_text() == _version(0)


HOSTILE_CALL_IDS = ["call_1; touch pwned", "-c1", "call $(id)"]  # a model server chooses the call id


def _parsed(command: str) -> dict[str, object]:
    """The parameters the CLI's own parser gives ``command`` (a shell's words), or the refusal raised."""
    import typer.main

    from safepoint.cli.app import app

    argv = shlex.split(command)
    assert argv[0] == "safepoint"
    group = typer.main.get_command(app)
    sub = group.commands[argv[1]]  # type: ignore[attr-defined]
    return dict(sub.make_context(argv[1], argv[2:]).params)


def _wait(call_id: str):
    from safepoint.core.progress import ApprovalWait
    from safepoint.core.redact import Redactor
    from safepoint.engine.progress import Progress

    events = []
    progress = Progress("r1", Redactor(), lambda *a, **k: None)
    progress.observers.append(events.append)
    progress.approval_wait(call_id, "shell", {"command": "make deploy"}, "high")
    progress.status("waiting_approval", "")
    [event] = [e for e in events if isinstance(e, ApprovalWait)]
    return event


@pytest.mark.parametrize("call_id", HOSTILE_CALL_IDS)
def test_the_printed_approve_and_deny_commands_name_the_model_s_call_id_as_one_argument(call_id):
    """`safepoint run` prints the commands that answer an approval wait; the call id is the model server's own
    string, pasted into a shell by a person: a `;` in it ran a second command, a leading `-` was an option."""
    import io

    from safepoint.cli.progress import Printer

    stream = io.StringIO()
    Printer(as_json=False, where=" -w '/my ws'", stream=stream)(_wait(call_id))
    lines = {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in stream.getvalue().splitlines()[1:]
    }
    for verb in ("approve", "deny"):
        params = _parsed(lines[verb])
        assert (params["run_id"], params["call_id"], params["workspace"]) == ("r1", call_id, "/my ws"), lines[verb]


@pytest.mark.parametrize("call_id", HOSTILE_CALL_IDS[:1])
def test_the_approval_wait_event_s_commands_take_the_call_id_as_one_argument(call_id):
    event = _wait(call_id)
    assert _parsed(event.approve)["call_id"] == call_id


@pytest.mark.parametrize("call_id", HOSTILE_CALL_IDS)
def test_a_session_that_cannot_wait_names_the_approve_command_with_the_call_id_as_one_argument(call_id):
    from safepoint.engine.decision_choices import cannot_wait
    from safepoint.records import ToolCall

    said = cannot_wait("r1", ToolCall(call_id=call_id, tool="shell", args={}))
    [command] = re.findall(r"`(safepoint approve [^`]*)`", said)
    assert (_parsed(command)["run_id"], _parsed(command)["call_id"]) == ("r1", call_id), said


@pytest.mark.parametrize("call_id", HOSTILE_CALL_IDS)
def test_the_decision_line_s_flags_take_the_call_id_as_one_word(call_id):
    from safepoint.engine.decision_choices import waiting

    said = waiting("r1", [("shell", call_id, "")])
    flags = said.split("resume with ", 1)[1].split(" to run it again or ")
    assert _parsed(f"safepoint resume r1 {flags[0]} {flags[1].removesuffix(' to leave it')}")["replay"] == (call_id,)


@pytest.mark.parametrize("call_id", HOSTILE_CALL_IDS)
def test_approvals_lists_commands_that_take_the_call_id_as_one_argument(call_id, tmp_path, monkeypatch):
    """`safepoint approvals` printed review.py's commands, built unquoted, as they were."""
    from safepoint.api import Safepoint
    from safepoint.review import PendingApproval

    def pending(self, run_id=None):
        return [
            PendingApproval(
                run_id="r1",
                call_id=call_id,
                tool="shell",
                risk_level="high",
                target="make deploy",
                waiting_since="2026-01-01T00:00:00Z",
                seconds_left=60.0,
                attended=True,
                approve=f"safepoint approve r1 {call_id}",
                deny=f"safepoint deny r1 {call_id}",
            )
        ]

    monkeypatch.setattr(Safepoint, "approvals", pending)
    ws = tmp_path / "my ws"
    ws.mkdir()
    listed = safepoint_in_process("approvals", "-w", str(ws), env=cli_env())
    assert listed.returncode == ExitCode.OK, listed.stderr
    lines = dict(line.strip().split(": ", 1) for line in listed.stdout.splitlines()[1:])
    for verb in ("approve", "deny"):
        params = _parsed(lines[verb])
        assert (params["run_id"], params["call_id"], params["workspace"]) == ("r1", call_id, str(ws)), lines[verb]


def test_a_gc_that_cannot_record_one_run_frees_what_the_others_records_say_and_nothing_of_that_one(
    tmp_path, workspace, monkeypatch
):
    """gc posts each run's record of what it frees, then frees; when run b's record cannot be written (a full disk)
    b's blobs stay. Run a's record was posted already: before, nothing at all was freed and a's record said its
    checkpoints were freed while everything was there (a label refused, "what it needs was freed"). Now what the
    records say is what the store holds: a's freed, b's kept, fsck clean."""
    import random

    import safepoint
    from safepoint.core.retention import lifecycle_records
    from safepoint.errors import DiskFullError, UnknownReferenceError
    from safepoint.lifecycle import gc, label
    from safepoint.store.fsck import fsck

    def text(seed: int) -> str:
        rng = random.Random(seed)
        return "".join(f"{seed}.{i} {rng.getrandbits(64):x}\n" for i in range(2000))

    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    try:
        firsts = {}
        for base, (run_id, path) in enumerate((("a", "a.txt"), ("b", "b.txt"))):
            (workspace / path).write_text(text(100 + base))
            with tm.start("t", run_id=run_id) as run:
                for number in range(3):
                    run.step()
                    run.call("write_file", {"path": path, "content": text(number + 10 * base)}, call_id=f"c{number}")
                    firsts.setdefault(run_id, run.checkpoint())
                run.finish("completed")
        real = type(tm.store).post_control

        def full(self, run_id, data, **kwargs):
            if b"gc_pruned" in data and run_id == "b":
                raise DiskFullError(f"no space left on the disk of store {self.url}; free space")
            return real(self, run_id, data, **kwargs)

        monkeypatch.setattr(type(tm.store), "post_control", full)
        done = gc(tm.store, keep=0)
        monkeypatch.undo()
        assert "no space left" in done.refused
        after = set(tm.store.list_blobs())
        said = {run_id: lifecycle_records(tm.store.read_control(run_id))[1] for run_id in ("a", "b")}
        assert said["a"] and not said["b"]
        assert not {tm.store.blob_name(digest) for digest in said["a"]} & after  # freed as its record says
        runs = {run.run_id: run for run in done.runs}
        assert runs["b"].freed_blobs == 0 and runs["a"].freed_blobs == len(said["a"])
        assert fsck(tm.store, None, repair=False).clean
        label(tm.store, "b", firsts["b"], "keep me")  # nothing of b was freed: it can still be kept
        with pytest.raises(UnknownReferenceError, match="was not kept"):
            label(tm.store, "a", firsts["a"], "keep me")  # truthfully: its versions are gone
    finally:
        tm.close()
