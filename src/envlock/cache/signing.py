"""ed25519 keys and signed build records: what a binary cache's build is trusted by.

Keys are written as nix writes them: ``NAME:BASE64``, the secret key file holding the
32-byte seed, the public key the 32-byte point. A build record is a JSON object; what is
signed is its canonical bytes (``canonical``): a fixed prefix naming the format, then the
record as sorted, compact, ASCII JSON, so that one record has one signature whoever
serialized it. ``cryptography`` is imported only where a key is made, a record signed or
a signature checked (a sync that reads no cache never loads it).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.errors import EnvlockError, UsageError

RECORD_FORMAT = "envlock-build-record"
#: A URL record (``cacheurls``): what a wheel URL of an index that publishes no hash held.
URL_RECORD_FORMAT = "envlock-url-record"
RECORD_VERSION = 1
_NOUN = {RECORD_FORMAT: "build record", URL_RECORD_FORMAT: "URL record"}
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class RecordRefusedError(EnvlockError):
    """A cache's build record that is not used (unsigned, untrusted, tampered, or another build's)."""


@dataclass(frozen=True)
class PublicKey:
    """A named ed25519 public key (``str``: ``NAME:BASE64``): what a build record's signature is checked with."""

    name: str
    raw: bytes  # 32 bytes

    def __str__(self) -> str:
        return f"{self.name}:{base64.b64encode(self.raw).decode()}"


@dataclass(frozen=True)
class SecretKey:
    """A named ed25519 secret key, its 32-byte seed: what signs build records (``public``: its public key)."""

    name: str
    seed: bytes  # 32 bytes

    def public(self) -> PublicKey:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = Ed25519PrivateKey.from_private_bytes(self.seed)
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return PublicKey(self.name, raw)

    def sign(self, data: bytes) -> bytes:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(data)


def _split(text: str, where: str, what: str, *, secret: bool = False) -> tuple[str, bytes]:
    """``NAME:BASE64`` split and checked; an error quotes what it found only when it is not a ``secret``
    (a secret key's file named by mistake may hold another secret: a cloud credential, a password)."""
    name, sep, b64 = text.strip().partition(":")
    if not sep or not _KEY_NAME.fullmatch(name):
        found = "its text" if secret else repr(text.strip()[:40])
        raise UsageError(f"{where}: {found}: expected {what} as NAME:BASE64 (NAME of letters, "
                         "digits, '.', '_', '-')")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise UsageError(f"{where}: key {name!r}: expected 32 bytes of base64 after 'NAME:', found "
                         f"{len(raw) if raw else 'no valid base64'}")
    return name, raw


def parse_public(text: str, where: str) -> PublicKey:
    """A trusted key ``NAME:BASE64``; ``UsageError`` naming ``where`` it came from."""
    return PublicKey(*_split(text, where, "a public key"))


def generate(name: str) -> SecretKey:
    """A new ed25519 key named ``name``."""
    if not _KEY_NAME.fullmatch(name):
        raise UsageError(f"{name!r}: not a key name (letters, digits, '.', '_', '-')")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return SecretKey(name, seed)


def write_secret(key: SecretKey, path: Path) -> bool:
    """Write ``key`` to ``path`` (mode 0600, created anew: an existing file is refused, never overwritten).
    A missing folder is made first, mode 0700 (as ssh-keygen makes ``~/.ssh``); True if it was."""
    made = not path.parent.exists()
    if made:
        try:
            path.parent.mkdir(parents=True, mode=0o700)
            os.chmod(path.parent, 0o700)  # whatever the umask: the folder of a secret is its owner's alone
        except OSError as exc:
            raise UsageError(f"{path.parent}: cannot make the folder for the secret key: {exc.strerror}") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path}: exists; a secret key is never overwritten (remove it, or choose another "
                         "--out)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the secret key: {exc.strerror}") from None
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{key.name}:{base64.b64encode(key.seed).decode()}\n")
    return made


#: The most a secret key file is read: ``NAME:BASE64`` of a 32-byte seed is under 200 bytes.
_SECRET_MAX = 4096


def read_secret(path: Path) -> SecretKey:
    """The secret key in ``path`` (as ``cache keygen`` wrote it), at most ``_SECRET_MAX`` bytes of a regular
    file: one of yours no one else may read or write (as ssh and ``~/.netrc`` ask), or root's that no one
    else may write (a secret mounted into a container: Docker's 0444, Kubernetes' 0644); else ``UsageError``."""
    expected = "expected a secret key (as `envlock cache keygen` writes it)"
    try:
        # Not blocking: a FIFO named as the key must not hang the command before it is seen not to be a file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the secret key: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: not a regular file; {expected}")
        mine = st.st_uid == os.getuid()
        if st.st_mode & ((stat.S_IRWXG | stat.S_IRWXO) if mine else (stat.S_IWGRP | stat.S_IWOTH)) or (
                not mine and st.st_uid != 0):
            whose = (f"mode {stat.S_IMODE(st.st_mode):04o}" if mine or st.st_uid == 0
                     else f"owned by uid {st.st_uid}, neither you nor root")
            raise UsageError(f"{path}: a secret key others can read or change ({whose}); expected it yours "
                             f"alone (`chmod 600 {path}`), or root's that no one else can write; or make a new one "
                             "with `envlock cache keygen`")
        try:
            data = fh.read(_SECRET_MAX + 1)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the secret key: {exc.strerror or exc}") from None
    if len(data) > _SECRET_MAX:
        raise UsageError(f"{path}: larger than {_SECRET_MAX} bytes; {expected}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text; {expected}") from None
    return SecretKey(*_split(text, str(path), "a secret key (as `envlock cache keygen` writes it)", secret=True))


def trusted_keys(given: Iterable[tuple[str, str]]) -> dict[str, PublicKey]:
    """The trusted keys by name, from ``(where, text)`` pairs; one name given two keys is refused."""
    keys: dict[str, PublicKey] = {}
    for where, text in given:
        key = parse_public(text, where)
        if key.name in keys and keys[key.name] != key:
            raise UsageError(f"{where}: key {key.name!r} is trusted with two different public keys; expected one")
        keys[key.name] = key
    return keys


# -- build records -----------------------------------------------------------


def canonical(record: Mapping[str, Any], fmt: str = RECORD_FORMAT) -> bytes:
    """The bytes a record's signature covers: its format named first, so that a signature over
    one kind of record never verifies as another kind."""
    body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"{fmt}-v{RECORD_VERSION}\n".encode() + body.encode()


def sign_record(record: Mapping[str, Any], key: SecretKey, fmt: str = RECORD_FORMAT) -> bytes:
    """The signed document for ``record`` (its ``builder`` set to ``key``'s name), as a cache stores it."""
    body = {**record, "builder": key.name}
    sig = base64.b64encode(key.sign(canonical(body, fmt))).decode()
    doc = {"format": fmt, "version": RECORD_VERSION, "record": body,
           "signatures": [{"key": key.name, "sig": sig}]}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def verify_record(data: bytes, trusted: Mapping[str, PublicKey], where: str,
                  fmt: str = RECORD_FORMAT) -> dict[str, Any]:
    """The record in the signed document ``data`` (of format ``fmt``) when a trusted key's signature
    verifies; else ``RecordRefusedError`` saying why (named by ``where``)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        doc = json.loads(data)
        record, sigs = doc["record"], doc["signatures"]
        if doc.get("format") != fmt or doc.get("version") != RECORD_VERSION:
            raise ValueError("format")
        if not isinstance(record, dict) or not isinstance(sigs, list):
            raise ValueError("shape")
        # A signature is {"key": NAME, "sig": BASE64}, both strings: anything else is no signature.
        given = len(sigs)
        sigs = [s for s in sigs if isinstance(s, dict) and isinstance(s.get("key"), str)
                and isinstance(s.get("sig", ""), str)]
        body = canonical(record, fmt)
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested past Python's stack
        raise RecordRefusedError(f"{where}: not a signed {_NOUN.get(fmt, fmt)} ({fmt} version {RECORD_VERSION})") \
            from None
    names = [s["key"] for s in sigs]
    for sig in sigs:
        if sig["key"] not in trusted:
            continue
        key = trusted[sig["key"]]
        try:
            Ed25519PublicKey.from_public_bytes(key.raw).verify(base64.b64decode(sig.get("sig", "")), body)
        except (InvalidSignature, binascii.Error, ValueError):
            raise RecordRefusedError(f"{where}: the signature of trusted key {key.name!r} does not verify "
                                "(the record was changed after it was signed, or another key of that "
                                "name signed it)") from None
        return record
    if given > len(sigs) and not sigs:
        raise RecordRefusedError(f"{where}: no signature of the form {{\"key\": NAME, \"sig\": BASE64}} (found "
                                 f"{given} of another form)")
    signed_by = ", ".join(repr(n) for n in names) or "no key"
    trust = ", ".join(repr(n) for n in sorted(trusted)) or "none (pass --trusted-key NAME:BASE64)"
    raise RecordRefusedError(f"{where}: signed by {signed_by}, which is not a trusted key (trusted: {trust})")
