"""The supervisor (``safepoint daemon``): restart recovery at startup, then a reaper, queued input and schedules.

Startup (seed 003 §6): every run with a restart checkpoint is judged (the seven assertions, then the replay
disposition). One that may not continue is closed (§5: terminal status, terminal event, checkpoint deleted, parent
told) under a fresh claim; one that may is resumed in a worker process (``safepoint resume``), unless a live process
already owns it (someone runs it) or it is a subagent (its parent's ``spawn_subagent`` call resumes it when the
parent is resumed). A run stopped on purpose that waits for a person (``waiting_decision``) is left to that person.

Then, every ``poll`` seconds:

(a) crashed and stalled owners. A run whose owner on this machine died without releasing it (a crash) is recovered
    as at startup. A run whose owner is alive, or elsewhere, but whose heartbeat is older than ``lease`` (on the
    store's clock: the database's) has stalled: restart recovery takes it over (a claim under a new generation,
    which fences the stalled process off: its next write is refused and it exits with StaleGenerationError) and
    resumes it in a worker. Only work recovery cannot resume, or silent past ``--reap-after``, is closed by the
    reaper with a ``runtime_work_reap`` terminal event whose detail says which. Neither ever kills the stalled
    process, which may be on another host or hold state only it can clean up (this daemon's own hung worker
    excepted: it is ended and its run resumed by a new one). A worker of this daemon that is alive is judged
    stalled only past ``max(lease, 3 x its heartbeat interval)``.
(b) queued input: a run nobody owns with submissions it has not taken is resumed in a worker.
(c) schedules: an occurrence that is due (``schedule.due``) is fired in a worker (``safepoint schedule fire``).

Workers are separate processes, one per run at most and ``concurrency`` at most (startup recovery waits in a backlog
for a free slot); each is handed its run by a claim this daemon makes first (``try_claim``: a row another daemon is
claiming is skipped, not waited for), so daemons on many hosts share one store without starting a run twice. A pass
reads only open work (``Store.pass_runs``); on PostgreSQL a control post or a schedule change wakes the daemon at once
(LISTEN/NOTIFY) and ``poll`` is the safety net. Workers die with the daemon (``PR_SET_PDEATHSIG``) and leave
their runs to the next startup. On SIGTERM (or SIGINT) the daemon starts nothing more, forwards SIGTERM to its
workers (each stops at its next safe point and keeps its restart checkpoint), waits up to ``grace`` seconds, kills
what is left and exits 0.

Why the heartbeat lease should stay well above a session's heartbeat interval (10 s): a session renews its
heartbeat when it commits and while a tool runs; a lease shorter than that interval reaps healthy runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, Literal

from safepoint.core.resume import lost_beginning
from safepoint.engine.procenv import hide_from_commands
from safepoint.engine.processes import kill_leftovers
from safepoint.engine.session import HEARTBEAT_SECONDS, holder_id, load_view
from safepoint.errors import ExitCode, RunLockedError, SafepointError, StoreError
from safepoint.records import Claim, OwnerState
from safepoint.restart.inbox import pending_submissions
from safepoint.restart.judge import REAPED_EVENT, close_after_restart, judge
from safepoint.store.base import Store
from safepoint.store.crypt import key_environment
from safepoint.store.liveness import OWNER_LEASE_SECONDS, on_this_host, owner_alive
from safepoint.store.names import mask_passwords, safe_url
from safepoint.store.ownership import HANDOFF_ENV, now
from safepoint.store.sealed import store_key
from safepoint.supervisor import handoff, schedule

PR_SET_PDEATHSIG = 1
OWN_WORKER_LEASE_S = 3 * HEARTBEAT_SECONDS
MAX_FAILED_WORKERS = 3  # a run (or an occurrence) whose workers failed this often is left alone, said once
SLICE_S = 0.05  # how often a sleeping daemon looks at its stop flag and its workers
# Worker exit codes that settle the run for now: completed, waiting for a decision, stale (someone else took the
# run over), closed, cancelled, interrupted (stopped by SIGTERM).
SETTLED_EXITS = frozenset(
    {
        ExitCode.OK,
        ExitCode.WAITING_DECISION,
        ExitCode.STALE,
        ExitCode.CLOSED,
        ExitCode.CANCELLED,
        ExitCode.INTERRUPTED,
        ExitCode.LOCKED,  # someone else holds the run (its hand-off was overtaken): not this worker's to run
    }
)
FINISHED = frozenset({"completed", "closed", "cancelled"})

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class DaemonOptions:
    workspace: str  # where a run without a recorded workspace is resumed (every run records one)
    poll_s: float = 1.0
    lease_s: float = OWNER_LEASE_SECONDS
    grace_s: float = 30.0
    once: bool = False
    tools: tuple[str, ...] = ()  # extra tools (MODULE:ATTR) every worker loads
    pass_env: tuple[str, ...] = ()  # credential variables every worker's commands get (`--pass-env`)
    python: str = sys.executable
    concurrency: int = field(default_factory=lambda: os.cpu_count() or 1)  # at most this many workers at once
    reap_after_s: float | None = None  # past this without a heartbeat, work is closed (runtime_work_reap), not resumed


@dataclass
class Worker:
    key: str  # the run id (for a fire: the occurrence's run id, which exists once the worker created it)
    kind: Literal["resume", "fire"]
    why: str
    proc: subprocess.Popen[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    started: float = field(default_factory=time.monotonic)
    terminated: bool = False
    claim: Claim | None = None  # the daemon's claim the worker takes the run from (released if it never did)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """Runs in the forked child before exec: it gets SIGKILL when the daemon dies, however it dies."""

    def setup() -> None:
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the daemon died before the line above took effect
            os._exit(ExitCode.FAILED)

    return setup


def _heartbeat_age_s(owner: OwnerState, at: datetime | None = None) -> float:
    """Seconds since the owner's heartbeat, on ``at`` (the store's clock: the database's, whose time the heartbeat
    was written in, so hosts' clocks never meet)."""
    try:
        beat = datetime.fromisoformat(owner.heartbeat_at)
    except ValueError:
        return float("inf")
    return ((at or datetime.now(UTC)) - beat).total_seconds()


def _tail(handle: IO[bytes], limit: int = 4000) -> str:
    handle.seek(0)
    return handle.read()[-limit:].decode(errors="replace")


class Daemon:
    def __init__(self, store: Store, options: DaemonOptions, emit: Emit) -> None:
        self.store = store
        self.options = options
        self._emit = emit
        self.holder = "daemon-" + holder_id()
        self.workers: dict[str, Worker] = {}
        self.failures: dict[str, int] = {}  # key -> failed workers
        self.handled: dict[str, tuple[object, ...]] = {}  # run id -> the state it was last looked at in, unchanged
        self.said: set[str] = set()  # one-time notices already given
        self.stop_requested = False
        # Startup recovery waiting for a free worker slot (judged only when one is free: judging costs too).
        self.backlog: dict[str, tuple[str, OwnerState | None]] = {}  # run -> why, the stalled owner to fence
        self.clock: datetime | None = None  # the store's time at the start of this pass
        self.last_pass: datetime | None = None  # the store's time at the start of the last full pass
        self.revisit: set[str] = set()  # runs whose worker waited for a slot: in every pass until one starts

    # output -------------------------------------------------------------------------------------------------------
    def emit(self, event: str, run_id: str | None = None, **data: Any) -> None:
        record: dict[str, Any] = {"at": now(), "event": event}
        if run_id is not None:
            record["run_id"] = run_id
        # A worker's or a driver's error may quote the store URL: the log shows no password (safe_url everywhere).
        record.update({k: mask_passwords(v) if isinstance(v, str) else v for k, v in data.items()})
        self._emit(record)

    def _once(self, key: str, event: str, run_id: str | None = None, **data: Any) -> None:
        if key not in self.said:
            self.said.add(key)
            self.emit(event, run_id, **data)

    # lifecycle ----------------------------------------------------------------------------------------------------
    def install_signals(self) -> None:
        def request(signum: int, frame: object) -> None:
            self.stop_requested = True

        signal.signal(signal.SIGTERM, request)
        signal.signal(signal.SIGINT, request)

    def run(self) -> ExitCode:
        options = self.options
        # The daemon is above every worker's commands too: its /proc files show nothing a worker does not get by
        # its environment (the store URL, the key and the credentials go by the pipe), and it is not dumpable.
        hide_from_commands(handoff.split_environment(os.environ, self.store.url)[0])
        self.emit(
            "daemon_started",
            store=safe_url(self.store.url),
            pid=os.getpid(),
            poll_s=options.poll_s,
            lease_s=options.lease_s,
            once=options.once,
        )
        self._store_guard("startup", self.startup)
        if not self.stop_requested:
            self._store_guard("tick", self.tick)
        while not self.stop_requested:
            if options.once:
                if not self.workers and not self.backlog:
                    break
                self.sleep(options.poll_s)
                self.reap_workers()
                self._store_guard("backlog", self.drain_backlog)  # once: every run waiting for a slot, too
                continue
            self.sleep(options.poll_s, wake=True)
            if not self.stop_requested:
                self._store_guard("tick", self.tick)
        self.stop_workers()
        self.emit("daemon_stopped", reason="signal" if self.stop_requested else "once")
        return ExitCode.OK

    def sleep(self, seconds: float, *, wake: bool = False) -> None:
        """Sleep between passes, looking at the workers every slice; ``wake``: a store's news of work (a post, a
        schedule: LISTEN/NOTIFY on PostgreSQL) ends the sleep at once, and the poll is only the safety net."""
        deadline = time.monotonic() + seconds
        while not self.stop_requested and time.monotonic() < deadline:
            slice_s = min(SLICE_S, max(0.0, deadline - time.monotonic()))
            if wake:
                if self.store.wait_for_work(slice_s):
                    return
            else:
                time.sleep(slice_s)
            if self.workers:
                self.reap_workers()

    def _store_guard(self, what: str, action: Callable[[], None]) -> None:
        """A store that is briefly unreachable (a database restart) is said and waited out: the supervisor, and
        with it every worker in the middle of a tool, must not die of it."""
        try:
            action()
        except StoreError as exc:
            self.emit("error", what, error=" ".join(str(exc).split()), kind=type(exc).__name__)
            self.sleep(min(5.0, self.options.poll_s * 5))
        except Exception as exc:  # psycopg's own errors when a connection drops mid-read
            self.emit("error", what, error=" ".join(repr(exc).split()), kind=type(exc).__name__)
            self.sleep(min(5.0, self.options.poll_s * 5))

    def _guard(self, what: str, action: Callable[[], None]) -> None:
        """One run's trouble is said and skipped; the daemon goes on supervising the others."""
        try:
            action()
        except SafepointError as exc:
            self.emit("error", what, error=" ".join(str(exc).split()), kind=type(exc).__name__)
        except Exception as exc:  # a bug in one run's handling must not stop the supervisor
            self.emit("error", what, error=repr(exc), kind=type(exc).__name__)

    # startup: §6 over every restart checkpoint ---------------------------------------------------------------------
    def startup(self) -> None:
        self.clock = self.store.clock()
        checkpoints = self.store.list_restart_checkpoints()
        self.emit("startup_recovery", checkpoints=len(checkpoints), concurrency=self.options.concurrency)
        self.backlog.update((run_id, ("startup", None)) for run_id in checkpoints if run_id not in self.workers)
        self.drain_backlog()

    def full(self) -> bool:
        return len(self.workers) >= self.options.concurrency

    def drain_backlog(self) -> None:
        """Startup recovery, as many runs as there are free worker slots: 200 interrupted runs on 2 cores are
        judged and resumed two at a time, not all at once (rejected: a worker per run at startup, which exhausted
        memory). A run that needs no worker (closed, skipped, left) frees its turn at once."""
        while self.backlog and not self.full() and not self.stop_requested:
            run_id, (why, stalled) = next(iter(self.backlog.items()))
            del self.backlog[run_id]
            self._guard(run_id, functools.partial(self._recover_once, run_id, why, stalled))

    def _recover_once(self, run_id: str, why: str, stalled: OwnerState | None) -> None:
        if stalled is not None:  # its lease ran out while every slot was busy: fence it now
            self.recover(run_id, why, stalled=stalled)
            return
        owner = self.store.owner(run_id)
        state = ("crashed", owner.generation if owner is not None else 0)
        self._once_per_state(run_id, state, functools.partial(self.recover, run_id, why))

    def recover(self, run_id: str, why: str, *, stalled: OwnerState | None = None) -> None:
        """Restart recovery for one run with no live owner: close it, resume it in a worker, or leave it.
        ``stalled``: its owner's lease ran out (hung, or on a host that is gone): a live-looking owner is taken
        over, not waited for."""
        if run_id in self.workers:
            return
        if self.full():
            self.handled.pop(run_id, None)  # not looked at yet: the backlog brings it back when a slot is free
            self.backlog.setdefault(run_id, (why, stalled))
            return
        judged = judge(self.store, run_id)
        owner = judged.facts.owner
        fenced_off = stalled is not None and owner is not None and owner.generation == stalled.generation
        if owner is not None and not owner.released and not fenced_off and owner_alive(owner, self.clock):
            self.handled.pop(run_id, None)  # someone runs it; if that process dies, its run is looked at again
            self.emit("skipped", run_id, why=why, detail=f"owned by live process {owner.pid} on {owner.host}")
            return
        if judged.view is not None and self._foreign(run_id, judged.view.info.workspace, "run"):
            return  # neither resumed nor closed: a person looks at a store brought from elsewhere first
        verdict = judged.verdict
        if not verdict.resumable:
            try:
                claim = self.store.claim(run_id, self.holder, takeover=stalled is not None)
            except RunLockedError as exc:
                self.emit("skipped", run_id, why=why, detail=" ".join(str(exc).split()))
                return
            try:
                judged = judge(self.store, run_id)  # again, under the claim: nothing can change it now
                if judged.verdict.resumable:
                    return
                verdict = judged.verdict
                report = close_after_restart(self.store, claim, judged)
            finally:
                self.store.release(claim)
            self.emit(
                "closed", run_id, why=why, verdict=verdict.summary, generation=claim.generation, detail=report.detail
            )
            return
        view = judged.view
        assert view is not None  # a run that is not there fails missing_conversation
        info = view.info
        if info.recovery_class == "subagent":
            self.emit("left_to_parent", run_id, why=why, parent=info.parent_run_id, call=info.parent_call_id)
            return
        if view.status == "waiting_decision":
            self.emit(
                "needs_decision",
                run_id,
                why=why,
                detail=f"`safepoint explain {run_id}` names the calls and the commands that decide each",
            )
            return
        if view.status == "completed" and not pending_submissions(self.store, view):
            if judged.facts.descriptor is not None:  # a crash between "completed" and the checkpoint's delete
                claim = self.store.claim(run_id, self.holder)
                try:
                    self.store.delete_restart_checkpoint(claim)
                finally:
                    self.store.release(claim)
                self.emit("cleaned", run_id, why=why, detail="completed run: its leftover restart checkpoint deleted")
            return
        if info.scenario is None and info.provider is None:
            self.emit("skipped", run_id, why=why, detail="started by its own loop: resume it from there")
            return
        if (lost := lost_beginning(view)) is not None:  # a worker would refuse it (exit 12): say it once instead
            self._once(f"damaged:{run_id}", "skipped", run_id, why=why, detail=lost)
            return
        handed: Claim | None = None
        if stalled is not None:
            # Fence the stalled owner off now (a new generation: its next write is refused when it wakes), then
            # hand the run to a worker, which takes it from this claim.
            try:
                handed = self.store.claim(run_id, self.holder, takeover=True)
            except RunLockedError as exc:
                self.emit("skipped", run_id, why=why, detail=" ".join(str(exc).split()))
                return
            self.emit(
                "taken_over",
                run_id,
                fenced_generation=stalled.generation,
                generation=handed.generation,
                pid=stalled.pid,
                host=stalled.host.rpartition("#")[0],
                heartbeat_age_s=round(_heartbeat_age_s(stalled, self.clock), 1),
                detail="no heartbeat within the lease: fenced off and resumed by restart recovery",
            )
        self.start_resume(run_id, why, info.workspace, info.job_id, claim=handed)

    # the loop ----------------------------------------------------------------------------------------------------
    def tick(self) -> None:
        self.reap_workers()
        clock = self.store.clock()
        self.clock = clock
        self.drain_backlog()
        # Only what is open (held owners, runs posted to lately), through the store's indexes: a pass over a store
        # of 100,000 finished runs costs what its open ones cost. Rejected: every run's owner and control channel.
        runs = sorted({*self.store.pass_runs(self.last_pass), *self.revisit})
        for run_id in runs:
            if self.stop_requested:
                return
            self._guard(run_id, functools.partial(self.check_run, run_id))
        if not self.stop_requested:
            self._guard("schedules", self.check_schedules)
        self.last_pass = clock

    def check_run(self, run_id: str) -> None:
        owner = self.store.owner(run_id)
        worker = self.workers.get(run_id)
        live = owner is not None and not owner.released and owner.terminal_at is None
        if worker is not None:
            # Our worker holds it: only a hung one (alive, no heartbeat for long) is reaped.
            if (
                live
                and owner is not None
                and owner.pid == worker.proc.pid
                and on_this_host(owner)
                and _heartbeat_age_s(owner, self.clock) > max(self.options.lease_s, OWN_WORKER_LEASE_S)
            ):
                self.stalled(run_id, owner)
            return
        if live and owner is not None:
            if on_this_host(owner) and not owner_alive(owner):
                self._once_per_state(run_id, ("crashed", owner.generation), lambda: self.recover(run_id, "crashed"))
            elif _heartbeat_age_s(owner, self.clock) > self.options.lease_s:
                self._once_per_state(
                    run_id, ("stalled", owner.generation, owner.heartbeat_at), lambda: self.stalled(run_id, owner)
                )
            return
        if owner is not None and owner.terminal_at is not None:
            return  # closed for good
        self.check_submissions(run_id, owner)

    def _once_per_state(self, run_id: str, state: tuple[object, ...], action: Callable[[], None]) -> None:
        """Look at a run again only when its state changed (a new generation, new control records, ...)."""
        if self.handled.get(run_id) == state or self._gave_up(run_id):
            return
        self.handled[run_id] = state
        action()

    def stalled(self, run_id: str, owner: OwnerState) -> None:
        """An owner whose lease ran out (hung, stopped, or on a host that is gone) costs a takeover, not its run:
        restart recovery claims it under a new generation and resumes it when it may. The reaper's close is for
        work recovery cannot resume, or that outlived ``--reap-after``. The stalled process is never killed (it
        may be on another host); when it wakes, its next write is refused."""
        age = _heartbeat_age_s(owner, self.clock)
        reap_after = self.options.reap_after_s
        if reap_after is not None and age > reap_after:
            self.reap(run_id, owner, f"no heartbeat for {age:.0f} s, past --reap-after {reap_after:g} s")
            return
        judged = judge(self.store, run_id)
        if judged.verdict.resumable:
            worker = self.workers.get(run_id)
            if worker is not None:  # our own worker, hung: it is ours to end (its run is resumed by a new one)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(worker.proc.pid, signal.SIGKILL)
                worker.proc.wait()
                worker.terminated = True
                self.reap_workers()
            self.recover(run_id, "stalled", stalled=owner)
            return
        self.reap(run_id, owner, f"restart recovery cannot resume it: {judged.verdict.summary}")

    def reap(self, run_id: str, owner: OwnerState, why: str = "") -> None:
        """runtime_work_reap: fence the hung owner off (a takeover) and close its work; never kill it."""
        judged = judge(self.store, run_id, reaping=True, reap_detail=why)
        if judged.view is not None and judged.view.status in FINISHED:
            return  # its work is over; only the release is missing, and that closes nothing
        current = self.store.owner(run_id)
        if (
            current is None
            or current.released
            or current.generation != owner.generation
            or current.heartbeat_at != owner.heartbeat_at
        ):
            return  # it moved since it was read: not hung after all
        claim = self.store.claim(run_id, self.holder, takeover=True)
        try:
            report = close_after_restart(self.store, claim, judged, event_type=REAPED_EVENT)
        finally:
            self.store.release(claim)
        self.emit(
            "reaped",
            run_id,
            fenced_generation=owner.generation,
            generation=claim.generation,
            pid=owner.pid,
            host=owner.host.rpartition("#")[0],
            heartbeat_age_s=round(_heartbeat_age_s(owner, self.clock), 1),
            verdict=judged.verdict.summary,
            why=why,
            detail=report.detail,
        )

    def check_submissions(self, run_id: str, owner: OwnerState | None) -> None:
        controls = self.store.read_control(run_id)
        if not controls:
            return
        state = ("submissions", owner.generation if owner is not None else 0, len(controls))

        def look() -> None:
            view = load_view(self.store, run_id)
            if view.status in ("closed", "cancelled", "waiting_decision"):
                return
            pending = pending_submissions(self.store, view)
            if not pending:
                return
            if view.info.scenario is None and view.info.provider is None:
                self.emit("skipped", run_id, why="queued submission", detail="started by its own loop")
                return
            if (lost := lost_beginning(view)) is not None:
                self._once(f"damaged:{run_id}", "skipped", run_id, why="queued submission", detail=lost)
                return
            keys = ", ".join(s.submission_key for s in pending)
            self.start_resume(run_id, f"queued submission ({keys})", view.info.workspace, view.info.job_id)

        self._once_per_state(run_id, state, look)

    def check_schedules(self) -> None:
        jobs, broken = schedule.load_jobs(self.store)
        for job_id, why in broken.items():
            self._once(f"broken-job:{job_id}", "error", None, job_id=job_id, error=f"unreadable scheduled job: {why}")
        at = schedule.now_ms()
        for job in jobs.values():
            if self.stop_requested:
                return
            if self._foreign(job.job_id, job.workspace, "scheduled job"):
                continue
            if self.full():
                return  # due occurrences stay due: the next pass fires them
            runs = self.store.occurrence_runs(job.job_id, schedule.RUN_ID_SEPARATOR)
            existing = set(runs)
            for scheduled_for in schedule.due(job, schedule.last_fired(job.job_id, runs), at):
                run_id = schedule.occurrence_run_id(job.job_id, scheduled_for)
                if run_id in existing or run_id in self.workers or self._gave_up(run_id):
                    continue
                self.start_worker(
                    run_id,
                    "fire",
                    f"job {job.job_id} due at {schedule.iso(scheduled_for)}",
                    ["schedule", "fire", job.job_id, "--at", str(scheduled_for)],
                    job.workspace,
                    job.tools,
                )

    # workers -----------------------------------------------------------------------------------------------------
    def _gave_up(self, key: str) -> bool:
        return self.failures.get(key, 0) >= MAX_FAILED_WORKERS

    def _foreign(self, key: str, workspace: str, what: str) -> bool:
        """A run (or job) recorded in another workspace came with the store from elsewhere (a cloned repository can
        ship ``.agent-runtime/``): it is never resumed or fired on its own, only said once and left to a person.
        Real paths are compared, so a symlinked path to this very workspace is still this workspace (rejected: the
        recorded string as it is, which a symlink or a trailing slash would make foreign)."""
        if not workspace or same_workspace(workspace, self.options.workspace):
            return False
        self._once(
            f"foreign:{key}",
            "skipped",
            key if what == "run" else None,
            why="foreign workspace",
            detail=f"{what} {key} was recorded in workspace {workspace}, not this one ({self.options.workspace}):"
            f" a store brought from elsewhere is never resumed on its own; look at it, then resume it by hand"
            f" with --workspace",
        )
        return True

    def start_resume(
        self, run_id: str, why: str, workspace: str, job_id: str | None, *, claim: Claim | None = None
    ) -> None:
        """A worker resumes the run, handed over by a claim: this daemon claims it first (skipping it when another
        supervisor's claim or a live owner holds it, ``try_claim``) and the worker takes it from that claim
        (``--takeover`` of this daemon's own generation). Two daemons that see the same work start one worker
        between them, not two that race (rejected: starting the worker unclaimed, whose own claim then fails in
        every daemon but one, after a Python process was started for nothing)."""
        if claim is None and (
            run_id in self.workers or self._gave_up(run_id) or self._foreign(run_id, workspace, "run")
        ):
            return
        if self.full():
            self.handled.pop(run_id, None)  # looked at again at the next pass, when a slot may be free
            self.revisit.add(run_id)
            if claim is not None:
                self.store.release(claim)  # fenced already; recovered from the backlog like any crashed run
                self.backlog.setdefault(run_id, (why, None))
            return
        if claim is None:
            claim = self.store.try_claim(run_id, self.holder)
            if claim is None:
                self.emit("skipped", run_id, why=why, detail="another supervisor or a live process holds it")
                return
        tools: tuple[str, ...] = ()
        if job_id is not None:
            with contextlib.suppress(SafepointError):
                tools = schedule.get_job(self.store, job_id).tools
        started = self.start_worker(
            run_id, "resume", why, ["resume", run_id, "--takeover"], workspace, tools, claim=claim
        )
        if not started:
            self.store.release(claim)

    def start_worker(
        self,
        key: str,
        kind: Literal["resume", "fire"],
        why: str,
        args: list[str],
        workspace: str,
        tools: tuple[str, ...],
        *,
        claim: Claim | None = None,
    ) -> bool:
        if self.stop_requested or key in self.workers or self.full():
            return False
        command = [self.options.python, "-m", "safepoint", *args]
        command += ["--workspace", workspace or self.options.workspace, "--json"]
        for spec in dict.fromkeys((*tools, *self.options.tools)):
            command += ["--tools", spec]
        # The worker has the store URL; its commands get neither it nor a credential unless named, whether it
        # resumes a run or fires an occurrence (its first run, and its resumes after a crash, get the same).
        for name in self.options.pass_env:
            command += ["--pass-env", name]
        stdout = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the worker is reaped
        stderr = tempfile.TemporaryFile()  # noqa: SIM115
        # The store URL and the credentials go by a pipe (supervisor/handoff.py): neither the worker's environment
        # nor its command line, which its commands (and `ps`) could read for the worker's whole life.
        # The store's key (however the daemon was given it) joins them: SAFEPOINT_KEY, by the pipe like the rest.
        env, secret = handoff.split_environment(key_environment(store_key(self.store), os.environ), self.store.url)
        if claim is not None:
            env[HANDOFF_ENV] = f"{claim.run_id}\t{claim.holder}\t{claim.generation}"
        pipe_read, pipe_write = os.pipe()
        env[handoff.HANDOFF_FD] = str(pipe_read)
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                pass_fds=(pipe_read,),
                preexec_fn=_die_with_parent(os.getpid()),  # safe here: the daemon has one thread
                process_group=0,  # its own group: a terminal's Ctrl-C reaches the daemon, which decides
            )
        except OSError as exc:
            os.close(pipe_read)
            os.close(pipe_write)
            stdout.close()
            stderr.close()
            self.failures[key] = self.failures.get(key, 0) + 1
            self.emit("error", key, error=f"cannot start a worker: {exc}", kind="OSError")
            return False
        os.close(pipe_read)
        handoff.send(pipe_write, secret)  # a URL and a few keys: within the pipe's buffer
        self.workers[key] = Worker(key=key, kind=kind, why=why, proc=proc, stdout=stdout, stderr=stderr, claim=claim)
        self.revisit.discard(key)
        self.emit("worker_started", key, kind=kind, why=why, pid=proc.pid)
        return True

    def reap_workers(self) -> None:
        for key, worker in list(self.workers.items()):
            code = worker.proc.poll()
            if code is None:
                continue
            del self.workers[key]
            if worker.claim is not None:  # a no-op once the worker took the run over (the generation moved on)
                with contextlib.suppress(SafepointError):
                    self.store.release(worker.claim)
            out, err = _tail(worker.stdout, 1 << 20), _tail(worker.stderr)
            worker.stdout.close()
            worker.stderr.close()
            status: str | None = None
            with contextlib.suppress(ValueError, AttributeError):
                status = _last_json(out).get("status")
            data: dict[str, Any] = {"kind": worker.kind, "pid": worker.proc.pid, "exit_code": code}
            if status is not None:
                data["status"] = status
            failed = code not in SETTLED_EXITS and not worker.terminated
            if code != 0:
                lines = [line for line in err.splitlines() if line.strip()]
                if lines:
                    data["stderr"] = lines[-1][:500]
            self.emit("worker_exited", key, **data)
            if failed:
                self.failures[key] = self.failures.get(key, 0) + 1
                if self._gave_up(key):
                    self.emit(
                        "gave_up",
                        key,
                        detail=f"{MAX_FAILED_WORKERS} workers failed; fix the cause, then resume it yourself "
                        "or restart the daemon",
                    )

    def stop_workers(self) -> None:
        """SIGTERM to every worker (each stops at its next safe point), then up to ``grace`` seconds, then SIGKILL."""
        if not self.workers:
            return
        for worker in self.workers.values():
            worker.terminated = True
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
        self.emit("stopping_workers", workers=len(self.workers), grace_s=self.options.grace_s)
        deadline = time.monotonic() + self.options.grace_s
        while self.workers and time.monotonic() < deadline:
            time.sleep(SLICE_S)
            self.reap_workers()
        for worker in list(self.workers.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
            # A command the worker started runs in its own process group: it must not outlive its supervisor
            # and finish unsupervised (its call is then uncertain, settled at the next start).
            scratch = self.store.scratch_dir(worker.key)
            if scratch is not None:
                killed = kill_leftovers(scratch)
                if killed:
                    self.emit("killed_commands", worker.key, pids=killed)
        self.reap_workers()


def same_workspace(recorded: str, here: str) -> bool:
    """Whether a recorded workspace is this one: real paths (symlinks resolved), so two spellings of one folder
    agree and a link named like this workspace but pointing elsewhere does not."""
    return os.path.realpath(recorded) == os.path.realpath(here)


def _last_json(out: str) -> Any:
    """A worker's --json result: its whole output (one object), or its last line after progress events (resume)."""
    try:
        return json.loads(out)
    except ValueError:
        return json.loads(out.strip().rsplit("\n", 1)[-1])
