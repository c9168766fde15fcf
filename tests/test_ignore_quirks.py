"""Ignore rules against git itself, for the corners of "**" that a differential search found: git matches the
literal prefix of a pattern on its own, so a "**" right after it behaves like a leading "**"."""

from __future__ import annotations

import os
import subprocess

import pytest

from .test_scan import _GIT, _NAMES, _git_env, keys, write

PATTERNS = [
    ("*\n!/a**\n", ""),  # the counterexample: git un-ignores a/ab/x through "a**"
    ("", "*\n!/a**\n"),
    ("a**\n", ""),
    ("/a**/b\n", ""),
    ("a**b\n", ""),
    ("/b**\n", ""),
    ("*\n!a**\n", ""),
    ("a/**\n!a/b**\n", ""),
]


@pytest.mark.skipif(_GIT is None, reason="needs git as the reference")
@pytest.mark.parametrize(("root", "sub"), PATTERNS)
def test_double_star_after_a_literal_prefix_matches_as_git_does(tmp_path, root, sub):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run([_GIT, "init", "-q", str(repo)], check=True, env=_git_env(tmp_path))
    for d in ["", "a", "b", "a/b", "a/ab", "b/a"]:
        for n in _NAMES:
            write(repo, os.path.join(d, n) if d else n, "1")
    write(repo, ".gitignore", root)
    write(repo, "a/.gitignore", sub)
    out = subprocess.run(
        [_GIT, "-C", str(repo), "ls-files", "-z", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        env=_git_env(tmp_path),
    ).stdout
    assert keys(repo) == {p for p in os.fsdecode(out).split("\0") if p}
