"""The key of a store encrypted at rest, and the one cipher every part of the store is sealed with.

A key is 32 bytes (AES-256), given as 64 hex digits or as base64 (44 characters), in ``SAFEPOINT_KEY`` or in a key
file (``SAFEPOINT_KEY_FILE``, ``--key-file``; the file may also hold the 32 raw bytes). Its text never goes into a
message, a log or a command line: errors say where the key came from, never what it is.

Sealing is AES-256-GCM (``cryptography``'s ``AESGCM``): a 96-bit nonce, a 128-bit tag, and additional authenticated
data that names the sealed thing's place (run, part, kind, seq), so a ciphertext copied to another run or slot fails
authentication instead of decrypting. A sealed value is one ASCII line, ``sp1:`` + base64(nonce || ciphertext+tag),
so it fits wherever the store keeps a line or a JSON string. Nonces are random (``os.urandom``), except for
artifacts, whose nonce is derived from their content (``deterministic``): an artifact is content-addressed, and
storing the same one twice must give the same bytes and so the same name (the synthetic-IV construction: equal
nonces only for equal plaintext and place, which then give equal ciphertext and reveal only that equality).

The key is not used as it is: HKDF-SHA256 derives from it the cipher key, the artifact nonce key and the key id
(16 hex digits recorded by the store to recognise a wrong key before any record is read; it reveals nothing of
the key). ``cryptography`` is imported only when a key is given (``pip install 'safepoint[encryption]'``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from safepoint.errors import ConfigError, StoreKeyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_ENV = "SAFEPOINT_KEY"
KEY_FILE_ENV = "SAFEPOINT_KEY_FILE"
KEY_BYTES = 32
PREFIX = b"sp1:"  # the format of a sealed value: raise it when the format changes, never reuse it
CIPHER_NAME = "AES-256-GCM"
_NONCE = 12
_TAG = 16
_MAX_KEY_FILE = 4096  # a key file is a few dozen bytes; a big one is the wrong file


class StoreKey:
    """A store's key, with its id; ``repr`` and ``str`` show the id and where the key came from, never the key."""

    __slots__ = ("_raw", "key_id", "source")

    def __init__(self, raw: bytes, source: str) -> None:
        if len(raw) != KEY_BYTES:
            raise StoreKeyError(f"the key from {source} is {len(raw)} bytes; a store key is {KEY_BYTES} bytes")
        self._raw = raw
        self.source = source
        self.key_id = _derive(raw, b"safepoint key id v1", 8).hex()

    def __repr__(self) -> str:
        return f"StoreKey(key_id={self.key_id!r}, source={self.source!r})"

    __str__ = __repr__

    def derived(self, purpose: bytes) -> bytes:
        return _derive(self._raw, purpose, KEY_BYTES)

    def text(self) -> str:
        """The key as ``SAFEPOINT_KEY`` takes it (for a worker's environment, never for a message)."""
        return self._raw.hex()

    def texts(self) -> tuple[str, ...]:
        """Every text the key may be written as (hex, base64, URL-safe base64), whichever way it was given: the
        values a run's redactor hunts, as a command may print the key file (``cat ~/.safepoint.key``)."""
        encoded = base64.b64encode(self._raw).decode()
        return (self._raw.hex(), encoded, encoded.replace("+", "-").replace("/", "_"))


def _derive(key: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 (RFC 5869) with an empty salt, in the standard library: the key id must be computable without
    ``cryptography`` (a store says which key it wants even where the package is missing)."""
    prk = hmac.new(b"\0" * 32, key, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def parse_key(data: bytes, source: str) -> StoreKey:
    """A key from its text (64 hex digits, or base64 of 32 bytes) or, from a file, its 32 raw bytes."""
    text = data.strip()
    if len(text) == 2 * KEY_BYTES:
        try:
            return StoreKey(bytes.fromhex(text.decode("ascii")), source)
        except (UnicodeDecodeError, ValueError):
            pass
    try:
        decoded = base64.b64decode(text.replace(b"-", b"+").replace(b"_", b"/"), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) == KEY_BYTES:
        return StoreKey(decoded, source)
    if len(data) == KEY_BYTES and source.startswith("key file"):
        return StoreKey(data, source)
    raise StoreKeyError(
        f"the key from {source} is not a store key: give 32 bytes as 64 hex digits or base64 "
        "(e.g. `openssl rand -hex 32`)"
    )


def read_key_file(path: str) -> StoreKey:
    source = f"key file {path}"
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise StoreKeyError(f"cannot read {source}: {exc.strerror or exc}; give a readable key file") from None
    if len(data) > _MAX_KEY_FILE:
        raise StoreKeyError(f"{source} is over {_MAX_KEY_FILE} bytes: not a key file")
    return parse_key(data, source)


def load_key(
    *, key: bytes | str | None = None, key_file: str | None = None, environ: Mapping[str, str] | None = None
) -> StoreKey | None:
    """The key to open a store with: ``key`` or ``key_file`` when given (the library's and ``--key-file``'s), else
    ``SAFEPOINT_KEY_FILE`` or ``SAFEPOINT_KEY`` from the environment; None when there is none."""
    if key is not None and key_file is not None:
        raise ConfigError("give the store's key once: a key or a key file, not both")
    if key is not None:
        if isinstance(key, str):  # text: hex or base64, as SAFEPOINT_KEY holds it
            return parse_key(key.encode(), "the key given")
        return StoreKey(key, "the key given") if len(key) == KEY_BYTES else parse_key(key, "the key given")
    if key_file is not None:
        return read_key_file(key_file)
    env = os.environ if environ is None else environ
    in_file, inline = env.get(KEY_FILE_ENV), env.get(KEY_ENV)
    if in_file and inline:
        raise ConfigError(f"both {KEY_FILE_ENV} and {KEY_ENV} are set; keep one of them")
    if in_file:
        return read_key_file(in_file)
    if inline:
        return parse_key(inline.encode(), KEY_ENV)
    return None


def key_environment(key: StoreKey | None, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a child safepoint process that opens the store with ``key``: the key goes by the environment
    (``SAFEPOINT_KEY``; never on its command line, where ``ps`` shows it), in place of any key variable."""
    env = {name: value for name, value in environ.items() if name not in (KEY_ENV, KEY_FILE_ENV)}
    if key is not None:
        env[KEY_ENV] = key.text()
    return env


# what the store records -------------------------------------------------------------------------------------------
class Marker(msgspec.Struct, frozen=True, kw_only=True):
    """What an encrypted store records of its encryption (never the key)."""

    cipher: str
    key_id: str
    format: int = 1


_marker_decoder = msgspec.json.Decoder(Marker)


def marker_for(key: StoreKey) -> bytes:
    return msgspec.json.encode(Marker(cipher=CIPHER_NAME, key_id=key.key_id))


def read_marker(data: bytes, shown: str) -> Marker:
    try:
        return _marker_decoder.decode(data)
    except msgspec.DecodeError:
        raise StoreKeyError(
            f"store {shown} holds an encryption record it cannot read; restore it from a backup"
        ) from None


def check_key(marker: Marker | None, key: StoreKey | None, shown: str) -> None:
    """Refuse, in one line, a key that does not fit the store: none for an encrypted store, another key than the
    one it was made with. (A key for a store without a marker is the caller's to judge: it may be a new store.)"""
    if marker is None:
        return
    if marker.cipher != CIPHER_NAME or marker.format != 1:
        raise StoreKeyError(
            f"store {shown} is encrypted with {marker.cipher} (format {marker.format}), which this "
            "safepoint does not know; upgrade safepoint"
        )
    if key is None:
        raise StoreKeyError(
            f"store {shown} is encrypted (key id {marker.key_id}); give its key with --key-file FILE, "
            f"{KEY_FILE_ENV} or {KEY_ENV}"
        )
    if key.key_id != marker.key_id:
        raise StoreKeyError(
            f"store {shown} is encrypted with another key (key id {marker.key_id}; {key.source} has key id "
            f"{key.key_id}); give the key it was made with: without it nothing in it can be read"
        )


def not_encrypted(shown: str, key: StoreKey) -> StoreKeyError:
    return StoreKeyError(
        f"store {shown} is not encrypted and already holds runs; {key.source} would encrypt only what is written "
        f"from now on: open it without a key (unset {KEY_ENV} and {KEY_FILE_ENV}, no --key-file), or give an "
        "encrypted store a new, empty --store"
    )


def check_not_orphaned(header: bytes | None, key: StoreKey | None, shown: str) -> None:
    """A store without an encryption record whose runs are sealed lost its record (deleted by a command, left out
    of a backup): say so in one line, rather than read sealed bytes as plain ones."""
    if header is None or not is_sealed(header):
        return
    given = f"; {key.source} does not open them" if key is not None else ""
    raise StoreKeyError(
        f"store {shown} holds encrypted runs but its encryption record is missing{given}: restore it from a "
        f"backup, or open the store with the key its runs were written with ({KEY_FILE_ENV}, {KEY_ENV} or "
        "--key-file), which records it again"
    )


# sealing ----------------------------------------------------------------------------------------------------------
def place(*parts: str | int) -> bytes:
    """The additional authenticated data naming where a sealed value belongs (NUL never occurs in a run id, a
    kind or a number, so two places never join into one)."""
    return b"safepoint\0" + b"\0".join(str(part).encode() for part in parts)


def is_sealed(data: bytes) -> bool:
    return data.startswith(PREFIX)


class Cipher:
    """Seal and open values with one store key."""

    def __init__(self, key: StoreKey) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise StoreKeyError(
                f"an encrypted store needs the cryptography package ({exc.name} is missing); install it with "
                "`pip install 'safepoint[encryption]'`"
            ) from None
        self.key = key
        self._invalid = InvalidTag
        self._aead: AESGCM = AESGCM(key.derived(b"safepoint aes-256-gcm v1"))
        self._nonce_key = key.derived(b"safepoint artifact nonce v1")

    def seal(self, data: bytes, aad: bytes, *, deterministic: bool = False) -> bytes:
        if deterministic:
            nonce = hmac.new(self._nonce_key, aad + b"\0" + data, hashlib.sha256).digest()[:_NONCE]
        else:
            nonce = os.urandom(_NONCE)
        return PREFIX + base64.b64encode(nonce + self._aead.encrypt(nonce, data, aad))

    def open(self, sealed: bytes, aad: bytes) -> bytes | None:
        """The value, or None when it does not authenticate (changed, moved, another key, or not sealed at all)."""
        if not sealed.startswith(PREFIX):
            return None
        try:
            raw = binascii.a2b_base64(sealed[len(PREFIX) :], strict_mode=True)  # in C: b64decode's check is a regex
        except (binascii.Error, ValueError):
            return None
        if len(raw) < _NONCE + _TAG:
            return None
        try:
            return self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except self._invalid:
            return None
