"""The suite every store backend must pass. A backend's test module does::

    from tidemark.store.conformance import CONFORMANCE_CHECKS

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.__name__)
    def test_conformance(check, make_store):
        check(make_store)

``make_store()`` returns a fresh, empty store each time it is called with no argument, and a second handle on
the same store (as another process would open it) when called with the first one.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from tidemark.errors import RunExistsError, RunLockedError, RunNotFoundError, StaleGenerationError, StoreError
from tidemark.store.base import LogRecord, Store

StoreFactory = Callable[..., Store]


def _record(seq: int, text: str = "x", kind: str = "event") -> LogRecord:
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq, gen=0)


def _fail(message: str) -> None:
    raise AssertionError(message)


def check_create_and_list(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r1", b'{"run_id":"r1"}')
    store.create_run("r2", b'{"run_id":"r2"}')
    if sorted(store.list_runs()) != ["r1", "r2"]:
        _fail(f"list_runs gave {store.list_runs()}")
    if store.run_header("r1") != b'{"run_id":"r1"}':
        _fail("run_header did not return the header as written")
    try:
        store.create_run("r1", b"{}")
    except RunExistsError:
        pass
    else:
        _fail("creating a run twice must raise RunExistsError")
    try:
        store.run_header("nope")
    except RunNotFoundError:
        pass
    else:
        _fail("an unknown run must raise RunNotFoundError")


def check_append_and_read_in_order(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_record(1, "a"), _record(2, "b")])
    store.append(claim, [_record(3, "c")], durable=False)
    read = make_store(store).read_log("r")
    texts = [msgspec.json.decode(r.body)["text"] for r in read.records]
    if texts != ["a", "b", "c"] or [r.seq for r in read.records] != [1, 2, 3] or read.problems:
        _fail(f"read back {texts} with problems {read.problems}")


def check_append_refuses_a_fork(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_record(1)])
    try:
        store.append(claim, [_record(1)])
    except StoreError:
        pass
    else:
        _fail("appending a sequence number that is already in the log must be refused")


def check_generation_fencing(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    store.append(old, [_record(1)])
    other = make_store(store)
    try:
        other.claim("r", "second")
    except RunLockedError:
        pass
    else:
        _fail("claiming a run whose owner is alive must raise RunLockedError")
    new = other.claim("r", "second", takeover=True)
    if new.generation <= old.generation:
        _fail("a takeover must raise the generation")
    try:
        store.append(old, [_record(2, "stale")])
    except StaleGenerationError:
        pass
    else:
        _fail("a write under a stale generation must be refused")
    other.append(new, [_record(2, "fresh")])
    texts = [msgspec.json.decode(r.body)["text"] for r in other.read_log("r").records]
    if "stale" in texts or texts[-1] != "fresh":
        _fail(f"the stale write leaked into the log: {texts}")


def check_release_allows_claim(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    first = store.claim("r", "first")
    store.release(first)
    second = make_store(store).claim("r", "second")
    if second.generation != first.generation + 1:
        _fail("each claim must increment the generation by one")


def check_artifacts(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    ref = store.put_artifact(claim, "call_1.stdout.txt", b"out" * 1000)
    if store.get_artifact("r", ref) != b"out" * 1000:
        _fail("artifact bytes changed")
    if store.put_artifact(claim, "call_1.stdout.txt", b"out" * 1000) != ref:
        _fail("the same artifact stored twice must give the same ref")


def check_trace(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.trace("r", [b'{"event":"a"}', b'{"event":"b"}'])
    if list(store.read_trace("r")) != [b'{"event":"a"}', b'{"event":"b"}']:
        _fail("trace lines changed")


CONFORMANCE_CHECKS = (
    check_create_and_list,
    check_append_and_read_in_order,
    check_append_refuses_a_fork,
    check_generation_fencing,
    check_release_allows_claim,
    check_artifacts,
    check_trace,
)
