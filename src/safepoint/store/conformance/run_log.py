"""The run log part: runs are created, listed and read back; appends keep their order and refuse a fork."""

from __future__ import annotations

import msgspec

from safepoint.errors import RunExistsError, RunNotFoundError, StoreError
from safepoint.store.conformance.support import StoreFactory, fail, record, refused


def check_create_and_list(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r1", b'{"run_id":"r1"}')
    store.create_run("r2", b'{"run_id":"r2"}')
    if sorted(store.list_runs()) != ["r1", "r2"]:
        fail(f"list_runs gave {store.list_runs()}")
    if store.run_header("r1") != b'{"run_id":"r1"}':
        fail("run_header did not return the header as written")
    try:
        store.create_run("r1", b"{}")
    except RunExistsError:
        pass
    else:
        fail("creating a run twice must raise RunExistsError")
    try:
        store.run_header("nope")
    except RunNotFoundError:
        pass
    else:
        fail("an unknown run must raise RunNotFoundError")


def check_append_and_read_in_order(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [record(1, "a"), record(2, "b")])
    store.append(claim, [record(3, "c")], durable=False)
    read = make_store(store).read_log("r")
    texts = [msgspec.json.decode(r.body)["text"] for r in read.records]
    if texts != ["a", "b", "c"] or [r.seq for r in read.records] != [1, 2, 3] or read.problems:
        fail(f"read back {texts} with problems {read.problems}")


def check_append_refuses_a_fork(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [record(1)])
    try:
        store.append(claim, [record(1)])
    except StoreError:
        pass
    else:
        fail("appending a sequence number that is already in the log must be refused")


def check_a_new_run_reads_empty_and_an_unknown_one_is_not_found(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    read = make_store(store).read_log("r")
    if read.records or read.problems:
        fail(f"a new run's log must read empty: {read}")
    refused("reading the log of an unknown run", lambda: store.read_log("nope"), RunNotFoundError)


def check_summary_follows_the_log(make_store: StoreFactory) -> None:
    """The summary given with an append is read back (by another handle) while the log ends where it did; a group
    appended without one leaves none to read (it would describe an older log); a stale writer's summary is refused
    with its group."""
    store = make_store()
    store.create_run("r", b"{}")
    refused("reading the summary of an unknown run", lambda: store.read_summary("nope"), RunNotFoundError)
    if store.read_summary("r") is not None:
        fail("a new run must have no summary")
    claim = store.claim("r", "me")
    store.append(claim, [record(1), record(2)], summary=b'{"n":2}')
    other = make_store(store)
    if other.read_summary("r") != (2, b'{"n":2}'):
        fail(f"the summary written with seq 2 read back as {other.read_summary('r')}")
    store.append(claim, [record(3)], summary=b'{"n":3}')
    if other.read_summary("r") != (3, b'{"n":3}'):
        fail(f"the summary written with seq 3 read back as {other.read_summary('r')}")
    store.append(claim, [record(4)])
    if other.read_summary("r") is not None:
        fail("a summary older than the log's end must not be read back")
    newer = other.claim("r", "them", takeover=True)
    refused("a stale writer's append with a summary", lambda: store.append(claim, [record(5)], summary=b"{}"))
    if other.read_summary("r") is not None or len(other.read_log("r").records) != 4:
        fail("a refused append must leave neither its records nor its summary")
    other.append(newer, [record(5)], summary=b'{"n":5}')
    if store.read_summary("r") != (5, b'{"n":5}'):
        fail(f"the new owner's summary read back as {store.read_summary('r')}")
