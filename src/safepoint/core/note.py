"""The recovery note the model reads after a resume (§8.6): specific, never a vague "continue the task"."""

from __future__ import annotations

from collections.abc import Sequence

from safepoint.core.large_values import LOST_CONTENT
from safepoint.core.resume import CallReport, ResumePlan, last_completed_step
from safepoint.records import ToolLedgerEntry

_SUMMARY_CHARS = 300


def _describe_input(report: CallReport) -> str:
    args = report.entry.input
    for key in ("command", "path", "to", "pattern"):
        value = args.get(key)
        if isinstance(value, str):
            return f" `{value[:120]}`"
    return ""


def _line(report: CallReport, outcome: str) -> str:
    entry = report.entry
    return f"- {entry.tool_name}({entry.call_id}){_describe_input(report)} [{entry.step_id}]: {outcome}"


def _outcome(report: CallReport, summaries: dict[str, str]) -> str:
    """``report.entry`` is the call as the ledger has it after resume settled it; ``report.decision`` is why."""
    entry = report.entry
    action = report.decision.action
    summary = summaries.get(entry.call_id, "")
    tail = f" Result: {summary[:_SUMMARY_CHARS]}" if summary else ""
    if action == "take_outcome" and entry.decision == "probe":
        return f"was interrupted, but its effect is in place ({report.decision.why}); not run again."
    if action == "take_outcome":
        verdict = "FAILED" if entry.status == "failed" else "succeeded"
        return f"ran and {verdict} before the interruption; not run again.{tail}"
    if action == "rerun":
        if entry.status in ("succeeded", "failed"):
            verdict = "FAILED" if entry.status == "failed" else "succeeded"
            return f"started but did not report; it was run again ({report.decision.why}) and {verdict}.{tail}"
        return "started but did not report; it runs again if the model calls it."
    if action == "skip":
        return "started but did not report; NOT run again by the user's decision. Its effect may or may not exist."
    if action == "report_uncertain":
        return (
            "started but did not report; NOT run again because it must not be repeated. "
            "Its effect may or may not have happened."
        )
    if action == "wait_decision":
        return "started but did not report; waiting for a person to decide whether to run it again."
    if entry.status == "failed" and entry.started_at is None:
        # Refused before it ran (denied, its approval timed out, bad arguments): never "it has run now".
        return f"had not started before the interruption; it did not run.{tail}"
    if entry.status in ("succeeded", "failed"):
        return f"had not started before the interruption; it has run now and {entry.status}.{tail}"
    return "had not started; it runs normally."


def recovery_note(
    plan: ResumePlan,
    recent: Sequence[CallReport],
    summaries: dict[str, str],
    *,
    restored: tuple[str, Sequence[ToolLedgerEntry]] | None = None,
) -> str:
    """The note for the model. ``recent`` are the calls to report (those of the interrupted step and later);
    ``restored`` names the checkpoint a restore_session went back to and the calls it left behind."""
    lines = ["The system resumed this run from a checkpoint after an interruption."]
    if restored is not None:
        checkpoint_id, left = restored
        lines[0] = f"A person restored this session to checkpoint {checkpoint_id} (restore_session)."
        lines.append("These calls ran on the branch that was left behind; their effects may still be in place:")
        lines.extend(
            f"- {entry.tool_name}({entry.call_id}) {entry.status}"
            + ("" if entry.idempotency == "idempotent" else ": do not repeat it unless it is really needed")
            for entry in left
        )
    if plan.stopped_by:
        lines.append(
            f"It had been stopped on purpose ({plan.stopped_by}); a command running at that moment was stopped "
            "with it, and its result says how it ended."
        )
    doubted = [r for r in recent if r.entry.call_id in plan.doubted]
    damage = [reason for reason in plan.damage if not reason.startswith(LOST_CONTENT)]
    if damage or doubted:
        how = "; ".join(damage) or "found when the run was resumed before"
        lines.append(
            f"The run's log was damaged ({how}). Calls it no longer accounts for are treated as uncertain: they "
            "may have run. Check their effects before repeating any of them."
        )
    # Lost content is said apart: the log may be whole and a blob gone (missing, damaged, failing to unseal).
    lines.extend(
        f"Content was lost ({reason}). Where the conversation held it you see a note instead; a call is never run "
        "from such a note, and rollback leaves a file whose version was lost as it is."
        for reason in plan.damage
        if reason.startswith(LOST_CONTENT)
    )
    if plan.resume_from is not None:
        checkpoint = plan.resume_from.checkpoint
        lines.append(f"Checkpoint: {checkpoint.checkpoint_id} ({checkpoint.kind}).")
        last_done = last_completed_step(checkpoint)
        lines.append(f"Last completed step: step_{last_done}." if last_done > 0 else "No step had completed.")
    else:
        lines.append("No complete checkpoint was found; the run restarts from its first step.")
    if recent:
        lines.append("What the tool calls around the interruption did:")
        lines.extend(
            _line(
                report,
                ("its record was lost from the damaged log; " if report.entry.call_id in plan.doubted else "")
                + _outcome(report, summaries),
            )
            for report in recent
        )
    do_not_repeat = [
        f"{report.entry.tool_name}({report.entry.call_id})"
        for report in recent
        if report.entry.status in ("succeeded", "failed", "uncertain", "started")
        and report.entry.idempotency != "idempotent"
    ]
    if do_not_repeat:
        lines.append(f"Do not repeat {', '.join(do_not_repeat)}.")
    uncertain = [r for r in recent if r.decision.action in ("skip", "report_uncertain")]
    if uncertain:
        names = ", ".join(f"{r.entry.tool_name}({r.entry.call_id})" for r in uncertain)
        lines.append(f"The outcome of {names} is uncertain: check its effect before acting on it.")
    if plan.drift:
        lines.append("Files changed since this run wrote them (someone else edited them; do not overwrite blindly):")
        lines.extend(f"- {drift.path}" for drift in plan.drift)
    lines.append("Plan the next step from the observations you already have.")
    return "\n".join(lines)
