from __future__ import annotations

import fcntl
import os
import threading

import msgspec
import pytest

from safepoint.records import LogRecord
from safepoint.store.conformance import (
    CONFORMANCE_CHECKS,
    PARTS,
    check_id,
    restart_checkpoint,
    terminal_event,
    validate,
)
from safepoint.store.file_store import FileStore
from safepoint.store.framing import frame
from safepoint.store.names import artifact_file, artifact_ref


@pytest.fixture
def make_store(tmp_path):
    def make(existing=None):
        if existing is not None:
            return FileStore(existing.root)
        return FileStore(str(tmp_path / f"store{len(os.listdir(tmp_path))}"))

    return make


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=check_id)
def test_conformance(check, make_store):
    check(make_store)


class _Careless(FileStore):
    """Two broken promises: a heartbeat that skips the generation check, an artifact written without fencing."""

    def heartbeat(self, claim):
        with self._owner_section(claim.run_id) as (handle, current):
            self._write_owner_txn(handle, claim.run_id, current)

    def put_artifact(self, claim, name, data):
        filename, digest = artifact_file(name, data)
        self._put_artifact_txn(None, claim.run_id, filename, digest, data)
        return artifact_ref(filename, digest)


def test_validate_reports_each_part_and_finds_each_broken_promise(tmp_path):
    def factory(cls):
        def make(existing=None):
            if existing is not None:
                return cls(existing.root)
            return cls(str(tmp_path / f"{cls.__name__}{len(os.listdir(tmp_path))}"))

        return make

    good = validate(factory(FileStore))
    assert good.passed_all(), good.render()
    assert [part.part for part in good.parts] == [part.name for part in PARTS]
    assert "restart_checkpoints" in good.render() and "every part passes" in good.render()

    bad = validate(factory(_Careless), name="careless")
    assert not bad.passed_all()
    assert {part.part for part in bad.parts if not part.passed} == {"ownership", "artifacts"}
    failed = bad.failures()
    assert len(failed) == 2, failed
    assert "stale heartbeat" in failed[0] and "stale put_artifact" in failed[1]
    assert "NOT conformant" in bad.render()


def _rec(seq, text="x", kind="event"):
    return LogRecord(kind=kind, body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq)


def _log_path(store, run_id="r"):
    return os.path.join(store.run_dir(run_id), "ledger.jsonl")


def test_torn_tail_is_reported_then_quarantined_not_lost(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a"), _rec(2, "b")])
    with open(_log_path(store), "ab") as handle:
        handle.write(b'deadbeef {"kind":"event","bo')  # a write cut short by a crash
    read = store.read_log("r")
    assert [r.seq for r in read.records] == [1, 2]
    assert [p.kind for p in read.problems] == ["torn"]
    store.release(claim)
    again = make_store(store)
    claim = again.claim("r", "me")
    again.append(claim, [_rec(3, "c")])
    read = again.read_log("r")
    assert [r.seq for r in read.records] == [1, 2, 3] and not read.problems
    with open(_log_path(store) + ".torn", "rb") as handle:
        assert b'"bo' in handle.read()


def _half_appended(store, seq, text):
    """Stand in for an appender mid-write: the log's exclusive lock held and part of a record written. Returns the
    fd (still locked) and the rest of the record."""
    line = frame(msgspec.json.encode(_rec(seq, text)))
    fd = os.open(_log_path(store), os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, line[:12])
    return fd, line[12:]


def test_a_reader_waits_for_an_append_in_flight_instead_of_calling_it_torn(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a")])
    fd, rest = _half_appended(store, 2, "b")
    result = {}
    reader = threading.Thread(target=lambda: result.update(read=make_store(store).read_log("r")))
    try:
        reader.start()
        reader.join(timeout=0.3)
        assert reader.is_alive(), f"the reader did not wait for the append in flight: {result}"
        os.write(fd, rest)
    finally:
        os.close(fd)  # closing lets go of the lock, as the appender's unlock would
    reader.join(timeout=30)
    read = result["read"]
    assert [r.seq for r in read.records] == [1, 2] and not read.problems


def test_a_reader_facing_a_writer_stopped_mid_append_says_so(make_store, monkeypatch):
    from safepoint.errors import StoreError
    from safepoint.store import file_store as files

    monkeypatch.setattr(files, "APPEND_WAIT_TIMEOUT", 0.2)
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a")])
    fd, _ = _half_appended(store, 2, "b")
    try:
        with pytest.raises(StoreError, match="in the middle of an append"):
            make_store(store).read_log("r")
    finally:
        os.close(fd)
    read = store.read_log("r")  # the writer is gone and its record unfinished: a torn tail, at once
    assert [r.seq for r in read.records] == [1] and [p.kind for p in read.problems] == ["torn"]


def test_an_append_facing_a_reader_stopped_under_the_log_lock_says_so_and_writes_nothing(make_store, monkeypatch):
    from safepoint.errors import StoreError
    from safepoint.store import file_store as files

    monkeypatch.setattr(files, "APPEND_WAIT_TIMEOUT", 0.2)
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a")])
    fd = os.open(_log_path(store), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a reader stopped while it reads the log again
        with pytest.raises(StoreError, match="a reader holds the log's lock"):
            store.append(claim, [_rec(2, "b")])
    finally:
        os.close(fd)
    assert [r.seq for r in store.read_log("r").records] == [1]
    store.append(claim, [_rec(2, "b")])
    assert [r.seq for r in store.read_log("r").records] == [1, 2]


def test_corrupt_record_in_the_middle_is_reported_as_damage_and_a_gap(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1, "a"), _rec(2, "bbbb"), _rec(3, "c")])
    path = _log_path(store)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data.replace(b"bbbb", b"bxbb"))
    read = store.read_log("r")
    assert [r.seq for r in read.records] == [1, 3]
    assert sorted(p.kind for p in read.problems) == ["corrupt", "gap"]


def test_checkpoint_index_points_at_checkpoint_records(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1), _rec(2, kind="checkpoint"), _rec(3), _rec(4, kind="checkpoint")])
    offsets = store.checkpoint_offsets("r")
    assert [seq for seq, _ in offsets] == [2, 4]
    with open(_log_path(store), "rb") as handle:
        data = handle.read()
    for seq, offset in offsets:
        assert b'"seq":%d' % seq in data[offset : data.index(b"\n", offset)]


def test_bad_run_id_is_refused_with_a_clear_message(make_store):
    from safepoint.errors import ConfigError

    with pytest.raises(ConfigError, match="not valid"):
        make_store().create_run("../escape", b"{}")


def test_reading_never_creates_a_store(tmp_path):
    store = FileStore(str(tmp_path / "nowhere"))
    assert store.list_runs() == []
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------------- restart checkpoint, events, control


def _checkpoint_path(store, run_id="r"):
    return os.path.join(store.run_dir(run_id), "restart_checkpoint.json")


def _claimed_with_checkpoint(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.upsert_restart_checkpoint(claim, restart_checkpoint("r"))
    return store, claim


def test_a_cut_short_restart_checkpoint_reads_as_not_intact(make_store):
    store, _ = _claimed_with_checkpoint(make_store)
    path = _checkpoint_path(store)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])
    read = store.read_restart_checkpoint("r")
    assert read is not None and not read.intact and "cut short" in read.detail
    assert store.list_restart_checkpoints() == ["r"]  # still there to be judged (partial_recovery_descriptor)


def test_a_bit_flipped_restart_checkpoint_reads_as_not_intact(make_store):
    store, _ = _claimed_with_checkpoint(make_store)
    path = _checkpoint_path(store)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data.replace(b"reaction_loop", b"reaction_lOop", 1))
    read = store.read_restart_checkpoint("r")
    assert read is not None and not read.intact and "checksum" in read.detail


def test_a_restart_checkpoint_is_one_framed_line_and_no_temp_file_is_left(make_store):
    store, claim = _claimed_with_checkpoint(make_store)
    store.upsert_restart_checkpoint(claim, b'{"pretty":\n  "json"}\n')  # a newline inside a whole-file record is fine
    read = store.read_restart_checkpoint("r")
    assert read is not None and read.intact and read.data == b'{"pretty":\n  "json"}\n'
    assert not [name for name in os.listdir(store.run_dir("r")) if name.startswith(".tmp-")]


def _control_path(store, run_id="r"):
    return os.path.join(store.run_dir(run_id), "control.jsonl")


def test_a_torn_control_tail_is_skipped_by_readers_and_repaired_by_the_next_post(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    assert store.post_control("r", b'{"n":1}') == 1
    assert store.post_control("r", b'{"n":2}') == 2
    with open(_control_path(store), "ab") as handle:
        handle.write(b'0badf00d {"n":3, "cut')  # a post killed mid-write: never acknowledged, so no position
    assert store.read_control("r") == [(1, b'{"n":1}'), (2, b'{"n":2}')]
    with open(_control_path(store), "rb") as handle:
        assert handle.read().endswith(b'"cut')  # a reader never cuts: the writer may be finishing that line
    other = make_store(store)
    assert other.post_control("r", b'{"n":"after"}') == 3
    assert store.read_control("r") == [(1, b'{"n":1}'), (2, b'{"n":2}'), (3, b'{"n":"after"}')]
    with open(_control_path(store) + ".torn", "rb") as handle:
        assert b'"cut' in handle.read()  # kept aside, never deleted


def test_a_damaged_control_line_is_skipped_and_keeps_its_position(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    for n in range(3):
        store.post_control("r", b'{"n":%d}' % n)
    with open(_control_path(store), "rb") as handle:
        data = handle.read()
    with open(_control_path(store), "wb") as handle:
        handle.write(data.replace(b'{"n":1}', b'{"n":7}'))
    assert store.read_control("r") == [(1, b'{"n":0}'), (3, b'{"n":2}')]
    assert store.post_control("r", b'{"n":3}') == 4


def test_a_control_newline_hit_by_damage_shifts_no_position(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    for n in range(3):
        store.post_control("r", b'{"n":%d}' % n)
    with open(_control_path(store), "rb") as handle:
        data = handle.read()
    with open(_control_path(store), "wb") as handle:
        handle.write(data.replace(b"\n", b"#", 1))  # records 1 and 2 now read as one damaged line
    assert store.read_control("r") == [(3, b'{"n":2}')]
    assert store.post_control("r", b'{"n":3}') == 4


def test_a_control_post_does_not_wait_for_the_run_lock(make_store):
    """A sender gets through while the owner is stuck holding the run's lock (a cancel is wanted most then)."""
    import fcntl

    store = make_store()
    store.create_run("r", b"{}")
    fd = os.open(os.path.join(store.run_dir("r"), "lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert make_store(store).post_control("r", b'{"type":"cancel"}') == 1
    finally:
        os.close(fd)


def _events_path(store, run_id="r"):
    return os.path.join(store.run_dir(run_id), "terminal_events.jsonl")


def test_a_torn_terminal_event_is_not_an_event_and_the_next_one_is_recorded_cleanly(make_store):
    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    assert store.record_terminal_event(claim, terminal_event(claim, store, "closed"))
    with open(_events_path(store), "ab") as handle:
        handle.write(b'12345678 {"recovery_class":"root","owner_id":"r","generation":1,"event_type":"reaped"')
    assert [e.event_type for e in store.terminal_events("r")] == ["closed"]
    assert store.record_terminal_event(claim, terminal_event(claim, store, "reaped"))
    assert [e.event_type for e in make_store(store).terminal_events("r")] == ["closed", "reaped"]


def test_a_damaged_terminal_event_is_an_error_not_a_second_chance(make_store):
    from safepoint.errors import CorruptRecordError

    store = make_store()
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.record_terminal_event(claim, terminal_event(claim, store, "closed"))
    with open(_events_path(store), "rb") as handle:
        data = handle.read()
    with open(_events_path(store), "wb") as handle:
        handle.write(data.replace(b"closed", b"cl0sed"))
    with pytest.raises(CorruptRecordError, match="fails its checksum"):
        store.terminal_events("r")
    with pytest.raises(CorruptRecordError, match="fails its checksum"):  # it may be this very event: never twice
        store.record_terminal_event(claim, terminal_event(claim, store, "closed"))


# ---------------------------------------------------------------------------------------------------- schedules


def test_schedules_live_beside_the_runs_and_a_damaged_one_is_an_error(make_store):
    from safepoint.errors import CorruptRecordError

    store = make_store()
    store.put_schedule("nightly", b'{"cron":"0 3 * * *"}')
    store.create_run("r", b"{}")
    assert sorted(os.listdir(store.root)) == [".gitignore", "runs", "schedules"]
    assert store.list_runs() == ["r"]
    path = os.path.join(store.root, "schedules", "nightly.json")
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data.replace(b"3", b"4"))
    with pytest.raises(CorruptRecordError, match="nightly"):
        store.list_schedules()
    store.put_schedule("nightly", None)
    assert store.list_schedules() == {}


def test_reading_schedules_and_checkpoints_never_creates_a_store(tmp_path):
    store = FileStore(str(tmp_path / "nowhere"))
    assert store.list_schedules() == {}
    assert store.list_restart_checkpoints() == []
    store.put_schedule("gone", None)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(
    ("url", "hidden"),
    [
        ("postgresql://alice:s3cret@db/x", "s3cret"),
        ("postgresql://alice@db/x?password=s3cretQ&sslmode=require", "s3cretQ"),
        ("postgresql://alice@db/x?sslmode=require&PASSWORD=s3cretQ", "s3cretQ"),
        ("postgresql://a:p%40ss@db/x?sslpassword=keypw", "keypw"),
    ],
)
def test_a_store_url_is_shown_without_its_password(url, hidden):
    from safepoint.store.names import safe_url

    shown = safe_url(url)
    assert hidden not in shown and "***" in shown
    assert shown.startswith("postgresql://a") and "db/x" in shown
