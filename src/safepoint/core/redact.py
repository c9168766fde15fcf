"""Secrets out of everything safepoint keeps: text and JSON values are redacted before they are persisted.

What counts as a secret: the shapes credentials have (provider API keys, GitHub, AWS, Slack, Google and Stripe
tokens, bearer headers, private key blocks, passwords inside URLs), the values of the environment's credential
variables (``environment.credential_values``), and the patterns a user adds. Each is replaced by
``[REDACTED:<kind>]``, so what was there stays visible without its value.

One combined regular expression scans the text once, so the cost is linear in its length; the built-in patterns
are written without nested quantifiers (no catastrophic backtracking on hostile input). User patterns are the
user's responsibility: they are compiled once and refused when invalid.
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


class Redactor:
    """Redacts text and JSON-like values. Build one per run (it holds the environment's secret values)."""

    def __init__(self, *, values: Iterable[str] = (), patterns: Mapping[str, str] | Iterable[str] = ()) -> None:
        named: dict[str, str] = dict(BUILTIN_PATTERNS)
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
        if secrets:
            named["credential_value"] = "|".join(re.escape(v) for v in secrets)
        self._names = list(named)
        self._regex = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in named.items()))

    def text(self, value: str) -> str:
        return self._regex.sub(self._replace, value)

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
        return self._regex.search(text) is not None


def _group_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"user_{cleaned}"
