"""Specs of developer tools with sub-commands: git, package managers and build tools, containers and clusters,
downloads. See :mod:`safepoint.core.command_spec` for the form and :mod:`safepoint.core.command_specs_text` for
the everyday programs.

Only the sub-commands that read get option lists here (an option they do not list makes the verdict ask); the
ones that change things are graded by the coarse tables of :mod:`safepoint.core.command_rules` or by a check.
"""

from __future__ import annotations

from safepoint.core.command_spec import ProgramSpec, effect, names
from safepoint.core.command_specs_text import DIGITS, RUNS, RUNS_PROGRAM, WRITES_FILE, anyopt, ro, spec

__all__ = ["DEV_SPECS"]

HELP = "-h --help"
_CONFIG_RUNS = effect(
    RUNS, "sets configuration, which can name programs to run (pagers, hooks, fsmonitor)", ("unknown",)
)
_PAGER = effect(RUNS, "starts a pager", ("unknown",))

# git's options before the sub-command. `-c`/`--config-env` set configuration (core.fsmonitor, core.pager,
# diff.external ... run programs); `--exec-path=DIR` picks where sub-commands are found.
_GIT_GLOBAL = spec(
    "read_only",
    """--no-pager -P --bare --no-replace-objects --literal-pathspecs --glob-pathspecs --noglob-pathspecs
    --icase-pathspecs --no-optional-locks --no-advice --html-path --man-path --info-path --version --help""",
    "-C --git-dir --work-tree --namespace",
    verdicts={
        "-c --config-env": _CONFIG_RUNS,
        "-p --paginate": _PAGER,
        "--exec-path": effect(RUNS, "chooses where git finds the programs it runs", ("unknown",)),
        "--super-prefix": effect(RUNS, "is internal to git", ("unknown",)),
    },
    verdict_values="-c --config-env --super-prefix",
    options_end_at_operand=True,
)

_DIFF_FLAGS = f"""-p -u -s -z -a -b -w -R -W -m -c -t -r -g -i -E -F -P -X -D --patch --no-patch --raw
    --patch-with-raw --patch-with-stat --stat --compact-summary --numstat --shortstat --dirstat --cumulative
    --dirstat-by-file --summary --name-only --name-status --submodule --color --color-moved --color-moved-ws
    --word-diff --word-diff-regex --color-words --rename-empty --check --full-index --binary --abbrev
    --break-rewrites --find-renames --find-copies --find-copies-harder --irreversible-delete --relative --text
    --ignore-cr-at-eol --ignore-space-at-eol --ignore-space-change --ignore-all-space --ignore-blank-lines
    --function-context --exit-code --quiet --ignore-submodules --src-prefix --dst-prefix --default-prefix
    --line-prefix --ita-invisible-in-index --ita-visible-in-index --minimal --patience --histogram --anchored
    --diff-algorithm --indent-heuristic --cached --staged --merge-base --pickaxe-all --pickaxe-regex
    --output-indicator-new --output-indicator-old --output-indicator-context --stat-width --stat-name-width
    --stat-count --stat-graph-width --follow --full-diff --first-parent --cc --dd --remerge-diff
    --combined-all-paths --root --always --expand-tabs --show-signature --notes --show-notes --standard-notes
    --mailmap --use-mailmap --encoding --decorate --decorate-refs --decorate-refs-exclude --source
    --clear-decorations --log-size --oneline --pretty --format --abbrev-commit --graph --date --relative-date
    --parents --children --left-right --boundary --reverse --walk-reflogs --merges --min-parents --max-parents
    --all --branches --tags --remotes --glob --exclude --since --after --until --before --author --committer
    --grep --all-match --invert-grep --regexp-ignore-case --basic-regexp --extended-regexp --fixed-strings
    --perl-regexp --max-count --skip --since-as-filter --max-age --min-age --topo-order --date-order
    --author-date-order --ancestry-path --simplify-by-decoration --simplify-merges --full-history --dense
    --sparse --show-pulls --not --count --cherry-pick --cherry-mark --cherry --left-only --right-only --bisect
    --do-walk --show-linear-break --ignore-missing --in-commit-order --exclude-first-parent-only --reflog
    --alternate-refs --single-worktree --name-rev --first-parent-only {DIGITS} {HELP}"""
_DIFF_VALUES = "-n -U -G -S -L -O --unified --inter-hunk-context --diff-filter --find-object --ignore-matching-lines"
_DIFF_VERDICTS = {
    "--output": WRITES_FILE,
    "--ext-diff": effect(RUNS, "runs the external diff program set in the configuration", ("unknown",)),
    "--textconv": effect(RUNS, "runs the text conversion filters set in the configuration", ("unknown",)),
}


def _git_diff(extra_flags: str = "", extra_values: str = "") -> ProgramSpec:
    return ro(
        f"{_DIFF_FLAGS} {extra_flags}",
        f"{_DIFF_VALUES} {extra_values}",
        attached="-M -C -B -l",
        negations=True,
        verdicts=_DIFF_VERDICTS,
        writes_value="--output",
    )


_GIT_READ: dict[str, ProgramSpec] = {
    "status": ro(
        f"""-s -b -v -z --short --branch --show-stash --porcelain --long --verbose --untracked-files
        --ignore-submodules --ignored --column --ahead-behind --renames --find-renames {HELP}""",
        attached="-u",
        negations=True,
    ),
    "diff": _git_diff("--no-index"),
    "log": _git_diff(),
    "show": _git_diff(),
    "whatchanged": _git_diff(),
    "diff-tree": _git_diff("--stdin"),
    "diff-index": _git_diff(),
    "diff-files": _git_diff("-q -0 -1 -2 -3"),
    "shortlog": ro(
        f"-n -s -e -c -w --numbered --summary --email --committer --all --no-merges {HELP}",
        "--format --group",
        attached="-w",
        negations=True,
    ),
    "rev-parse": anyopt(),
    "rev-list": _git_diff("--objects --objects-edge --missing --disk-usage --header --timestamp --stdin"),
    "ls-files": ro(
        f"""-c -d -o -i -s -u -k -m -t -v -f -z --cached --deleted --others --ignored --stage --unmerged
        --killed --modified --directory --empty-directory --eol --exclude-standard --full-name --recurse-submodules
        --error-unmatch --debug --deduplicate --sparse --resolve-undo --abbrev {HELP}""",
        "-x -X --exclude --exclude-from --exclude-per-directory --with-tree --format",
        negations=True,
    ),
    "ls-tree": anyopt(),
    "cat-file": ro(
        f"-t -s -e -p --batch --batch-check --batch-command --batch-all-objects --buffer --follow-symlinks "
        f"--unordered --allow-unknown-type -Z {HELP}",
        "--path --filter",
        verdicts={"--textconv --filters": effect(RUNS, "runs the filters set in the configuration", ("unknown",))},
    ),
    "blame": ro(
        f"""-b -c -l -t -s -e -f -n -p -w -M -C --root --show-stats --progress --score-debug --show-name
        --show-number --porcelain --line-porcelain --incremental --show-email --abbrev --color-lines
        --color-by-age --minimal {HELP}""",
        "-L -S --contents --date --ignore-rev --ignore-revs-file --reverse --encoding",
        attached="-M -C",
        negations=True,
        verdicts={"--textconv": _DIFF_VERDICTS["--textconv"]},
    ),
    "annotate": anyopt(),
    "describe": anyopt(),
    "grep": ro(
        f"""-a -i -I -w -v -h -H -l -L -c -n -p -W -z -o -q -r -E -G -F -P --cached --untracked --no-index
        --no-exclude-standard --exclude-standard --recurse-submodules --text --ignore-case --word-regexp
        --invert-match --full-name --extended-regexp --basic-regexp --fixed-strings --perl-regexp
        --files-with-matches --name-only --files-without-match --null --only-matching --count --color
        --break --heading --show-function --function-context --line-number --column --all-match --quiet
        --and --or --not {DIGITS} {HELP}""",
        "-e -f -m -A -B -C --max-depth --max-count --after-context --before-context --context --threads",
        negations=True,
        attached="-O",
        verdicts={
            "-O --open-files-in-pager": effect(RUNS, "opens the files in a pager or editor", ("unknown",)),
            "--textconv": _DIFF_VERDICTS["--textconv"],
        },
    ),
    "show-ref": anyopt(),
    "merge-base": anyopt(),
    "name-rev": anyopt(),
    "for-each-ref": anyopt(),
    "count-objects": anyopt(),
    "cherry": anyopt(),
    "check-ignore": anyopt(),
    "check-attr": anyopt(),
    "var": anyopt(),
    "version": anyopt(),
    "help": ro("-a -g -c -i -m -w --all --guides --config --info --man --web --verbose --no-external-commands"),
    "ls-remote": ro(
        "-h -t -q --heads --tags --refs --branches --quiet --exit-code --get-url --symref",
        "--sort",
        verdicts={"--upload-pack": RUNS_PROGRAM},
        verdict_values="--upload-pack",
    ),
    "range-diff": _git_diff("--creation-factor --no-dual-color"),
    "show-branch": anyopt(),
    "reflog": spec(
        "read_only",
        check="git_reflog",
        subcommands=(("show", _git_diff()), ("list", anyopt()), ("exists", anyopt())),
    ),
    "branch": ro(
        f"""-a -r -l -v -i --list --all --remotes --contains --no-contains --merged --no-merged --points-at
        --show-current --format --sort --column --color --abbrev --ignore-case --omit-empty --verbose {HELP}""",
        negations=True,
        check="git_branch",
    ),
    "tag": ro(
        f"-l -n -i --list --contains --no-contains --points-at --merged --no-merged --sort --format --column "
        f"--color --ignore-case --omit-empty {HELP}",
        negations=True,
        check="git_tag",
    ),
    "stash": spec(
        "mutation",
        any_option=True,
        check="git",
        subcommands=(("list", _git_diff()), ("show", _git_diff("--include-untracked --only-untracked"))),
    ),
    "remote": ro("-v --verbose", check="git_remote"),
    "config": ro(
        "-l -z --list --get --get-all --get-regexp --get-urlmatch --get-color --get-colorbool --name-only "
        "--show-origin --show-scope --global --system --local --worktree --includes --type --bool --int "
        "--bool-or-int --path --expiry-date --null --default",
        "-f --file --blob",
        check="git_config",
    ),
    "worktree": spec(
        "local_write", any_option=True, check="git", subcommands=(("list", ro("--porcelain -v --verbose -z --expire")),)
    ),
    "clean": spec("destructive", any_option=True, check="git"),
}
_GIT_CHECKED = """commit merge rebase cherry-pick revert am apply pull mv update-ref notes add init clone submodule
    sparse-checkout fetch gc prune filter-branch filter-repo rm reset checkout switch restore"""

DEV_SPECS: dict[str, ProgramSpec] = {}

# Cluster and cloud tools: `--kubeconfig`/`--context` pick configuration whose exec plugins run code, so they ask.
_KUBE_READ = "-A -w --all-namespaces --show-labels --no-headers --show-kind --watch --ignore-not-found --previous"
_KUBE_VALUES = """-n -o -l -c --namespace --output --selector --field-selector --sort-by --tail --since --since-time
    --container --limit-bytes --chunk-size --template -L --label-columns"""
_KUBECTL = {
    name: ro(f"{_KUBE_READ} -f --follow --timestamps --prefix {HELP}", _KUBE_VALUES)
    for name in ("get", "describe", "logs", "top", "explain", "api-resources", "api-versions", "version", "events")
}
_GH_VALUES = """-R -L -s -a -l -A -B -S -w --repo --limit --state --author --assignee --label --base --head --search
    --json --jq --template"""


def _gh(subs: str) -> dict[str, ProgramSpec]:
    # --web opens a browser; --jq and --template only shape the output
    return {name: ro(f"-c --comments --name-only --patch --color {HELP}", _GH_VALUES) for name in names(subs)}


_PIP = {
    "list": ro(
        "-o -u -e -l --outdated --uptodate --editable --local --user --not-required --include-editable "
        "--exclude-editable --disable-pip-version-check -v -q",
        "--format --exclude --path",
    ),
    "show": ro("-f --files -v --verbose -q"),
    "freeze": ro("-l --local --user --all --exclude-editable -q", "--exclude --path"),
    "check": ro("-q"),
    "--version": ro(),
    "-V": ro(),
}
_GO = {
    "version": ro("-m -v"),
    "env": ro("-json -changed"),
    "list": ro("-m -json -e -deps -test -u -versions -find -export -compiled -retracted", "-f -tags -mod"),
    "doc": ro("-all -c -cmd -short -src -u"),
}
_CARGO = {
    "tree": ro(
        "-e -i -d -p --duplicates --no-dedupe --all-features --no-default-features --workspace "
        "--invert --edges --depth --prefix --charset --format --features --package --target -q -v",
        "--depth --prefix --charset --format --features --package --target --edges --invert",
    ),
    "metadata": ro(
        "--no-deps --all-features --no-default-features --offline --frozen --locked -q",
        "--format-version --features --filter-platform",
    ),
    "--version": ro("-v --verbose"),
    "version": ro("-v --verbose"),
    "pkgid": ro("-q", "-p --package"),
    "locate-project": ro("--workspace", "--message-format"),
}
_HELM_LIST = ro(
    "-a -A --all --all-namespaces -q --short --deployed --failed --pending --uninstalled",
    "-n -o --namespace --output --filter --max",
)


def _build_git() -> ProgramSpec:
    subs = dict(_GIT_READ)
    for name in names(_GIT_CHECKED):
        subs[name] = spec("mutation", any_option=True, check="git")
    return ProgramSpec(
        grade=_GIT_GLOBAL.grade,
        takes_value=_GIT_GLOBAL.takes_value,
        harmless=_GIT_GLOBAL.harmless,
        options=_GIT_GLOBAL.options,
        options_end_at_operand=True,
        subcommands=tuple(sorted(subs.items())),
    )


_NPM_GLOBAL_VALUES = "--prefix -w --workspace"
_RUN_SCRIPTS = names("test build lint typecheck check")


def _script_runner(program: str, scripts: frozenset[str]) -> ProgramSpec:
    """`npm run NAME`: the scripts that are build, test or lint steps are re-runnable; any other is unknown."""
    return spec(
        "read_only",  # `npm run` alone lists the scripts
        "--silent -s --if-present --workspaces --include-workspace-root",
        _NPM_GLOBAL_VALUES,
        phrase="only lists scripts",
        subcommands=tuple(sorted((name, anyopt("rerunnable")) for name in scripts)),
    )


DEV_SPECS.update(
    {
        "git": _build_git(),
        "npm": spec(
            "unknown",
            subcommands=(
                ("run", _script_runner("npm", _RUN_SCRIPTS)),
                ("run-script", _script_runner("npm", names("test build lint"))),
            ),
        ),
        "pnpm": spec("unknown", subcommands=(("run", _script_runner("pnpm", names("test build lint typecheck"))),)),
        "yarn": spec(
            "local_write",
            phrase="installs packages",
            effects=("filesystem_write", "network"),
            subcommands=(("run", _script_runner("yarn", names("test build lint"))),),
        ),
        "bun": spec("unknown", subcommands=(("run", _script_runner("bun", names("test build"))),)),
        "docker": spec(
            "unknown",
            subcommands=(
                ("ps", ro("-a -q -s -l --all --quiet --size --latest --no-trunc", "-f -n --filter --format --last")),
                ("images", ro("-a -q --all --quiet --digests --no-trunc", "-f --filter --format")),
                ("inspect", ro("-s --size", "-f --format --type")),
                ("logs", ro("-f -t --follow --timestamps --details", "-n --tail --since --until")),
                ("version", ro("", "-f --format")),
                ("info", ro("", "-f --format")),
            ),
        ),
        "kubectl": spec("", subcommands=tuple(sorted(_KUBECTL.items()))),
        "gh": spec(
            "",
            subcommands=(
                ("pr", spec("", subcommands=tuple(sorted(_gh("view list diff checks status").items())))),
                ("issue", spec("", subcommands=tuple(sorted(_gh("view list status").items())))),
                ("run", spec("", subcommands=tuple(sorted(_gh("view list").items())))),
                ("release", spec("", subcommands=tuple(sorted(_gh("view list").items())))),
                ("repo", spec("", subcommands=tuple(sorted(_gh("view").items())))),
            ),
        ),
        "pip": spec("", subcommands=tuple(sorted(_PIP.items()))),
        "go": spec("", subcommands=tuple(sorted(_GO.items()))),
        "cargo": spec("", subcommands=tuple(sorted(_CARGO.items()))),
        "helm": spec("", subcommands=(("list", _HELM_LIST), ("ls", _HELM_LIST), ("status", _HELM_LIST))),
        "curl": anyopt(check="curl"),  # the checks read the options: the method decides
        "wget": anyopt(check="wget"),
        "make": anyopt("rerunnable", check="make"),
        "python": spec("unknown"),
        "node": spec("unknown"),
    }
)
