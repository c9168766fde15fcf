"""File names as records hold them: any byte string round-trips, and what people and models read stays readable.

A POSIX name is bytes; Python hands undecodable bytes over as lone surrogates (``os.fsdecode``), which no UTF-8
record (JSON log, msgpack state) can hold. So every workspace-relative path a record, a capture or a tool result
holds is in *recorded form*: each ``/``-separated component that is not plain text is written the way git quotes
paths (``core.quotePath``) -- in double quotes, with ``\\"``, ``\\\\``, ``\\n``, ``\\t`` and ``\\ooo`` octal for every
byte that is not valid UTF-8 or is a control character. A component is quoted when it holds such a byte or starts
with ``"`` itself, so the recorded form is unambiguous; a path of ordinary names is recorded unchanged (old records
read the same). Quoting per component keeps ``/`` a separator: a folder's recorded form plus ``/`` is a prefix of
its files' recorded forms.

``Workspace`` turns a recorded path back into the real name (:func:`real_path`) before touching the disk.
Rejected: base64 of the bytes (unreadable in ``rollback`` output), surrogateescape strings (no record can hold them),
``\\xNN`` escapes of Python's ``backslashreplace`` (a real ``\\`` in a name would make it ambiguous).
"""

from __future__ import annotations

import os

_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"}
_UNESCAPES = {"\\": 0x5C, '"': 0x22, "n": 0x0A, "t": 0x09, "r": 0x0D, "a": 0x07, "b": 0x08, "f": 0x0C, "v": 0x0B}


def _plain(name: str) -> bool:
    if name.isascii():
        return name.isprintable() and not name.startswith('"')
    if name.startswith('"'):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False  # undecodable bytes, as surrogates
    return all(ch.isprintable() or ch == " " for ch in name)


def quote_name(name: str) -> str:
    """One path component (as ``os.listdir`` gives it) in recorded form."""
    if _plain(name):
        return name
    out = ['"']
    for ch in os.fsencode(name).decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\{code - 0xDC00:03o}")  # a byte that is not UTF-8
        elif code in _ESCAPES:
            out.append(_ESCAPES[code])
        elif code < 0x20 or code == 0x7F or (not ch.isprintable() and ch != " "):
            out.extend(f"\\{byte:03o}" for byte in ch.encode("utf-8"))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def quote_path(path: str) -> str:
    """A ``/``-separated relative path (real names) in recorded form."""
    if path.isascii() and path.isprintable() and '"' not in path:
        return path  # the usual path: nothing to look at per component
    return "/".join(quote_name(part) for part in path.split("/"))


def _unquote_name(name: str) -> str:
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    raw = bytearray()
    body = name[1:-1]
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            raw += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _UNESCAPES:
            raw.append(_UNESCAPES[nxt])
            i += 2
        elif len(body) >= i + 4 and all(c in "01234567" for c in body[i + 1 : i + 4]):
            raw.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            return name  # not a quoted form after all: a name that merely looks like one
    return os.fsdecode(bytes(raw))


def real_path(path: str) -> str:
    """The real path (names as the OS takes them) of a path in recorded form; a plain path is returned as it is."""
    if '"' not in path:
        return path
    return "/".join(_unquote_name(part) for part in path.split("/"))


def shown(path: str) -> str:
    """A real path as a person or a model reads it (its recorded form)."""
    return quote_path(path)
