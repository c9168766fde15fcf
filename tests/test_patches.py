"""core.patches: file patches reproduce content exactly, stay small for small edits of large or binary files, fail
loudly on the wrong base or damage; unified diffs for people stay exact on the lines they show."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safepoint.core.patches import DIFF_CAP_BYTES, apply_patch, make_patch, unified_diff
from safepoint.errors import CorruptRecordError

text_lines = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=30)


@given(text_lines, text_lines, st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
def test_patches_reproduce_text_exactly(old, new, newline, final_newline):
    before = newline.join(old).encode()
    after = (newline.join(new) + (newline if final_newline else "")).encode()
    assert apply_patch(before, make_patch(before, after)) == after


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_patches_reproduce_binary_exactly(before, after):
    assert apply_patch(before, make_patch(before, after)) == after


@st.composite
def edited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A base and a version of it with random inserts, deletes and replacements (the shape of real edits)."""
    base = draw(st.binary(min_size=0, max_size=5000))
    out = bytearray(base)
    for _ in range(draw(st.integers(0, 8))):
        at = draw(st.integers(0, len(out)))
        cut = draw(st.integers(0, min(50, len(out) - at)))
        out[at : at + cut] = draw(st.binary(max_size=60))
    return base, bytes(out)


@given(edited())
def test_patches_reproduce_edited_content_exactly(pair):
    before, after = pair
    assert apply_patch(before, make_patch(before, after)) == after


def _lockfile(bumped: set[int]) -> bytes:
    rng = random.Random(7)
    packages = {}
    for i in range(1500):
        version = f"1.{i % 7}.{i % 13}" + ("-1" if i in bumped else "")
        packages[f"node_modules/pkg-{i}"] = {
            "version": version,
            "resolved": f"https://registry.example/pkg-{i}/-/pkg-{i}-{version}.tgz",
            "integrity": f"sha512-{rng.getrandbits(256):064x}",
        }
    return json.dumps({"name": "app", "lockfileVersion": 3, "packages": packages}, indent=2).encode()


def test_a_lockfile_with_scattered_version_bumps_makes_a_small_patch():
    before = _lockfile(set())
    after = _lockfile(set(random.Random(1).sample(range(1500), 60)))
    patch = make_patch(before, after)
    assert apply_patch(before, patch) == after
    assert len(patch) < len(after) // 20  # the old content is the dictionary: only the bumps cost bytes


def test_a_reordered_file_costs_far_less_than_a_copy():
    lines = _lockfile(set()).split(b"\n")
    shuffled = b"\n".join(random.Random(3).sample(lines, len(lines)))
    patch = make_patch(b"\n".join(lines), shuffled)
    assert apply_patch(b"\n".join(lines), patch) == shuffled
    assert len(patch) < len(shuffled) // 5


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_one_line_edit_of_a_large_file_makes_a_tiny_patch(where):
    before = b"".join(b"line %d of a generated file\n" % i for i in range(100_000))  # 2.8 MB
    at = {"start": 0, "middle": len(before) // 2, "end": len(before)}[where]
    after = before[:at] + b"an inserted line\n" + before[at:]
    patch = make_patch(before, after)
    assert apply_patch(before, patch) == after
    assert len(patch) < 100


def test_a_small_edit_of_binary_content_is_not_stored_whole():
    rng = random.Random(5)
    before = bytes(rng.getrandbits(8) for _ in range(50_000))
    after = before[:20_000] + b"\x00\x01\x02" + before[20_003:30_000] + before[30_010:]
    patch = make_patch(before, after)
    assert apply_patch(before, patch) == after
    assert len(patch) < 200


def test_a_patch_applied_to_other_content_or_damaged_fails_loudly():
    before, after = b"alpha\nbeta\n" * 50, b"alpha\ngamma\n" * 50
    patch = make_patch(before, after)
    with pytest.raises(CorruptRecordError, match="made for"):
        apply_patch(before + b"x", patch)
    with pytest.raises(CorruptRecordError, match="format"):
        apply_patch(before, b"{" + patch[1:])
    with pytest.raises(CorruptRecordError):
        apply_patch(before, patch[:-5])
    with pytest.raises(CorruptRecordError):
        apply_patch(before, patch[:10])


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _check_hunks(before: str, after: str, diff: str) -> None:
    """Every hunk's old side is exactly the old file's lines at the stated place, its new side the new file's;
    applying the hunks at their stated places gives the new file."""
    old_lines = before.split("\n")
    new_lines = after.split("\n")
    body = diff.split("\n")[2:]
    i = 0
    rebuilt: list[str] = []
    taken = 0
    while i < len(body) and body[i]:
        match = _HUNK.match(body[i])
        assert match, body[i]
        o_start, o_count = int(match.group(1)), int(match.group(2) or 1)
        n_start, n_count = int(match.group(3)), int(match.group(4) or 1)
        i += 1
        old_side: list[str] = []
        new_side: list[str] = []
        while i < len(body) and body[i] and body[i][0] in " -+\\":
            line = body[i]
            if line[0] in " -":
                old_side.append(line[1:])
            if line[0] in " +":
                new_side.append(line[1:])
            i += 1
        first_old = o_start - 1 if o_count else o_start
        first_new = n_start - 1 if n_count else n_start
        assert old_lines[first_old : first_old + o_count] == old_side
        assert new_lines[first_new : first_new + n_count] == new_side
        rebuilt += old_lines[taken:first_old] + new_side
        taken = first_old + o_count
    rebuilt += old_lines[taken:]
    assert rebuilt == new_lines


@given(text_lines, text_lines)
def test_unified_diffs_state_the_right_lines(old, new):
    old = [line.replace("\n", "").replace("\0", "") for line in old]
    new = [line.replace("\n", "").replace("\0", "") for line in new]
    before, after = "\n".join(old) + "\n", "\n".join(new) + "\n"
    diff = unified_diff(before.encode(), after.encode(), "f.txt")
    if before == after:
        assert diff == ""
        return
    assert diff.startswith("--- a/f.txt\n+++ b/f.txt\n")
    _check_hunks(before, after, diff)


def test_a_unified_diff_of_a_large_file_shows_the_edit_at_its_real_line():
    before = "".join(f"line {i}\n" for i in range(50_000))
    after = before.replace("line 31000\n", "line 31000 edited\n")
    diff = unified_diff(before.encode(), after.encode(), "big.txt")
    assert "@@ -30998,7 +30998,7 @@" in diff
    assert "-line 31000\n+line 31000 edited\n" in diff
    _check_hunks(before, after, diff)


def test_unified_diffs_name_binary_and_summarise_oversized_files():
    assert unified_diff(b"\x00a", b"\x00b", "x.bin").startswith("Binary file x.bin changed")
    big = b"a\n" * (DIFF_CAP_BYTES // 2 + 1)
    assert "too large to show" in unified_diff(big, big + b"b\n", "huge.txt")
