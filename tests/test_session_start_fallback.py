"""The capture finds every change a shadow-git checkpoint would (issue 10 §5), with the inotify journal and with the
stat-scan fallback, from the session's first command on (the capture starts on a thread).

Random commands (seeded) create, rewrite, rewrite keeping size and mtime, remove, rename, chmod, link and replace
files and folders; after each one a shadow git (``git add -A`` + ``commit`` in a separate ``GIT_DIR``, as Gemini
CLI and Cline keep one) says which paths changed, and every one of them must be among the paths the capture
recorded for that command.
"""

from __future__ import annotations

import os
import random
import shlex
import subprocess
from pathlib import Path

import pytest

import safepoint
from safepoint.engine.session import load_view
from safepoint.workspace import scan as scan_module


@pytest.fixture(params=["inotify", "scan"])
def watch_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "scan":
        monkeypatch.setattr(scan_module.ChangeWatcher, "start", classmethod(lambda cls, root, rules: None))
    return str(request.param)


class ShadowGit:
    def __init__(self, work_tree: Path, git_dir: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update({"GIT_DIR": str(git_dir), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull})
        self.base = ["git", f"--work-tree={work_tree}", "-c", "user.name=x", "-c", "user.email=x@y"]
        self.git("init", "-q")
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "exclude").write_text("/.agent-runtime/\n")
        self.checkpoint()

    def git(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, check=True)
        return done.stdout

    def checkpoint(self) -> set[str]:
        """The paths changed since the last checkpoint, as git sees them."""
        self.git("add", "-A")
        changed = set(self.git("diff", "--cached", "--no-renames", "--name-only", "-z").split("\0")) - {""}
        self.git("commit", "-q", "--allow-empty", "--no-verify", "-m", "checkpoint")
        return changed


def random_command(rng: random.Random, workspace: Path) -> str:
    files = sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*") if ".agent-runtime" not in p.parts)
    files = [f for f in files if (workspace / f).is_file() or (workspace / f).is_symlink()]
    pick = rng.choice(files) if files else "d0/a.txt"
    q = shlex.quote(pick)
    new = f"d{rng.randrange(4)}/n{rng.randrange(100)}.txt"
    options = [
        f"mkdir -p {os.path.dirname(new)} && echo made > {new}",
        f"echo more >> {q}",
        # Same size, mtime put back: only ctime (and the content) tell.
        f"t=$(stat -c %y {q}); printf '%s' \"$(tr a-z A-Z < {q})\" > {q}.tmp && cat {q}.tmp > {q}"
        f' && rm {q}.tmp && touch -d "$t" {q}',
        f"rm -f {q}",
        f"mkdir -p {os.path.dirname(new)} && mv {q} {new}",
        f"chmod +x {q}",
        f"ln -sfn target {os.path.dirname(new) or '.'}/link{rng.randrange(3)}",
        f"rm -rf d{rng.randrange(4)}",
        f"mkdir -p e && mv d{rng.randrange(4)} e/moved{rng.randrange(50)} 2>/dev/null; true",
        f"rm -f {q} && mkdir -p {q}/inside && echo x > {q}/inside/f.txt",
    ]
    return " ; ".join(rng.choice(options) for _ in range(rng.randrange(1, 4)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_change_shadow_git_sees_is_captured(tmp_path: Path, workspace: Path, watch_mode: str, seed: int) -> None:
    rng = random.Random(seed)
    for n in range(4):
        (workspace / f"d{n}").mkdir()
        for k in range(3):
            (workspace / f"d{n}" / f"f{k}.txt").write_text(f"file {n} {k}\n")
    shadow = ShadowGit(workspace, tmp_path / "shadow.git")
    tm = safepoint.open(workspace=str(workspace))
    missed: list[tuple[str, list[str]]] = []
    compared = 0
    with tm.start("t", run_id="r") as run:
        for index in range(12):
            command = random_command(rng, workspace)
            run.call_result("run_command", {"command": command}, call_id=f"c{index}")
            seen = shadow.checkpoint()
            compared += len(seen)
            recorded = {p.path for p in load_view(tm.store, "r").patches if p.tool_call_id == f"c{index}"}
            if seen - recorded:
                missed.append((command, sorted(seen - recorded)))
    assert missed == []
    assert compared >= 12  # the commands did change things
