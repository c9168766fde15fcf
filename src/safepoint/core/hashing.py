"""Stable hashes of tool inputs and file contents, and the idempotency key a tool hands to an external API."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

_canonical = msgspec.json.Encoder(order="sorted")


def input_hash(args: Any) -> str:
    """SHA-256 of the input as canonical JSON (sorted keys), so equal inputs hash equal across processes."""
    return "sha256:" + hashlib.sha256(_canonical.encode(args)).hexdigest()


def content_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def idempotency_key(run_id: str, call_id: str) -> str:
    """The same key on every attempt of one call, so an external API can drop the repeat."""
    return "safepoint-" + hashlib.sha256(f"{run_id}\x00{call_id}".encode()).hexdigest()[:32]
