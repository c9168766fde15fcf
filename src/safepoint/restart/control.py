"""What people send a run they do not own: approve, deny, submit, cancel, reset (seed 003 §2.1, §2.2, §4.1).

Each is one durable, checksummed record on the run's control channel. A live owner acts on it at its next safe
point; when nobody owns the run, a cancel or a reset is settled at once by a restart recovery (which finds the
request and closes the work with its reason), so nothing waits for a process that will never come back.

A command of the run can write the channel too (same user): what it writes while it runs is not applied
(``engine/control_watch.py``), and a decision counts only after its wait's line (``restart/approvals.py``). So a
submission, a reset or a decision first waits for the run's running command or tool call to end
(``between_commands``): posted while one runs, it would be taken for the tool's own.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import msgspec

from safepoint.engine.control_watch import TOOLS_NOTE
from safepoint.engine.log_writer import trace_now
from safepoint.engine.session import holder_id, load_view
from safepoint.errors import ResumeError, RunLockedError, UnknownReferenceError
from safepoint.protocol import Approval, CancelRequest, ContextResetRequest, ControlRecord, Submission
from safepoint.restart.judge import close_after_restart, controls, judge, redacted, redactor_of
from safepoint.store.base import Store
from safepoint.store.liveness import owner_alive, process_is_alive
from safepoint.store.ownership import now

_control_decoder = msgspec.json.Decoder(ControlRecord)

COMMAND_PATIENCE = 30.0  # seconds a submission or reset waits for the run's running command to end


def post(store: Store, run_id: str, record: ControlRecord) -> int:
    """Post a control record, redacted with the run's redactor: a submission's text, an approval's reason and
    whoever a person says they are reach the store (and the model) without their secrets."""
    return store.post_control(run_id, redacted(redactor_of(store, run_id), record))


def answer(store: Store, run_id: str, call_id: str, *, approved: bool, by: str = "user", reason: str = "") -> int:
    """Approve or deny a waiting call. The answer is bound to the call's input as the ledger recorded it.

    Two people answering at once (the page and ``safepoint deny``): the answer is posted only if no control record
    came since this one read the channel (``Store.post_control(after=...)``, atomic among posts on every store);
    else what came is read, and an answer to the same call there makes this one the loser, told who answered
    (rejected: check then post, which accepted both and told both they decided; post then re-read, which left two
    answers of one call in the log)."""
    view = load_view(store, run_id)
    if view.status in ("closed", "cancelled"):
        raise ResumeError(f"run {run_id!r} is {view.status}: nothing in it waits for approval any more")
    entry = view.ledger.get(call_id)
    if entry is None:
        raise UnknownReferenceError(f"call {call_id!r} is not in run {run_id!r}; see `safepoint ledger {run_id}`")
    if entry.status != "planned":
        raise ResumeError(
            f"call {call_id!r} of run {run_id!r} is {entry.status}: it does not wait for approval, so there is "
            "nothing to approve or deny"
        )
    between_commands(store, run_id, "decision")
    last = max((position for position, _ in store.read_control(run_id)), default=0)  # read before the check
    for position, record in controls(store, run_id):
        seen = view.control_seen.get(position)
        if seen is not None and seen.type == "tampered":
            continue  # written by a command of the run, not counted: it answers nothing
        _refuse_answered(run_id, call_id, entry.input_hash, record)
    data = redacted(
        redactor_of(store, run_id),
        Approval(call_id=call_id, input_hash=entry.input_hash, approved=approved, at=now(), by=by, reason=reason),
    )
    for _ in range(ANSWER_ATTEMPTS):
        posted = store.post_control(run_id, data, after=last)
        if posted:
            return posted
        came = [(p, raw) for p, raw in store.read_control(run_id) if p > last]
        for _, raw in came:
            with contextlib.suppress(msgspec.DecodeError):
                _refuse_answered(run_id, call_id, entry.input_hash, _control_decoder.decode(raw))
        last = max((p for p, _ in came), default=last)
    raise ResumeError(
        f"run {run_id!r}: its control channel kept changing while answering call {call_id!r}; answer again"
    )


ANSWER_ATTEMPTS = 8  # other posts (a submission, a cancel) coming between the read and the post, each retried


def _refuse_answered(run_id: str, call_id: str, input_hash: str, record: ControlRecord) -> None:
    if isinstance(record, Approval) and record.call_id == call_id and record.input_hash == input_hash:
        verb = "approved" if record.approved else "denied"
        raise ResumeError(f"call {call_id!r} of run {run_id!r} was {verb} already by {record.by} at {record.at}")


def submit(
    store: Store,
    run_id: str,
    text: str,
    *,
    key: str | None = None,
    override_system_prompt: str | None = None,
    append_system_prompt: str | None = None,
    requested_model: str | None = None,
    reasoning_strength_override: str | None = None,
    tools_allowed_override: tuple[str, ...] | None = None,
) -> tuple[str, int]:
    """Queue user input. A client that may retry passes the same ``key`` each time: it is admitted once."""
    view = load_view(store, run_id)
    if view.status in ("closed", "cancelled"):
        raise ResumeError(
            f"run {run_id!r} is {view.status}; start a new run with `safepoint run ... --successor-of {run_id}`"
        )
    between_commands(store, run_id, "submission")
    submission = Submission(
        submission_key=key or uuid.uuid4().hex[:16],
        text=text,
        at=now(),
        override_system_prompt=override_system_prompt,
        append_system_prompt=append_system_prompt,
        requested_model=requested_model,
        reasoning_strength_override=reasoning_strength_override,
        tools_allowed_override=tools_allowed_override,
    )
    return submission.submission_key, post(store, run_id, submission)


def running_commands(store: Store, run_id: str) -> list[int]:
    """The run's commands running now on this host (their supervisors' pids, from the owner's notes), and the
    owner's pid while any other tool call of it runs (a Python tool, an MCP call: any can write the channel)."""
    scratch = store.scratch_dir(run_id)
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for name in os.listdir(scratch or ""):
            if name.startswith("proc-") and name[5:].isdigit():
                with contextlib.suppress(OSError), open(os.path.join(scratch or "", name)) as handle:
                    if process_is_alive(int(name[5:]), handle.read().strip()):
                        found.append(int(name[5:]))
            elif name == TOOLS_NOTE:
                with contextlib.suppress(OSError, ValueError), open(os.path.join(scratch or "", name)) as handle:
                    _end, pid, start = handle.read().split(maxsplit=2)
                    if process_is_alive(int(pid), start.strip()):
                        found.append(int(pid))
    return found


def between_commands(store: Store, run_id: str, what: str, *, patience: float = COMMAND_PATIENCE) -> None:
    """Wait (at most ``patience`` seconds) until no command of the run runs: a record written while one runs is
    taken for the command's own (it could have written it: engine/control_watch.py), so it would not be applied.
    Refused in one line when one still runs."""
    deadline = time.monotonic() + patience
    while running := running_commands(store, run_id):
        if time.monotonic() >= deadline:
            raise ResumeError(
                f"run {run_id!r} is running a command or tool call (pid {running[0]}); a {what} written while one "
                "runs is not taken (the tool could have written it): send it again when it ends"
            )
        time.sleep(0.1)


def owner_is_live(store: Store, run_id: str) -> bool:
    """Does a live process own the run now (it acts on a control record at its next safe point)?"""
    owner = store.owner(run_id)
    return owner is not None and not owner.released and owner.terminal_at is None and owner_alive(owner)


def settle_now(store: Store, run_id: str) -> str:
    """With no live owner, a restart recovery acts on the request now; returns what became of the run. An owner
    that proves live at the claim after all (its heartbeat was only late) has the request, posted before: it acts
    on it at its next safe point, as for any live owner."""
    try:
        claim = store.claim(run_id, holder_id(), takeover=False)
    except RunLockedError:
        return "requested"
    try:
        judged = judge(store, run_id)
        if judged.verdict.resumable:
            return "requested"
        close_after_restart(store, claim, judged)
    finally:
        store.release(claim)
    return "closed"


def _refuse_finished(store: Store, run_id: str, what: str) -> None:
    view = load_view(store, run_id)
    if view.status in ("completed", "closed", "cancelled"):
        raise ResumeError(f"run {run_id!r} is {view.status}; there is nothing to {what}")


def cancel(store: Store, run_id: str, *, whole_stream: bool = False, by: str = "user") -> str:
    """Returns "requested" (a live owner stops at its next safe point) or "closed" (settled now)."""
    _refuse_finished(store, run_id, "cancel")
    post(store, run_id, CancelRequest(at=now(), whole_stream=whole_stream, by=by))
    if owner_is_live(store, run_id):
        outcome = "requested"
    else:
        if whole_stream:
            settle_subagents(store, run_id)
        outcome = settle_now(store, run_id)
    trace_now(store, run_id, 0, [("cancel_requested", {"outcome": outcome, "whole_stream": whole_stream, "by": by})])
    return outcome


def settle_subagents(store: Store, run_id: str, depth: int = 0) -> None:
    """A whole-stream cancel closes the subagents below first, while their parent still stands: each is closed
    for the cancel (user_cancelled_whole_stream), not for losing its parent."""
    view = load_view(store, run_id)
    for spawned in view.spawned.values():
        child = spawned.child_run_id
        if depth < 16:
            settle_subagents(store, child, depth + 1)
        if store.read_restart_checkpoint(child) is not None and not owner_is_live(store, child):
            settle_now(store, child)


def reset_context(store: Store, run_id: str, *, by: str = "user") -> str:
    _refuse_finished(store, run_id, "reset")
    between_commands(store, run_id, "reset")
    post(store, run_id, ContextResetRequest(at=now(), by=by))
    outcome = "requested" if owner_is_live(store, run_id) else settle_now(store, run_id)
    trace_now(store, run_id, 0, [("reset_requested", {"outcome": outcome, "by": by})])
    return outcome
