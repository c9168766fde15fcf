"""Attacks on issue 9's merge (§2-§4): each test is a broken promise found by a reviewer-attacker, marked xfail
(strict) until it is fixed."""

from __future__ import annotations

import os

import pytest

import safepoint

# ------------------------------------------------------------------------------ special files


def test_write_file_over_a_fifo_never_loses_it(workspace):
    """The user's named pipe `p` (a tool's control pipe): `write_file p` replaces it with a regular file (read_file
    and apply_patch refuse special files, write_file does not), and rollback then *removes* `p` altogether,
    reporting no conflict and nothing unrestorable. The FIFO must be refused, or come back, or be reported."""
    os.mkfifo(workspace / "p")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        result = run.call_result("write_file", {"path": "p", "content": "x"}, call_id="c1")
    plan = tm.rollback_files("r", start, include_uncertain=True)
    said = {u.path for u in plan.unrestorable} | {c.path for c in plan.conflicts}
    import stat

    kept = os.path.lexists(workspace / "p") and stat.S_ISFIFO(os.lstat(workspace / "p").st_mode)
    assert result.status == "failed" or kept or "p" in said, result.observation


# ------------------------------------------------------------------------------ wrong arguments


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("run_command", {"command": "echo", "timeout": 1e308}),
        ("write_file", {"path": ".", "content": "x"}),
        ("write_file", {"path": "sub/..", "content": "x"}),
    ],
    ids=["huge-timeout", "write-root", "write-root-dotdot"],
)
def test_wrong_arguments_are_refused_in_words(workspace, tool, args):
    """§3: "wrong argument types reach the model as raw Python error text". A timeout of 1e308 gives the model
    "OverflowError: cannot convert float infinity to integer"; `write_file .` gives "OSError: [Errno 39]
    Directory not empty: '.../.agent-runtime/runs/r/tmp/.safepoint-....part' -> '...'" (the store's inner paths)."""
    (workspace / "sub").mkdir()
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "failed"
    assert "Error:" not in result.observation and ".agent-runtime" not in result.observation, result.observation


def test_deeply_nested_arguments_are_a_failed_call_not_a_traceback(workspace):
    """§3 fixed this for scenario files, not for a call's arguments: `run.call_result("write_file", {"path": "a",
    "content": [[[...3000 deep...]]]})` raises RecursionError ("while serializing an object") to the caller. A
    model's arguments are untrusted input: the call must fail in words."""
    nested: list = []
    inner = nested
    for _ in range(3000):
        inner.append([])
        inner = inner[0]
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("write_file", {"path": "a", "content": nested}, call_id="c1")
    assert result.status == "failed"


# ------------------------------------------------------------------------------ what people do, in words


@pytest.mark.parametrize(("verb", "said"), [("cancel", "cancelled by"), ("reset", "context reset by")])
def test_resume_of_a_cancelled_run_says_it_was_cancelled(tmp_path, verb, said):
    """§4: `cancel` and `reset` are reported as what they are. `status` and `explain` now say "cancelled by user
    at T", but `safepoint resume r` on that run says "run 'r' is closed (Closed during restart recovery without
    reporting a result., at T)": the very wording the issue names, with a stray period."""
    from tests.conftest import cli_env, safepoint_in_process
    from tests.test_ledger_damage import NOTIFY, RUN, _killed_run

    _killed_run(tmp_path, NOTIFY)
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    assert safepoint_in_process(verb, RUN, "-w", tmp_path / "ws", env=env).returncode == 0
    done = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    assert said in done.stderr and "restart recovery" not in done.stderr, done.stderr


# ------------------------------------------------------------------------------ deep trees


@pytest.mark.parametrize("tool", ["list_files", "search_files"])
def test_a_deep_tree_is_listed_or_refused_in_words(workspace, tool):
    """A tree 1,100 folders deep (2,200 bytes of path, within PATH_MAX; a runaway build or a test fixture):
    `list_files` and `search_files` fail with "RecursionError: maximum recursion depth exceeded" as their whole
    answer, for the whole workspace, so the model can no longer list or search anything."""
    deep = workspace
    try:
        for _ in range(1100):  # one by one: mkdir(parents=True) and os.makedirs recurse, and die of it here
            deep = deep / "d"
            deep.mkdir()
        _list_or_search(workspace, deep, tool)
    finally:  # without recursion: a deep tree left behind breaks pytest's clean-up of old temp folders
        from tests.test_tool_hostile import remove_tree

        if (workspace / "d").exists():
            remove_tree(workspace / "d")


def _list_or_search(workspace, deep, tool):
    (deep / "f").write_text("deep\n")
    (workspace / "top.txt").write_text("deep at the top\n")
    args = {} if tool == "list_files" else {"pattern": "deep"}
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert "RecursionError" not in result.observation and "top.txt" in result.observation, result.observation


def test_a_command_too_long_to_start_says_so(workspace):
    """A model writing a 300 KB file through a here-doc: the command line is over the kernel's 128 KiB limit for
    one argument (E2BIG). The model is told "could not start the command's supervisor process (safepoint's
    reaper); try again", which is wrong (nothing is wrong with the reaper) and sends it into retrying for ever."""
    command = "cat > big.txt <<'EOF'\n" + "line of text\n" * 25000 + "EOF"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert result.status == "failed"
    assert "try again" not in result.observation and "too long" in result.observation, result.observation
