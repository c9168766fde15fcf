"""Issue 11 §4, the attacker's finding 6: every git command safepoint runs (status, ls-files, ls-tree, cat-file,
for-each-ref, stash list, read-tree, update-index, write-tree, commit-tree, update-ref, config, check-attr) never
runs a program the agent could have configured: filters (clean, smudge, process), diff textconv and drivers, an
external diff, merge drivers, hooks, fsmonitor, a signature check. Each plant is first shown to run under a plain
git, so no assertion here is vacuous."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from safepoint.errors import GitError
from safepoint.workspace import git as g

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-index-change",
    "reference-transaction",
    "post-checkout",
    "post-rewrite",
    "pre-auto-gc",
    "fsmonitor-watchman",
)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})}
    )
    return done.stdout


def _program(path: Path, mark: Path, what: str, *, passthrough: bool = False) -> str:
    body = f'#!/bin/sh\necho {what} >> "{mark}"\n' + ("exec cat\n" if passthrough else "exit 0\n")
    path.write_text(body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A repository whose configuration, global and local, names a program for every hook git knows of here."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = tmp_path / "repo"
    repo.mkdir()
    mark = tmp_path / "ran"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    clean = _program(bin_ / "clean", mark, "clean", passthrough=True)
    smudge = _program(bin_ / "smudge", mark, "smudge", passthrough=True)
    textconv = _program(bin_ / "textconv", mark, "textconv", passthrough=True)
    external = _program(bin_ / "external", mark, "external-diff")
    driver = _program(bin_ / "driver", mark, "merge-driver")
    gpg = _program(bin_ / "gpg", mark, "gpg")
    fsmonitor = _program(bin_ / "fsmonitor", mark, "fsmonitor")
    # The global file, as the attacker planted it (`>> ~/.gitconfig`): filters and drivers named by .gitattributes.
    (home / ".gitconfig").write_text(
        "[user]\n\tname = T\n\temail = t@example.com\n"
        f'[filter "a"]\n\tclean = {clean}\n\tsmudge = {smudge}\n'
        f'[filter "b.x=y"]\n\tclean = {clean}\n'  # a driver name holding a dot and `=`
        f'[diff "d"]\n\ttextconv = {textconv}\n\tcommand = {external}\n'
        f'[merge "m"]\n\tdriver = {driver}\n'
        f"[diff]\n\texternal = {external}\n"
    )
    _git(repo, "-c", "init.defaultBranch=main", "init", "-q")
    (repo / "x.a").write_text("one\n")
    (repo / "y.b").write_text("one\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "init")
    (repo / ".gitattributes").write_text("*.a filter=a diff=d merge=m\n*.b filter=b.x=y\n")
    # The repository's own configuration (an approved command, or a clone's hook): fsmonitor, signatures, hooks.
    _git(repo, "config", "core.fsmonitor", fsmonitor)
    _git(repo, "config", "log.showSignature", "true")
    _git(repo, "config", "gpg.program", gpg)
    for hook in HOOKS:
        _program(repo / ".git" / "hooks" / hook, mark, hook)
    # A signed stash entry: `git stash list` checks its signature under log.showSignature.
    tree = _git(repo, "rev-parse", "HEAD^{tree}").strip()
    head = _git(repo, "rev-parse", "HEAD").strip()
    signed = (
        f"tree {tree}\nparent {head}\nauthor T <t@e> 1 +0000\ncommitter T <t@e> 1 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nWIP on main\n"
    )
    (tmp_path / "signed").write_text(signed)
    stash = _git(repo, "hash-object", "-t", "commit", "-w", "--literally", str(tmp_path / "signed")).strip()
    _git(repo, "update-ref", "--create-reflog", "-m", "WIP", "refs/stash", stash)
    mark.unlink(missing_ok=True)
    (repo / "x.a").write_text("two\n")
    (repo / "y.b").write_text("two\n")
    return repo, mark


def _ran(mark: Path) -> set[str]:
    found = set(mark.read_text().split()) if mark.exists() else set()
    mark.unlink(missing_ok=True)
    return found


def test_every_plant_runs_under_a_plain_git(planted: tuple[Path, Path]) -> None:
    repo, mark = planted
    _git(repo, "status", "--porcelain")
    _git(repo, "stash", "list")
    _git(repo, "diff", "--no-ext-diff")
    _git(repo, "diff")
    assert {"clean", "fsmonitor", "gpg", "textconv", "external-diff"} <= _ran(mark)
    _git(repo, "hash-object", "y.b")
    assert "clean" in _ran(mark)  # the driver whose name holds `.` and `=`
    _git(repo, "add", "x.a")
    _git(repo, "commit", "-qm", "plain")
    assert {"clean", "pre-commit", "post-commit", "post-index-change", "reference-transaction"} <= _ran(mark)


def test_safepoints_git_commands_run_none_of_them(planted: tuple[Path, Path]) -> None:
    repo, mark = planted
    os.utime(repo / "x.a", (1, 1))  # stat-dirty, same size: status must read (and would clean) the content
    state = g.git_state(str(repo))
    assert {"x.a", "y.b", ".gitattributes"} <= set(state.dirty)
    ids = g.head_blob_ids(str(repo))
    assert g.read_blob(str(repo), ids["x.a"]) == b"one\n"
    with g.BlobReader(str(repo)) as reader:
        assert reader.read(ids["y.b"]) == b"one\n"
    snapshot = g.refs_snapshot(str(repo))
    assert snapshot["stash"]
    new = g.commit_paths(str(repo), ["x.a", "y.b"], "the agent's work")
    assert _git(repo, "show", f"{new}:x.a") == "two\n"  # committed as it is on disk: no filter ran
    g.git_state(str(repo))
    assert _ran(mark) == set()


def test_a_required_filter_is_refused_in_one_line_and_not_run(planted: tuple[Path, Path]) -> None:
    """git-lfs marks its filter required: content that must go through it is not committed raw."""
    repo, mark = planted
    _git(repo, "config", "filter.a.required", "true")
    with pytest.raises(GitError, match=r"'x\.a' goes through git's filter 'a'.*commit it with .git add"):
        g.commit_paths(str(repo), ["x.a"], "m")
    assert _ran(mark) == set()
    assert g.commit_paths(str(repo), ["y.b"], "m")  # a path under an optional filter still commits
    assert _ran(mark) == set()


def test_the_users_own_command_line_settings_stay(planted: tuple[Path, Path], monkeypatch) -> None:
    """The guard's settings come after a GIT_CONFIG_COUNT the user set, never over it."""
    repo, mark = planted
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "status.showUntrackedFiles")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "no")
    guard = g._guard(str(repo))
    assert guard.env["GIT_CONFIG_KEY_1"] and "GIT_CONFIG_KEY_0" not in guard.env
    assert int(guard.env["GIT_CONFIG_COUNT"]) > 1
    g.git_state(str(repo))
    assert _ran(mark) == set()


def test_a_repository_without_drivers_sets_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    assert g._guard(str(repo)) == g.Guard({}, frozenset())
    _git(repo, "config", "filter.lfs.required", "true")
    guard = g._guard(str(repo))
    assert guard.required == {"lfs"}
    assert guard.env == {
        "GIT_CONFIG_KEY_0": "filter.lfs.required",
        "GIT_CONFIG_VALUE_0": "false",
        "GIT_CONFIG_COUNT": "1",
    }
