"""Secrets out of everything safepoint keeps: text and JSON values are redacted before they are persisted.

What counts as a secret: the shapes credentials have (provider API keys, GitHub, AWS, Slack, Google and Stripe
tokens, bearer headers, private key blocks, passwords inside URLs), the values of the environment's credential
variables (``environment.credential_values``), and the patterns a user adds. Each is replaced by
``[REDACTED:<kind>]``, so what was there stays visible without its value.

The built-in patterns are tried only where a literal every one of them holds shows up (``sk-``, ``ghp_``, ``AKIA``,
``://``, ``bearer``...): one scan for those literals (a regular expression of literals only, which skips ahead by
their first characters), then the combined expression is matched at the few positions around each (a URL's
scheme stands before its ``://``). Rejected: the combined expression ``sub`` over the whole text, whose branches
start with ``\b`` or a character class and so are tried at every position: 1.4 ms for a 4 KB output, on every
record a run writes. The credential values (literals) and the user's patterns are two more passes. Every pass is
linear in the text; the built-in patterns are written without nested quantifiers (no catastrophic backtracking
on hostile input). User patterns are the user's responsibility: they are compiled once and refused when
invalid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from safepoint.errors import ConfigError

MIN_VALUE_LENGTH = 8  # a variable's value shorter than this is too common a string to hunt for everywhere

BUILTIN_PATTERNS: Mapping[str, str] = {
    "private_key": (
        r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY( BLOCK)?-----[\s\S]{0,20000}?-----END[A-Z ]{0,40}PRIVATE KEY( BLOCK)?-----"
    ),
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})",
    "aws_access_key_id": r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    "aws_secret_access_key": r"(?i:aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{40}\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_\-]{35}\b",
    "stripe_key": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
    "bearer": r"(?i:\bbearer)\s+[A-Za-z0-9\-._~+/]{16,}=*",
    "basic_auth": r"(?i:\bauthorization:\s*basic)\s+[A-Za-z0-9+/]{12,}=*",
    # scheme://user:password@host: the password goes, the rest stays readable
    "url_password": r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@]{0,200}:[^\s/?#@]{1,200}@",
}
# Where a built-in match can be: every one holds one of these literals (case ignored), and starts at it or, for a
# URL, at most SCHEME_BEFORE characters before it. A new built-in pattern adds its literal here
# (tests/test_redact.py checks every pattern is found through them).
TRIGGERS = (
    "-----BEGIN", "sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "ASIA", "ABIA",
    "ACCA", "aws_secret_access_key", "xox", "AIza", "bearer", "authorization", "://",
)  # fmt: skip
SCHEME_BEFORE = 21


class Redactor:
    """Redacts text and JSON-like values. Build one per run (it holds the environment's secret values)."""

    def __init__(self, *, values: Iterable[str] = (), patterns: Mapping[str, str] | Iterable[str] = ()) -> None:
        named: dict[str, str] = {}
        items = (
            patterns.items() if isinstance(patterns, Mapping) else ((f"user_{i}", p) for i, p in enumerate(patterns))
        )
        for name, pattern in items:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"redaction pattern {pattern!r} is not a valid regular expression: {exc}") from None
            named[_group_name(name)] = pattern
        secrets = sorted({v for v in values if len(v) >= MIN_VALUE_LENGTH}, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in secrets)) if secrets else None
        self._user = re.compile("|".join(f"(?P<{n}>{p})" for n, p in named.items())) if named else None
        self._builtin = _BUILTIN
        # A secret that may hold a space (a user pattern, a variable's value with one): text streamed to people is
        # then let out a whole line at a time, not a word at a time (core.progress.LineHold).
        self.spans_words = bool(named) or any(any(c.isspace() for c in v) for v in secrets)

    def text(self, value: str) -> str:
        value = self._builtins(value)
        if self._values is not None:
            value = self._values.sub("[REDACTED:credential_value]", value)
        if self._user is not None:
            value = self._user.sub(self._replace, value)
        return value

    def _builtins(self, value: str) -> str:
        pieces: list[str] = []
        pos = 0
        # Case is ignored by searching an ASCII-lowercased copy (same length, same positions): a case-insensitive
        # regular expression of the literals costs 30 times more here, as its first characters no longer skip ahead.
        for hit in _TRIGGER.finditer(value.translate(_ASCII_LOWER)):
            at = hit.start()
            if at < pos:
                continue
            match = self._builtin.match(value, at) if hit.group(0) != "://" else _url_before(value, at, pos)
            if match is not None:
                pieces += (value[pos : match.start()], self._replace(match))
                pos = match.end()
        if not pieces:
            return value
        pieces.append(value[pos:])
        return "".join(pieces)

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup or "secret"
        if kind == "url_password":
            scheme, _, rest = match.group(0).partition("://")
            return f"{scheme}://{rest.partition(':')[0]}:[REDACTED:password]@"
        return f"[REDACTED:{kind}]"

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string (keys included) redacted; walked without recursion."""
        root: list[Any] = [value]
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            parent, key, item = stack.pop()
            if isinstance(item, str):
                parent[key] = self.text(item)
            elif isinstance(item, dict):
                copy: dict[Any, Any] = {}
                for k, v in item.items():
                    new_key = self.text(k) if isinstance(k, str) else k
                    copy[new_key] = v
                    stack.append((copy, new_key, v))
                parent[key] = copy
            elif isinstance(item, list | tuple):
                listed = list(item)
                parent[key] = listed
                stack.extend((listed, i, v) for i, v in enumerate(listed))
        return root[0]

    def __contains__(self, text: str) -> bool:
        return self.text(text) != text


def _group_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"user_{cleaned}"


_BUILTIN = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in BUILTIN_PATTERNS.items()))
_TRIGGER = re.compile("|".join(re.escape(t.lower()) for t in TRIGGERS))
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_URL = re.compile(f"(?P<url_password>{BUILTIN_PATTERNS['url_password']})")
_SCHEME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _url_before(value: str, at: int, floor: int) -> re.Match[str] | None:
    """A URL with a password whose ``://`` is at ``at``: its scheme stands just before, at most SCHEME_BEFORE
    characters back; only the starting points the pattern allows (a letter after a non-word character) are tried."""
    start = at
    while start > floor and at - start < SCHEME_BEFORE and value[start - 1] in _SCHEME:
        start -= 1
    for candidate in range(start, at):
        if (
            value[candidate].isascii()
            and value[candidate].isalpha()
            and (candidate == 0 or value[candidate - 1] not in _WORD)
        ):
            match = _URL.match(value, candidate)
            if match is not None:
                return match
    return None
