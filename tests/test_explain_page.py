"""``explain --limit N`` plans its page's calls only (``core.plan_page``): the same reports as the whole plan's
slice (a snapshot's packed ledger, open calls, a finished call open again, decisions, calls only a damaged log's
doubt names), and no packed entry decoded but the page's."""

from __future__ import annotations

import msgspec

import safepoint
from safepoint.core import ledger_map, view_snapshot
from safepoint.core.doubt import Doubt
from safepoint.core.plan_page import page_ids, plan_page
from safepoint.core.resume import plan_resume
from safepoint.core.run_view import RunView, ViewFold, build_view
from safepoint.engine.session import load_view
from safepoint.engine.tools import tool
from safepoint.records import CallDecision, LogRead, RunInfo, ToolCall
from safepoint.store import view_index


@tool(name="noop", idempotency="idempotent", replay_policy="auto", risk_level="low")
def noop(ctx, n: int = 0) -> str:
    return "ok"


@tool(name="send", idempotency="non_idempotent", replay_policy="never", risk_level="high")
def send(ctx, n: int = 0) -> str:
    return "sent"


def _views(tmp_path, workspace):
    """The same run read whole and through a snapshot taken before its last calls (packed finished calls, then
    calls after it: one open, one finished call open again)."""
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    run = tm.start("t", tools=[noop, send], run_id="r")
    for n in range(150):
        if n % 10 == 0:
            run.step()
        run.call("send" if n % 7 == 0 else "noop", {"n": n}, call_id=f"c{n}")
    run.close()
    info = msgspec.json.decode(tm.store.run_header("r"), type=RunInfo)
    read = tm.store.read_log("r")
    tm.close()
    cut = len(read.records) * 2 // 3
    fold = ViewFold(RunView(info=info))
    fold.feed(read.records[:cut])
    data = view_snapshot.encode(fold, read_problems=0, offset=0, check="")
    snapshot = view_snapshot.decode(data, info)
    assert snapshot is not None
    resumed, _ = view_snapshot.resume_fold(
        snapshot,
        info,
        LogRead(records=read.records[cut:], problems=[]),
        lambda covered, upto: view_snapshot.past_of(info, read, covered, upto),
    )
    return build_view(info, read), resumed.finish()


def _reopen(view: RunView, call_id: str, status: str = "started") -> None:
    entry = view.current[call_id]
    view.add_entries([msgspec.structs.replace(entry, status=status)])


def test_a_page_is_the_whole_plan_s_slice(tmp_path, workspace):
    whole, packed = _views(tmp_path, workspace)
    assert isinstance(packed.current, ledger_map.LedgerMap) and len(packed.current.settled) > 50
    for view in (whole, packed):
        _reopen(view, "c14")  # packed, then open again (a shadowed packed call)
        _reopen(view, "c140", "planned")  # after the snapshot, open
        started = view.attempt_counts.get("c21", 0)
        view.decisions["c21"] = CallDecision(call_id="c21", decision="skip", at="t", attempt=started)
        view.decisions["c28"] = CallDecision(call_id="c28", decision="replay", at="t", attempt=started + 5)
    doubts = [
        Doubt(),
        Doubt(
            reasons=("the log lost records",),
            calls={
                "gone1": (ToolCall(call_id="gone1", tool="send", args={}), "step_15"),
                "c140": (ToolCall(call_id="c140", tool="noop", args={}), "step_15"),
                "gone2": (ToolCall(call_id="gone2", tool="noop", args={}), "step_15"),
            },
        ),
    ]
    for doubt in doubts:
        full = plan_resume(whole, doubt=doubt).calls
        assert [r.entry.call_id for r in full] == [*whole.current, *(c for c in doubt.calls if c not in whole.current)]
        for view in (whole, packed):
            assert plan_resume(view, doubt=doubt).calls == full
            open_plan = plan_resume(view, doubt=doubt, open_only=True)
            for offset, limit in [(0, 5), (10, 30), (140, 10), (148, 3), (151, 100), (0, 0), (0, 1000), (500, 5)]:
                assert plan_page(view, open_plan, offset, limit, {}) == full[offset : offset + limit], (offset, limit)


def test_a_page_decodes_its_own_packed_entries_only(tmp_path, workspace, monkeypatch):
    monkeypatch.setattr(view_index, "SNAPSHOT_EVERY", 100)
    tm = safepoint.open(str(tmp_path / "store"), workspace=str(workspace))
    run = tm.start("t", tools=[noop], run_id="r")
    for n in range(300):
        if n % 10 == 0:
            run.step()
        run.call("noop", {"n": n}, call_id=f"c{n}")
    run.close()
    assert isinstance(load_view(tm.store, "r").current, ledger_map.LedgerMap)
    whole = tm.explain("r", probe_workspace=False)
    decoded = []
    real = ledger_map._Index.entry
    monkeypatch.setattr(ledger_map._Index, "entry", lambda self, at: decoded.append(at) or real(self, at))
    page = tm.explain("r", probe_workspace=False, limit=5, offset=100)
    assert page.calls == whole.calls[100:105]
    # the page's five, and the last steps' calls a resume plans too (two steps): never the 300
    assert 0 < len(set(decoded)) <= 5 + 20, len(set(decoded))
    tm.close()


def test_page_ids_of_a_plain_ledger_and_past_its_end():
    ledger = {f"c{n}": n for n in range(5)}
    assert page_ids(ledger, ["x", "y"], 3, 3) == ["c3", "c4", "x"]
    assert page_ids(ledger, ["x", "y"], 6, 3) == ["y"]
    assert page_ids(ledger, [], 9, 3) == []
