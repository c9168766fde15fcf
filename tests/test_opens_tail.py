"""The first append of a reopened run reads the log's end, not the whole log (issue 10 §3), and still repairs what
the whole read did: a torn tail, however long, is moved to ``ledger.jsonl.torn``; damaged last records are stepped
over to the last intact seq; a log that is all torn starts again at seq 1."""

from __future__ import annotations

import os

import msgspec
import pytest

import safepoint.store.file_store as file_store
from safepoint.records import LogRecord
from safepoint.store.file_store import FileStore
from safepoint.store.framing import frame


def _rec(seq: int, text: str = "x") -> LogRecord:
    return LogRecord(kind="event", body=msgspec.Raw(msgspec.json.encode({"text": text})), seq=seq)


def _log(store: FileStore) -> str:
    return os.path.join(store.run_dir("r"), "ledger.jsonl")


def _store_with(tmp_path, records: int, text: str = "x") -> FileStore:
    store = FileStore(str(tmp_path / "store"))
    store.create_run("r", b"{}")
    claim = store.claim("r", "me")
    store.append(claim, [_rec(seq, text) for seq in range(1, records + 1)])
    store.release(claim)
    store.close()
    return FileStore(str(tmp_path / "store"))


def _append_next(store: FileStore, seq: int) -> None:
    claim = store.claim("r", "again")
    store.append(claim, [_rec(seq, "next")])


def test_the_first_append_decodes_no_record_but_the_last(tmp_path, monkeypatch):
    store = _store_with(tmp_path, 3000)
    decoded = []
    from safepoint.store import file_summary

    class Counting:
        def decode(self, payload: bytes) -> LogRecord:
            decoded.append(payload)
            return msgspec.json.decode(payload, type=LogRecord)

    with monkeypatch.context() as patch:
        patch.setattr(file_summary, "_record_decoder", Counting())
        patch.setattr(file_store, "unframe_all", None)  # the whole-log scan it used
        _append_next(store, 3001)
    assert len(decoded) == 1
    read = store.read_log("r")
    assert [r.seq for r in read.records] == list(range(1, 3002)) and not read.problems


@pytest.mark.parametrize("torn", [b'deadbeef {"kind":"event","bo', b"0" * 20_000, b"\x00" * 9000])
def test_a_torn_tail_of_any_length_is_moved_aside(tmp_path, torn):
    store = _store_with(tmp_path, 50, "y" * 300)
    with open(_log(store), "ab") as handle:
        handle.write(torn)
    _append_next(store, 51)
    read = store.read_log("r")
    assert [r.seq for r in read.records] == list(range(1, 52)) and not read.problems
    with open(_log(store) + ".torn", "rb") as handle:
        assert torn in handle.read()


def test_damaged_last_records_are_stepped_over(tmp_path):
    store = _store_with(tmp_path, 10)
    with open(_log(store), "ab") as handle:
        handle.write(b"00000000 " + msgspec.json.encode(_rec(11)) + b"\n")  # fails its checksum
        handle.write(frame(b"not json at all"))
    _append_next(store, 11)  # the damaged one's seq is taken again: readers report the damage
    read = store.read_log("r")
    assert [r.seq for r in read.records] == [*range(1, 12)]
    assert [p.kind for p in read.problems] == ["corrupt", "corrupt"]


def test_a_log_that_is_all_torn_starts_again(tmp_path):
    store = _store_with(tmp_path, 0)
    with open(_log(store), "wb") as handle:
        handle.write(b'0badc0de {"kind":"ev')
    _append_next(store, 1)
    read = store.read_log("r")
    assert [r.seq for r in read.records] == [1] and not read.problems
