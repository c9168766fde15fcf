"""A randomized differential test of the run_command classifier: command lines are generated from a grammar of
programs and options that are safe to run here (coreutils, grep, sed, awk, find, tar on a scratch archive, git in
a scratch repository; no network, no system settings), each is judged, and every line judged read-only
(idempotent/auto) is run with ``bash -c`` in a scratch workspace with a scratch HOME. It must leave both trees --
every file, dotfiles and ``.git`` included, with modes and link targets -- exactly as they were.

A line judged not read-only is not run. The grammar mixes harmless options with ones that write (`sort -o`,
`sed w`, `git diff --output`, `tee`, redirections) or run commands (`sed e`, awk `system()`, `find -exec`,
`tar --to-command`, `git -c`), so a classifier that let one through would change the tree. The seed is random
per run and printed with a failure; set SAFEPOINT_DIFF_SEED to replay one.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from safepoint.core.commands import classify_command

pytestmark = pytest.mark.skipif(
    not all(shutil.which(p) for p in ("bash", "git", "tar", "sed", "awk", "find", "grep", "sort")),
    reason="needs bash, git, tar, sed, awk, find, grep and sort",
)

LINES_PER_RUN = 200
FILES = ["a.txt", "b.txt", "dir/c.txt", ".hidden", "dir/.env", "notes.md"]
PATHS = [*FILES, "dir", ".", "missing.txt", "*.txt", "dir/*"]
OUT = ["out.txt", "dir/new.txt", ".hidden", "a.txt", "/dev/null"]  # targets a writer would hit


def _pick(rng: random.Random, pool: list[str], most: int = 2) -> list[str]:
    return rng.sample(pool, rng.randint(0, min(most, len(pool))))


def _sed_script(rng: random.Random) -> str:
    return rng.choice(
        [
            "p",
            "1d",
            "s/a/b/",
            "s/a/b/g",
            "$p",
            "/x/d",
            "1,2p",
            "y/ab/ba/",
            "s/a/b/w w.out",
            "w w2.out",
            "1e touch e.out",
            "s/.*/touch s.out/e",
            "1r a.txt",
            "$!N",
            "/a/{p;q}",
            "0~2d",
            "1W w3.out",
            "=",
        ]
    )


def _awk_program(rng: random.Random) -> str:
    return rng.choice(
        [
            "{print $1}",
            "NR>1",
            "{s+=1} END {print s}",
            "/a/",
            "{print NF}",
            'BEGIN{system("touch sys.out")}',
            '{print > "p.out"}',
            '{print | "cat > pipe.out"}',
            'BEGIN{"touch g.out" | getline}',
            "{print length}",
        ]
    )


def _git(rng: random.Random) -> str:
    sub = rng.choice(["status", "log", "diff", "show", "branch", "rev-parse", "ls-files", "grep", "tag", "blame"])
    options = {
        "status": ["-s", "-b", "--porcelain", "--short", "-uno", "--ignored"],
        "log": ["--oneline", "-1", "-p", "--stat", "--format=%h", "--output=log.out", "--all", "-n", "2"],
        "diff": ["--stat", "--name-only", "--cached", "HEAD", "--output=diff.out", "-U0", "--no-ext-diff"],
        "show": ["--stat", "HEAD", "HEAD:a.txt", "--output=show.out", "--format=%s"],
        "branch": ["-a", "-v", "--list", "--show-current", "newbranch"],
        "rev-parse": ["HEAD", "--show-toplevel", "--abbrev-ref", "--git-dir"],
        "ls-files": ["-m", "-o", "--others", "-s", "-z"],
        "grep": ["-n", "-i", "a", "-l", "-c", "-e", "x"],
        "tag": ["-l", "v1", "newtag"],
        "blame": ["a.txt", "-L", "1,1"],
    }[sub]
    words = _pick(rng, options, 3)
    if sub in {"grep"} and not words:
        words = ["a"]
    if sub == "blame":
        words = ["a.txt"]
    head = rng.choice(["git", "git", "git --no-pager", "git -C dir", "git -c core.pager=cat", "GIT_PAGER=cat git"])
    return " ".join([head, sub, *words])


def _simple(rng: random.Random) -> str:
    kind = rng.randrange(18)
    if kind == 0:
        return " ".join(
            ["ls", *_pick(rng, ["-l", "-a", "-la", "-R", "-1", "-t", "--color=never", "-d"]), *_pick(rng, PATHS)]
        )
    if kind == 1:
        return " ".join(["cat", *_pick(rng, ["-n", "-A", "-s"], 1), *_pick(rng, FILES, 2)]) + " </dev/null"
    if kind == 2:
        return " ".join([rng.choice(["head", "tail"]), rng.choice(["-n 1", "-2", "-c 3", ""]), rng.choice(FILES)])
    if kind == 3:
        options = _pick(rng, ["-n", "-i", "-r", "-l", "-c", "-v", "-e a", "-A1", "--include=*.txt", "-o"], 3)
        return " ".join(["grep", *options, rng.choice(["a", "x", "'^b'"]), *_pick(rng, PATHS, 2)]) + " </dev/null"
    if kind == 4:
        options = _pick(rng, ["-u", "-n", "-r", "-k2", "-o out.txt", "-t:", "--output=sorted.out", "-s"], 3)
        return " ".join(["sort", *options, rng.choice(FILES)])
    if kind == 5:
        return " ".join(["uniq", *_pick(rng, ["-c", "-d", "-u"], 1), rng.choice(FILES), *_pick(rng, ["uniq.out"], 1)])
    if kind == 6:
        options = _pick(rng, ["-n", "-E", "-s", "-i", "-z"], 2)
        return " ".join(["sed", *options, f"'{_sed_script(rng)}'", rng.choice(FILES)])
    if kind == 7:
        return " ".join(["awk", *_pick(rng, ["-F:", "-v x=1"], 1), f"'{_awk_program(rng)}'", rng.choice(FILES)])
    if kind == 8:
        tests = _pick(
            rng,
            [
                "-name '*.txt'",
                "-type f",
                "-type d",
                "-maxdepth 1",
                "-newer a.txt",
                "-empty",
                "-path ./dir -prune -o -print",
            ],
            2,
        )
        actions = _pick(
            rng,
            ["-print", "-ls", "-delete", "-fprint f.out", "-exec touch x.out \\;", "-printf '%p\\n'", "-exec cat {} +"],
            1,
        )
        return " ".join(["find", rng.choice([".", "dir"]), *tests, *actions])
    if kind == 9:
        return _git(rng)
    if kind == 10:
        options = rng.choice(
            [
                "-tf arch.tar",
                "tf arch.tar",
                "-tvf arch.tar",
                "-xf arch.tar",
                "-tf arch.tar --to-command='touch t.out'",
                "-cf new.tar a.txt",
                "-xOf arch.tar",
            ]
        )
        return f"tar {options}"
    if kind == 11:
        return " ".join(["wc", *_pick(rng, ["-l", "-c", "-w"], 2), *_pick(rng, FILES, 2)]) + " </dev/null"
    if kind == 12:
        return " ".join(["diff", *_pick(rng, ["-u", "-q", "-r", "-N"], 2), rng.choice(FILES), rng.choice(FILES)])
    if kind == 13:
        return rng.choice(
            [
                "echo hi",
                "printf '%s\\n' a",
                "pwd",
                "true",
                "stat a.txt",
                "du -s .",
                "wc -l a.txt",
                "basename dir/c.txt",
                "realpath a.txt",
                "cut -c1-2 a.txt",
                "tr a b < a.txt",
                "comm a.txt b.txt",
                "cmp a.txt b.txt",
                "nl a.txt",
                "od -c a.txt",
                "fold -w 3 a.txt",
                "md5sum a.txt",
                "base64 a.txt",
                "test -f a.txt",
                "[ -d dir ]",
                "cd dir && ls",
            ]
        )
    if kind == 14:
        return rng.choice(
            [
                "tee tee.out < a.txt",
                "touch a.txt",
                "echo x > out.txt",
                "echo x >> a.txt",
                "cp a.txt copy.txt",
                "split a.txt part.",
                "csplit a.txt 1",
                "mkdir newdir",
                "rm -f b.txt",
                "mv a.txt moved.txt",
                "ln -s a.txt link",
                "chmod 600 a.txt",
            ]
        )
    if kind == 15:
        return rng.choice(
            [
                "x=1; echo $x",
                "a=1",
                "PATH=.:$PATH ls",
                "trap 'touch trap.out' EXIT; ls",
                "printf -v v '%s' x",
                "test -v HOME",
                "declare -a arr",
                "export LANG=C",
                "HOME=. git status",
                "set -e; ls",
                "LC_ALL=C sort a.txt",
            ]
        )
    if kind == 17:  # options and programs spelled or configured so they do not look like what they are
        return rng.choice(
            [
                "sort $'-o' out.txt a.txt",
                "sort $'\\x2do' out.txt a.txt",
                "sed -n $'1\\x65 touch q.out' a.txt",
                'sort "-"o out.txt a.txt',
                "s\\ort -o out.txt a.txt",
                "git -c core.fsmonitor='touch fsm.out' status",
                "git -c alias.zz='!touch alias.out' zz",
                "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch gc.out' git status",
                "GIT_EXTERNAL_DIFF='touch ext.out' git diff --ext-diff",
                "BASH_ENV=<(echo touch be.out) bash -c ls",
                "PATH=.:$PATH ls",
                "printf -v 'arr[$(touch pv.out)]' x",
                "test -v 'arr[$(touch tv.out)]'",
                "x='arr[$(touch ax.out)]'; echo $((x))",
                "echo ${x@P}",
                "alias ls='touch al.out'; ls",
                "trap 'touch tr.out' EXIT; ls",
            ]
        )
    return rng.choice(
        [
            "xargs cat < a.txt",
            "bash -c 'ls'",
            "bash -c 'touch bc.out'",
            "sh -c 'cat a.txt'",
            "eval 'ls'",
            "env ls",
            "env -S 'touch envs.out'",
            "command -v ls",
            "nice ls",
            "timeout 5 ls",
        ]
    )


def generate(rng: random.Random) -> str:
    parts = [_simple(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    line = parts[0]
    for part in parts[1:]:
        line += rng.choice(["; ", " && ", " | ", " || "]) + part
    return line


def _tree_hash(*roots: Path) -> str:
    digest = hashlib.sha256()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted([*dirs, *files]):
                path = os.path.join(folder, name)
                info = os.lstat(path)
                digest.update(f"{os.path.relpath(path, root)}\0{info.st_mode}\0".encode())
                if os.path.islink(path):
                    digest.update(os.readlink(path).encode())
                elif os.path.isfile(path):
                    with open(path, "rb") as f:
                        digest.update(f.read())
    return digest.hexdigest()


def _scratch(base: Path) -> tuple[Path, Path, dict[str, str]]:
    work, home = base / "work", base / "home"
    (work / "dir").mkdir(parents=True)
    home.mkdir()
    for i, name in enumerate(FILES):
        (work / name).write_text(f"a line {i}\nb:x:{i}\na line {i}\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["tar", "-cf", "arch.tar", "a.txt", "dir"], cwd=work, check=True, env=env)
    for name in [*FILES, "arch.tar"]:
        os.utime(work / name, (1_000_000_000, 1_000_000_000))  # old: git's racy-clean check never re-hashes
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "seed"], ["status", "-s"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    return work, home, env


def test_lines_judged_read_only_leave_the_workspace_and_home_unchanged(tmp_path: Path) -> None:
    seed = int(os.environ.get("SAFEPOINT_DIFF_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    work, home, env = _scratch(tmp_path)
    before = _tree_hash(work, home)
    ran = asked = 0
    for _ in range(LINES_PER_RUN):
        line = generate(rng)
        verdict = classify_command(line)
        if (verdict.idempotency, verdict.replay_policy) != ("idempotent", "auto"):
            asked += 1
            continue
        ran += 1
        subprocess.run(
            ["bash", "-c", line], cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=20
        )
        after = _tree_hash(work, home)
        assert after == before, f"seed {seed}: `{line}` was judged read-only but changed the files"
    # neither half may be empty, or the test proves nothing
    assert ran >= LINES_PER_RUN // 5, f"seed {seed}: only {ran} lines judged read-only"
    assert asked >= LINES_PER_RUN // 5, f"seed {seed}: only {asked} lines judged not read-only"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_grammar_makes_lines_of_both_kinds(seed: int) -> None:
    rng = random.Random(seed)
    verdicts = [classify_command(generate(rng)).replay_policy for _ in range(100)]
    assert verdicts.count("auto") > 10
    assert len(verdicts) - verdicts.count("auto") > 10


# Lines that do change the files when run here (the test checks that first, so each attack is real). The old
# classifier judged 14 of them read-only; awk system(), tar -x --to-command and find -fprint/-exec asked already.
ATTACKS = [
    "sed -n '1e touch e.out' a.txt",
    "sed -n 'w w.out' a.txt",
    "sed 's/.*/touch s.out/e' a.txt",
    "awk 'BEGIN{system(\"touch sys.out\")}'",
    "tar -xf arch.tar --to-command='touch t.out'",
    "tar -t --checkpoint=1 --checkpoint-action=exec='touch cp.out' -f arch.tar",
    "git -c core.fsmonitor='touch fsm.out' status",
    "git diff HEAD --output=diff.out",
    "git log -1 --output=log.out",
    "BASH_ENV=<(echo touch be.out) bash -c ls",
    "PATH=.:$PATH ls",
    "printf -v 'arr[$(touch pv.out)]' x",
    "test -v 'arr[$(touch tv.out)]'",
    "trap 'touch tr.out' EXIT; ls",
    "sort $'\\x2do' out.txt a.txt",
    "find . -name a.txt -fprint f.out",
    "find . -name a.txt -exec touch x.out \\;",
]


@pytest.mark.parametrize("line", ATTACKS)
def test_attacks_that_change_the_files_are_not_judged_read_only(tmp_path: Path, line: str) -> None:
    work, home, env = _scratch(tmp_path)
    if line.startswith("PATH="):
        (work / "ls").write_text("#!/bin/sh\ntouch path.out\n")
        (work / "ls").chmod(0o755)
    before = _tree_hash(work, home)
    subprocess.run(["bash", "-c", line], cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    assert _tree_hash(work, home) != before, f"`{line}` changed nothing here: not a real attack"
    assert classify_command(line).replay_policy != "auto", classify_command(line)
