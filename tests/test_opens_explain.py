"""``explain`` pages its calls (issue 10 §3: at 50,000 calls it listed all of them, 17 s and 1 GB) and reads the
run's log once, its workspace probes included."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Any

import pytest

import safepoint
from safepoint.errors import ConfigError, ExitCode
from tests.conftest import safepoint_in_process


def _run(tmp_path: Any) -> tuple[safepoint.Safepoint, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    tm = safepoint.open(workspace=str(ws))
    run = tm.start("t", run_id="r")
    for n in range(7):
        run.call("write_file", {"path": f"f{n}.txt", "content": f"{n}\n"}, call_id=f"c{n}")
    run.close()
    return tm, ws


def test_a_page_of_calls_is_the_same_slice_of_the_whole(tmp_path):
    tm, _ = _run(tmp_path)
    with closing(tm):
        whole = tm.explain("r")
        assert [c.call_id for c in whole.calls] == [f"c{n}" for n in range(7)]
        page = tm.explain("r", offset=2, limit=3)
        assert page.calls == whole.calls[2:5]
        assert (page.resume_from, page.status, page.needs_decision) == (
            whole.resume_from,
            whole.status,
            whole.needs_decision,
        )
        assert tm.explain("r", offset=6, limit=10).calls == whole.calls[6:]
        assert tm.explain("r", offset=99).calls == []
        with pytest.raises(ConfigError):
            tm.explain("r", offset=-1)


def test_the_cli_pages_and_refuses_a_negative_count(tmp_path):
    tm, ws = _run(tmp_path)
    tm.close()
    done = safepoint_in_process("explain", "r", "--workspace", ws, "--json", "--limit", "2", "--offset", "5")
    assert done.returncode == 0, done.stderr
    assert [c["call_id"] for c in json.loads(done.stdout)["calls"]] == ["c5", "c6"]
    bad = safepoint_in_process("explain", "r", "--workspace", ws, "--limit", "-1")
    assert bad.returncode == ExitCode.USAGE and "Traceback" not in bad.stderr


def test_explain_reads_the_log_once(tmp_path, monkeypatch):
    tm, _ = _run(tmp_path)
    with closing(tm):
        reads: list[str] = []
        real = tm.store.read_log
        monkeypatch.setattr(tm.store, "read_log", lambda run_id: reads.append(run_id) or real(run_id))
        tm.explain("r")
        assert reads == ["r"]
