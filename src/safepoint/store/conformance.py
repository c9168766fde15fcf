"""The suite every store backend must pass. A backend's test module does::

    from safepoint.store.conformance import CONFORMANCE_CHECKS

    @pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.__name__)
    def test_conformance(check, make_store):
        check(make_store)

``make_store()`` returns a fresh, empty store each time it is called with no argument, and a second handle on
the same store (as another process would open it) when called with the first one.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from safepoint.errors import (
    ConfigError,
    RunExistsError,
    RunLockedError,
    RunNotFoundError,
    StaleGenerationError,
    StoreError,
)
from safepoint.protocol import RecoveryOwnerTerminalEvent, RuntimeRestartCheckpoint
from safepoint.records import Claim, LogRecord, RecoveryIdentity
from safepoint.store.base import Store
from safepoint.store.ownership import now

StoreFactory = Callable[..., Store]


def _record(seq: int, text: str = "x", kind: str = "event") -> LogRecord:
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq, gen=0)


def _fail(message: str) -> None:
    raise AssertionError(message)


def _refused(what: str, action: Callable[[], object], error: type[Exception] = StaleGenerationError) -> None:
    try:
        action()
    except error:
        return
    _fail(f"{what} must raise {error.__name__}")


def restart_checkpoint(run_id: str, turn: int = 1) -> bytes:
    """An encoded restart checkpoint, as the runtime writes one."""
    return msgspec.json.encode(
        RuntimeRestartCheckpoint(
            agent_id=run_id,
            mode="reaction_loop",
            payload_json=f'{{"payload_kind":"reaction_loop","turn":{turn}}}',
            created_at=1_700_000_000_000,
            updated_at=1_700_000_000_000 + turn,
            recovery_class="root",
            recovery_owner_id=run_id,
            execution_config_json='{"generation":1,"model":"m"}',
        )
    )


def terminal_event(
    claim: Claim, store: Store, event_type: str = "closed", payload: str | None = None
) -> RecoveryOwnerTerminalEvent:
    owner = store.owner(claim.run_id)
    if owner is None:
        raise AssertionError("the run has no owner after a claim")
    return RecoveryOwnerTerminalEvent(
        recovery_class=owner.recovery_class,
        owner_id=owner.owner_id,
        generation=claim.generation,
        event_type=event_type,
        created_at=now(),
        payload_json=payload,
    )


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


def check_owner_identity_generation_and_terminal_state(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("child", b"{}")
    if store.owner("child") is not None:
        _fail("a run never claimed has no owner")
    identity = RecoveryIdentity(recovery_class="subagent", owner_id="parent/call_1", agent_id="child", message_id="m1")
    first = store.claim("child", "p1", identity=identity)
    owner = store.owner("child")
    if owner is None or first.generation != 1 or first.holder != "p1":
        _fail(f"the first claim must be generation 1, held by p1: {first}, {owner}")
        return
    seed = (owner.recovery_class, owner.owner_id, owner.agent_id, owner.message_id, owner.generation)
    if seed != ("subagent", "parent/call_1", "child", "m1", 1) or owner.terminal_at is not None:
        _fail(f"the owner record does not carry the first claim's identity: {owner}")
    store.release(first)
    other = RecoveryIdentity(owner_id="child", agent_id="child")
    second = make_store(store).claim("child", "p2", identity=other)
    owner = store.owner("child")
    if second.generation != 2 or owner is None or (owner.recovery_class, owner.owner_id) != seed[:2]:
        _fail(f"a later claim must raise the generation and keep the first identity: {second}, {owner}")
        return
    active_at = owner.active_at
    store.close_owner(second, "Closed during restart recovery without reporting a result.")
    owner = store.owner("child")
    if (
        owner is None
        or owner.terminal_at is None
        or owner.terminal_status != ("Closed during restart recovery without reporting a result.")
    ):
        _fail(f"close_owner must set terminal_at and terminal_status: {owner}")
        return
    terminal_at = owner.terminal_at
    store.release(second)
    third = store.claim("child", "p3")
    owner = store.owner("child")
    if third.generation != 3 or owner is None or owner.terminal_at != terminal_at or owner.active_at != active_at:
        _fail(f"a claim must keep the terminal state and active_at: {third}, {owner}")
    fourth = store.claim("child", "p4", takeover=True, reopen=True)
    owner = store.owner("child")
    if fourth.generation != 4 or owner is None or owner.terminal_at is not None or owner.terminal_status is not None:
        _fail(f"a reopening claim must clear the terminal state: {fourth}, {owner}")
        return
    if (owner.recovery_class, owner.owner_id, owner.holder) != ("subagent", "parent/call_1", "p4"):
        _fail(f"a reopening claim keeps the identity and takes the holder: {owner}")
    _refused("an identity naming another agent than the run", lambda: _claim_as_other(store), StoreError)


def _claim_as_other(store: Store) -> None:
    store.create_run("lonely", b"{}")
    store.claim("lonely", "me", identity=RecoveryIdentity(owner_id="x", agent_id="not-lonely"))


def check_restart_checkpoint_upsert_read_delete_list(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("a", b"{}")
    store.create_run("b", b"{}")
    if store.read_restart_checkpoint("a") is not None or store.list_restart_checkpoints():
        _fail("a new run has no restart checkpoint")
    claim = store.claim("a", "me")
    store.upsert_restart_checkpoint(claim, restart_checkpoint("a", 1))
    store.upsert_restart_checkpoint(claim, restart_checkpoint("a", 2))  # replaces, never appends
    read = make_store(store).read_restart_checkpoint("a")
    if read is None or not read.intact or read.data != restart_checkpoint("a", 2):
        _fail(f"the restart checkpoint must read back as the last one written, intact: {read}")
    odd = b'{"not":"a checkpoint"}'  # stored as given: judging it is recovery's job (invalid_recovery_descriptor)
    claim_b = store.claim("b", "me")
    store.upsert_restart_checkpoint(claim_b, odd)
    read = store.read_restart_checkpoint("b")
    if read is None or not read.intact or read.data != odd:
        _fail(f"a descriptor that does not decode must still read back byte for byte: {read}")
    if store.list_restart_checkpoints() != ["a", "b"]:
        _fail(f"list_restart_checkpoints gave {store.list_restart_checkpoints()}")
    store.delete_restart_checkpoint(claim)
    store.delete_restart_checkpoint(claim)  # a no-op the second time
    if make_store(store).read_restart_checkpoint("a") is not None or store.list_restart_checkpoints() != ["b"]:
        _fail("a deleted restart checkpoint must be gone")
    _refused(
        "reading the checkpoint of an unknown run", lambda: store.read_restart_checkpoint("nope"), RunNotFoundError
    )


def check_new_writes_are_fenced(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    old = store.claim("r", "first")
    store.upsert_restart_checkpoint(old, restart_checkpoint("r", 1))
    stale_event = terminal_event(old, store, "stale")
    other = make_store(store)
    new = other.claim("r", "second", takeover=True)
    _refused(
        "a stale restart checkpoint upsert", lambda: store.upsert_restart_checkpoint(old, restart_checkpoint("r", 9))
    )
    _refused("a stale restart checkpoint delete", lambda: store.delete_restart_checkpoint(old))
    _refused("a stale close_owner", lambda: store.close_owner(old, "closed by a stale writer"))
    _refused("a stale terminal event", lambda: store.record_terminal_event(old, stale_event))
    read = other.read_restart_checkpoint("r")
    owner = other.owner("r")
    if read is None or read.data != restart_checkpoint("r", 1):
        _fail(f"a stale writer changed the restart checkpoint: {read}")
    if owner is None or owner.terminal_at is not None or owner.generation != new.generation:
        _fail(f"a stale writer changed the owner: {owner}")
    if other.terminal_events("r"):
        _fail("a stale writer recorded a terminal event")
    other.release(new)
    _refused("a write after release", lambda: other.upsert_restart_checkpoint(new, restart_checkpoint("r", 2)))


def check_terminal_events_are_recorded_once(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.create_run("quiet", b"{}")
    claim = store.claim("r", "me")
    first = terminal_event(claim, store, "closed", '{"why":"restart"}')
    if not store.record_terminal_event(claim, first):
        _fail("a new terminal event must be recorded")
    again = msgspec.structs.replace(first, created_at=now(), payload_json='{"why":"again"}')
    if make_store(store).record_terminal_event(claim, again):
        _fail("a terminal event with the same key must not be recorded twice")
    reaped = terminal_event(claim, store, "reaped")
    if not store.record_terminal_event(claim, reaped):
        _fail("another event_type is another event")
    store.release(claim)
    later = store.claim("r", "me")
    next_generation = terminal_event(later, store, "closed")
    if not store.record_terminal_event(later, next_generation):
        _fail("the same event_type under a new generation is another event")
    events = make_store(store).terminal_events("r")
    if events != [first, reaped, next_generation]:
        _fail(f"terminal events read back as {events}")
    if store.terminal_events("quiet"):
        _fail("another run's terminal events leaked")
    foreign = msgspec.structs.replace(next_generation, owner_id="someone-else")
    _refused("a terminal event naming another owner", lambda: store.record_terminal_event(later, foreign), StoreError)
    zoneless = msgspec.structs.replace(next_generation, event_type="x", created_at="2024-01-01T00:00:00")
    _refused(
        "a terminal event created_at without a zone", lambda: store.record_terminal_event(later, zoneless), StoreError
    )
    _refused("terminal events of an unknown run", lambda: store.terminal_events("nope"), RunNotFoundError)


def check_control_channel(make_store: StoreFactory) -> None:
    store = make_store()
    store.create_run("r", b"{}")
    store.create_run("s", b"{}")
    if store.read_control("r") != []:
        _fail("a new run has no control records")
    positions = [store.post_control("r", b'{"type":"cancel","n":%d}' % n) for n in range(3)]  # no claim needed
    if positions != [1, 2, 3]:
        _fail(f"control positions must be 1, 2, 3, got {positions}")
    other = make_store(store)
    if other.post_control("r", b'{"n":"from another handle"}') != 4 or other.post_control("s", b"{}") != 1:
        _fail("positions must continue across store handles and count per run")
    expected = [(n + 1, b'{"type":"cancel","n":%d}' % n) for n in range(3)]
    expected.append((4, b'{"n":"from another handle"}'))
    if make_store(store).read_control("r") != expected:
        _fail(f"control records read back as {store.read_control('r')}")
    _refused("posting to an unknown run", lambda: store.post_control("nope", b"{}"), RunNotFoundError)
    _refused("reading control of an unknown run", lambda: store.read_control("nope"), RunNotFoundError)
    _refused("a control record holding a newline", lambda: store.post_control("r", b"{\n}"), StoreError)


def check_schedules(make_store: StoreFactory) -> None:
    store = make_store()
    if store.list_schedules() != {}:
        _fail("a new store has no schedules")
    store.put_schedule("nightly", b'{"cron":"0 3 * * *"}')
    store.put_schedule("hourly", b'{"cron":"0 * * * *"}')
    store.put_schedule("nightly", b'{"cron":"0 4 * * *"}')
    store.create_run("r", b"{}")
    other = make_store(store)
    if other.list_schedules() != {"nightly": b'{"cron":"0 4 * * *"}', "hourly": b'{"cron":"0 * * * *"}'}:
        _fail(f"schedules read back as {other.list_schedules()}")
    if other.list_runs() != ["r"]:
        _fail(f"schedules must not show up as runs: {other.list_runs()}")
    other.put_schedule("hourly", None)
    other.put_schedule("never-was", None)
    if store.list_schedules() != {"nightly": b'{"cron":"0 4 * * *"}'}:
        _fail(f"a deleted schedule must be gone: {store.list_schedules()}")
    _refused("a job id that is a path", lambda: store.put_schedule("../x", b"{}"), ConfigError)


CONFORMANCE_CHECKS = (
    check_create_and_list,
    check_append_and_read_in_order,
    check_append_refuses_a_fork,
    check_generation_fencing,
    check_release_allows_claim,
    check_artifacts,
    check_trace,
    check_owner_identity_generation_and_terminal_state,
    check_restart_checkpoint_upsert_read_delete_list,
    check_new_writes_are_fenced,
    check_terminal_events_are_recorded_once,
    check_control_channel,
    check_schedules,
)
