"""Every file a new venv gets from uv's cache is held to the sha256 its wheel's RECORD gives (``install._build``,
``uvcache.RecordHashes``): an edit made through a venv's hard link into uv's cache does not reach the next lock's
venv, and a wheel whose RECORD lies is refused. Real uv, real wheels, real files."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from envlock import runner
from envlock.commands.realize import SyncTarget, realize
from envlock.commands.verify import verify_env
from envlock.errors import VerifyError
from envlock.install import digest, install, uvcache
from envlock.install.fetch import fetch
from envlock.model.lockfile import Lock
from envlock.store.store import Store
from kit.locks import lock_for
from kit.wheels import build_wheel

#: Where the running interpreter's venvs keep packages (the locks here are for it).
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
ALPHA = "NAME = 'alpha'\nVERSION = '1.0'\n"
TRUE, LIE = b"X = 1\n", b"X = 2\n"  # liar/__init__.py's bytes, and what its RECORD's hash is of


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _locks(w: Path) -> tuple[Lock, Lock]:
    """A lock of ``alpha`` and one of ``alpha`` and ``beta`` (local wheels in ``w``): two venvs sharing alpha."""
    alpha, beta = build_wheel(w, "alpha", "1.0"), build_wheel(w, "beta", "1.0")
    return (lock_for(None, "", [], local=[(alpha, alpha.name)]),
            lock_for(None, "", [], local=[(alpha, alpha.name), (beta, beta.name)]))


def _sync(store: Store, env: str, lock: Lock, w: Path) -> Path:
    """``realize`` of ``lock`` (wheels in ``w``) for ``env``: its store venv; the note must say nothing."""
    result = realize(store, SyncTarget(env, lock, lock_path=None, base_dir=w))
    assert result.note == ""
    return result.path.resolve()


def test_an_edit_through_a_venvs_hard_link_does_not_reach_the_next_locks_venv(tmp_path: Path) -> None:
    # QA's case: a venv file made writable and edited is uv's cache file too; the next venv of another lock that
    # has the wheel was linked to the edited bytes, and its new digest recorded them as the lock's truth.
    w = tmp_path / "wheels"
    first, second = _locks(w)
    store = Store.open(tmp_path / "home")
    demo = _sync(store, "demo", first, w)
    edited = demo / SITE / "alpha" / "__init__.py"
    edited.chmod(edited.stat().st_mode | 0o200)  # chmod u+w
    with edited.open("a") as fh:
        fh.write("BROKEN = True\n")
    cached = [p.read_text() for p in uvcache.uv_cache_dir(store).rglob("alpha/__init__.py")]
    assert cached == [ALPHA + "BROKEN = True\n"]  # the edit is in uv's cache: what uv links into the next venv

    got = fetch([p.wheels[0] for p in second.packages], store, base_dir=w).paths()
    result = install.install(store, second, got)
    assert (result.venv / SITE / "alpha" / "__init__.py").read_text() == ALPHA  # the wheel's bytes
    assert result.edited == (f"{SITE}/alpha/__init__.py",)
    assert result.note == (f"a file of uv's cache differed from its wheel's RECORD ({SITE}/alpha/__init__.py; edited "
                           "through a venv that links it?): uv's cache cleared, the venv made again")
    # The venv a store that never saw the edit makes of the same lock: one digest.
    clean = install.install(Store.open(tmp_path / "clean"), second,
                            fetch([p.wheels[0] for p in second.packages], Store.open(tmp_path / "clean"),
                                  base_dir=w).paths())
    assert clean.manifest.digest == result.manifest.digest and clean.note == "" and clean.edited == ()
    # The edited env keeps its edit, and verify names it as before.
    assert edited.read_text() == ALPHA + "BROKEN = True\n"
    checked = verify_env(store, "demo")
    assert not checked.ok and checked.to_dict()["changed"] == [f"{SITE}/alpha/__init__.py"]


def test_a_sync_says_the_repair_and_records_the_wheels_digest(tmp_path: Path) -> None:
    # The same through a sync of a lock that records no digest yet: the digest recorded is the wheels' venv's.
    w = tmp_path / "wheels"
    first, second = _locks(w)
    store = Store.open(tmp_path / "home")
    edited = _sync(store, "demo", first, w) / SITE / "alpha" / "__init__.py"
    edited.chmod(0o644)
    edited.write_text("edited in place\n")
    result = realize(store, SyncTarget("d3", second, lock_path=None, base_dir=w))
    assert result.note == (f"a file of uv's cache differed from its wheel's RECORD ({SITE}/alpha/__init__.py; edited "
                           "through a venv that links it?): uv's cache cleared, the venv made again")
    assert (result.path / SITE / "alpha" / "__init__.py").read_text() == ALPHA
    clean = realize(Store.open(tmp_path / "clean"), SyncTarget("d3", second, lock_path=None, base_dir=w))
    assert result.venv_digest == clean.venv_digest


def _lying_wheel(dest: Path) -> Path:
    """A wheel whose RECORD gives ``liar/__init__.py`` a sha256 that is not its bytes' (the rest true)."""
    wheel = build_wheel(dest, "liar", "1.0", files={"liar/__init__.py": TRUE})
    with zipfile.ZipFile(wheel) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    record = "liar-1.0.dist-info/RECORD"
    members[record] = members[record].replace(_record_hash(TRUE).encode(), _record_hash(LIE).encode())
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return wheel


def test_uv_itself_installs_a_wheel_whose_record_lies(tmp_path: Path) -> None:
    # Why envlock checks: uv (0.13) copies the RECORD's hashes into the venv's RECORD and checks none.
    wheel = _lying_wheel(tmp_path / "wheels")
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    uv = runner.uv_bin()
    subprocess.run([uv, "venv", "-q", str(venv)], check=True, env=env, capture_output=True)
    out = subprocess.run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--offline", "--no-deps",
                          str(wheel)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"liar/__init__.py,{_record_hash(LIE)},6" in (venv / SITE / "liar-1.0.dist-info" / "RECORD").read_text()


def test_a_wheel_whose_record_lies_is_refused_naming_the_file(tmp_path: Path) -> None:
    w = tmp_path / "wheels"
    liar = _lying_wheel(w)
    alpha = build_wheel(w, "alpha", "1.0")
    lock = lock_for(None, "", [], local=[(alpha, alpha.name), (liar, liar.name)])
    store = Store.open(tmp_path / "home")
    got = fetch([p.wheels[0] for p in lock.packages], store, base_dir=w).paths()
    install.install(store, replace(lock, packages=lock.packages[:1]), got)  # alpha, into uv's cache
    cached = sorted(p.name for p in uvcache.uv_cache_dir(store).rglob("*.py"))
    with pytest.raises(VerifyError) as info:
        install.install(store, lock, got)
    # Read from the wheel itself, its file is as unlike the RECORD: the wheel's fault, refused at once, and uv's
    # cache (every other venv's files) is not cleared for it.
    assert info.value.message == (
        "liar-1.0-py3-none-any.whl: 1 installed file(s) differ from the sha256 their wheel's RECORD gives, as in the "
        "store's wheel itself (each wheel its locked sha256): the wheel's RECORD is not true to its files; expected "
        "a wheel whose RECORD gives its files' sha256: rebuild or republish it, or lock another; the venv was not "
        "kept")
    assert cached and set(cached) <= {p.name for p in uvcache.uv_cache_dir(store).rglob("*.py")}
    assert list(info.value.details) == [
        f"{SITE}/liar/__init__.py: its RECORD gives {_record_hash(LIE)}, the file has {_record_hash(TRUE)}"]
    assert not store.has("venvs", install.venv_entry(lock.install_digest()))
    assert not list(store.tmp.glob("install-log*"))  # the uv log goes with the venv


def test_a_wheel_with_scripts_entry_points_and_data_installs_without_a_repair(tmp_path: Path) -> None:
    # What uv writes itself (INSTALLER, REQUESTED, console scripts, a #!python script rewritten) it records with
    # its own hash; .data files land outside site-packages (../../../bin, ../../../include): none trips the check.
    w = tmp_path / "wheels"
    tool = build_wheel(w, "tool", "2.0", files={
        "tool/__init__.py": "def main() -> None:\n    print('tool')\n",
        "tool-2.0.dist-info/entry_points.txt": "[console_scripts]\ntool-cli = tool:main\n",
        "tool-2.0.data/scripts/tool-script": "#!python\nimport tool\ntool.main()\n",
        "tool-2.0.data/headers/tool.h": "int tool(void);\n",
        "tool-2.0.data/data/share/tool/notes.txt": "notes\n",
    })
    lock = lock_for(None, "", [], local=[(tool, tool.name)])
    store = Store.open(tmp_path / "home")
    result = install.install(store, lock, fetch([p.wheels[0] for p in lock.packages], store, base_dir=w).paths())
    assert result.note == "" and result.edited == ()
    assert {"bin/tool-cli", "bin/tool-script", "share/tool/notes.txt"} <= set(result.manifest.entries)
    assert any(p.startswith("include/") and p.endswith("/tool.h") for p in result.manifest.entries)


@pytest.mark.parametrize(("lines", "found", "unlike"), [
    # Held: the hash RECORD gives; RECORD's own line, another algorithm and a path the venv lacks are not held.
    (["a/x.py,{x},2", "a-1.dist-info/RECORD,,", "a/y.py,sha384=abc,2", "a/gone.py,{x},2"], {"a/x.py": "x"}, []),
    (["a/x.py,{x},2"], {"a/x.py": "y"}, [("a/x.py", "{x}", "{y}")]),
    # Scripts, relative to site-packages; a name CSV-quoted for its comma; a padded hash.
    (["../../../bin/t,{x},2"], {"bin/t": "y"}, [("bin/t", "{x}", "{y}")]),
    (['"a/b,c.py",{x},2'], {"a/b,c.py": "y"}, [("a/b,c.py", "{x}", "{y}")]),
    # With a quoted name in the RECORD, lines are CSV's: a name holding U+2028 (a line break to str.splitlines).
    (['"a/b,c.py",{x},2', "a/p\u2028q.py,{x},2"], {"a/b,c.py": "x", "a/p\u2028q.py": "y"},
     [("a/p\u2028q.py", "{x}", "{y}")]),
    (["a/x.py,{x}=,2"], {"a/x.py": "x"}, []),
    # A folder or a symlink at a RECORD's path is not a file to hold to it.
    (["a/x.py,{x},2", "a/d,{x},2"], {"a/x.py": "x", "a/d": None}, []),
])
def test_record_hashes_hold_each_file_to_its_record(lines: list[str], found: dict[str, str | None],
                                                    unlike: list[tuple[str, str, str]]) -> None:
    spelled = {"{x}": _record_hash(b"x"), "{y}": _record_hash(b"y")}
    site = "lib/python3.11/site-packages/"
    record = "".join(line.replace("{x}", spelled["{x}"]) + "\n" for line in lines)
    records = uvcache.RecordHashes()
    records.add(site, "a-1.dist-info", record.encode())
    entries = {(p if p.startswith("bin/") else site + p): f"f - {hashlib.sha256(v.encode()).hexdigest()}" if v else "d"
               for p, v in found.items()}
    assert records.unlike(entries) == [
        (p if p.startswith("bin/") else site + p, spelled[g], spelled[f]) for p, g, f in unlike]


def test_a_path_two_dists_install_may_hold_either_ones_bytes() -> None:
    # An allowed overlap: the venv holds the first dist's bytes (install._keep_allowed_overlaps), the second's
    # RECORD gives its own.
    site = "lib/python3.11/site-packages/"
    records = uvcache.RecordHashes()
    records.add(site, "a-1.dist-info", f"shared.py,{_record_hash(b'a')},1\n".encode())
    records.add(site, "b-1.dist-info", f"shared.py,{_record_hash(b'b')},1\n".encode())
    for held in (b"a", b"b"):
        assert records.unlike({f"{site}shared.py": f"f - {hashlib.sha256(held).hexdigest()}"}) == []
    assert records.unlike({f"{site}shared.py": f"f - {hashlib.sha256(b'c').hexdigest()}"}) == [
        (f"{site}shared.py", " or ".join(sorted([_record_hash(b"a"), _record_hash(b"b")])), _record_hash(b"c"))]


def test_a_modified_store_venv_names_the_repair_of_the_envs_that_use_it(tmp_path: Path) -> None:
    # Removing the folder, as the message once said, took the venv from every generation that uses it.
    w = tmp_path / "wheels"
    first, _ = _locks(w)
    store = Store.open(tmp_path / "home")
    venv = _sync(store, "demo", first, w)
    _sync(store, "other", first, w)
    init = venv / SITE / "alpha" / "__init__.py"
    init.chmod(0o644)
    init.write_text("edited\n")
    with pytest.raises(VerifyError) as info:
        install.install(store, first, {})
    recorded = digest.stored_manifest(venv)
    assert recorded is not None
    found = info.value.message.split("found ")[1].split(")")[0]
    assert info.value.message == (
        f"{venv}: store venv was modified after it was built (recorded {recorded.digest}, found {found}); it is the "
        "venv of generations demo/1, other/1: `envlock verify demo --repair` builds it anew (and every venv sharing "
        "its modified files), then sync again")
    assert list(info.value.details) == [f"~ {SITE}/alpha/__init__.py"]
