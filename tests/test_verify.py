"""``verify``: a venv checked against a recorded digest, the differing files listed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlock.errors import VerifyError
from envlock.install import digest, venvcheck
from kit.venvs import fake_venv


def test_compare_lists_added_removed_changed(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v")
    ref = digest.manifest(venv)
    (venv / "bin" / "tool").chmod(0o644)  # exec bit counts
    (venv / "lib" / "site-packages" / "pkg" / "__init__.py").write_text("X = 2\n")
    (venv / "lib" / "site-packages" / "pkg" / "extra.py").write_text("")
    os.rmdir(venv / "lib" / "empty")
    result = venvcheck.check(venv, ref.digest, ref)
    assert not result.ok
    assert result.difference == digest.Difference(
        added=("lib/site-packages/pkg/extra.py",),
        removed=("lib/empty",),
        changed=("bin/tool", "lib/site-packages/pkg/__init__.py"),
    )
    assert result.difference.lines() == [
        "+ lib/site-packages/pkg/extra.py",
        "- lib/empty",
        "~ bin/tool",
        "~ lib/site-packages/pkg/__init__.py",
    ]
    doc = result.to_dict()
    assert doc["ok"] is False and doc["changed"] == ["bin/tool", "lib/site-packages/pkg/__init__.py"]


def test_check_without_reference_says_so(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v")
    result = venvcheck.check(venv, "sha256:" + "0" * 64, None)
    assert not result.ok and result.difference is None
    assert result.note == f"no manifest for sha256:{'0' * 64} in this store: cannot list the differing files"
    assert venvcheck.check(venv, digest.manifest(venv).digest, None).ok


def test_check_of_missing_venv(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as info:
        venvcheck.check(tmp_path / "gone", None, None)
    assert str(info.value) == f"{tmp_path}/gone: no venv there (expected the env's current generation)"
