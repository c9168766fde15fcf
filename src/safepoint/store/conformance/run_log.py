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
