"""Specs of the everyday programs: files and text (coreutils, grep, rg, find, sed, awk, jq ...), the shell's
builtins, and the programs that change files. See :mod:`safepoint.core.command_spec` for the form.

Options are listed as people write them; an option missing here makes a read-only program's verdict ask (deny by
default), so a list errs on the short side rather than guessing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from safepoint.core.command_spec import OperandRole, OptionEffect, ProgramSpec, effect, names

__all__ = ["DIGITS", "TEXT_SPECS", "spec"]

DIGITS = " ".join(f"-{d}" for d in range(10))  # `head -20`, `git log -5`, `grep -3`: -NUM clusters


def spec(
    grade: str,
    flags: str = "",
    values: str = "",
    *,
    verdicts: Mapping[str, OptionEffect] | None = None,
    verdict_values: str = "",
    phrase: str | None = None,
    effects: tuple[str, ...] | None = None,
    operands: OperandRole = "read",
    writes_value: str = "",
    attached: str = "",
    **more: Any,
) -> ProgramSpec:
    """A spec from option lists written as text: ``flags`` and ``values`` (options taking a value) are harmless;
    ``verdicts`` maps space-separated option names to what they do (``verdict_values``: those taking a value)."""
    taking = names(values) | names(verdict_values) | names(writes_value)
    effects_by_option: dict[str, OptionEffect] = {}
    for keys, change in (verdicts or {}).items():
        for key in names(keys):
            effects_by_option[key] = change
    return ProgramSpec(
        grade=grade,
        phrase=phrase,
        effects=effects,
        takes_value=frozenset(taking),
        attached_value=names(attached),
        harmless=names(flags) | names(values) | names(attached),
        options=tuple(sorted(effects_by_option.items())),
        operands=operands,
        writes_value=names(writes_value),
        **more,  # the remaining ProgramSpec fields
    )


def ro(flags: str = "", values: str = "", **more: Any) -> ProgramSpec:
    return spec("read_only", flags, values, **more)


def anyopt(grade: str = "read_only", **more: Any) -> ProgramSpec:
    """A program none of whose options can write, run code or reach out: its options are not vetted."""
    return spec(grade, any_option=True, **more)


RUNS = "unknown"
WRITES_FILE = effect("local_write", "writes a file", ("filesystem_write",))
RUNS_PROGRAM = effect(RUNS, "runs a program it is given", ("unknown",))
HELP = "--help --version"

_LS = ro(
    f"""-a -A -b -B -c -C -d -D -f -F -g -G -h -H -i -k -l -L -m -n -N -o -p -q -Q -r -R -s -S -t -u -U -v -x -X
    -Z -1 --all --almost-all --author --escape --human-readable --si --dereference --dereference-command-line
    --dereference-command-line-symlink-to-dir --directory --dired --classify --file-type --full-time
    --group-directories-first --no-group --inode --kibibytes --literal --numeric-uid-gid --hide-control-chars
    --show-control-chars --quote-name --recursive --reverse --size --context --zero --color --colour --hyperlink
    --time --icons --git --tree --long --header --oneline {HELP}""",
    "-I -T -w --ignore --tabsize --width --block-size --format --hide --indicator-style --quoting-style --sort "
    "--time-style --level",
)
_GREP_FLAGS = f"""-E -F -G -P -i -y -v -w -x -c -L -l -o -q -s -b -H -h -n -T -Z -z -a -I -r -R -U --no-ignore-case
    --extended-regexp --fixed-strings --basic-regexp --perl-regexp --ignore-case --invert-match --word-regexp
    --line-regexp --count --files-with-matches --files-without-match --only-matching --quiet --silent
    --no-messages --byte-offset --with-filename --no-filename --line-number --initial-tab --null --null-data
    --text --recursive --dereference-recursive --line-buffered --color --colour {DIGITS} {HELP}"""
_GREP_VALUES = """-e -f -m -A -B -C -d -D --regexp --file --max-count --after-context --before-context --context
    --binary-files --devices --directories --exclude --exclude-from --exclude-dir --include --label"""
_GREP = ro(_GREP_FLAGS, _GREP_VALUES)

_RG = ro(
    f"""-i -S -s -w -x -v -c -l -n -N -H -I -o -p -q -u -z -a -b -L -U -F -P -0 --json --files
    --files-with-matches --files-without-match --count --count-matches --hidden --no-ignore --no-ignore-vcs
    --no-ignore-dot --no-ignore-global --no-ignore-parent --no-ignore-exclude --no-ignore-files --follow
    --smart-case --case-sensitive --ignore-case --fixed-strings --word-regexp --line-regexp --invert-match
    --line-number --no-line-number --heading --no-heading --with-filename --no-filename --color --colors
    --multiline --multiline-dotall --pcre2 --only-matching --stats --trim --vimgrep --column --no-column --null
    --null-data --text --passthru --passthrough --quiet --debug --trace --unrestricted --no-config --no-messages
    --byte-offset --crlf --search-zip --one-file-system --no-require-git --line-buffered --block-buffered
    --max-columns-preview --type-list --sort-files --no-unicode --binary --no-binary --glob-case-insensitive
    --include-zero --no-follow --no-hidden --no-pcre2-unicode --auto-hybrid-regex --invert-match --files-without-match
    {DIGITS} {HELP}""",
    """-e -f -g -t -T -m -A -B -C -j -E -M -r -d --regexp --file --glob --iglob --type --type-not --type-add
    --type-clear --max-count --after-context --before-context --context --threads --encoding --engine
    --max-depth --maxdepth --max-filesize --max-columns --replace --sort --sortr --field-match-separator
    --field-context-separator --path-separator --ignore-file --context-separator --pre-glob --dfa-size-limit
    --regex-size-limit --colors --generate""",
    verdicts={
        "--pre": effect(RUNS, "runs a preprocessor program on every file searched", ("unknown",)),
        "--hostname-bin": RUNS_PROGRAM,
    },
    verdict_values="--pre --hostname-bin",
)
_SORT = ro(
    f"""-b -d -f -g -i -M -h -n -R -r -V -c -C -m -s -u -z --ignore-leading-blanks --dictionary-order
    --ignore-case --general-numeric-sort --ignore-nonprinting --month-sort --human-numeric-sort --numeric-sort
    --random-sort --reverse --version-sort --check --merge --stable --unique --zero-terminated --debug {HELP}""",
    """-k -t -S -T --key --field-separator --buffer-size --temporary-directory --batch-size --files0-from
    --parallel --random-source --sort""",
    verdicts={
        "-o --output": WRITES_FILE,
        "--compress-program": effect(RUNS, "runs the compression program it names", ("unknown",)),
    },
    verdict_values="--compress-program",
    writes_value="-o --output",
)
_DIFF = ro(
    f"""-q -s -c -u -e -n -y -t -T -l -r -N -a -w -b -B -E -Z -i -d -p --brief --report-identical-files --normal
    --side-by-side --expand-tabs --initial-tab --text --recursive --new-file --unidirectional-new-file
    --ignore-case --ignore-all-space --ignore-space-change --ignore-blank-lines --ignore-tab-expansion
    --ignore-trailing-space --minimal --speed-large-files --strip-trailing-cr --show-c-function
    --suppress-common-lines --suppress-blank-empty --left-column --no-dereference --color {DIGITS} {HELP}""",
    """-C -U -F -I -L -S -W -x -X -D --context --unified --label --show-function-line --ignore-matching-lines
    --width --exclude --exclude-from --starting-file --from-file --to-file --horizon-lines --ifdef --line-format
    --old-line-format --new-line-format --unchanged-line-format --old-group-format --new-group-format
    --unchanged-group-format --changed-group-format --tabsize --palette""",
)
_HEAD_TAIL = ro(
    f"-q -v -z -f -F --quiet --silent --verbose --zero-terminated --follow --retry {DIGITS} {HELP}",
    "-c -n -s --bytes --lines --pid --sleep-interval --max-unchanged-stats",
)
_CHECKSUM = ro(
    f"-b -t -c -w -z --binary --text --check --tag --untagged --zero --quiet --status --strict --warn "
    f"--ignore-missing --base64 --raw {HELP}",
    "-l -a --length --algorithm",
)


def _recursive(phrase: str, effects: tuple[str, ...], values: str = "") -> ProgramSpec:
    return spec(
        "destructive",
        any_option=True,
        verdicts={"-r -R --recursive": effect("destructive", f"{phrase} recursively", effects, "high")},
        values=values,
        phrase=phrase,
        effects=effects,
        operands="write",
    )


_RM = _recursive("deletes files", ("filesystem_delete",))


def _mode(phrase: str) -> ProgramSpec:
    return spec(
        "destructive",
        phrase=phrase,
        effects=("filesystem_write",),
        any_option=True,
        verdicts={"-R --recursive": effect("destructive", "changes files recursively", ("filesystem_write",), "high")},
        values="--reference --from",
        operands="after_first",
        check="mode",
    )


_MODE = _mode("changes file permissions")
_OWNER = _mode("changes file ownership")

_VARIABLES = "variables"  # the check of builtins that name shell variables (a subscript can run code)

TEXT_SPECS: dict[str, ProgramSpec] = {
    # ---- listing and reading files -------------------------------------------------------------------------
    "ls": _LS,
    "dir": _LS,
    "exa": _LS,
    "eza": _LS,
    "lsd": _LS,
    "tree": ro(
        f"""-a -d -l -f -x -q -N -Q -p -u -g -s -h -D -F -v -t -c -U -r -C -n -A -S -i --si --du --prune
        --noreport --dirsfirst --filesfirst --gitignore --matchdirs --ignore-case --inodes --device --fromfile
        --info --charset --metafirst {HELP}""",
        "-L -P -I --filelimit --timefmt --sort --charset --hintro --houtro",
        verdicts={"-o": WRITES_FILE},
        writes_value="-o",
    ),
    "pwd": ro("-L -P"),
    "cd": ro("-L -P -e -@"),
    "pushd": anyopt(),
    "popd": anyopt(),
    "dirs": anyopt(),
    "cat": ro(
        f"-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --number --squeeze-blank --show-ends "
        f"--show-tabs --show-nonprinting {HELP}"
    ),
    "bat": ro(
        f"""-A -p -n -u -P -f --show-all --plain --number --unbuffered --no-paging --force-colorization
        --list-languages --list-themes --diagnostic --no-config {HELP}""",
        "-l -H -r -m --language --highlight-line --line-range --map-syntax --theme --style --tabs --wrap "
        "--terminal-width --color --decorations --italic-text --file-name --diff-context",
        verdicts={"--pager": RUNS_PROGRAM},
        verdict_values="--pager",
    ),
    "tac": ro(f"-b -r --before --regex {HELP}", "-s --separator"),
    "head": _HEAD_TAIL,
    "tail": _HEAD_TAIL,
    "nl": ro(HELP, "-b -d -f -h -i -l -n -s -v -w"),
    "od": anyopt(),
    "hexdump": anyopt(),
    "xxd": ro("-a -b -C -E -e -i -p -r -u -d -R", "-c -g -l -n -o -s"),
    "strings": anyopt(),
    "wc": ro(f"-c -m -l -L -w --bytes --chars --lines --max-line-length --words {HELP}", "--total --files0-from"),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "rg": _RG,
    "ag": ro(
        f"""-i -s -S -w -v -c -l -L -Q -u -U -a -z -f -G -H -o -0 --hidden --literal --ignore-case
        --case-sensitive --smart-case --count --files-with-matches --files-without-matches --nocolor --color
        --noheading --heading --nogroup --group --column --numbers --nonumbers --filename --nofilename
        --search-zip --follow --unrestricted --skip-vcs-ignores --vimgrep {DIGITS} {HELP}""",
        "-A -B -C -m -g -p --ignore --depth --file-search-regex --after --before --context --max-count",
    ),
    "ack": ro(
        f"-i -I -s -S -w -v -c -l -L -Q -h -H -o -f --nocolor --color --noheading --nogroup --column {HELP}",
        "-A -B -C -m -t --type --ignore-dir --output",
    ),
    "find": spec("read_only", any_option=True, check="find"),  # the check reads the expression
    "fd": spec(
        "read_only",
        f"""-H -I -u -s -i -g -F -a -l -L -p -0 -q -1 --hidden --no-ignore --no-ignore-vcs --unrestricted
        --case-sensitive --ignore-case --glob --regex --fixed-strings --absolute-path --list-details --follow
        --full-path --print0 --quiet --show-errors --strip-cwd-prefix --one-file-system --prune {HELP}""",
        """-d -t -e -E -S -j -c --max-depth --min-depth --exact-depth --type --extension --exclude --size
        --changed-within --changed-before --change-newer-than --change-older-than --owner --threads --color
        --max-results --base-directory --path-separator --search-path --ignore-file --format --and""",
        check="fd",
    ),
    "locate": anyopt(),
    "stat": ro(f"-L -f -t --dereference --file-system --terse --cached {HELP}", "-c --format --printf --cached"),
    "file": ro(
        f"""-b -i -L -h -z -Z -k -r -s -N -0 -E -p -v -l --mime --mime-type --mime-encoding --brief
        --dereference --no-dereference --uncompress --uncompress-noreport --keep-going --raw --special-files
        --no-pad --print0 --preserve-date --extension --apple {HELP}""",
        "-f -F -m -e -P --files-from --separator --magic-file --exclude --exclude-quiet --parameter",
        verdicts={"-C --compile": effect("local_write", "compiles a magic file", ("filesystem_write",))},
    ),
    "du": ro(
        f"""-a -b -c -h -H -k -L -l -m -P -s -S -x -D -0 --all --apparent-size --bytes --total --human-readable
        --si --summarize --separate-dirs --one-file-system --inodes --count-links --dereference --null
        --dereference-args --no-dereference {DIGITS} {HELP}""",
        "-d -B -t -X --max-depth --block-size --threshold --time --time-style --exclude --exclude-from --files0-from",
    ),
    "df": ro(
        f"""-a -h -H -i -k -l -P -T --all --human-readable --si --inodes --local --portability --print-type
        --total --sync --no-sync --output {HELP}""",
        "-t -x -B --type --exclude-type --block-size",
    ),
    "free": anyopt(),
    "ps": anyopt(),
    "pgrep": anyopt(),
    "lsof": anyopt(),
    "which": anyopt(),
    "whereis": anyopt(),
    "type": anyopt(),
    "whoami": anyopt(),
    "id": anyopt(),
    "groups": anyopt(),
    "uname": anyopt(),
    "arch": anyopt(),
    "nproc": anyopt(),
    "uptime": anyopt(),
    "tty": anyopt(),
    "locale": anyopt(),
    "printenv": anyopt(),
    "env": anyopt(),  # `env` alone prints the environment; a wrapped command is peeled before this
    "cal": anyopt(),
    "date": spec(
        "read_only",
        f"-u -R -I --utc --universal --rfc-email --rfc-2822 --debug {HELP}",
        "-d -f -r --date --file --reference --iso-8601 --rfc-3339 --resolution",
        attached="-I",
        verdicts={"-s --set": effect("high_risk", "sets the system clock", ("system",))},
        verdict_values="-s --set",
        check="date",
    ),
    "hostname": spec(
        "read_only",
        f"-a -A -b -d -f -i -I -s -y -v --alias --all-fqdns --domain --fqdn --long --ip-address "
        f"--all-ip-addresses --short --yp --nis {HELP}",
        verdicts={"-F --file -b --boot": effect("high_risk", "sets the host name", ("system",))},
        verdict_values="-F --file",
        check="hostname",
    ),
    "realpath": anyopt(),
    "readlink": anyopt(),
    "basename": anyopt(),
    "dirname": anyopt(),
    "md5sum": _CHECKSUM,
    "sha1sum": _CHECKSUM,
    "sha224sum": _CHECKSUM,
    "sha256sum": _CHECKSUM,
    "sha384sum": _CHECKSUM,
    "sha512sum": _CHECKSUM,
    "shasum": ro("-b -t -c -p -0 -s -w --binary --text --check --portable --status --strict --warn --tag", "-a"),
    "cksum": _CHECKSUM,
    "b2sum": _CHECKSUM,
    "base64": ro(f"-d -i --decode --ignore-garbage {HELP}", "-w --wrap"),
    "man": ro(
        f"-k -f -a -w -W -c -d -D --where --path --apropos --whatis --all --where-cat --catman --regex "
        f"--wildcard --names-only {HELP}",
        "-s -S -M -L -m -e -C --sections --manpath --locale --systems --extension --config-file",
    ),
    "help": anyopt(),
    "info": ro(
        f"-a -k -w --all --apropos --where --vi-keys {HELP}",
        "-n -d -f --node --directory --file",
        verdicts={"-o --output": WRITES_FILE},
        writes_value="-o --output",
    ),
    "apropos": anyopt(),
    "whatis": anyopt(),
    # ---- text filters -------------------------------------------------------------------------------------
    "diff": _DIFF,
    "cmp": ro(f"-b -l -s --print-bytes --verbose --quiet --silent {HELP}", "-i -n --ignore-initial --bytes"),
    "comm": ro(f"-1 -2 -3 -z --check-order --nocheck-order --total --zero-terminated {HELP}", "--output-delimiter"),
    "sort": _SORT,
    "uniq": ro(
        f"-c -d -D -u -i -z --count --repeated --all-repeated --unique --ignore-case --zero-terminated --group {HELP}",
        "-f -s -w --skip-fields --skip-chars --check-chars",
        operands="second",
    ),
    "cut": ro(
        f"-s -n -z --complement --only-delimited --zero-terminated {HELP}",
        "-b -c -f -d --bytes --characters --fields --delimiter --output-delimiter",
    ),
    "tr": ro(f"-c -C -d -s -t --complement --delete --squeeze-repeats --truncate-set1 {HELP}"),
    "paste": ro(f"-s -z --serial --zero-terminated {HELP}", "-d --delimiters"),
    "join": ro(
        f"-i -z --ignore-case --check-order --nocheck-order --header --zero-terminated {HELP}",
        "-a -e -j -o -t -v -1 -2",
    ),
    "column": anyopt(),
    "fold": ro(f"-b -s --bytes --spaces {HELP}", "-w --width"),
    "fmt": ro(f"-c -t -s -u --crown-margin --tagged-paragraph --split-only --uniform-spacing {HELP}", "-w -p -g"),
    "expand": ro(f"-i --initial {HELP}", "-t --tabs"),
    "unexpand": ro(f"-a --all --first-only {HELP}", "-t --tabs"),
    "rev": ro(HELP),
    "jq": ro(
        f"""-r -j -a -c -n -e -s -S -C -M -R -h -V --tab --raw-output --join-output --ascii-output
        --compact-output --null-input --exit-status --slurp --sort-keys --color-output --monochrome-output
        --raw-input --seq --stream --stream-errors --unbuffered --raw-output0 --args --jsonargs {HELP}""",
        "-f -L --indent --arg --argjson --slurpfile --rawfile --from-file",
    ),
    "yq": ro(
        f"-r -e -n -C -M -P -j -y -N -0 --exit-status --null-input --colors --no-colors --prettyPrint "
        f"--unwrapScalar --no-doc --nul-output {HELP}",
        "-o -p -I --output-format --input-format --indent --expression --from-file",
        verdicts={
            "-i --inplace": effect("local_write", "edits files in place", ("filesystem_write",)),
            "-s --split-exp": effect("local_write", "writes a file per document", ("filesystem_write",)),
        },
        verdict_values="-s --split-exp",
        operands="after_first",  # the expression, then the files
        operands_when=names("-i --inplace"),
    ),
    "sed": spec(
        "read_only",
        f"""-n -E -r -s -u -z --quiet --silent --regexp-extended --separate --unbuffered --null-data --posix
        --debug --sandbox --follow-symlinks -b --binary {HELP}""",
        "-l --line-length",
        verdicts={
            "-i --in-place": effect("local_write", "edits files in place", ("filesystem_write",)),
            "-f --file": effect(RUNS, "reads its script from a file that is not analysed", ("unknown",)),
        },
        verdict_values="-e --expression -f --file",
        attached="-i",
        check="sed",
    ),
    "awk": anyopt(check="awk"),  # the check reads the options and the program
    "gawk": anyopt(check="awk"),
    "mawk": anyopt(check="awk"),
    "nawk": anyopt(check="awk"),
    "less": ro(
        "-N -S -R -r -F -X -i -I -M -m -n -s -e -E -q -Q -f -K --chop-long-lines --RAW-CONTROL-CHARS "
        "--quit-if-one-screen --no-init --ignore-case --IGNORE-CASE --LONG-PROMPT --LINE-NUMBERS",
        "-p -x -y -j -b -h -z --pattern --tabs",
        check="pager",
    ),
    "more": ro("-d -l -f -p -c -s -u", "-n", check="pager"),
    # ---- output and tests ---------------------------------------------------------------------------------
    "echo": anyopt(),
    "printf": spec("read_only", values="-v", check=_VARIABLES),
    "true": anyopt(),
    "false": anyopt(),
    ":": anyopt(),
    "test": anyopt(check="test"),
    "[": anyopt(check="test"),
    "[[": anyopt(check="test"),
    "sleep": anyopt(),
    "seq": anyopt(),
    "yes": anyopt(),
    # ---- shell builtins: shell-local state, unless their words can run code -------------------------------
    "export": spec("read_only", "-f -n -p", check=_VARIABLES),
    "unset": spec("read_only", "-f -v -n", check=_VARIABLES),
    "declare": spec("read_only", "-a -A -f -F -g -i -I -l -n -r -t -u -x -p", check=_VARIABLES),
    "typeset": spec("read_only", "-a -A -f -F -g -i -I -l -n -r -t -u -x -p", check=_VARIABLES),
    "local": spec("read_only", "-a -A -i -l -n -r -t -u -x -p", check=_VARIABLES),
    "readonly": spec("read_only", "-a -A -f -p", check=_VARIABLES),
    "read": spec("read_only", "-a -e -r -s -E", "-d -i -n -N -p -t -u", check=_VARIABLES),
    "mapfile": spec(
        "read_only",
        "-t",
        "-d -n -O -s -u -c",
        verdicts={"-C": effect(RUNS, "runs a callback while it reads", ("unknown",))},
        verdict_values="-C",
        check=_VARIABLES,
    ),
    "getopts": spec("read_only", check=_VARIABLES),
    "set": anyopt(),
    "shopt": anyopt(),
    "alias": anyopt(check="alias"),
    "unalias": anyopt(),
    "trap": spec("read_only", "-l -p", check="trap"),
    "hash": spec(
        "read_only",
        "-r -l -t -d",
        verdicts={"-p": effect(RUNS, "changes which file a command name runs", ("unknown",))},
        verdict_values="-p",
    ),
    "umask": anyopt(),
    "ulimit": anyopt(),  # limits this shell and its children only
    "history": spec("read_only"),
    "wait": anyopt(),
    "jobs": anyopt(),
    "shift": anyopt(),
    "return": anyopt(),
    "exit": anyopt(),
    "break": anyopt(),
    "continue": anyopt(),
    # ---- programs that change files -----------------------------------------------------------------------
    "rm": _RM,
    "rmdir": spec(
        "destructive", any_option=True, operands="write", phrase="deletes directories", effects=("filesystem_delete",)
    ),
    "unlink": spec(
        "destructive", any_option=True, operands="write", phrase="deletes files", effects=("filesystem_delete",)
    ),
    "shred": spec(
        "destructive",
        any_option=True,
        values="-n -s --iterations --size --random-source",
        operands="write",
        phrase="destroys file contents",
        effects=("filesystem_delete",),
    ),
    "touch": spec(
        "local_write",
        any_option=True,
        values="-d -r -t --date --reference --time",
        operands="write",
        phrase="creates or touches files",
        effects=("filesystem_write",),
    ),
    "truncate": spec(
        "destructive",
        any_option=True,
        values="-s -r --size --reference",
        operands="write",
        phrase="cuts files to a size",
        effects=("filesystem_delete", "filesystem_write"),
    ),
    "tee": spec(
        "local_write",
        any_option=True,
        verdicts={
            "-a --append": effect("mutation", "appends to files; a re-run duplicates data", ("filesystem_write",))
        },
        operands="write",
        phrase="writes files",
        effects=("filesystem_write",),
        check="tee",
    ),
    "mv": spec(
        "destructive",
        any_option=True,
        values="-S --suffix",
        writes_value="-t --target-directory",
        operands="write",
        phrase="moves or renames files",
        effects=("filesystem_delete", "filesystem_write"),
    ),
    "cp": spec(
        "local_write",
        any_option=True,
        values="-S --suffix --sparse",
        writes_value="-t --target-directory",
        operands="last",
        phrase="copies files",
        effects=("filesystem_write",),
    ),
    "install": spec(
        "local_write",
        any_option=True,
        writes_value="-t --target-directory",
        values="-m -o -g -S --mode --owner --group --suffix --strip-program",
        operands="last",
        phrase="copies files",
        effects=("filesystem_write",),
        check="install",
    ),
    "ln": spec(
        "local_write",
        any_option=True,
        values="-S --suffix",
        writes_value="-t --target-directory",
        operands="last",
        phrase="creates links",
        effects=("filesystem_write",),
        check="ln",
    ),
    "mkdir": anyopt("local_write", phrase="creates directories", effects=("filesystem_write",)),
    "chmod": _MODE,
    "chown": _OWNER,
    "chgrp": _OWNER,
    "dd": anyopt("destructive", phrase="overwrites data block by block", effects=("filesystem_write",), check="dd"),
    "patch": spec(
        "local_write",
        any_option=True,
        check="patch",
        phrase="applies a patch to files",
        effects=("filesystem_write",),
        values="-i -o -d -D -F -p -r -B -Y -z -V -g --input --output --directory --ifdef --fuzz --strip "
        "--reject-file --prefix --basename-prefix --suffix --version-control --get --quoting-style "
        "--reject-format",
    ),
    "perl": spec("unknown", any_option=True, check="perl"),
    "tar": spec("local_write", any_option=True, check="tar"),  # the check reads the mode and options
    "gzip": spec(
        "local_write",
        any_option=True,
        values="-S --suffix",
        operands="write",
        operands_unless=names("-k -c -l -t --keep --stdout --to-stdout --list --test"),
        phrase="compresses files",
        effects=("filesystem_write",),
        check="compress",
    ),
    "kill": anyopt("destructive", phrase="signals running processes", effects=("process",)),
    "pkill": anyopt("destructive", phrase="signals running processes", effects=("process",)),
    "killall": anyopt("destructive", phrase="signals running processes", effects=("process",)),
}
for _name in ("gunzip", "bzip2", "bunzip2", "xz", "unxz"):
    TEXT_SPECS[_name] = TEXT_SPECS["gzip"]
TEXT_SPECS["zcat"] = anyopt()
