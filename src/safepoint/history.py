"""``safepoint history``: a run's conversation exactly as a resume would restore it (issue 10 §8), read only.

What a resume restores (``agent.resume.restore``): the history of the latest complete checkpoint (after every
rewind and ``restore_session``; the run's first message alone when no checkpoint is sound), then, for the calls
that checkpoint left pending, the outcomes the ledger recorded, in the order the resume settles them, up to the
first call whose outcome is not known yet (one it would run again, or one waiting for a person): those are listed
as ``pending``, with what the resume would do. The text is the log's, so it is redacted exactly as the resumed model
reads it. A completed run shows its whole current branch (resuming it continues from there). Recovery notes and
subtask reports are marked ``system``: the context builder shows them in the system region, not as turns (the
latest recovery note only, which a resume replaces with its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from safepoint.agent.context import RECOVERY_NOTE
from safepoint.core.resume import pending_calls, plan_resume
from safepoint.engine import large_values
from safepoint.engine.content import load_result
from safepoint.protocol import SELF_HEALING
from safepoint.records import Message
from safepoint.report import load_view

if TYPE_CHECKING:
    from safepoint.core.run_view import RunView
    from safepoint.store.base import Store


SYSTEM_NAMES = frozenset({RECOVERY_NOTE, SELF_HEALING})


class HistoryMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of the restored conversation. ``region``: where the model is shown it; ``source``: "ledger" for
    a pending call's outcome the resume takes from the ledger (it is not on the branch yet)."""

    message: Message
    region: Literal["conversation", "system"] = "conversation"
    source: Literal["log", "ledger"] = "log"


class PendingCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call the checkpoint left pending whose outcome a resume does not know yet: what it would do, and why."""

    call_id: str
    tool: str
    action: str
    why: str


class RestoredHistory(msgspec.Struct, frozen=True, kw_only=True):
    """The conversation a resume restores. ``total``: its messages before ``limit`` kept the latest ones."""

    run_id: str
    status: str
    checkpoint_id: str | None
    step: int
    why: str
    total: int
    messages: list[HistoryMessage]
    pending: list[PendingCall] = msgspec.field(default_factory=list)
    abandoned: list[Message] = msgspec.field(default_factory=list)


def restored_history(
    store: Store, run_id: str, *, limit: int | None = None, abandoned: bool = False
) -> RestoredHistory:
    """The conversation of ``run_id`` as a resume would restore it; ``limit``: only its latest ``limit`` messages;
    ``abandoned``: the messages of branches a rewind or a restore left behind too. Raises ``RunNotFoundError``."""
    view = load_view(store, run_id)
    pending: list[PendingCall] = []
    if view.status == "completed":
        messages = [_row(m) for m in view.history]
        checkpoint, step, why = None, len(view.assistant_turns), "the run completed: its whole current branch"
    else:
        messages, pending, checkpoint, step, why = _restored(view)
    total = len(messages)
    if limit is not None:
        messages = messages[max(0, total - limit) :] if limit > 0 else []
    left: list[Message] = []
    if abandoned:
        current = {id(m) for m in view.history}
        left = [m for m in view.message_records.values() if id(m) not in current]
    # What the log kept as blobs (``core.large_values``), read back for the messages shown only.
    content = large_values.reader(store, view)
    messages = [
        msgspec.structs.replace(row, message=large_values.resolve_message(row.message, content)) for row in messages
    ]
    left = large_values.resolve_messages(left, content)
    return RestoredHistory(
        run_id=run_id,
        status=view.status,
        checkpoint_id=checkpoint,
        step=step,
        why=why,
        total=total,
        messages=messages,
        pending=pending,
        abandoned=left,
    )


def _row(message: Message, source: Literal["log", "ledger"] = "log") -> HistoryMessage:
    region: Literal["conversation", "system"] = "system" if message.name in SYSTEM_NAMES else "conversation"
    return HistoryMessage(message=message, region=region, source=source)


def _restored(view: RunView) -> tuple[list[HistoryMessage], list[PendingCall], str | None, int, str]:
    plan = plan_resume(view)  # the resume's own choice of checkpoint (no probe: this only reads)
    at = plan.resume_from
    if at is None:  # the run starts again from its task (``RunSession.start_over``)
        return [_row(Message(seq=0, role="user", content=view.info.task))], [], None, 0, plan.why
    rows = [_row(m) for m in at.history]
    reports = {r.entry.call_id: r for r in plan.calls}
    on_branch = {m.tool_call_id for m in at.history if m.role == "tool"}
    pending: list[PendingCall] = []
    for call in pending_calls(at.history, at.checkpoint.pending_tool_calls):
        if call.call_id in on_branch and not pending:
            continue  # its outcome is on the branch already: the resume never adds it twice
        report = reports.get(call.call_id)
        ref = report.entry.result_ref if report else None
        if (
            not pending
            and report is not None
            and report.decision.action == "take_outcome"
            and report.entry.status in ("succeeded", "failed")
            and ref is not None
            and ref.startswith("log:")
        ):
            # What ``CallRunner._take_outcome`` adds: the recorded observation, or the words saying damage lost it.
            content = load_result(view.message_records, ref)
            told = view.message_records.get(int(ref[4:])) if ref[4:].isdigit() else None
            message = Message(
                seq=len(rows),
                role="tool",
                content=content,
                tool_call_id=call.call_id,
                name=call.tool,
                content_ref=told.content_ref if told is not None else None,  # read back with the rows shown
            )
            rows.append(_row(message, "ledger"))
            continue
        action = report.decision.action if report else "run"
        why = report.decision.why if report else "no ledger entry: the call never started"
        pending.append(PendingCall(call_id=call.call_id, tool=call.tool, action=action, why=why))
    return rows, pending, at.checkpoint.checkpoint_id, at.checkpoint.step, plan.why
