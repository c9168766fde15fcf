"""Scheduled jobs: due computation (UTC, missed occurrences, the execution window), job records, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from safepoint.errors import ConfigError, RunNotFoundError
from safepoint.store.url import open_store
from safepoint.supervisor import schedule
from safepoint.supervisor.schedule import ScheduledJob

from .conftest import cli_env, safepoint_in_process


def ms(*args: int) -> int:
    return schedule.to_ms(datetime(*args, tzinfo=UTC))  # type: ignore[misc]


def job(cron: str = "*/15 * * * *", *, created: int | None = None, timeout_s: float = 600.0) -> ScheduledJob:
    created = ms(2024, 1, 1, 0, 0) if created is None else created
    return ScheduledJob(
        job_id="j",
        cron=cron,
        workspace="/tmp",
        created_at_ms=created,
        updated_at_ms=created,
        cron_exec_timeout_s=timeout_s,
        scenario={"task": "t", "turns": [{"text": "done"}]},
    )


# due computation ------------------------------------------------------------------------------------------------


def test_an_occurrence_is_due_at_its_time_and_within_its_window():
    j = job()
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 14, 59)) == []
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 15)) == [ms(2024, 1, 1, 0, 15)]
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 20)) == [ms(2024, 1, 1, 0, 15)]


def test_a_fired_occurrence_is_not_due_again():
    j = job()
    fired = ms(2024, 1, 1, 0, 15)
    assert schedule.due(j, fired, ms(2024, 1, 1, 0, 20)) == []
    assert schedule.due(j, fired, ms(2024, 1, 1, 0, 30)) == [ms(2024, 1, 1, 0, 30)]


def test_the_creation_time_is_not_an_occurrence_and_earlier_ones_never_fire():
    created = ms(2024, 1, 1, 0, 15)  # exactly on an occurrence: the job did not exist before it
    j = job(created=created)
    assert schedule.due(j, None, created) == []
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 29)) == []
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 30)) == [ms(2024, 1, 1, 0, 30)]
    # runs left from an earlier job of the same id (older than this job) do not count as its last fire
    assert schedule.due(j, ms(2023, 12, 31, 23, 45), ms(2024, 1, 1, 0, 30)) == [ms(2024, 1, 1, 0, 30)]


def test_missed_occurrences_fire_only_the_latest():
    j = job(timeout_s=3600)
    last = ms(2024, 1, 1, 0, 15)
    at = ms(2024, 1, 1, 1, 7)  # 0:30, 0:45 and 1:00 were missed
    assert schedule.occurrences(j.cron, last, at) == [ms(2024, 1, 1, 0, 30), ms(2024, 1, 1, 0, 45), ms(2024, 1, 1, 1)]
    assert schedule.due(j, last, at) == [ms(2024, 1, 1, 1)]


def test_an_occurrence_past_its_execution_window_is_skipped():
    j = job(timeout_s=60)
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 16)) == [ms(2024, 1, 1, 0, 15)]
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 16, 1)) == []  # 61 s late: it would break the cycle
    assert schedule.due(j, None, ms(2024, 1, 1, 0, 30)) == [ms(2024, 1, 1, 0, 30)]  # the next one is on time


def test_times_are_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        daily = job("0 9 * * *", timeout_s=3600)
        assert schedule.due(daily, None, ms(2024, 7, 1, 9, 30)) == [ms(2024, 7, 1, 9)]  # 09:00 UTC, summer time
        assert schedule.due(daily, None, ms(2024, 1, 2, 9, 30)) == [ms(2024, 1, 2, 9)]  # and in winter
        assert schedule.iso(ms(2024, 7, 1, 9)) == "2024-07-01T09:00:00.000+00:00"
        assert schedule.next_occurrence("0 9 * * *", ms(2024, 7, 1, 9)) == ms(2024, 7, 2, 9)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_seconds_field_and_occurrence_checks():
    every_5s = "* * * * * */5"
    assert schedule.occurrences(every_5s, ms(2024, 1, 1, 0, 0), ms(2024, 1, 1, 0, 0, 12)) == [
        ms(2024, 1, 1, 0, 0, 5),
        ms(2024, 1, 1, 0, 0, 10),
    ]
    assert schedule.is_occurrence(every_5s, ms(2024, 1, 1, 0, 0, 10))
    assert not schedule.is_occurrence(every_5s, ms(2024, 1, 1, 0, 0, 11))
    assert schedule.latest_occurrence(every_5s, ms(2024, 1, 1, 0, 0, 10)) == ms(2024, 1, 1, 0, 0, 10)
    assert schedule.latest_occurrence(every_5s, ms(2024, 1, 1, 0, 0, 9)) == ms(2024, 1, 1, 0, 0, 5)


def test_occurrence_run_ids_are_deterministic_and_parsed_back():
    assert schedule.occurrence_run_id("nightly", 1700000000000) == "nightly-1700000000000"
    runs = ["nightly-1700000000000", "nightly-1700000900000", "nightly-x-1800000000000", "other-1900000000000", "r"]
    assert schedule.last_fired("nightly", runs) == 1700000900000
    assert schedule.last_fired("nightly-x", runs) == 1800000000000
    assert schedule.last_fired("none", runs) is None


@pytest.mark.parametrize("expr", ["", "* * *", "61 * * * *", "* * * * * * * *", "every day"])
def test_a_bad_cron_expression_is_refused(expr):
    with pytest.raises(ConfigError, match="not valid"):
        schedule.check_cron(expr)


@pytest.mark.parametrize("job_id", ["", ".hidden", "-x", "a/b", "a b", "x" * 101, "é"])
def test_a_bad_job_id_is_refused(job_id):
    with pytest.raises(ConfigError, match="job id"):
        schedule.check_job_id(job_id)


# the job record -----------------------------------------------------------------------------------------------


def test_jobs_are_stored_versioned_and_removed(tmp_path):
    store = open_store(str(tmp_path / "store"))
    first = schedule.put_job(store, job())
    assert first.version == 1
    with pytest.raises(ConfigError, match="--replace"):
        schedule.put_job(store, job("0 * * * *"))
    changed = schedule.put_job(store, job("0 * * * *", created=ms(2025, 1, 1, 0, 0)), replace=True)
    assert (changed.version, changed.cron, changed.created_at_ms) == (2, "0 * * * *", first.created_at_ms)
    assert schedule.get_job(store, "j") == changed
    store.put_schedule("broken", b'{"job_id": "broken"}')
    jobs, broken = schedule.load_jobs(store)
    assert list(jobs) == ["j"] and list(broken) == ["broken"]
    schedule.remove_job(store, "j")
    with pytest.raises(RunNotFoundError):
        schedule.get_job(store, "j")
    with pytest.raises(RunNotFoundError):
        schedule.remove_job(store, "j")


# the CLI --------------------------------------------------------------------------------------------------------


def safepoint(workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI called in process: what the commands do is the point here, not the process."""
    return safepoint_in_process(*args, "--workspace", workspace)


def safepoint_child(workspace, *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``python -m safepoint`` child: the exit codes and one-line errors exactly as a user meets them."""
    return subprocess.run(
        [sys.executable, "-m", "safepoint", *args, "--workspace", str(workspace)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_schedule_add_list_remove(tmp_path, workspace):
    scenario = tmp_path / "sc.json"
    scenario.write_text(json.dumps({"task": "report", "turns": [{"text": "done"}]}))
    added = safepoint(workspace, "schedule", "add", "nightly", str(scenario), "--cron", "0 2 * * *", "--json")
    assert added.returncode == 0, added.stderr
    row = json.loads(added.stdout)
    assert (row["job_id"], row["cron"], row["version"]) == ("nightly", "0 2 * * *", 1)
    assert row["next_at"].endswith("T02:00:00.000+00:00")

    again = safepoint(workspace, "schedule", "add", "nightly", str(scenario), "--cron", "0 3 * * *")
    assert again.returncode == 2 and "--replace" in again.stderr
    replaced = safepoint(
        workspace, "schedule", "add", "nightly", str(scenario), "--cron", "0 3 * * *", "--replace",
        "--exec-timeout", "90", "--json",
    )  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["version"] == 2

    listed = safepoint(workspace, "schedule", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (only,) = json.loads(listed.stdout)
    assert (only["job_id"], only["cron"], only["exec_timeout_s"], only["last_fired_at"]) == (
        "nightly",
        "0 3 * * *",
        90.0,
        None,
    )
    shown = safepoint(workspace, "schedule", "list")
    assert shown.returncode == 0 and "nightly" in shown.stdout

    removed = safepoint(workspace, "schedule", "remove", "nightly")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(safepoint(workspace, "schedule", "list", "--json").stdout) == []
    gone = safepoint(workspace, "schedule", "remove", "nightly")
    assert gone.returncode == 4 and "no scheduled job" in gone.stderr


def test_schedule_add_refuses_bad_input_before_storing_anything(tmp_path, workspace):
    scenario = tmp_path / "sc.json"
    scenario.write_text(json.dumps({"task": "t", "turns": [{"tool_calls": [{"tool": "nope"}]}, {"text": "done"}]}))
    cases = [
        (["--cron", "bad cron"], "not valid"),
        (["--cron", "* * * * *", "--exec-timeout", "0"], "--exec-timeout"),
        (["--cron", "* * * * *"], "unknown tool 'nope'"),
    ]
    for extra, message in cases:
        result = safepoint_child(workspace, "schedule", "add", "j", str(scenario), *extra)
        assert result.returncode == 2 and message in result.stderr, (extra, result.stderr)
    no_what = safepoint_child(workspace, "schedule", "add", "j", "--cron", "* * * * *")
    assert no_what.returncode == 2 and "scenario" in no_what.stderr
    assert json.loads(safepoint_child(workspace, "schedule", "list", "--json").stdout) == []
