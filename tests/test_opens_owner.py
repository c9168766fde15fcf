"""The file store decodes ``owner.json`` once per version, not on every append (issue 10 §5), and still sees every
new owner record at once: another process's claim, a release, a record damaged in place."""

from __future__ import annotations

import os

import msgspec
import pytest

import safepoint.store.file_store as file_store
from safepoint.errors import CorruptRecordError, StaleGenerationError
from safepoint.records import LogRecord, OwnerState
from safepoint.store.file_store import FileStore


def _rec(seq: int) -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(b'{"n":1}'), seq=seq)


class _Counting:
    def __init__(self) -> None:
        self.count = 0

    def decode(self, payload: bytes) -> OwnerState:
        self.count += 1
        return msgspec.json.decode(payload, type=OwnerState)


def test_appends_decode_the_owner_record_once(tmp_path, monkeypatch):
    store = FileStore(str(tmp_path / "s"))
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    counting = _Counting()
    monkeypatch.setattr(file_store, "_owner_decoder", counting)
    for seq in range(1, 51):
        store.append(claim, [_rec(seq)])
    assert counting.count <= 1


def test_a_claim_by_another_handle_fences_the_next_append_at_once(tmp_path):
    store = FileStore(str(tmp_path / "s"))
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    other = FileStore(str(tmp_path / "s"))
    for seq in range(1, 30):
        store.append(claim, [_rec(seq)])
        taken = other.claim("r", f"them{seq}", takeover=True)  # within the same clock tick as the append
        with pytest.raises(StaleGenerationError):
            store.append(claim, [_rec(seq + 1)])
        claim = store.claim("r", f"me{seq}", takeover=True)
        assert claim.generation == taken.generation + 1
        assert store.owner("r").holder == f"me{seq}" and other.owner("r").holder == f"me{seq}"


def test_an_owner_record_damaged_in_place_is_seen(tmp_path):
    store = FileStore(str(tmp_path / "s"))
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(1)])
    path = tmp_path / "s" / "runs" / "r" / "owner.json"
    path.write_bytes(b"\x00garbage{\n")
    with pytest.raises(CorruptRecordError):
        store.append(claim, [_rec(2)])


def test_reading_many_runs_holds_no_file_open_per_run(tmp_path):
    store = FileStore(str(tmp_path / "s"))
    for index in range(40):
        run_id = f"r{index}"
        store.create_run(run_id, b"{}")
        claim = store.claim(run_id, "me")
        store.append(claim, [_rec(1)])
        store.release(claim)  # the writer lets go of what it held for the run
    before = len(os.listdir("/proc/self/fd"))
    reader = FileStore(str(tmp_path / "s"))
    assert all(reader.owner(f"r{index}") is not None for index in range(40))
    assert len(os.listdir("/proc/self/fd")) - before < 5
