"""The names a store accepts and hands out: run ids, job ids, artifact file names and refs, and its URL as messages
show it. Every backend applies the same rules, so a name one accepts is never refused by another."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit, urlunsplit

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


def safe_url(url: str) -> str:
    """``url`` without its password, for messages: the ``user:password@`` part and a ``?password=`` (libpq takes
    both) are masked."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        parts = parts._replace(netloc=f"{user}:***@{netloc[1]}")
    if parts.query:
        fields = []
        for field in parts.query.split("&"):
            name, eq, _ = field.partition("=")
            fields.append(f"{name}=***" if eq and name.lower() in _SECRET_PARAMS else field)
        parts = parts._replace(query="&".join(fields))
    return urlunsplit(parts)
