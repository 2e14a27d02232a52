"""The venv digest: canonical walk, prefix normalization, streaming, differences."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from envlock import verify
from envlock.errors import VerifyError


def _fake_venv(root: Path, home: str = "/opt/python/3.11/bin") -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "site-packages" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text(f"home = {home}\nversion_info = 3.11.7\n")
    os.symlink(f"{home}/python3.11", root / "bin" / "python")
    os.symlink("python", root / "bin" / "python3")
    tool = root / "bin" / "tool"
    tool.write_text(f"#!{root}/bin/python\nprint('hi')\n")
    tool.chmod(0o755)
    (root / "lib" / "site-packages" / "pkg" / "__init__.py").write_text("X = 1\n")
    (root / "lib" / "site-packages" / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"x")
    (root / "lib" / "empty").mkdir()
    return root


def test_one_digest_wherever_the_venv_and_its_python_live(tmp_path: Path) -> None:
    a = verify.manifest(_fake_venv(tmp_path / "a"))
    b = verify.manifest(_fake_venv(tmp_path / "elsewhere" / "b", home="/usr/local/bin"))
    assert a.digest == b.digest
    assert a.digest.startswith("sha256:") and len(a.digest) == 7 + 64
    assert a.entries["bin/python"] == "l ${PYTHON_HOME}/python3.11"
    assert a.entries["bin/python3"] == "l python"
    assert a.entries["lib/empty"] == "d"
    assert a.entries["bin/tool"].startswith("f x ")
    assert a.entries["lib/site-packages/pkg/__init__.py"].startswith("f - ")
    tool = b"#!${VENV}/bin/python\nprint('hi')\n"
    assert a.entries["bin/tool"] == f"f x {hashlib.sha256(tool).hexdigest()}"


def test_pycache_and_envlock_bookkeeping_are_left_out(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v")
    before = verify.manifest(venv)
    (venv / ".envlock-manifest.json").write_text("{}")
    (venv / "lib" / "site-packages" / "pkg" / "__pycache__" / "more.pyc").write_bytes(b"y")
    after = verify.manifest(venv)
    assert after == before
    assert not any("__pycache__" in p for p in after.entries)


def test_digest_is_independent_of_worker_count(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v")
    # Big enough to be hashed on worker threads with jobs > 1, one of them naming the venv.
    lib = venv / "lib" / "site-packages" / "pkg"
    for i in range(3):
        (lib / f"big{i}.so").write_bytes(os.urandom(verify._BIG + i))
    (lib / "big-named.txt").write_bytes(os.urandom(verify._BIG) + f"at {venv}/lib\n".encode())
    (lib / "big-exec").write_bytes(os.urandom(verify._BIG))
    (lib / "big-exec").chmod(0o755)
    one = verify.manifest(venv, jobs=1)
    assert verify.manifest(venv, jobs=4) == one
    assert one.entries["lib/site-packages/pkg/big-exec"].startswith("f x ")
    tail = f"at {venv}/lib\n".encode()
    named = (lib / "big-named.txt").read_bytes()
    assert one.entries["lib/site-packages/pkg/big-named.txt"] == "f - " + hashlib.sha256(
        named[: -len(tail)] + b"at ${VENV}/lib\n").hexdigest()


def test_prefix_is_normalized_across_chunk_boundaries_of_big_files(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v")
    prefix = os.fsencode(str(venv))
    big = bytearray(os.urandom(9 * 1024 * 1024))
    # One occurrence straddling the first 1 MiB chunk boundary after the whole-read window, one at the end.
    at = (4 << 20) + (1 << 20) - 5
    big[at : at + len(prefix)] = prefix
    big[-len(prefix):] = prefix
    (venv / "lib" / "big.so").write_bytes(bytes(big))
    expected = hashlib.sha256(bytes(big).replace(prefix, verify.VENV_PLACEHOLDER)).hexdigest()
    assert verify.manifest(venv).entries["lib/big.so"] == f"f - {expected}"


def test_prefix_argument_names_the_path_to_normalize(tmp_path: Path) -> None:
    built = _fake_venv(tmp_path / "final")
    shutil.move(built, tmp_path / "work")
    # The tool's shebang names .../final: normalized only when we say that is the prefix.
    assert verify.manifest(tmp_path / "work", prefix=tmp_path / "final").digest == verify.manifest(
        _fake_venv(tmp_path / "other")
    ).digest
    assert verify.manifest(tmp_path / "work").digest != verify.manifest(tmp_path / "other").digest


def test_compare_lists_added_removed_changed(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v")
    ref = verify.manifest(venv)
    (venv / "bin" / "tool").chmod(0o644)  # exec bit counts
    (venv / "lib" / "site-packages" / "pkg" / "__init__.py").write_text("X = 2\n")
    (venv / "lib" / "site-packages" / "pkg" / "extra.py").write_text("")
    os.rmdir(venv / "lib" / "empty")
    result = verify.check(venv, ref.digest, ref)
    assert not result.ok
    assert result.difference == verify.Difference(
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
    venv = _fake_venv(tmp_path / "v")
    result = verify.check(venv, "sha256:" + "0" * 64, None)
    assert not result.ok and result.difference is None
    assert result.note == f"no manifest for sha256:{'0' * 64} in this store: cannot list the differing files"
    assert verify.check(venv, verify.manifest(venv).digest, None).ok


def test_check_of_missing_venv(tmp_path: Path) -> None:
    with pytest.raises(VerifyError) as info:
        verify.check(tmp_path / "gone", None, None)
    assert str(info.value) == f"{tmp_path}/gone: no venv there (expected the env's current generation)"


def test_manifest_round_trips_json(tmp_path: Path) -> None:
    m = verify.manifest(_fake_venv(tmp_path / "v"))
    assert verify.Manifest.from_json(m.to_json()) == m
    assert verify.digest_of(m.entries) == m.digest



def test_a_wheel_file_naming_the_interpreter_folder_hashes_alike_for_any_interpreter(tmp_path: Path) -> None:
    # A Debian python has home = /usr/bin: a shebang in a wheel's file must not be rewritten
    # for it, or one lock gives two digests on two machines.
    script = "#!/usr/bin/env python3\nimport subprocess\nsubprocess.run(['/usr/bin/git'])\n"
    digests = []
    for home in ("/usr/bin", "/opt/python3.11/bin"):
        venv = _fake_venv(tmp_path / home.strip("/").replace("/", "-"), home=home)
        (venv / "lib" / "site-packages" / "pkg" / "cli.py").write_text(script)
        m = verify.manifest(venv)
        assert m.entries["lib/site-packages/pkg/cli.py"] == "f - " + hashlib.sha256(script.encode()).hexdigest()
        assert m.entries["bin/python"] == "l ${PYTHON_HOME}/python3.11"
        cfg = b"home = ${PYTHON_HOME}\nversion_info = 3.11.7\n"
        assert m.entries["pyvenv.cfg"] == "f - " + hashlib.sha256(cfg).hexdigest()
        digests.append(m.digest)
    assert digests[0] == digests[1]


def test_the_interpreter_folder_is_normalized_as_a_whole_path_only(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v", home="/usr/bin")
    os.symlink("/usr/bin2/tool", venv / "bin" / "other")
    os.symlink("/usr/bin", venv / "bin" / "home")
    m = verify.manifest(venv)
    assert m.entries["bin/other"] == "l /usr/bin2/tool"
    assert m.entries["bin/home"] == "l ${PYTHON_HOME}"


def test_a_newline_in_a_name_or_link_target_cannot_make_two_trees_one_digest() -> None:
    file = "f - " + hashlib.sha256(b"").hexdigest()
    # One tree's lines would spell the other's: the target's newline moved into the next name.
    a = {"a": "l p\nq", "r": file}
    b = {"a": "l p", "q\nr": file}
    assert verify.digest_of(a) != verify.digest_of(b)
    # Trees without such names keep the digest of the plain line format.
    plain = {"a": "l p", "r": file}
    text = "".join(f"{name}\0{plain[name]}\n" for name in sorted(plain))
    assert verify.digest_of(plain) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
