"""The environment an agent's commands get: the user's, minus every variable that holds a credential.

A variable is a credential by its name (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``*PASSWORD*``, ``*_PASS``, ``*JWT*``,
``*CREDS*``, ``*WRITEKEY*``, ``*_HEADERS`` such as ``OTEL_EXPORTER_OTLP_HEADERS`` and the like) or by
its value (a URL with a password in it, such as a database URL, or a password given as a parameter: ``?password=``,
a DSN's ``password=``, a connection string's ``AccountKey=``). The user passes one back by name
(``--pass-env NAME``); safepoint's own store URL never goes, whatever is passed. The same names give the redactor
the values to hunt for in what is persisted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# safepoint's own: the store URL and the store's key; never handed to an agent's command
STORE_VARIABLES = frozenset({"SAFEPOINT_STORE", "SAFEPOINT_KEY", "SAFEPOINT_KEY_FILE"})

_WORDS = frozenset(
    {
        "PASSWORD", "PASSWD", "PASSPHRASE", "PASS", "SECRET", "SECRETS", "TOKEN", "APIKEY", "CREDENTIAL",
        "CREDENTIALS",
    }
)  # fmt: skip
_ENDINGS = (
    "_API_KEY", "_ACCESS_KEY", "_SECRET_KEY", "_PRIVATE_KEY", "_KEY", "_PAT", "_AUTH", "_PWD", "APIKEY",
)  # fmt: skip
# Words that make a credential's name wherever they stand (``GITLAB_JWT_V2``, ``GCPCREDS``, ``SEGMENTWRITEKEY``):
# no ordinary variable holds them.
_INSIDE = ("PASSWORD", "JWT", "CREDS", "WRITEKEY")
# Header variables (``OTEL_EXPORTER_OTLP_HEADERS=x-honeycomb-team=KEY``, ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``):
# an exporter's auth header rides in them. Each ``name=value`` pair's value is hunted too.
_HEADER_ENDING = "_HEADERS"
# Bounded runs, so the search stays linear: with unbounded ``*`` a 120 KB value without "://" took quadratic time
# (minutes) on every run, since each start position re-scanned the rest of the value.
# The password ends at the LAST '@' before the host: ``app:p@ss@db`` is the password ``p@ss``.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/?#@]{0,256}:[^\s/?#]{1,256}@")
# A password or token given as a parameter: a URL's query (``?password=``, ``&sslpassword=``, ``?token=``), a libpq
# DSN (``host=db password=...``) or a connection string (``Password=...;``, ``AccountKey=...``). Bounded runs, as above.
_PARAMETER_SECRET = re.compile(
    r"(?:^|[?&;\s])(?i:[a-z_]{0,20}(?:password|passwd|pwd|pass|token|secret|api_?key|accountkey|sharedaccesskey"
    r"|sharedaccesssignature|sig))=([^\s&;#]{1,256})"
)
# Names that match the rules but hold no secret, and that commands need.
_NOT_SECRET = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "XAUTHORITY", "GPG_KEY", "TOKENIZERS_PARALLELISM"})


def is_credential(name: str, value: str = "") -> bool:
    """By name (a word such as TOKEN or SECRET, an ending such as _API_KEY; PGPASSWORD-like names too) or by a
    URL with a password in the value. ``TOKENIZERS_PARALLELISM`` and ``PWD`` are not credentials."""
    upper = name.upper()
    if upper in _NOT_SECRET:
        return False
    words = set(upper.split("_"))
    return (
        name in STORE_VARIABLES
        or bool(words & _WORDS)
        or upper.endswith(_ENDINGS)
        or any(word in upper for word in _INSIDE)
        or upper.endswith(_HEADER_ENDING)
        or bool(_URL_PASSWORD.search(value))
        or bool(_PARAMETER_SECRET.search(value))
    )


def command_environment(
    environ: Mapping[str, str], *, pass_env: Iterable[str] = (), withhold: Iterable[str] = ()
) -> dict[str, str]:
    """``environ`` less its credentials and the names in ``withhold`` (a provider's key variable), except those
    passed by name; the store's variables are withheld whatever is passed."""
    passed = set(pass_env) - STORE_VARIABLES
    held = set(withhold) | STORE_VARIABLES
    return {
        name: value
        for name, value in environ.items()
        if name in passed or (name not in held and not is_credential(name, value))
    }


def credential_values(environ: Mapping[str, str], *, withhold: Iterable[str] = ()) -> list[str]:
    """The values a redactor hunts for: those of every credential variable (passed or not: a command that was
    given one may still print it)."""
    held = set(withhold) | STORE_VARIABLES
    values = []
    for name, value in environ.items():
        if not value:
            continue
        if name in held or is_credential(name, value):
            values.append(value)
            match = _URL_PASSWORD.search(value)
            if match:  # the password alone may show up elsewhere too
                values.append(match.group(0).split("://", 1)[1].split(":", 1)[1].removesuffix("@"))
            values.extend(found.group(1) for found in _PARAMETER_SECRET.finditer(value))
            if name.upper().endswith(_HEADER_ENDING):  # ``k1=v1,k2=v2``: each header's value alone too
                values.extend(pair.partition("=")[2].strip() for pair in value.split(","))
    return values
