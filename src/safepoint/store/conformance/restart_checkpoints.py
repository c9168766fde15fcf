"""The restart checkpoints part: one checkpoint per agent, upserted (seed 003 §1.2), and terminal events at most
once per key (§1.3); every write fenced."""

from __future__ import annotations

import msgspec

from safepoint.errors import RunNotFoundError, StoreError
from safepoint.store.conformance.support import StoreFactory, fail, refused, restart_checkpoint, terminal_event
from safepoint.store.ownership import now


def check_restart_checkpoint_upsert_read_delete_list(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("a", b"{}")
    store.create_run("b", b"{}")
    if store.read_restart_checkpoint("a") is not None or store.list_restart_checkpoints():
        fail("a new run has no restart checkpoint")
    claim = store.claim("a", "me")
    store.upsert_restart_checkpoint(claim, restart_checkpoint("a", 1))
    store.upsert_restart_checkpoint(claim, restart_checkpoint("a", 2))  # replaces, never appends
    read = make_store(store).read_restart_checkpoint("a")
    if read is None or not read.intact or read.data != restart_checkpoint("a", 2):
        fail(f"the restart checkpoint must read back as the last one written, intact: {read}")
    odd = b'{"not":"a checkpoint"}'  # stored as given: judging it is recovery's job (invalid_recovery_descriptor)
    claim_b = store.claim("b", "me")
    store.upsert_restart_checkpoint(claim_b, odd)
    read = store.read_restart_checkpoint("b")
    if read is None or not read.intact or read.data != odd:
        fail(f"a descriptor that does not decode must still read back byte for byte: {read}")
    if store.list_restart_checkpoints() != ["a", "b"]:
        fail(f"list_restart_checkpoints gave {store.list_restart_checkpoints()}")
    store.delete_restart_checkpoint(claim)
    store.delete_restart_checkpoint(claim)  # a no-op the second time
    if make_store(store).read_restart_checkpoint("a") is not None or store.list_restart_checkpoints() != ["b"]:
        fail("a deleted restart checkpoint must be gone")
    refused("reading the checkpoint of an unknown run", lambda: store.read_restart_checkpoint("nope"), RunNotFoundError)


def check_new_writes_are_fenced(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    store.upsert_restart_checkpoint(old, restart_checkpoint("r", 1))
    stale_event = terminal_event(old, store, "stale")
    other = make_store(store)
    new = other.claim("r", "second", takeover=True)
    refused(
        "a stale restart checkpoint upsert", lambda: store.upsert_restart_checkpoint(old, restart_checkpoint("r", 9))
    )
    refused("a stale restart checkpoint delete", lambda: store.delete_restart_checkpoint(old))
    refused("a stale close_owner", lambda: store.close_owner(old, "closed by a stale writer"))
    refused("a stale terminal event", lambda: store.record_terminal_event(old, stale_event))
    read = other.read_restart_checkpoint("r")
    owner = other.owner("r")
    if read is None or read.data != restart_checkpoint("r", 1):
        fail(f"a stale writer changed the restart checkpoint: {read}")
    if owner is None or owner.terminal_at is not None or owner.generation != new.generation:
        fail(f"a stale writer changed the owner: {owner}")
    if other.terminal_events("r"):
        fail("a stale writer recorded a terminal event")
    other.release(new)
    refused("a write after release", lambda: other.upsert_restart_checkpoint(new, restart_checkpoint("r", 2)))


def check_terminal_events_are_recorded_once(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.create_run("quiet", b"{}")
    claim = store.claim("r", "me")
    first = terminal_event(claim, store, "closed", '{"why":"restart"}')
    if not store.record_terminal_event(claim, first):
        fail("a new terminal event must be recorded")
    again = msgspec.structs.replace(first, created_at=now(), payload_json='{"why":"again"}')
    if make_store(store).record_terminal_event(claim, again):
        fail("a terminal event with the same key must not be recorded twice")
    reaped = terminal_event(claim, store, "reaped")
    if not store.record_terminal_event(claim, reaped):
        fail("another event_type is another event")
    store.release(claim)
    later = store.claim("r", "me")
    next_generation = terminal_event(later, store, "closed")
    if not store.record_terminal_event(later, next_generation):
        fail("the same event_type under a new generation is another event")
    events = make_store(store).terminal_events("r")
    if events != [first, reaped, next_generation]:
        fail(f"terminal events read back as {events}")
    if store.terminal_events("quiet"):
        fail("another run's terminal events leaked")
    foreign = msgspec.structs.replace(next_generation, owner_id="someone-else")
    refused("a terminal event naming another owner", lambda: store.record_terminal_event(later, foreign), StoreError)
    zoneless = msgspec.structs.replace(next_generation, event_type="x", created_at="2024-01-01T00:00:00")
    refused(
        "a terminal event created_at without a zone", lambda: store.record_terminal_event(later, zoneless), StoreError
    )
    refused("terminal events of an unknown run", lambda: store.terminal_events("nope"), RunNotFoundError)
