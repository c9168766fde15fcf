"""The family of lines that reach the store, a ``.git``, safepoint's configuration or git's own configuration by
another spelling than a path that names them: the rest of :mod:`safepoint.core.command_reach`'s judgement.

Pure: no I/O. One walk of the line (the targets' walk, :class:`safepoint.core.command_targets.TargetWalker`, so
every path a program's spec says it writes is seen here at once) that notes what each simple command reaches:

- a written path, or a folder a program writes under, with a part named ``.git``, the store, ``.safepoint`` or
  ``.safepointignore`` (case-folded), spelled through brace expansion (``.{git,agent-runtime}``, expanded with a
  bound; past it a writing command is held) or a dot-glob bash matches to one (``.[^.]*`` as well as ``.[!.]*``);
- a folder a program writes under: the value of ``-C``/``-d``/``--directory``/``--target-directory``/... of a
  program whose verdict writes (``tar -x -C .git``, ``unzip -d .git``, ``patch -d .git``), the destination of
  ``rsync``, the start folders of a ``find`` that deletes or runs a writing command, the operands of a program no
  spec knows (``rename … .agent-runtime``);
- an ancestor: a recursive change (``rm -r``, ``chmod -R``, ``find … -delete``, ``rsync`` into it, ``mv`` of it)
  of the workspace or a folder above it (``.``, ``..``, ``../ws``: any ``../`` path with no more names than
  ``..`` steps may be the workspace, whose name a pure rule does not know), or an extraction into a folder above;
- a second name or a new entry: every operand of ``ln``/``link``/``cp -l``/``cp -s`` (``ln -s .git g`` then
  ``> g/hooks/pre-commit``: the link's target counts, not only the link), of ``mkdir``/``mkfifo``/``mknod``
  (``mkdir -p .git/hooks``), of an in-place edit no spec marks (gawk's ``-i inplace``, ``ruby -i``);
- a word handed to a writing program through ``xargs`` from elsewhere on the line (``echo .git | xargs rm -rf``,
  ``xargs rm -rf <<< .agent-runtime``): then every word of the line is checked by name;
- any glob once the line changed globbing (``shopt -s dotglob``/``extglob``/``globstar``, ``GLOBIGNORE=``):
  ``rm -rf *`` then takes in ``.git`` and the store;
- git's configuration outside the repository: a write to ``~/.gitconfig``, ``~/.config/git/…``,
  ``$XDG_CONFIG_HOME/git/…``, ``/etc/gitconfig``, or a ``GIT_CONFIG_*`` variable set (it chooses the files and
  settings later git commands read: hooks, filters, fsmonitor).

- a path built at run time (``D=.git; rm -rf "$D"``, ``rm -rf "$(echo .g)it"``, ``${D:-.git}``, an array, a
  ``bash -c "$CMD"`` or ``eval "$X"``) whose reach cannot be known: ``DYNAMIC`` when a writing program, a
  redirection or a shell is given a word that is not literal and the line could spell a protected name: once
  every character but a name's is dropped the line holds one (``.gi""t``, ``.g)it``), a word of it is the start
  of one (``for d in .g; do rm -rf ${d}it``), or it decodes text (``\\x2e``, ``$'...'``, ``base64 -d``,
  ``xxd -r``, ``rev``, ``chr(``), or it lists the folder or names the workspace (``rm -rf $(ls -A)``,
  ``for f in .*``, ``find . | xargs rm``, ``"$PWD"``). One pass over the line's characters, whatever its length
  (rejected: expanding every assignment, 15 times slower on long scripts, and still blind to ``$(...)``);
- the workspace itself, or a folder above it, by its absolute path (``rm -rf /home/u/ws``) when the folder
  commands run in is known (``cwd``).

Not seen (documented, not held): a path built at run time from nothing on the line (read from a file, the
environment, the network: ``cat list | xargs rm``, ``rm -rf "$(cat f)"``), a link made by a script; an archive
or patch whose members are named ``.git/...`` is looked into by the engine (``engine/archive_reach.py``).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from safepoint.core.command_findings import Finding
from safepoint.core.command_git import short_flags
from safepoint.core.command_judge import Judged, judge
from safepoint.core.command_parse import ASSIGNMENT
from safepoint.core.command_rules import SHELLS, WRAPPERS, canonical
from safepoint.core.command_spec import is_literal, names
from safepoint.core.command_targets import TargetWalker
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules

__all__ = [
    "ANCESTOR",
    "CONFIGURATION",
    "DOT_ENTRIES",
    "DYNAMIC",
    "GIT_CONFIGURATION",
    "could_spell",
    "find_removals",
    "reach_beyond",
]

ANCESTOR = "ancestor"
DYNAMIC = "dynamic"
DOT_ENTRIES = "dot-entries"
GIT_CONFIGURATION = "git-configuration"
CONFIGURATION = ".safepoint"
_CONFIGURATION_NAMES = (".safepoint", ".safepointignore")

_GLOB = frozenset("*?[")
_EXTGLOB = re.compile(r"[!@+*?]\(")  # `!(src)`, `@(a|b)` once extglob is on
# Options whose value is a folder the program writes under, on a program whose verdict writes.
_FOLDER_OPTIONS = frozenset(
    {"-C", "-d", "-t", "--directory", "--target-directory", "--target", "--dest", "--destination", "--root"}
)
_RECURSIVE = {
    "rm": frozenset({"-r", "-R", "--recursive"}),
    "chmod": frozenset({"-R", "--recursive"}),
    "chown": frozenset({"-R", "--recursive"}),
    "chgrp": frozenset({"-R", "--recursive"}),
    "setfacl": frozenset({"-R", "--recursive"}),
}
# Programs that can give a file a second (hard) name, and their options that take a value.
_LINKERS = frozenset({"ln", "cp"})
_LINK_VALUES = {
    "ln": frozenset({"-S", "--suffix", "-t", "--target-directory"}),
    "cp": frozenset({"-S", "--suffix", "-t", "--target-directory"}),
}
_FIND_ACTIONS = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir"})
_FIND_OPTIONS_WITH_VALUE = frozenset({"-D", "-O"})
# `find . -name '*.pyc' -delete` only touches files of that extension; none is in .git or the store.
_FIND_NARROW = re.compile(r"\*\.[A-Za-z0-9]+")
_INTERNAL_EXTENSIONS = frozenset(
    {"sample", "pack", "idx", "rev", "keep", "lock", "bitmap", "midx", "promisor", "mtimes", "graph", "bundle"}
    | {"jsonl", "json", "toml", "part", "tmp", "db", "sqlite", "blob"}
)
# `find . -name __pycache__ -exec rm -rf {} +`: folders of these names are in neither (a branch so named is a file
# under .git/refs: the one thing such a line could take, accepted).
_CACHE_FOLDERS = frozenset({"__pycache__", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"})
# Names inside .git and the store (case-folded) a literal `-name NAME` could take: beside them, only a branch or tag
# of that name (a file under .git/refs) could match, accepted.
_INTERNAL_NAMES = names(
    """config head index description hooks info exclude objects pack refs heads tags remotes logs packed-refs
    fetch_head orig_head merge_head cherry_pick_head revert_head rebase_head auto_merge commit_editmsg worktrees
    modules lfs shallow rr-cache sequencer rebase-merge rebase-apply alternates commondir gitdir sparse-checkout
    attributes main master origin stash runs blobs checkpoints artifacts schedules quarantined tmp scratch
    ledger.jsonl trace.jsonl index.jsonl control.jsonl control.lock terminal_events.jsonl owner.json run.json
    restart_checkpoint.json generation state"""
)
# Dot-names a `-name '.x*'` pattern is checked against: the protected names, the dot-files inside them (the store's
# .gitignore, a temp file of a write), git's own dot-files.
_DOT_NAMES = names(
    ".git .agent-runtime .safepoint .safepointignore .gitignore .gitattributes .gitmodules .safepoint-write.part .lock"
)
_GIT_CONFIG_PATH = re.compile(
    r"(^|/)\.gitconfig$|(^|/)\.config/git(/|$)|XDG_CONFIG_HOME\}?/git(/|$)|^/etc/git(config|attributes)$"
)
_GIT_CONFIG_VARIABLE = re.compile(r"GIT_CONFIG(_[A-Z0-9_]+)?")
# Programs that make a second name for what they are given (`ln -s .git g`, `cp -al .git g`): writing through
# that name writes .git, so every operand counts, the link's target too. Their spec only marks the new name.
_LINKERS = frozenset({"ln", "link"})
_CP_LINKING = frozenset({"-s", "-l", "--link", "--symbolic-link"})
# Programs whose operands are written though no spec marks them (created, not overwritten: nothing to save).
_CREATORS = frozenset({"mkdir", "mkfifo", "mknod", "mktemp", "split", "csplit", "xxd", "zip"})
# Option values a writing program writes to or under, seen by name only (`wget -P .git/hooks`, `git archive -o`):
# `mkdir -p ..` must not read `..` as a folder written under (the ancestor rule is for _FOLDER_OPTIONS).
_WRITTEN_VALUES = frozenset(
    {"-o", "-O", "-P", "-p", "--output", "--output-document", "--directory-prefix", "--prefix", "--tmpdir"}
    | {"--out", "--outdir", "--out-dir", "--output-dir", "--outfile", "--output-directory"}
)
# git sub-commands whose operand is a folder they create: `git clone URL .git/x`, `git worktree add .git/x`.
_GIT_CREATING = frozenset({"clone", "init", "worktree", "submodule"})
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_RUBY_LIKE = frozenset({"ruby"})  # `ruby -i -pe …`: in place, like `perl -i` (which the specs see)
# A word given to a program through xargs from elsewhere on the line (`echo .git | xargs rm -rf`, `<<< .git`).
_LINE_WORD = re.compile(r"""[^\s'"|;&<>()`]+""")
# What a path built at run time is built from: the line with every character but a name's dropped (`.gi""t`,
# `$(echo .g)it`, `${D:-.git}` all hold `.git` then), its words (`.g` starts `.git`), and text decoders.
_NOT_NAME = re.compile(r"[^a-z0-9._-]+")
# Words that list the folder (its dot-entries among them) or name the workspace itself: a built path fed by them
# (`rm -rf $(ls -A)`, `for f in .*; do rm -rf "$f"`, `find . | xargs rm`, `rm -rf "$PWD"`) reaches .git and the store.
_LISTS = re.compile(
    r"\bls\b[^|;&)`]*\s(?:-[a-zA-Z]*[aA]|--all|--almost-all)\b|(?:^|[\s\"'(=/])\.[*?\[]"
    r"|\$\{?(?:OLD)?PWD\b|\bpwd\b|~[+-]"
)
_DECODES = re.compile(
    r"\\x[0-9a-fA-F]|\\[0-7]{3}|\\u00|\$'|\b(?:base64|base32|basenc|xxd|rev|iconv|openssl)\b|chr\(|fromCharCode|pack\("
)


def _bash_class(pattern: str) -> str:
    """bash's ``[^…]`` is ``[!…]`` (fnmatch knows only the second)."""
    return pattern.replace("[^", "[!")


def _ancestor(path: str, *, here: bool) -> bool:
    """Whether ``path`` may be the workspace or a folder above it: ``/``, ``..`` steps followed by no more names
    than steps (``../ws``), and ``.`` itself when ``here``."""
    if path.startswith("/"):
        return posixpath.normpath(path) in {"/", "//"}
    parts = [part for part in posixpath.normpath(path).split("/") if part not in {"", "."}]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    names = len(parts) - ups
    if ups == 0:
        return here and names == 0
    return names <= ups


class _ReachWalker(TargetWalker):
    def __init__(self, rules: CommandRules, protected: tuple[str, ...]) -> None:
        super().__init__(rules)
        self.protected = protected
        self.found: set[str] = set()
        self.dotglob = False  # the line changed globbing: any glob may match a dot-entry
        self.overflow = False  # a word of the current command had more brace expansions than the bound
        self.fed = False  # a writing program ran under xargs: words from elsewhere on the line are its operands
        self.dynamic = False  # a writer, a redirection or a shell was given a word that is not literal
        self.root: str | None = None  # the folder commands run in (absolute), when known
        self.removals: list[str] = []  # what a `find` that deletes may remove, as hints (``find_removals``)
        self.listing = False  # a `find` that may print paths inside .git or the store (not one narrow extension)

    # ---- what one path reaches ---------------------------------------------------------------------------

    def named(self, path: str) -> str | None:
        """The protected name a path names (a part of it, or a glob part that matches one), or None."""
        for part in posixpath.normpath(path).split("/"):
            folded = part.casefold()
            if folded in self.protected:
                return folded
            if _GLOB & set(folded) or (self.dotglob and _EXTGLOB.search(folded)):
                if self.dotglob:
                    return DOT_ENTRIES
                if folded.startswith("."):
                    pattern = _bash_class(folded)
                    for name in self.protected:
                        if fnmatch.fnmatchcase(name, pattern):
                            return name
        return None

    def note(self, paths: Sequence[str], *, ancestors: bool, here: bool) -> None:
        for path in paths:
            name = self.named(path)
            if name is not None:
                self.found.add(name)
            elif ancestors and (_ancestor(path, here=here) or self.above_root(path)):
                self.found.add(ANCESTOR)

    def above_root(self, path: str) -> bool:
        """An absolute path that is the workspace (the folder commands run in) or a folder above it."""
        if self.root is None or not path.startswith("/"):
            return False
        folder = posixpath.normpath(path).rstrip("/") or "/"
        return self.root == folder or self.root.startswith(folder.rstrip("/") + "/")

    def place(self, path: str) -> str | None:
        """A folder operand placed under the walk's working directory, as ``emit`` places targets."""
        if not path or path.startswith("/"):
            return path or None
        if self.cwd is None:
            return None
        return posixpath.join(self.cwd, path) if self.cwd else path

    # ---- the walk ------------------------------------------------------------------------------------------

    def too_many_braces(self, text: str) -> None:
        self.overflow = True

    def simple_command(self, node: Any, depth: int, quoted: frozenset[str]) -> None:
        for part in getattr(node, "parts", []):
            kind = getattr(part, "kind", None)
            if kind == "assignment" or (kind == "word" and ASSIGNMENT.match(self.word(part))):
                self.assignment(self.word(part))
            elif kind == "word":
                break
        self.overflow = False
        super().simple_command(node, depth, quoted)

    def assignment(self, text: str) -> None:
        name = text.split("=", 1)[0].rstrip("+").split("[", 1)[0]
        if name == "GLOBIGNORE":
            self.dotglob = True  # bash: setting it turns dotglob on
        elif _GIT_CONFIG_VARIABLE.fullmatch(name):
            self.found.add(GIT_CONFIGURATION)

    def emit(self, paths: Any) -> None:
        """Every written path (a redirection's too): by name, and outside the repository git's configuration."""
        paths = list(paths)
        if any(path and not is_literal(path) for path in paths):
            self.dynamic = True
        for path in paths:
            if _GIT_CONFIG_PATH.search(str(path)):
                self.found.add(GIT_CONFIGURATION)
        placed = self.capture(lambda: super(_ReachWalker, self).emit(paths))
        self.note(placed, ancestors=False, here=False)
        self.targets.extend(placed)

    def judge(self, argv: list[str], depth: int, stdin: str | None) -> None:
        name = argv[0]
        for word in self.words:  # `env GIT_CONFIG_GLOBAL=x …`, `export GLOBIGNORE=x`, `declare -x …`
            if ASSIGNMENT.match(word):
                self.assignment(word)
        if name == "shopt" and "-s" in argv[1:] and {"dotglob", "extglob", "globstar"} & set(argv[1:]):
            self.dotglob = True
        if (name in SHELLS or name == "eval") and any(not is_literal(word) for word in argv[1:]):
            self.dynamic = True  # `bash -c "$CMD"`, `eval "$X"`: a script built at run time
        if name in SHELLS or name in {"eval", "cd", "pushd", "popd"}:
            super().judge(argv, depth, stdin)
            return
        if name == "find" and not _narrow(_find_parts(argv[1:])[1]):
            self.listing = True  # `rm $(find . -name index)`, `find . | xargs rm`: its output may be built into paths
        judged = judge(self.tree, argv, self, depth)
        targets = self.drop_placeholders(argv, judged.targets)
        placed = self.capture(lambda: self.emit(targets))  # noted by name there
        self.targets.extend(placed)
        if judged.findings is None:  # no spec knows the program: every word it is given may be a path it writes
            if any(word and not is_literal(word) for word in argv[1:]):
                self.dynamic = True
            words = [w.partition("=")[2] if w.startswith("-") else w for w in argv[1:]]
            self.note([w for w in words if w], ancestors=False, here=False)
            return
        operands = [self.place(w) or w for w in argv[1:] if w and not w.startswith("-")]
        if _second_name(name, argv[1:]):
            self.note(operands, ancestors=False, here=False)  # writes land in what the operands name
        if not _writes(judged.findings):
            return
        if any(word and not is_literal(word) for word in argv[1:]):
            self.dynamic = True  # `mv $x /tmp`, `tar -x -C "$D"`: an operand built at run time
        if any(posixpath.basename(word) == "xargs" for word in self.before(argv)):
            self.fed = True  # its words come from elsewhere on the line: the line's words are checked
        if self.overflow:
            self.found.add(DOT_ENTRIES)
        recursive = _RECURSIVE.get(name)
        self.note(placed, ancestors=recursive is not None and bool(recursive & _flags(argv[1:])), here=True)
        self.folders(argv, name)

    def folders(self, argv: list[str], name: str) -> None:
        """The folders a writing program writes under, by its options and (for a few) its operands."""
        args = argv[1:]
        values: list[str] = []
        # git's `-C DIR` is where it runs (the walk places its paths there), not a folder it writes under
        for i, word in enumerate(args if name != "git" else ()):
            option, eq, value = word.partition("=")
            if eq and option in _FOLDER_OPTIONS:
                values.append(value)
            elif word in _FOLDER_OPTIONS and i + 1 < len(args):
                values.append(args[i + 1])
        self.note([p for v in values if (p := self.place(v)) is not None], ancestors=True, here=False)
        written = [args[i + 1] for i, word in enumerate(args[:-1]) if word in _WRITTEN_VALUES]
        written += [value for word in args if (value := _long_value(word, _WRITTEN_VALUES))]
        self.note(written, ancestors=False, here=False)
        operands = [word for word in args if not word.startswith("-")]
        if name == "rsync" and len(operands) >= 2 and ":" not in operands[-1].split("/", 1)[0]:
            self.note([p for p in [self.place(operands[-1])] if p], ancestors=True, here=True)
        elif name == "mv" and len(operands) >= 2:
            self.note([p for p in map(self.place, operands[:-1]) if p], ancestors=True, here=True)
        elif name in _LINKERS:
            self.linked(args, name)
        elif name == "find":
            self.find(args)
        elif name == "git":  # `git -c init.templateDir=T init`: the template's hooks go into .git/hooks
            settings = [args[i + 1] for i, word in enumerate(args[:-1]) if word == "-c"]
            if any(setting.casefold().startswith("init.templatedir=") for setting in settings):
                self.found.add(".git")
            words = [word for word in args if not word.startswith("-")]
            if set(words[:1]) & _GIT_CREATING or (
                settings and set(words[len(settings) : len(settings) + 1]) & _GIT_CREATING
            ):
                self.note(words[1:], ancestors=False, here=False)

    def linked(self, args: list[str], name: str) -> None:
        """The sources of a hard link (``ln SRC DEST``, ``cp -l``/``--link``): a second name for a file of the
        store or ``.git`` lets a later write to that name (``: > notes.txt``) change the file itself, and the
        later write names nothing protected. Symbolic links are left to the symlink checks (rejected here: holding
        every ``ln -s``, which tools make all the time)."""
        flags = _flags(args)
        if name == "ln" and flags & {"-s", "--symbolic"}:
            return
        if name == "cp" and not flags & {"-l", "--link"}:
            return
        operands: list[str] = []
        directory = False
        skip = False
        for word in args:
            if skip:
                skip = False
            elif word in _LINK_VALUES.get(name, frozenset()):
                skip = True
                directory = directory or word in {"-t", "--target-directory"}
            elif word.startswith("--target-directory="):
                directory = True
            elif not word.startswith("-") or word == "-":
                operands.append(word)
        sources = operands if directory or len(operands) < 2 else operands[:-1]
        self.note([p for p in map(self.place, sources) if p], ancestors=False, here=False)

    def find(self, args: list[str]) -> None:
        """``find ROOTS… EXPRESSION``: the roots, when the expression deletes or runs a writing command, unless it
        only ever acts on files of one extension that neither .git nor the store holds."""
        roots, expression = _find_parts(args)
        writes = "-delete" in expression
        for j, word in enumerate(expression):
            if word in _FIND_ACTIONS - {"-delete"}:
                end = j + 1
                while end < len(expression) and expression[end] not in {";", "+"}:
                    end += 1
                command = [w for w in expression[j + 1 : end] if w != "{}"]
                writes = writes or not command or self.nested_writes(command)
        if not writes:
            return
        placed = [p for p in map(self.place, roots or ["."]) if p]
        self.removals.extend(_removal_hints(placed, expression))
        if _narrow(expression):
            return
        self.note(placed, ancestors=True, here=True)

    def nested_writes(self, command: list[str]) -> bool:
        """Whether the command ``find -exec`` runs may write (a shell or wrapper: assumed so)."""
        name = canonical(posixpath.basename(command[0]) or command[0])
        if name in SHELLS or name in WRAPPERS or name == "eval":
            return True
        judged: list[Judged] = []
        self.capture(lambda: judged.append(judge(self.tree, [name, *command[1:]], self, 0)))
        findings = judged[0].findings
        return findings is None or _writes(findings)


def _flags(args: Sequence[str]) -> set[str]:
    """``short_flags`` with each single letter spelled as its option (``-a``)."""
    return {flag if flag.startswith("--") else f"-{flag}" for flag in short_flags(args)}


def _long_value(word: str, options: frozenset[str]) -> str:
    """The value of ``--option=value`` when the option is one of ``options``, else empty."""
    option, eq, value = word.partition("=")
    return value if eq and option.startswith("--") and option in options else ""


def _second_name(name: str, args: list[str]) -> bool:
    """Whether the program writes into what its operands name: makes a link to it, creates it, or edits it in
    place by an option its spec does not mark (gawk's `-i inplace`, ruby's `-i`)."""
    if name in _LINKERS or name in _CREATORS:
        return True
    if name == "cp":
        return bool(_flags(args) & _CP_LINKING)
    if name in _AWKS:
        pairs = zip(args, [*args[1:], ""], strict=True)
        return any(
            w in {"-iinplace", "--include=inplace"} or (w in {"-i", "--include"} and v.startswith("inplace"))
            for w, v in pairs
        )
    if name in _RUBY_LIKE:
        return any(w.startswith("-") and not w.startswith("--") and "i" in w for w in args)
    return False


def _writes(findings: Sequence[Finding]) -> bool:
    return any(f.replay_policy != "auto" for f in findings)


def _find_parts(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``find``'s start folders and its expression."""
    i = 0
    while i < len(args) and args[i] in {"-H", "-L", "-P", *_FIND_OPTIONS_WITH_VALUE}:
        i += 2 if args[i] in _FIND_OPTIONS_WITH_VALUE else 1
    roots: list[str] = []
    while i < len(args) and not (args[i].startswith("-") or args[i] in {"!", "(", ")", ","}):
        roots.append(args[i])
        i += 1
    return roots, list(args[i:])


def _removal_hints(roots: Sequence[str], expression: Sequence[str]) -> list[str]:
    """What a deleting ``find`` may remove under each root, as capture hints: ``ROOT/**/PATTERN`` for each
    ``-name`` pattern when the expression only ever selects by those names (no ``!``/``-not``, no ``-path``,
    ``-regex``, ``-iname``, ``-prune``: any of them lets other names through), else the root itself (every file
    under it)."""
    patterns: list[str] = []
    broad = False
    for j, word in enumerate(expression):
        if word in {"!", "-not", "-path", "-wholename", "-ipath", "-regex", "-iregex", "-iname", "-prune", "-lname"}:
            broad = True
        elif word == "-name" and j + 1 < len(expression):
            patterns.append(expression[j + 1])
    hints: list[str] = []
    for root in roots:
        base = posixpath.normpath(root)
        if broad or not patterns or any("/" in pattern for pattern in patterns):
            hints.append(f"{base}/**")
        else:
            hints.extend(f"{base}/**/{pattern}" for pattern in patterns)
    return hints


def find_removals(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> tuple[str, ...]:
    """What the ``find … -delete`` (or ``-exec rm``) commands of a line may remove, as hints for the workspace
    capture to keep ahead (``ROOT/**/PATTERN``, ``ROOT/**``): the files they select are named by the line as
    surely as ``rm``'s operands, only by a pattern. Never raises."""
    if "find" not in command:
        return ()
    try:
        return _find_removals_cached(command, rules)
    except Exception:  # a bug here must not stop the command; nothing more is kept ahead
        return ()


@functools.lru_cache(maxsize=1024)
def _find_removals_cached(command: str, rules: CommandRules) -> tuple[str, ...]:
    walker = _ReachWalker(rules, ())
    walker.text(command, depth=0)
    return tuple(walker.removals)


def _narrow(expression: Sequence[str]) -> bool:
    """Every file the expression acts on has one extension none of .git's or the store's files has, or is a
    well-known cache folder or a dot-name of none of theirs: a `-name '*.EXT'` (`-name __pycache__`, `-name
    '.env*'` ...) test in an expression with no `-o`,
    `!`, `-not` or `,` (which would let other files through)."""
    if any(word in {"-o", "-or", "!", "-not", ","} for word in expression):
        return False
    for j, word in enumerate(expression[:-1]):
        if word in {"-name", "-iname"}:
            pattern = expression[j + 1]
            if _FIND_NARROW.fullmatch(pattern) and pattern[2:].casefold() not in _INTERNAL_EXTENSIONS:
                return True
            if pattern in _CACHE_FOLDERS or (
                not _GLOB & set(pattern) and not pattern.startswith(".") and pattern.casefold() not in _INTERNAL_NAMES
            ):
                return True  # `-name cache`: a name none of theirs has (a branch of that name: accepted)
            if pattern.startswith(".") and not any(fnmatch.fnmatchcase(n, _bash_class(pattern)) for n in _DOT_NAMES):
                return True  # `-name '.env*'`: dot-names none of the protected or their dot-files match
    return False


def could_spell(command: str, names: Sequence[str]) -> bool:
    """Whether a path the line builds at run time could be one of ``names`` (case-folded): see the module's
    ``DYNAMIC``. Linear in the line."""
    folded = command.casefold()
    squeezed = _NOT_NAME.sub("", folded)
    if any(name in squeezed for name in names):
        return True
    for word in _NOT_NAME.split(folded):
        if len(word) >= 2 and word.startswith(".") and any(n.startswith(word) for n in names):
            return True  # `.g`, `.agent`: the start of one, finished at run time
    return _DECODES.search(command) is not None


def reach_beyond(
    command: str,
    rules: CommandRules = DEFAULT_COMMAND_RULES,
    protected: tuple[str, ...] = (".git",),
    cwd: str | None = None,
) -> frozenset[str]:
    """What ``command`` reaches beyond the paths it names: protected names (``protected`` and safepoint's
    configuration), ``ANCESTOR``, ``DOT_ENTRIES``, ``GIT_CONFIGURATION``, ``DYNAMIC`` (a path built at run time
    that could spell one). ``cwd``: the absolute folder commands run in, if known. Never raises (a failure
    holds)."""
    try:
        return _reach_cached(command, rules, tuple(sorted({*protected, *_CONFIGURATION_NAMES})), cwd)
    except Exception:  # a bug here must not let the line through unheld, nor crash the runtime
        return frozenset({DOT_ENTRIES})


@functools.lru_cache(maxsize=4096)
def _reach_cached(command: str, rules: CommandRules, protected: tuple[str, ...], cwd: str | None) -> frozenset[str]:
    walker = _ReachWalker(rules, protected)
    walker.root = posixpath.normpath(cwd) if cwd and cwd.startswith("/") else None
    walker.text(command, depth=0)
    if walker.fed:  # `echo .git | xargs rm -rf`: any word on the line may be one xargs hands to the writer
        walker.note(_LINE_WORD.findall(command), ancestors=False, here=False)
    if (walker.dynamic and could_spell(command, protected)) or (
        (walker.dynamic or walker.fed) and (walker.listing or _LISTS.search(command) is not None)
    ):
        walker.found.add(DYNAMIC)
    return frozenset(CONFIGURATION if name in _CONFIGURATION_NAMES else name for name in walker.found)
