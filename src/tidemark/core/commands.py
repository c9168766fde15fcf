"""Classify a shell command line for the built-in ``run_command`` tool: may it be re-run after a crash?

Pure: no I/O, nothing is executed. The line is parsed with ``bashlex``; every simple command found anywhere
in it (lists, pipelines, subshells, ``$( … )``, backticks, process substitution, ``if``/``for``/``while``
bodies, ``bash -c '…'`` and ``eval`` strings) is judged on its own, and the line gets the verdict of its most
dangerous part. Anything the classifier does not understand is treated as having effects: a wrong "safe"
costs a repeated side effect, a wrong "unsafe" costs one question.

How one simple command is judged:

1. Leading ``NAME=value`` words and wrappers (``env``, ``nice``, ``nohup``, ``time``, ``timeout N``,
   ``command``, ``exec``, ``xargs``, ``sudo``, ``npx``, ``uv run`` …) are peeled off; ``python -m mod``
   becomes ``mod``; ``git``'s global options are dropped.
2. The longest entry of the rule tables that is a prefix of the words wins (``git push`` beats ``git``).
3. Programs whose arguments matter (``rm -r``, ``find -delete``, ``sed -i``, ``curl -d``, most of ``git`` …)
   have a built-in check. Its finding replaces the table's only when it is at least as dangerous: the tables
   can make such a program stricter, never laxer.
4. Anything else is unknown: non_idempotent, ask, medium.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import bashlex
import msgspec

from tidemark.errors import ConfigError
from tidemark.records import Idempotency, ReplayPolicy, RiskLevel

__all__ = ["DEFAULT_COMMAND_RULES", "CommandRules", "CommandVerdict", "classify_command", "write_targets"]


# ----------------------------------------------------------------------------------------------------------
# Rule tables. Entries are separated by commas or newlines; an entry of several words ("git push") matches
# when the command's words start with it.
# ----------------------------------------------------------------------------------------------------------


def _names(text: str) -> frozenset[str]:
    return frozenset(" ".join(item.split()) for item in re.split(r"[,\n]", text) if item.strip())


_READ_ONLY = _names(
    """
    ls, dir, exa, eza, lsd, tree, pwd, cd, pushd, popd, dirs,
    cat, bat, tac, head, tail, less, more, nl, od, hexdump, strings,
    wc, grep, egrep, fgrep, rg, ag, ack, find, fd, locate,
    echo, printf, true, false, :, test, [, sleep, seq, yes,
    which, whereis, type, whoami, id, groups, hostname, uname, arch, nproc, uptime, tty, locale, printenv,
    date, cal, stat, file, du, df, free, ps, pgrep, lsof,
    diff, cmp, comm, sort, uniq, cut, tr, paste, join, column, fold, fmt, expand, unexpand, rev, jq, yq, sed,
    awk, gawk, mawk, basename, dirname, realpath, readlink,
    md5sum, sha1sum, sha256sum, sha512sum, shasum, cksum, b2sum, base64,
    man, help, info, apropos, whatis,
    export, unset, set, alias, unalias, shopt, declare, typeset, local, readonly, umask, history, wait, jobs,
    trap, shift, return, exit, break, continue, read, getopts,
    crontab -l, python --version, python -V, node --version, node -v, ruby --version, java -version,
    java --version, rustc --version, cargo --version, npm --version, npm -v, pnpm --version, yarn --version,
    bun --version, deno --version, pip --version, uv --version, go version, tsc --version,
    npm config get, npm config list, go mod graph, go mod why, go mod verify,
    uv pip list, uv pip show, uv pip freeze, uv pip tree, uv python list, poetry env info,
    docker compose ps, docker compose logs, docker compose config, docker compose ls, docker image ls,
    docker container ls, docker volume ls, docker network ls,
    kubectl config view, kubectl config get-contexts, kubectl config current-context, kubectl auth can-i,
    kubectl rollout status, kubectl rollout history, helm repo list,
    terraform state list, terraform state show, terraform fmt -check,
    gh pr view, gh pr list, gh pr diff, gh pr checks, gh pr status, gh issue view, gh issue list,
    gh issue status, gh repo view, gh run list, gh run view, gh auth status, gh release list, gh release view,
    gh workflow list, rustup show, rustup toolchain list
    """
)

# Program -> sub-commands that only read (stored as (program, frozenset) pairs: the rules stay hashable).
_READ_ONLY_SUBCOMMANDS: dict[str, str] = {
    "git": """status, diff, log, show, branch, rev-parse, ls-files, blame, shortlog, describe, grep, ls-tree,
        cat-file, show-ref, merge-base, name-rev, rev-list, count-objects, whatchanged, check-ignore,
        check-attr, for-each-ref, var, help, version, ls-remote, reflog""",
    "npm": """ls, list, ll, la, view, v, info, show, outdated, why, explain, audit, doctor, search, prefix,
        root, bin, whoami, help""",
    "pnpm": "ls, list, why, outdated, audit, view, info",
    "yarn": "list, info, why, outdated, audit",
    "pip": "list, show, freeze, check, inspect, index, debug, hash, help",
    "uv": "tree",
    "poetry": "show, check, search, about",
    "cargo": "tree, metadata, search, pkgid, locate-project, verify-project, read-manifest, version, help",
    "go": "version, env, list, doc, help",
    "docker": "ps, images, inspect, logs, version, info, top, stats, history, port, diff, search",
    "kubectl": "get, describe, logs, version, explain, top, api-resources, api-versions, cluster-info, diff",
    "helm": "list, ls, status, get, history, show, template, lint, version, search, env",
    "terraform": "plan, validate, show, output, version, providers, graph",
    "systemctl": """status, list-units, list-unit-files, list-timers, is-active, is-enabled, is-failed, show,
        cat""",
    "brew": "list, ls, info, search, outdated, config, doctor, deps, leaves",
    "apt": "list, show, search, policy",
    "gem": "list, search, info, contents, environment, which",
    "bundle": "list, show, outdated, check, info",
    "pipx": "list",
}

_RERUNNABLE = _names(
    """
    pytest, py.test, tox, nox, unittest, coverage, make, ninja, cmake, ctest,
    tsc, eslint, prettier, jest, vitest, mocha, ruff, mypy, pyright, black, isort, flake8, pylint, pyflakes,
    pycodestyle, bandit, gcc, g++, cc, c++, clang, clang++, javac, gofmt, golangci-lint,
    npm test, npm t, npm tst, npm run test, npm run build, npm run lint, npm run typecheck, npm run check,
    npm run-script test, npm run-script build, npm run-script lint,
    pnpm test, pnpm t, pnpm build, pnpm lint, pnpm typecheck, pnpm run test, pnpm run build, pnpm run lint,
    pnpm run typecheck, yarn test, yarn build, yarn lint, yarn typecheck, yarn run test, yarn run build,
    yarn run lint, bun test, bun run test, bun run build,
    cargo build, cargo b, cargo test, cargo t, cargo check, cargo c, cargo clippy, cargo bench, cargo doc,
    cargo fmt, go test, go build, go vet, go fmt,
    mvn test, mvn compile, mvn package, mvn verify, gradle test, gradle build, gradle check,
    gradlew test, gradlew build, gradlew check, dotnet build, dotnet test, swift build, swift test,
    deno test, deno check, deno lint, deno fmt, bazel build, bazel test, docker build, docker compose build,
    pre-commit run
    """
)

# Installing or removing packages: a re-run converges on the same state, but it writes and downloads.
_PACKAGE_CHANGES = _names(
    """
    npm install, npm i, npm ci, npm add, npm uninstall, npm remove, npm rm, npm update, npm up, npm dedupe,
    npm prune, npm audit fix, npm rebuild,
    pnpm install, pnpm i, pnpm add, pnpm remove, pnpm rm, pnpm update, pnpm up, pnpm prune,
    yarn install, yarn add, yarn remove, yarn upgrade, yarn up, bun install, bun i, bun add, bun remove,
    pip install, pip uninstall, pip download, pip wheel,
    uv pip install, uv pip uninstall, uv pip sync, uv add, uv remove, uv sync, uv lock, uv tool install,
    uv python install, poetry install, poetry add, poetry remove, poetry lock, poetry update,
    pipx install, pipx uninstall,
    cargo add, cargo remove, cargo rm, cargo update, cargo install, cargo uninstall, cargo fetch,
    cargo generate-lockfile, cargo vendor,
    go get, go install, go mod tidy, go mod download, go mod vendor, go work sync,
    gem install, gem uninstall, bundle install, bundle update,
    brew install, brew uninstall, brew upgrade, brew update, brew tap,
    apt install, apt remove, apt update, apt upgrade, apt-get install, apt-get remove, apt-get update,
    apt-get upgrade, dnf install, yum install, terraform init, helm repo add, helm repo update, docker pull
    """
)

_LOCAL_WRITE = _PACKAGE_CHANGES | _names(
    """
    mkdir, touch, cp, tee, ln, install, patch, mktemp, zip, unzip, gzip, gunzip, bzip2, bunzip2, xz, unxz,
    zstd, split, csplit, virtualenv, venv,
    npm init, npm link, npm login, uv venv, uv init, cargo new, cargo init, go mod init, go env -w,
    terraform fmt, kubectl config use-context, kubectl config set-context, docker login, docker tag
    """
)

_DESTRUCTIVE = _names(
    """
    rm, rmdir, unlink, shred, mv, dd, truncate, chmod, chown, chgrp, kill, pkill, killall,
    docker rm, docker rmi, docker stop, docker kill, docker system prune, docker volume rm,
    docker volume prune, docker image prune, docker container prune, docker network rm, docker compose down,
    pip cache purge, npm cache clean
    """
)

_HIGH_RISK = _names(
    """
    git push, git lfs push,
    npm publish, npm unpublish, npm deprecate, npm dist-tag, npm owner, npm access, pnpm publish,
    yarn publish, yarn npm publish, bun publish, cargo publish, cargo yank, cargo owner, twine upload,
    poetry publish, uv publish, flit publish, hatch publish, gem push, gem yank, docker push,
    kubectl apply, kubectl create, kubectl delete, kubectl replace, kubectl patch, kubectl edit,
    kubectl scale, kubectl rollout, kubectl set, kubectl label, kubectl annotate, kubectl exec, kubectl run,
    kubectl expose,
    kubectl drain, kubectl cordon, kubectl uncordon, kubectl taint, kubectl autoscale,
    helm install, helm upgrade, helm uninstall, helm delete, helm rollback,
    terraform apply, terraform destroy, terraform import, terraform taint, terraform untaint,
    terraform state rm, terraform state mv, terraform state push, terraform force-unlock,
    pulumi up, pulumi destroy,
    gh pr create, gh pr merge, gh pr close, gh pr reopen, gh pr comment, gh pr review, gh pr edit,
    gh issue create, gh issue close, gh issue reopen, gh issue comment, gh issue edit, gh issue delete,
    gh release create, gh release delete, gh release upload, gh repo create, gh repo delete, gh repo fork,
    gh workflow run, gh run rerun, gh run cancel,
    ssh, scp, sftp, rsync, ftp, telnet, nc, ncat, socat,
    sudo, su, doas, shutdown, reboot, halt, poweroff, systemctl, service, launchctl,
    mkfs, fdisk, wipefs, parted, crontab
    """
)


class _Hint(NamedTuple):
    phrase: str
    effects: tuple[str, ...]
    risk: RiskLevel | None = None  # overrides the category's risk


def _group(keys: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> dict[str, _Hint]:
    return dict.fromkeys(_names(keys), _Hint(phrase, effects, risk))


# What a table entry does, for the reason text and the side-effect tags; entries without one get their
# category's wording.
_HINTS: dict[str, _Hint] = {
    **_group("rm, unlink", "deletes files", ("filesystem_delete",)),
    **_group("rmdir", "deletes directories", ("filesystem_delete",)),
    **_group("shred", "destroys file contents", ("filesystem_delete",), "high"),
    **_group("mv", "moves or renames files", ("filesystem_delete", "filesystem_write")),
    **_group("dd", "overwrites data block by block", ("filesystem_write",), "high"),
    **_group("truncate", "cuts files to a size", ("filesystem_delete", "filesystem_write")),
    **_group("chmod", "changes file permissions", ("filesystem_write",)),
    **_group("chown, chgrp", "changes file ownership", ("filesystem_write",)),
    **_group("kill, pkill, killall", "signals running processes", ("process",)),
    **_group(
        "docker rm, docker stop, docker kill, docker compose down",
        "stops or removes containers",
        ("process",),
    ),
    **_group(
        "docker rmi, docker image prune, docker container prune, docker network rm, pip cache purge, npm cache clean",
        "deletes cached or unused data",
        ("filesystem_delete",),
    ),
    **_group(
        "docker system prune, docker volume rm, docker volume prune",
        "deletes volumes or unused data",
        ("filesystem_delete",),
        "high",
    ),
    **_group("git push, git lfs push", "changes a remote", ("network", "vcs_remote")),
    **_group(
        "npm publish, pnpm publish, yarn publish, yarn npm publish, bun publish, cargo publish, "
        "twine upload, poetry publish, uv publish, flit publish, hatch publish, gem push, docker push",
        "publishes to a registry",
        ("network", "publish"),
    ),
    **_group(
        "npm unpublish, npm deprecate, npm dist-tag, npm owner, npm access, cargo yank, cargo owner, gem yank",
        "changes a published package",
        ("network", "publish"),
    ),
    **_group(
        "kubectl apply, kubectl create, kubectl delete, kubectl replace, kubectl patch, kubectl edit, "
        "kubectl scale, kubectl rollout, kubectl set, kubectl label, kubectl annotate, kubectl exec, "
        "kubectl run, "
        "kubectl expose, kubectl drain, kubectl cordon, kubectl uncordon, kubectl taint, kubectl autoscale, "
        "helm install, helm upgrade, helm uninstall, helm delete, helm rollback",
        "changes a cluster",
        ("infrastructure", "network"),
    ),
    **_group(
        "terraform apply, terraform destroy, terraform import, terraform taint, terraform untaint, "
        "terraform state rm, terraform state mv, terraform state push, terraform force-unlock, pulumi up, "
        "pulumi destroy",
        "changes infrastructure",
        ("infrastructure", "network"),
    ),
    **{key: _Hint("changes GitHub", ("network", "vcs_remote")) for key in _HIGH_RISK if key.startswith("gh ")},
    **_group("ssh", "runs commands on another machine", ("network", "remote_exec")),
    **_group("scp, sftp, rsync, ftp", "copies files to or from another machine", ("filesystem_write", "network")),
    **_group("telnet, nc, ncat, socat", "talks to another machine", ("network",)),
    **_group("sudo, su, doas", "runs with elevated privileges", ("privilege",)),
    **_group("shutdown, reboot, halt, poweroff", "stops the machine", ("process",)),
    **_group("systemctl, service, launchctl", "changes system services", ("process",)),
    **_group("mkfs, fdisk, wipefs, parted", "rewrites a disk", ("filesystem_delete",)),
    **_group("crontab", "changes scheduled jobs", ("process",)),
    **_group("mkdir", "creates directories", ("filesystem_write",)),
    **_group("touch", "creates or touches files", ("filesystem_write",)),
    **_group("cp, install", "copies files", ("filesystem_write",)),
    **_group("tee", "writes files", ("filesystem_write",)),
    **_group("ln", "creates links", ("filesystem_write",)),
    **dict.fromkeys(_PACKAGE_CHANGES, _Hint("installs or removes packages", ("filesystem_write", "network"))),
}

_CATEGORY_PHRASE: dict[str, tuple[str, tuple[str, ...]]] = {
    "read_only": ("only reads", ()),
    "rerunnable": ("is a local build, test or lint step; safe to re-run", ("filesystem_write",)),
    "local_write": ("writes files", ("filesystem_write",)),
    "destructive": ("changes or removes existing data", ("filesystem_delete",)),
    "high_risk": ("has effects outside this machine that cannot be undone", ("external",)),
}

# Wrappers that run the rest of their arguments as a command: short options taking a value, long ones too.
_WRAPPERS: dict[str, tuple[str, frozenset[str]]] = {
    "env": ("uCS", frozenset({"--unset", "--chdir", "--split-string"})),
    "nice": ("n", frozenset({"--adjustment"})),
    "nohup": ("", frozenset()),
    "time": ("fo", frozenset({"--format", "--output"})),
    "timeout": ("sk", frozenset({"--signal", "--kill-after"})),
    "command": ("", frozenset()),
    "builtin": ("", frozenset()),
    "exec": ("a", frozenset()),
    "stdbuf": ("ioe", frozenset({"--input", "--output", "--error"})),
    "ionice": ("cnpt", frozenset({"--class", "--classdata", "--pid"})),
    "xargs": (
        "adEILnPs",
        _names("--arg-file, --delimiter, --max-args, --max-procs, --max-chars, --process-slot-var"),
    ),
    "sudo": (
        "ughpCDrtTU",
        _names(
            "--user, --group, --host, --prompt, --close-from, --chdir, --role, --type, --command-timeout, --other-user"
        ),
    ),
    "doas": ("uC", frozenset()),
}
_PRIVILEGED = frozenset({"sudo", "doas"})

# Runners of a project's or a registry's tools: `uv run pytest` is judged as `pytest`.
_RUNNERS: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {
    ("npx",): ("p", frozenset({"--package"})),
    ("bunx",): ("p", frozenset({"--package"})),
    ("pnpx",): ("", frozenset()),
    ("uvx",): ("p", frozenset({"--from", "--with", "--python"})),
    ("npm", "exec"): ("p", frozenset({"--package"})),
    ("pnpm", "exec"): ("", frozenset()),
    ("pnpm", "dlx"): ("", frozenset()),
    ("yarn", "dlx"): ("p", frozenset({"--package"})),
    ("yarn", "exec"): ("", frozenset()),
    ("bun", "x"): ("p", frozenset({"--package"})),
    ("uv", "run"): (
        "p",
        _names("--with, --python, --package, --directory, --project, --extra, --group, --env-file, --from"),
    ),
    ("uv", "tool", "run"): ("p", frozenset({"--from", "--with", "--python"})),
    ("poetry", "run"): ("", frozenset()),
    ("pipenv", "run"): ("", frozenset()),
    ("pdm", "run"): ("", frozenset()),
    ("hatch", "run"): ("", frozenset()),
    ("rye", "run"): ("", frozenset()),
    ("bundle", "exec"): ("", frozenset()),
}

_INTERPRETERS = _names("python, node, ruby, perl, php, deno, bun, java, lua, Rscript, source, .")
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "mksh", "ash"})
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_MAX_DEPTH = 4  # nested `bash -c` / `eval` strings
_MAX_CHARS = 100_000  # bashlex is slow on huge inputs; a line this long is not replayed blindly anyway


def _canonical(name: str) -> str:
    name = name.removesuffix(".exe")
    if re.fullmatch(r"python[0-9.]*", name):
        return "python"
    if re.fullmatch(r"pip[0-9.]*", name):
        return "pip"
    if name.startswith("mkfs."):
        return "mkfs"
    return {"gmake": "make", "mvnw": "mvn", "podman": "docker", "nerdctl": "docker"}.get(name, name)


Category = str  # "read_only" | "rerunnable" | "local_write" | "destructive" | "high_risk"
_CATEGORIES: tuple[Category, ...] = ("read_only", "rerunnable", "local_write", "destructive", "high_risk")

# Grades: (idempotency, replay_policy, risk_level). None of them pairs non_idempotent with auto, and the
# per-field maximum of any of them cannot either.
_GRADES: dict[str, tuple[Idempotency, ReplayPolicy, RiskLevel]] = {
    "read_only": ("idempotent", "auto", "low"),
    "rerunnable": ("conditional", "auto", "low"),
    "local_write": ("conditional", "ask", "medium"),
    "mutation": ("non_idempotent", "ask", "medium"),
    "destructive": ("non_idempotent", "ask", "medium"),
    "unknown": ("non_idempotent", "ask", "medium"),
    "unparsable": ("non_idempotent", "ask", "high"),
    "high_risk": ("non_idempotent", "never", "high"),
}
_IDEMPOTENCY_RANK: dict[str, int] = {"idempotent": 0, "conditional": 1, "non_idempotent": 2}
_POLICY_RANK: dict[str, int] = {"auto": 0, "ask": 1, "never": 2}
_RISK_RANK: dict[str, int] = {"low": 0, "medium": 1, "high": 2}


# ----------------------------------------------------------------------------------------------------------
# Public types
# ----------------------------------------------------------------------------------------------------------


class CommandVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """How a command line may be replayed; ``reasons`` has one sentence per finding, in the line's order."""

    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


_SET_FIELDS = ("read_only", "rerunnable", "local_write", "destructive", "high_risk")


class CommandRules(msgspec.Struct, frozen=True, kw_only=True):
    """The tables ``classify_command`` judges by. Hashable, so verdicts can be cached per (command, rules).

    ``read_only_subcommands`` is a sorted tuple of ``(program, sub-commands)`` pairs rather than a dict,
    because a dict would make the rules unhashable; a dict given to the constructor or to ``extend`` is
    converted.
    When an entry sits in several tables the most dangerous one counts.
    """

    read_only: frozenset[str] = _READ_ONLY
    read_only_subcommands: tuple[tuple[str, frozenset[str]], ...] = tuple(
        sorted((program, _names(subs)) for program, subs in _READ_ONLY_SUBCOMMANDS.items())
    )
    rerunnable: frozenset[str] = _RERUNNABLE
    local_write: frozenset[str] = _LOCAL_WRITE
    destructive: frozenset[str] = _DESTRUCTIVE
    high_risk: frozenset[str] = _HIGH_RISK

    def __post_init__(self) -> None:
        # Accept plain sets, lists and a dict from callers and config files; store the hashable forms.
        for name in _SET_FIELDS:
            msgspec.structs.force_setattr(self, name, _as_names(name, getattr(self, name)))
        subs = _merge_subcommands((), self.read_only_subcommands)
        msgspec.structs.force_setattr(self, "read_only_subcommands", subs)

    def extend(self, **more: Iterable[str] | Mapping[str, Iterable[str]]) -> CommandRules:
        """A copy with ``more`` unioned in, e.g. ``extend(read_only=["mytool"], high_risk=["deploy prod"])``.

        ``read_only_subcommands`` takes a mapping (or pairs) of program -> sub-commands, merged per program.
        """
        changes: dict[str, Any] = {}
        for name, extra in more.items():
            if name == "read_only_subcommands":
                changes[name] = _merge_subcommands(self.read_only_subcommands, extra)
            elif name in _SET_FIELDS:
                changes[name] = getattr(self, name) | _as_names(name, extra)
            else:
                known = ", ".join(("read_only_subcommands", *_SET_FIELDS))
                raise ConfigError(f"unknown command rule set {name!r}; use one of: {known}")
        return msgspec.structs.replace(self, **changes)


def _as_names(field: str, value: object) -> frozenset[str]:
    if isinstance(value, str):
        listed: list[object] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        listed = list(value)
    else:
        raise ConfigError(f"command rule set {field!r} needs a list of command names, not {value!r}")
    names: set[str] = set()
    for item in listed:
        if not isinstance(item, str) or not item.split():
            raise ConfigError(f"command rule set {field!r} needs non-empty command names, not {item!r}")
        names.add(" ".join(item.split()))
    return frozenset(names)


def _merge_subcommands(
    current: tuple[tuple[str, frozenset[str]], ...], extra: object
) -> tuple[tuple[str, frozenset[str]], ...]:
    merged = dict(current)
    problem = ConfigError(
        f"command rule set 'read_only_subcommands' needs a mapping of program to sub-commands, not {extra!r}"
    )
    if isinstance(extra, Mapping):
        pairs: list[object] = list(extra.items())
    elif isinstance(extra, Iterable) and not isinstance(extra, str):
        pairs = list(extra)
    else:
        raise problem
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise problem
        program, subs = pair
        if not isinstance(program, str) or not program.strip():
            raise problem
        key = _canonical(program.strip())
        merged[key] = merged.get(key, frozenset()) | _as_names("read_only_subcommands", subs)
    return tuple(sorted(merged.items()))


DEFAULT_COMMAND_RULES = CommandRules()


def classify_command(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> CommandVerdict:
    """The verdict for a whole command line: the most dangerous of its parts. Never raises."""
    try:
        return _classify_cached(command, rules)
    except Exception as exc:  # a classifier bug must not crash the runtime; refuse to replay instead
        return _verdict([_finding("unparsable", ("unknown",), f"internal error while analysing the command: {exc!r}")])


# ----------------------------------------------------------------------------------------------------------
# Findings and the worst-part rule
# ----------------------------------------------------------------------------------------------------------


class _Finding(NamedTuple):
    idempotency: Idempotency
    replay_policy: ReplayPolicy
    risk_level: RiskLevel
    side_effects: tuple[str, ...]
    reason: str


def _finding(grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> _Finding:
    idempotency, policy, base_risk = _GRADES[grade]
    return _Finding(idempotency, policy, risk or base_risk, tuple(effects), reason)


def _danger(findings: Sequence[_Finding]) -> tuple[int, int, int]:
    return (
        max(_POLICY_RANK[f.replay_policy] for f in findings),
        max(_IDEMPOTENCY_RANK[f.idempotency] for f in findings),
        max(_RISK_RANK[f.risk_level] for f in findings),
    )


def _verdict(findings: Sequence[_Finding]) -> CommandVerdict:
    return CommandVerdict(
        idempotency=max((f.idempotency for f in findings), key=_IDEMPOTENCY_RANK.__getitem__),
        replay_policy=max((f.replay_policy for f in findings), key=_POLICY_RANK.__getitem__),
        risk_level=max((f.risk_level for f in findings), key=_RISK_RANK.__getitem__),
        side_effects=tuple(sorted({effect for f in findings for effect in f.side_effects})),
        reasons=tuple(dict.fromkeys(f.reason for f in findings)),
    )


@functools.lru_cache(maxsize=4096)
def _classify_cached(command: str, rules: CommandRules) -> CommandVerdict:
    walker = _Walker(_compile(rules))
    walker.text(command, depth=0)
    return _verdict(walker.findings)


# ----------------------------------------------------------------------------------------------------------
# Compiled tables
# ----------------------------------------------------------------------------------------------------------


class _Compiled(NamedTuple):
    table: dict[tuple[str, ...], Category]  # entry words -> most dangerous category holding it
    longest: dict[str, int]  # program -> words in its longest entry (to name unknown sub-commands)


@functools.lru_cache(maxsize=16)
def _compile(rules: CommandRules) -> _Compiled:
    table: dict[tuple[str, ...], Category] = {}
    longest: dict[str, int] = {}

    def add(entry: str, category: Category) -> None:
        words = entry.split()
        key = (_canonical(posixpath.basename(words[0]) or words[0]), *words[1:])
        old = table.get(key)
        if old is None or _CATEGORIES.index(category) > _CATEGORIES.index(old):
            table[key] = category
        longest[key[0]] = max(longest.get(key[0], 0), len(key))

    for category in _CATEGORIES:
        for entry in getattr(rules, category):
            add(entry, category)
    for program, subs in rules.read_only_subcommands:
        for sub in subs:
            add(f"{program} {sub}", "read_only")
    return _Compiled(table, longest)


def _lookup(compiled: _Compiled, argv: Sequence[str]) -> tuple[Category, tuple[str, ...]] | None:
    for size in range(min(len(argv), compiled.longest.get(argv[0], 0)), 0, -1):
        key = tuple(argv[:size])
        category = compiled.table.get(key)
        if category is not None:
            return category, key
    return None


def _table_finding(category: Category, key: tuple[str, ...]) -> _Finding:
    text = " ".join(key)
    phrase, effects = _CATEGORY_PHRASE[category]
    hint = _HINTS.get(text)
    risk = None
    if hint is not None:
        phrase, effects, risk = hint
    return _finding(category, effects, f"`{text}` {phrase}", risk)


# ----------------------------------------------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------------------------------------------


class _ParseFailure(Exception):
    pass


_QUOTED_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]+)'|\"([^\"\n]+)\"|\\(\w+))")
_TIME_KEYWORD = re.compile(r"(^|[;&|(){}\n!]|\b(?:then|do|else))([ \t]*)time(?=[ \t]|$)", re.MULTILINE)
_DOUBLE_BRACKETS = re.compile(r"(^|(?<=[\s;&|(]))\[\[(?=\s)|(?<=\s)\]\](?=$|[\s;&|)])", re.MULTILINE)


def _parse(text: str) -> tuple[list[Any], frozenset[str], str]:
    """bashlex's trees, the here-document delimiters that were quoted (their bodies are not expanded), and the
    text the trees' positions refer to.

    bashlex rejects a few common constructs; on failure the line is rewritten once into an equivalent it does
    accept (or one that is judged at least as dangerously) and parsed again.
    """
    try:
        return list(bashlex.parse(text)), frozenset(), text
    except Exception as first:  # bashlex raises ParsingError, NotImplementedError, AttributeError, …
        quoted: set[str] = set()

        def unquote(match: re.Match[str]) -> str:
            delimiter = match.group(2) or match.group(3) or match.group(4)
            quoted.add(delimiter)
            return f"<<{match.group(1)}{delimiter}"

        # `cat <<'EOF'` -> `cat <<EOF` (quoted delimiters are unsupported); `$((1+2))` -> `0` (unless it
        # hides a substitution); `time cmd` -> `\time cmd` (the keyword is unsupported); `[[ … ]]` -> `[ … ]`
        # (unsupported; the rewrite only ever adds findings).
        rewritten = _replace_arithmetic(_QUOTED_HEREDOC.sub(unquote, text))
        rewritten = _TIME_KEYWORD.sub(r"\1\2\\time", rewritten)
        rewritten = _DOUBLE_BRACKETS.sub(lambda m: m.group(0).replace("[[", "[").replace("]]", "]"), rewritten)
        if rewritten != text:
            try:
                return list(bashlex.parse(rewritten)), frozenset(quoted), rewritten
            except Exception:
                pass
        raise _ParseFailure(_describe_parse_error(first)) from None


def _replace_arithmetic(text: str) -> str:
    """`$(( … ))` -> `0`; left alone when it contains a command substitution, which must not vanish."""
    out: list[str] = []
    i = 0
    while (start := text.find("$((", i)) >= 0:
        depth, j, inner_end = 0, start + 1, -1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 1 and inner_end < 0 and j > start + 2:
                inner_end = j  # where the second `(` closed
            if depth == 0:
                break
            j += 1
        inner = text[start + 3 : j - 1]
        # Only a true `$(( … ))`: otherwise bash reads `$( ( … ) … )`, a command substitution.
        if j >= len(text) or inner_end != j - 1 or "$(" in inner or "`" in inner:
            out.append(text[i : start + 3])
            i = start + 3
            continue
        out.append(text[i:start] + "0")
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def _describe_parse_error(exc: Exception) -> str:
    message = " ".join(str(exc).split())[:120]
    if isinstance(exc, NotImplementedError):
        return f"uses shell syntax the parser does not support ({message})"
    if isinstance(exc, bashlex.errors.ParsingError):
        return f"is not valid shell ({message})"
    return f"could not be parsed ({type(exc).__name__}: {message})" if message else "could not be parsed"


def _is_blank(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


# ----------------------------------------------------------------------------------------------------------
# The walk
# ----------------------------------------------------------------------------------------------------------

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_EXPANSION_KINDS = frozenset({"parameter", "commandsubstitution", "processsubstitution"})

_Handler = Callable[["_Walker", list[str], int], "list[_Finding] | None"]


class _Walker:
    def __init__(self, compiled: _Compiled) -> None:
        self.compiled = compiled
        self.findings: list[_Finding] = []
        self.source = ""  # the text being walked: word positions point into it

    def word(self, node: Any) -> str:
        """A word's text without quotes. bashlex mangles adjacent quoted parts (`'it'\\''s'` stays as is), so
        words with quotes are re-read from the source with shlex; bashlex's text is kept when that fails."""
        text = str(getattr(node, "word", ""))
        pos = getattr(node, "pos", None)
        if not (isinstance(pos, tuple) and len(pos) == 2):
            return text
        raw = self.source[pos[0] : pos[1]]
        if not any(q in raw for q in "'\"\\") or "`" in raw:
            return text
        try:
            split = shlex.split(raw)
        except ValueError:
            return text
        return split[0] if len(split) == 1 else text

    def add(self, grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> None:
        self.findings.append(_finding(grade, effects, reason, risk))

    # ---- text -> trees -----------------------------------------------------------------------------------

    def text(self, text: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            self.add(
                "unparsable",
                ("unknown",),
                f"shell strings nested deeper than {_MAX_DEPTH} levels; not analysed",
            )
            return
        if _is_blank(text):
            self.add("read_only", (), "empty command")
            return
        if len(text) > _MAX_CHARS:
            self.add("unparsable", ("unknown",), f"command longer than {_MAX_CHARS} characters; not analysed")
            return
        try:
            trees, quoted, source = _parse(text)
        except _ParseFailure as failure:
            self.add("unparsable", ("unknown",), f"the command {failure}; treated as dangerous")
            return
        before = len(self.findings)
        outer, self.source = self.source, source
        try:
            for tree in trees:
                self.node(tree, depth, quoted)
        finally:
            self.source = outer
        if len(self.findings) == before:  # the tree held nothing this walk recognises: do not call it safe
            self.add("unknown", ("unknown",), "no command found in the parsed line; treated as having effects")

    def collect(self, run: Callable[[], None]) -> list[_Finding]:
        """The findings ``run`` records, taken out of the line's list so a caller can weigh them first."""
        before = len(self.findings)
        run()
        found = self.findings[before:]
        del self.findings[before:]
        return found

    def node(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        kind = getattr(node, "kind", None)
        if kind == "command":
            self.simple_command(node, depth, quoted)
            return
        if kind == "parameter":
            value = str(getattr(node, "value", ""))
            if "$(" in value or "`" in value:  # bashlex leaves substitutions inside ${…} unparsed
                self.add("unknown", ("unknown",), f"command substitution inside `${{{value}}}` is not analysed")
            return
        if kind == "redirect":
            self.redirect(node, depth, quoted)
            return
        for child in _children(node):
            self.node(child, depth, quoted)

    def simple_command(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        parts = list(getattr(node, "parts", []))
        words: list[str] = []
        dynamic_program = False
        assignments: list[str] = []
        stdin: str | None = None
        for part in parts:
            kind = getattr(part, "kind", None)
            if kind == "assignment":
                if not words:
                    assignments.append(self.word(part))
            elif kind == "word":
                text = self.word(part)
                if not words and _ASSIGNMENT.match(text):
                    assignments.append(text)
                    continue
                if not words:
                    dynamic_program = any(getattr(p, "kind", None) in _EXPANSION_KINDS for p in _children(part))
                words.append(text)
            elif kind == "redirect":
                stdin = self.stdin_text(part) if stdin is None else stdin
        if words:
            if dynamic_program or _looks_dynamic(words[0]):
                self.add(
                    "unknown",
                    ("unknown",),
                    f"program name `{words[0]}` is decided at run time; treated as having effects",
                )
            else:
                self.argv(words, depth, stdin)
        elif assignments:
            variable = re.split(r"[\[+=]", assignments[0], maxsplit=1)[0]
            self.add("read_only", (), f"assignment to `{variable}` only sets a shell variable")
        # Redirections and substitutions nested in the words, in the line's order.
        for part in parts:
            if getattr(part, "kind", None) == "redirect":
                self.redirect(part, depth, quoted)
            else:
                self.nested(part, depth, quoted)

    def nested(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        for child in _children(node):
            self.node(child, depth, quoted)

    def stdin_text(self, redirect: Any) -> str | None:
        """What a here-document or here-string feeds the command, for `bash <<EOF … EOF`."""
        if getattr(redirect, "type", "") == "<<<":
            return self.word(getattr(redirect, "output", None))
        heredoc = getattr(redirect, "heredoc", None)
        if heredoc is not None:
            lines = str(getattr(heredoc, "value", "")).split("\n")
            if lines and lines[-1].strip() == self.word(getattr(redirect, "output", None)):
                lines = lines[:-1]  # bashlex keeps the closing delimiter line
            return "\n".join(lines)
        return None

    def redirect(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        rtype = str(getattr(node, "type", ""))
        output = getattr(node, "output", None)
        heredoc = getattr(node, "heredoc", None)
        if heredoc is not None:
            delimiter = self.word(output)
            body = str(getattr(heredoc, "value", ""))
            if delimiter not in quoted and ("$(" in body or "`" in body):
                self.add(
                    "unknown",
                    ("unknown",),
                    "a here-document runs a command substitution that is not analysed",
                )
            return
        if output is None or isinstance(output, int | str):
            return  # to or from a file descriptor (`2>&1`, `>&-`)
        target = self.word(output)
        self.nested(output, depth, quoted)
        shown = f"`{getattr(node, 'input', None) or ''}{rtype} {target}`"
        if rtype in {">", ">|", "&>", ">&", "<>"}:
            if target not in _HARMLESS_TARGETS and not target.isdigit():
                self.add("local_write", ("filesystem_write",), f"redirection {shown} writes a file")
        elif rtype in {">>", "&>>"} and target not in _HARMLESS_TARGETS:
            self.add(
                "mutation",
                ("filesystem_write",),
                f"redirection {shown} appends to a file; a re-run duplicates data",
            )

    # ---- one simple command's words ----------------------------------------------------------------------

    def argv(self, words: Sequence[str], depth: int, stdin: str | None = None) -> None:
        argv = list(words)
        while argv:
            if _looks_dynamic(argv[0]):
                self.add(
                    "unknown",
                    ("unknown",),
                    f"program name `{argv[0]}` is decided at run time; treated as having effects",
                )
                return
            name = _canonical(posixpath.basename(argv[0]) or argv[0])
            argv[0] = name
            if name in _WRAPPERS:
                rest = self.unwrap(name, argv, depth)
                if rest is None:
                    return
                if not rest:
                    if name not in _PRIVILEGED:
                        self.add("read_only", (), f"`{'echo' if name == 'xargs' else name}` only reads")
                    return
                argv = rest
                continue
            runner = next((key for key in _RUNNERS if tuple(argv[: len(key)]) == key), None)
            if runner is not None and len(argv) > len(runner):
                short, long = _RUNNERS[runner]
                rest = argv[len(runner) :]
                if rest[0] in {"-c", "--call"} and runner in {("npx",), ("npm", "exec")} and len(rest) > 1:
                    self.text(rest[1], depth + 1)
                    return
                start = _skip_options(rest, short, long)
                if start < len(rest):
                    argv = rest[start:]
                    continue
            if name == "python":
                module = _python_module(argv)
                if module is None:
                    self.add("unknown", ("unknown",), "`python -c` runs inline code that is not analysed")
                    return
                if module:
                    argv = module
                    continue
            break
        if not argv:
            return
        if argv[0] == "git":
            argv = _strip_git_options(argv)
        self.judge(argv, depth, stdin)

    def unwrap(self, name: str, argv: list[str], depth: int) -> list[str] | None:
        """The wrapped command's words, or None when the wrapper itself settled the verdict."""
        short, long = _WRAPPERS[name]
        args = argv[1:]
        if name in _PRIVILEGED:
            self.add("high_risk", ("privilege",), f"`{name}` runs the command with elevated privileges")
        if name == "command" and any(a in {"-v", "-V"} for a in args[:2]):
            self.add("read_only", (), "`command -v` only looks a command up")
            return None
        start = _skip_options(args, short, long)
        rest = args[start:]
        for option, value in _option_pairs(args[:start], short, long):
            if name == "env" and option in {"-S", "--split-string"}:
                # `env -S 'cmd args'` splits the string into a command line
                self.text(" ".join([value or "", *rest]), depth + 1)
                return None
            if name == "time" and option in {"-o", "--output"}:
                self.add("local_write", ("filesystem_write",), f"`time -o {value}` writes a file")
        if name == "timeout" and rest:
            rest = rest[1:]  # the duration
        if name == "env":
            while rest and _ASSIGNMENT.match(rest[0]):
                rest = rest[1:]
        return rest

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        handler = _HANDLERS.get(name)
        found: list[_Finding] | None = None
        if name in _SHELLS:
            found = self.shell(argv, depth, stdin)
        elif name == "eval":
            found = self.collect(lambda: self.text(" ".join(argv[1:]), depth + 1))
        elif handler is not None:
            found = handler(self, argv, depth)
        match = _lookup(self.compiled, argv)
        table = [_table_finding(*match)] if match is not None else None
        if found and (table is None or _danger(found) >= _danger(table)):
            self.findings.extend(found)
        elif table:
            self.findings.extend(table)
        elif name in _INTERPRETERS:
            self.add("unknown", ("unknown",), f"`{self.display(argv)}` runs code that is not analysed")
        else:
            reason = f"`{self.display(argv)}` is not a known command; treated as having effects"
            self.add("unknown", ("unknown",), reason)

    def display(self, argv: Sequence[str]) -> str:
        shown = [argv[0]]
        for word in argv[1 : self.compiled.longest.get(argv[0], 1)]:
            if word.startswith("-"):
                break
            shown.append(word)
        return " ".join(shown)

    def shell(self, argv: list[str], depth: int, stdin: str | None) -> list[_Finding] | None:
        args = argv[1:]
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                i += 1
                break
            if arg in {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}:
                i += 2
                continue
            if arg.startswith(("-", "+")) and len(arg) > 1:
                if not arg.startswith("--") and "c" in arg[1:]:
                    script = args[i + 1] if i + 1 < len(args) else ""
                    return self.collect(lambda: self.text(script, depth + 1))  # noqa: B023 (called at once)
                i += 1
                continue
            break
        if i < len(args):
            reason = f"`{argv[0]} {args[i]}` runs a script that is not analysed"
            return [_finding("unknown", ("unknown",), reason)]
        if stdin is not None:
            return self.collect(lambda: self.text(stdin, depth + 1))
        reason = f"`{argv[0]}` runs commands from standard input that are not analysed"
        return [_finding("unknown", ("unknown",), reason, "high")]


def _children(node: Any) -> list[Any]:
    found: list[Any] = []
    for attr in ("parts", "list", "command", "output", "redirects"):
        value = getattr(node, attr, None)
        if isinstance(value, list):
            found.extend(v for v in value if hasattr(v, "kind"))
        elif hasattr(value, "kind"):
            found.append(value)
    return found


def _looks_dynamic(program: str) -> bool:
    # `$CMD`, `$(…)`, and globs (`r?` may expand to `rm`) in the program position.
    return "$" in program or "`" in program or (program != "[" and any(c in program for c in "*?["))


def _skip_options(args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]) -> int:
    """Index of the first word after a program's options (and after a `--`)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1
        if arg.startswith("--"):
            i += 2 if "=" not in arg and arg in long_with_value else 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j == len(arg) - 1:
                        i += 1  # the value is the next word
                    break
            i += 1
            continue
        return i
    return i


def _python_module(argv: Sequence[str]) -> list[str] | None:
    """`python -m mod args` -> [mod, args]; [] when there is no -m; None for `python -c`."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return [argv[i + 1], *argv[i + 2 :]]
        if arg.startswith("-m") and len(arg) > 2:
            return [arg[2:], *argv[i + 1 :]]
        if arg == "-c" or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
            return None
        if not arg.startswith("-") or arg == "-":
            return []
        i += 2 if arg in {"-W", "-X", "-Q"} else 1
    return []


_GIT_OPTIONS_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)


def _strip_git_options(argv: list[str]) -> list[str]:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _GIT_OPTIONS_WITH_VALUE else 1
    return ["git", *argv[i:]]


def _short_flags(args: Iterable[str]) -> set[str]:
    """Single letters of `-abc` clusters plus whole `--long` options, up to a `--`."""
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def _positionals(args: Iterable[str]) -> list[str]:
    return [arg for arg in args if not arg.startswith("-")]


# ----------------------------------------------------------------------------------------------------------
# Programs whose arguments decide the verdict
# ----------------------------------------------------------------------------------------------------------


def _h_recursive(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    name = argv[0]
    flags = _short_flags(argv[1:])
    recursive = "--recursive" in flags or "R" in flags or (name == "rm" and "r" in flags)
    if not recursive:
        return None
    shown = next((a for a in argv[1:] if a.startswith("-") and ("r" in a.lower())), "-r")
    hint = _HINTS.get(name, _Hint("changes files", ("filesystem_write",)))
    return [_finding("destructive", hint.effects, f"`{name} {shown}` {hint.phrase} recursively", "high")]


def _h_find(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    found: list[_Finding] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-delete":
            found.append(_finding("destructive", ("filesystem_delete",), "`find -delete` deletes files"))
        elif arg in {"-fprint", "-fprint0", "-fprintf", "-fls"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`find {arg}` writes a file"))
        elif arg in {"-exec", "-execdir", "-ok", "-okdir"}:
            end = i + 1
            while end < len(argv) and argv[end] not in {";", "+"}:
                end += 1
            if end > i + 1:
                command = argv[i + 1 : end]
                found.extend(walker.collect(lambda: walker.argv(command, depth)))  # noqa: B023 (called at once)
            i = end
        i += 1
    return found or None


def _h_fd(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    for i, arg in enumerate(argv[1:], start=1):
        if arg in {"-x", "--exec", "-X", "--exec-batch"} and i + 1 < len(argv):
            command = argv[i + 1 :]
            return walker.collect(lambda: walker.argv(command, depth))  # noqa: B023 (called at once)
    return None


def _h_sed(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg == "--in-place" or arg.startswith("--in-place="):
            return [_finding("local_write", ("filesystem_write",), "`sed --in-place` edits files in place")]
        if arg.startswith("-") and not arg.startswith("--"):
            for char in arg[1:]:
                if char == "i":
                    return [_finding("local_write", ("filesystem_write",), "`sed -i` edits files in place")]
                if char in "efl":  # takes a value: the rest is not flags
                    break
    return None


def _h_tee(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    flags = _short_flags(argv[1:])
    if ("a" in flags or "--append" in flags) and _positionals(argv[1:]):
        return [_finding("mutation", ("filesystem_write",), "`tee -a` appends to files; a re-run duplicates data")]
    return None


def _h_sort(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if any(a in {"-o", "--output"} or a.startswith(("--output=", "-o")) for a in argv[1:]):
        return [_finding("local_write", ("filesystem_write",), "`sort -o` writes a file")]
    return None


def _h_uniq(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if len(_positionals(argv[1:])) >= 2:
        return [_finding("local_write", ("filesystem_write",), "`uniq INPUT OUTPUT` writes a file")]
    return None


def _h_yq(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if any(a in {"-i", "--inplace"} for a in argv[1:]):
        return [_finding("local_write", ("filesystem_write",), "`yq -i` edits files in place")]
    return None


def _h_awk(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    # awk can write files (`print > f`), run commands (`system()`, `| getline`) and edit in place.
    program = " ".join(argv[1:])
    if any(a == "-f" or a.startswith("-f") for a in argv[1:]) or any(s in program for s in ("system", ">", "|")):
        return [_finding("unknown", ("unknown",), f"`{argv[0]}` program may write files or run commands")]
    if "inplace" in program:
        return [_finding("local_write", ("filesystem_write",), f"`{argv[0]} -i inplace` edits files in place")]
    return None


_MAKE_RISKY_TARGET = re.compile(r"deploy|publish|release|upload|push|install")


def _h_make(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    start = 1
    targets: list[str] = []
    while start < len(argv):
        arg = argv[start]
        if arg in {"-C", "-f", "-I", "-o", "-W", "--directory", "--file", "--makefile"}:
            start += 2
            continue
        if not arg.startswith("-") and "=" not in arg:
            targets.append(arg)
        start += 1
    risky = [t for t in targets if _MAKE_RISKY_TARGET.search(t)]
    if risky:
        reason = f"`make {risky[0]}` runs a target that may have effects beyond a build; treated as unknown"
        return [_finding("unknown", ("unknown",), reason)]
    return None


def _h_tar(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    args = argv[1:]
    letters: set[str] = set()
    longs: set[str] = set()
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            longs.add(arg.split("=", 1)[0])
        elif (arg.startswith("-") and len(arg) > 1) or (i == 0 and arg and not arg.startswith("-")):
            letters.update(arg.lstrip("-"))
    if "--delete" in longs:
        return [_finding("destructive", ("filesystem_delete",), "`tar --delete` removes members from an archive")]
    if letters & set("cruA") or longs & {"--create", "--append", "--update", "--concatenate", "--catenate"}:
        return [_finding("local_write", ("filesystem_write",), "`tar` writes an archive")]
    if "x" in letters or longs & {"--extract", "--get"}:
        return [_finding("local_write", ("filesystem_write",), "`tar -x` extracts files")]
    if letters & set("td") or longs & {"--list", "--diff", "--compare", "--version", "--help"}:
        return [_finding("read_only", (), "`tar -t` only reads")]
    return None


def _h_js(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if argv[0] == "yarn" and len(argv) == 1:
        return [_finding("local_write", ("filesystem_write", "network"), "`yarn` installs packages")]
    if len(argv) == 2 and argv[1] in {"run", "run-script"}:
        return [_finding("read_only", (), f"`{argv[0]} run` only lists scripts")]
    return None


_CURL_SHORT_WITH_VALUE = "AbcCdDeEFHKmoPQrtTuUwxXyYz"
_CURL_LONG_WITH_VALUE = _names(
    """
    --request, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json, --form,
    --form-string, --upload-file, --output, --output-dir, --cookie-jar, --dump-header, --config, --header,
    --user, --user-agent, --referer, --cookie, --url, --proxy, --max-time, --connect-timeout, --retry,
    --write-out, --cert, --key, --cacert, --range, --resolve, --connect-to, --interface, --limit-rate,
    --oauth2-bearer, --variable, --expand-url
    """
)
_DATA_OPTIONS = _names("-d, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json")
_UPLOAD_OPTIONS = _names("-F, --form, --form-string, -T, --upload-file")
_CURL_FILE_OUTPUTS = _names("-o, --output, -c, --cookie-jar, -D, --dump-header")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _option_pairs(
    args: Sequence[str], short_with_value: str, long_with_value: frozenset[str]
) -> list[tuple[str, str | None]]:
    """(option, value) for each option, in the `-oFILE`, `-o FILE`, `--out=F`, `--out F`, `-sSLo F` forms."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                pairs.append((name, value))
            elif name in long_with_value:
                pairs.append((name, args[i + 1] if i + 1 < len(args) else ""))
                i += 1
            else:
                pairs.append((name, None))
        elif arg.startswith("-") and len(arg) > 1:
            for j, char in enumerate(arg[1:], start=1):
                if char in short_with_value:
                    if j < len(arg) - 1:
                        pairs.append((f"-{char}", arg[j + 1 :]))
                    else:
                        pairs.append((f"-{char}", args[i + 1] if i + 1 < len(args) else ""))
                        i += 1
                    break
                pairs.append((f"-{char}", None))
        i += 1
    return pairs


def _h_curl(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    pairs = _option_pairs(argv[1:], _CURL_SHORT_WITH_VALUE, _CURL_LONG_WITH_VALUE)
    names = {name for name, _ in pairs}
    method = next((str(v).upper() for n, v in reversed(pairs) if n in {"-X", "--request"}), None)
    found: list[_Finding] = []
    if "-K" in names or "--config" in names:
        found.append(_finding("unknown", ("network", "unknown"), "`curl -K` reads options from a file; not analysed"))
    trigger = None
    if method is not None and method not in _SAFE_METHODS:
        trigger = f"-X {method}"
    elif method is None:
        upload = next((n for n in names if n in _UPLOAD_OPTIONS), None)
        data = next((n for n in names if n in _DATA_OPTIONS), None)
        if upload is not None:
            trigger = upload
        elif data is not None and not names & {"-G", "--get"}:
            trigger = data
    if trigger is not None:
        found.append(
            _finding("high_risk", ("network",), f"`curl {trigger}` sends a request that can change remote state")
        )
    else:
        found.append(_finding("read_only", ("network",), "`curl` fetches a URL (GET)"))
    for name, value in pairs:
        if name in _CURL_FILE_OUTPUTS and value not in {"-", None}:
            found.append(_finding("local_write", ("filesystem_write",), f"`curl {name} {value}` writes a file"))
        elif name in {"-O", "--remote-name", "--remote-name-all"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`curl {name}` writes a file"))
    return found


_WGET_SHORT_WITH_VALUE = "OoaPiUtTwQlARDIXe"
_WGET_LONG_WITH_VALUE = _names(
    """
    --output-document, --output-file, --append-output, --directory-prefix, --input-file, --execute,
    --user-agent, --header, --post-data, --post-file, --method, --body-data, --body-file, --tries, --timeout,
    --wait, --quota, --level, --user, --password
    """
)
_WGET_POSTS = _names("--post-data, --post-file, --body-data, --body-file")


def _h_wget(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    args = [a for a in argv[1:] if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    pairs = _option_pairs(args, _WGET_SHORT_WITH_VALUE, _WGET_LONG_WITH_VALUE)
    values = {name: value for name, value in pairs}
    method = str(values.get("--method") or "GET").upper()
    posts = next((n for n in values if n in _WGET_POSTS), None)
    found: list[_Finding] = []
    if "-e" in values or "--execute" in values:
        found.append(_finding("unknown", ("network", "unknown"), "`wget -e` runs wgetrc commands; not analysed"))
    if posts is not None or method not in _SAFE_METHODS:
        shown = posts or f"--method={method}"
        found.append(
            _finding("high_risk", ("network",), f"`wget {shown}` sends a request that can change remote state")
        )
    else:
        found.append(_finding("read_only", ("network",), "`wget` fetches a URL"))
    document = values.get("-O", values.get("--output-document"))
    if "--spider" not in values and document != "-":
        shown = f"`wget -O {document}`" if document else "`wget`"
        found.append(_finding("local_write", ("filesystem_write",), f"{shown} saves the download to a file"))
    for option in ("-o", "--output-file", "-a", "--append-output"):
        if values.get(option) not in {None, "-"}:
            found.append(_finding("local_write", ("filesystem_write",), f"`wget {option}` writes a log file"))
    return found


_GIT_MUTATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "commit": ("records a new commit", ("vcs_local",)),
    "merge": ("merges into the current branch", ("filesystem_write", "vcs_local")),
    "rebase": ("rewrites commits", ("filesystem_write", "vcs_local")),
    "cherry-pick": ("applies commits", ("filesystem_write", "vcs_local")),
    "revert": ("adds revert commits", ("filesystem_write", "vcs_local")),
    "am": ("applies patches as commits", ("filesystem_write", "vcs_local")),
    "apply": ("applies a patch to files", ("filesystem_write",)),
    "pull": ("fetches and merges from a remote", ("filesystem_write", "network", "vcs_local")),
    "mv": ("moves files", ("filesystem_write", "vcs_local")),
    "update-ref": ("changes refs", ("vcs_local",)),
    "notes": ("changes notes", ("vcs_local",)),
}
_GIT_CONDITIONAL: dict[str, tuple[str, tuple[str, ...]]] = {
    "add": ("stages files", ("vcs_local",)),
    "init": ("creates a repository", ("filesystem_write",)),
    "clone": ("clones a repository", ("filesystem_write", "network")),
    "submodule": ("updates submodules", ("filesystem_write", "network")),
    "sparse-checkout": ("changes the checked-out paths", ("filesystem_write",)),
}


_GIT_BRANCH_CHANGES = _names(
    "m, M, c, C, f, u, --force, --move, --copy, --set-upstream-to, --unset-upstream, --edit-description"
)
_GIT_BRANCH_LISTING = _names(
    """l, a, r, --list, --all, --remotes, --contains, --no-contains, --merged, --no-merged, --points-at,
    --show-current, --format, --sort, --column"""
)
_GIT_CONFIG_WRITES = _names("e, --edit, --unset, --unset-all, --add, --replace-all, --rename-section, --remove-section")


def _h_git(walker: _Walker, argv: list[str], depth: int) -> list[_Finding] | None:
    if len(argv) == 1:
        return [_finding("read_only", (), "`git` only reads")]
    sub, rest = argv[1], argv[2:]
    flags = _short_flags(rest)
    pos = _positionals(rest)

    def grade(g: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> list[_Finding]:
        # "--hard|discards …" puts the flag inside the quoted command: "`git reset --hard` discards …"
        extra, _, text = phrase.rpartition("|")
        return [_finding(g, effects, f"`{' '.join(['git', sub, *extra.split()])}` {text}", risk)]

    if sub in _GIT_MUTATIONS:
        phrase, effects = _GIT_MUTATIONS[sub]
        return grade("mutation", phrase, effects)
    if sub in _GIT_CONDITIONAL:
        phrase, effects = _GIT_CONDITIONAL[sub]
        return grade("local_write", phrase, effects)
    if sub == "fetch":
        return grade("rerunnable", "downloads from a remote; safe to re-run", ("network",))
    if sub in {"gc", "prune"}:
        return grade("destructive", "deletes unreachable objects", ("filesystem_delete",))
    if sub in {"filter-branch", "filter-repo"}:
        return grade("destructive", "rewrites history", ("filesystem_delete", "vcs_local"), "high")
    if sub == "rm":
        if "--cached" in flags:
            return grade("local_write", "--cached|unstages files", ("vcs_local",))
        return grade(
            "destructive",
            "deletes files",
            ("filesystem_delete", "vcs_local"),
            "high" if "r" in flags else None,
        )
    if sub == "reset":
        if flags & {"--hard", "--merge", "--keep"}:
            mode = next(m for m in ("--hard", "--merge", "--keep") if m in flags)
            return grade(
                "destructive",
                f"{mode}|discards uncommitted changes",
                ("filesystem_delete", "vcs_local"),
                "high",
            )
        if pos or "--soft" in flags:
            return grade("mutation", "moves the branch or unstages files", ("vcs_local",))
        return grade("local_write", "unstages files", ("vcs_local",))
    if sub == "clean":
        if "n" in flags or "--dry-run" in flags:
            return grade("read_only", "--dry-run|only reads", ())
        return grade("destructive", "deletes untracked files", ("filesystem_delete",), "high")
    if sub == "checkout":
        if flags & {"b", "B", "--orphan"}:
            return grade("local_write", "-b|creates a branch", ("filesystem_write", "vcs_local"))
        if "--" in rest or "." in pos or flags & {"f", "--force", "p", "--patch"} or len(pos) >= 2:
            return grade("destructive", "discards uncommitted changes to files", ("filesystem_delete",), "high")
        return grade("mutation", "switches branches or overwrites files", ("filesystem_write", "vcs_local"))
    if sub == "switch":
        if flags & {"--discard-changes", "f", "--force"}:
            return grade("destructive", "discards uncommitted changes", ("filesystem_delete",), "high")
        if "-" in rest:
            return grade("mutation", "-|toggles to the previous branch", ("filesystem_write", "vcs_local"))
        return grade("local_write", "switches branches", ("filesystem_write", "vcs_local"))
    if sub == "restore":
        if flags & {"S", "--staged"} and not flags & {"W", "--worktree"}:
            return grade("local_write", "--staged|unstages files", ("vcs_local",))
        return grade("destructive", "discards uncommitted changes to files", ("filesystem_delete",), "high")
    if sub == "stash":
        action = pos[0] if pos else "push"
        if action in {"list", "show"}:
            return grade("read_only", f"{action}|only reads", ())
        if action in {"drop", "clear"}:
            return grade("destructive", f"{action}|discards stashed changes", ("filesystem_delete",), "high")
        return grade("mutation", "changes the working tree and the stash", ("filesystem_write", "vcs_local"))
    if sub == "branch":
        if "D" in flags or (flags & {"d", "--delete"} and flags & {"f", "--force"}):
            return grade("destructive", "-D|deletes a branch", ("vcs_local",), "high")
        if flags & {"d", "--delete"}:
            return grade("destructive", "-d|deletes a branch", ("vcs_local",))
        if flags & _GIT_BRANCH_CHANGES:
            return grade("mutation", "changes branches", ("vcs_local",))
        if pos and not flags & _GIT_BRANCH_LISTING:
            return grade("local_write", "creates a branch", ("vcs_local",))
        return None
    if sub == "tag":
        if flags & {"d", "--delete"}:
            return grade("destructive", "-d|deletes a tag", ("vcs_local",))
        if not pos or flags & {"l", "--list", "--contains", "--points-at", "--merged", "--no-merged"}:
            return grade("read_only", "only lists tags", ())
        return grade("mutation" if flags & {"f", "--force"} else "local_write", "creates a tag", ("vcs_local",))
    if sub == "config":
        if pos and pos[0] in {"get", "list"}:
            return grade("read_only", "only reads settings", ())
        if flags & _GIT_CONFIG_WRITES or (
            pos and pos[0] in {"set", "unset", "rename-section", "remove-section", "edit"}
        ):
            return grade("local_write", "changes settings", ("vcs_local",))
        if flags & {"--get", "--get-all", "--get-regexp", "--list", "l", "--get-urlmatch"} or len(pos) <= 1:
            return grade("read_only", "only reads settings", ())
        return grade("local_write", "changes settings", ("vcs_local",))
    if sub == "remote":
        if not pos or pos[0] in {"show", "get-url"}:
            return grade("read_only", "only reads remotes", ())
        return grade("local_write", f"{pos[0]}|changes remotes", ("vcs_local",))
    if sub == "worktree":
        if pos and pos[0] == "list":
            return grade("read_only", "list|only reads", ())
        if pos and pos[0] in {"remove", "prune"}:
            return grade("destructive", f"{pos[0]}|deletes a worktree", ("filesystem_delete",))
        return grade("local_write", "changes worktrees", ("filesystem_write",))
    if sub == "reflog" and pos and pos[0] in {"expire", "delete"}:
        return grade("destructive", f"{pos[0]}|deletes reflog entries", ("vcs_local",), "high")
    return None


_HANDLERS: dict[str, _Handler] = {
    "rm": _h_recursive,
    "chmod": _h_recursive,
    "chown": _h_recursive,
    "chgrp": _h_recursive,
    "find": _h_find,
    "fd": _h_fd,
    "sed": _h_sed,
    "tee": _h_tee,
    "sort": _h_sort,
    "uniq": _h_uniq,
    "yq": _h_yq,
    "awk": _h_awk,
    "gawk": _h_awk,
    "mawk": _h_awk,
    "make": _h_make,
    "tar": _h_tar,
    "npm": _h_js,
    "pnpm": _h_js,
    "yarn": _h_js,
    "bun": _h_js,
    "curl": _h_curl,
    "wget": _h_wget,
    "git": _h_git,
}


# ----------------------------------------------------------------------------------------------------------
# Write targets: which paths a command line may change, so that a runtime can save them first
# ----------------------------------------------------------------------------------------------------------
#
# ``write_targets`` reuses the classifier's parsing and walking (``_parse``, ``_Walker``: wrappers such as
# env/sudo/xargs/timeout/`uv run` are peeled, `bash -c`/`eval`/`env -S` strings and here-documents fed to a
# shell are parsed and walked, substitutions are entered) and swaps the judging of each simple command for a
# table of per-program "which operands does it write" functions.
#
# Words carry whether they are literal (``_Word``): a word with a parameter, a command substitution, a
# leading ``~``, a brace expansion or arithmetic is skipped; a glob (``*``, ``?``, ``[…]``) is kept as
# written, quotes removed, for the caller to expand.
#
# Working directory (best effort): ``cd DIR`` / ``pushd DIR`` with a literal DIR prefixes the relative
# targets that follow (``(cd sub && rm a)`` -> ``sub/a``); an absolute DIR makes them absolute. Subshells
# (``( … )``, pipeline members, ``&`` jobs, ``$( … )``, ``bash -c``, function bodies) keep their ``cd`` to
# themselves. After a ``cd`` whose directory is not a literal (``cd "$D"``, ``cd``, ``cd -``, ``popd``)
# relative targets cannot be placed and are skipped; absolute ones are still returned. ``git -C DIR`` and
# ``patch -d DIR`` prefix their own paths the same way. ``cd`` is assumed to succeed and CDPATH is ignored.
#
# Reported: redirections (`>`, `>>`, `>|`, `&>`, `&>>`, `>&FILE`, `<>`, `N>`; not fd duplication), and the
# operands that rm, rmdir, unlink, shred, touch, truncate, tee, mv (sources and destination), cp/install/ln
# (the destination, or `-t DIR`), chmod/chown/chgrp, `sed -i`/`perl -i` (the files, and the `-i.bak` backup
# copies), `dd of=`, `git checkout/restore/rm/mv`, patch (FILE, `-o`, `-r`), `sort -o`, `uniq IN OUT`,
# `curl -o`, `wget -O`, `tar -c/-r/-u -f ARCHIVE` and gzip/bzip2/xz (the replaced input) change.
#
# Not reported (the set is not known from the line, or nothing on disk is replaced): ``tar -x``, ``unzip``,
# ``find -delete``/``-exec``, ``rsync``, ``git reset/clean/stash/switch/merge…``, ``python -c``/scripts and other
# interpreters, ``make``, package managers, ``mkdir``, ``xargs`` operands that come from standard input or
# ``-I`` replacement strings, and paths under /dev, /proc and /sys.


class _Word(str):
    """A shell word's text (quotes removed) that remembers whether it was free of expansions."""

    literal: bool

    def __new__(cls, text: str, literal: bool) -> _Word:
        word = super().__new__(cls, text)
        word.literal = literal
        return word


def _is_literal(word: str) -> bool:
    return isinstance(word, _Word) and word.literal


def _derived(parent: str, text: str) -> _Word:
    """A piece of ``parent`` (an attached option value, `of=FILE`, a backup name): literal when it is."""
    return _Word(text, _is_literal(parent))


def _raw_is_literal(raw: str) -> bool:
    """Whether a word, as written in the source, is free of expansions other than globbing."""
    if raw.startswith("~"):
        return False
    quote = ""
    braces = 0
    separated = False
    i = 0
    while i < len(raw):
        char = raw[i]
        if quote == "'":
            if char == "'":
                quote = ""
        elif char == "\\":
            i += 2
            continue
        elif char in "$`":
            return False
        elif quote == '"':
            if char == '"':
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "{":
            braces += 1
        elif braces and (char == "," or raw.startswith("..", i)):
            separated = True
        elif char == "}" and braces:
            if separated:
                return False  # `{a,b}` / `{1..3}`
            braces -= 1
        i += 1
    return True


def _mark_arithmetic(text: str) -> str | None:
    """``$(( … ))`` -> ``${_}``: bashlex cannot parse arithmetic, and the classifier's rewrite to ``0`` would
    make a word such as ``out$((n)).txt`` look literal. None when the text cannot be marked safely."""
    if "$((" not in text:
        return text
    if "\x00" in text:
        return None
    masked = _replace_arithmetic(text.replace("0", "\x00"))
    return masked.replace("0", "${_}").replace("\x00", "0")


class _Args(NamedTuple):
    options: list[tuple[str, str | None]]  # ("-t", value) / ("--target-directory", value) / ("-f", None)
    operands: list[str]  # non-option words, and every word after `--`

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.options if name in names and value is not None]


def _split_args(
    args: Sequence[str],
    short_with_value: str = "",
    long_with_value: Iterable[str] = (),
    short_optional: str = "",
) -> _Args:
    """GNU-style option parsing: options anywhere before `--`, clusters (`-rf`), `-tDIR`, `-t DIR`, `--t=DIR`,
    `--t DIR` for the options in ``long_with_value``; ``short_optional`` letters take only an attached value
    (`sed -i.bak`)."""
    longs = frozenset(long_with_value)
    options: list[tuple[str, str | None]] = []
    operands: list[str] = []
    i = 0
    only_operands = False
    while i < len(args):
        arg = args[i]
        if only_operands or arg == "-" or not arg.startswith("-"):
            operands.append(arg)
        elif arg == "--":
            only_operands = True
        elif arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                options.append((name, _derived(arg, value)))
            elif name in longs:
                options.append((name, args[i + 1] if i + 1 < len(args) else None))
                i += 1
            else:
                options.append((name, None))
        else:
            for j, char in enumerate(arg[1:], start=1):
                attached: str | None = _derived(arg, arg[j + 1 :]) if j < len(arg) - 1 else None
                if char in short_with_value:
                    if attached is None and i + 1 < len(args):
                        attached = args[i + 1]
                        i += 1
                    options.append((f"-{char}", attached))
                    break
                if char in short_optional:
                    options.append((f"-{char}", attached))
                    break
                options.append((f"-{char}", None))
        i += 1
    return _Args(options, operands)


def _join_dir(directory: str | None, path: str) -> str | None:
    """``path`` placed under ``directory`` ("" = the command's working directory, None = unknown)."""
    if path.startswith("/"):
        return path
    if directory is None:
        return None
    return posixpath.join(directory, path) if directory else path


def _change_dir(directory: str | None, target: str) -> str | None:
    """The working directory after `cd target` (normalised; "" for the starting one)."""
    if not _is_literal(target) or target in {"", "-"} or any(c in target for c in "*?["):
        return None
    joined = _join_dir(directory, target)
    if joined is None:
        return None
    normal = posixpath.normpath(joined)
    return "" if normal == "." else normal


def _under(directory: str, paths: Iterable[str]) -> list[str]:
    """``paths`` relative to ``directory`` (a word of the command, e.g. `patch -d DIR`); none if it is not
    literal."""
    if not _is_literal(directory):
        return []
    return [path if path.startswith("/") else _derived(path, posixpath.join(directory, path)) for path in paths]


_TargetFinder = Callable[["_TargetWalker", list[str]], list[str]]


class _TargetWalker(_Walker):
    """The classifier's walk, collecting the paths each simple command may change instead of verdicts."""

    def __init__(self) -> None:
        super().__init__(_compile(DEFAULT_COMMAND_RULES))
        self.targets: list[str] = []
        self.cwd: str | None = ""  # relative to the command's working directory; None once unknown
        self.words: list[str] = []  # the current simple command's words, peeled wrappers and options included

    # ---- walking -----------------------------------------------------------------------------------------

    def text(self, text: str, depth: int) -> None:
        marked = _mark_arithmetic(text)
        if marked is not None:
            super().text(marked, depth)

    def capture(self, run: Callable[[], None]) -> list[str]:
        before = len(self.targets)
        run()
        found = self.targets[before:]
        del self.targets[before:]
        return found

    def subshell(self, run: Callable[[], None]) -> None:
        saved = self.cwd
        try:
            run()
        finally:
            self.cwd = saved

    def node(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        kind = getattr(node, "kind", None)
        if kind in {"commandsubstitution", "processsubstitution", "function"}:
            self.subshell(lambda: super(_TargetWalker, self).node(node, depth, quoted))
        elif kind == "compound":
            # Redirections apply before (and outside) the body; a `( … )` body keeps its `cd` to itself.
            redirects = [r for r in getattr(node, "redirects", []) if getattr(r, "kind", None) == "redirect"]
            body = [part for part in getattr(node, "list", []) if hasattr(part, "kind")]

            def redirections() -> None:
                for redirect in redirects:
                    self.redirect(redirect, depth, quoted)

            def walk() -> None:
                for part in body:
                    self.node(part, depth, quoted)

            outer = self.capture(redirections)
            first = body[0] if body else None
            if getattr(first, "kind", None) == "reservedword" and getattr(first, "word", "") == "(":
                self.subshell(walk)
            else:
                walk()
            self.targets.extend(outer)
        elif kind == "pipeline":
            skipped = {"pipe", "reservedword"}
            members = [p for p in getattr(node, "parts", []) if getattr(p, "kind", None) not in skipped]
            for member in members:
                if len(members) > 1:  # every member of a pipeline runs in a subshell
                    self.subshell(lambda: self.node(member, depth, quoted))  # noqa: B023 (called at once)
                else:
                    self.node(member, depth, quoted)
        elif kind == "list":
            parts = list(getattr(node, "parts", []))
            for i, part in enumerate(parts):
                following = parts[i + 1] if i + 1 < len(parts) else None
                if getattr(following, "kind", None) == "operator" and getattr(following, "op", "") == "&":
                    self.subshell(lambda: self.node(part, depth, quoted))  # noqa: B023 (called at once)
                else:
                    self.node(part, depth, quoted)
        else:
            super().node(node, depth, quoted)

    def literal(self, node: Any) -> bool:
        if any(getattr(c, "kind", None) in _EXPANSION_KINDS | {"tilde"} for c in _children(node)):
            return False
        pos = getattr(node, "pos", None)
        if not (isinstance(pos, tuple) and len(pos) == 2):
            return False
        return _raw_is_literal(self.source[pos[0] : pos[1]])

    def simple_command(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        parts = list(getattr(node, "parts", []))
        words: list[str] = []
        first_pos = 0
        stdin: str | None = None
        for part in parts:
            kind = getattr(part, "kind", None)
            if kind == "word":
                text = self.word(part)
                if not words and _ASSIGNMENT.match(text):
                    continue
                if not words:
                    first_pos = part.pos[0] if isinstance(getattr(part, "pos", None), tuple) else 0
                words.append(_Word(text, self.literal(part)))
            elif kind == "redirect":
                stdin = self.stdin_text(part) if stdin is None else stdin
        # Redirections and substitutions first: they use the working directory from before a `cd` here.
        chunks: list[tuple[int, list[str]]] = []
        for part in parts:
            pos = getattr(part, "pos", (0, 0))
            start = pos[0] if isinstance(pos, tuple) else 0
            if getattr(part, "kind", None) == "redirect":
                chunks.append((start, self.capture(lambda: self.redirect(part, depth, quoted))))  # noqa: B023
            else:
                chunks.append((start, self.capture(lambda: self.nested(part, depth, quoted))))  # noqa: B023
        if words and _is_literal(words[0]):
            outer, self.words = self.words, words
            try:
                chunks.append((first_pos, self.capture(lambda: self.argv(words, depth, stdin))))
            finally:
                self.words = outer
        for _, found in sorted(chunks, key=lambda chunk: chunk[0]):
            self.targets.extend(found)

    def redirect(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        output = getattr(node, "output", None)
        if getattr(node, "heredoc", None) is not None or output is None or isinstance(output, int | str):
            return  # here-documents, and to or from a file descriptor (`2>&1`, `>&2`, `>&-`)
        self.nested(output, depth, quoted)  # `> >(tee log)`
        if str(getattr(node, "type", "")) in {">", ">>", ">|", "&>", "&>>", ">&", "<>"}:
            target = _Word(self.word(output), self.literal(output))
            if not target.isdigit() and target != "-":
                self.emit([target])

    def emit(self, paths: Iterable[str]) -> None:
        for path in paths:
            if not _is_literal(path) or not path or path in _HARMLESS_TARGETS:
                continue
            if path.startswith(("/dev/", "/proc/", "/sys/")):
                continue
            placed = _join_dir(self.cwd, path)
            if placed is not None:
                self.targets.append(str(placed))

    # ---- one simple command, wrappers peeled ---------------------------------------------------------------

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        if name in _SHELLS:
            saved = self.cwd
            self.shell(argv, depth, stdin)
            self.cwd = saved
        elif name == "eval":
            self.text(" ".join(argv[1:]), depth + 1)
        elif name in {"cd", "pushd", "popd"}:
            operands = _split_args(argv[1:]).operands
            if name == "popd" or len(operands) != 1:
                self.cwd = None  # `cd` alone goes home; `popd`, `pushd` alone: the directory stack
            else:
                self.cwd = _change_dir(self.cwd, operands[0])
        else:
            finder = _TARGET_FINDERS.get(name)
            if finder is not None:
                self.emit(self.drop_placeholders(argv, finder(self, argv)))

    def before(self, argv: Sequence[str]) -> list[str]:
        """The words of the simple command that came before ``argv[1]``: the peeled wrappers and options."""
        if len(argv) > 1:
            for i, word in enumerate(self.words):
                if word is argv[1]:
                    return self.words[:i]
        return []

    def drop_placeholders(self, argv: Sequence[str], paths: list[str]) -> list[str]:
        """Under `xargs -I R` / `-i` the words holding R are templates for standard input, not paths."""
        peeled = self.before(argv)
        if not any(posixpath.basename(word) == "xargs" for word in peeled):
            return paths
        start = max(i for i, word in enumerate(peeled) if posixpath.basename(word) == "xargs")
        parsed = _split_args(peeled[start + 1 :], "adEILnPs", _WRAPPERS["xargs"][1], "iel")
        marks = parsed.values("-I", "-i", "--replace")
        if parsed.has("-i", "--replace") and not any(parsed.values("-i", "--replace")):
            marks.append("{}")
        return [path for path in paths if not any(mark and mark in path for mark in marks)]


# ---- per program: the operands it may change ----------------------------------------------------------------


def _t_operands(short_with_value: str = "", long_with_value: Iterable[str] = ()) -> _TargetFinder:
    def find(walker: _TargetWalker, argv: list[str]) -> list[str]:
        return _split_args(argv[1:], short_with_value, long_with_value).operands

    return find


def _t_tee(walker: _TargetWalker, argv: list[str]) -> list[str]:
    return [path for path in _split_args(argv[1:]).operands if path != "-"]


_COPY_SHORT = "tS"
_COPY_LONG = ("--target-directory", "--suffix", "--sparse")


def _t_mv(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(argv[1:], _COPY_SHORT, _COPY_LONG)
    return [*args.values("-t", "--target-directory"), *args.operands]


def _t_cp(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(argv[1:], _COPY_SHORT, _COPY_LONG)
    directories = args.values("-t", "--target-directory")
    if directories:
        return directories
    return args.operands[-1:] if len(args.operands) >= 2 else []


def _t_install(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(
        argv[1:],
        "mogtS",
        ("--mode", "--owner", "--group", "--target-directory", "--suffix", "--strip-program"),
    )
    if args.has("-d", "--directory"):
        return args.operands
    directories = args.values("-t", "--target-directory")
    if directories:
        return directories
    return args.operands[-1:] if len(args.operands) >= 2 else []


def _t_ln(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(argv[1:], _COPY_SHORT, _COPY_LONG)
    directories = args.values("-t", "--target-directory")
    if directories:
        return directories
    if len(args.operands) == 1:  # `ln -s ../x` links ./x
        target = args.operands[0]
        name = posixpath.basename(target.rstrip("/"))
        return [_derived(target, name)] if name not in {"", ".", ".."} else []
    return args.operands[-1:]


def _t_mode(walker: _TargetWalker, argv: list[str]) -> list[str]:
    """chmod/chown/chgrp: the operands after the mode or owner (all of them with --reference)."""
    options = frozenset("cfvRhHLP")
    operands: list[str] = []
    reference = False
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            operands.extend(args[i + 1 :])
            break
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            reference = reference or name == "--reference"
            if name in {"--reference", "--from"} and "=" not in arg:
                i += 1
        elif arg.startswith("-") and len(arg) > 1 and set(arg[1:]) <= options:
            pass  # `-R`; `chmod -x f` is a mode, not an option
        else:
            operands.append(arg)
        i += 1
    return operands if reference else operands[1:]


def _backups(files: Iterable[str], suffix: str | None) -> list[str]:
    """The backup copies `sed -i.bak` / `perl -i.bak` write next to each file (`*` stands for the name)."""
    if not suffix:
        return []
    found: list[str] = []
    for path in files:
        if "*" not in suffix:
            name = path + suffix
        elif "/" not in suffix:
            name = posixpath.join(posixpath.dirname(path), suffix.replace("*", posixpath.basename(path)))
        else:
            continue  # a backup directory: not worth guessing
        found.append(_Word(name, _is_literal(path) and _is_literal(suffix)))
    return found


def _t_sed(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = list(argv[1:])
    for i in range(len(args) - 1):
        if args[i] == "-i" and args[i + 1] == "":
            del args[i + 1]  # BSD `sed -i '' …`: an empty backup suffix
            break
    parsed = _split_args(args, "efl", ("--expression", "--file", "--line-length"), "i")
    if not parsed.has("-i", "--in-place"):
        return []
    files = parsed.operands if parsed.has("-e", "-f", "--expression", "--file") else parsed.operands[1:]
    suffix = next((v for n, v in parsed.options if n in {"-i", "--in-place"} and v), None)
    return [*files, *_backups(files, suffix)]


def _t_perl(walker: _TargetWalker, argv: list[str]) -> list[str]:
    in_place = False
    suffix: str | None = None
    inline = False
    operands: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if operands or arg == "-" or not arg.startswith("-"):
            operands.append(arg)  # the script (unless -e) and its arguments; perl stops at the first
        elif arg == "--":
            operands.extend(args[i + 1 :])
            break
        elif not arg.startswith("--"):
            for j, char in enumerate(arg[1:], start=1):
                rest = arg[j + 1 :]
                if char in "eE":
                    inline = True
                    i += 0 if rest else 1
                    break
                if char == "i":
                    in_place, suffix = True, (_derived(arg, rest) if rest else None)
                    break
                if char == "I" and not rest:
                    i += 1
                    break
                if char in "lx0CdDFMmI":
                    break  # the rest of the cluster is this switch's value
        i += 1
    if not in_place:
        return []
    files = operands if inline else operands[1:]
    return [*files, *_backups(files, suffix)]


def _t_dd(walker: _TargetWalker, argv: list[str]) -> list[str]:
    return [_derived(arg, arg[3:]) for arg in argv[1:] if arg.startswith("of=")]


def _t_patch(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(
        argv[1:],
        "iodDFprBYzVg",
        (
            "--input", "--output", "--directory", "--ifdef", "--fuzz", "--strip", "--reject-file", "--prefix",
            "--basename-prefix", "--suffix", "--version-control", "--get", "--quoting-style", "--reject-format",
        ),
    )  # fmt: skip
    if args.has("--dry-run"):
        return []
    found = args.operands[:1]  # `patch FILE [PATCHFILE]`; with no FILE the patch names the files
    found += [v for v in args.values("-o", "--output", "-r", "--reject-file") if v != "-"]
    for directory in args.values("-d", "--directory"):
        found = _under(directory, found)
    return found


def _t_git(walker: _TargetWalker, argv: list[str]) -> list[str]:
    if len(argv) < 2:
        return []
    sub, rest = argv[1], argv[2:]
    found: list[str] = []
    if sub == "checkout":
        args = _split_args(rest, "bB", ("--orphan", "--conflict"))
        if args.has("-b", "-B", "--orphan", "--pathspec-from-file"):
            return []
        paths = rest[rest.index("--") + 1 :] if "--" in rest else args.operands
        found = [p for p in paths if p != "-"]  # without `--` the first word may be a branch: "may write"
    elif sub == "restore":
        args = _split_args(rest, "s", ("--source",))
        staged_only = args.has("-S", "--staged") and not args.has("-W", "--worktree")
        if not staged_only and not args.has("--pathspec-from-file"):
            found = args.operands
    elif sub == "rm":
        args = _split_args(rest)
        if not args.has("--cached", "-n", "--dry-run", "--pathspec-from-file"):
            found = args.operands
    elif sub == "mv":
        args = _split_args(rest)
        if not args.has("-n", "--dry-run"):
            found = args.operands
    found = [p for p in found if not p.startswith(":")]  # pathspec magic
    # `git -C DIR` (peeled off with git's other global options): paths are relative to DIR.
    peeled = walker.before(argv)
    start = max((i for i, w in enumerate(peeled) if posixpath.basename(w) == "git"), default=len(peeled))
    options = _split_args(peeled[start + 1 :], "Cc", ("--git-dir", "--work-tree", "--namespace", "--config-env"))
    if options.has("--git-dir", "--work-tree"):
        return []
    for directory in options.values("-C"):
        found = _under(directory, found)
    return found


def _t_sort(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(
        argv[1:],
        "kostST",
        (
            "--key", "--output", "--field-separator", "--buffer-size", "--temporary-directory", "--batch-size",
            "--compress-program", "--files0-from", "--parallel", "--random-source", "--sort",
        ),
    )  # fmt: skip
    return [v for v in args.values("-o", "--output") if v != "-"]


def _t_uniq(walker: _TargetWalker, argv: list[str]) -> list[str]:
    operands = _split_args(argv[1:], "fsw", ("--skip-fields", "--skip-chars", "--check-chars")).operands
    return [p for p in operands[1:2] if p != "-"]


def _t_curl(walker: _TargetWalker, argv: list[str]) -> list[str]:
    args = _split_args(argv[1:], _CURL_SHORT_WITH_VALUE, _CURL_LONG_WITH_VALUE)
    outputs = [v for v in args.values("-o", "--output") if v != "-"]
    for directory in args.values("--output-dir"):
        outputs = _under(directory, outputs)
    others = [v for v in args.values(*(_CURL_FILE_OUTPUTS - {"-o", "--output"})) if v != "-"]
    return [*outputs, *others]


def _t_wget(walker: _TargetWalker, argv: list[str]) -> list[str]:
    words = [a for a in argv[1:] if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    args = _split_args(words, _WGET_SHORT_WITH_VALUE, _WGET_LONG_WITH_VALUE)
    if args.has("--spider"):
        return []
    names = ("-O", "--output-document", "-o", "--output-file", "-a", "--append-output")
    return [v for v in args.values(*names) if v != "-"]


_TAR_SHORT_WITH_VALUE = "bCfFgHIKLNTVX"
_TAR_LONG_WITH_VALUE = (
    "--file", "--directory", "--files-from", "--exclude-from", "--listed-incremental", "--blocking-factor",
    "--use-compress-program", "--format", "--label", "--newer", "--after-date", "--info-script",
    "--new-volume-script", "--tape-length", "--owner", "--group", "--mode", "--mtime", "--exclude",
    "--transform", "--xform",
)  # fmt: skip


def _t_tar(walker: _TargetWalker, argv: list[str]) -> list[str]:
    """The archive that `tar -c/-r/-u/-A/--delete -f ARCHIVE` writes; extraction writes an unknown set."""
    args = list(argv[1:])
    if args and args[0] and not args[0].startswith("-"):  # `tar czf a.tgz src`: old-style bundled letters
        letters, values = args[0], args[1:]
        options: list[tuple[str, str | None]] = []
        for char in letters:
            value = values.pop(0) if char in _TAR_SHORT_WITH_VALUE and values else None
            options.append((f"-{char}", value))
        parsed = _Args(options, values)
    else:
        parsed = _split_args(args, _TAR_SHORT_WITH_VALUE, _TAR_LONG_WITH_VALUE)
    writes = parsed.has("-c", "-r", "-u", "-A", "--create", "--append", "--update", "--concatenate")
    if not (writes or parsed.has("--catenate", "--delete")) or parsed.has("-x", "-t", "--extract", "--list"):
        return []
    return [v for v in parsed.values("-f", "--file") if v != "-"]


def _t_compress(walker: _TargetWalker, argv: list[str]) -> list[str]:
    """gzip/bzip2/xz replace each file with its (de)compressed copy unless told to keep it."""
    args = _split_args(argv[1:], "SFCMT", ("--suffix", "--format", "--check", "--memlimit", "--threads"))
    if args.has("-k", "-c", "-l", "-t", "--keep", "--stdout", "--to-stdout", "--list", "--test"):
        return []
    return [p for p in args.operands if p != "-"]


_TARGET_FINDERS: dict[str, _TargetFinder] = {
    "rm": _t_operands(),
    "rmdir": _t_operands(),
    "unlink": _t_operands(),
    "shred": _t_operands("ns", ("--iterations", "--size", "--random-source")),
    "touch": _t_operands("drt", ("--date", "--reference", "--time")),
    "truncate": _t_operands("sr", ("--size", "--reference")),
    "tee": _t_tee,
    "mv": _t_mv,
    "cp": _t_cp,
    "install": _t_install,
    "ln": _t_ln,
    "chmod": _t_mode,
    "chown": _t_mode,
    "chgrp": _t_mode,
    "sed": _t_sed,
    "perl": _t_perl,
    "dd": _t_dd,
    "patch": _t_patch,
    "git": _t_git,
    "sort": _t_sort,
    "uniq": _t_uniq,
    "curl": _t_curl,
    "wget": _t_wget,
    "tar": _t_tar,
    "gzip": _t_compress,
    "gunzip": _t_compress,
    "bzip2": _t_compress,
    "bunzip2": _t_compress,
    "xz": _t_compress,
    "unxz": _t_compress,
}


def write_targets(command: str) -> tuple[str, ...]:
    """Paths (as written in the command, relative to the command's working directory, or absolute) that the
    command line may write, truncate, delete, move or change the mode of — so that a runtime can save their
    content just before the command runs. Literal words only; a word with a glob (*, ?, [..]) is returned as
    written (the caller expands it); a word with a variable, command substitution, ~ or other expansion is
    skipped. Never raises; returns () for an unparsable line. Order of first appearance, deduplicated.

    Quotes are removed (``rm "a b"`` -> ``a b``). A ``cd DIR`` with a literal DIR prefixes the relative paths
    after it until its subshell ends (``(cd sub && rm a)`` -> ``sub/a``); after a ``cd`` to a directory that
    is not literal, relative paths are skipped. See the comment above ``_Word`` for what is handled and what
    is skipped.
    """
    try:
        return _write_targets_cached(command)
    except Exception:  # a bug here must not crash the runtime; it only loses the pre-command copies
        return ()


@functools.lru_cache(maxsize=4096)
def _write_targets_cached(command: str) -> tuple[str, ...]:
    walker = _TargetWalker()
    walker.text(command, depth=0)
    return tuple(dict.fromkeys(walker.targets))
