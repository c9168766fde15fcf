"""A store's read that failed: said as one ``StoreError`` naming the run and the fix, except a full disk."""

from __future__ import annotations

from safepoint.errors import StoreError, is_disk_full


def unreadable(run_id: str, exc: OSError) -> Exception:
    """A read that failed for another reason than a full disk (EISDIR, EACCES: a run written under sudo, a failing
    disk) is one ``StoreError`` naming the run and the fix, so a listing shows that run ``unreadable`` and the others
    (rejected: letting the OSError through, which took down every page and command listing the store)."""
    if is_disk_full(exc):
        return exc
    where = f" ({exc.filename})" if exc.filename else ""
    return StoreError(
        f"run {run_id!r} cannot be read: {exc.strerror or exc}{where}; fix its permissions, or see `safepoint fsck`"
    )
