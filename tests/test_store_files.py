from __future__ import annotations

import os

import msgspec
import pytest

from tidemark.store.base import LogRecord
from tidemark.store.conformance import CONFORMANCE_CHECKS
from tidemark.store.files import FileStore


@pytest.fixture
def make_store(tmp_path):
    def make(existing=None):
        if existing is not None:
            return FileStore(existing.root)
        return FileStore(str(tmp_path / f"store{len(os.listdir(tmp_path))}"))

    return make


@pytest.mark.parametrize("check", CONFORMANCE_CHECKS, ids=lambda c: c.__name__)
def test_conformance(check, make_store):
    check(make_store)


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
    from tidemark.errors import ConfigError

    with pytest.raises(ConfigError, match="not valid"):
        make_store().create_run("../escape", b"{}")


def test_reading_never_creates_a_store(tmp_path):
    store = FileStore(str(tmp_path / "nowhere"))
    assert store.list_runs() == []
    assert not (tmp_path / "nowhere").exists()
