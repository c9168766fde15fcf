"""Secrets out of everything safepoint keeps: text, JSON values and records are redacted before they are persisted.

What counts as a secret: the shapes credentials have (provider API keys, GitHub, GitLab, npm, Hugging Face, AWS,
Slack, Google and Stripe tokens, JWTs, auth headers, private key blocks and their starts, passwords inside URLs,
webhook URLs), a value given under a secret's name (``DB_PASSWORD=``, ``?password=``, ``"token": "..."``,
``AccountKey=``, ``.netrc``'s ``password X``, ``<password>X</password>``, ``--password X``, ``sshpass -p X``,
``curl -u user:X``), the values of the environment's credential variables (``environment.credential_values``) in
the encodings a command prints them in (``encoded_forms``; wrapped at a width too: ``wrapped_forms``), the
store's key, and the patterns a user adds. Each is replaced by
``[REDACTED:<kind>]``, so what was there stays visible without its value (a name before it too).

Records are redacted by their structure (``Redactor.record``, ``records.FIELD_REDACTION``): the paths, hashes,
refs, ids and statuses that rollback, restore, capture and conflicts rely on are kept exactly, so no pattern can
make a file escape rollback or a record stop decoding.

The built-in patterns are tried only where a literal every one of them holds shows up (``sk-``, ``ghp_``, ``AKIA``,
``://``, ``token``...): one scan for those literals, then the combined expression is matched at the few positions
around each (a URL's scheme stands before its ``://``, a name such as ``DB_PASSWORD`` starts before its ``pass``).
Rejected: the combined expression ``sub`` over the whole text, whose branches start with ``\b`` or a character
class and so are tried at every position: 1.4 ms for a 4 KB output, on every record a run writes. The credential
values (literals) and the user's patterns are two more passes. Every pass is linear in the text; the built-in
patterns are written without nested quantifiers that can match the same text two ways (no catastrophic
backtracking on hostile input). User patterns are the user's responsibility: they are compiled once and refused
when invalid.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import msgspec

from safepoint.core.resume import INTERNAL_PREFIX, INTERNAL_TOOLS
from safepoint.errors import ConfigError
from safepoint.records import FIELD_REDACTION, ToolLedgerEntry

MIN_VALUE_LENGTH = 8  # a variable's value shorter than this is too common a string to hunt for everywhere

# A name that says its value is a secret (``DB_PASSWORD``, ``client_secret``, ``apiKey``, ``AccountKey``, ``sig``),
# in an assignment (``.env`` lines, URL queries, DSNs, connection strings, flags) or a quoted field (JSON, YAML,
# TOML, code). The words a name may end with after any prefix, those that count only as a whole name or after a
# separator (``bypass``, ``OLDPWD`` and ``oauth`` are not secrets), and ``pwd`` alone only in a query or a
# connection string (``PWD=/home/u`` is the working folder).
_GLUED = (
    r"password|passwd|passphrase|secret|token|api[_\-]?key|access[_\-]?key|secret[_\-]?key|private[_\-]?key|"
    r"account[_\-]?key|sharedaccess(?:key|signature)|secret[_\-]?key[_\-]?base"
)
_NAME = (
    rf"(?:(?i:[A-Za-z0-9_\-.]{{0,40}}(?:{_GLUED})|(?:[A-Za-z0-9_\-.]{{0,40}}[_\-.])?(?:pass|auth|sig|signature)|"
    r"[A-Za-z0-9_\-.]{0,40}[_\-.]pwd|(?<=[?&;])pwd)|[A-Z0-9_]{0,40}_KEY)"
)
_VALUE_END = r"\s&;#\"'`,()<>\[\]{}"  # what ends an unquoted value: a space, the next parameter, code around it
_NOT_A_TYPE = r"(?:str|int|bool|bytes|None|Optional|Any|list|dict|string|number|boolean)\b"
_AUTH_HEADERS = (
    r"(?:proxy-)?authorization|x-api-key|api-key|x-auth-token|x-access-token|private-token|x-gitlab-token|"
    r"x-vault-token|x-goog-api-key|x-functions-key|ocp-apim-subscription-key|x-amz-security-token"
)

BUILTIN_PATTERNS: Mapping[str, str] = {
    # a whole block, or its start without its END line (a key cut short, ``head -n 5 id_rsa``): the header lines
    # and the base64 body that follow
    "private_key": (
        r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:(?:[ \t]*(?:\r?\n|\\n)[ \t]*|[ \t]+)"
        r"(?:[A-Za-z][A-Za-z0-9\-]{0,40}: [^\r\n]{0,300}|[A-Za-z0-9+/=]{1,2000})?)*"
        r"(?:-----END[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
    ),
    "anthropic_key": r"\bsk-ant-[A-Za-z0-9_\-]{20,}",
    "openai_key": r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})",
    "gitlab_token": r"\bgl(?:pat|ptt|dt|rt)-[A-Za-z0-9_\-]{20,}",
    "npm_token": r"\bnpm_[A-Za-z0-9]{36,}",
    "huggingface_token": r"\bhf_[A-Za-z0-9]{30,}",
    "aws_access_key_id": r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    "aws_secret_access_key": r"(?i:aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{40}\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    # webhook URLs, found through their ``://`` like a URL with a password
    "slack_webhook": r"\bhttps?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{10,}",
    "discord_webhook": (
        r"\bhttps?://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{5,}/[A-Za-z0-9_\-]{20,}"
    ),
    "google_api_key": r"\bAIza[0-9A-Za-z_\-]{35}\b",
    "stripe_key": r"\b(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[0-9A-Za-z]{24,})",
    "jwt": r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    # an auth header's value, its scheme (Bearer, Basic, Token...) with it; the header's name stays readable
    "auth_header": (
        rf"(?<![A-Za-z0-9_\-.])(?i:{_AUTH_HEADERS})[\"']?[ \t]*[:=][ \t]*[\"']?(?:[A-Za-z0-9\-]{{1,30}}[ \t]+)?"
        r"[^\s\"'`,;<>]{6,}"
    ),
    "bearer": r"(?i:\bbearer)\s+[A-Za-z0-9\-._~+/]{16,}=*",
    # scheme://user:password@host: the password goes, the rest stays readable; the LAST '@' before the host ends
    # the password (as drivers read ``app:p@ss@db``)
    "url_password": r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@]{0,200}:[^\s/?#]{1,200}@",
    # NAME=value, NAME: "value", "name": "value", name: value at a line's end; the name stays readable
    "assigned_secret": (
        rf"(?<![A-Za-z0-9_\-.]){_NAME}(?:[\"']?[ \t]*[:=][ \t]*(?:\"(?![$*])[^\"\r\n]{{2,500}}\"|'(?![$*])"
        rf"[^'\r\n]{{2,500}}')|=(?![$*])[^{_VALUE_END}]{{3,500}}+(?![(\[])|:[ \t]+(?![$*]|{_NOT_A_TYPE})"
        rf"[^\s\"'#,]{{3,200}}+(?=[ \t]*(?:\r?\n|\Z)))"
    ),
    # a secret after its name and a space: ``.netrc``'s ``password X`` (alone on its line or in a
    # ``machine h login u password X`` line), an option ``--password X`` / ``--token X`` of any program
    "spaced_secret": (
        r"(?:(?<![^\s])(?i:password|passwd)[ \t]+(?![$-])[^\s]{3,200}+(?=[ \t]*(?:\r?\n|\Z)|[ \t]+"
        r"(?:machine|login|account|macdef|default)\b)|(?<![^\s])--?(?i:[a-z0-9\-]{0,30}(?:password|passwd|"
        r"passphrase|token|secret|api-?key))[ \t]+(?![$\-])[^\s;&|]{3,200}+)"
    ),
    # XML's ``<password>X</password>`` (Maven's settings.xml, .NET configs)
    "xml_secret": (
        r"(?<=<)(?i:[a-z0-9_\-.]{0,40}(?:password|passwd|passphrase|secret|token|api[_\-]?key))>[^<\s]{3,500}+(?=</)"
    ),
}
# Where a built-in match can be: every one holds one of these literals (case ignored) and starts at it (a key
# block four dashes before its ``-BEGIN``), at the start of the name it stands in (at most NAME_BEFORE characters
# back) or, for a URL, at most SCHEME_BEFORE characters before its ``://``. A new built-in pattern adds its literal
# here (tests/test_redact.py checks every pattern is found through them). In a long text, those whose first
# character is rare are found by one regular expression (it skips ahead by first characters), the words that start
# with common letters by ``str.find`` each (rejected: all in the one expression, whose first characters then cover
# most letters: the scan took twice as long); a short text (SHORT) is scanned once for all of them.
TRIGGERS = (
    "-BEGIN", "sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "glptt-",
    "gldt-", "glrt-", "AKIA", "ASIA", "ABIA", "ACCA", "aws_secret_access_key", "xox", "AIza", "bearer", "auth",
    "secret", "sig", "://",
)  # fmt: skip
FOUND_TRIGGERS = (
    "pass", "pwd", "token", "key", "npm_", "hf_", "whsec_", "eyJ",
)  # fmt: skip
_KEY_DASHES = 4  # a key's ``-----BEGIN`` starts this many characters before its trigger ``-BEGIN``
SHORT = 2048  # up to this many characters, every literal is found by one regular expression
SCHEME_BEFORE = 21
NAME_BEFORE = 64  # the longest name a named pattern takes (``_NAME``: 40 + a separator + 21) fits
# The parts of a match that stay readable: a header's or a variable's name, up to its value.
_KEEP_NAME = frozenset({"auth_header", "assigned_secret"})
# A password on the command line of a program known to take one after a short option: ``sshpass -p X``,
# ``redis-cli -a X``, ``docker login -p X``, ``curl -u user:X``, ``mysql -pX`` (``mysql -p X`` asks and X is the
# database). A pass of its own, run only when one of the programs is named (``in``, in C): as triggers of the
# built-in scan their common first letters cost every text (rejected: 4 KB redacted 1.6 times slower).
COMMAND_PASSWORD = (
    r"\b(?:sshpass[ \t]+-p[ \t]*|redis-cli(?:[ \t]+[^\s;|&]{1,200}){0,12}?[ \t]+-a[ \t]+|docker[ \t]+login"
    r"(?:[ \t]+[^\s;|&]{1,200}){0,12}?[ \t]+-p[ \t]*|curl(?:[ \t]+[^\s;|&]{1,200}){0,20}?[ \t]+(?:-u|--user)"
    r"[ \t]*[^\s:]{1,100}:|mysql(?:dump|admin)?(?:[ \t]+[^\s;|&]{1,200}){0,12}?[ \t]+-p(?=[^\s]))"
    r"(?![$\-])[^\s;&|]{2,200}+"
)
_PROGRAMS = ("sshpass", "redis-cli", "docker", "curl", "mysql")
_COMMAND = re.compile(COMMAND_PASSWORD)
_LAST_VALUE = re.compile(r"[^\s;&|]*\Z")
_KEEP_BEFORE_VALUE = {"spaced_secret": re.compile(r"\S+[ \t]+"), "xml_secret": re.compile(r"[^>]*>")}
_NAME_PART = re.compile(r"[^:=]*[:=][ \t]*[\"']?")


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
        # The values and their encoded forms (``encoded_forms``), longest first so a value is redacted whole.
        self._secrets = sorted(
            {form for v in values if len(v) >= MIN_VALUE_LENGTH for form in encoded_forms(v)}, key=len, reverse=True
        )
        # The wrapped forms (``wrapped_forms``), searched in the text with its line breaks taken out.
        self._wrapped = sorted(
            {form for v in values if len(v) >= MIN_VALUE_LENGTH for form in wrapped_forms(v)}, key=len, reverse=True
        )
        self._user = re.compile("|".join(f"(?P<{n}>{p})" for n, p in named.items())) if named else None
        # A secret that may hold a space (a user pattern, a variable's value with one): text streamed to people is
        # then let out a whole line at a time, not a word at a time (core.progress.LineHold).
        self.spans_words = bool(named) or any(any(c.isspace() for c in v) for v in self._secrets)

    def text(self, value: str) -> str:
        value = self._builtins(value)
        if any(program in value for program in _PROGRAMS):
            value = _COMMAND.sub(command_password_mark, value)
        if self._secrets:
            value = self._values(value)
        if self._user is not None:
            value = self._user.sub(self._replace, value)
        return value

    def _values(self, value: str) -> str:
        # ``in`` for each form first (a fast substring search), then one expression of the forms present, usually
        # none (rejected: one expression of every form over the whole text: with its encoded forms, 50 literals
        # whose first characters cover most letters, five times slower on 1 MB).
        present = [form for form in self._secrets if form in value]
        if present:
            value = re.compile("|".join(map(re.escape, present))).sub("[REDACTED:credential_value]", value)
        if "\n" not in value:
            return value
        # A wrapped encoding (``base64`` at 76 columns, ``xxd -p`` at 60): the forms are looked for in the text
        # without its line breaks (one copy, ``in`` each); only one found there is then matched with a line break
        # allowed between any two of its characters (each optional, no ambiguity: linear). Rejected: hunting each
        # line-sized piece of every form, many more literals for every text.
        joined = value.replace("\r", "").replace("\n", "")
        wrapped = [form for form in self._wrapped if form in joined]
        if not wrapped:
            return value
        spread = "|".join("(?:\r?\n)?".join(map(re.escape, form)) for form in wrapped)
        return re.compile(spread).sub("[REDACTED:credential_value]", value)

    def _builtins(self, value: str) -> str:
        # Case is ignored by searching an ASCII-lowercased copy (same length, same positions; ``str.lower`` when the
        # text is ASCII, which is faster): a case-insensitive regular expression of the literals costs 30 times more
        # here, as its first characters no longer skip ahead.
        lower = value.lower() if value.isascii() else value.translate(_ASCII_LOWER)
        if len(value) <= SHORT:  # one scan of every literal: what costs least on the many short strings of a record
            hits = [(hit.start(), hit.group(0)) for hit in _EVERY_TRIGGER.finditer(lower)]
        else:
            hits = [(hit.start(), hit.group(0)) for hit in _TRIGGER.finditer(lower)]
            found = len(hits)
            for word in _FOUND:
                at = lower.find(word)
                while at != -1:
                    hits.append((at, word))
                    at = lower.find(word, at + 1)
            if len(hits) != found:
                hits.sort()
        if not hits:
            return value
        pieces: list[str] = []
        pos = 0
        tried = -1  # the last name start tried: the other literals of one name (``DB_PASSWORD_TOKEN``) add nothing
        for at, literal in hits:
            if at < pos:
                continue
            match = None
            if literal == "://":
                match = _url_before(value, at, pos)
            else:
                # First where the name holding the literal starts (``DB_PASSWORD=``, ``x-api-key:``; a name may
                # start before an earlier literal: ``MY_AWS_SECRET_ACCESS_KEY=``), then at the literal (``sk-``).
                start = _name_start(value, at, pos)
                if literal in _NAME_WORDS and start is not None and not _may_be_named(value, lower, start, at):
                    continue
                if start is not None and start != tried:
                    tried = start
                    match = _BUILTIN.match(value, start)
                if match is None and literal not in _NAME_WORDS and at != start:
                    # ``-begin`` is the last dash of ``-----BEGIN``: a literal ending in a dash just before
                    # (``sk-----BEGIN``) cannot hide it (the scan finds literals that do not overlap)
                    begin = at - _KEY_DASHES if literal == "-begin" else at
                    match = _BUILTIN.match(value, begin) if begin >= pos else None
            if match is not None:
                pieces += (value[pos : match.start()], self._replace(match))
                pos = match.end()
        if not pieces:
            return value
        pieces.append(value[pos:])
        return "".join(pieces)

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup or "secret"
        text = match.group(0)
        if kind == "url_password":
            scheme, _, rest = text.partition("://")
            return f"{scheme}://{rest.partition(':')[0]}:[REDACTED:password]@"
        if kind in _KEEP_BEFORE_VALUE:
            before = _KEEP_BEFORE_VALUE[kind].match(text)
            return f"{before.group(0) if before is not None else ''}[REDACTED:{kind}]"
        if kind in _KEEP_NAME:
            name = _NAME_PART.match(text)
            kept = name.group(0) if name is not None else ""
            closing = kept[-1] if kept[-1:] in ("'", '"') and text.endswith(kept[-1]) and len(text) > len(kept) else ""
            return f"{kept}[REDACTED:{kind}]{closing}"
        return f"[REDACTED:{kind}]"

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string (keys included) redacted; walked without recursion."""
        root: list[Any] = [value]
        stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while stack:
            parent, key, item = stack.pop()
            if isinstance(item, str):
                parent[key] = self.text(item)
            elif isinstance(item, dict) and _is_content_ref(item):
                parent[key] = dict(item)  # a compacted argument: the refs its rebuild reads, never a secret
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

    def record(self, body: msgspec.Struct) -> Any:
        """``body`` as plain data to persist, redacted by its structure (``records.FIELD_REDACTION``): the fields
        rollback, restore, capture and conflicts rely on (paths, hashes, refs, ids, statuses) exactly as they are,
        whatever a pattern says; every other field redacted, a record inside one by its own rules. A type without
        rules is redacted whole (never less than before)."""
        plain = msgspec.to_builtins(body)
        rule = FIELD_REDACTION.get(type(body))
        if rule is None:
            return self.value(plain)
        journal_exact = bool(rule.journal) and _own_call(body)
        for name, item in plain.items():
            if name in rule.exact or (journal_exact and name in rule.journal):
                continue
            if name in rule.redacted or name in rule.journal:
                plain[name] = self._field(getattr(body, name), item)
        return plain  # any other key is the tag of a tagged record: the vocabulary's

    def _field(self, value: Any, plain: Any) -> Any:
        if isinstance(value, msgspec.Struct):
            return self.record(value)
        if isinstance(value, list | tuple) and any(isinstance(item, msgspec.Struct) for item in value):
            return [
                self.record(item) if isinstance(item, msgspec.Struct) else self.value(copy)
                for item, copy in zip(value, plain, strict=True)
            ]
        return self.value(plain)

    def __contains__(self, text: str) -> bool:
        return self.text(text) != text


def command_password_mark(match: re.Match[str]) -> str:
    """The program's command line up to the password (already redacted by the built-in patterns), then the mark."""
    text = match.group(0)
    value = _LAST_VALUE.search(text)
    cut = value.start() if value is not None else 0
    if text.startswith("-", cut):  # ``-pX``: the option glued to its value (a value never starts with -)
        cut += 2
    elif text.startswith("curl"):  # ``user:pass``: the password is all after the user's first colon
        cut = text.index(":", cut) + 1
    return f"{text[:cut]}[REDACTED:password]"


def _own_call(body: msgspec.Struct) -> bool:
    """One of safepoint's own calls (a rollback, a resolution): its input is a journal of paths, hashes and refs
    that a re-run after a crash carries out. A model's call cannot take the id (``resume.model_call_id``)."""
    return (
        isinstance(body, ToolLedgerEntry)
        and body.tool_name in INTERNAL_TOOLS
        and body.call_id.startswith(INTERNAL_PREFIX)
    )


_REF = re.compile(r"(?:blob:)?sha256:[0-9a-f]{64}")


def _is_content_ref(item: dict[Any, Any]) -> bool:
    """``{"$patch": "blob:sha256:...", "base": "sha256:..."}``: a call's content argument kept as a patch."""
    patch, base = item.get("$patch"), item.get("base")
    return (
        len(item) == 2
        and isinstance(patch, str)
        and isinstance(base, str)
        and _REF.fullmatch(patch) is not None
        and _REF.fullmatch(base) is not None
    )


def _group_name(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"user_{cleaned}"


_BUILTIN = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in BUILTIN_PATTERNS.items()))
# The literals that are part of a name (``DB_PASSWORD``): their patterns start where the name starts, never at them.
_NAME_WORDS = frozenset({"pass", "pwd", "token", "key", "secret", "sig", "auth"})
_TRIGGER = re.compile("|".join(re.escape(t.lower()) for t in TRIGGERS))
_FOUND = tuple(t.lower() for t in FOUND_TRIGGERS)
_EVERY_TRIGGER = re.compile("|".join(re.escape(t.lower()) for t in TRIGGERS + FOUND_TRIGGERS))
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-."


# How the names of the named patterns (``assigned_secret``, ``auth_header``) end, and what follows one.
_NAME_ENDINGS = (
    "password", "passwd", "passphrase", "secret", "token", "key", "pass", "auth", "sig", "signature", "pwd",
    "authorization", "key_base", "passphrase", "api-key", "apikey",
)  # fmt: skip
_AFTER_NAME = frozenset("\"':= \t>")


def _may_be_named(value: str, lower: str, start: int, at: int) -> bool:
    """Can a named pattern match the name at ``start``? It ends with one of the words and a separator follows
    (``keyboard``, ``tokens``, ``passed``, ``author`` are no names of secrets): checked here in a few C calls,
    as most literals of ordinary text (``key``, ``pass``, ``token``) stand in such words."""
    ahead = value[at : at + NAME_BEFORE]
    end = at + len(ahead) - len(ahead.lstrip(_NAME_CHARS))
    return end < len(value) and value[end] in _AFTER_NAME and lower.endswith(_NAME_ENDINGS, start, end)


def _name_start(value: str, at: int, floor: int) -> int | None:
    """Where the name holding the literal at ``at`` starts; None when it is longer than any name a pattern takes
    (found in C by ``rstrip``, not a character at a time)."""
    low = max(floor, at - NAME_BEFORE)
    start = low + len(value[low:at].rstrip(_NAME_CHARS))
    if start == low and low > floor and value[low - 1] in _NAME_CHARS:
        return None
    return start


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_URL_KINDS = ("slack_webhook", "discord_webhook", "url_password")  # in BUILTIN_PATTERNS' order
_URL = re.compile("|".join(f"(?P<{name}>{BUILTIN_PATTERNS[name]})" for name in _URL_KINDS))
_SCHEME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _url_before(value: str, at: int, floor: int) -> re.Match[str] | None:
    """A URL with a password (or a webhook's) whose ``://`` is at ``at``: its scheme stands just before, at most
    SCHEME_BEFORE characters back; only the starting points the pattern allows (a letter after a non-word
    character) are tried."""
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


def encoded_forms(value: str) -> list[str]:
    """``value`` and the forms a command prints it in without knowing it is a secret: reversed, hex in either case,
    percent-encoded (``quote``'s and every byte as ``%xx`` or ``%XX``), JSON-escaped (``\\"``, ``\\\\``, and
    non-ASCII as ``\\uXXXX`` or as it is) and base64 (standard and URL-safe) at each of the three alignments it can
    have inside a longer encoded text (the characters that encode its whole 3-byte groups, the same wherever it
    stands). Wrapped at a width, some are found too (``wrapped_forms``). Not caught: other encodings, compression,
    a value split across calls or changed by a character."""
    data = value.encode()
    forms = {value, value[::-1], quote(value, safe=""), *_wrappable(data), json.dumps(value)[1:-1]}
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
    for skip in range(3):
        chunk = data[skip:]
        chunk = chunk[: len(chunk) // 3 * 3]
        if len(chunk) >= 6:  # 8 characters at least: shorter is too common a string
            encoded = base64.b64encode(chunk).decode()
            forms.update((encoded, encoded.replace("+", "-").replace("/", "_")))
    return [form for form in forms if len(form) >= MIN_VALUE_LENGTH]


def wrapped_forms(value: str) -> list[str]:
    """The forms of ``value`` that tools print wrapped at a fixed width (``base64`` at 76 columns, ``xxd -p`` at 60,
    ``xxd -p -u``): hunted also with line breaks between their characters. Not the URL-safe base64 nor the
    percent-encoding, which tools print on one line (each form here is one more search of every text with lines)."""
    data = value.encode()
    hexed = data.hex()
    forms = {hexed, hexed.upper()}
    for skip in range(3):
        chunk = data[skip:]
        chunk = chunk[: len(chunk) // 3 * 3]
        if len(chunk) >= 6:
            forms.add(base64.b64encode(chunk).decode())
    return [form for form in forms if len(form) >= MIN_VALUE_LENGTH]


def _wrappable(data: bytes) -> tuple[str, ...]:
    """Hex in both cases (``xxd -p -u``, ``.hex().upper()``) and every byte percent-encoded, in both cases."""
    hexed = data.hex()
    return (
        hexed,
        hexed.upper(),
        "".join(f"%{hexed[i : i + 2]}" for i in range(0, len(hexed), 2)),
        "".join(f"%{hexed[i : i + 2]}" for i in range(0, len(hexed), 2)).upper(),
    )
