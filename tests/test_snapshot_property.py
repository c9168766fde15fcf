"""The snapshot of a folded log (``core.view_snapshot``), as a property: a run's log cut anywhere, its prefix
folded and snapshot (encoded, decoded), then the rest fed to it, gives exactly the view the whole log gives
(ledger, checkpoints, history, problems, everything the view holds), also with records lost or damaged before or
after the cut, and from a snapshot of a snapshot. A snapshot that does not hold together is refused."""

from __future__ import annotations

import dataclasses
import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.core import view_snapshot
from safepoint.core.run_view import RunView, ViewFold, build_view
from safepoint.engine.tools import tool
from safepoint.records import LogProblem, LogRead, RunInfo


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0, text: str = "") -> str:
    return f"ok {n} {text}"


@tool(name="send", idempotency="non_idempotent", replay_policy="never", risk_level="high")
def send(ctx, n: int = 0) -> str:
    return "sent"


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A run with steps, calls of both kinds, files written, messages long enough for the history's dictionary,
    a crash (a call left started) and two resumes (a recovery, a rewind to a checkpoint)."""
    root = tmp_path_factory.mktemp("snap")
    workspace = root / "ws"
    workspace.mkdir()
    tm = safepoint.open(str(root / "store"), workspace=str(workspace))
    rng = random.Random(7)
    words = [f"w{rng.getrandbits(20):x}" for _ in range(300)]
    run = tm.start("t", tools=[noop, send], run_id="r")
    marks = []
    for n in range(40):
        if n % 4 == 0:
            run.step()
            marks.append(run.checkpoint())
        if n % 9 == 0:
            run.call("write_file", {"path": f"f{n % 3}.txt", "content": " ".join(rng.choices(words, k=200))})
        for _ in range(2):  # enough model text for the history's dictionary
            run.add_message("assistant", " ".join(rng.choices(words, k=40)))
        run.call("noop", {"n": n, "text": " ".join(rng.choices(words, k=60))}, call_id=f"c{n}")
    run.call("send", {"n": 1}, call_id="s1")
    run.close()
    tm.restore_session("r", marks[3], tools=[noop, send])  # a new branch from an earlier checkpoint
    for _ in range(2):
        again = tm.resume("r", tools=[noop, send])
        again.step()
        again.add_message("assistant", " ".join(rng.choices(words, k=40)))
        again.call("noop", {"n": 99}, call_id=f"after{_}")
        again.close()
    info = msgspec.json.decode(tm.store.run_header("r"), type=RunInfo)
    read = tm.store.read_log("r")
    tm.close()
    assert not read.problems
    return info, read


def _snapshot(fold: ViewFold, read_problems: int) -> bytes:
    return view_snapshot.encode(fold, read_problems=read_problems, offset=0, check="")


def _from(data: bytes, info: RunInfo, after: LogRead, log: LogRead) -> tuple[ViewFold, int]:
    snapshot = view_snapshot.decode(data, info)
    assert snapshot is not None
    return view_snapshot.resume_fold(
        snapshot, info, after, lambda covered, upto: view_snapshot.past_of(info, log, covered, upto)
    )


def _damaged(read: LogRead, lose: list[int], corrupt: list[int]) -> LogRead:
    """The read with records lost (a hole, as a crash or a cut leaves) and records whose body is damaged."""
    records, problems = [], list(read.problems)
    for index, record in enumerate(read.records):
        if index in lose:
            problems.append(LogProblem(kind="corrupt", position=record.seq, detail="checksum does not match"))
            continue
        if index in corrupt:
            record = msgspec.structs.replace(record, body=msgspec.Raw(b'{"not": "a record"}'))
        records.append(record)
    return LogRead(records=records, problems=problems)


def _assert_same(resumed: RunView, whole: RunView) -> None:
    assert resumed.ledger == whole.ledger
    assert resumed.history == whole.history
    assert resumed.checkpoints == whole.checkpoints
    assert resumed.latest_complete_checkpoint() == whole.latest_complete_checkpoint()
    for first in (0, 1, 2, 5, 10**6):  # what a resume plans: the open calls and those of the last steps
        assert resumed.recent_calls(first) == whole.recent_calls(first)
        assert resumed.open_and_recent(first) == whole.open_and_recent(first)
    assert resumed.open_and_recent(None) == whole.open_and_recent(None)
    # every field, the lazily read ones included (a snapshot's view is a ``PastView``: ``==`` compares classes)
    for name in [f.name for f in dataclasses.fields(RunView) if f.compare]:  # step_calls: by recent_calls above
        assert getattr(resumed, name) == getattr(whole, name), name


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_snapshot_anywhere_then_the_rest_is_the_whole_fold(logged, data):
    info, clean = logged
    size = len(clean.records)
    lose = data.draw(st.lists(st.integers(0, size - 1), max_size=2))
    corrupt = data.draw(st.lists(st.integers(0, size - 1), max_size=2))
    read = _damaged(clean, lose, corrupt)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(read.records)), min_size=1, max_size=3)))
    whole = build_view(info, read)
    # the read's problems are split as a read after a position reports them: those before the cut, then after
    first_cut = cuts[0]
    boundary = read.records[first_cut - 1].seq if first_cut else 0
    before = [p for p in read.problems if p.position <= boundary]
    fold = ViewFold(RunView(info=info, problems=list(before)))
    fold.feed(read.records[:first_cut])
    read_problems = len(before)
    done = first_cut
    for cut in [*cuts[1:], len(read.records)]:  # snapshots of snapshots
        top = read.records[cut - 1].seq if cut else 0
        later = (
            [p for p in read.problems if boundary < p.position <= top]
            if cut < len(read.records)
            else [p for p in read.problems if p.position > boundary]
        )
        fold, read_problems = _from(
            _snapshot(fold, read_problems), info, LogRead(records=read.records[done:cut], problems=later), read
        )
        # a read to the log's end reported every problem past its last record too (a lost last record): the
        # next read from the same position would report them again, which the store never meets (no snapshot is
        # written of a log with a problem), so the split gives them once
        done, boundary = cut, top if cut < len(read.records) else max([top, *(p.position for p in read.problems)])
    _assert_same(fold.finish(), whole)


def test_a_snapshot_that_does_not_hold_together_is_refused(logged):
    info, read = logged
    fold = ViewFold(RunView(info=info))
    fold.feed(read.records)
    data = _snapshot(fold, 0)
    assert view_snapshot.decode(data[:-7], info) is None  # cut short
    assert view_snapshot.decode(b"\x00" + data, info) is None
    other = msgspec.structs.replace(info, run_id="other")
    assert view_snapshot.decode(data, other) is None  # another run's
    broken = msgspec.structs.replace(view_snapshot.decode(data, info), branches=[[10**9]])
    with pytest.raises(ValueError):
        view_snapshot.resume_fold(broken, info, LogRead(records=[], problems=[]), lambda covered, upto: ([], []))
