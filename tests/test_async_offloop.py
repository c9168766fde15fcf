"""Async for real (issue 12 §5): an ``acall`` never does its bookkeeping on the event loop's thread.

The structure is asserted, not the time: a profiler set on the loop's thread only (``sys.setprofile`` is per
thread) records every call into the parts that hash, diff, capture, write records, fsync or talk to PostgreSQL,
while many ``acall``s of every kind of tool run at once on one loop, and ``astep``/``acheckpoint`` with them. The
same profiler around a synchronous call on that thread must see them (the instrument can tell). Cancellation:
the ledger says what happened, durably, whichever moment the task is cancelled at.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from types import FrameType
from typing import Any

import pytest

import safepoint
from safepoint import ToolContext
from safepoint.engine.call_runner import CANCELLED_BEFORE_RUN
from safepoint.engine.session import load_view

# What must never run on the loop's thread: everything that hashes, diffs, captures, writes or reads the store.
BLOCKING_MODULES = (
    "safepoint.store",
    "safepoint.workspace",
    "safepoint.durable",
    "safepoint.engine.log_writer",
    "safepoint.engine.file_changes",
    "safepoint.engine.command_capture",
    "safepoint.engine.content",
    "safepoint.engine.session",
    "safepoint.engine.ledger_machine",
    "safepoint.core.hashing",
    "safepoint.core.patches",
    "safepoint.core.unified_diff",
    "psycopg",
)
BLOCKING_BUILTINS = {"fsync", "fdatasync"}


class LoopWatch:
    """Records, on the thread that starts it, every call into ``BLOCKING_MODULES`` and every fsync."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith(BLOCKING_MODULES):
                key = f"{module}.{frame.f_code.co_name}"
                self.seen[key] = self.seen.get(key, 0) + 1
        elif event == "c_call" and getattr(arg, "__name__", "") in BLOCKING_BUILTINS:
            self.seen["os." + arg.__name__] = self.seen.get("os." + arg.__name__, 0) + 1

    def __enter__(self) -> LoopWatch:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


LINES = 4000


def _big(tag: str) -> str:
    return "".join(f"line {i} of a generated file {tag}\n" for i in range(LINES))


def _patch_for(path: str) -> str:
    hunk = "@@ -1,2 +1,2 @@\n-line 0 of a generated file base\n+line 0 changed\n line 1 of a generated file base\n"
    return f"--- a/{path}\n+++ b/{path}\n{hunk}"


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
async def remember(ctx: ToolContext, n: int) -> int:
    await asyncio.sleep(0)
    return n


@safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
def blocking(ctx: ToolContext, n: int) -> int:
    return n * 2


async def _many_calls(run: safepoint.Run, rounds: int) -> list[Any]:
    """Every kind of call at once on one loop: large file writes, patches, commands, async and blocking tools."""
    jobs = []
    for i in range(rounds):
        jobs += [
            run.acall("write_file", {"path": f"big{i}.txt", "content": _big(str(i))}, call_id=f"w{i}"),
            run.acall("apply_patch", {"patch": _patch_for(f"base{i}.txt")}, call_id=f"p{i}"),
            run.acall("run_command", {"command": f"echo {i} > out{i}.txt"}, call_id=f"c{i}"),
            run.acall("remember", {"n": i}, call_id=f"r{i}"),
            run.acall("blocking", {"n": i}, call_id=f"b{i}"),
        ]
    return await asyncio.gather(*jobs)


def _prepare(workspace, rounds: int) -> None:
    for i in range(rounds):
        (workspace / f"base{i}.txt").write_text(_big("base"))


def _no_bookkeeping_on_the_loop(url: str, workspace) -> None:
    rounds = 4
    _prepare(workspace, rounds)
    tm = safepoint.open(url, workspace=str(workspace))
    with tm.start("t", tools=[remember, blocking], run_id="r") as run:

        async def scenario() -> tuple[LoopWatch, list[Any], int]:
            with LoopWatch() as watch:
                assert await run.astep() == 1
                results = await _many_calls(run, rounds)
                await run.aadd_message("assistant", "done")
                await run.acheckpoint()
                loop_thread = threading.get_ident()
            return watch, results, loop_thread

        watch, results, _ = asyncio.run(scenario())
        assert watch.seen == {}, f"bookkeeping ran on the event loop's thread: {sorted(watch.seen)}"
        assert results[3::5] == list(range(rounds)) and results[4::5] == [2 * i for i in range(rounds)]
        # The instrument can tell: the same calls made synchronously on this thread are seen.
        with LoopWatch() as sync_watch:
            run.call("write_file", {"path": "sync.txt", "content": _big("sync")}, call_id="sync")
        assert any(k.startswith("safepoint.store") for k in sync_watch.seen) and "os.fsync" in str(sync_watch.seen)
    view = load_view(tm.store, "r")
    statuses = {e.call_id: e.status for e in view.ledger.values()}
    assert len(statuses) == 5 * rounds + 1 and set(statuses.values()) == {"succeeded"}
    assert (workspace / "big3.txt").read_text() == _big("3") and (workspace / "out2.txt").read_text() == "2\n"
    assert (workspace / "base1.txt").read_text().startswith("line 0 changed\n")
    patched = {p.path for p in view.patches}
    assert {"big0.txt", "base0.txt", "out0.txt"} <= patched  # each call's changes are its own, as before


def test_no_bookkeeping_on_the_loop_file_store(workspace, tmp_path):
    _no_bookkeeping_on_the_loop(f"file:{tmp_path}/store", workspace)


def test_no_bookkeeping_on_the_loop_postgres(workspace, fresh_url):
    _no_bookkeeping_on_the_loop(fresh_url, workspace)


def test_fsync_never_on_the_loop_thread_under_many_calls(workspace, tmp_path, monkeypatch):
    """The same promise seen from the disk's side: every fsync of a burst of 60 concurrent calls is on a thread
    other than the loop's (recorded by a patched ``os.fsync``/``os.fdatasync``, whoever calls them)."""
    threads: list[int] = []
    recording = threading.Event()  # only while the loop runs (opening the run fsyncs on this same thread)
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        if recording.is_set():
            threads.append(threading.get_ident())
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        if recording.is_set():
            threads.append(threading.get_ident())
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[remember, blocking], run_id="r") as run:

        async def burst() -> int:
            recording.set()
            await asyncio.gather(*(run.acall("remember", {"n": i}, call_id=f"m{i}") for i in range(30)))
            await asyncio.gather(*(run.acall("blocking", {"n": i}, call_id=f"k{i}") for i in range(30)))
            await run.acheckpoint()
            recording.clear()
            return threading.get_ident()

        loop_thread = asyncio.run(burst())
        assert len(threads) >= 60  # every call's `started` and outcome were made durable
        assert loop_thread not in threads
    assert all(e.status == "succeeded" for e in load_view(tm.store, "r").ledger.values())


# cancellation ---------------------------------------------------------------------------------------------------
def _status(tm: safepoint.Safepoint, call_id: str) -> str | None:
    entry = load_view(tm.store, "r").ledger.get(call_id)
    return None if entry is None else entry.status


def test_cancelled_while_an_async_tool_runs_is_uncertain_durably_and_never_rerun(workspace, tmp_path):
    ran: list[str] = []
    started: list[asyncio.Event] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    async def pay(ctx: ToolContext, amount: int) -> str:
        ran.append("pay")
        started[0].set()
        await asyncio.sleep(3600)
        return "paid"

    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[pay], run_id="r") as run:

        async def scenario() -> None:
            started.append(asyncio.Event())
            task = asyncio.create_task(run.acall("pay", {"amount": 5}, call_id="pay1"))
            await started[0].wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        assert _status(tm, "pay1") == "uncertain"  # durable at once: read back from the store, the run still open
    assert ran == ["pay"]
    with tm.resume("r", tools=[pay]) as resumed:
        result = asyncio.run(resumed.acall_result("pay", {"amount": 5}, call_id="pay1"))
    assert result.status == "uncertain" and ran == ["pay"]  # never run again, and the model is told


def test_cancelled_during_the_started_commit_fails_the_call_without_running_it(workspace, tmp_path):
    """Cancelled while the bookkeeping thread writes `started`: the write finishes (a group commit is never cut),
    the tool never runs, and the ledger says so (failed, not run) instead of leaving a call that looks in flight."""
    ran: list[str] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    async def pay(ctx: ToolContext, amount: int) -> str:
        ran.append("pay")
        return "paid"

    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[pay], run_id="r") as run:
        log = run.session.runner.log
        real_commit = log.commit
        inside, release = threading.Event(), threading.Event()

        def slow_commit(*args: Any, **kwargs: Any) -> Any:
            if not inside.is_set():
                inside.set()
                release.wait(30)
            return real_commit(*args, **kwargs)

        log.commit = slow_commit  # type: ignore[method-assign]  # a test double of the one commit to hold

        async def scenario() -> None:
            task = asyncio.create_task(run.acall("pay", {"amount": 5}, call_id="pay1"))
            await asyncio.to_thread(inside.wait, 30)
            task.cancel()
            await asyncio.sleep(0.05)
            assert not task.done()  # it waits for the commit in progress: the ledger is never half written
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        log.commit = real_commit  # type: ignore[method-assign]
    assert ran == []
    entry = load_view(tm.store, "r").ledger["pay1"]
    assert entry.status == "failed" and entry.error == CANCELLED_BEFORE_RUN


def test_cancelled_while_a_blocking_tool_runs_keeps_its_outcome(workspace, tmp_path):
    """A blocking tool runs on a thread that cannot be stopped: the cancellation waits for it, its outcome is
    recorded (it happened: never lost, never uncertain), then the task is cancelled."""
    ran: list[str] = []
    inside, release = threading.Event(), threading.Event()

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    def send(ctx: ToolContext, to: str) -> str:
        inside.set()
        release.wait(30)
        ran.append(to)
        return "sent"

    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[send], run_id="r") as run:

        async def scenario() -> None:
            task = asyncio.create_task(run.acall("send", {"to": "bob"}, call_id="s1"))
            await asyncio.to_thread(inside.wait, 30)
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
    assert ran == ["bob"]
    assert _status(tm, "s1") == "succeeded"
    with tm.resume("r", tools=[send]) as resumed:
        assert resumed.call("send", {"to": "bob"}, call_id="s1") == "sent" and ran == ["bob"]


def test_cancelling_many_calls_at_random_moments_loses_none(workspace, tmp_path):
    """Half of 40 concurrent calls cancelled at different moments: each one the ledger knows is settled
    (succeeded, failed or uncertain), none is left `started` or `planned`, and what ran is what it says."""
    ran: list[str] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="low")
    async def effect(ctx: ToolContext, n: int) -> int:
        for _ in range(n % 4):
            await asyncio.sleep(0)
        ran.append(f"e{n}")
        return n

    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[effect, blocking], run_id="r") as run:

        async def scenario() -> None:
            tasks = [asyncio.create_task(run.acall("effect", {"n": n}, call_id=f"e{n}")) for n in range(40)]
            for n, task in enumerate(tasks):
                if n % 2:
                    for _ in range(n % 7):
                        await asyncio.sleep(0)
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(scenario())
    ledger = load_view(tm.store, "r").ledger
    assert {e.status for e in ledger.values()} <= {"succeeded", "failed", "uncertain"}
    assert {f"e{n}" for n in range(0, 40, 2)} <= set(ledger)  # the calls nobody cancelled all finished
    for call_id, entry in ledger.items():
        if entry.status == "succeeded":
            assert call_id in ran
        elif entry.status == "failed":
            assert entry.error == CANCELLED_BEFORE_RUN and call_id not in ran
    assert set(ran) <= set(ledger)  # nothing ran that the ledger does not know of


def test_astep_and_acheckpoint_are_durable_on_return(workspace, tmp_path):
    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))

    async def scenario() -> str:
        async with tm.start("t", run_id="r") as run:
            assert await run.astep() == 1
            await run.aadd_message("user", "hello")
            checkpoint_id = await run.acheckpoint()
            view = load_view(tm.store, "r")  # read back while the run is open: durable already
            assert view.checkpoint(checkpoint_id) is not None
            assert view.history[-1].content == "hello"
            await run.afinish("completed")
        return checkpoint_id

    asyncio.run(scenario())
    assert load_view(tm.store, "r").status == "completed"


def test_cancelled_while_waiting_for_approval_stays_planned_and_asks_again(workspace, tmp_path):
    """Cancelled while a person has not answered yet: the call never started (the ledger keeps it `planned`,
    durably), and the approval a person gives afterwards lets the next session run it, once."""
    ran: list[str] = []

    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", needs_approval=True)
    async def deploy(ctx: ToolContext, env: str) -> str:
        ran.append(env)
        return "deployed"

    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    with tm.start("t", tools=[deploy], run_id="r", approval_timeout_s=1) as run:

        async def scenario() -> None:
            task = asyncio.create_task(run.acall("deploy", {"env": "prod"}, call_id="d1"))
            while _status(tm, "d1") is None:  # the planned entry is durable before the wait begins
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        assert _status(tm, "d1") == "planned"
    assert ran == []
    tm.approve("r", "d1")  # a person answers the question the cancelled wait asked; the next session acts on it
    with tm.resume("r", tools=[deploy]) as resumed:
        result = asyncio.run(resumed.acall_result("deploy", {"env": "prod"}, call_id="d1"))
    assert result.status == "succeeded" and ran == ["prod"], result  # run once, after the approval


@pytest.fixture(params=["file", "postgres"])
def store_url(request, tmp_path):
    if request.param == "file":
        return f"file:{tmp_path}/store"
    return request.getfixturevalue("fresh_url")


def _deploy(ran: list[str]) -> Any:
    @safepoint.tool(idempotency="non_idempotent", replay_policy="never", risk_level="high", needs_approval=True)
    async def deploy(ctx: ToolContext, env: str) -> str:
        ran.append(env)
        return "deployed"

    return deploy


def _watch_the_wait(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], threading.Event]:
    """Counts the wait's reads of the control channel; ``ended`` is set when the wait's function has returned."""
    from safepoint.engine.call_runner import CallRunner
    from safepoint.restart import approvals

    reads: list[int] = []
    ended = threading.Event()
    real_controls, real_wait = approvals.controls, CallRunner._wait

    def controls(store: Any, run_id: str) -> Any:
        reads.append(1)
        return real_controls(store, run_id)

    def wait(self: CallRunner, request: Any) -> Any:
        ended.clear()
        try:
            return real_wait(self, request)
        finally:
            ended.set()

    monkeypatch.setattr(approvals, "controls", controls)
    monkeypatch.setattr(CallRunner, "_wait", wait)
    return reads, ended


def test_a_cancelled_approval_wait_has_stopped_when_the_cancellation_returns(store_url, workspace, monkeypatch):
    """The wait runs on a thread: cancelled, it must stop reading before the cancellation returns, or it takes
    (marks seen) the approval a person posts afterwards for a call nobody runs, and the next session never sees
    it. Its timeout is long: only the stop ends it."""
    ran: list[str] = []
    reads, ended = _watch_the_wait(monkeypatch)
    tm = safepoint.open(store_url, workspace=str(workspace))
    with tm.start("t", tools=[_deploy(ran)], run_id="r", approval_timeout_s=30) as run:

        async def scenario() -> None:
            task = asyncio.create_task(run.acall("deploy", {"env": "prod"}, call_id="d1"))
            while len(reads) < 2:  # the wait is polling the channel
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert ended.is_set()  # no thread reads on: nothing can take the approval posted next

        asyncio.run(scenario())
        tm.approve("r", "d1")
        assert _status(tm, "d1") == "planned"
    with tm.resume("r", tools=[_deploy(ran)]) as resumed:
        result = asyncio.run(resumed.acall_result("deploy", {"env": "prod"}, call_id="d1"))
    assert result.status == "succeeded" and ran == ["prod"]
    tm.close()


def test_an_approval_taken_as_the_cancellation_comes_is_the_calls_durably(store_url, workspace, monkeypatch):
    """The interleaving forced: the wait takes the person's approval (marks it seen) and the task is cancelled
    before the call goes on. The approval is not lost: the ledger says ``approved`` durably and the next session
    runs the call once without asking again."""
    from safepoint.restart import approvals

    ran: list[str] = []
    reads, _ = _watch_the_wait(monkeypatch)
    tm = safepoint.open(store_url, workspace=str(workspace))
    with tm.start("t", tools=[_deploy(ran)], run_id="r", approval_timeout_s=30) as run:

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(run.acall("deploy", {"env": "prod"}, call_id="d1"))
            real_mark = approvals.mark_seen

            def mark_seen(*args: Any) -> Any:
                monkeypatch.setattr(approvals, "mark_seen", real_mark)  # this wait's decision only
                # Queued on the loop before the wait's answer is: the task sees the cancellation first.
                loop.call_soon_threadsafe(task.cancel)
                return real_mark(*args)

            monkeypatch.setattr(approvals, "mark_seen", mark_seen)
            while len(reads) < 2:
                await asyncio.sleep(0.01)
            await asyncio.to_thread(tm.approve, "r", "d1")
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        assert _status(tm, "d1") == "approved" and ran == []
    with tm.resume("r", tools=[_deploy(ran)]) as resumed:
        result = asyncio.run(resumed.acall_result("deploy", {"env": "prod"}, call_id="d1"))
    assert result.status == "succeeded" and ran == ["prod"]
    tm.close()


def test_cancelled_before_the_wait_began_an_approval_posted_afterwards_still_counts(store_url, workspace, monkeypatch):
    """The interleaving forced: the task is cancelled while the call's first bookkeeping piece (which makes
    ``planned`` durable) runs, so the wait never began in this session. The wait is begun and stopped all the
    same: its line is durable, and the approval a person posts before the resume is a person's (the next session
    began its wait after it: without the recorded line it judged the approval tampering and timed out)."""
    from safepoint.engine import call_runner

    ran: list[str] = []
    tm = safepoint.open(store_url, workspace=str(workspace))
    with tm.start("t", tools=[_deploy(ran)], run_id="r", approval_timeout_s=30) as run:

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.create_task(run.acall("deploy", {"env": "prod"}, call_id="d1"))
            real = call_runner.needs_approval

            def needs_approval(*args: Any) -> bool:
                monkeypatch.setattr(call_runner, "needs_approval", real)  # this call's piece only
                loop.call_soon_threadsafe(task.cancel)  # comes while the piece still runs
                return real(*args)

            monkeypatch.setattr(call_runner, "needs_approval", needs_approval)
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(scenario())
        assert _status(tm, "d1") == "planned"
    tm.approve("r", "d1")
    with tm.resume("r", tools=[_deploy(ran)]) as resumed:
        result = asyncio.run(resumed.acall_result("deploy", {"env": "prod"}, call_id="d1"))
    assert result.status == "succeeded" and ran == ["prod"], result
    tm.close()


def test_a_close_under_the_runs_lock_never_waits_for_a_piece_queued_behind_it(workspace, tmp_path):
    """`Run.close` closes the session inside the run's lock; a piece already queued on the bookkeeping thread waits
    for that lock. Waiting there for the thread to end was a deadlock (the close waited for the piece, the piece for
    the close's lock): the thread is told to end under the lock and waited for once the lock is let go."""
    tm = safepoint.open(f"file:{tmp_path}/store", workspace=str(workspace))
    run = tm.start("t", run_id="r")
    keeper = run.session.runner.bookkeeper
    queued = threading.Event()
    ran: list[str] = []

    def piece() -> None:
        ran.append("piece")

    def submit() -> None:
        async def go() -> None:
            task = asyncio.ensure_future(keeper.arun(piece))
            await asyncio.sleep(0)  # the piece is on the bookkeeping thread's queue, behind the lock
            queued.set()
            await task

        asyncio.run(go())

    with keeper.lock:  # as Run.close holds it while the session closes
        submitter = threading.Thread(target=submit)
        submitter.start()
        assert queued.wait(30)
        closer = threading.Thread(target=run.session.close)
        closer.start()
        closer.join(30)
        assert not closer.is_alive(), "the session's close waited for a piece that waits for the close's lock"
    keeper.close()  # outside the lock: the thread ends after the piece
    submitter.join(30)
    assert ran == ["piece"] and not submitter.is_alive()
    assert not [t for t in threading.enumerate() if t.name.startswith("safepoint-bookkeeping") and t.is_alive()
                and t.ident == keeper._worker]  # fmt: skip
