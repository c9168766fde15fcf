"""What an open computes of a large run, computed without going through every record once per piece: the summary's
fold of the view (``SummaryFold.from_view``) is the fold of every entry through ``observe``, exactly, over states a
run really has (finished, started and left, failed and started again, planned, an input said once)."""

from __future__ import annotations

import random

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

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
