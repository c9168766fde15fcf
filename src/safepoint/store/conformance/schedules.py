"""The schedules part: a store-wide table of job definitions, apart from the runs."""

from __future__ import annotations

from safepoint.errors import ConfigError
from safepoint.store.conformance.support import StoreFactory, fail, refused


def check_schedules(make_store: StoreFactory) -> None:
    store = make_store()
    if store.list_schedules() != {}:
        fail("a new store has no schedules")
    store.put_schedule("nightly", b'{"cron":"0 3 * * *"}')
    store.put_schedule("hourly", b'{"cron":"0 * * * *"}')
    store.put_schedule("nightly", b'{"cron":"0 4 * * *"}')
    store.create_run("r", b"{}")
    other = make_store(store)
    if other.list_schedules() != {"nightly": b'{"cron":"0 4 * * *"}', "hourly": b'{"cron":"0 * * * *"}'}:
        fail(f"schedules read back as {other.list_schedules()}")
    if other.list_runs() != ["r"]:
        fail(f"schedules must not show up as runs: {other.list_runs()}")
    other.put_schedule("hourly", None)
    other.put_schedule("never-was", None)
    if store.list_schedules() != {"nightly": b'{"cron":"0 4 * * *"}'}:
        fail(f"a deleted schedule must be gone: {store.list_schedules()}")
    refused("a job id that is a path", lambda: store.put_schedule("../x", b"{}"), ConfigError)
