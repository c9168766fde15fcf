"""Hostile input to the built-in tools (issue 9, the reviewer-attacker's findings and their families): every tool
against folders, special files, links to them and links out of the workspace; limits and arguments no encoder or
clock takes; trees deeper than Python's recursion; commands longer than the kernel starts. Each answer is a failed
call in one line naming the thing and the fix, never raw Python error text, and nothing of the user's is replaced."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import safepoint
from safepoint.engine import builtin, launcher

TOOLS = ("write_file", "read_file", "list_files", "search_files", "apply_patch")


def _args(tool: str, path: str) -> dict[str, str]:
    return {
        "write_file": {"path": path, "content": "x\n"},
        "read_file": {"path": path},
        "list_files": {"path": path},
        "search_files": {"pattern": "x", "path": path},
        "apply_patch": {"patch": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n"},
    }[tool]


def _in_words(text: str) -> None:
    """One line for the model: no Python exception name, none of the store's inner paths, no traceback."""
    assert "Error" not in text and "Errno" not in text and "Traceback" not in text, text
    assert ".agent-runtime" not in text and ".part" not in text, text


@pytest.fixture
def hostile(workspace: Path):
    """A workspace holding what real ones do besides files: a FIFO, a socket, links to them, to /dev/null, to a
    folder and out of the workspace, a folder, and a file where a folder would be."""
    os.mkfifo(workspace / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(workspace / "sock"))
    os.symlink("fifo", workspace / "to-fifo")
    os.symlink("/dev/null", workspace / "to-null")
    os.symlink("/etc/hostname", workspace / "to-outside")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "kept.txt").write_text("x\n")
    os.symlink("sub", workspace / "to-sub")
    (workspace / "file").write_text("x\n")
    yield workspace
    server.close()


def _kinds(root: Path) -> dict[str, int]:
    return {name: stat.S_IFMT(os.lstat(root / name).st_mode) for name in os.listdir(root) if name != ".agent-runtime"}


WRITE_REFUSED = {
    "fifo": "is a FIFO",
    "to-fifo": "is a FIFO",
    "sock": "is a socket",
    "to-null": "leads outside the workspace",
    "to-outside": "leads outside the workspace",
    "sub": "is a folder",
    "sub/": "is a folder",
    "to-sub": "is a folder",
    ".": "the workspace folder itself",
    "sub/..": "the workspace folder itself",
    "file/new.txt": "a part of its path is not a folder",
    "fifo/new.txt": "a part of its path is not a folder",
}


@pytest.mark.parametrize("path", list(WRITE_REFUSED))
def test_write_file_never_replaces_a_folder_or_a_special_file(hostile, path):
    before = _kinds(hostile)
    tm = safepoint.open(workspace=str(hostile))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("write_file", {"path": path, "content": "x"}, call_id="c1")
    assert result.status == "failed", result.observation
    assert WRITE_REFUSED[path] in result.observation and "\n" not in result.observation, result.observation
    _in_words(result.observation)
    assert _kinds(hostile) == before  # the FIFO is a FIFO, the folder a folder, the link a link


def test_a_refused_write_leaves_rollback_nothing_to_lose(hostile):
    """The attacker's case end to end: the FIFO is refused, so rollback has nothing of it to remove."""
    tm = safepoint.open(workspace=str(hostile))
    with tm.start("t", run_id="r") as run:
        start = run.checkpoint()
        run.call_result("write_file", {"path": "to-fifo", "content": "x"}, call_id="c1")
    tm.rollback_files("r", start, include_uncertain=True)
    assert stat.S_ISFIFO(os.lstat(hostile / "fifo").st_mode) and os.path.islink(hostile / "to-fifo")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("path", ["fifo", "to-fifo", "sock", "to-null", "to-outside", "sub", "to-sub", ".", "file/x"])
def test_every_tool_answers_hostile_paths_in_words(hostile, tool, path):
    before = _kinds(hostile)
    tm = safepoint.open(workspace=str(hostile))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, _args(tool, path), call_id="c1")
    _in_words(result.observation)
    if tool in ("write_file", "read_file", "apply_patch"):
        assert result.status == "failed", result.observation
    assert _kinds(hostile) == before


def test_apply_patch_never_creates_a_file_over_a_fifo(hostile):
    patch = "--- /dev/null\n+++ b/fifo\n@@ -0,0 +1 @@\n+y\n"
    tm = safepoint.open(workspace=str(hostile))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("apply_patch", {"patch": patch}, call_id="c1")
    assert result.status == "failed" and "FIFO" in result.observation, result.observation
    assert stat.S_ISFIFO(os.lstat(hostile / "fifo").st_mode)


# ------------------------------------------------------------------------------ limits and arguments


@pytest.mark.parametrize("timeout", [1e308, 86400.5, 1e10])
def test_a_time_limit_over_a_day_is_refused_in_words(workspace, timeout):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo hi", "timeout": timeout}, call_id="c1")
    assert result.status == "failed" and "a day" in result.observation, result.observation
    _in_words(result.observation)


def test_a_time_limit_of_a_day_is_taken(workspace):
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo hi", "timeout": 86400}, call_id="c1")
    assert result.status == "succeeded" and "hi" in result.observation, result.observation


def _nested(depth: int) -> list:
    nested: list = []
    inner = nested
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return nested


def _keyed(depth: int) -> dict:
    nested: dict = {}
    inner = nested
    for _ in range(depth):
        inner["k"] = {}
        inner = inner["k"]
    return nested


@pytest.mark.parametrize(
    ("tool", "args", "said"),
    [
        ("write_file", {"path": "a", "content": _nested(3000)}, "nest more than 64 levels"),
        ("run_command", {"command": "ls", "timeout": _keyed(3000)}, "nest more than 64 levels"),
        ("no_such_tool", {"x": _nested(3000)}, "nest more than 64 levels"),
        ("write_file", {"path": "a", "content": "half a pair \ud800"}, "not valid Unicode"),
        ("write_file", {"path": "a\udc80", "content": "x"}, "not valid Unicode"),
        ("read_file", {"path": "a", "\ud800": 1}, "not valid Unicode"),
    ],
    ids=["deep-list", "deep-dict", "unknown-tool", "lone-surrogate", "escaped-byte", "surrogate-key"],
)
def test_arguments_no_encoder_takes_fail_the_call_and_resume_answers_the_same(workspace, tool, args, said):
    """Checked where arguments enter the engine, before the input hash and the log's encoder: the call fails in one
    line (no RecursionError, no UnicodeEncodeError out of call_result), and a resume with the same call answers
    the same without running anything."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        first = run.call_result(tool, args, call_id="c1")
        ok = run.call_result("write_file", {"path": "b", "content": "y"}, call_id="c2")
    assert first.status == "failed" and said in first.observation, first.observation
    assert ok.status == "succeeded"  # the run goes on, and its log stays readable
    _in_words(first.observation)
    with tm.resume("r") as run:
        again = run.call_result(tool, args, call_id="c1")
    assert again.status == "failed" and again.observation == first.observation
    assert sorted(p.name for p in workspace.iterdir()) == [".agent-runtime", "b"]


# ------------------------------------------------------------------------------ deep trees


def remove_tree(top: Path) -> None:
    """Remove a tree bottom-up through folder descriptors, without recursion: shutil.rmtree recurses once per
    level, so a deep tree left behind made pytest's own clean-up of old temp folders die of a RecursionError at
    the end of every later session on the machine."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack: list[tuple[int, str]] = [(os.open(top, flags), "")]
    while stack:
        fd = stack[-1][0]
        inner = None
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                inner = entry.name
                break
            os.unlink(entry.name, dir_fd=fd)
        if inner is not None:
            stack.append((os.open(inner, flags, dir_fd=fd), inner))
            continue
        os.close(fd)
        name = stack.pop()[1]
        if stack:
            os.rmdir(name, dir_fd=stack[-1][0])
    os.rmdir(top)


@pytest.fixture
def deep(workspace: Path):
    """A chain of 1,100 folders ``d/d/...`` in the workspace (2,200 bytes of path, within PATH_MAX), removed
    afterwards without recursion. Made one by one: pathlib's mkdir(parents=True) and os.makedirs recurse."""
    bottom = workspace
    try:
        for _ in range(1100):
            bottom = bottom / "d"
            bottom.mkdir()
        yield bottom
    finally:
        if (workspace / "d").exists():
            remove_tree(workspace / "d")


@pytest.mark.parametrize("tool", ["list_files", "search_files"])
def test_a_deep_tree_is_walked_to_its_bottom(workspace, deep, tool):
    (deep / "f").write_text("deep\n")
    (workspace / "top.txt").write_text("deep at the top\n")
    args = {} if tool == "list_files" else {"pattern": "deep"}
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result(tool, args, call_id="c1")
    assert result.status == "succeeded", result.observation
    assert "top.txt" in result.observation and "d/" * 1100 + "f" in result.observation, result.observation[-300:]


def test_the_walk_keeps_os_walks_order_and_skips(workspace):
    """Folder by folder, a folder's files before its subfolders, names sorted; runtime and vendored folders and
    links to folders left out, as before the walk became iterative."""
    for rel in ["z.txt", "a/x.txt", "a/b/y.txt", "c/w.txt", ".git/HEAD", "node_modules/m/i.js", "a/__pycache__/p"]:
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("x\n")
    os.symlink("a", workspace / "link-to-a")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        listed = run.call_result("list_files", {}, call_id="c1").observation.splitlines()
        inside = run.call_result("list_files", {"path": "a"}, call_id="c2").observation.splitlines()
    assert listed == ["z.txt", "a/x.txt", "a/b/y.txt", "c/w.txt"]
    assert inside == ["a/x.txt", "a/b/y.txt"]


# ------------------------------------------------------------------------------ commands the kernel will not start


@pytest.mark.parametrize("size", [150_000, 300_000])
def test_a_command_over_the_argument_limit_says_what_is_wrong(workspace, size):
    """150 KB fits the supervisor's socket but not the kernel's limit for one argument; 300 KB fits neither. Both
    are told the same: how long the line is, the limit, and to write the content with write_file."""
    command = "cat > big.txt <<'EOF'\n" + "x" * size + "\nEOF"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert result.status == "failed", result.observation
    said = result.observation
    assert f"is {len(command) + 1} bytes" in said and "too long" in said and "write_file" in said, said
    assert "try again" not in said and "\n" not in said.removeprefix("error: ")
    assert not (workspace / "big.txt").exists()


def test_a_command_just_under_the_limit_runs(workspace):
    command = "cat > big.txt <<'EOF'\n" + "x" * 100_000 + "\nEOF"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": command}, call_id="c1")
    assert result.status == "succeeded", result.observation
    assert (workspace / "big.txt").stat().st_size == 100_001


class _DeadReaper(launcher.Launcher):
    """A supervisor server that exits at once: the genuine reaper failure, still told as one."""

    def _start(self) -> None:
        self._stop()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen([sys.executable, "-c", "pass"])
        theirs.close()
        self._sock, self._owner = mine, os.getpid()


def test_a_genuine_reaper_failure_is_told_apart(workspace, monkeypatch):
    dead = _DeadReaper()
    monkeypatch.setattr(builtin, "LAUNCHER", dead)
    tm = safepoint.open(workspace=str(workspace))
    try:
        with tm.start("t", run_id="r") as run:
            result = run.call_result("run_command", {"command": "echo hi"}, call_id="c1")
    finally:
        dead._stop()
    assert result.status == "failed"
    assert "supervisor process (safepoint's reaper" in result.observation, result.observation
    assert "too long" not in result.observation


def test_a_program_the_supervisor_cannot_start_is_named(workspace, monkeypatch):
    """exec itself failing (here: no bash on PATH) was a bare "exit code 127" with no word of why."""
    monkeypatch.setenv("PATH", str(workspace / "nowhere"))
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo hi"}, call_id="c1")
    assert result.status == "failed"
    assert "could not start bash: No such file or directory" in result.observation, result.observation


def test_read_file_of_a_huge_file_reads_only_what_it_shows(workspace):
    """A log of 8 GB (sparse here): read_file read it whole into memory before cutting it to 256 KiB."""
    with open(workspace / "huge.log", "wb") as handle:
        handle.write(b"line of log\n" * 30_000)
        handle.truncate(8 << 30)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("read_file", {"path": "huge.log"}, call_id="c1")
    assert result.status == "succeeded"
    assert result.observation.startswith("line of log\n")
    assert result.observation.endswith(f"[... cut at {builtin.MAX_READ} of {8 << 30} bytes]"), result.observation[-80:]


def test_search_files_skips_a_huge_file_and_says_so(workspace):
    with open(workspace / "huge.log", "wb") as handle:
        handle.write(b"needle\n")
        handle.truncate(8 << 30)
    (workspace / "small.txt").write_text("a needle\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("search_files", {"pattern": "needle"}, call_id="c1")
    assert result.status == "succeeded", result.observation
    assert result.observation.startswith("small.txt:1: a needle\n"), result.observation
    assert "1 file(s) over 64 MiB not searched, like huge.log" in result.observation


@pytest.mark.parametrize("target", ["sub", "fifo", "file/inner.txt", "."])
def test_a_rename_onto_what_cannot_be_written_keeps_the_old_file(hostile, target):
    """apply_patch removed a renamed file's old name before writing the new one: a rename onto a folder or a FIFO
    was refused after the old file was gone."""
    patch = f"--- a/file\n+++ b/{target}\n@@ -1 +1 @@\n-x\n+y\n"
    before = _kinds(hostile)
    tm = safepoint.open(workspace=str(hostile))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("apply_patch", {"patch": patch}, call_id="c1")
    assert result.status == "failed", result.observation
    _in_words(result.observation)
    assert (hostile / "file").read_text() == "x\n" and _kinds(hostile) == before


def test_a_rename_writes_the_new_file_then_removes_the_old(workspace):
    (workspace / "old.txt").write_text("a\nb\nc\n")
    patch = "--- a/old.txt\n+++ b/new/new.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("apply_patch", {"patch": patch}, call_id="c1")
    assert result.status == "succeeded", result.observation
    assert not (workspace / "old.txt").exists() and (workspace / "new" / "new.txt").read_text() == "a\nB\nc\n"


def test_a_command_holding_a_nul_is_refused(workspace):
    """A NUL cut the line the reaper ran short of the line that was classified: `echo hi\\0rm -rf x` ran `echo hi`
    with `rm -rf x` as its $0."""
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo hi\x00rm -rf x"}, call_id="c1")
    assert result.status == "failed" and "NUL" in result.observation, result.observation


@pytest.mark.parametrize("pattern", ["a{1000000000}", "(a{1000}){1000}", "[a-z]{5000000,}"])
def test_a_search_pattern_that_compiles_into_gigabytes_is_refused(workspace, pattern):
    """`regex` expands a repeat's count into copies: a{1000000000} asked for gigabytes and the agent was killed
    (and again on every resume: search_files is replayed on its own)."""
    (workspace / "f.txt").write_text("aaa\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("search_files", {"pattern": pattern}, call_id="c1")
    assert result.status == "failed" and "use a smaller count" in result.observation, result.observation


EVERYDAY = ["a{3}", "(?:ab){100}", "x{1,99999}", "\\d{4}-\\d{2}-\\d{2}", "[{]{2}", "\\{9999999}", "[]a]{2}", "[^]]{2}"]


@pytest.mark.parametrize("pattern", EVERYDAY)
def test_everyday_counted_patterns_still_search(workspace, pattern):
    (workspace / "f.txt").write_text("aaa ab 2024-01-31 {{ {9999999} ]]\n")
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("search_files", {"pattern": pattern}, call_id="c1")
    assert result.status == "succeeded", result.observation


def test_a_large_environment_still_runs_commands(workspace, monkeypatch):
    """240 KB of environment (within what the kernel starts) was over the supervisor socket's default buffer:
    every command then failed, first as "try again", then as too long."""
    monkeypatch.setenv("SAFEPOINT_TEST_BIG_A", "a" * 120_000)
    monkeypatch.setenv("SAFEPOINT_TEST_BIG_B", "b" * 120_000)
    tm = safepoint.open(workspace=str(workspace))
    with tm.start("t", run_id="r") as run:
        result = run.call_result("run_command", {"command": "echo ${#SAFEPOINT_TEST_BIG_B}"}, call_id="c1")
    assert result.status == "succeeded" and "120000" in result.observation, result.observation
