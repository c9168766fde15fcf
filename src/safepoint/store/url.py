"""Pick a backend by URL: a path or ``file:PATH`` (the default), ``postgresql://...``; with a key, or for a store
that is encrypted, the backend is wrapped in the encrypting layer (``safepoint.store.sealed``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from safepoint.errors import StoreURLError
from safepoint.store.base import Store

if TYPE_CHECKING:
    from safepoint.store.crypt import StoreKey
    from safepoint.store.postgres_schema import SchemaChange

DEFAULT_STORE_DIR = ".agent-runtime"


def default_store_url(workspace: str) -> str:
    return "file:" + os.path.join(os.path.abspath(workspace), DEFAULT_STORE_DIR)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _no_psycopg(url: str, exc: ImportError) -> StoreURLError:
    return StoreURLError(
        f"store URL {url.split('://', 1)[0]}://...: the PostgreSQL backend needs psycopg ({exc.name} is "
        "missing); install it with `pip install 'safepoint[postgres]'`"
    )


def open_store(url: str, key: StoreKey | None = None) -> Store:
    """Open the store named by ``url``; a bare path means the file store. ``key``: the store is (or, new, becomes)
    encrypted with it (``safepoint.store.crypt.load_key``). Without one, an encrypted store refuses every call in
    one line (a file store's checksums can still be checked: ``fsck``)."""
    backend = _backend(url)
    # Without a key: a PostgreSQL store refuses when it first connects (opening stays free of I/O); a file store's
    # record is one small file, looked at now.
    if key is None and (is_postgres(url) or backend.encryption_record() is None):
        if not is_postgres(url):
            from safepoint.store.crypt import check_not_orphaned

            first = backend.first_run_header()
            check_not_orphaned(None if first is None else first[1], None, safe_url_of(backend))
        return backend
    from safepoint.store.sealed import SealedStore

    return SealedStore(backend, key)


def safe_url_of(store: Store) -> str:
    shown = getattr(store, "shown", None)
    return shown if isinstance(shown, str) else store.url


def _backend(url: str) -> Store:
    if is_postgres(url):
        try:
            from safepoint.store.postgres import PostgresStore
        except ImportError as exc:
            raise _no_psycopg(url, exc) from None
        return PostgresStore(url)
    if url.startswith("file:"):
        path = url[len("file:") :]
        if path.startswith("//"):
            path = path[2:]
    elif "://" in url:
        raise StoreURLError(f"store URL {url!r} has an unknown scheme; use a path, file:PATH or postgresql://...")
    else:
        path = url
    if not path:
        raise StoreURLError("store URL names no path; use file:PATH")
    from safepoint.store.file_store import FileStore

    return FileStore(os.path.expanduser(path))


def migrate_store(url: str) -> SchemaChange | None:
    """Bring the store named by ``url`` to this safepoint's schema version (``safepoint db migrate``). None: the
    backend has no schema to migrate (the file store's layout is the seed's and carries no version)."""
    if not is_postgres(url):
        return None
    try:
        from safepoint.store.postgres import migrate
    except ImportError as exc:
        raise _no_psycopg(url, exc) from None
    return migrate(url)
