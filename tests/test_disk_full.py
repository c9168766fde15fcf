"""A full disk (issue 11 §5): one line naming the store and the fix, exit 13, nothing half-written left behind (no
``.new-*`` folder, no ``.part`` file, no torn record), and once space is back the run resumes cleanly without
repeating its call that must not repeat.

Two ways: a real small tmpfs filled up (when this machine lets the test mount one), and a failpoint that makes the
n-th durable write of a run fail with ENOSPC half-way, for every n."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

import safepoint.engine.capture_state as capture_state
import safepoint.store.file_blobs as file_blobs
import safepoint.store.file_store as file_store
from safepoint.errors import ExitCode
from tests.conftest import cli_env, safepoint_in_process

SCENARIO = {
    "task": "t",
    "turns": [
        {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "hello\n" * 50}}]},
        {"tool_calls": [{"tool": "run_command", "args": {"command": "echo once >> effect.txt"}}]},
        {"text": "done"},
    ],
}


def _leftovers(workspace):
    found = []
    for dirpath, dirnames, names in os.walk(workspace / ".agent-runtime"):
        found += [os.path.join(dirpath, d) for d in dirnames if d.startswith(".new-")]
        found += [os.path.join(dirpath, n) for n in names if n.endswith(".part")]
    return found


def _one_line(stderr):
    assert "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def _finish(workspace, run_id, env):
    """Once space is back: the run goes on (or starts, if it was never created), its command ran once at most."""
    if run_id in os.listdir(workspace / ".agent-runtime" / "runs"):
        done = safepoint_in_process("resume", run_id, "-w", workspace, env=env)
        if done.returncode == ExitCode.LOCKED and f"process {os.getpid()} " in done.stderr:
            # In-process, the failed run's owner is this very process, alive: a real one has ended by now.
            done = safepoint_in_process("resume", run_id, "-w", workspace, "--takeover", env=env)
        if done.returncode == ExitCode.WAITING_DECISION:
            assert "call_2" in done.stdout + done.stderr
            done = safepoint_in_process("resume", run_id, "-w", workspace, "--skip", "call_2", env=env)
        assert done.returncode in (ExitCode.OK, ExitCode.USAGE), done.stderr  # USAGE: finished already
    else:
        done = safepoint_in_process("run", workspace / "s.json", "-w", workspace, "--run-id", run_id, env=env)
        assert done.returncode == ExitCode.OK, done.stderr
    effect = workspace / "effect.txt"
    assert (effect.read_text().count("once") if effect.exists() else 0) <= 1
    checked = safepoint_in_process("fsck", run_id, "-w", workspace, env=env)
    if checked.returncode != ExitCode.OK:
        # Nothing half-written for the next open to trip on; only the checkpoint index (which speeds look-ups and
        # is checked against the log) may lack the entry a disk full cut, and fsck --repair restores it.
        problems = [line for line in checked.stdout.splitlines() if line.startswith(f"run {run_id}:")]
        assert problems and all("checkpoints/index.jsonl" in line for line in problems), checked.stdout
        assert safepoint_in_process("fsck", run_id, "-w", workspace, "--repair", env=env).returncode == 12
        assert safepoint_in_process("fsck", run_id, "-w", workspace, env=env).returncode == ExitCode.OK


class _Full:
    """Fails the n-th durable write of the store and the capture journal with ENOSPC, half of its bytes written."""

    def __init__(self, monkeypatch, fail_at):
        self.count = 0
        self.fail_at = fail_at
        # Every module that makes the store's or the capture's writes durable (the store's parts live in several).
        for module in (file_store, file_blobs, capture_state):
            for name, partial in (("write_all", True), ("atomic_write", False)):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, self._wrap(getattr(module, name), partial=partial))

    def _wrap(self, real, *, partial):
        def failing(target, data, *args, **kwargs):
            self.count += 1
            if self.count == self.fail_at:
                if partial and len(data) > 1:
                    real(target, data[: len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(target, data, *args, **kwargs)

        return failing


def test_a_disk_full_at_every_durable_write_is_one_line_and_resumes(tmp_path, monkeypatch):
    env = cli_env()
    counting = tmp_path / "count"
    counting.mkdir()
    (counting / "s.json").write_text(json.dumps(SCENARIO))
    with monkeypatch.context() as patch:
        full = _Full(patch, fail_at=0)
        done = safepoint_in_process("run", counting / "s.json", "-w", counting, "--run-id", "r", env=env)
        assert done.returncode == ExitCode.OK, done.stderr
    writes = full.count
    assert writes > 5
    for fail_at in range(1, writes + 1):
        workspace = tmp_path / f"w{fail_at}"
        workspace.mkdir()
        (workspace / "s.json").write_text(json.dumps(SCENARIO))
        with monkeypatch.context() as patch:
            _Full(patch, fail_at)
            done = safepoint_in_process("run", workspace / "s.json", "-w", workspace, "--run-id", "r", env=env)
        if done.returncode != ExitCode.OK:  # a write the run could live without (a trace) lets it finish
            assert done.returncode == ExitCode.DISK_FULL, (fail_at, done.returncode, done.stderr)
            _one_line(done.stderr)
            assert "no space left" in done.stderr and "free space" in done.stderr, done.stderr
        assert _leftovers(workspace) == [], fail_at
        _finish(workspace, "r", env)


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()}); the failpoint test covers it")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_real_full_disk(small_disk):
    """A 2 MB tmpfs filled to the last block, then to a few blocks short of a run's needs: every command says so in
    one line, leaves nothing behind, and the runs finish once the filler is removed."""
    workspace = small_disk / "ws"
    workspace.mkdir()
    (workspace / "s.json").write_text(json.dumps(SCENARIO))
    filler = small_disk / "filler"
    env = cli_env()
    outcomes = []
    for leave_kb in (0, 4, 8, 16, 24, 32, 48):
        if filler.exists():
            filler.unlink()
        free_kb = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize // 1024
        with open(filler, "wb") as handle:
            handle.write(b"\0" * max(0, free_kb - leave_kb) * 1024)
        run_id = f"r{leave_kb}"
        done = subprocess.run(
            [sys.executable, "-m", "safepoint", "run", workspace / "s.json", "-w", workspace, "--run-id", run_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        outcomes.append(done.returncode)
        if done.returncode != ExitCode.OK:
            assert done.returncode == ExitCode.DISK_FULL, done.stderr
            _one_line(done.stderr)
        assert _leftovers(workspace) == []
        filler.unlink()
        (workspace / "effect.txt").unlink(missing_ok=True)
        _finish(workspace, run_id, env)
    assert ExitCode.DISK_FULL in outcomes  # the disk was full for some of them
