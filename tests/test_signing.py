"""ed25519 keys and signed build records."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from envlock.cache.signing import (
    RecordRefusedError,
    SecretKey,
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


def _doc(signatures: object, record: object = None) -> bytes:
    return json.dumps({"format": "envlock-build-record", "version": 1, "record": record or RECORD,
                       "signatures": signatures}).encode()


@pytest.mark.parametrize(("data", "message"), [
    # As found: each of these ended a sync, a lock or an import in a traceback, not a refusal and a fallback.
    (_doc([{"key": ["ci-1"], "sig": "AAAA"}]), 'record of k: no signature of the form {"key": NAME, "sig": BASE64} '
                                                "(found 1 of another form)"),
    (_doc([{"key": "ci-1", "sig": 5}]), 'record of k: no signature of the form {"key": NAME, "sig": BASE64} (found 1 '
                                        "of another form)"),
    (_doc([{"key": "ci-1", "sig": "%%%"}]), "record of k: the signature of trusted key 'ci-1' does not verify (the "
                                            "record was changed after it was signed, or another key of that name "
                                            "signed it)"),
    (b'{"format": "envlock-build-record", "version": 1, "signatures": [], "record": ' + b'{"a": ' * 100_000
     + b"1" + b"}" * 100_001, "record of k: not a signed build record (envlock-build-record version 1)"),
    (b"[" * 100_000 + b"]" * 100_000, "record of k: not a signed build record (envlock-build-record version 1)"),
])
def test_a_hostile_record_is_refused_by_name_never_a_traceback(data: bytes, message: str) -> None:
    key = generate("ci-1")
    with pytest.raises(RecordRefusedError) as exc:
        verify_record(data, {"ci-1": key.public()}, "record of k")
    assert exc.value.message == message


def test_a_secret_key_file_is_its_owners_alone_small_and_never_quoted(tmp_path: Path) -> None:
    key = tmp_path / "ci.key"
    write_secret(generate("ci-1"), key)
    key.chmod(0o644)
    with pytest.raises(UsageError) as exc:
        read_secret(key)
    assert exc.value.message == (f"{key}: a secret key others can read or change (mode 0644); expected it yours "
                                 f"alone (`chmod 600 {key}`), or root's that no one else can write; or make a new "
                                 "one with `envlock cache keygen`")
    # A file named by mistake (a pull request's envlock.toml can name one): what it holds is never quoted.
    credentials = tmp_path / "credentials"
    credentials.write_text("[default]\naws_secret_access_key=wJalrXUtnFEMI/K7MDENG\n")
    credentials.chmod(0o600)
    with pytest.raises(UsageError) as exc:
        read_secret(credentials)
    assert exc.value.message == (f"{credentials}: its text: expected a secret key (as `envlock cache keygen` writes "
                                 "it) as NAME:BASE64 (NAME of letters, digits, '.', '_', '-')")
    with pytest.raises(UsageError) as exc:
        read_secret(Path("/dev/zero"))  # read to the end, it was a MemoryError
    assert exc.value.message == "/dev/zero: not a regular file; expected a secret key (as `envlock cache keygen` " \
                                "writes it)"
    big = tmp_path / "big.key"
    big.write_bytes(b"ci-1:" + b"A" * 5000)
    big.chmod(0o600)
    with pytest.raises(UsageError) as exc:
        read_secret(big)
    assert exc.value.message == f"{big}: larger than 4096 bytes; expected a secret key (as `envlock cache keygen` " \
                                "writes it)"


def test_a_secret_key_that_is_a_fifo_or_cut_mid_character_past_the_limit_is_named_not_waited_on(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "key"
    os.mkfifo(fifo, 0o600)  # opened blocking, reading it waited for a writer forever
    with pytest.raises(UsageError) as exc:
        read_secret(fifo)
    assert exc.value.message == (f"{fifo}: not a regular file; expected a secret key (as `envlock cache keygen` "
                                 "writes it)")
    big = tmp_path / "big.key"
    big.write_bytes(b"A" * 4095 + "é".encode())  # past 4096 bytes, cut inside the é when read
    big.chmod(0o600)
    with pytest.raises(UsageError) as exc:
        read_secret(big)
    assert exc.value.message.startswith(f"{big}: larger than 4096 bytes")


@pytest.mark.skipif(__import__("os").getuid() != 0, reason="a file of another owner needs root to make")
def test_a_root_owned_secret_mount_is_taken_unless_others_can_write_it() -> None:
    # A secret mounted into a container (Docker's /run/secrets 0444, Kubernetes' 0644) is root's: its user
    # cannot chmod it, and no one else can change it. One that others can write is refused; a third user's too.
    import os
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)  # a folder the CI user below can enter
    key = folder / "mounted.key"
    made = generate("ci-1")

    def as_ci_user() -> SecretKey:
        os.setresuid(1000, 1000, 0)  # the saved uid brings root back
        try:
            return read_secret(key)
        finally:
            os.setresuid(0, 0, 0)

    try:
        write_secret(made, key)
        key.chmod(0o444)
        assert as_ci_user() == made
        key.chmod(0o666)
        with pytest.raises(UsageError) as exc:
            as_ci_user()
        assert "a secret key others can read or change (mode 0666)" in exc.value.message
        os.chown(key, 2000, 2000)
        key.chmod(0o444)
        with pytest.raises(UsageError) as exc:
            as_ci_user()
        assert "a secret key others can read or change (owned by uid 2000, neither you nor root)" in exc.value.message
    finally:
        shutil.rmtree(folder)
