"""The suite every store backend must pass, organised by the store's parts (``safepoint.store.base``) and shipped
with the package, so a backend written elsewhere is checked against the same promises.

Each part is a module of checks; ``validate`` runs them part by part and reports each part on its own (after
langgraph's checkpoint conformance suite), so a backend that implements only some parts learns which it passes::

    from safepoint.store.conformance import validate

    report = validate(make_store, name="my store")
    print(report.render())
    assert report.passed_all(), report.failures()

A pytest module can instead run each check as its own test::

    from safepoint.store.conformance import CONFORMANCE_CHECKS, check_id

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=check_id)
    def test_conformance(check, make_store):
        check(make_store)

``make_store()`` returns a fresh, empty store each time it is called with no argument, and a second handle on
the same store (as another process would open it) when called with the first one.
"""

from __future__ import annotations

import msgspec

from safepoint.store.base import (
    Artifacts,
    Blobs,
    ControlChannel,
    Ownership,
    RestartCheckpoints,
    RunLog,
    Schedules,
)
from safepoint.store.conformance import artifacts, blobs, control, ownership, restart_checkpoints, run_log, schedules
from safepoint.store.conformance.support import Check, StoreFactory, restart_checkpoint, terminal_event

__all__ = [
    "CONFORMANCE_CHECKS",
    "PARTS",
    "Check",
    "CheckResult",
    "ConformanceReport",
    "Part",
    "PartResult",
    "StoreFactory",
    "check_id",
    "restart_checkpoint",
    "terminal_event",
    "validate",
]


class Part(msgspec.Struct, frozen=True):
    """One part of the store: its interface, the parts its checks also use, and its checks."""

    name: str
    interface: type
    needs: tuple[type, ...]
    checks: tuple[Check, ...]


_RUNS = (RunLog, Ownership)  # every per-run check creates a run and claims it
PARTS: tuple[Part, ...] = (
    Part(
        "run_log",
        RunLog,
        (Ownership, ControlChannel, RestartCheckpoints, Artifacts),
        (
            run_log.check_create_and_list,
            run_log.check_append_and_read_in_order,
            run_log.check_append_refuses_a_fork,
            run_log.check_a_new_run_reads_empty_and_an_unknown_one_is_not_found,
            run_log.check_delete_run_removes_everything_the_run_owns,
            run_log.check_summary_follows_the_log,
        ),
    ),
    Part(
        "ownership",
        Ownership,
        (RunLog,),
        (
            ownership.check_generation_fencing,
            ownership.check_release_allows_claim,
            ownership.check_owner_identity_generation_and_terminal_state,
            ownership.check_heartbeat_is_fenced_and_a_stale_release_changes_nothing,
        ),
    ),
    Part(
        "restart_checkpoints",
        RestartCheckpoints,
        _RUNS,
        (
            restart_checkpoints.check_restart_checkpoint_upsert_read_delete_list,
            restart_checkpoints.check_new_writes_are_fenced,
            restart_checkpoints.check_terminal_events_are_recorded_once,
        ),
    ),
    Part("control", ControlChannel, _RUNS, (control.check_control_channel,)),
    Part("schedules", Schedules, (RunLog,), (schedules.check_schedules,)),
    Part(
        "artifacts",
        Artifacts,
        _RUNS,
        (
            artifacts.check_artifacts,
            artifacts.check_trace,
            artifacts.check_a_stale_artifact_is_refused_and_never_stored,
        ),
    ),
    Part(
        "blobs",
        Blobs,
        (RunLog,),
        (blobs.check_blobs_put_get_list_delete, blobs.check_gc_and_writers_exclude_each_other),
    ),
)
CONFORMANCE_CHECKS: tuple[Check, ...] = tuple(check for part in PARTS for check in part.checks)


def check_id(check: Check) -> str:
    """``part:check``, e.g. ``ownership:check_generation_fencing`` (a test id)."""
    return f"{check.__module__.rsplit('.', 1)[-1]}:{getattr(check, '__name__', repr(check))}"


class CheckResult(msgspec.Struct, frozen=True):
    name: str
    passed: bool
    error: str | None = None


class PartResult(msgspec.Struct, frozen=True):
    """A part's outcome: not implemented (the backend lacks its interface), skipped (it lacks a part the checks
    need), or its checks one by one."""

    part: str
    implemented: bool
    checks: list[CheckResult]
    skip_reason: str | None = None

    @property
    def passed(self) -> bool:
        return self.implemented and self.skip_reason is None and all(check.passed for check in self.checks)


class ConformanceReport(msgspec.Struct, frozen=True):
    backend: str
    parts: list[PartResult]

    def passed_all(self) -> bool:
        """Every part implemented and every check passed: a complete ``Store``."""
        return all(part.passed for part in self.parts)

    def failures(self) -> list[str]:
        failed = [(part.part, check) for part in self.parts for check in part.checks if not check.passed]
        return [f"{part}:{check.name}: {check.error}" for part, check in failed]

    def render(self) -> str:
        lines = [f"store conformance: {self.backend}"]
        for part in self.parts:
            passed = sum(check.passed for check in part.checks)
            if not part.implemented:
                verdict = "not implemented"
            elif part.skip_reason is not None:
                verdict = f"skipped ({part.skip_reason})"
            else:
                verdict = f"{'ok' if part.passed else 'FAILED'} ({passed}/{len(part.checks)})"
            lines.append(f"  {part.part:<20} {verdict}")
            lines.extend(f"    {check.name}: {check.error}" for check in part.checks if not check.passed)
        lines.append(f"  result: {'every part passes' if self.passed_all() else 'NOT conformant'}")
        return "\n".join(lines)


def validate(make_store: StoreFactory, *, name: str | None = None, parts: set[str] | None = None) -> ConformanceReport:
    """Run the checks part by part (``parts``: only those named) and report each part and check on its own.
    A check that raises anything is a failure recorded with its message; the next check still runs."""
    probe = make_store()
    try:
        backend = name or type(probe).__name__
        results = []
        for part in PARTS:
            if parts is not None and part.name not in parts:
                continue
            if not isinstance(probe, part.interface):
                results.append(PartResult(part.name, implemented=False, checks=[]))
                continue
            missing = [need.__name__ for need in part.needs if not isinstance(probe, need)]
            if missing:
                results.append(PartResult(part.name, True, [], skip_reason=f"its checks need {', '.join(missing)}"))
                continue
            results.append(PartResult(part.name, True, [_run(check, make_store) for check in part.checks]))
    finally:
        close = getattr(probe, "close", None)
        if close is not None:
            close()
    return ConformanceReport(backend=backend, parts=results)


def _run(check: Check, make_store: StoreFactory) -> CheckResult:
    name = getattr(check, "__name__", repr(check))
    try:
        check(make_store)
    except Exception as exc:  # a check's failure, or the backend's own error: either way this check failed
        detail = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
        return CheckResult(name, passed=False, error=" ".join(detail.split()))
    return CheckResult(name, passed=True)
