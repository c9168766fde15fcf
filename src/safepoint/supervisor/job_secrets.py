"""A scheduled job keeps no secret: what it needs is taken from the environment when it fires.

A job is stored for as long as it exists and listed by ``schedule list``; the run it fires is redacted, the job
itself must be too, yet firing needs the real text. So, when a job is stored:

- a secret in its task (a token, a key, a URL's password: what the redactor finds) is replaced by a placeholder
  ``${SAFEPOINT_JOB_<ID>_SECRET_<n>}``, and its base URL's password by the name ``SAFEPOINT_JOB_<ID>_PASSWORD``;
  the names are kept in the job (``secret_env``) and said to the user, who sets them where the daemon runs;
- when the job fires, only those placeholders are filled in from the environment (a task's own ``${HOME}`` is left
  alone); one that is not set stops the occurrence in one line naming it.

Rejected: refusing the job (the user would retype it with a placeholder of their own: the same, by hand), and
keeping the secret encrypted (the key would have to sit beside the store the daemon reads anyway).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from safepoint.core.environment import credential_values
from safepoint.core.redact import Redactor
from safepoint.errors import ConfigError

_MARK = re.compile(r"\[REDACTED:[A-Za-z0-9_]+\]")


def prefix(job_id: str) -> str:
    return "SAFEPOINT_JOB_" + re.sub(r"[^A-Z0-9]", "_", job_id.upper())


def _secrets_in(text: str, redactor: Redactor) -> list[tuple[int, int]] | None:
    """The spans of ``text`` the redactor would hide, or None when they cannot be told apart exactly."""
    redacted = redactor.text(text)
    if redacted == text:
        return []
    pieces = _MARK.split(redacted)
    spans: list[tuple[int, int]] = []
    if not text.startswith(pieces[0]):
        return None
    pos = len(pieces[0])
    for index, piece in enumerate(pieces[1:], start=1):
        last = index == len(pieces) - 1
        end = len(text) - len(piece) if last else text.find(piece, pos + 1) if piece else -1
        if end < pos or (last and not text.endswith(piece)):
            return None
        spans.append((pos, end))
        pos = end + len(piece)
    return spans


def strip_task(
    job_id: str, task: str, environ: Mapping[str, str], redactor: Redactor | None = None
) -> tuple[str, list[str]]:
    """``task`` with each secret replaced by its placeholder, and the placeholders' variable names. ``redactor``:
    the workspace's (its own patterns too), so what the job keeps is what a run of it would keep."""
    redactor = redactor or Redactor(values=credential_values(environ))
    spans = _secrets_in(task, redactor)
    if spans is None:
        raise ConfigError(
            f"job {job_id}: its task holds a secret, which a job does not keep: put it in an environment variable "
            f"the daemon has, {prefix(job_id)}_SECRET_1, and write ${{{prefix(job_id)}_SECRET_1}} in the task"
        )
    names: list[str] = []
    pieces: list[str] = []
    pos = 0
    for start, end in spans:
        names.append(f"{prefix(job_id)}_SECRET_{len(names) + 1}")
        pieces += (task[pos:start], "${" + names[-1] + "}")
        pos = end
    pieces.append(task[pos:])
    return "".join(pieces), names


def split_url(url: str) -> tuple[str, str, str] | None:
    """``(before the password, the password, from its '@' on)`` of a URL that holds one, else None."""
    scheme, sep, rest = url.partition("://")
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, _ = rest[:end].rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return None
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:", userinfo.partition(":")[2], rest[len(userinfo) :]


def strip_url(job_id: str, url: str | None) -> tuple[str | None, str | None]:
    """``(the URL without its password, the variable its password is taken from at fire time)``."""
    parts = split_url(url or "")
    if url is None or parts is None:
        return url, None
    before, _, after = parts
    return before.removesuffix(":") + after, f"{prefix(job_id)}_PASSWORD"


def filled(text: str, names: list[str] | tuple[str, ...], environ: Mapping[str, str], job_id: str) -> str:
    for name in names:
        if "${" + name + "}" not in text:
            continue
        value = environ.get(name)
        if not value:
            raise ConfigError(
                f"job {job_id}: its task needs {name} (the secret it held is not kept in the store); set it where "
                "the daemon runs"
            )
        text = text.replace("${" + name + "}", value)
    return text


def filled_url(url: str, name: str, environ: Mapping[str, str], job_id: str) -> str:
    value = environ.get(name)
    if not value:
        raise ConfigError(
            f"job {job_id}: its model server's password is not kept in the store; set {name} where the daemon runs"
        )
    scheme, sep, rest = url.partition("://")
    user, at, host = rest.partition("@")
    if not sep or not at:
        return url
    from urllib.parse import quote

    return f"{scheme}://{user}:{quote(value, safe='')}@{host}"


def job_without_secrets(
    job_id: str,
    task: str | None,
    provider: dict[str, Any] | None,
    environ: Mapping[str, str],
    redactor: Redactor | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The fields of a job to change so it holds no secret, and the variables it then needs."""
    changes: dict[str, Any] = {}
    names: list[str] = []
    if task:
        new_task, found = strip_task(job_id, task, environ, redactor)
        if found:
            changes["task"], names = new_task, found
    if provider and provider.get("base_url"):
        url, password = strip_url(job_id, str(provider["base_url"]))
        if password is not None:
            changes["provider"] = {**provider, "base_url": url, "base_url_password_env": password}
            names.append(password)
    return changes, names


def job_with_secrets(
    job_id: str, task: str | None, provider: dict[str, Any] | None, names: tuple[str, ...], environ: Mapping[str, str]
) -> tuple[str | None, dict[str, Any] | None]:
    """The task and provider a job fires with: its placeholders filled in from ``environ``."""
    if task:
        task = filled(task, names, environ, job_id)
    if provider and provider.get("base_url_password_env"):
        provider = dict(provider)
        name = str(provider.pop("base_url_password_env"))
        provider["base_url"] = filled_url(str(provider["base_url"]), name, environ, job_id)
    return task, provider
