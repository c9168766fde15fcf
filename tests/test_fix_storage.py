"""Fixes of issue 10's storage after the attack (tests/test_attack_i10.py), and cases beside each: forget of a
subagent's run, blobs stored again over damage, label and rollback after gc, what a message may hold."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC

import msgspec
import pytest

import safepoint
from safepoint.core.blobs import stored_form
from safepoint.core.hashing import content_hash
from safepoint.errors import ExitCode, SafepointError
from safepoint.lifecycle import forget, gc
from safepoint.records import ToolCall

from .conftest import safepoint_in_process
from .test_protocol import Cli

NOTIFY = {"tool": "send_notification", "args": {"to": "#ops", "message": "deploy"}}


def _text(seed: int, lines: int = 2000) -> str:
    return "".join(f"{seed}.{i} {(seed * 7919 + i) * 104729:x}\n" for i in range(lines))


@pytest.fixture
def tm(tmp_path, workspace):
    opened = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    yield opened
    opened.close()


def _crashed_parent(tmp_path) -> Cli:
    cli = Cli(tmp_path)
    child = {"task": "notify", "turns": [{"tool_calls": [NOTIFY]}, {"text": "sent"}]}
    spawn = {"tool": "spawn_subagent", "args": {"task": "notify", "scenario": child}}
    sc = tmp_path / "sc.json"
    sc.write_text(json.dumps({"task": "t", "turns": [{"tool_calls": [spawn]}, {"text": "done"}]}))
    crashed = cli("run", str(sc), "--run-id", "p", SAFEPOINT_FAILPOINT="after_tool:send_notification")
    assert crashed.returncode == -signal.SIGKILL and cli.sent() == 1
    return cli


def test_forget_of_a_subagent_its_parent_answers_for_is_refused_in_one_line_and_forced_is_never_spawned_again(
    tmp_path,
):
    """Without --force: refused in one line naming the parent, exit LOCKED, the run still there. With --force the
    run goes, and the parent's resume takes its spawn call as unknown (a failed call carrying the self-healing
    prompt), never spawning the subagent afresh: the notification is sent once."""
    cli = _crashed_parent(tmp_path)
    refused = cli("forget", "p.call_1")
    assert refused.returncode == ExitCode.LOCKED, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "'p'" in refused.stderr and "--force" in refused.stderr
    assert "p.call_1" in cli.store().list_runs()
    forced = cli("forget", "p.call_1", "--force")
    assert forced.returncode == 0, forced.stderr
    cli("resume", "p")
    assert cli.sent() == 1
    assert "p.call_1" not in cli.store().list_runs()  # not spawned again under its id either
    reader = safepoint.open(cli.url, workspace=str(cli.workspace))
    try:
        [spawn] = reader.ledger("p")
    finally:
        reader.close()
    assert spawn.status == "failed" and "forgotten" in str(spawn.error), spawn


def test_forget_of_a_finished_parents_subagent_is_allowed(tm):
    """A parent that finished answers for nothing any more: its subagent's run is forgotten without --force."""
    with tm.start("t", run_id="p") as run:
        run.step()
        run.finish("completed")
    with tm.start("t", run_id="lone") as run:  # no parent at all: forgotten as before
        run.step()
        run.finish("completed")
    assert forget(tm.store, "lone").run_id == "lone"
    assert "lone" not in tm.list_runs()


@pytest.mark.parametrize("damage", ["flipped", "zeroed", "other_blob"])
def test_put_blobs_rewrites_bytes_that_are_not_the_content_and_keeps_those_that_are(tmp_path, damage):
    """The length is not the content: flipped bits, a zeroed page, another blob's bytes of the same length are all
    rewritten whole by the next put; a good blob is kept (not rewritten: its inode stays)."""
    opened = safepoint.open(str(tmp_path / "store"), workspace=str(tmp_path))
    try:
        store = opened.store
        data = stored_form(_text(1).encode())[1]
        name = store.blob_name(content_hash(_text(1).encode()))
        store.put_blobs([(name, data)])
        path = store._blob_path(name)
        inode = os.stat(path).st_ino
        store.put_blobs([(name, data)])
        assert os.stat(path).st_ino == inode  # kept as it was
        bad = {
            "flipped": bytes(b ^ 0x01 for b in data),
            "zeroed": bytes(len(data)),
            "other_blob": (stored_form(_text(2).encode())[1] * 2)[: len(data)],
        }[damage]
        with open(path, "wb") as handle:
            handle.write(bad)
        store.put_blobs([(name, data)])
        assert store.get_blob(name) == data
        assert not [entry for entry in os.listdir(os.path.dirname(path)) if entry.startswith(".tmp-")]
    finally:
        opened.close()


def test_label_of_a_freed_checkpoint_is_refused_by_the_cli_in_one_line(tm, workspace, tmp_path):
    (workspace / "big.txt").write_text(_text(10))
    with tm.start("t", run_id="r") as run:
        for number in range(5):
            run.step()
            run.call("write_file", {"path": "big.txt", "content": _text(11 + number)}, call_id=f"c{number}")
            run.checkpoint()
        run.finish("completed")
    assert gc(tm.store, keep=1).freed_blobs > 0
    done = safepoint_in_process("label", "r", "step:1", "x", "--store", str(tmp_path / "store"), "-w", str(workspace))
    assert done.returncode == ExitCode.USAGE and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "gc" in done.stderr
    assert safepoint.lifecycle.labels(tm.store, "r") == {}
    later = safepoint_in_process("label", "r", "step:5", "x", "--store", str(tmp_path / "store"), "-w", str(workspace))
    assert later.returncode == 0, later.stderr  # a kept one still labels


@pytest.mark.parametrize(
    "args",
    [
        {"limit": float("-inf")},
        {"filters": [{"min": float("nan")}]},  # nested
        {"path": "cut \udc80 here"},  # a lone surrogate in an argument
    ],
)
def test_a_call_the_log_cannot_keep_as_written_is_refused_in_one_line_and_the_run_goes_on(tm, args):
    """Refused when recorded, naming what cannot be kept, before anything is staged: the run records the next
    message and finishes, and its history holds no trace of the refused one."""
    calls = [ToolCall(call_id="c9", tool="list_files", args=args)]
    with tm.start("t", run_id="r") as run:
        run.step()
        with pytest.raises(SafepointError) as refused:
            run.add_message("assistant", "listing " * 30, tool_calls=calls)
        assert len(str(refused.value).splitlines()) == 1
        assert refused.value.exit_code == ExitCode.USAGE
        run.add_message("assistant", "fine " * 30)
        run.finish("completed")
    said = [m.content for m in tm.history("r").current if m.role == "assistant"]
    assert said == ["fine " * 30]


def test_a_short_message_with_a_lone_surrogate_is_refused_too(tm):
    """Below the codec's packing size the message is written as plain JSON: the same refusal, not a traceback."""
    with tm.start("t", run_id="r") as run:
        run.step()
        with pytest.raises(SafepointError, match="surrogate"):
            run.add_message("assistant", "\ud83d")
        run.finish("completed")
    assert tm.history("r").current == [] or all(m.content != "\ud83d" for m in tm.history("r").current)


def test_a_forgotten_occurrence_stays_fired_for_the_daemon_and_fire_and_a_replaced_job(tm, workspace):
    """Fired, then its run forgotten: the job's definition keeps the occurrence as fired, so `due` (what the
    daemon asks, with the runs left in the store) finds nothing due, a `schedule fire` of it is refused as fired,
    and `schedule add --replace` of the job keeps it fired."""
    from datetime import datetime

    from safepoint.errors import RunExistsError
    from safepoint.supervisor import schedule

    ten = int(datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp() * 1000)
    job = schedule.put_job(
        tm.store,
        schedule.ScheduledJob(
            job_id="hourly",
            cron="0 * * * *",
            workspace=str(workspace),
            created_at_ms=ten - 86_400_000,
            updated_at_ms=ten,
            scenario={"task": "t", "turns": [{"text": "done"}]},
        ),
    )
    run_id, status = schedule.fire(tm.store, tm.workspace, tm.registry(), job, ten)
    assert status == "completed"
    at = ten + 5 * 60_000
    forget(tm.store, run_id)
    assert run_id not in tm.list_runs()
    kept = schedule.get_job(tm.store, "hourly")
    assert kept.fired_through_ms == ten
    assert schedule.due(kept, schedule.last_fired("hourly", tm.list_runs()), at) == []
    with pytest.raises(RunExistsError):
        schedule.fire(tm.store, tm.workspace, tm.registry(), kept, ten)
    replaced = schedule.put_job(tm.store, msgspec.structs.replace(job, cron="0 * * * *"), replace=True)
    assert schedule.due(replaced, None, at) == []
    assert schedule.due(replaced, None, ten + 3_600_000) == [ten + 3_600_000]  # the next one is due as ever


def test_gc_keeps_what_it_meant_to_free_of_a_run_claimed_after_it_read_it(tm, workspace, monkeypatch):
    """The other order of the rollback race: gc reads the finished run (nobody owns it), a rollback claims it and
    finds its checkpoint kept (gc's record is not posted yet), then gc posts its record and removes. gc checks the
    owners again under the blobs' lock: a run claimed since keeps its versions, and the rollback reads them whole."""
    from safepoint.engine import failpoints
    from safepoint.engine.session import holder_id

    (workspace / "big.txt").write_text(_text(70))
    after = []
    with tm.start("t", run_id="r") as run:
        for number in range(4):
            run.step()
            run.call("write_file", {"path": "big.txt", "content": _text(71 + number)}, call_id=f"c{number}")
            after.append(run.checkpoint())
        run.finish("completed")
    claimed = []
    real = failpoints.hit

    def claim_meanwhile(name, *args, **kwargs):
        if name == "gc_recorded" and not claimed:
            claimed.append(tm.store.claim("r", holder_id()))  # the rollback's claim, at the worst moment
        return real(name, *args, **kwargs)

    monkeypatch.setattr(failpoints, "hit", claim_meanwhile)
    before = set(tm.store.list_blobs())
    done = gc(tm.store, keep=1)
    assert claimed and done.freed_blobs == 0 and set(tm.store.list_blobs()) == before
    tm.store.release(claimed[0])
    monkeypatch.setattr(failpoints, "hit", real)
    assert gc(tm.store, keep=1).freed_blobs > 0  # unowned again: freed by the next gc
