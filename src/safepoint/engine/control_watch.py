"""The run's control channel, watched across each of its tool calls: what appears there while one runs is not taken
as a person's word.

A tool runs as the same user as safepoint and can append a framed record to its own run's control channel as well
as ``safepoint submit`` can: a command, a Python tool, an MCP server answering a call. So the channel's end is read
before a command starts and after it ended (its processes dead: its supervisor kills what it left,
``Launcher.sweep`` what escaped its supervisor), and likewise around every stretch of time in which any tool call of
this process runs (``engine/tool_activity.py`` says when the first starts and the last ends); what lies in between
is judged:

- a submission (user input, with its overrides), an approval, a subtask's stop note (a prompt for the model) and
  anything else that would put words in the model's context or let work go: **tampering**. Not applied: the run's
  log marks it ``ControlSeen(type="tampered")`` (so no later session, restart or daemon applies it either), the
  trace says so, and the record stays in the channel as evidence;
- a stop (a cancel, a context reset, a successor): obeyed as ever, only traced as written while a command ran.
  A stop grants nothing, and a person must be able to stop an agent that runs command after command.

``quiet_from`` is the channel's end once no tool call and nothing of this session's commands was alive: a decision
posted after it is a person's (``restart.approvals`` starts a wait's line there, and moves it past whatever is
posted while a tool call runs during the wait).

Rejected: the records' own ``at`` times (the writer sets them) and the file's size or mtime (one backend's, and
``touch`` sets an mtime).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from safepoint.engine.launcher import LAUNCHER
from safepoint.engine.processes import ProcessNotes, running_groups
from safepoint.engine.tool_activity import TOOLS
from safepoint.protocol import CancelRequest, ContextResetRequest, ControlRecord, ControlSeen, SuccessorAccepted
from safepoint.store.base import Store
from safepoint.store.liveness import process_is_alive, process_start_time
from safepoint.store.ownership import now

_NOTE = "ctl-"  # beside the command's proc- note: the channel's end when it started (a crash leaves it)
TOOLS_NOTE = f"{_NOTE}tools"  # the channel's end when the running tool calls began, and their process
_decoder = msgspec.json.Decoder(ControlRecord)
_HANDOVER_SECONDS = 2.0  # at most, for a supervisor whose output ended to be gone (normally at once)
STOPS = (CancelRequest, ContextResetRequest, SuccessorAccepted)


class WatchHost(Protocol):
    """What the watch reads and writes of its run (a ``RunSession`` is one)."""

    store: Store
    control_seen: dict[int, ControlSeen]
    closed: bool

    @property
    def bookkeeping(self) -> contextlib.AbstractContextManager[Any]: ...

    def add_record(self, body: msgspec.Struct) -> int: ...

    def commit(self) -> None: ...

    def trace(self, event: str, **data: Any) -> None: ...


def control_end(store: Store, run_id: str) -> int:
    """The position of the channel's last record (0: none)."""
    return max((position for position, _ in store.read_control(run_id)), default=0)


def kind_of(data: bytes) -> tuple[str, ControlRecord | None]:
    try:
        record = _decoder.decode(data)
    except msgspec.DecodeError:
        return "undecodable", None
    return type(record).__struct_config__.tag or type(record).__name__, record  # type: ignore[return-value]


class ControlWatch(ProcessNotes):
    """``ProcessNotes`` (the running commands, for the next owner's cleanup) that also watch the control channel
    across each command of the run."""

    def __init__(
        self,
        scratch: str | None,
        run_id: str,
        host: WatchHost,
        in_flight: Callable[[], list[str]],
        sweep: Callable[[], list[int]],
    ) -> None:
        super().__init__(scratch)
        self.run_id = run_id
        self.host = host
        self.in_flight = in_flight  # the calls running now (their ids name the command in the trace)
        self.sweep = sweep
        self._open: dict[int, int] = {}  # command (its supervisor's pid) -> the channel's end when it started
        self._starts: dict[int, str] = {}  # command -> its supervisor's start time
        found = host.store.read_control(run_id)
        # A previous owner died while commands ran (they were killed just before this session started): what was
        # written from the first one's start on may be theirs.
        crashed = self._crashed_notes()
        if crashed:
            self._judge(found, min(crashed), "a command of the previous owner (which died) ran")
            with host.bookkeeping:
                host.commit()  # the marks are durable before the notes that justify them go
            self._drop_notes()
        self.quiet_from = max((position for position, _ in found), default=0)
        self.launches_at_quiet = LAUNCHER.launches
        self.quiet_end = self.quiet_from  # the channel's end when the last tool call ended (``restart.approvals``)
        self._busy_from: int | None = None
        if TOOLS.listen(self):  # calls of another session of this process run: judged from here when they end
            self._busy_from = self.quiet_from

    # any tool call: called by ``TOOLS`` under its lock, when the first call starts and when the last one ends ----
    def busy(self) -> None:
        if self.host.closed:
            return
        self._busy_from = control_end(self.host.store, self.run_id)  # before the call starts: nothing runs yet
        if self.scratch is not None:
            # A crash mid-call leaves it; its owner (pid, start time) tells `safepoint approve` to wait for the end.
            owner = f"{os.getpid()} {process_start_time(os.getpid())}"
            with open(os.path.join(self.scratch, TOOLS_NOTE), "w") as handle:
                handle.write(f"{self._busy_from} {owner}")

    def quiet(self) -> None:
        before, self._busy_from = self._busy_from, None
        if before is None or self.host.closed:
            return
        found = self.host.store.read_control(self.run_id)
        self.quiet_end = max((position for position, _ in found), default=0)
        self._judge(found, before, "a tool call ran")
        if self.scratch is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.scratch, TOOLS_NOTE))
        if not self._open and not running_groups():
            self.quiet_from = max((position for position, _ in found), default=0)
            self.launches_at_quiet = LAUNCHER.launches

    def _crashed_notes(self) -> list[int]:
        if self.scratch is None:
            return []
        ends = []
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.scratch):
                if name.startswith(_NOTE):  # a command's, or the tool calls' (any tool may write the channel)
                    path = os.path.join(self.scratch, name)
                    with contextlib.suppress(OSError, ValueError), open(path) as handle:
                        ends.append(int((handle.read().split() or ["0"])[0]))
        return ends

    def _drop_notes(self) -> None:
        assert self.scratch is not None
        for name in os.listdir(self.scratch):
            if name.startswith(_NOTE):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.scratch, name))

    def started(self, pid: int) -> None:
        before = control_end(self.host.store, self.run_id)  # before the gate opens: nothing runs yet
        self._open[pid] = before
        self._starts[pid] = process_start_time(pid)
        if self.scratch is not None:
            with open(os.path.join(self.scratch, f"{_NOTE}{pid}"), "w") as handle:
                handle.write(str(before))
        super().started(pid)

    def ended(self, pid: int) -> None:
        super().ended(pid)
        before = self._open.pop(pid, None)
        start = self._starts.pop(pid, "")
        if before is None:
            return
        # Its output ends when the supervisor closes its files, a moment before the kernel hands what the command
        # left to the reaper server (a supervisor killed by its own command: `... & kill -9 $PPID`): swept before
        # that, a leftover would live on until the next sweep. Wait for it to be gone (a zombie: handed over).
        deadline = time.monotonic() + _HANDOVER_SECONDS
        while start and process_is_alive(pid, start) and time.monotonic() < deadline:
            time.sleep(0.001)
        killed = self.sweep()  # what escaped the command's supervisor dies before the window closes
        if killed:
            with self.host.bookkeeping:  # on the command's thread: never inside a piece of another call
                self.host.trace("leftovers_killed", pids=killed)
        found = self.host.store.read_control(self.run_id)
        self._judge(found, before, f"{', '.join(self.in_flight()) or 'a command'} ran")
        if self.scratch is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.scratch, f"{_NOTE}{pid}"))
        if not self._open and not running_groups():
            self.quiet_from = max((position for position, _ in found), default=0)
            self.launches_at_quiet = LAUNCHER.launches

    def _judge(self, found: list[tuple[int, bytes]], before: int, during: str) -> None:
        """Marks what was written in the window. Called on the thread of the tool call that ended (``quiet``, under
        ``TOOLS``'s lock; ``ended``, on the command's): the marks are staged under the run's lock, so they never
        land inside another call's group nor get committed with half of it, and a position is judged once even
        when two threads judge at once (rejected: handing the marks to the bookkeeping thread, which a synchronous
        run has not, and which would leave a window where a submission is not yet marked). The run's pieces never
        take ``TOOLS``'s lock, so taking theirs here cannot deadlock."""
        calls = during
        with self.host.bookkeeping:
            for position, data in found:
                if position <= before or position in self.host.control_seen:
                    continue
                kind, record = kind_of(data)
                if isinstance(record, STOPS):
                    self.host.trace("control_during_command", position=position, type=kind, detail=f"while {calls}")
                    continue
                what = f"written while {calls}"
                mark = ControlSeen(position=position, type="tampered", at=now(), key=f"{kind}: {what}")
                self.host.add_record(mark)
                self.host.trace("control_tampered", position=position, type=kind, detail=what)
