"""The names a store accepts and hands out: run ids, job ids, artifact file names and refs, and its URL as messages
show it. Every backend applies the same rules, so a name one accepts is never refused by another."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote

from safepoint.errors import ConfigError, CorruptRecordError, StoreError

_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def check_run_id(run_id: str) -> str:
    if not _ID.match(run_id):
        raise ConfigError(
            f"run id {run_id!r} is not valid: use 1-128 letters, digits, '_', '-' or '.', not starting with '.'"
        )
    return run_id


def check_job_id(job_id: str) -> str:
    if not _ID.match(job_id):
        raise ConfigError(
            f"job id {job_id!r} is not valid: use 1-128 letters, digits, '_', '-' or '.', not starting with '.'"
        )
    return job_id


def artifact_file(name: str, data: bytes) -> tuple[str, str]:
    """``(file name, sha256 hex)`` an artifact is stored under: the caller's name made safe, plus a digest prefix
    (same name and data: same file, so storing it twice is a no-op)."""
    digest = hashlib.sha256(data).hexdigest()
    safe = _ARTIFACT_NAME.sub("_", name)[:100] or "artifact"
    return f"{safe}.{digest[:16]}", digest


def artifact_ref(filename: str, digest: str) -> str:
    return f"artifact:{filename}:sha256:{digest}"


def parse_artifact_ref(ref: str) -> tuple[str, str]:
    """``(file name, sha256 hex)`` of an artifact ref."""
    try:
        _, filename, _, digest = ref.split(":", 3)
    except ValueError:
        raise StoreError(f"{ref!r} is not an artifact ref (artifact:NAME:sha256:HEX)") from None
    return filename, digest


def checked_artifact(run_id: str, filename: str, digest: str, data: bytes | None, where: str) -> bytes:
    """The artifact's bytes if they are there and match their digest; a missing or damaged one is an error."""
    if data is None:
        raise CorruptRecordError(f"artifact {filename} of run {run_id!r} is missing from {where}")
    if hashlib.sha256(data).hexdigest() != digest:
        raise CorruptRecordError(f"artifact {filename} of run {run_id!r} fails its checksum ({where})")
    return data


_SECRET_PARAMS = frozenset({"password", "passwd", "sslpassword", "pass", "secret", "token"})


def _authority(url: str) -> tuple[str, str, str]:
    """``(before, netloc, after)`` of a URL split by hand, as ``urlsplit`` finds the netloc (after ``://``, up to
    the first '/', '?' or '#'), but never raising: an unclosed IPv6 bracket is text here, not a ValueError."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, "", ""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return scheme + sep, rest[:end], rest[end:]


def _query_masked(text: str) -> str:
    head, mark, query = text.partition("?")
    if not mark:
        return text
    query, hash_mark, fragment = query.partition("#")
    fields = []
    for field in query.split("&"):
        name, eq, _ = field.partition("=")
        fields.append(f"{name}=***" if eq and name.lower() in _SECRET_PARAMS else field)
    return head + mark + "&".join(fields) + hash_mark + fragment


def safe_url(url: str) -> str:
    """``url`` without its password, for messages: the ``user:password@`` part and a ``?password=`` (libpq takes
    both) are masked. The one function every URL shown goes through: it never raises (a malformed URL is shown
    masked all the same; rejected: ``urlsplit``, which raised on an unclosed '[' and gave a traceback) and shows
    no piece of a password holding an '@' (everything up to the last '@' after the user's ':' is the password)."""
    before, netloc, after = _authority(str(url))
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else f"{user}@{host}"
    return before + netloc + _query_masked(after)


# In free text (a driver's error, a worker's stderr): a URL's ``user:password@`` and a ``password=value`` pair of
# a query or of a libpq conninfo string ("host=db password=x"), quoted or not. Linear: no nested quantifiers.
_TEXT_URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@'\"]{0,200}):[^\s/?#@'\"]{1,200}@")
_TEXT_PARAM = re.compile(
    r"(?i)\b(" + "|".join(sorted(_SECRET_PARAMS)) + r")(\s*=\s*)(?!\*\*\*)('(?:[^'\\]|\\.){0,400}'|[^\s&'\"\\]{1,400})"
)


def mask_passwords(text: str, url: str | None = None) -> str:
    """``text`` with every password it shows masked as ``safe_url`` masks a URL's: for messages and output that
    may quote a store URL or a connection string (rejected: masking only the URL safepoint itself formats, which
    missed psycopg's own messages quoting the conninfo). ``url``: the URL the message is about; its password is
    masked wherever it shows, alone too (libpq quotes a bad token of it: 'invalid percent-encoded token')."""
    for secret in url_secrets(url) if url else ():
        text = text.replace(secret, "***")
    text = _TEXT_URL_PASSWORD.sub(r"\1:***@", text)
    return _TEXT_PARAM.sub(r"\1\2***", text)


def url_secrets(url: str) -> list[str]:
    """The password of ``url`` and its secret query values, as written and decoded, longest first; with the pieces
    of a password holding an '@' (libpq splits at the first '@' and quotes the rest as the host: 'r3tPw@db')."""
    _, netloc, after = _authority(url)
    found: list[str] = []
    userinfo, at, _ = netloc.rpartition("@")
    if at and ":" in userinfo:
        password = userinfo.split(":", 1)[1]
        found.append(password)
        found += [piece for piece in password.split("@") if len(piece) >= 3]
    query = after.partition("?")[2].partition("#")[0]
    for field in query.split("&"):
        name, eq, value = field.partition("=")
        if eq and name.lower() in _SECRET_PARAMS:
            found.append(value)
    found += [unquote(value) for value in found]
    return sorted({value for value in found if value}, key=len, reverse=True)
