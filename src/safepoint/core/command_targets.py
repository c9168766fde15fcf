"""Which paths a shell command line may change, so that a runtime can save them before it runs.

Pure: no I/O, nothing is executed. Reuses the walk of :mod:`safepoint.core.command_walk`; see the
comment above ``_Word`` for what is reported and what is skipped.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from safepoint.core.command_parse import ASSIGNMENT, EXPANSION_KINDS, children, replace_arithmetic
from safepoint.core.command_programs import (
    CURL_FILE_OUTPUTS,
    CURL_LONG_WITH_VALUE,
    CURL_SHORT_WITH_VALUE,
    WGET_LONG_WITH_VALUE,
    WGET_SHORT_WITH_VALUE,
)
from safepoint.core.command_rules import HARMLESS_TARGETS, SHELLS, WRAPPERS
from safepoint.core.command_walk import Walker

__all__ = ["write_targets"]


# ----------------------------------------------------------------------------------------------------------
# Write targets: which paths a command line may change, so that a runtime can save them first
# ----------------------------------------------------------------------------------------------------------
#
# ``write_targets`` reuses the classifier's parsing and walking (``command_parse.parse``, ``command_walk.Walker``:
# wrappers such as env/sudo/xargs/timeout/`uv run` are peeled, `bash -c`/`eval`/`env -S` strings and
# here-documents fed to a shell are parsed and walked, substitutions are entered) and swaps the judging of
# each simple command for a table of per-program "which operands does it write" functions.
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
    masked = replace_arithmetic(text.replace("0", "\x00"))
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


class _TargetWalker(Walker):
    """The classifier's walk, collecting the paths each simple command may change instead of verdicts."""

    def __init__(self) -> None:
        super().__init__()
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
        if any(getattr(c, "kind", None) in EXPANSION_KINDS | {"tilde"} for c in children(node)):
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
                if not words and ASSIGNMENT.match(text):
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
            if not _is_literal(path) or not path or path in HARMLESS_TARGETS:
                continue
            if path.startswith(("/dev/", "/proc/", "/sys/")):
                continue
            placed = _join_dir(self.cwd, path)
            if placed is not None:
                self.targets.append(str(placed))

    # ---- one simple command, wrappers peeled ---------------------------------------------------------------

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        if name in SHELLS:
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
        parsed = _split_args(peeled[start + 1 :], "adEILnPs", WRAPPERS["xargs"][1], "iel")
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
    args = _split_args(argv[1:], CURL_SHORT_WITH_VALUE, CURL_LONG_WITH_VALUE)
    outputs = [v for v in args.values("-o", "--output") if v != "-"]
    for directory in args.values("--output-dir"):
        outputs = _under(directory, outputs)
    others = [v for v in args.values(*(CURL_FILE_OUTPUTS - {"-o", "--output"})) if v != "-"]
    return [*outputs, *others]


def _t_wget(walker: _TargetWalker, argv: list[str]) -> list[str]:
    words = [a for a in argv[1:] if a not in {"-nc", "-nd", "-nH", "-np", "-nv"}]
    args = _split_args(words, WGET_SHORT_WITH_VALUE, WGET_LONG_WITH_VALUE)
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
