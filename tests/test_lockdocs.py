"""``store.lockdocs``: a lock's TOML document kept per env, read again only when it gives the lock's bytes back."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from envlock.model.lockfile import Lock, read_lock
from envlock.store.lockdocs import NAME, EnvLockDocs
from kit.locks import sample_lock


def _setup(tmp_path: Path, text: str, *, env: str = "e") -> tuple[Path, Path, Path]:
    """A lock file of ``text``, a store home whose env ``env`` has its folder, and that folder's document path."""
    lock_path = tmp_path / "pylock.e.toml"
    lock_path.write_text(text)
    home = tmp_path / "home"
    folder = home / "v1" / "envs" / env
    folder.mkdir(parents=True)
    return lock_path, home, folder / NAME


def test_a_lock_read_again_comes_from_its_document_without_toml(tmp_path: Path) -> None:
    text = sample_lock().to_toml()
    lock_path, home, doc_path = _setup(tmp_path, text)
    assert read_lock(lock_path, docs=EnvLockDocs("e", str(home))) == sample_lock()
    sha = hashlib.sha256(text.encode()).hexdigest()
    head, _, body = doc_path.read_bytes().partition(b"\n")
    assert head == sha.encode()
    assert json.loads(body) == tomllib.loads(text)
    # A new process reads the same bytes again: the lock, and tomllib never imported.
    probe = ("import sys; from pathlib import Path; from envlock.model.lockfile import read_lock; "
             "from envlock.store.lockdocs import EnvLockDocs; "
             f"lock = read_lock(Path({str(lock_path)!r}), docs=EnvLockDocs('e', {str(home)!r})); "
             "print(lock.env, len(lock.packages), 'tomllib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out == "e 2 False\n"


def _other_document(text: str) -> bytes:
    doc = tomllib.loads(text)
    doc["packages"][0]["version"] = "9.9"  # a lock that reads, of other bytes
    return json.dumps(doc).encode()


@pytest.mark.parametrize("kept", [
    pytest.param(_other_document, id="another-lock"),
    pytest.param(lambda text: b"{\"lock-version\": ", id="torn"),
    pytest.param(lambda text: b"[1, 2]", id="not-a-table"),
    pytest.param(lambda text: json.dumps({**tomllib.loads(text), "lock-version": "2.0"}).encode(), id="refused"),
])
def test_a_kept_document_that_does_not_give_the_bytes_back_is_ignored(tmp_path: Path,
                                                                     kept: Callable[[str], bytes]) -> None:
    text = sample_lock().to_toml()
    lock_path, home, doc_path = _setup(tmp_path, text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    doc_path.write_bytes(f"{sha}\n".encode() + kept(text))
    # The lock the file holds, read from its TOML; the document of its bytes kept in place of the other.
    assert read_lock(lock_path, docs=EnvLockDocs("e", str(home))) == sample_lock()
    assert json.loads(doc_path.read_bytes().partition(b"\n")[2]) == tomllib.loads(text)


def test_a_document_of_other_bytes_is_not_read(tmp_path: Path) -> None:
    other = replace(sample_lock(), python="3.13")
    lock_path, home, doc_path = _setup(tmp_path, other.to_toml())
    assert read_lock(lock_path, docs=EnvLockDocs("e", str(home))) == other
    lock_path.write_text(sample_lock().to_toml())  # the lock changed: the document kept is of the old bytes
    assert read_lock(lock_path, docs=EnvLockDocs("e", str(home))) == sample_lock()
    assert doc_path.read_bytes().startswith(hashlib.sha256(sample_lock().to_toml().encode()).hexdigest().encode())


def test_only_a_lock_as_its_writer_writes_it_is_kept(tmp_path: Path) -> None:
    text = "# edited by hand\n" + sample_lock().to_toml()
    lock_path, home, doc_path = _setup(tmp_path, text)
    assert read_lock(lock_path, docs=EnvLockDocs("e", str(home))) == Lock.from_toml(text, "x") == sample_lock()
    assert not doc_path.exists()


@pytest.mark.parametrize("env", ["other", "../e", ".e"])
def test_nothing_is_kept_without_the_envs_folder_nor_for_a_bad_name(tmp_path: Path, env: str) -> None:
    lock_path, home, doc_path = _setup(tmp_path, sample_lock().to_toml())
    docs = EnvLockDocs(env, str(home))
    assert read_lock(lock_path, docs=docs) == sample_lock()
    assert docs.get(hashlib.sha256(lock_path.read_bytes()).hexdigest()) is None
    assert sorted(p.name for p in home.rglob("*") if p.is_file()) == []
    assert not doc_path.exists()
