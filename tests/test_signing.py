"""ed25519 keys and signed build records."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from envlock.cache.signing import (
    RecordRefusedError,
    generate,
    parse_public,
    read_secret,
    sign_record,
    trusted_keys,
    verify_record,
    write_secret,
)
from envlock.errors import UsageError

RECORD = {"input-digest": "sha256:" + "1" * 64, "wheel": "k-0.1-py3-none-any.whl", "sha256": "2" * 64, "size": 5}


def test_keygen_writes_a_0600_secret_that_reads_back(tmp_path: Path) -> None:
    key = generate("ci-1")
    write_secret(key, tmp_path / "ci.key")
    assert stat.S_IMODE((tmp_path / "ci.key").stat().st_mode) == 0o600
    assert read_secret(tmp_path / "ci.key") == key
    public = str(key.public())
    assert public.startswith("ci-1:") and parse_public(public, "x") == key.public()
    with pytest.raises(UsageError) as exc:
        write_secret(key, tmp_path / "ci.key")
    assert exc.value.message == (f"{tmp_path / 'ci.key'}: exists; a secret key is never overwritten (remove it, or "
                                 "choose another --out)")


def test_a_signed_record_verifies_with_its_key_only() -> None:
    key, other = generate("ci-1"), generate("laptop")
    doc = sign_record(RECORD, key)
    assert verify_record(doc, {"ci-1": key.public()}, "r") == {**RECORD, "builder": "ci-1"}
    with pytest.raises(RecordRefusedError) as exc:
        verify_record(doc, {"laptop": other.public()}, "record of k")
    assert exc.value.message == "record of k: signed by 'ci-1', which is not a trusted key (trusted: 'laptop')"
    with pytest.raises(RecordRefusedError) as exc:
        verify_record(doc, {}, "record of k")
    assert exc.value.message == ("record of k: signed by 'ci-1', which is not a trusted key (trusted: none (pass "
                                 "--trusted-key NAME:BASE64))")


def test_a_record_changed_after_signing_is_refused() -> None:
    key = generate("ci-1")
    doc = json.loads(sign_record(RECORD, key))
    doc["record"]["sha256"] = "3" * 64
    with pytest.raises(RecordRefusedError) as exc:
        verify_record(json.dumps(doc).encode(), {"ci-1": key.public()}, "record of k")
    assert exc.value.message == ("record of k: the signature of trusted key 'ci-1' does not verify (the record was "
                                 "changed after it was signed, or another key of that name signed it)")
    # Same name, another key: an impostor's record does not verify either.
    impostor = generate("ci-1")
    with pytest.raises(RecordRefusedError):
        verify_record(sign_record(RECORD, impostor), {"ci-1": key.public()}, "record of k")
    with pytest.raises(RecordRefusedError) as exc:
        verify_record(b"<html>", {"ci-1": key.public()}, "record of k")
    assert exc.value.message == "record of k: not a signed build record (envlock-build-record version 1)"


@pytest.mark.parametrize(("text", "message"), [
    ("nocolon", "ENVLOCK_TRUSTED_KEYS: 'nocolon': expected a public key as NAME:BASE64 (NAME of letters, digits, "
                "'.', '_', '-')"),
    ("ci:abc", "ENVLOCK_TRUSTED_KEYS: key 'ci': expected 32 bytes of base64 after 'NAME:', found no valid base64"),
    ("ci:AAAA", "ENVLOCK_TRUSTED_KEYS: key 'ci': expected 32 bytes of base64 after 'NAME:', found 3"),
])
def test_bad_trusted_keys_are_named(text: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        trusted_keys([("ENVLOCK_TRUSTED_KEYS", text)])
    assert exc.value.message == message


def test_one_name_with_two_keys_is_refused() -> None:
    a, b = generate("ci"), generate("ci")
    with pytest.raises(UsageError) as exc:
        trusted_keys([("--trusted-key", str(a.public())), ("envlock.toml", str(b.public()))])
    assert exc.value.message == "envlock.toml: key 'ci' is trusted with two different public keys; expected one"
