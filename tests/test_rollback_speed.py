"""Rollback of many git-tracked files (issue 10, §6 and its Performance list): a constant number of processes, no
walk of the tree, every file's new content durable before its rename and every rename durable before the call is
recorded done, and a crash anywhere in the batch finished by the next rollback with the user's edits spared."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import safepoint
from safepoint.engine.file_changes import FileChanges
from safepoint.engine.session import load_view
from safepoint.workspace.files import Workspace

FILES = 60  # enough that a per-file cost shows as a count; lean enough for the suite


class Crash(BaseException):
    pass


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path_factory.getbasetemp()))


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd, check=True, capture_output=True
    )


def tracked_repo(root: Path) -> list[str]:
    """A repository of FILES tracked files in folders of their own (the bench's shape), one executable, and a
    folder of untracked files no rollback has any business reading."""
    root.mkdir()
    paths = []
    for index in range(FILES):
        folder = root / f"d{index:03d}"
        folder.mkdir()
        (folder / "f.txt").write_text(f"file {index}\n" * 4)
        paths.append(f"d{index:03d}/f.txt")
    os.chmod(root / paths[0], 0o755)
    (root / "targets.txt").write_text("\n".join(paths) + "\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    (root / "untracked").mkdir()
    for index in range(20):
        (root / "untracked" / f"u{index}.txt").write_text("not the agent's\n")
    return paths


def changed_by_one_command(root: Path) -> tuple[Any, str]:
    tm = safepoint.open(workspace=str(root))
    with tm.start("change many files", run_id="r") as run:
        before = run.checkpoint()
        run.call("run_command", {"command": "xargs sed -i 's/file/FILE/' < targets.txt"}, call_id="c1")
        run.finish("completed")
    return tm, before


def restored(root: Path, paths: list[str]) -> bool:
    return all((root / p).read_text() == f"file {int(p[1:4])}\n" * 4 for p in paths)


def test_a_rollback_of_many_tracked_files_starts_a_constant_number_of_processes_and_walks_no_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    paths = tracked_repo(root)
    tm, before = changed_by_one_command(root)
    started: list[list[str]] = []
    walked: list[str] = []
    real_popen, real_scandir, real_walk = subprocess.Popen, os.scandir, os.walk

    def popen(args: Any, *rest: Any, **kwargs: Any) -> Any:
        started.append([str(a) for a in args])
        return real_popen(args, *rest, **kwargs)

    def scandir(path: Any = ".") -> Any:
        walked.append(str(path))
        return real_scandir(path)

    def walk(top: Any, *rest: Any, **kwargs: Any) -> Any:
        walked.append(str(top))
        return real_walk(top, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "walk", walk)
    plan = tm.rollback_files("r", before)
    monkeypatch.undo()
    assert len(plan.actions) == FILES and not plan.conflicts
    assert restored(root, paths)
    assert stat.S_IMODE(os.stat(root / paths[0]).st_mode) == 0o755  # modes come back with the content
    # One `git cat-file --batch` for every before-version, never a process per file (nor a `git checkout` each).
    assert len(started) <= 1, started
    assert all("--batch" in args for args in started)
    # The touched set is known (the plan's paths): no folder of the workspace is listed, let alone the whole tree.
    workspace_walks = [p for p in walked if os.path.realpath(p).startswith(os.path.realpath(root))]
    assert workspace_walks == []
    tm.close()


def test_every_restored_file_is_durable_before_its_rename_and_every_rename_before_the_call_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    paths = tracked_repo(root)
    tm, before = changed_by_one_command(root)
    events: list[tuple[str, str]] = []
    real_fsync, real_replace, real_after = os.fsync, os.replace, FileChanges.after

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        dst_dir = kwargs.get("dst_dir_fd")
        src_dir = kwargs.get("src_dir_fd")
        src_path = os.path.join(os.readlink(f"/proc/self/fd/{src_dir}"), src) if src_dir is not None else str(src)
        dst_path = os.path.join(os.readlink(f"/proc/self/fd/{dst_dir}"), dst) if dst_dir is not None else str(dst)
        real_replace(src, dst, **kwargs)
        events.append(("replace", f"{src_path} -> {dst_path}"))

    def after(self: FileChanges, call_id: str, befores: Any) -> Any:
        events.append(("recorded", call_id))  # the after-states, then `succeeded`, go to the log from here on
        return real_after(self, call_id, befores)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to name a descriptor's file")
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(FileChanges, "after", after)
    tm.rollback_files("r", before)
    monkeypatch.undo()
    assert restored(root, paths)
    rollback_recorded = next(i for i, e in enumerate(events) if e[0] == "recorded" and "rollback" in e[1])
    real_root = os.path.realpath(root)
    for rel in paths:
        target = os.path.join(real_root, rel)
        [(at, (_, move))] = [
            (i, e) for i, e in enumerate(events) if e[0] == "replace" and e[1].endswith(" -> " + target)
        ]
        staged = move.split(" -> ")[0]
        assert ("fsync", staged) in events[:at], f"{rel}: its content was not durable before its rename"
        folder = os.path.dirname(target)
        synced = [i for i, e in enumerate(events) if e == ("fsync", folder) and at < i < rollback_recorded]
        assert synced, f"{rel}: its rename was not durable before the rollback was recorded"
    tm.close()


def test_a_crash_half_way_through_placing_a_batch_is_finished_by_the_next_rollback_sparing_the_users_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    paths = tracked_repo(root)
    tm, before = changed_by_one_command(root)
    (root / paths[7]).write_text("the user's own edit\n")  # made after the command: a conflict, never overwritten
    placed: list[str] = []
    real_place = Workspace._place

    def crashing(self: Workspace, staged: Any, tmp: str, parent: int, parts: list[str], rel: str) -> None:
        if len(placed) == FILES // 2:
            raise Crash
        placed.append(rel)
        real_place(self, staged, tmp, parent, parts, rel)

    monkeypatch.setattr(Workspace, "_place", crashing)
    with pytest.raises(Crash):
        tm.rollback_files("r", before)
    monkeypatch.undo()
    assert len([p for p in paths if (root / p).read_text().startswith("file ")]) == FILES // 2
    [call] = [e for c, e in load_view(tm.store, "r").ledger.items() if "rollback" in c]
    assert call.status == "started"  # the journal: the outcome is unknown until a rollback finishes it
    plan = tm.rollback_files("r", before)
    assert (root / paths[7]).read_text() == "the user's own edit\n"
    assert [c.path for c in plan.conflicts] == [paths[7]]
    assert restored(root, [p for p in paths if p != paths[7]])
    assert stat.S_IMODE(os.stat(root / paths[0]).st_mode) == 0o755
    view = load_view(tm.store, "r")
    assert all(e.status == "succeeded" for c, e in view.ledger.items() if "rollback" in c)
    # Nothing the batch staged is left behind: neither in the workspace nor in the run's scratch folder.
    leftovers = [n for _, _, names in os.walk(tm.store.root) for n in names if n.endswith(".part")]
    assert leftovers == [] and not [n for _, _, names in os.walk(root) for n in names if n.startswith(".safepoint-")]
    tm.close()


def test_a_crash_while_staging_changes_no_file_and_the_next_rollback_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    paths = tracked_repo(root)
    tm, before = changed_by_one_command(root)
    real_sync = Workspace.sync_staged

    def crashing(staged: Any) -> None:
        raise Crash

    monkeypatch.setattr(Workspace, "sync_staged", staticmethod(crashing))
    with pytest.raises(Crash):
        tm.rollback_files("r", before)
    monkeypatch.setattr(Workspace, "sync_staged", staticmethod(real_sync))
    assert all((root / p).read_text().startswith("FILE ") for p in paths)  # staged, never placed
    plan = tm.rollback_files("r", before)
    assert not plan.conflicts and restored(root, paths)
    tm.close()


def test_a_batch_without_a_scratch_folder_on_the_workspaces_filesystem_writes_each_file_durably_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo"
    paths = tracked_repo(root)
    tm, before = changed_by_one_command(root)
    monkeypatch.setattr(Workspace, "staged_writes", _no_batch)
    plan = tm.rollback_files("r", before)
    monkeypatch.undo()
    assert not plan.conflicts and restored(root, paths)
    tm.close()


@contextlib.contextmanager
def _no_batch(self: Workspace) -> Iterator[None]:
    yield None
