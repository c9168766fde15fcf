"""A checkpoint, call or conflict the run does not have is bad input: one line naming where to look, exit 2."""

from __future__ import annotations

import pytest

from safepoint.errors import ExitCode

from .conftest import safepoint_in_process

SCENARIO = (
    '{"task": "t", "turns": [{"tool_calls": [{"tool": "write_file", "args": {"path": "a", "content": "x"}}]}, '
    '{"text": "done"}]}'
)


@pytest.fixture
def ran(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "s.json").write_text(SCENARIO)
    done = safepoint_in_process("run", tmp_path / "s.json", "--run-id", "r", "--workspace", ws)
    assert done.returncode == 0, done.stderr
    return ws


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["rollback", "r", "--to", "ckpt_nope"], "safepoint checkpoints"),
        (["restore", "r", "--to", "ckpt_nope"], "safepoint checkpoints"),
        (["compensate", "r", "nope"], "safepoint ledger"),
        (["approve", "r", "nope"], "safepoint ledger"),
        (["resolve", "r", "nothing.txt", "--keep-user"], "safepoint conflicts"),
        (["rollback", "r", "--to", "ckpt_nope", "--dry-run"], "safepoint checkpoints"),
        (["restore", "r", "--to", "ckpt_nope", "--with-files"], "safepoint checkpoints"),
        (["compensate", "r", "nope", "--assume-done"], "safepoint ledger"),
        (["deny", "r", "nope"], "safepoint ledger"),
        (["resume", "r", "--replay", "nope"], "safepoint ledger"),
        (["resume", "r", "--skip", "nope"], "safepoint ledger"),
    ],
)
def test_an_unknown_checkpoint_call_or_conflict_exits_2_in_one_line(ran, args, said):
    done = safepoint_in_process(*args, "--workspace", ran)
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and said in done.stderr and "Traceback" not in done.stderr
