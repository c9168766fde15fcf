"""One simple command being judged, as the checks of :mod:`safepoint.core.command_checks` see it."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from safepoint.core.command_findings import Finding, finding
from safepoint.core.command_spec import Parsed, ProgramSpec, derived, is_literal
from safepoint.records import RiskLevel

__all__ = ["UNKNOWN", "Call", "Check", "Nested", "under"]


class Nested(Protocol):
    """What a check may ask of the walk: judge a command it runs (`find -exec CMD`) or a string it parses."""

    def nested_command(self, words: Sequence[str], depth: int) -> list[Finding]:
        """The findings of a command another one runs (`find -exec CMD`); its written paths are not known."""
        ...


class Call:
    """One simple command being judged, read by its spec."""

    def __init__(
        self,
        walk: Nested,
        depth: int,
        path: list[str],
        spec: ProgramSpec,
        words: list[str],
        parsed: Parsed,
        levels: list[tuple[ProgramSpec, Parsed]],
    ) -> None:
        self.walk = walk
        self.depth = depth
        self.path = path  # the words naming the spec: ["git", "checkout"]
        self.spec = spec
        self.words = words  # the words after the path
        self.parsed = parsed
        self.levels = levels  # (spec, its options) of the levels above: git's global options
        self.base: list[Finding] | None = None  # set by a check: replaces the spec's own grade
        self.found: list[Finding] = []
        self.targets: list[str] | None = None  # set by a check: replaces the spec's written operands

    @property
    def shown(self) -> str:
        return " ".join(self.path)

    def add(self, grade: str, effects: Iterable[str], reason: str, risk: RiskLevel | None = None) -> None:
        self.found.append(finding(grade, effects, reason, risk))

    def grade(self, grade: str, phrase: str, effects: Iterable[str] = (), risk: RiskLevel | None = None) -> None:
        self.base = [finding(grade, effects, f"`{self.shown}` {phrase}", risk)]


Check = Callable[[Call], None]
UNKNOWN = ("unknown",)


def under(directory: str, paths: Iterable[str]) -> list[str]:
    """``paths`` relative to ``directory`` (a word of the command, `patch -d DIR`); none if it is not literal."""
    if not is_literal(directory):
        return []
    return [path if path.startswith("/") else derived(path, posixpath.join(directory, path)) for path in paths]
