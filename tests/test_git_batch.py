"""workspace.git: blobs read through one `git cat-file --batch` per operation (never a process per file), and the
repository's own configuration never makes safepoint's git commands run code (fsmonitor, hooks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from safepoint.workspace import git as gitmod
from safepoint.workspace.git import BlobReader, commit_paths, git_state, head_blob_ids, read_blob


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path_factory.getbasetemp()))


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True)
    return done.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "-c", "init.defaultBranch=main", "init", "-q")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    for i in range(300):
        (root / f"f{i:03d}.txt").write_bytes(f"file {i}\n".encode() * (i + 1))
    (root / "bin.dat").write_bytes(bytes(range(256)) * 10 + b"\n\n")
    os.symlink("f000.txt", root / "link")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_one_process_reads_every_blob_exactly(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = head_blob_ids(str(repo))
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def counting(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        started.append(list(args))
        return real_popen(args, *rest, **kwargs)

    monkeypatch.setattr(gitmod.subprocess, "Popen", counting)
    with BlobReader(str(repo)) as reader:
        got = {path: reader.read(blob) for path, blob in ids.items()}
    assert len(started) == 1 and "--batch" in started[0]
    monkeypatch.setattr(gitmod.subprocess, "Popen", real_popen)
    for path, data in got.items():
        assert data == read_blob(str(repo), ids[path]), path
    assert got["bin.dat"] == bytes(range(256)) * 10 + b"\n\n"  # newlines inside content do not confuse the framing
    assert got["link"] == b"f000.txt"
    assert got["f299.txt"] == b"file 299\n" * 300


def test_missing_malformed_and_non_blob_ids_give_none_and_the_reader_goes_on(repo: Path) -> None:
    ids = head_blob_ids(str(repo))
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    with BlobReader(str(repo)) as reader:
        assert reader.read("0" * 40) is None
        assert reader.read("not-an-id") is None
        assert reader.read(tree) is None
        assert reader.read(ids["f001.txt"]) == b"file 1\n" * 2


def test_outside_a_repository_the_reader_gives_none(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with BlobReader(str(plain)) as reader:
        assert reader.read("a" * 40) is None
        assert reader.read("b" * 40) is None


def test_a_planted_fsmonitor_or_hook_never_runs_when_safepoint_reads_or_commits(repo: Path) -> None:
    witness = repo.parent / "pwned"
    hook = repo.parent / "evil.sh"
    hook.write_text(f"#!/bin/sh\ntouch {witness}\nexit 0\n")
    hook.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(hook))
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("post-index-change", "pre-commit", "post-commit", "reference-transaction"):
        (hooks / name).write_text(hook.read_text())
        (hooks / name).chmod(0o755)
    # Control: the planted fsmonitor is live for plain git, so the check below can fail.
    git(repo, "status")
    assert witness.exists()
    witness.unlink()
    state = git_state(str(repo))
    assert state.is_repo
    head_blob_ids(str(repo))
    (repo / "f000.txt").write_text("changed\n")
    commit_paths(str(repo), ["f000.txt"], "agent change")
    assert not witness.exists()


def test_a_command_over_many_tracked_files_and_its_rollback_start_one_git_reader_each(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before-states of tracked files come from git through one `cat-file --batch` per session, never a process
    per file: a command that rewrites 300 tracked files, and the rollback of it, start one reader each."""
    import safepoint
    from safepoint.records import RollbackFiles

    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def counting(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        started.append([str(a) for a in args])
        return real_popen(args, *rest, **kwargs)

    monkeypatch.setattr(gitmod.subprocess, "Popen", counting)
    sp = safepoint.open(workspace=str(repo))
    with sp.start("edit everything", run_id="r") as run:
        first = run.checkpoint()
        run.step()
        run.call("run_command", {"command": "sed -i 's/file/FILE/' f*.txt"}, call_id="c1")
        run.checkpoint()
    readers = [a for a in started if "cat-file" in a]
    assert len(readers) == 1 and "--batch" in readers[0]
    assert (repo / "f123.txt").read_text().startswith("FILE 123")
    started.clear()
    plan = sp.recover("r", RollbackFiles(checkpoint_id=first))
    assert not plan.conflicts
    assert (repo / "f123.txt").read_bytes() == b"file 123\n" * 124
    assert len([a for a in started if "cat-file" in a]) <= 1
