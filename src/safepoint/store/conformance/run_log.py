"""The run log part: runs are created, listed and read back; appends keep their order and refuse a fork."""

from __future__ import annotations

import functools

import msgspec

from safepoint.errors import CorruptRecordError, RunExistsError, RunNotFoundError, StoreError
from safepoint.store.conformance.support import (
    StoreFactory,
    fail,
    record,
    refused,
    restart_checkpoint,
    terminal_event,
)


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


def check_delete_run_removes_everything_the_run_owns(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b'{"run_id":"r"}')
    store.create_run("kept", b'{"run_id":"kept"}')
    old = store.claim("r", "first")
    other = make_store(store)
    claim = other.claim("r", "second", takeover=True)
    other.append(claim, [record(1, "a"), record(2, "b", kind="checkpoint")])
    other.post_control("r", b'{"type":"cancel"}')
    ref = other.put_artifact(claim, "out.txt", b"out" * 100)
    other.upsert_restart_checkpoint(claim, restart_checkpoint("r"))
    other.record_terminal_event(claim, terminal_event(claim, other))
    other.trace("r", [b'{"event":"a"}'])
    refused("deleting a run with neither a claim nor force", lambda: other.delete_run("r"), StoreError)
    refused("a stale delete_run", lambda: store.delete_run("r", claim=old))
    if other.read_log("r").records == [] or "r" not in other.list_runs():
        fail("a refused delete_run must leave the run as it was")
    other.delete_run("r", claim=claim)
    for handle in (other, make_store(store)):
        if handle.list_runs() != ["kept"]:
            fail(f"a deleted run is still listed: {handle.list_runs()}")
        refused("reading a deleted run's header", functools.partial(handle.run_header, "r"), RunNotFoundError)
        refused("reading a deleted run's log", functools.partial(handle.read_log, "r"), RunNotFoundError)
        refused("claiming a deleted run", functools.partial(handle.claim, "r", "third"), RunNotFoundError)
    if "r" in store.list_restart_checkpoints():
        fail("a deleted run's restart checkpoint is still listed")
    refused("deleting a run that is not there", lambda: store.delete_run("r", force=True), RunNotFoundError)
    # Its id is free, and a run made under it starts with nothing of the old one.
    store.create_run("r", b'{"run_id":"r"}')
    fresh = store.claim("r", "again")
    leftovers = {
        "log": store.read_log("r").records,
        "control": store.read_control("r"),
        "restart checkpoint": store.read_restart_checkpoint("r"),
        "terminal events": store.terminal_events("r"),
        "trace": list(store.read_trace("r")),
    }
    if any(leftovers.values()):
        fail(f"a run made again under a deleted run's id holds the old one's records: {leftovers}")
    refused("reading a deleted run's artifact", lambda: store.get_artifact("r", ref), CorruptRecordError)
    store.append(fresh, [record(1, "new")])
    # Forced: nobody holds a claim (the run is left to a person), and the other run is untouched.
    store.delete_run("r", force=True)
    if store.list_runs() != ["kept"] or store.run_header("kept") != b'{"run_id":"kept"}':
        fail("a forced delete_run must remove that run and only that run")


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
