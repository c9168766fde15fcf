"""The ownership part: one writer per run, under a generation that only grows (seed 003 §1.1)."""

from __future__ import annotations

import msgspec

from safepoint.errors import RunLockedError, StaleGenerationError, StoreError
from safepoint.records import RecoveryIdentity
from safepoint.store.base import Store
from safepoint.store.conformance.support import StoreFactory, fail, record, refused


def check_generation_fencing(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    store.append(old, [record(1)])
    other = make_store(store)
    try:
        other.claim("r", "second")
    except RunLockedError:
        pass
    else:
        fail("claiming a run whose owner is alive must raise RunLockedError")
    new = other.claim("r", "second", takeover=True)
    if new.generation <= old.generation:
        fail("a takeover must raise the generation")
    try:
        store.append(old, [record(2, "stale")])
    except StaleGenerationError:
        pass
    else:
        fail("a write under a stale generation must be refused")
    other.append(new, [record(2, "fresh")])
    texts = [msgspec.json.decode(r.body)["text"] for r in other.read_log("r").records]
    if "stale" in texts or texts[-1] != "fresh":
        fail(f"the stale write leaked into the log: {texts}")


def check_release_allows_claim(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    first = store.claim("r", "first")
    store.release(first)
    second = make_store(store).claim("r", "second")
    if second.generation != first.generation + 1:
        fail("each claim must increment the generation by one")


def check_owner_identity_generation_and_terminal_state(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("child", b"{}")
    if store.owner("child") is not None:
        fail("a run never claimed has no owner")
    identity = RecoveryIdentity(recovery_class="subagent", owner_id="parent/call_1", agent_id="child", message_id="m1")
    first = store.claim("child", "p1", identity=identity)
    owner = store.owner("child")
    if owner is None or first.generation != 1 or first.holder != "p1":
        fail(f"the first claim must be generation 1, held by p1: {first}, {owner}")
        return
    seed = (owner.recovery_class, owner.owner_id, owner.agent_id, owner.message_id, owner.generation)
    if seed != ("subagent", "parent/call_1", "child", "m1", 1) or owner.terminal_at is not None:
        fail(f"the owner record does not carry the first claim's identity: {owner}")
    store.release(first)
    other = RecoveryIdentity(owner_id="child", agent_id="child")
    second = make_store(store).claim("child", "p2", identity=other)
    owner = store.owner("child")
    if second.generation != 2 or owner is None or (owner.recovery_class, owner.owner_id) != seed[:2]:
        fail(f"a later claim must raise the generation and keep the first identity: {second}, {owner}")
        return
    active_at = owner.active_at
    store.close_owner(second, "Closed during restart recovery without reporting a result.")
    owner = store.owner("child")
    if (
        owner is None
        or owner.terminal_at is None
        or owner.terminal_status != ("Closed during restart recovery without reporting a result.")
    ):
        fail(f"close_owner must set terminal_at and terminal_status: {owner}")
        return
    terminal_at = owner.terminal_at
    store.release(second)
    third = store.claim("child", "p3")
    owner = store.owner("child")
    if third.generation != 3 or owner is None or owner.terminal_at != terminal_at or owner.active_at != active_at:
        fail(f"a claim must keep the terminal state and active_at: {third}, {owner}")
    fourth = store.claim("child", "p4", takeover=True, reopen=True)
    owner = store.owner("child")
    if fourth.generation != 4 or owner is None or owner.terminal_at is not None or owner.terminal_status is not None:
        fail(f"a reopening claim must clear the terminal state: {fourth}, {owner}")
        return
    if (owner.recovery_class, owner.owner_id, owner.holder) != ("subagent", "parent/call_1", "p4"):
        fail(f"a reopening claim keeps the identity and takes the holder: {owner}")
    refused("an identity naming another agent than the run", lambda: _claim_as_other(store), StoreError)


def _claim_as_other(store: Store) -> None:
    store.create_run("lonely", b"{}")
    store.claim("lonely", "me", identity=RecoveryIdentity(owner_id="x", agent_id="not-lonely"))


def check_heartbeat_is_fenced_and_a_stale_release_changes_nothing(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    store.heartbeat(old)
    other = make_store(store)
    new = other.claim("r", "second", takeover=True)
    before = other.owner("r")
    refused("a stale heartbeat", lambda: store.heartbeat(old))
    store.release(old)  # how a fenced-off process ends: it must not free the run its successor holds
    if other.owner("r") != before:
        fail(f"a stale heartbeat or release changed the owner: {before} became {other.owner('r')}")
    refused("a claim while the new owner holds the run", lambda: make_store(store).claim("r", "third"), RunLockedError)
    other.heartbeat(new)
    beaten = other.owner("r")
    if beaten is None or before is None or beaten.generation != new.generation or beaten.released:
        fail(f"the current owner's heartbeat must keep it the owner: {beaten}")
