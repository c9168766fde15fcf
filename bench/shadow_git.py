"""A shadow-git checkpoint, the baseline ``bench/workspace.py`` compares with: what Gemini CLI and Cline keep."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import measure
from measure import pressure

GIT_WARMUP = 2


def summary(ns: list[int]) -> dict[str, float]:
    """Median, p99, min and max in milliseconds (as ``workspace.summary``)."""
    return measure.summary(ns, 1e6, 3)


# shadow git --------------------------------------------------------------------------------------------------
class ShadowGit:
    """A checkpoint repository beside the workspace, as Gemini CLI and Cline keep one."""

    def __init__(self, work_tree: str, git_dir: str) -> None:
        self.work_tree = work_tree
        self.git_dir = git_dir
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update(
            {"GIT_DIR": git_dir, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
        )
        self.base = ["git", f"--work-tree={work_tree}", "-c", "user.name=x", "-c", "user.email=x@y"]
        self.base += ["-c", "gc.auto=0", "-c", "commit.gpgsign=false"]
        self.count = 0

    def _git(self, *args: str) -> None:
        subprocess.run([*self.base, *args], cwd=self.work_tree, env=self.env, check=True, stdout=subprocess.DEVNULL)

    def init(self) -> float:
        """Create the repository and commit the whole tree (untimed by callers; returns seconds)."""
        start = time.monotonic()
        self._git("init", "-q")
        os.makedirs(os.path.join(self.git_dir, "info"), exist_ok=True)
        with open(os.path.join(self.git_dir, "info", "exclude"), "a") as handle:
            handle.write("/.agent-runtime/\n")
        self.checkpoint()
        return time.monotonic() - start

    def checkpoint(self) -> tuple[int, int]:
        """``git add -A`` then ``git commit``: the nanoseconds of each."""
        self.count += 1
        t0 = time.perf_counter_ns()
        self._git("add", "-A")
        t1 = time.perf_counter_ns()
        self._git("commit", "-q", "--no-verify", "-m", f"checkpoint {self.count}")
        t2 = time.perf_counter_ns()
        return t1 - t0, t2 - t1


def time_shadow_git(git: ShadowGit, change: Callable[[int], None], samples: int) -> dict[str, Any]:
    """``samples`` timed checkpoints, each after ``change(i)``; a few untimed ones first (they also commit
    whatever the safepoint runs changed before)."""
    for i in range(GIT_WARMUP):
        change(-1 - i)
        git.checkpoint()
    adds: list[int] = []
    commits: list[int] = []
    before = pressure()
    for i in range(samples):
        change(i)
        add, commit = git.checkpoint()
        adds.append(add)
        commits.append(commit)
    totals = [a + c for a, c in zip(adds, commits, strict=True)]
    return {
        "samples": samples,
        "total": summary(totals),
        "add_all": summary(adds),
        "commit": summary(commits),
        "pressure": {"before": before, "after": pressure()},
    }
