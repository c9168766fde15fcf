"""Pick a backend by URL: a path or ``file:PATH`` (the default), ``postgresql://...``."""

from __future__ import annotations

import os

from safepoint.errors import StoreURLError
from safepoint.store.base import Store

DEFAULT_STORE_DIR = ".agent-runtime"


def default_store_url(workspace: str) -> str:
    return "file:" + os.path.join(os.path.abspath(workspace), DEFAULT_STORE_DIR)


def open_store(url: str) -> Store:
    """Open the store named by ``url``; a bare path means the file store."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from safepoint.store.postgres import PostgresStore
        except ImportError as exc:
            raise StoreURLError(
                f"store URL {url.split('://', 1)[0]}://...: the PostgreSQL backend needs psycopg ({exc.name} is "
                "missing); install it with `pip install 'safepoint[postgres]'`"
            ) from None
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
    from safepoint.store.files import FileStore

    return FileStore(os.path.expanduser(path))
