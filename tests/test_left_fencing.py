"""Every write fenced (issue 11 §8): every store method that takes a ``Claim`` refuses a stale one and writes
nothing, on both stores (the list is read off the ``Store`` contract, so a new fenced write cannot be left out);
and ``put_artifact`` checks the generation and writes under one lock: a takeover waits for a write in flight
instead of slipping in between its check and its write."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from safepoint.errors import CorruptRecordError, StaleGenerationError
from safepoint.protocol import RecoveryOwnerTerminalEvent
from safepoint.records import Claim, LogRecord
from safepoint.store.base import Store
from safepoint.store.conformance.support import restart_checkpoint
from safepoint.store.names import artifact_file, artifact_ref
from safepoint.store.url import open_store

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(params=["file", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path) -> str:
    return request.getfixturevalue("fresh_url") if request.param == "postgres" else f"file:{tmp_path / 'store'}"


@pytest.fixture
def two(url: str) -> Iterator[tuple[Store, Store]]:
    """Two handles on one store: a stale owner's and its successor's."""
    first, second = open_store(url), open_store(url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _event(claim: Claim) -> RecoveryOwnerTerminalEvent:
    return RecoveryOwnerTerminalEvent(
        recovery_class="root", owner_id="r", generation=claim.generation, event_type="late", created_at="now"
    )


def _record(seq: int) -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(b'{"late":true}'), seq=seq)


WRITES: dict[str, Callable[[Store, Claim], Any]] = {
    "append": lambda s, c: s.append(c, [_record(1)]),
    "close_owner": lambda s, c: s.close_owner(c, "late"),
    "heartbeat": lambda s, c: s.heartbeat(c),
    "upsert_restart_checkpoint": lambda s, c: s.upsert_restart_checkpoint(c, restart_checkpoint("r")),
    "delete_restart_checkpoint": lambda s, c: s.delete_restart_checkpoint(c),
    "record_terminal_event": lambda s, c: s.record_terminal_event(c, _event(c)),
    "put_artifact": lambda s, c: s.put_artifact(c, "late.txt", b"late"),
    "put_view_snapshot": lambda s, c: s.put_view_snapshot(c, b"late", seq=1),
    "delete_run": lambda s, c: s.delete_run("r", claim=c),
}
NOT_FENCED = {"release"}  # a stale holder's release is a no-op by contract (how a fenced-off process ends)


def test_every_write_that_takes_a_claim_is_listed_here():
    taking = {
        name
        for name, method in inspect.getmembers(Store, inspect.isfunction)
        if "claim" in inspect.signature(method).parameters and name != "claim"
    }
    assert taking == set(WRITES) | NOT_FENCED


def test_a_stale_claim_is_refused_by_every_write_and_nothing_is_written(two):
    stale_store, new_store = two
    stale_store.create_run("r", b"{}")
    stale = stale_store.claim("r", "first")
    new = new_store.claim("r", "second", takeover=True)
    new_store.upsert_restart_checkpoint(new, restart_checkpoint("r"))
    before = (
        new_store.read_log("r").records,
        new_store.read_restart_checkpoint("r"),
        new_store.terminal_events("r"),
        new_store.owner("r"),
        new_store.read_view_snapshot("r"),
    )
    for name, write in WRITES.items():
        with pytest.raises(StaleGenerationError):
            write(stale_store, stale)
        after = (
            new_store.read_log("r").records,
            new_store.read_restart_checkpoint("r"),
            new_store.terminal_events("r"),
            new_store.owner("r"),
            new_store.read_view_snapshot("r"),
        )
        assert after == before, f"a stale {name} changed the store"
    stale_store.release(stale)  # a no-op: the new owner stays
    assert new_store.owner("r") == before[3]
    with pytest.raises(CorruptRecordError):  # the artifact a stale writer was refused is not there
        new_store.get_artifact("r", artifact_ref(*artifact_file("late.txt", b"late")))


def test_a_takeover_waits_for_an_artifact_write_in_flight(two, monkeypatch):
    """The check and the write are one critical section: held inside the write, the owner keeps a takeover out
    until it is done, so what it wrote was written while it was the owner."""
    owner_store, other = two
    owner_store.create_run("r", b"{}")
    claim = owner_store.claim("r", "first")
    inside, release = threading.Event(), threading.Event()
    original = type(owner_store)._put_artifact_txn  # type: ignore[attr-defined]  # the backend's write hook

    def held(self: Any, *args: Any) -> None:
        inside.set()
        assert release.wait(60)
        original(self, *args)

    monkeypatch.setattr(type(owner_store), "_put_artifact_txn", held)
    writer = threading.Thread(target=owner_store.put_artifact, args=(claim, "out.txt", b"bytes"))
    writer.start()
    assert inside.wait(60)
    taken: list[Claim] = []
    taker = threading.Thread(target=lambda: taken.append(other.claim("r", "second", takeover=True)))
    taker.start()
    taker.join(0.5)  # given time to slip in, it cannot: the owner holds the run's lock
    assert taken == []
    release.set()
    writer.join(60)
    taker.join(60)
    assert [c.generation for c in taken] == [claim.generation + 1]
    assert other.get_artifact("r", artifact_ref(*artifact_file("out.txt", b"bytes"))) == b"bytes"
