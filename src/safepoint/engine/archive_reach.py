"""What an archive or a patch a command line unpacks would write: members named ``.git/...`` or the store's.

``tar -xf x.tar`` (with ``-C DIR`` too: ``DIR/.git`` is a repository's), ``unzip x.zip``, ``git apply p.patch``,
``patch -p1 < p.patch`` write where their input says, and no rule on the line's words can know it
(``core/command_reach.py`` holds what the line itself names). So before such a call is planned, the archives
and patches it names are looked into here (their member names only, never their content beyond a patch's
headers): a member with a part named ``.git`` or the store's
folder (case-folded), or one that climbs out (``../``) or is absolute, holds the call for a person, as a line that
names them does. An input that cannot be read (not there yet: made earlier on the same line, standard input, or
not an archive this reads) holds it too: what it would write is unknown.

Cost: one listing of each named archive (tar's and zip's indexes, a patch's header lines), bounded: past
``MEMBER_LIMIT`` names the call is held. The line is split with ``shlex`` (rejected: the full bash walk here, which
the pure rules do; this only needs each simple command's words).
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import tarfile
import zipfile
from collections.abc import Iterator

from safepoint.core.command_reach import Protected, held_for
from safepoint.core.commands import CommandVerdict

__all__ = ["MEMBER_LIMIT", "hold_unpacked"]

MEMBER_LIMIT = 200_000
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "|&", ";;", "\n"})
_PATCH_PATH = re.compile(rb"^(?:diff --git a/(\S+) b/(\S+)|\+\+\+ (\S+)|--- (\S+)|rename to (.+)|copy to (.+))$")


def hold_unpacked(verdict: CommandVerdict, command: str, protected: Protected) -> CommandVerdict:
    """``verdict``, held when an archive or patch the line unpacks would write into ``.git`` or the store."""
    if protected.cwd is None or not _UNPACKERS.search(command):
        return verdict
    names = {name.casefold() for name in protected.names}
    names |= {posixpath.basename(folder).casefold() for folder in protected.folders}
    for source, kind in _inputs(command):
        if source == "-":
            return held_for(verdict, "an archive read from standard input: what it unpacks cannot be looked into")
        path = os.path.join(protected.cwd, source)
        why = _reaches(path, kind, names)
        if why is not None:
            return held_for(verdict, f"{source}: {why}")
    return verdict


_UNPACKERS = re.compile(r"\b(?:tar|bsdtar|unzip|apply|am|patch)\b")


def _words(command: str) -> Iterator[list[str]]:
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return
    current: list[str] = []
    for token in tokens:
        if token in _SEPARATORS:
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


def _inputs(command: str) -> Iterator[tuple[str, str]]:
    """(archive or patch path, kind) for each simple command that unpacks one into where it runs."""
    for words in _words(command):
        while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] in {"sudo", "env", "command"}):
            words = words[1:]
        if not words:
            continue
        name = posixpath.basename(words[0])
        args = words[1:]
        if name in {"tar", "bsdtar", "gtar"}:
            yield from _tar(args)
        elif name == "unzip" and not {"-l", "-t", "-v", "-Z"} & set(args):
            operands = _operands(args, {"-d", "-x", "-P"})
            if operands:
                yield operands[0], "zip"
        elif name == "git" and args[:1] in (["apply"], ["am"]) and not {"--check", "--stat", "--numstat"} & set(args):
            for operand in _operands(args[1:], {"-p", "-C", "--directory", "--exclude", "--include"}):
                yield operand, "patch"
            if "<" in words:
                yield from _redirected(words)
        elif name == "patch" and not {"-d", "--directory", "--dry-run"} & set(args):
            for i, word in enumerate(args):
                if word in {"-i", "--input"} and i + 1 < len(args):
                    yield args[i + 1], "patch"
                elif word.startswith("--input="):
                    yield word.partition("=")[2], "patch"
            yield from _redirected(words)


def _redirected(words: list[str]) -> Iterator[tuple[str, str]]:
    for i, word in enumerate(words[:-1]):
        if word == "<":
            yield words[i + 1], "patch"


def _operands(args: list[str], valued: set[str]) -> list[str]:
    operands: list[str] = []
    skip = False
    for word in args:
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif not word.startswith("-") and word != "<":
            operands.append(word)
    return operands


def _tar(args: list[str]) -> Iterator[tuple[str, str]]:
    if not args:
        return
    first = args[0]
    bundled = not first.startswith("-") and set(first) <= set("xtcrudfvzjJaopPkmwhO")  # `tar xzf x.tgz`
    flags = set(first) if bundled else set()
    archive: str | None = None
    rest = args[1:] if bundled else args
    if bundled and "f" in flags:
        operands = [w for w in rest if not w.startswith("-")]
        archive = operands[0] if operands else None
    for i, word in enumerate(rest):
        if word.startswith("--"):
            option, eq, value = word.partition("=")
            if option == "--extract":
                flags.add("x")
            elif option == "--file":
                archive = value if eq else (rest[i + 1] if i + 1 < len(rest) else None)
        elif word.startswith("-") and len(word) > 1:
            letters = word[1:]
            flags |= set(letters)
            if "f" in letters:
                tail = letters[letters.index("f") + 1 :]
                archive = tail or (rest[i + 1] if i + 1 < len(rest) else None)
    if "x" in flags:  # with `-C DIR` too: a member `.git/hooks/x` lands in DIR/.git, a repository's all the same
        yield archive or "-", "tar"  # none named: standard input (`curl ... | tar -xz`), which nothing can look into


def _reaches(path: str, kind: str, names: set[str]) -> str | None:
    """Why unpacking ``path`` may write into a protected folder, or None."""
    try:
        return _first_reach(_members(path, kind), kind, names)
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError):
        return f"cannot be looked into before the command runs (not there yet, or not a {kind} this reads)"


def _first_reach(members: Iterator[tuple[str, bool]], kind: str, names: set[str]) -> str | None:
    for count, (member, link) in enumerate(members, 1):
        if count > MEMBER_LIMIT:
            return f"holds more than {MEMBER_LIMIT} entries: not all looked into"
        text = member.strip()
        if kind == "patch" and text.startswith('"'):
            text = text.strip('"')
        parts = [part.casefold() for part in text.split("/")]
        if not link and kind != "patch" and (text.startswith("/") or ".." in parts):
            return f"holds an entry outside the folder it is unpacked in ({text[:80]})"
        hit = next((part for part in parts if part in names), None)
        if hit is not None:
            return f"holds an entry written into {hit} ({text[:80]})"
    return None


def _members(path: str, kind: str) -> Iterator[tuple[str, bool]]:
    """Each entry's name, and whether it is a link's target (a link into .git, written through by a later
    member, reaches it too; a link elsewhere is the archive's business)."""
    if kind == "zip":
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                yield name, False
    elif kind == "tar":
        with tarfile.open(path) as archive:
            for member in archive:
                yield member.name, False
                if member.issym() or member.islnk():
                    yield member.linkname, True
    else:
        with open(path, "rb") as handle:
            for line in handle:
                found = _PATCH_PATH.match(line.rstrip(b"\r\n"))
                if found:
                    for group in found.groups():
                        if group and group != b"/dev/null":
                            yield os.fsdecode(group), False
