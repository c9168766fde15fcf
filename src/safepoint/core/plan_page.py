"""A page of a resume plan's calls (``explain --limit N --offset N``, issue 10 §3): the page's calls planned, not
every call of the run. Pure: a view and the plan of its open calls in, the page's reports out.

The whole plan (``core.resume.plan_resume``) lists every call in ledger order, then the calls only a damaged log's
doubt names. Its decisions are made call by call, and a finished call's needs nothing but its own entry, its
decision and its probe; every call that needs more (open, recent, doubted) is in the plan of the open calls
(``open_only``). So a page is those of the open plan it holds, and its other calls planned here the same way:
the same reports as the whole plan's slice (``tests/test_explain_page.py`` holds them to it), at the cost of the
page (rejected: planning every call and slicing, 2.2 s at 50,000 calls for a page of 100).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice

from safepoint.core.ledger import settle_after_crash
from safepoint.core.ledger_map import LedgerMap
from safepoint.core.replay import ProbeResult, decide_replay
from safepoint.core.resume import CallReport, ResumePlan
from safepoint.core.run_view import RunView


def page_ids(current: Mapping[str, object], extra: list[str], offset: int, limit: int) -> list[str]:
    """The call ids at places ``offset`` to ``offset + limit`` of the ledger's order, then of ``extra`` (calls
    after every ledger call); a packed ledger's entries decoded for the page only."""
    stop = offset + limit
    found = current.page(offset, stop) if isinstance(current, LedgerMap) else list(islice(current, offset, stop))
    count = len(current)
    if stop > count:
        found += extra[max(0, offset - count) : stop - count]
    return found


def plan_page(
    view: RunView, plan: ResumePlan, offset: int, limit: int, probes: Mapping[str, ProbeResult]
) -> list[CallReport]:
    """``plan_resume(view, open_only=False).calls[offset : offset + limit]``, from ``plan`` (the same view's
    ``open_only`` plan, with the same probes and doubt)."""
    planned = {report.entry.call_id: report for report in plan.calls}
    extra = [call_id for call_id in planned if call_id not in view.current]  # named by the doubt only
    reports = []
    for call_id in page_ids(view.current, extra, offset, limit):
        report = planned.get(call_id)
        if report is None:  # a finished call, not recent: its own entry, decision and probe decide it
            entry = view.current[call_id]
            decision = view.decisions.get(call_id)
            if decision is not None and decision.attempt != view.attempt_counts.get(call_id, 0):
                decision = None  # made before a later crash: it no longer applies (as ``plan_resume``)
            settled = settle_after_crash(entry)
            report = CallReport(settled, decide_replay(settled, decision=decision, probe=probes.get(call_id)))
        reports.append(report)
    return reports
