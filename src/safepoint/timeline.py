"""A run told for a reviewer (``safepoint ui``): the runs at a glance, one run's timeline (its steps, the model's
text and its tool calls with their ledger states, explain's verdict and the diff of every call, paged), and the
three versions behind every pending conflict. Read only; typed results (re-exported by ``safepoint.api``).

Everything is linear in what the run recorded, and the costly parts are paid for one page only: a run of 10,000
calls renders its diffs and outputs for the page shown, never for all of them (rejected: one ``run_diff`` per call,
which filters every patch of the run again for each call)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from safepoint.errors import ConfigError
from safepoint.results import CallReport, ResumePoint, RunSummary
from safepoint.review import FileDiff, PendingApproval

if TYPE_CHECKING:
    from safepoint.engine.session import RunSession
    from safepoint.records import FilePatchEntry, Message, ToolLedgerEntry
    from safepoint.results import ConflictView, Explanation
    from safepoint.store.base import Store

PER_PAGE = 100  # timeline items a page shows
TEXT_CAP = 20_000  # characters of one message or output shown; the rest is said, not sent
DIFF_CAP_LINES = 400  # lines of one file's diff shown; the rest is said (`safepoint diff` shows it whole)
VERSION_CAP = 200_000  # characters of one version of a conflicted file


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    """A run on the runs page: ``status`` as ``safepoint status`` says it, the step reached, when it last did
    something (its owner's last heartbeat or its end; its creation when nobody ever ran it), and what waits for a
    person: ``waiting_decision`` (an uncertain call: ``--replay``/``--skip``) and the calls waiting for approval."""

    summary: RunSummary
    last_activity: str
    waiting_decision: bool
    approvals: list[PendingApproval]


class CallItem(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call: its ledger states in order (``planned``, ``started``, ...), explain's verdict (what a resume
    would do with it and why), its output and its file changes (each diff capped at ``DIFF_CAP_LINES``)."""

    call_id: str
    tool: str
    target: str
    status: str  # the ledger's last state; "not recorded" for a call the model asked for that never reached it
    states: list[str]
    risk_level: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None
    decision: str | None = None
    verdict: CallReport | None = None
    output: str = ""
    diffs: list[FileDiff] = msgspec.field(default_factory=list)


class TimelineItem(msgspec.Struct, frozen=True, kw_only=True):
    """A message (``kind`` "message": ``role``, ``name`` such as ``recovery_note``, ``text``) or a call."""

    kind: Literal["message", "call"]
    step: int
    role: str = ""
    name: str | None = None
    text: str = ""
    call: CallItem | None = None


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a run's timeline (``page`` counts from 1 of ``pages``; ``total`` items in all), with what the
    run page shows above it: where a resume would continue, the latest recovery note the model was given, the
    self-healing prompt of a run restart recovery closed, and what waits for a person."""

    run_id: str
    status: str
    task: str
    resume_from: ResumePoint
    recovery_note: str | None
    self_healing_prompt: str | None
    needs_decision: list[str]
    conflicts: int
    approvals: list[PendingApproval]
    page: int
    pages: int
    total: int
    items: list[TimelineItem]
    replay_refused: list[str] = msgspec.field(default_factory=list)  # waiting calls that cannot run again: skip only


class ConflictSides(msgspec.Struct, frozen=True, kw_only=True):
    """A pending conflict with its three versions as text (``None``: absent, or not reproducible: ``note`` says
    which; binary content is named, not dumped; each capped at ``VERSION_CAP`` characters, and the conflict's two
    diffs at ``DIFF_CAP_LINES`` lines)."""

    conflict: ConflictView
    before: str | None
    agent: str | None
    now: str | None
    note: str = ""


def run_rows(store: Store, summaries: list[RunSummary], approvals: list[PendingApproval]) -> list[RunRow]:
    """The runs page: each run's summary with its last activity (from its owner record: no second read of its
    log) and the approvals that wait in it."""
    waiting: dict[str, list[PendingApproval]] = {}
    for approval in approvals:
        waiting.setdefault(approval.run_id, []).append(approval)
    rows = []
    for summary in summaries:
        owner = store.owner(summary.run_id) if summary.status != "unreadable" else None
        last = summary.created_at
        if owner is not None:
            last = max(t for t in (owner.heartbeat_at, owner.terminal_at or "", owner.active_at, last) if t is not None)
        rows.append(
            RunRow(
                summary=summary,
                last_activity=last,
                waiting_decision=summary.status == "waiting_decision",
                approvals=waiting.get(summary.run_id, []),
            )
        )
    rows.sort(key=lambda row: row.last_activity, reverse=True)  # the latest first: what a person looks for
    return rows


def _cap(text: str, cap: int = TEXT_CAP) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n… {len(text) - cap} more characters not shown"


def _cap_lines(text: str, shows_all: str) -> str:
    """A diff cut at ``DIFF_CAP_LINES`` lines (and 100,000 characters), saying how many more and which command
    shows them."""
    lines = [line + "\n" for line in text.split("\n")]  # a diff's lines end at "\n" only (not splitlines)
    if lines[-1] == "\n":
        lines.pop()
    else:
        lines[-1] = lines[-1][:-1]
    if len(lines) <= DIFF_CAP_LINES and len(text) <= TEXT_CAP * 5:
        return text
    kept = "".join(lines[:DIFF_CAP_LINES])[: TEXT_CAP * 5]
    more = f"… {len(lines) - kept.count(chr(10))} more lines: `{shows_all}` shows them\n"
    return kept + ("" if kept.endswith("\n") else "\n") + more


def _cap_diff(diff: FileDiff, run_id: str, call_id: str) -> FileDiff:
    capped = _cap_lines(diff.diff, f"safepoint diff {run_id} --call {call_id}")
    return diff if capped is diff.diff else msgspec.structs.replace(diff, diff=capped)


def _step_of(step_id: str) -> int:
    number = step_id.rpartition("_")[2]
    return int(number) if number.isdigit() else 0


def build_timeline(
    session: RunSession,
    explanation: Explanation,
    approvals: list[PendingApproval],
    *,
    page: int = 1,
    per_page: int = PER_PAGE,
) -> Timeline:
    """The run's timeline in the order it happened: each model message followed by the calls it asked for
    (a call made by an own loop without a message comes after, in ledger order). Only the page asked for loads
    outputs and diffs."""
    from safepoint.core.progress import main_argument
    from safepoint.review import file_diffs

    if page < 1 or per_page < 1:
        raise ConfigError(f"page {page} does not exist; pages count from 1")
    view = session.view
    run_id = session.info.run_id
    states: dict[str, list[str]] = {}
    for entry in view.ledger_entries:
        seen = states.setdefault(entry.call_id, [])
        if not seen or seen[-1] != entry.status:
            seen.append(entry.status)
    ledger = session.ledger
    # (kind, step, message or call id): cheap placeholders; the page's items are filled in below.
    order: list[tuple[Message | None, int, str]] = []
    listed: set[str] = set()
    outputs: dict[str, Message] = {}
    recovery_note: str | None = None
    step = 0  # a message without a turn (an own loop's, a note) stands in the step of what came before it
    for message in session.history:
        step = message.turn + 1 if message.turn is not None else step
        if message.role == "tool":
            if message.tool_call_id:
                outputs[message.tool_call_id] = message
            continue
        if message.name == "recovery_note":
            recovery_note = message.content
        if message.content or not message.tool_calls:
            order.append((message, step, ""))
        for asked_for in message.tool_calls:
            if asked_for.call_id not in listed:
                listed.add(asked_for.call_id)
                known = ledger.get(asked_for.call_id)
                order.append((None, _step_of(known.step_id) if known else step, asked_for.call_id))
    for call_id, entry in ledger.items():
        if call_id not in listed:
            listed.add(call_id)
            order.append((None, _step_of(entry.step_id), call_id))
    total = len(order)
    pages = max(1, -(-total // per_page))
    if page > pages:
        raise ConfigError(f"page {page} does not exist; run {run_id} has {pages} page(s) of {per_page} items")
    window = order[(page - 1) * per_page : page * per_page]
    wanted = {call_id for said, _, call_id in window if said is None}
    patches: dict[str, list[FilePatchEntry]] = {}
    for patch in session.files.patches:
        if patch.tool_call_id in wanted and (patch.after_hash or patch.op == "delete"):
            patches.setdefault(patch.tool_call_id, []).append(patch)
    asked = {c.call_id: c for m in session.history for c in m.tool_calls if c.call_id in wanted}
    verdicts = {report.call_id: report for report in explanation.calls if report.call_id in wanted}
    items: list[TimelineItem] = []
    for said, step, call_id in window:
        if said is not None:
            items.append(
                TimelineItem(kind="message", step=step, role=said.role, name=said.name, text=_cap(said.content))
            )
            continue
        found: ToolLedgerEntry | None = ledger.get(call_id)
        if found is None:
            request = asked[call_id]
            call = CallItem(
                call_id=call_id,
                tool=request.tool,
                target=main_argument(request.args),
                status="not recorded",
                states=[],
            )
        else:
            told = outputs.get(call_id)
            text = told.content if told is not None else session.contents.load_result(found.result_ref)
            call = CallItem(
                call_id=call_id,
                tool=found.tool_name,
                target=main_argument(found.input),
                status=found.status,
                states=states.get(call_id, []),
                risk_level=found.risk_level,
                started_at=found.started_at,
                finished_at=found.finished_at,
                error=found.error,
                decision=found.decision_reason or found.decision,
                verdict=verdicts.get(call_id),
                output=_cap(text),
                diffs=[_cap_diff(d, run_id, call_id) for d in file_diffs(session, patches.get(call_id, []))],
            )
        items.append(TimelineItem(kind="call", step=step, call=call))
    return Timeline(
        run_id=run_id,
        status=explanation.status,
        task=explanation.task,
        resume_from=explanation.resume_from,
        recovery_note=recovery_note,
        self_healing_prompt=explanation.recovery.self_healing_prompt,
        needs_decision=[d.call_id for d in explanation.needs_decision],
        replay_refused=[d.call_id for d in explanation.needs_decision if "replay" not in d.choices],
        conflicts=len(explanation.conflicts),
        approvals=approvals,
        page=page,
        pages=pages,
        total=total,
        items=items,
    )


def conflict_sides(session: RunSession, views: list[ConflictView]) -> list[ConflictSides]:
    """The three versions of every pending conflict described in ``views``: before the agent, the agent's
    version, the file now."""
    from safepoint.engine import conflicts

    index = conflicts.cover_index(session)
    pending = {c.path: c for c in conflicts.pending_conflicts(session.conflicts)}
    out = []
    for view in views:
        conflict = pending.get(view.path)
        if conflict is None:
            continue
        versions = conflicts.conflict_versions(session, conflict, index)
        notes: list[str] = []

        if versions.behind is not None:
            notes.append(f"its folder {versions.behind} is a symlink now: the file is not read through it")
        if versions.base_missing:
            notes.append("its content before the agent cannot be reproduced")
        shows_all = f"safepoint conflicts {session.info.run_id}"
        capped = msgspec.structs.replace(
            view,
            agent_change=_cap_lines(view.agent_change, shows_all),
            changed_since=_cap_lines(view.changed_since, shows_all),
        )
        out.append(
            ConflictSides(
                conflict=capped,
                before=_as_text(versions.base, "the version before the agent", notes),
                agent=_as_text(versions.agent, "the agent's version", notes),
                now=_as_text(versions.current, "the file now", notes),
                note="; ".join(notes),
            )
        )
    return out


def _as_text(content: bytes | None, name: str, notes: list[str]) -> str | None:
    from safepoint.core.patches import is_text
    from safepoint.workspace.files import FILE_MARK, SYMLINK_MARK

    if content is None:
        return None
    if content.startswith(SYMLINK_MARK):  # a symlink's recorded form: its target, said as such (never "binary")
        target = content[len(SYMLINK_MARK) :].decode("utf-8", errors="replace")
        notes.append(f"{name} is a symlink to {target[:500]!r}")
        return f"symlink -> {target[:500]}"
    if content.startswith(FILE_MARK):  # a regular file whose content starts like a mark: the mark is not its text
        content = content[len(FILE_MARK) :]
    if not is_text(content):
        notes.append(f"{name} is binary ({len(content)} bytes): not shown")
        return None
    return _cap(content.decode("utf-8", errors="replace"), VERSION_CAP)
