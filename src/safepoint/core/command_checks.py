"""The checks a spec names (``ProgramSpec.check``): what cannot be said by option lists alone, because it hides
in the words' contents (a sed script's ``e`` command, an awk program's ``system()``, a find expression's
``-exec``, tar's mode letters, a variable name's ``a[$(cmd)]`` subscript) or depends on the operands (``git
checkout main`` vs ``git checkout -- f``, ``date 0101`` sets the clock).

A check reads a :class:`Call` (the simple command, read by its spec) and sets what the spec's grade alone would
get wrong: ``base`` (replaces the spec's grade), ``found`` (more findings), ``targets`` (the paths it writes).
Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

from safepoint.core.command_call import UNKNOWN, Call, Check, Nested, under
from safepoint.core.command_downloads import curl, wget
from safepoint.core.command_findings import finding
from safepoint.core.command_git import git_finding
from safepoint.core.command_rules import HARMLESS_TARGETS
from safepoint.core.command_scripts import awk_danger, sed_danger
from safepoint.core.command_spec import Parsed, ProgramSpec, Word, derived, is_literal, names, parse_words

__all__ = ["CHECKS", "Call", "Nested", "dangerous_variable"]


# ---- shell builtins whose words name variables ------------------------------------------------------------------

# Environment and shell variables that choose programs to run, code to load, or configuration that does either.
_DANGEROUS_EXACT = frozenset(
    names(
        """
    PATH BASH_ENV ENV PROMPT_COMMAND PS0 PS1 PS2 PS3 PS4 IFS SHELLOPTS BASHOPTS CDPATH GLOBIGNORE HOME
    EDITOR VISUAL PAGER MANPAGER MANOPT LESSOPEN LESSCLOSE LESS LESSKEY SHELL INPUTRC BROWSER CLASSPATH
    GCONV_PATH RIPGREP_CONFIG_PATH GREP_OPTIONS TAR_OPTIONS GZIP XZ_OPT BZIP2 ZSTD_NBTHREADS FCEDIT
    HISTFILE MAKEFLAGS GNUMAKEFLAGS MAKE MFLAGS CC CXX RUSTC RUSTC_WRAPPER KUBECONFIG TERMINFO
    PROMPT_DIRTRIM EXECIGNORE POSIXLY_CORRECT TMOUT
    """
    )
)
_DANGEROUS_PREFIXES = tuple(
    names(
        """
        GIT_ LD_ DYLD_ BASH_ PYTHON NODE_ NPM_ PERL RUBY LESS CARGO_ RUSTUP_ JAVA _JAVA JDK_ SSH_
        GPG GNUPG DOCKER_ KUBE AWS_ MAN XDG_ SYSTEMD_ BAT_ DELTA_ GIT PIP_ UV_ POETRY_ YARN_ PNPM_
        BUN_ GO CGO_
        """
    )
)
_DANGEROUS_SUFFIXES = tuple(
    names(
        """
        PAGER EDITOR OPTS OPTIONS PATH CONFIG COMMAND CMD PROGRAM HOOK HOOKS ASKPASS RC WRAPPER
        STARTUP HOME PRELOAD LIB SHELL EXEC PLUGINS
        """
    )
)
HARMLESS_VALUES = {"PAGER": {"cat", ""}, "GIT_PAGER": {"cat", ""}, "MANPAGER": {"cat", ""}}
# Names the patterns above would catch that only tune output or switches: they choose no program, code or config.
_HARMLESS_NAMES = names(
    """
    PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED PYTHONHASHSEED PYTHONIOENCODING PYTHONUTF8 PYTHONFAULTHANDLER
    NODE_ENV GIT_TERMINAL_PROMPT GIT_OPTIONAL_LOCKS GIT_FLUSH LESSCHARSET MANWIDTH
    """
)


def dangerous_variable(assignment: str) -> str | None:
    """Why assigning or naming this variable (``NAME``, ``NAME=value``, ``NAME[sub]=value``) is not read-only:
    it runs code (a subscript is evaluated as arithmetic, which runs ``$(...)``) or chooses programs, code or
    configuration the commands after it use. None when it only sets a harmless shell variable."""
    name, eq, value = assignment.partition("=")
    name = name.removesuffix("+")
    base, bracket, subscript = name.partition("[")
    if bracket and any(c in subscript for c in "$`"):
        return f"the subscript of `{base}[...]` is evaluated as arithmetic, which can run commands"
    if bracket and not re.fullmatch(r"[0-9]*\]?", subscript):
        return f"the subscript of `{base}[...]` is evaluated as arithmetic, which can run code through variables"
    upper = base.upper()
    if (eq and value in HARMLESS_VALUES.get(upper, set())) or upper in _HARMLESS_NAMES:
        return None
    if (
        upper in _DANGEROUS_EXACT
        or upper.startswith(_DANGEROUS_PREFIXES)
        or (upper.endswith(_DANGEROUS_SUFFIXES) and base.isupper())
    ):
        return f"setting `{base}` changes which programs, code or configuration later commands use"
    return None


def _variables(call: Call) -> None:
    """export/declare/local/readonly/unset/read/getopts/printf -v/mapfile: every word naming a variable."""
    program = call.path[-1]
    named: list[str] = []
    if program == "printf":
        named = call.parsed.values("-v")
    elif program == "read":
        named = [*call.parsed.values("-a"), *call.parsed.operands]
    elif program == "getopts":
        named = call.parsed.operands[1:2]
    elif program == "mapfile":
        named = call.parsed.operands[:1]
    else:
        named = call.parsed.operands
    for word in named:
        why = dangerous_variable(word)
        if why is not None:
            call.add("unknown", UNKNOWN, f"`{program} {word}`: {why}")
    for option, _value, _word in call.parsed.options:
        if option == "-n" and program in {"declare", "typeset", "local"}:
            call.add("unknown", UNKNOWN, f"`{program} -n` makes a reference whose target is evaluated later")
        if option == "-i" and program in {"declare", "typeset", "local"}:
            call.add("unknown", UNKNOWN, f"`{program} -i` makes later assignments arithmetic, which can run commands")


def _pager(call: Call) -> None:
    for word in call.parsed.operands:
        if word.startswith("+"):
            call.add("unknown", UNKNOWN, f"`{call.shown} {word}` runs pager commands at start (`+!cmd` runs a shell)")


_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


def _test(call: Call) -> None:
    # `test -v 'a[$(cmd)]'`, `[ -v ... ]`, `[[ -v ... ]]`: the subscript is evaluated.
    for word in call.words:
        if "[" in word and any(c in word.partition("[")[2] for c in "$`"):
            call.add("unknown", UNKNOWN, f"`{call.shown} {word}` evaluates an array subscript, which can run commands")
    # `[[ $x -eq 1 ]]` evaluates both sides as arithmetic: a variable holding `a[$(cmd)]` runs cmd (`[` and `test`
    # only take numbers there).
    if call.path[0] == "[[" and _ARITHMETIC_TESTS & set(call.words):
        for i, word in enumerate(call.words):
            if word in _ARITHMETIC_TESTS:
                sides = call.words[max(i - 1, 0) : i + 2 : 2]
                if any(not side.lstrip("-").isdigit() for side in sides):
                    call.add(
                        "unknown",
                        UNKNOWN,
                        f"`[[ ... {word} ... ]]` evaluates variables as arithmetic, which can run commands",
                    )
                    return


def _alias(call: Call) -> None:
    defined = [w for w in call.parsed.operands if "=" in w]
    if defined:
        call.grade("unknown", "defines an alias that replaces the commands after it", UNKNOWN)


def _trap(call: Call) -> None:
    if call.parsed.operands:
        call.grade("unknown", "installs a command that runs later (on exit, on a signal, on every command)", UNKNOWN)


def _date(call: Call) -> None:
    setting = [w for w in call.parsed.operands if not w.startswith("+")]
    if setting:
        call.grade("high_risk", "sets the system clock", ("system",))


def _hostname(call: Call) -> None:
    if call.parsed.operands:
        call.grade("high_risk", "sets the host name", ("system",))


# ---- text tools whose scripts can run commands ------------------------------------------------------------------


def _sed(call: Call) -> None:
    scripts = call.parsed.values("-e", "--expression")
    operands = call.parsed.operands
    if not scripts and not call.parsed.has("-f", "--file"):
        scripts = operands[:1]
        operands = operands[1:]
    sandbox = call.parsed.has("--sandbox")
    for script in scripts:
        why = sed_danger(script)
        if why is not None and not (sandbox and why.startswith(("runs", "writes"))):
            call.add("unknown", UNKNOWN, f"`{call.shown}` script {why}")
    if call.parsed.has("-i", "--in-place"):
        args = list(call.words)
        for i in range(len(args) - 1):
            if args[i] == "-i" and args[i + 1] == "":
                del args[i + 1]  # BSD `sed -i '' …`: an empty backup suffix
                break
        parsed = parse_words(call.spec, args)
        files = parsed.operands if parsed.has("-e", "-f", "--expression", "--file") else parsed.operands[1:]
        suffix = next((v for n, v, _ in parsed.options if n in {"-i", "--in-place"} and v), None)
        call.targets = [*files, *backups(files, suffix)]


def _awk(call: Call) -> None:
    harmless = {
        "-F",
        "-v",
        "--field-separator",
        "--assign",
        "-b",
        "-c",
        "-M",
        "-N",
        "-n",
        "-O",
        "-P",
        "-r",
        "-s",
        "-S",
        "-t",
        "-V",
        "--posix",
        "--traditional",
        "--re-interval",
        "--characters-as-bytes",
        "--sandbox",
        "--bignum",
        "--use-lc-numeric",
        "--non-decimal-data",
        "--optimize",
        "--version",
        "--help",
        "-e",
        "--source",
        "--",
    }
    spec = ProgramSpec(
        takes_value=frozenset(
            {
                "-F",
                "-v",
                "-e",
                "--source",
                "-f",
                "--file",
                "-i",
                "--include",
                "-l",
                "--load",
                "-E",
                "--exec",
                "--field-separator",
                "--assign",
            }
        ),
        options_end_at_operand=True,
    )
    parsed = parse_words(spec, call.words)
    programs = parsed.values("-e", "--source")
    operands = parsed.operands
    for name, _value, _word in parsed.options:
        if name not in harmless:
            call.add("unknown", UNKNOWN, f"`{call.shown} {name}` loads code or writes files; not analysed")
    if not programs and not parsed.has("-f", "--file", "-E", "--exec"):
        programs = operands[:1]
    for program in programs:
        why = awk_danger(program)
        if why is not None:
            call.add("unknown", UNKNOWN, f"`{call.shown}` program {why}")
    if "inplace" in " ".join(call.words):
        call.add("local_write", ("filesystem_write",), f"`{call.shown} -i inplace` edits files in place")


# ---- find / fd ---------------------------------------------------------------------------------------------------

_FIND_FLAGS = frozenset(
    names(
        """
    -depth -d -mount -xdev -follow -noleaf -ignore_readdir_race -noignore_readdir_race -daystart -warn
    -nowarn -nouser -nogroup -empty -readable -writable -executable -true -false -print -print0 -ls
    -prune -quit ! -not -a -and -o -or , ( ) -H -L -P
    """
    )
)
_FIND_ONE_VALUE = frozenset(
    names(
        """
    -name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -size -mtime -mmin
    -atime -amin -ctime -cmin -newer -anewer -cnewer -perm -user -group -uid -gid -links -inum -samefile
    -lname -ilname -used -fstype -context -maxdepth -mindepth -regextype -files0-from -printf -D -O
    """
    )
)
_FIND_WRITES = {"-fprint": 1, "-fprint0": 1, "-fls": 1, "-fprintf": 2}


def _find(call: Call) -> None:
    words = call.words
    i = 0
    while i < len(words):
        word = words[i]
        if word in _FIND_FLAGS or not (word.startswith("-") or word in {"!", "(", ")", ","}):
            i += 1  # a start path, an operator or a flag
            continue
        if word in _FIND_ONE_VALUE or re.fullmatch(r"-newer[aBcmt][aBcmt]", word):
            i += 2
            continue
        if word == "-delete":
            call.add("destructive", ("filesystem_delete",), "`find -delete` deletes files")
        elif word in _FIND_WRITES:
            call.add("local_write", ("filesystem_write",), f"`find {word}` writes a file")
            if i + 1 < len(words):
                call.targets = [*(call.targets or []), words[i + 1]]
            i += _FIND_WRITES[word]
        elif word in {"-exec", "-execdir", "-ok", "-okdir"}:
            end = i + 1
            while end < len(words) and words[end] not in {";", "+"}:
                end += 1
            call.add("unknown", UNKNOWN, f"`find {word}` runs a command on every file found")
            command = [w for w in words[i + 1 : end]]
            if command:
                call.found.extend(call.walk.nested_command(command, call.depth))
            i = end
        else:
            call.add(
                "unknown", UNKNOWN, f"`find {word}` is an expression the rules do not know; treated as having effects"
            )
        i += 1


def _fd(call: Call) -> None:
    for i, word in enumerate(call.words):
        if word in {"-x", "--exec", "-X", "--exec-batch"}:
            command = call.words[i + 1 :]
            call.add("unknown", UNKNOWN, f"`fd {word}` runs a command on every file found")
            if command:
                call.found.extend(call.walk.nested_command(command, call.depth))
            return


# ---- files -------------------------------------------------------------------------------------------------------


def backups(files: Iterable[str], suffix: str | None) -> list[str]:
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
        found.append(Word(name, is_literal(path) and is_literal(suffix)))
    return found


def _mode(call: Call) -> None:
    """chmod/chown/chgrp: the operands after the mode or owner (all of them with --reference); `chmod -x f` is a
    mode, not an option."""
    options = frozenset("cfvRhHLP")
    operands: list[str] = []
    reference = False
    args = call.words
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
            pass
        else:
            operands.append(arg)
        i += 1
    call.targets = operands if reference else operands[1:]


def _install(call: Call) -> None:
    if call.parsed.has("-d", "--directory"):
        call.targets = list(call.parsed.operands)


def _ln(call: Call) -> None:
    if not call.parsed.values("-t", "--target-directory") and len(call.parsed.operands) == 1:
        target = call.parsed.operands[0]  # `ln -s ../x` links ./x
        name = posixpath.basename(target.rstrip("/"))
        call.targets = [derived(target, name)] if name not in {"", ".", ".."} else []


def _dd(call: Call) -> None:
    call.targets = [derived(arg, arg[3:]) for arg in call.words if arg.startswith("of=")]
    if any(arg.startswith("of=") for arg in call.words):
        call.base = [finding("destructive", ("filesystem_write",), "`dd` overwrites data block by block", "high")]


def _tee(call: Call) -> None:
    call.targets = [path for path in call.parsed.operands if path != "-"]
    if all(path in HARMLESS_TARGETS for path in call.targets):  # `tee`, `tee /dev/null`: standard output only
        call.found = [f for f in call.found if "appends" not in f.reason]
        call.base = [finding("read_only", (), "`tee` only copies its input to standard output")]


def _patch(call: Call) -> None:
    parsed = call.parsed
    if parsed.has("--dry-run"):
        call.targets = []
        return
    found = parsed.operands[:1]  # `patch FILE [PATCHFILE]`; with no FILE the patch names the files
    found += [v for v in parsed.values("-o", "--output", "-r", "--reject-file") if v != "-"]
    for directory in parsed.values("-d", "--directory"):
        found = under(directory, found)
    call.targets = found


def _perl(call: Call) -> None:
    in_place = False
    suffix: str | None = None
    inline = False
    operands: list[str] = []
    args = call.words
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
                    in_place, suffix = True, (derived(arg, rest) if rest else None)
                    break
                if char == "I" and not rest:
                    i += 1
                    break
                if char in "lx0CdDFMmI":
                    break  # the rest of the cluster is this switch's value
        i += 1
    files = operands if inline else operands[1:]
    call.targets = [*files, *backups(files, suffix)] if in_place else []


def _compress(call: Call) -> None:
    if call.parsed.has(*call.spec.operands_unless):
        call.base = [finding("local_write", ("filesystem_write",), f"`{call.shown}` writes files")]


_TAR_SHORT_WITH_VALUE = "bCfFgHIKLNTVX"
_TAR = ProgramSpec(
    takes_value=frozenset(f"-{c}" for c in _TAR_SHORT_WITH_VALUE)
    | frozenset(
        names(
            """
    --file --directory --files-from --exclude-from --listed-incremental --blocking-factor
    --use-compress-program --format --label --newer --after-date --info-script --new-volume-script
    --tape-length --owner --group --mode --mtime --exclude --transform --xform --to-command
    --checkpoint-action --rsh-command --rmt-command --index-file --strip-components --occurrence
    """
        )
    ),
)
_TAR_HARMLESS = frozenset(
    names(
        """
    -t -v -z -j -J -a -O -p -k -m -o -S -i -P -W -h -B -G -g -M -R -U -w --list --verbose --gzip
    --gunzip --ungzip --bzip2 --xz --lzip --lzma --lzop --zstd --compress --uncompress -Z
    --auto-compress --to-stdout --wildcards --no-wildcards --anchored --no-anchored --numeric-owner
    --totals --full-time --utc --ignore-zeros --force-local --quoting-style --show-transformed-names
    --keep-old-files --skip-old-files --overwrite --touch --preserve-permissions --same-permissions
    --no-same-owner --same-owner --no-same-permissions --recursion --no-recursion --one-file-system
    --sparse --dereference --verify --checkpoint --warning --exclude-vcs --exclude-vcs-ignores
    --exclude-caches --ignore-case --no-ignore-case --null --no-null --unquote --no-unquote
    --record-size --seek --no-seek --delay-directory-restore --help --version --usage --show-defaults
    --xattrs --no-xattrs --acls --no-acls --selinux --no-selinux --keep-newer-files --unlink-first
    --recursive-unlink --remove-files --absolute-names --sort --hard-dereference --level --create
    --append --update --concatenate --catenate --extract --get --diff --compare --delete -c -r -u -A -x
    -d -f -C -T -X -b -H -K -L -N -V --file --directory --files-from --exclude-from --blocking-factor
    --format --label --newer --after-date --tape-length --owner --group --mode --mtime --exclude
    --transform --xform --strip-components --occurrence --listed-incremental
    """
    )
)
_TAR_RUNS = frozenset(
    names(
        """
    --to-command --checkpoint-action --use-compress-program -I --info-script -F --new-volume-script
    --rsh-command --rmt-command
    """
    )
)


def _tar(call: Call) -> None:
    args = list(call.words)
    if args and args[0] and not args[0].startswith("-"):  # `tar czf a.tgz src`: old-style bundled letters
        letters, values = args[0], args[1:]
        options: list[tuple[str, str | None, str]] = []
        for char in letters:
            value = values.pop(0) if char in _TAR_SHORT_WITH_VALUE and values else None
            options.append((f"-{char}", value, args[0]))
        parsed = Parsed(options, values)
    else:
        parsed = parse_words(_TAR, args)
    for name, value, _ in parsed.options:
        if name in _TAR_RUNS:
            call.add("unknown", UNKNOWN, f"`tar {name}` runs a program it is given")
        elif name == "--index-file":
            call.add("local_write", ("filesystem_write",), "`tar --index-file` writes a file")
        elif name not in _TAR_HARMLESS:
            call.add("unknown", UNKNOWN, f"`tar {name}` is an option the rules do not know; treated as having effects")
        if name in {"-f", "--file"} and value and ":" in value and not parsed.has("--force-local"):
            call.add("unknown", UNKNOWN, f"`tar -f {value}` reaches another machine through a remote shell")
    archives = [v for v in parsed.values("-f", "--file") if v != "-"]
    if parsed.has("--delete"):
        call.base = [finding("destructive", ("filesystem_delete",), "`tar --delete` removes members from an archive")]
        call.targets = archives
    elif parsed.has("-c", "-r", "-u", "-A", "--create", "--append", "--update", "--concatenate", "--catenate"):
        call.base = [finding("local_write", ("filesystem_write",), "`tar` writes an archive")]
        call.targets = archives
    elif parsed.has("-x", "--extract", "--get"):
        call.base = [finding("local_write", ("filesystem_write",), "`tar -x` extracts files")]
        call.targets = []
    elif parsed.has("-t", "-d", "--list", "--diff", "--compare", "--version", "--help"):
        call.base = [finding("read_only", (), "`tar -t` only reads")]
        call.targets = []
    else:
        call.base = [finding("unknown", UNKNOWN, "`tar` without a known mode; treated as having effects")]


_MAKE_RISKY_TARGET = re.compile(r"deploy|publish|release|upload|push|install")


def _make(call: Call) -> None:
    targets: list[str] = []
    start = 0
    args = call.words
    while start < len(args):
        arg = args[start]
        if arg in {"-C", "-f", "-I", "-o", "-W", "--directory", "--file", "--makefile"}:
            start += 2
            continue
        if not arg.startswith("-") and "=" not in arg:
            targets.append(arg)
        start += 1
    risky = [t for t in targets if _MAKE_RISKY_TARGET.search(t)]
    if risky:
        reason = f"`make {risky[0]}` runs a target that may have effects beyond a build; treated as unknown"
        call.base = [finding("unknown", UNKNOWN, reason)]
    for word in args:
        why = dangerous_variable(word) if "=" in word and not word.startswith("-") else None
        if why is not None:
            call.add("unknown", UNKNOWN, f"`make {word}`: {why}")


# ---- git ---------------------------------------------------------------------------------------------------------


def _git(call: Call) -> None:
    found = git_finding(call.path[1], call.words)
    if found is not None:
        call.base = [found]
    call.targets = _git_targets(call)


def _git_reflog(call: Call) -> None:
    if call.parsed.operands and call.parsed.operands[0] in {"expire", "delete"}:
        call.grade("destructive", "deletes reflog entries", ("vcs_local",), "high")


def _git_listing(call: Call) -> None:
    found = git_finding(call.path[1], call.words)
    if found is not None:
        call.base = [found]
        if found.replay_policy != "auto":
            call.found = []  # what the words change settles it; an unlisted option adds nothing


def _git_targets(call: Call) -> list[str]:
    sub, rest = call.path[1], call.words
    found: list[str] = []
    plain = ProgramSpec()
    if sub == "checkout":
        args = parse_words(ProgramSpec(takes_value=frozenset({"-b", "-B", "--orphan", "--conflict"})), rest)
        if args.has("-b", "-B", "--orphan", "--pathspec-from-file"):
            return []
        paths = rest[rest.index("--") + 1 :] if "--" in rest else args.operands
        found = [p for p in paths if p != "-"]  # without `--` the first word may be a branch: "may write"
    elif sub == "restore":
        args = parse_words(ProgramSpec(takes_value=frozenset({"-s", "--source"})), rest)
        staged_only = args.has("-S", "--staged") and not args.has("-W", "--worktree")
        if not staged_only and not args.has("--pathspec-from-file"):
            found = args.operands
    elif sub == "rm":
        args = parse_words(plain, rest)
        if not args.has("--cached", "-n", "--dry-run", "--pathspec-from-file"):
            found = args.operands
    elif sub == "mv":
        args = parse_words(plain, rest)
        if not args.has("-n", "--dry-run"):
            found = args.operands
    found = [p for p in found if not p.startswith(":")]  # pathspec magic
    for _spec, parsed in call.levels:  # `git -C DIR`: paths are relative to DIR
        if parsed.has("--git-dir", "--work-tree"):
            return []
        for directory in parsed.values("-C"):
            found = under(directory, found)
    return found


CHECKS: dict[str, Check] = {
    "variables": _variables,
    "test": _test,
    "pager": _pager,
    "alias": _alias,
    "trap": _trap,
    "date": _date,
    "hostname": _hostname,
    "sed": _sed,
    "awk": _awk,
    "find": _find,
    "fd": _fd,
    "mode": _mode,
    "install": _install,
    "ln": _ln,
    "dd": _dd,
    "tee": _tee,
    "patch": _patch,
    "perl": _perl,
    "compress": _compress,
    "tar": _tar,
    "make": _make,
    "git": _git,
    "git_reflog": _git_reflog,
    "git_branch": _git_listing,
    "git_tag": _git_listing,
    "git_config": _git_listing,
    "git_remote": _git_listing,
    "curl": curl,
    "wget": wget,
}
