"""Lock files: round trip, PEP 751 validity, deterministic bytes, clear errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock
from packaging.utils import canonicalize_name

from envlock.errors import LockError
from envlock.lockfile import (
    Artifact,
    Lock,
    LockedBuild,
    LockedPackage,
    LockedPatch,
    LockedSource,
    NightlyPin,
    read_lock,
)


def sample(**changes: object) -> Lock:
    base = Lock(
        env="e",
        python="3.12",
        platform="x86_64-manylinux_2_28",
        spec_digest="sha256:" + "1" * 64,
        spec_keys={"packages.torch": "abc", "env": "def"},
        packages=(
            LockedPackage(canonicalize_name("torch"), "2.12.0.dev20260307+cu130",
                          (Artifact("a" * 64, url="https://x/torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl"),),
                          index="https://x/simple"),
            LockedPackage(canonicalize_name("sgl-kernel"), "0.3.21",
                          (Artifact("b" * 64, path="../wheelhouse/sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl",
                                    size=10),)),
        ),
        requires_python="==3.12.*",
        nightlies={"torch": NightlyPin("2026-03-07", "2.12.0.dev20260307+cu130")},
        sources={"sglang": LockedSource("git", "https://github.com/sgl-project/sglang", commit="f" * 40,
                                        rev="main", patches=(LockedPatch("patches/sglang/0001-x.patch", "c" * 64),))},
        builds={"sgl-kernel": LockedBuild("sha256:" + "d" * 64, "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl",
                                          "b" * 64)},
        venv_digest="sha256:" + "e" * 64,
    )
    from dataclasses import replace

    return replace(base, **changes)  # type: ignore[arg-type]


def test_round_trip_and_pep751() -> None:
    lock = sample()
    text = lock.to_toml()
    Pylock.from_dict(tomllib.loads(text))
    again = Lock.from_toml(text, "x")
    assert again == lock
    assert again.to_toml() == text


def test_filename_is_unquoted() -> None:
    assert sample().packages[0].wheels[0].filename == "torch-2.12.0.dev20260307+cu130-cp312-cp312-linux_x86_64.whl"


def test_install_digest_ignores_venv_digest_but_not_wheels() -> None:
    lock = sample()
    assert lock.with_venv_digest(None).install_digest() == lock.install_digest()
    other = sample(packages=(sample().packages[0],))
    assert other.install_digest() != lock.install_digest()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lock-version = [", "not valid TOML"),
        ('lock-version = "1.0"\n', "not an envlock lock ('tool'); regenerate it with `envlock lock`"),
        ('lock-version = "1.0"\n[tool.envlock]\nformat = 9\n',
         "not an envlock lock (tool.envlock.format is 9, expected 1)"),
        ('lock-version = "1.0"\n[tool]\nenvlock = 1\n', "not an envlock lock ('int' object has no attribute 'get')"),
        ('lock-version = "1.0"\npackages = ["x"]\n[tool.envlock]\nformat = 1\n',
         "not an envlock lock ('str' object has no attribute 'get')"),
    ],
)
def test_bad_lock_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pylock.e.toml"
    path.write_text(text)
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert str(path) in info.value.message
    assert message in info.value.message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("version", "found"),
    [('"2.0"', "'2.0'"), ('"0.9"', "'0.9'"), ('"1"', "'1'"), ('"v1.0"', "'v1.0'"), ("1.0", "1.0 (not a string)")],
)
def test_unsupported_lock_version_is_refused(tmp_path: Path, version: str, found: str) -> None:
    # PEP 751: a reader must raise on a major version it does not support.
    path = tmp_path / "pylock.e.toml"
    path.write_text(sample().to_toml().replace('lock-version = "1.0"', f"lock-version = {version}"))
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.message == (f'{path}: lock-version: found {found}; expected "1.x" '
                                  "(PEP 751 lock format 1, the one this envlock reads)")
    assert info.value.exit_code == 2


def test_later_minor_lock_version_is_read() -> None:
    text = sample().to_toml().replace('lock-version = "1.0"', 'lock-version = "1.7"')
    assert Lock.from_toml(text, "x") == sample()


def test_missing_lock(tmp_path: Path) -> None:
    with pytest.raises(LockError, match="no lock file; create it with `envlock lock`"):
        read_lock(tmp_path / "pylock.x.toml")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl", "..%2F..%2F..%2Fescaped.whl",
         "package 'torch': wheel 'https://x/..%2F..%2F..%2Fescaped.whl' names the file '../../../escaped.whl', "
         "expected a plain *.whl file name"),
        ("torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl", "x%2F..%2F..%2Fescaped.whl",
         "package 'torch': wheel 'https://x/x%2F..%2F..%2Fescaped.whl' names the file 'x/../../escaped.whl', "
         "expected a plain *.whl file name"),
        ('sha256 = "' + "a" * 64, 'sha256 = "../../x' + "a" * 56,
         "package 'torch': wheel sha256 '../../x" + "a" * 56 + "' is not 64 lowercase hex digits"),
        ('url = "https://x/torch', 'nothing = "https://x/torch', "package 'torch': a wheel has neither url nor path"),
        ("size = 10", 'size = "10"', "package 'sgl-kernel': wheel size '10' is not a byte count"),
    ],
)
def test_wheel_entries_that_could_steer_a_store_path_are_refused(tmp_path: Path, old: str, new: str,
                                                                 message: str) -> None:
    text = sample().to_toml()
    assert old in text
    path = tmp_path / "pylock.e.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(LockError) as info:
        read_lock(path)
    assert info.value.message == f"{path}: not an envlock lock ({message}); regenerate it with `envlock lock`"
