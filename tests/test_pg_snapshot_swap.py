"""The PostgreSQL view snapshot write (``store.postgres_snapshots``): its bytes are staged without the owner row,
then swapped in fenced. The owner row is free while the bytes travel (appends, heartbeats and claims go on); a
takeover that lands between the upload and the swap refuses the stale owner's snapshot; and no order of a write
against ``delete_run``, a claim or an append deadlocks (real concurrent connections)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import psycopg
import pytest

from safepoint.errors import RunNotFoundError, StaleGenerationError, StoreError
from safepoint.records import Claim, LogRecord
from safepoint.store import postgres_log_after
from safepoint.store.postgres import PostgresStore

from .conftest import wait_for

Reads = postgres_log_after.PostgresLogReads


def _rec(seq: int) -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(b'{"n":%d}' % seq), seq=seq)


@pytest.fixture
def stores(fresh_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    first, second = PostgresStore(fresh_url), PostgresStore(fresh_url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _snapshot_rows(url: str, run_id: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM safepoint.view_snapshots WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return int(str(row[0]))


def _deadlocks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(str(row[0]))


def test_the_owner_row_is_free_while_a_snapshots_bytes_are_written(stores, fresh_url, monkeypatch):
    """Inside the snapshot's upload (its row inserted, not committed), the owner row can be locked at once
    (NOWAIT), and another handle appends, heartbeats and reads the run; the snapshot is then the one read. The
    old write locked the owner row for its whole transaction (every append of the run waited behind it)."""
    store, other = stores
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1)])
    seen: list[str] = []
    real = Reads._put_view_snapshot_txn

    def upload(self: Any, handle: Any, run_id: str, data: bytes, seq: int) -> None:
        real(self, handle, run_id, data, seq)
        with psycopg.connect(fresh_url, autocommit=True) as probe, probe.transaction():
            probe.execute("SELECT 1 FROM safepoint.recovery_owners WHERE agent_id = 'r' FOR UPDATE NOWAIT")
        other.append(claim, [_rec(2)])  # the same claim from another connection: the run's next call
        other.heartbeat(claim)
        seen.append("free")

    monkeypatch.setattr(Reads, "_put_view_snapshot_txn", upload)
    store.put_view_snapshot(claim, b"view at 1", seq=1)
    assert seen == ["free"]
    assert store.read_view_snapshot("r") == b"view at 1" and store.view_snapshot_seq("r") == 1
    assert [r.seq for r in store.read_log("r").records] == [1, 2]


def test_a_takeover_between_the_upload_and_the_swap_refuses_the_stale_snapshot(stores, fresh_url, monkeypatch):
    """The stale owner's bytes were staged while it still owned the run; the takeover commits before its swap: the
    write is refused (StaleGenerationError), the snapshot read stays the one the run had, and the new owner's next
    write replaces it and removes the stale staged row."""
    store, other = stores
    store.create_run("r", b"{}")
    old = store.claim("r", "old")
    store.append(old, [_rec(1), _rec(2)])
    store.put_view_snapshot(old, b"view at 1", seq=1)
    taken: list[Claim] = []
    real_swap = Reads._swap_view_snapshot

    def swap(self: Any, claim: Claim, key: int) -> bool:
        if not taken:
            taken.append(other.claim("r", "new", takeover=True))
        return real_swap(self, claim, key)

    monkeypatch.setattr(Reads, "_swap_view_snapshot", swap)
    with pytest.raises(StaleGenerationError):
        store.put_view_snapshot(old, b"stale view at 2", seq=2)
    assert other.read_view_snapshot("r") == b"view at 1" and other.view_snapshot_seq("r") == 1
    assert _snapshot_rows(fresh_url, "r") == 2  # the stale staged row, never read
    other.put_view_snapshot(taken[0], b"new view at 2", seq=2)
    assert other.read_view_snapshot("r") == b"new view at 2"
    assert _snapshot_rows(fresh_url, "r") == 1
    # The same bytes staged again by the stale owner (same key) change nothing read, and are refused.
    monkeypatch.setattr(Reads, "_swap_view_snapshot", real_swap)
    with pytest.raises(StaleGenerationError):
        store.put_view_snapshot(old, b"new view at 2", seq=2)
    assert other.read_view_snapshot("r") == b"new view at 2"


def test_delete_run_while_a_snapshot_is_staged_waits_and_does_not_deadlock(stores, fresh_url, monkeypatch):
    """The worst order: the upload holds the run's row (its foreign key) uncommitted while ``delete_run`` has taken
    the owner row and waits for the run's row. The upload commits, the delete goes through, the swap finds the run
    gone; no deadlock (the server's own count)."""
    store, other = stores
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1)])
    before = _deadlocks(fresh_url)
    errors: list[BaseException] = []

    def waiting_delete() -> bool:
        with psycopg.connect(fresh_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
        return row is not None and int(str(row[0])) > 0

    real = Reads._put_view_snapshot_txn

    def upload(self: Any, handle: Any, run_id: str, data: bytes, seq: int) -> None:
        real(self, handle, run_id, data, seq)

        def delete() -> None:
            try:
                other.delete_run("r", force=True)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        deleting.start_thread(delete)
        wait_for(waiting_delete, "delete_run waiting for the upload's lock")

    class Deleting:
        thread: threading.Thread | None = None

        def start_thread(self, target: Any) -> None:
            self.thread = threading.Thread(target=target)
            self.thread.start()

    deleting = Deleting()
    monkeypatch.setattr(Reads, "_put_view_snapshot_txn", upload)
    with pytest.raises(StoreError) as refused:
        store.put_view_snapshot(claim, b"view at 1", seq=1)
    assert deleting.thread is not None
    deleting.thread.join()
    assert not errors
    assert isinstance(refused.value, RunNotFoundError) or "removed" in str(refused.value)
    assert "deadlock" not in str(refused.value)
    assert _deadlocks(fresh_url) == before
    assert _snapshot_rows(fresh_url, "r") == 0


def test_snapshot_writes_against_appends_claims_and_deletes_never_deadlock(fresh_url):
    """Real concurrent connections, each run raced by four threads: its owner's snapshot writes, appends by the
    same claim, takeover claims, and finally ``delete_run``. Every failure is a refusal (stale, gone), never a
    deadlock, and the server counted none."""
    runs = [f"r{i}" for i in range(6)]
    setup = PostgresStore(fresh_url)
    for run_id in runs:
        setup.create_run(run_id, b"{}")
    setup.close()
    before = _deadlocks(fresh_url)
    failures: list[BaseException] = []

    def guarded(action: Any) -> Any:
        def run() -> None:
            store = PostgresStore(fresh_url, pool_size=2)
            try:
                action(store)
            except BaseException as exc:
                failures.append(exc)
            finally:
                store.close()

        return run

    def refused(exc: StoreError) -> None:
        if not isinstance(exc, StaleGenerationError | RunNotFoundError) and "removed" not in str(exc):
            raise exc

    def race(run_id: str) -> None:
        owner = PostgresStore(fresh_url)
        claim = owner.claim(run_id, "owner")
        owner.append(claim, [_rec(1)])
        start = threading.Barrier(4)

        def snapshots(store: PostgresStore) -> None:
            start.wait()
            for seq in range(1, 9):
                try:
                    store.put_view_snapshot(claim, b"x" * 200_000 + bytes([seq]), seq=seq)
                except StoreError as exc:
                    refused(exc)

        def appends(store: PostgresStore) -> None:
            start.wait()
            for seq in range(2, 30):
                try:
                    store.append(claim, [_rec(seq)])
                except StoreError as exc:
                    refused(exc)
                    return

        def claims(store: PostgresStore) -> None:
            start.wait()
            for _ in range(3):
                try:
                    store.claim(run_id, "taker", takeover=True)
                except StoreError as exc:
                    refused(exc)

        def delete(store: PostgresStore) -> None:
            start.wait()
            try:
                store.delete_run(run_id, force=True)
            except StoreError as exc:
                refused(exc)

        threads = [threading.Thread(target=guarded(f)) for f in (snapshots, appends, claims, delete)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        owner.close()

    for run_id in runs:
        race(run_id)
    assert not failures, failures
    assert _deadlocks(fresh_url) == before
    with psycopg.connect(fresh_url, autocommit=True) as conn:  # each run deleted with its snapshot rows
        assert conn.execute("SELECT count(*) FROM safepoint.view_snapshots").fetchone() == (0,)


def test_migration_11_keeps_a_version_10_snapshot_read_until_the_next_write(empty_url):
    from safepoint.store.log_after import frame_snapshot
    from safepoint.store.postgres import migrate

    assert migrate(empty_url, to=10).after == 10
    with psycopg.connect(empty_url, autocommit=True) as conn:  # what version 10 wrote: one row per run
        conn.execute("INSERT INTO safepoint.runs (run_id, header) VALUES ('r', %s)", (b"x",))
        conn.execute(
            "INSERT INTO safepoint.recovery_owners (recovery_class, owner_id, generation, agent_id) "
            "VALUES ('root', 'r', 0, 'r')"
        )
        conn.execute("INSERT INTO safepoint.view_snapshots VALUES ('r', 3, %s)", (frame_snapshot(b"old view", 3),))
    migrate(empty_url)
    store = PostgresStore(empty_url)
    try:
        assert store.read_view_snapshot("r") == b"old view" and store.view_snapshot_seq("r") == 3
        claim = store.claim("r", "me")
        store.put_view_snapshot(claim, b"new view", seq=4)
        assert store.read_view_snapshot("r") == b"new view"
        assert _snapshot_rows(empty_url, "r") == 1
    finally:
        store.close()
