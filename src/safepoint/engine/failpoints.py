"""Named fault points for crash tests: the process kills itself (SIGKILL) exactly there.

Enabled only by the environment, so production runs pay one dict lookup per point:
``SAFEPOINT_FAILPOINT=after_tool:send_notification@2`` kills at the second time the point is reached for that
tool (tool and count optional). ``SAFEPOINT_FAILPOINT_ACTION=pause:FILE`` instead creates FILE and waits to be
killed from outside, so a test or the demo can send the SIGKILL itself.
"""

from __future__ import annotations

import os
import signal
import time

POINTS = (
    "before_step",  # a step's before-checkpoint is buffered, nothing of the step is durable
    "after_model",  # the model answered; its message is not durable yet
    "before_started",  # the call is planned (buffered), the tool has not run
    "after_started",  # `started` is durable, the tool has not run
    "after_tool",  # the tool ran, its outcome is not recorded
    "after_outcome",  # the outcome and tool message are durable
    "after_step",  # the after-step checkpoint is durable
)

# The recovery protocol's moments (seed 003), reached only by runs that use it.
PROTOCOL_POINTS = (
    "approval_wait",  # a call waits for approval; its restart checkpoint is durable
    "visible_output",  # streamed text of a turn was shown; the turn is not in the history yet
    "submission_admitted",  # a submission is in the restart checkpoint, not yet in the history
    "closing",  # a live run's close is in its log; owner, terminal event and checkpoint are not settled
)

# Blobs out of the log (``core.blobs``): reached by a commit whose group references blobs it stored.
STORAGE_POINTS = (
    "blob_written",  # the group's blobs are durable in the store; the log group that references them is not
    "log_group_durable",  # the log group that references them is durable too
)

# gc's moments (``safepoint.lifecycle``).
GC_POINTS = (
    "gc_rebased",  # a run's whole versions and their references are durable; nothing is removed yet
    "gc_recorded",  # what gc frees is recorded on the runs' control channels; the blobs are still there
)

# forget's moments (``safepoint.lifecycle.forget``): between the run's deletion and the free of its blobs.
FORGET_POINTS = (
    "forget_run_deleted",  # the run is deleted; its blob marks and blobs are still there
    "forget_refs_dropped",  # its blob marks are dropped; the blobs no other run marks are still there
)

_hits: dict[str, int] = {}


def _spec() -> tuple[str, str | None, int] | None:
    raw = os.environ.get("SAFEPOINT_FAILPOINT")
    if not raw:
        return None
    name, _, count = raw.partition("@")
    point, _, tool = name.partition(":")
    return point, tool or None, int(count or 1)


def hit(point: str, tool: str | None = None) -> None:
    spec = _spec()
    if spec is None or spec[0] != point or (spec[1] is not None and spec[1] != tool):
        return
    _hits[point] = _hits.get(point, 0) + 1
    if _hits[point] != spec[2]:
        return
    action = os.environ.get("SAFEPOINT_FAILPOINT_ACTION", "kill")
    if action.startswith("pause:"):
        with open(action[len("pause:") :], "w") as marker:
            marker.write(f"{os.getpid()} {point}\n")
        while True:
            time.sleep(3600)
    os.kill(os.getpid(), signal.SIGKILL)
