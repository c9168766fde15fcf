"""What keeps safepoint's own git commands from running a program the agent could have configured.

An agent writes files in the workspace at will (``.gitattributes`` among them) and, when a person lets it, git's
configuration; safepoint's git commands run as the user, at every capture and when the user commits the agent's
work. So none of them may run a program a setting names: constant ``-c`` settings for the programs named by one
setting each (``SAFE_CONFIG``), and per operation the filter and diff drivers the configuration names, read once
(``GUARD_QUERY``) and emptied through the environment (:func:`driver_guard`). Pure: the caller runs the query.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["GUARD_QUERY", "SAFE_CONFIG", "Guard", "driver_guard"]

# Whatever a repository's configuration would run on its own, safepoint's git commands never run: no fsmonitor
# daemon or hook (`git status` starts it), no hooks (an index write runs post-index-change). An agent that planted
# one in .git/config would otherwise run code the moment the user looks at its changes.
# Beside them, the programs a setting names that these commands could reach: a signature check (`stash list` under
# log.showSignature), an editor, a pager, askpass, credential helpers. Commit signing (commit.gpgSign with its
# gpg.program) stays: the user asks for it, and writing either setting is held (core/command_git.py).
SAFE_CONFIG = (
    *("-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "-c", "log.showSignature=false"),
    *("-c", "core.editor=:", "-c", "sequence.editor=:", "-c", "core.pager=cat", "-c", "core.askPass="),
    *("-c", "credential.helper="),
)
# Settings that name a program git runs on a file's content, per driver that `.gitattributes` picks (the agent
# writes that file at will): clean/smudge/process filters (`git status` cleans a file whose stat changed,
# `update-index --add` cleans every file it adds), diff textconv and external drivers, merge drivers.
# An empty value turns each off (verified on git 2.39 with a planted program); an external diff then fails
# instead of running, which no command of safepoint's meets (none diffs). Rejected: GIT_CONFIG_GLOBAL=/dev/null,
# which also dropped the user's identity, excludesFile and autocrlf; git 2.39 has no switch for in-tree attributes.
_DRIVER_KEYS = r"^((filter|diff|merge)\..+\.(clean|smudge|process|textconv|command|driver|required)|diff\.external)$"
GUARD_QUERY = ("config", "-z", "--get-regexp", _DRIVER_KEYS)


class Guard(NamedTuple):
    env: dict[str, str]  # GIT_CONFIG_COUNT/KEY_n/VALUE_n turning every configured driver program off
    required: frozenset[str]  # filter drivers configured `required = true` (git-lfs): their content is not raw


def driver_guard(listed: bytes, environ: Mapping[str, str]) -> Guard:
    """The settings (from ``git config -z --get-regexp`` output, ``GUARD_QUERY``, which reads every level:
    system, global, the repository's, included files) that keep the next git commands of one operation from
    running any filter or diff driver. They go through the environment (``GIT_CONFIG_COUNT``), not ``-c``, so a
    driver name holding ``=`` cannot break them; command-line settings win over every file."""
    keys: dict[str, None] = {}
    required: set[str] = set()
    for entry in listed.split(b"\0"):
        key, _, value = os.fsdecode(entry).partition("\n")
        if not key:
            continue
        head, _, rest = key.partition(".")
        name, _, variable = rest.rpartition(".")
        truthy = value.strip().casefold() in {"true", "yes", "on", "1", ""}  # "": `required` alone is true
        if variable.casefold() == "required" and head.casefold() == "filter" and truthy:
            required.add(name)
        keys[key] = None  # a required filter emptied would fail every file it covers: made not required
    count = environ.get("GIT_CONFIG_COUNT", "")
    start = int(count) if count.isdigit() else 0  # the user's own settings of this kind stay, before these
    env: dict[str, str] = {}
    for i, key in enumerate(keys, start=start):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = "false" if key.casefold().endswith(".required") else ""
    if env:
        env["GIT_CONFIG_COUNT"] = str(start + len(keys))
    return Guard(env, frozenset(required))
