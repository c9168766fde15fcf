"""The PostgreSQL claim in one statement (``store.postgres_claims``): it writes what the explicit section writes
(``ownership.next_owner``'s record), its lock timeout holds inside the one statement and ends with it, and a
supervisor's SKIP LOCKED claim never waits. The round trips are pinned in test_pg_write_path.py."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime

import msgspec
import psycopg
import pytest

from safepoint.errors import RunLockedError
from safepoint.records import OwnerState, RecoveryIdentity
from safepoint.store import postgres_claims
from safepoint.store.postgres import PostgresStore

from .conftest import database_names

TIMES = ("active_at", "claimed_at", "heartbeat_at", "terminal_at", "host")


@pytest.fixture
def store(pg_server):
    made = PostgresStore(pg_server.create_database(f"t{next(database_names)}"), pool_size=1)
    yield made
    made.close()


def owner(store: PostgresStore, run_id: str) -> OwnerState:
    found = store.owner(run_id)
    assert found is not None
    return found


def without_times(state: OwnerState) -> dict[str, object]:
    fields = msgspec.structs.asdict(state)
    return {k: v for k, v in fields.items() if k not in TIMES}


def test_a_claim_in_one_statement_writes_what_the_explicit_section_writes(store):
    """Run "fast" goes through the one statement (never claimed, then released), run "slow" through the section
    (a takeover always does): every field but the times is the same, and the times follow the same rules."""
    identity = {
        run: RecoveryIdentity(recovery_class="scheduled", owner_id=f"job-{run}", agent_id=run, message_id="m1")
        for run in ("fast", "slow")
    }
    states: dict[str, list[OwnerState]] = {"fast": [], "slow": []}
    for run in ("fast", "slow"):
        takeover = run == "slow"
        store.create_run(run, b"{}")
        first = store.claim(run, "me", identity=identity[run], takeover=takeover)
        states[run].append(owner(store, run))
        store.close_owner(first, "completed")
        store.release(first)
        again = store.claim(run, "me", takeover=takeover)  # released: the identity and the close are kept
        states[run].append(owner(store, run))
        store.release(again)
        store.claim(run, "me", reopen=True, takeover=takeover)  # reopened: the close is cleared, active_at anew
        states[run].append(owner(store, run))
    for fast, slow in zip(states["fast"], states["slow"], strict=True):
        named = {"owner_id": "-", "agent_id": "-"}  # each run its own
        assert without_times(fast) | named == without_times(slow) | named
        assert fast.owner_id == "job-fast" and fast.pid == os.getpid() and fast.host == slow.host
    first, kept, reopened = states["fast"]
    assert (first.generation, kept.generation, reopened.generation) == (1, 2, 3)
    assert first.recovery_class == "scheduled" and first.message_id == "m1" and first.lease_ms == 30_000
    assert kept.terminal_status == "completed" and kept.terminal_at is not None
    assert kept.active_at == first.active_at and not kept.released
    assert reopened.terminal_at is None and reopened.terminal_status is None
    assert reopened.active_at == reopened.claimed_at != first.active_at
    # The stored holder_state JSON too (read by heartbeats and migrations, not only through owner()).
    with psycopg.connect(store.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT agent_id, convert_from(holder_state, 'UTF8')::jsonb FROM safepoint.recovery_owners ORDER BY 1"
        ).fetchall()
    stored = {
        run: {k: v for k, v in held.items() if k not in TIMES} | {"owner_id": "-", "agent_id": "-"}
        for run, held in rows
    }
    assert stored["fast"] == stored["slow"]
    # The heartbeat and the lease are the database's clock, as the section writes them.
    with psycopg.connect(store.url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lease_until - clock_timestamp() FROM safepoint.recovery_owners WHERE agent_id = 'fast'"
        ).fetchone()
    assert row is not None and 25 < row[0].total_seconds() <= 30


def test_the_lock_timeout_holds_inside_the_one_statement_and_ends_with_it(store, monkeypatch):
    monkeypatch.setattr(postgres_claims, "CLAIM_LOCK_TIMEOUT", 0.3)
    store.create_run("r", b"{}")
    store.release(store.claim("r", "me"))
    with psycopg.connect(store.url) as stuck:
        stuck.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")  # stopped mid-write
        with pytest.raises(RunLockedError, match="does not let go"):
            store.claim("r", "other")
        assert store.try_claim("r", "daemon") is None  # SKIP LOCKED: not waited for at all
        stuck.rollback()
    assert store.claim("r", "other").generation == 2
    with store._pool.connection() as conn:  # type: ignore[union-attr]  # the pool is open: the store claimed
        row = conn.execute("SHOW lock_timeout").fetchone()
    assert row == ("0",)  # the statement's own transaction set it; the connection's other work never waits on it


def test_a_dead_owner_is_judged_by_the_section_and_a_live_one_refused(store):
    store.create_run("r", b"{}")
    store.claim("r", "me")
    with pytest.raises(RunLockedError, match="owned by live process"):
        store.claim("r", "other")
    # The owner's process is gone (a pid no process has, on this host): the section judges it dead and claims.
    with psycopg.connect(store.url, autocommit=True) as conn:
        conn.execute(
            "UPDATE safepoint.recovery_owners SET holder_state = convert_to(jsonb_set(convert_from(holder_state, "
            "'UTF8')::jsonb, '{pid}', '4194304')::text, 'UTF8') WHERE agent_id = 'r'"
        )
    assert store.claim("r", "other").generation == 2
    assert owner(store, "r").holder == "other"


def test_a_claim_of_a_held_run_refuses_without_waiting_for_its_row_lock(store, monkeypatch):
    """The claim is the UPDATE itself, filtered on a row nobody holds (no locking read before it, whose lock was a
    WAL record of its own): a run a live owner holds is refused at once, even while an append of that owner has
    its row locked, where the locking read waited for it first and then refused (here: after its lock timeout,
    "does not let go")."""
    monkeypatch.setattr(postgres_claims, "CLAIM_LOCK_TIMEOUT", 0.3)
    store.create_run("r", b"{}")
    store.claim("r", "me")
    with psycopg.connect(store.url) as appending:
        appending.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")
        with pytest.raises(RunLockedError, match="owned by live process"):
            store.claim("r", "other")
    assert owner(store, "r").generation == 1 and owner(store, "r").holder == "me"


def test_a_claim_that_waited_while_another_claimed_the_run_is_refused_not_a_second_owner(store):
    """A released run's row is locked by a claim in flight (here by hand, in a transaction that writes what a claim
    writes); a second claim waits for it. When the first commits, the second's update no longer matches (READ
    COMMITTED re-checks the row as it now is), while its snapshot still shows the run released: it must go to
    the explicit section, which finds the new live owner and refuses, never writing a generation of its own."""
    store.create_run("r", b"{}")
    store.release(store.claim("r", "me"))
    outcome: list[BaseException | None] = []
    with psycopg.connect(store.url) as first:
        first.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE")

        def second() -> None:
            try:
                store.claim("r", "other")
                outcome.append(None)
            except BaseException as exc:  # checked below
                outcome.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        with psycopg.connect(store.url, autocommit=True) as watch:  # until the server says the claim waits
            while not watch.execute(
                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone():
                watch.execute("SELECT pg_sleep(0.01)")
        first.execute(
            "UPDATE safepoint.recovery_owners SET released = false, generation = 2, holder_state = convert_to("
            "jsonb_set(jsonb_set(convert_from(holder_state, 'UTF8')::jsonb, '{released}', 'false'), "
            "'{generation}', '2')::text, 'UTF8') WHERE agent_id = 'r'"
        )
        first.commit()
        thread.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], RunLockedError), outcome
    found = owner(store, "r")
    assert found.generation == 2 and not found.released


def test_a_first_claims_record_is_the_callers_with_the_databases_heartbeat(store, monkeypatch):
    """A first claim's owner record is built by the client (the server only puts its own time in as the heartbeat:
    building the record there was more than half the statement's time); a released run's is built by the server
    from the row. Both heartbeats are the database's clock, whatever this host's says (here: the year 2000)."""
    from safepoint.store import ownership

    monkeypatch.setattr(ownership, "now", lambda: "2000-01-01T00:00:00.000000+00:00")
    store.create_run("r", b"{}")
    first = store.claim("r", "me")
    found = owner(store, "r")
    assert found.claimed_at.startswith("2000-") and found.active_at.startswith("2000-")  # the caller's, as before
    assert found.heartbeat_at[:4] == str(datetime.now(UTC).year) and found.message_id is None
    assert (found.generation, found.holder, found.lease_ms, found.released) == (1, "me", 30_000, False)
    store.release(first)
    store.claim("r", "again")
    again = owner(store, "r")
    assert again.heartbeat_at[:4] == str(datetime.now(UTC).year) and again.generation == 2
    assert again.active_at == found.active_at  # kept: the run was not reopened
