"""Values read back from PostgreSQL rows, checked for the type the store wrote (a row changed by hand, or a
driver's other type, is one line naming what was found, never a wrong value passed on)."""

from __future__ import annotations

from datetime import UTC, datetime

from safepoint.errors import StoreError


def as_iso(value: object) -> str:
    """A timestamptz as ``ownership.now()`` writes it (UTC, microseconds), so it reads back as it was stored."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    raise StoreError(f"expected a timestamp from the database, got {type(value).__name__}")


def as_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise StoreError(f"expected bytes from the database, got {type(value).__name__}")


def as_int(value: object) -> int:
    if isinstance(value, int):
        return value
    raise StoreError(f"expected an integer from the database, got {type(value).__name__}")
