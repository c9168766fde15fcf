"""The issue's file shapes against the linear-time patch format (issue 10 §1, checked): a patch stays proportional
to the edit whatever the file's size and kind (60 scattered lines of a lockfile, 60 bytes of a binary file, a
reordered lockfile), and applies back to the exact bytes. Sizes only: the time per shape is ``bench/storage.py``'s."""

from __future__ import annotations

import random

import pytest

from safepoint.core.patches import apply_patch, make_patch, unified_diff

MB = 1024 * 1024


def lockfile(size: int) -> list[bytes]:
    rng = random.Random(size)
    entries, total, index = [], 0, 0
    while total < size:
        digest = rng.randbytes(32).hex()
        entry = (
            f'    "node_modules/pkg-{index}": {{\n      "version": "1.{index % 50}.{index % 7}",\n'
            f'      "integrity": "sha512-{digest}"\n    }},\n'
        ).encode()
        entries.append(entry)
        total += len(entry)
        index += 1
    return entries


def scattered(size: int) -> tuple[bytes, bytes]:
    lines = b"".join(lockfile(size)).splitlines(keepends=True)
    versions = [i for i, line in enumerate(lines) if b'"version"' in line]
    after = list(lines)
    for i in versions[:: len(versions) // 60][:60]:
        after[i] = after[i].replace(b'"1.', b'"2.', 1)
    return b"".join(lines), b"".join(after)


def binary(size: int) -> tuple[bytes, bytes]:
    before = random.Random(size).randbytes(size)
    after = bytearray(before)
    for i in range(0, size, size // 60):
        after[i] ^= 0x5A
    return before, bytes(after)


@pytest.mark.parametrize("size", [64 * 1024, 2 * MB])
@pytest.mark.parametrize("shape", [scattered, binary])
def test_a_scattered_edit_makes_a_patch_the_size_of_the_edit_at_any_file_size(shape, size):
    before, after = shape(size)
    patch = make_patch(before, after)
    assert apply_patch(before, patch) == after
    assert len(patch) < 8 * 1024, f"{len(patch)} bytes for 60 small changes of {size} bytes"


def test_a_reordered_lockfile_costs_a_fraction_of_its_size():
    entries = lockfile(2 * MB)
    before = b"".join(entries)
    random.Random(7).shuffle(entries)
    after = b"".join(entries)
    patch = make_patch(before, after)
    assert apply_patch(before, patch) == after
    assert len(patch) < len(after) // 10  # every entry moved, none changed: references to the old bytes


def test_a_diff_is_computed_only_when_shown_and_capped():
    before, after = scattered(MB + 64 * 1024)  # both versions past the 2 MB cap
    shown = unified_diff(before, after, "package-lock.json")
    assert "too large to show" in shown and shown.count("\n") == 1
    before, after = binary(64 * 1024)
    assert unified_diff(before, after, "a.bin").startswith("Binary file a.bin changed")
