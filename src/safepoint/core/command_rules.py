"""The coarse rule tables of the ``run_command`` classifier in :mod:`safepoint.core.commands`.

Pure data: which programs (and program prefixes such as ``git push``) only read, are safe to re-run, write,
destroy or reach outside the machine; the wording and effect tags of their reasons; the wrappers and runners
that are peeled off a command; and the grades a category maps to. These tables are the coarse layer of the spec
tree (:mod:`safepoint.core.command_judge` compiles them with the specs of ``command_specs_*``): a built-in
read-only entry without a spec of its own accepts no option it does not know.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from safepoint.records import Idempotency, ReplayPolicy, RiskLevel

__all__ = [
    "BUILTIN_TABLES",
    "CATEGORIES",
    "CATEGORY_PHRASE",
    "DESTRUCTIVE",
    "GRADES",
    "HARMLESS_TARGETS",
    "HIGH_RISK",
    "HINTS",
    "IDEMPOTENCY_RANK",
    "INTERPRETERS",
    "LOCAL_WRITE",
    "MAX_CHARS",
    "MAX_DEPTH",
    "POLICY_RANK",
    "PRIVILEGED",
    "READ_ONLY",
    "READ_ONLY_SUBCOMMANDS",
    "RERUNNABLE",
    "RISK_RANK",
    "RUNNERS",
    "SHELLS",
    "WRAPPERS",
    "Category",
    "Hint",
    "canonical",
    "name_set",
]


# ----------------------------------------------------------------------------------------------------------
# Rule tables. Entries are separated by commas or newlines; an entry of several words ("git push") matches
# when the command's words start with it.
# ----------------------------------------------------------------------------------------------------------


def name_set(text: str) -> frozenset[str]:
    return frozenset(" ".join(item.split()) for item in re.split(r"[,\n]", text) if item.strip())


READ_ONLY = name_set(
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
READ_ONLY_SUBCOMMANDS: dict[str, str] = {
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

RERUNNABLE = name_set(
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
_PACKAGE_CHANGES = name_set(
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

LOCAL_WRITE = _PACKAGE_CHANGES | name_set(
    """
    mkdir, touch, cp, tee, ln, install, patch, mktemp, zip, unzip, gzip, gunzip, bzip2, bunzip2, xz, unxz,
    zstd, split, csplit, virtualenv, venv,
    npm init, npm link, npm login, uv venv, uv init, cargo new, cargo init, go mod init, go env -w,
    terraform fmt, kubectl config use-context, kubectl config set-context, docker login, docker tag
    """
)

DESTRUCTIVE = name_set(
    """
    rm, rmdir, unlink, shred, mv, dd, truncate, chmod, chown, chgrp, kill, pkill, killall,
    docker rm, docker rmi, docker stop, docker kill, docker system prune, docker volume rm,
    docker volume prune, docker image prune, docker container prune, docker network rm, docker compose down,
    pip cache purge, npm cache clean
    """
)

HIGH_RISK = name_set(
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


BUILTIN_TABLES: dict[str, frozenset[str]] = {
    "read_only": READ_ONLY,
    "rerunnable": RERUNNABLE,
    "local_write": LOCAL_WRITE,
    "destructive": DESTRUCTIVE,
    "high_risk": HIGH_RISK,
}


class Hint(NamedTuple):
    phrase: str
    effects: tuple[str, ...]
    risk: RiskLevel | None = None  # overrides the category's risk


def _group(keys: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> dict[str, Hint]:
    return dict.fromkeys(name_set(keys), Hint(phrase, effects, risk))


# What a table entry does, for the reason text and the side-effect tags; entries without one get their
# category's wording.
HINTS: dict[str, Hint] = {
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
    **{key: Hint("changes GitHub", ("network", "vcs_remote")) for key in HIGH_RISK if key.startswith("gh ")},
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
    **dict.fromkeys(_PACKAGE_CHANGES, Hint("installs or removes packages", ("filesystem_write", "network"))),
}

CATEGORY_PHRASE: dict[str, tuple[str, tuple[str, ...]]] = {
    "read_only": ("only reads", ()),
    "rerunnable": ("is a local build, test or lint step; safe to re-run", ("filesystem_write",)),
    "local_write": ("writes files", ("filesystem_write",)),
    "destructive": ("changes or removes existing data", ("filesystem_delete",)),
    "high_risk": ("has effects outside this machine that cannot be undone", ("external",)),
}

# Wrappers that run the rest of their arguments as a command: short options taking a value, long ones too.
WRAPPERS: dict[str, tuple[str, frozenset[str]]] = {
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
        name_set("--arg-file, --delimiter, --max-args, --max-procs, --max-chars, --process-slot-var"),
    ),
    "sudo": (
        "ughpCDrtTU",
        name_set(
            "--user, --group, --host, --prompt, --close-from, --chdir, --role, --type, --command-timeout, --other-user"
        ),
    ),
    "doas": ("uC", frozenset()),
}
PRIVILEGED = frozenset({"sudo", "doas"})

# Runners of a project's or a registry's tools: `uv run pytest` is judged as `pytest`.
RUNNERS: dict[tuple[str, ...], tuple[str, frozenset[str]]] = {
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
        name_set("--with, --python, --package, --directory, --project, --extra, --group, --env-file, --from"),
    ),
    ("uv", "tool", "run"): ("p", frozenset({"--from", "--with", "--python"})),
    ("poetry", "run"): ("", frozenset()),
    ("pipenv", "run"): ("", frozenset()),
    ("pdm", "run"): ("", frozenset()),
    ("hatch", "run"): ("", frozenset()),
    ("rye", "run"): ("", frozenset()),
    ("bundle", "exec"): ("", frozenset()),
}

INTERPRETERS = name_set("python, node, ruby, perl, php, deno, bun, java, lua, Rscript, source, .")
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh", "mksh", "ash"})
HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
MAX_DEPTH = 4  # nested `bash -c` / `eval` strings
MAX_CHARS = 100_000  # a line this long is not replayed blindly anyway


def canonical(name: str) -> str:
    name = name.removesuffix(".exe")
    if re.fullmatch(r"python[0-9.]*", name):
        return "python"
    if re.fullmatch(r"pip[0-9.]*", name):
        return "pip"
    if name.startswith("mkfs."):
        return "mkfs"
    return {"gmake": "make", "mvnw": "mvn", "podman": "docker", "nerdctl": "docker"}.get(name, name)


Category = str  # "read_only" | "rerunnable" | "local_write" | "destructive" | "high_risk"
CATEGORIES: tuple[Category, ...] = ("read_only", "rerunnable", "local_write", "destructive", "high_risk")

# Grades: (idempotency, replay_policy, risk_level). None of them pairs non_idempotent with auto, and the
# per-field maximum of any of them cannot either.
GRADES: dict[str, tuple[Idempotency, ReplayPolicy, RiskLevel]] = {
    "read_only": ("idempotent", "auto", "low"),
    "rerunnable": ("conditional", "auto", "low"),
    "local_write": ("conditional", "ask", "medium"),
    "mutation": ("non_idempotent", "ask", "medium"),
    "destructive": ("non_idempotent", "ask", "medium"),
    "unknown": ("non_idempotent", "ask", "medium"),
    "unparsable": ("non_idempotent", "ask", "high"),
    "high_risk": ("non_idempotent", "never", "high"),
}
IDEMPOTENCY_RANK: dict[str, int] = {"idempotent": 0, "conditional": 1, "non_idempotent": 2}
POLICY_RANK: dict[str, int] = {"auto": 0, "ask": 1, "never": 2}
RISK_RANK: dict[str, int] = {"low": 0, "medium": 1, "high": 2}
