"""The API's functions that open no store: judge a command line as ``run_command`` would (``classify``, with the
workspace's command rules), find the workspace a folder is in (``find_workspace``), bring a PostgreSQL schema up
to date (``migrate``). ``safepoint.api`` re-exports them; they live here so that module stays the ``Safepoint``
class and the opening of a store."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from safepoint.errors import ConfigError
from safepoint.results import Migrated
from safepoint.store.url import default_store_url

if TYPE_CHECKING:
    from safepoint.core.commands import CommandReport, CommandRules


def migrate(url: str | None = None, *, workspace: str = ".") -> Migrated:
    """Bring a PostgreSQL store's schema to this safepoint's version (a no-op when it is there already; the file
    store has none). Opening a store sets up a fresh database but never upgrades one other hosts may still use."""
    from safepoint.store.names import safe_url
    from safepoint.store.url import migrate_store

    url = url or default_store_url(os.path.abspath(workspace))
    change = migrate_store(url)
    if change is None:
        return Migrated(store=safe_url(url), migrated=False)
    return Migrated(
        store=safe_url(url),
        migrated=bool(change.applied),
        before=change.before,
        after=change.after,
        applied=list(change.applied),
    )


COMMAND_RULES_FILES = (".safepoint/commands.toml", ".safepoint/commands.json")


def command_rules(root: str, path: str | None = None) -> tuple[CommandRules, str]:
    """The rules run_command's lines are judged by: the built-in ones extended by ``path`` if given, else by the
    workspace's ``.safepoint/commands.toml`` (or ``.json``) if it has one; and where they came from."""
    from safepoint.core.commands import DEFAULT_COMMAND_RULES, rules_from_bytes

    if path is None:
        found = [os.path.join(root, name) for name in COMMAND_RULES_FILES if os.path.isfile(os.path.join(root, name))]
        if not found:
            return DEFAULT_COMMAND_RULES, "built-in"
        path = found[0]
    shown = os.path.relpath(path, root) if os.path.abspath(path).startswith(root + os.sep) else path
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"command rules {shown}: cannot read it ({exc.strerror}); give a TOML or JSON file") from None
    return rules_from_bytes(data, f"command rules {shown}", json_format=path.endswith(".json")), shown


def classify(command: str, *, workspace: str = ".", rules: str | None = None) -> CommandReport:
    """How ``run_command`` would judge ``command`` in ``workspace``: its verdict (may a resume re-run it on its
    own?), the paths it writes (kept before it runs), and which rules judged it (``rules``: a TOML or JSON rules
    file; by default the workspace's ``.safepoint/commands.toml``, if any, extends the built-in rules). A line
    that does not parse is a verdict (it asks), not an error; a bad rules file is a ``ConfigError``."""
    import msgspec

    from safepoint.core.command_targets import write_targets
    from safepoint.core.commands import CommandReport, classify_command

    loaded, source = command_rules(os.path.abspath(workspace), rules)
    verdict = classify_command(command, loaded)
    return CommandReport(
        command=command,
        **msgspec.structs.asdict(verdict),
        write_targets=write_targets(command, loaded),
        rules=source,
    )


def find_workspace(start: str = ".") -> str | None:
    """The workspace ``start`` is in, found as git finds its repository: ``start`` or the nearest folder above it
    holding a store (``.agent-runtime``). The walk stops at a filesystem boundary and at the home folder (it is
    looked in, not above), so a store elsewhere on the machine is never picked up by accident. None: no store."""
    from safepoint.store.url import DEFAULT_STORE_DIR

    here = os.path.abspath(start)
    home = os.path.expanduser("~")
    try:
        device = os.stat(here).st_dev
    except OSError:
        return None
    while True:
        if os.path.isdir(os.path.join(here, DEFAULT_STORE_DIR)):
            return here
        parent = os.path.dirname(here)
        if parent == here or here == home:
            return None
        try:
            if os.stat(parent).st_dev != device:
                return None  # another filesystem: git stops here too (GIT_DISCOVERY_ACROSS_FILESYSTEM)
        except OSError:
            return None
        here = parent
