"""What an open computes of a large run, computed without going through every record once per piece: the summary's
fold of the view (``SummaryFold.from_view``) is the fold of every entry through ``observe``, exactly, over states a
run really has (finished, started and left, failed and started again, planned, an input said once)."""

from __future__ import annotations

import random

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

import safepoint
from safepoint.core.run_summary import SummaryFold
from safepoint.core.run_view import RunView
from safepoint.records import RunInfo, ToolLedgerEntry

_INFO = RunInfo(run_id="r", task="t", model="m", created_at="2026-01-01T00:00:00+00:00", workspace=".")
_PATHS = [  # a call's states in order, as the ledger machine writes them
    ("planned", "started", "succeeded"),
    ("planned", "started"),  # killed while it ran
    ("planned", "started", "failed", "started"),  # failed, tried again, killed
    ("planned", "started", "failed", "started", "succeeded"),
    ("planned",),
    ("planned", "approved", "started", "uncertain"),
]


def _entries(seed: int, calls: int) -> list[ToolLedgerEntry]:
    rng = random.Random(seed)
    pending = {f"c{n}": list(rng.choice(_PATHS)) for n in range(calls)}
    entries: list[ToolLedgerEntry] = []
    first = True
    while pending:  # interleaved, as concurrent calls are
        call_id = rng.choice(sorted(pending))
        status = pending[call_id].pop(0)
        said = status == "planned"
        entries.append(
            ToolLedgerEntry(
                call_id=call_id,
                step_id="step_1",
                tool_name="noop",
                input_hash="h",
                status=status,
                input={"n": call_id} if said else {},
                idempotency="non_idempotent" if first else "idempotent",
                replay_policy="auto",
                risk_level="low",
            )
        )
        first = False
        if not pending[call_id]:
            del pending[call_id]
    return entries


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), calls=st.integers(0, 12))
def test_from_view_is_observe_of_every_entry(seed, calls):
    view = RunView(info=_INFO)
    view.add_entries(_entries(seed, calls))  # as the fold notes each state
    fast = SummaryFold.from_view(view)
    slow = SummaryFold()
    slow.branch_len = len(view.history)
    for entry in view.ledger_entries:
        slow.observe(entry)
    assert set(fast.known) | fast.call_ids == slow.call_ids
    assert list(fast.live.items()) == list(slow.live.items())  # the same entries, in the same order
    assert fast.started == slow.started
    assert fast.snapshot(7, "now") == slow.snapshot(7, "now")
    assert msgspec.json.encode(fast.snapshot(7, "now")) == msgspec.json.encode(slow.snapshot(7, "now"))


def test_a_resume_looks_at_the_open_calls_not_at_every_call(tmp_path, monkeypatch):
    """A run killed after 240 calls (its snapshot written on the way) is resumed without reading its whole log,
    deciding every call's replay, reading back every message or loading every ledger state: what it costs is what
    is open (the calls of the last steps), not the run's length (issue 10 §3)."""
    from safepoint.core import resume as core_resume
    from safepoint.engine import large_values
    from safepoint.engine.session import load_view
    from safepoint.engine.tools import tool
    from safepoint.store import view_index
    from safepoint.store.sealed import unwrap

    @tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
    def noop(ctx, n: int = 0) -> str:
        return "ok"

    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 200)
    tm = safepoint.open(workspace=str(tmp_path))
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(240):
        if n % 10 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.session.heartbeat.stop()  # not closed: as a SIGKILL leaves it (no snapshot at close)
    store = tm.store
    backend = type(unwrap(store)[0])
    counted = {"read_log": 0, "decide": 0, "resolve": 0}
    whole_read, decide, resolve = backend.read_log, core_resume.decide_replay, large_values.resolve_message

    def read_log(self, run_id):
        counted["read_log"] += 1
        return whole_read(self, run_id)

    def counting_decide(*args, **kwargs):
        counted["decide"] += 1
        return decide(*args, **kwargs)

    def counting_resolve(*args, **kwargs):
        counted["resolve"] += 1
        return resolve(*args, **kwargs)

    monkeypatch.setattr(backend, "read_log", read_log)
    monkeypatch.setattr(core_resume, "decide_replay", counting_decide)
    monkeypatch.setattr(large_values, "resolve_message", counting_resolve)
    resumed = tm.resume("r", tools=[noop], takeover=True)
    view = resumed.session.view
    assert counted["read_log"] == 0  # the snapshot and the records after it
    assert counted["decide"] <= 20  # the last two steps' calls, not 240
    assert counted["resolve"] <= 20  # the messages with blobs or calls, not every message
    assert getattr(view, "_entries", None) is None and getattr(view, "_checkpoints", None) is None  # not loaded
    monkeypatch.undo()
    # what it did not load is still there when asked (explain, rollback), the same as the whole log says
    assert len(view.ledger_entries) >= 240 * 2 and view.checkpoints
    resumed.close()
    whole = load_view(store, "r")
    assert whole.ledger["c239"].status == "succeeded" and len(whole.current) == 240
    tm.close()
