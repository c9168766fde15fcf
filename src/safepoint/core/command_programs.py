"""Programs whose arguments decide the verdict: ``rm -r``, ``find -delete``, ``sed -i``, ``curl -d``, ``git …``.

One check per program (:data:`HANDLERS`). A check's finding replaces the rule table's only when it is at
least as dangerous, so the tables can make a program stricter, never laxer.
"""

from __future__ import annotations

import re

from safepoint.core.command_findings import Finding, finding
from safepoint.core.command_options import option_pairs, positionals, short_flags
from safepoint.core.command_rules import HINTS, Hint, name_set
from safepoint.core.command_walk import Handler, Walker
from safepoint.records import RiskLevel

__all__ = [
    "CURL_FILE_OUTPUTS",
    "CURL_LONG_WITH_VALUE",
    "CURL_SHORT_WITH_VALUE",
    "HANDLERS",
    "WGET_LONG_WITH_VALUE",
    "WGET_SHORT_WITH_VALUE",
]


def _h_recursive(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    name = argv[0]
    flags = short_flags(argv[1:])
    recursive = "--recursive" in flags or "R" in flags or (name == "rm" and "r" in flags)
    if not recursive:
        return None
    shown = next((a for a in argv[1:] if a.startswith("-") and ("r" in a.lower())), "-r")
    hint = HINTS.get(name, Hint("changes files", ("filesystem_write",)))
    return [finding("destructive", hint.effects, f"`{name} {shown}` {hint.phrase} recursively", "high")]


def _h_find(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    found: list[Finding] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-delete":
            found.append(finding("destructive", ("filesystem_delete",), "`find -delete` deletes files"))
        elif arg in {"-fprint", "-fprint0", "-fprintf", "-fls"}:
            found.append(finding("local_write", ("filesystem_write",), f"`find {arg}` writes a file"))
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


def _h_fd(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    for i, arg in enumerate(argv[1:], start=1):
        if arg in {"-x", "--exec", "-X", "--exec-batch"} and i + 1 < len(argv):
            command = argv[i + 1 :]
            return walker.collect(lambda: walker.argv(command, depth))  # noqa: B023 (called at once)
    return None


def _h_sed(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg == "--in-place" or arg.startswith("--in-place="):
            return [finding("local_write", ("filesystem_write",), "`sed --in-place` edits files in place")]
        if arg.startswith("-") and not arg.startswith("--"):
            for char in arg[1:]:
                if char == "i":
                    return [finding("local_write", ("filesystem_write",), "`sed -i` edits files in place")]
                if char in "efl":  # takes a value: the rest is not flags
                    break
    return None


def _h_tee(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    flags = short_flags(argv[1:])
    if ("a" in flags or "--append" in flags) and positionals(argv[1:]):
        return [finding("mutation", ("filesystem_write",), "`tee -a` appends to files; a re-run duplicates data")]
    return None


def _h_sort(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    if any(a in {"-o", "--output"} or a.startswith(("--output=", "-o")) for a in argv[1:]):
        return [finding("local_write", ("filesystem_write",), "`sort -o` writes a file")]
    return None


def _h_uniq(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    if len(positionals(argv[1:])) >= 2:
        return [finding("local_write", ("filesystem_write",), "`uniq INPUT OUTPUT` writes a file")]
    return None


def _h_yq(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    if any(a in {"-i", "--inplace"} for a in argv[1:]):
        return [finding("local_write", ("filesystem_write",), "`yq -i` edits files in place")]
    return None


def _h_awk(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    # awk can write files (`print > f`), run commands (`system()`, `| getline`) and edit in place.
    program = " ".join(argv[1:])
    if any(a == "-f" or a.startswith("-f") for a in argv[1:]) or any(s in program for s in ("system", ">", "|")):
        return [finding("unknown", ("unknown",), f"`{argv[0]}` program may write files or run commands")]
    if "inplace" in program:
        return [finding("local_write", ("filesystem_write",), f"`{argv[0]} -i inplace` edits files in place")]
    return None


_MAKE_RISKY_TARGET = re.compile(r"deploy|publish|release|upload|push|install")


def _h_make(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
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
        return [finding("unknown", ("unknown",), reason)]
    return None


def _h_tar(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    args = argv[1:]
    letters: set[str] = set()
    longs: set[str] = set()
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            longs.add(arg.split("=", 1)[0])
        elif (arg.startswith("-") and len(arg) > 1) or (i == 0 and arg and not arg.startswith("-")):
            letters.update(arg.lstrip("-"))
    if "--delete" in longs:
        return [finding("destructive", ("filesystem_delete",), "`tar --delete` removes members from an archive")]
    if letters & set("cruA") or longs & {"--create", "--append", "--update", "--concatenate", "--catenate"}:
        return [finding("local_write", ("filesystem_write",), "`tar` writes an archive")]
    if "x" in letters or longs & {"--extract", "--get"}:
        return [finding("local_write", ("filesystem_write",), "`tar -x` extracts files")]
    if letters & set("td") or longs & {"--list", "--diff", "--compare", "--version", "--help"}:
        return [finding("read_only", (), "`tar -t` only reads")]
    return None


def _h_js(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    if argv[0] == "yarn" and len(argv) == 1:
        return [finding("local_write", ("filesystem_write", "network"), "`yarn` installs packages")]
    if len(argv) == 2 and argv[1] in {"run", "run-script"}:
        return [finding("read_only", (), f"`{argv[0]} run` only lists scripts")]
    return None


CURL_SHORT_WITH_VALUE = "AbcCdDeEFHKmoPQrtTuUwxXyYz"
CURL_LONG_WITH_VALUE = name_set(
    """
    --request, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json, --form,
    --form-string, --upload-file, --output, --output-dir, --cookie-jar, --dump-header, --config, --header,
    --user, --user-agent, --referer, --cookie, --url, --proxy, --max-time, --connect-timeout, --retry,
    --write-out, --cert, --key, --cacert, --range, --resolve, --connect-to, --interface, --limit-rate,
    --oauth2-bearer, --variable, --expand-url
    """
)
_DATA_OPTIONS = name_set("-d, --data, --data-raw, --data-binary, --data-urlencode, --data-ascii, --json")
_UPLOAD_OPTIONS = name_set("-F, --form, --form-string, -T, --upload-file")
CURL_FILE_OUTPUTS = name_set("-o, --output, -c, --cookie-jar, -D, --dump-header")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _h_curl(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    pairs = option_pairs(argv[1:], CURL_SHORT_WITH_VALUE, CURL_LONG_WITH_VALUE)
    names = {name for name, _ in pairs}
    method = next((str(v).upper() for n, v in reversed(pairs) if n in {"-X", "--request"}), None)
    found: list[Finding] = []
    if "-K" in names or "--config" in names:
        found.append(finding("unknown", ("network", "unknown"), "`curl -K` reads options from a file; not analysed"))
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
            finding("high_risk", ("network",), f"`curl {trigger}` sends a request that can change remote state")
        )
    else:
        found.append(finding("read_only", ("network",), "`curl` fetches a URL (GET)"))
    for name, value in pairs:
        if name in CURL_FILE_OUTPUTS and value not in {"-", None}:
            found.append(finding("local_write", ("filesystem_write",), f"`curl {name} {value}` writes a file"))
        elif name in {"-O", "--remote-name", "--remote-name-all"}:
            found.append(finding("local_write", ("filesystem_write",), f"`curl {name}` writes a file"))
    return found


WGET_SHORT_WITH_VALUE = "OoaPiUtTwQlARDIXe"
WGET_LONG_WITH_VALUE = name_set(
    """
    --output-document, --output-file, --append-output, --directory-prefix, --input-file, --execute,
    --user-agent, --header, --post-data, --post-file, --method, --body-data, --body-file, --tries, --timeout,
    --wait, --quota, --level, --user, --password
    """
)
_WGET_POSTS = name_set("--post-data, --post-file, --body-data, --body-file")


def _h_wget(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    args = [a for a in argv[1:] if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    pairs = option_pairs(args, WGET_SHORT_WITH_VALUE, WGET_LONG_WITH_VALUE)
    values = {name: value for name, value in pairs}
    method = str(values.get("--method") or "GET").upper()
    posts = next((n for n in values if n in _WGET_POSTS), None)
    found: list[Finding] = []
    if "-e" in values or "--execute" in values:
        found.append(finding("unknown", ("network", "unknown"), "`wget -e` runs wgetrc commands; not analysed"))
    if posts is not None or method not in _SAFE_METHODS:
        shown = posts or f"--method={method}"
        found.append(finding("high_risk", ("network",), f"`wget {shown}` sends a request that can change remote state"))
    else:
        found.append(finding("read_only", ("network",), "`wget` fetches a URL"))
    document = values.get("-O", values.get("--output-document"))
    if "--spider" not in values and document != "-":
        shown = f"`wget -O {document}`" if document else "`wget`"
        found.append(finding("local_write", ("filesystem_write",), f"{shown} saves the download to a file"))
    for option in ("-o", "--output-file", "-a", "--append-output"):
        if values.get(option) not in {None, "-"}:
            found.append(finding("local_write", ("filesystem_write",), f"`wget {option}` writes a log file"))
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


_GIT_BRANCH_CHANGES = name_set(
    "m, M, c, C, f, u, --force, --move, --copy, --set-upstream-to, --unset-upstream, --edit-description"
)
_GIT_BRANCH_LISTING = name_set(
    """l, a, r, --list, --all, --remotes, --contains, --no-contains, --merged, --no-merged, --points-at,
    --show-current, --format, --sort, --column"""
)
_GIT_CONFIG_WRITES = name_set(
    "e, --edit, --unset, --unset-all, --add, --replace-all, --rename-section, --remove-section"
)


def _h_git(walker: Walker, argv: list[str], depth: int) -> list[Finding] | None:
    if len(argv) == 1:
        return [finding("read_only", (), "`git` only reads")]
    sub, rest = argv[1], argv[2:]
    flags = short_flags(rest)
    pos = positionals(rest)

    def grade(g: str, phrase: str, effects: tuple[str, ...], risk: RiskLevel | None = None) -> list[Finding]:
        # "--hard|discards …" puts the flag inside the quoted command: "`git reset --hard` discards …"
        extra, _, text = phrase.rpartition("|")
        return [finding(g, effects, f"`{' '.join(['git', sub, *extra.split()])}` {text}", risk)]

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


HANDLERS: dict[str, Handler] = {
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
