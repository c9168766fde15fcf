"""bench/storage.py's inputs are what it says they are (a benchmark of the wrong shape measures nothing): each edit
shape differs from its base as described, the history's texts are about 1 KB and never the same slice twice, and
a quick run of its history section prints the figures it promises."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def storage():
    sys.path.insert(0, str(BENCH))
    try:
        import storage as module

        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_each_edit_shape_is_the_edit_it_names(storage):
    found = storage.shapes(32 * 1024)
    base, one = found["one_line"]
    assert len(base) >= 32 * 1024
    assert sum(a != b for a, b in zip(base.splitlines(), one.splitlines(), strict=True)) == 1
    base, scattered = found["scattered"]
    assert sum(a != b for a, b in zip(base.splitlines(), scattered.splitlines(), strict=True)) == 60
    base, reordered = found["reordered"]
    assert sorted(base.splitlines()) == sorted(reordered.splitlines()) and base != reordered
    base, changed = found["binary"]
    assert "\x00" in base or any(ord(c) > 127 for c in base)
    assert sum(a != b for a, b in zip(base, changed, strict=True)) == 60


def test_the_history_texts_are_varied_prose_and_code(storage):
    texts = storage.varied_texts(300)
    assert len(set(texts)) == 300 and all(900 <= len(t) <= 1000 for t in texts)
    assert any("def " in t for t in texts) and sum("def " not in t for t in texts) > 100


def test_the_history_section_reports_against_its_baselines(storage, tmp_path):
    found = storage.history(str(tmp_path), 40, 0)
    assert found["status"] == "completed" and found["raw_text_bytes"] > 35_000
    assert found["store_bytes"] == sum(found["files"].values())
    assert found["messages_plain_json_ratio_to_raw"] > found["messages_ratio_to_raw"] > 0
    assert "langgraph_sqlite" in found
