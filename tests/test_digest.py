"""The venv digest: canonical walk, prefix normalization, streaming, the digest's line format."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from envlock.install import digest
from kit.venvs import fake_venv


def test_one_digest_wherever_the_venv_and_its_python_live(tmp_path: Path) -> None:
    a = digest.manifest(fake_venv(tmp_path / "a"))
    b = digest.manifest(fake_venv(tmp_path / "elsewhere" / "b", home="/usr/local/bin"))
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
    venv = fake_venv(tmp_path / "v")
    before = digest.manifest(venv)
    (venv / ".envlock-manifest.json").write_text("{}")
    (venv / "lib" / "site-packages" / "pkg" / "__pycache__" / "more.pyc").write_bytes(b"y")
    after = digest.manifest(venv)
    assert after == before
    assert not any("__pycache__" in p for p in after.entries)


def test_digest_is_independent_of_worker_count(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v")
    # Big enough to be hashed on worker threads with jobs > 1, one of them naming the venv.
    lib = venv / "lib" / "site-packages" / "pkg"
    for i in range(3):
        (lib / f"big{i}.so").write_bytes(os.urandom(digest._BIG + i))
    (lib / "big-named.txt").write_bytes(os.urandom(digest._BIG) + f"at {venv}/lib\n".encode())
    (lib / "big-exec").write_bytes(os.urandom(digest._BIG))
    (lib / "big-exec").chmod(0o755)
    one = digest.manifest(venv, jobs=1)
    assert digest.manifest(venv, jobs=4) == one
    assert one.entries["lib/site-packages/pkg/big-exec"].startswith("f x ")
    tail = f"at {venv}/lib\n".encode()
    named = (lib / "big-named.txt").read_bytes()
    assert one.entries["lib/site-packages/pkg/big-named.txt"] == "f - " + hashlib.sha256(
        named[: -len(tail)] + b"at ${VENV}/lib\n").hexdigest()


def test_prefix_is_normalized_across_chunk_boundaries_of_big_files(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v")
    prefix = os.fsencode(str(venv))
    big = bytearray(os.urandom(9 * 1024 * 1024))
    # One occurrence straddling the first 1 MiB chunk boundary after the whole-read window, one at the end.
    at = (4 << 20) + (1 << 20) - 5
    big[at : at + len(prefix)] = prefix
    big[-len(prefix):] = prefix
    (venv / "lib" / "big.so").write_bytes(bytes(big))
    expected = hashlib.sha256(bytes(big).replace(prefix, digest.VENV_PLACEHOLDER)).hexdigest()
    assert digest.manifest(venv).entries["lib/big.so"] == f"f - {expected}"


def test_prefix_argument_names_the_path_to_normalize(tmp_path: Path) -> None:
    built = fake_venv(tmp_path / "final")
    shutil.move(built, tmp_path / "work")
    # The tool's shebang names .../final: normalized only when we say that is the prefix.
    assert digest.manifest(tmp_path / "work", prefix=tmp_path / "final").digest == digest.manifest(
        fake_venv(tmp_path / "other")
    ).digest
    assert digest.manifest(tmp_path / "work").digest != digest.manifest(tmp_path / "other").digest


def test_manifest_round_trips_json(tmp_path: Path) -> None:
    m = digest.manifest(fake_venv(tmp_path / "v"))
    assert digest.Manifest.from_json(m.to_json()) == m
    assert digest.digest_of(m.entries) == m.digest


def test_a_wheel_file_naming_the_interpreter_folder_hashes_alike_for_any_interpreter(tmp_path: Path) -> None:
    # A Debian python has home = /usr/bin: a shebang in a wheel's file must not be rewritten
    # for it, or one lock gives two digests on two machines.
    script = "#!/usr/bin/env python3\nimport subprocess\nsubprocess.run(['/usr/bin/git'])\n"
    digests = []
    for home in ("/usr/bin", "/opt/python3.11/bin"):
        venv = fake_venv(tmp_path / home.strip("/").replace("/", "-"), home=home)
        (venv / "lib" / "site-packages" / "pkg" / "cli.py").write_text(script)
        m = digest.manifest(venv)
        assert m.entries["lib/site-packages/pkg/cli.py"] == "f - " + hashlib.sha256(script.encode()).hexdigest()
        assert m.entries["bin/python"] == "l ${PYTHON_HOME}/python3.11"
        cfg = b"home = ${PYTHON_HOME}\nversion_info = 3.11.7\n"
        assert m.entries["pyvenv.cfg"] == "f - " + hashlib.sha256(cfg).hexdigest()
        digests.append(m.digest)
    assert digests[0] == digests[1]


def test_the_interpreter_folder_is_normalized_as_a_whole_path_only(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path / "v", home="/usr/bin")
    os.symlink("/usr/bin2/tool", venv / "bin" / "other")
    os.symlink("/usr/bin", venv / "bin" / "home")
    m = digest.manifest(venv)
    assert m.entries["bin/other"] == "l /usr/bin2/tool"
    assert m.entries["bin/home"] == "l ${PYTHON_HOME}"


def test_a_newline_in_a_name_or_link_target_cannot_make_two_trees_one_digest() -> None:
    file = "f - " + hashlib.sha256(b"").hexdigest()
    # One tree's lines would spell the other's: the target's newline moved into the next name.
    a = {"a": "l p\nq", "r": file}
    b = {"a": "l p", "q\nr": file}
    assert digest.digest_of(a) != digest.digest_of(b)
    # Trees without such names keep the digest of the plain line format.
    plain = {"a": "l p", "r": file}
    text = "".join(f"{name}\0{plain[name]}\n" for name in sorted(plain))
    assert digest.digest_of(plain) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
