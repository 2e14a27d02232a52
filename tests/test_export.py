"""``envlock export`` / ``import``: a lock's closure carried to a fresh store and synced there offline,
after its nightly left the index; tampered and escaping members refused by name."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envlock.model.lockfile import read_lock
from envlock.store.bundle import MANIFEST
from envlock.store.store import Store
from kit.index import IndexServer
from kit.locks import lock_for, sha256_of
from kit.sglike import commit_all, init_repo, write
from kit.universe import backend_wheels
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

TAG = "cp311-cp311-manylinux_2_28_x86_64"


@dataclass
class Synced:
    server: IndexServer
    ws: Path
    lock: Path
    nightly: str  # the torch wheel's file name


PATCH = """\
Subject: value two
Why: a test.
Upstream: none
---
diff --git a/tiny.py b/tiny.py
--- a/tiny.py
+++ b/tiny.py
@@ -1 +1 @@
-VALUE = 1
+VALUE = 2
"""


def _spec(server: IndexServer, date: str, build: str) -> str:
    text = (f'[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"\n'
            f'[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
            f'[indexes.pt]\nurl = "{server.url("pt")}"\n'
            f'[packages]\ntorch = {{ nightly = "{date}", local = "cu130", index = "pt" }}\n')
    return text + build


def _tiny_project(ws_root: Path, repos: Path) -> str:
    """A git source (a setuptools project) with one recorded patch, built with a FetchContent input:
    the spec's lines for it."""
    tiny, kdep = repos / "tiny", repos / "kdep"
    init_repo(tiny)
    write(tiny, {"pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                 '"setuptools.build_meta"\n[project]\nname = "tiny"\nversion = "1.0"\n', "tiny.py": "VALUE = 1\n"})
    commit = commit_all(tiny, "tiny")
    init_repo(kdep)
    write(kdep, {"CMakeLists.txt": "# a FetchContent input\n"})
    kdep_commit = commit_all(kdep, "kdep")
    write(ws_root, {"patches/tiny/0001-value-two.patch": PATCH})
    return (f'tiny = {{ build = "tiny" }}\n[sources.tiny]\ngit = "{tiny}"\nrev = "{commit}"\n'
            'patches = ["patches/tiny/0001-value-two.patch"]\n[builds.tiny]\nsource = "tiny"\n'
            f'fetchcontent = {{ kdep = {{ git = "{kdep}", rev = "{kdep_commit}" }} }}\n')


@pytest.fixture
def synced(
        server: IndexServer, ws: ScratchWorkspace, cli: Cli, tmp_path: Path, request: pytest.FixtureRequest) -> Synced:
    """An env with a torch nightly from a hash-less index (and, if asked, a local build) synced."""
    build = getattr(request, "param", False)
    server.add_index("pt", hashes=False)
    nightly = build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260305+cu130", tag=TAG)
    server.add("pt", nightly, build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260306+cu130", tag=TAG))
    server.add_dir("pypi", backend_wheels())
    lines = _tiny_project(ws.root, tmp_path / "repos") if build else ""
    ws.write_spec("e", _spec(server, "2026-03-05", lines))
    r = cli("sync", "e")
    assert r.code == 0, r.err
    return Synced(server, ws.root, ws.root / "locks" / "pylock.e.toml", nightly.name)


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_export_import_into_a_fresh_store_syncs_offline_to_the_recorded_digest(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = read_lock(synced.lock)
    assert recorded.venv_digest is not None and recorded.builds
    del synced.server.indexes["pt"].files[synced.nightly]  # the index moved on
    bundle = tmp_path / "e.tar"
    r = cli("export", "e", "--to", str(bundle), "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    # The build; its source's checkout and its FetchContent checkout (not the patched tree: a build makes it
    # again from the checkout and the patches); the lock's 2 wheels and the setuptools wheel its build installs.
    assert result["entries"] == {"builds": 1, "sources": 2, "wheels": 3}
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(MANIFEST).read())  # type: ignore[union-attr]
    assert {e["kind"] for e in manifest["entries"]} == {"wheels", "builds", "sources"}
    for entry in manifest["entries"]:
        for f in entry["files"]:
            assert f"store/{entry['kind']}/{entry['key']}/{f['path']}" in names
    assert bundle.read_bytes() == _export_again(cli, tmp_path)  # one closure, one tar

    synced.server.stop()  # no index from here on
    shutil.rmtree(synced.ws / "wheelhouse")  # another machine: no local build there either
    shutil.rmtree(tmp_path / "repos")  # nor the git repositories
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(bundle), "--json")
    assert r.code == 0, r.err
    imported = json.loads(r.out)
    assert imported["added"] == result["entries"] and imported["present"] == 0
    r = cli("sync", "e", "--lock", imported["lock"], "--offline", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["venv_digest"] == recorded.venv_digest
    fresh = Store.open()
    keys = {f"{e['kind']}/{e['key']}" for e in manifest["entries"]}
    assert {k for k in keys if k.startswith("sources/")} == {
        f"sources/{p.name}" for p in (fresh.root / "sources").iterdir()}
    assert {k.split("/")[1].split("-")[0] for k in keys if k.startswith("sources/")} == {"git"}
    # Imported again: nothing new, every file still checked.
    again = json.loads(cli("import", str(bundle), "--json").out)
    assert again["added"] == {} and again["present"] == sum(result["entries"].values())
    assert json.loads(cli("pins", "e", "--json").out)["pins"][0]["path"] == imported["lock"]


def _export_again(cli: Cli, tmp_path: Path) -> bytes:
    again = tmp_path / "again.tar"
    assert cli("export", "e", "--to", str(again)).code == 0
    return again.read_bytes()


def _export_dir(cli: Cli, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "bundle"
    r = cli("export", "e", "--to", str(out))
    assert r.code == 0, r.err
    return out, json.loads((out / MANIFEST).read_text())


def test_a_tampered_member_is_refused_by_name_and_nothing_is_stored(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, manifest = _export_dir(cli, tmp_path)
    wheel = next(e for e in manifest["entries"] if e["kind"] == "wheels")
    member = f"store/wheels/{wheel['key']}/{wheel['files'][0]['path']}"
    data = bytearray((out / member).read_bytes())
    data[100] ^= 0xFF
    (out / member).write_bytes(bytes(data))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 1
    assert r.err == (f"envlock: error: {out}: member {member}: sha256 {hashlib.sha256(data).hexdigest()} "
                     f"({len(data)} bytes), the manifest says {wheel['key']} ({len(data)} bytes); refused, "
                     "nothing of the bundle was stored\n")
    assert not (tmp_path / "fresh" / "v1" / "wheels").exists() or not any((tmp_path / "fresh" / "v1" / "wheels")
                                                                          .iterdir())
    assert not (tmp_path / "fresh" / "v1" / "pins").exists()


def _tar_with(path: Path, members: list[tarfile.TarInfo], manifest: bytes) -> None:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isreg() else None)


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(("member", "said"), [
    (_member("../evil.whl"), "member ../evil.whl is a path with '..', '.' or an empty part; refused (it would be "
                             "written outside the bundle)"),
    (_member("store/wheels/../../evil"), "member store/wheels/../../evil is a path with '..', '.' or an empty part; "
                                         "refused (it would be written outside the bundle)"),
    (_member("/etc/evil"), "member /etc/evil is an absolute or malformed path; refused (it would be written outside "
                           "the bundle)"),
    (_member("store/x", tarfile.SYMTYPE, "/etc/passwd"), "member store/x is a symlink; refused (a bundle holds "
                                                         "regular files and folders only)"),
    (_member("store/y", tarfile.LNKTYPE, "envlock-bundle.json"), "member store/y is a hard link; refused (a bundle "
                                                                 "holds regular files and folders only)"),
    (_member("store/dev", tarfile.CHRTYPE), "member store/dev is a device; refused (a bundle holds regular files "
                                            "and folders only)"),
])
def test_a_member_that_would_escape_is_refused_by_name(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, member: tarfile.TarInfo, said: str) -> None:
    bundle = tmp_path / "evil.tar"
    _tar_with(bundle, [member], b"{}")
    r = cli("import", str(bundle))
    assert r.code == 1
    assert r.err == f"envlock: error: {bundle}: {said}\n"
    assert not (tmp_path / "home" / "v1" / "wheels").exists()


def test_a_manifest_naming_a_path_out_of_its_entry_is_refused(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, manifest = _export_dir(cli, tmp_path)
    manifest["entries"][0]["files"][0]["path"] = "../../escaped.whl"
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 1
    assert r.err == (f"envlock: error: {out}: {MANIFEST}: entries[0].files[0].path: '../../escaped.whl' is a path with "
                     "'..', '.' or an empty part; expected a relative path inside the bundle\n")
    assert not (tmp_path / "escaped.whl").exists()


def test_a_member_the_manifest_does_not_list_is_refused(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = _export_dir(cli, tmp_path)
    (out / "store" / "extra.whl").write_bytes(b"x")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 1
    assert r.err == (f"envlock: error: {out}: member store/extra.whl is not listed in {MANIFEST}; refused (a bundle "
                     "holds only what its manifest names)\n")


def test_export_refuses_an_existing_target_and_names_missing_entries(
        synced: Synced, cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = cli("export", "e", "--to", str(tmp_path / "full"))
    assert r.code == 2
    assert r.err == (f"envlock: error: --out {tmp_path / 'full'}: already exists; expected a new path (a folder, or "
                     "FILE.tar)\n")
    r = cli("export", "e", "--out", str(tmp_path / "full" / "x" / "e.tar"))
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"envlock: error: --out {tmp_path / 'full' / 'x' / 'e.tar'}: {tmp_path / 'full' / 'x'} is not "
                     "a folder; expected a new path (a folder, or FILE.tar) under a folder\n")
    store = Store.open()
    sha = read_lock(synced.lock).packages[0].wheels[0].sha256
    store.remove_entry("wheels", sha)  # fetched again from the index for the export
    assert cli("export", "e", "--to", str(tmp_path / "b")).code == 0
    assert store.has("wheels", sha)
    # A .tar in folders not made yet: made, as a folder bundle's are.
    r = cli("export", "e", "--out", str(tmp_path / "new" / "folders" / "e.tar"))
    assert r.code == 0, r.err
    assert (tmp_path / "new" / "folders" / "e.tar").is_file()


def _elsewhere(synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               bundle: Path) -> Path:
    """``bundle`` imported on "another machine": the index stopped, the git repositories gone, no
    wheelhouse, a fresh store and an empty uv cache. The fresh store's root."""
    synced.server.stop()
    shutil.rmtree(tmp_path / "repos")
    shutil.rmtree(synced.ws / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "empty-uv-cache"))
    r = cli("import", str(bundle))
    assert r.code == 0, r.err
    return Store.open().root


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_build_check_offline_after_an_import_rebuilds_the_locks_wheel(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = read_lock(synced.lock).builds["tiny"]
    bundle = tmp_path / "e.tar"
    assert cli("export", "e", "--to", str(bundle)).code == 0
    _elsewhere(synced, cli, tmp_path, monkeypatch, bundle)
    r = cli("build", "e", "--check", "--offline")
    assert r.code == 0, r.err
    assert r.out == (f"tiny: unchanged (from the store) wheelhouse/{recorded.wheel} sha256 {recorded.sha256[:16]} "
                     f"inputs {recorded.input_digest[:23]}\n"
                     f"tiny: reproducible (rebuilt bit-identical to the lock's wheel, sha256 {recorded.sha256[:16]})\n"
                     "0 rebuilt, 1 reused; 1 built again from scratch to check\n")
    assert r.err == ""
    r = cli("build", "e", "--check", "--offline", "--json")
    assert r.code == 0, r.err
    check = json.loads(r.out)["checks"][0]
    assert (check["expected-sha256"], check["actual-sha256"], check["expected-from"]) == (
        recorded.sha256, recorded.sha256, "lock")
    assert sha256_of(synced.ws / "wheelhouse" / recorded.wheel) == recorded.sha256
    # Online, with the index gone, the build requirements cannot be resolved: the way out is named.
    r = cli("build", "e", "--check")
    assert r.code == 1
    assert r.err.startswith("envlock: error: [builds.tiny]: cannot resolve build requirements setuptools (uv pip "
                            "compile exit 2)\n")
    assert r.err.endswith("  without the index: `envlock build e --offline` builds from the build requirements "
                          "the lock records and the store's wheels\n")
    # At once: a refused connection is not retried (uv says "Request failed after N retries" when it is).
    assert "Connection refused" in r.err and "retries" not in r.err


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_build_offline_names_a_backend_wheel_the_bundle_lacks(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = read_lock(synced.lock).builds["tiny"].requirements[0]
    out, manifest = _export_dir(cli, tmp_path)
    backend = next(e for e in manifest["entries"] if e["kind"] == "wheels"
                   and e["files"][0]["path"].startswith("setuptools-"))
    manifest["entries"].remove(backend)
    (out / MANIFEST).write_text(json.dumps(manifest))
    shutil.rmtree(out / "store" / "wheels" / backend["key"])
    root = _elsewhere(synced, cli, tmp_path, monkeypatch, out)
    r = cli("build", "e", "--check", "--offline")
    assert r.code == 1
    assert r.err == (f"envlock: error: [builds.tiny]: --offline, but the store {root} holds no wheel for python 3.11 "
                     "on this machine of 1 build requirement (a build installs its backend from the store's wheels "
                     "alone); bring it with `envlock export e --out DIR` on a machine that built this lock, then "
                     "`envlock import DIR` here\n"
                     f"  setuptools==84.2.1 (locked sha256: {line.split('sha256:')[1]})\n")
    assert r.out == ""
    # A git input the store lacks is named before anything is planned (here: the FetchContent checkout).
    kdep = read_lock(synced.lock).fetchcontent["tiny"]["kdep"]
    Store.open().remove_entry("sources", f"git-{kdep.commit}")
    r = cli("build", "e", "--check", "--offline")
    assert r.code == 1
    assert r.err == (f"envlock: error: envs/e.toml: --offline, but 1 git or URL input of the builds is not in the "
                     f"store {root}; bring it with `envlock export e --out DIR` on a machine that built this lock, "
                     "then `envlock import DIR` here\n"
                     f"  builds.tiny.fetchcontent.kdep: commit {kdep.commit} of {kdep.git}\n")


# -- hostile bundles (issue 23): each reproduces an attack as it was found -------------------


def _small_bundle(tmp_path: Path, env: str = "demo") -> tuple[dict[str, Any], dict[str, bytes]]:
    """A whole bundle of one wheel and its lock, made by hand: (its manifest, its members)."""
    wheel = build_wheel(tmp_path / "small", "tinydep", "1.0")
    lock = lock_for(None, "pypi", [], env=env, local=[(wheel, f"wheels/{wheel.name}")]).to_toml().encode()
    name = "pylock.demo.toml"  # whatever the env (an attacker's is no env name)
    data = wheel.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    manifest: dict[str, Any] = {
        "format": "envlock-bundle", "version": 1, "env": env,
        "lock": {"path": name, "sha256": hashlib.sha256(lock).hexdigest(), "label": "by hand"},
        "entries": [{"kind": "wheels", "key": sha, "dirs": [], "links": [],
                     "files": [{"path": wheel.name, "sha256": sha, "size": len(data), "executable": False}]}]}
    return manifest, {name: lock, f"store/wheels/{sha}/{wheel.name}": data}


def _write_tar(path: Path, manifest: dict[str, Any] | bytes, members: dict[str, bytes],
               extra: Sequence[tuple[str, bytes]] = ()) -> Path:
    text = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    with tarfile.open(path, "w:", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(MANIFEST, text), *members.items(), *extra]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _stored(home: Path) -> list[str]:
    """What a store at ``home`` holds of entries and pins."""
    root = home / "v1"
    return sorted(f"{kind}/{p.name}" for kind in ("wheels", "builds", "sources", "pins") if (root / kind).is_dir()
                  for p in (root / kind).iterdir())


def _lock_of(manifest: dict[str, Any], members: dict[str, bytes], data: bytes) -> None:
    members[manifest["lock"]["path"]] = data
    manifest["lock"]["sha256"] = hashlib.sha256(data).hexdigest()


def _nested(manifest: dict[str, Any], members: dict[str, bytes]) -> bytes:
    text = json.dumps({**manifest, "env": "@"})
    return text.replace('"@"', "[" * 100_000 + "]" * 100_000).encode()


def _set(path: str, value: object) -> Callable[[dict[str, Any], dict[str, bytes]], dict[str, Any]]:
    """A change of the manifest: ``value`` at the dotted ``path`` (list indexes as numbers)."""
    def change(manifest: dict[str, Any], members: dict[str, bytes]) -> dict[str, Any]:
        *where, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node: Any = manifest
        for part in where:
            node = node[part]
        node[last] = value
        return manifest
    return change


def _not_utf8(manifest: dict[str, Any], members: dict[str, bytes]) -> dict[str, Any]:
    _lock_of(manifest, members, b'lock-version = "1.0"\n# \xff\xfe\n')
    return manifest


def _twice(manifest: dict[str, Any], members: dict[str, bytes]) -> dict[str, Any]:
    name = next(n for n in members if n.startswith("store/"))
    members[name + "\0twice"] = b"other bytes"  # written under ``name`` again by _write_tar's caller
    return manifest


def _long_name(manifest: dict[str, Any], members: dict[str, bytes]) -> dict[str, Any]:
    entry = manifest["entries"][0]
    old = entry["files"][0]["path"]
    entry["files"][0]["path"] = "x" * 300  # more than a file system takes in one name
    members[f"store/wheels/{entry['key']}/{'x' * 300}"] = members.pop(f"store/wheels/{entry['key']}/{old}")
    return manifest


WHEEL = "tinydep-1.0-py3-none-any.whl"


@pytest.mark.parametrize(("change", "said"), [
    (_set("entries.0.files.0.size", -5),
     "{m}: entries[0].files[0].size: found -5; expected a whole number of bytes (0 or more)"),
    (_set("entries.0.files.0.size", 895.9),
     "{m}: entries[0].files[0].size: found 895.9; expected a whole number of bytes (0 or more)"),
    (_set("entries.0.files.0.size", True),
     "{m}: entries[0].files[0].size: found true; expected a whole number of bytes (0 or more)"),
    (_set("entries.0.files.0.executable", "no"),
     "{m}: entries[0].files[0].executable: found 'no'; expected true or false"),
    (_set("owner", "root"), "{m}: unknown key 'owner'; expected only entries, env, format, lock, version"),
    (_set("lock.signed", True), "{m}: lock: unknown key 'signed'; expected only label, path, sha256"),
    (_set("entries.0.mode", 0o777), "{m}: entries[0]: unknown key 'mode'; expected only dirs, files, key, kind, links"),
    (_set("entries.0.files.0.uid", 0),
     "{m}: entries[0].files[0]: unknown key 'uid'; expected only executable, path, sha256, size"),
    (_set("entries.0.files", {}), "{m}: entries[0].files: found an object; expected an array"),
    (_set("entries.0.kind", "venvs"), "{m}: entries[0].kind: found 'venvs'; expected builds, sources or wheels"),
    (_set("entries.0.key", "x" * 64), "{m}: entries[0].key: found '" + "x" * 64 + "'; expected 64 lowercase hex "
                                      "digits (a sha256)"),
    (_set("env", "../../x"), "{m}: env: found '../../x'; expected an env name (letters, digits, '.', '_', '-')"),
    (_nested, "{m}: not JSON (nested too deeply)"),
    (_not_utf8, "{b}: pylock.demo.toml: not UTF-8 (byte 0xff at offset 23); expected a lock written by "
                "`envlock lock`"),
    (_twice, "{b}: member store/wheels/{sha}/" + WHEEL + " appears twice; refused (a bundle holds each member once)"),
    (_long_name, "{b}: wheels/{sha}/" + "x" * 300 + ": cannot be made in the store (File name too long); refused, "
                 "nothing of the bundle was stored"),
], ids=["size-5", "size895.9", "size-true", "executable-no", "unknown-key", "unknown-lock-key", "unknown-entry-key",
        "unknown-file-key", "files-object", "kind-venvs", "key-not-hex", "env-escapes", "env-nested-100000",
        "lock-not-utf8", "duplicate-member", "name-too-long"])
def test_an_import_refuses_a_bad_bundle_in_one_line_naming_it_and_stores_nothing(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path,
        change: Callable[[dict[str, Any], dict[str, bytes]], dict[str, Any] | bytes], said: str) -> None:
    manifest, members = _small_bundle(tmp_path)
    sha = manifest["entries"][0]["key"]
    changed = change(manifest, members)
    extra = [(n.removesuffix("\0twice"), members.pop(n)) for n in list(members) if n.endswith("\0twice")]
    bundle = _write_tar(tmp_path / "b.tar", changed, members, extra)
    r = cli("import", str(bundle))
    assert (r.code, r.out) == (1, "")
    assert r.err == "envlock: error: " + said.format(m=f"{bundle}: {MANIFEST}", b=bundle, sha=sha) + "\n"
    assert _stored(tmp_path / "home") == []


def test_a_bundle_for_an_env_name_that_escapes_stores_nothing(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> None:
    manifest, members = _small_bundle(tmp_path, env="../../x")  # the lock says so too
    bundle = _write_tar(tmp_path / "b.tar", manifest, members)
    r = cli("import", str(bundle))
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {bundle}: {MANIFEST}: env: found '../../x'; expected an env name (letters, "
                     "digits, '.', '_', '-')\n")
    assert _stored(tmp_path / "home") == []  # was: its wheel stored, then refused at the pin


def test_a_tar_bundle_cut_anywhere_is_refused_in_one_line_or_whole(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> None:
    manifest, members = _small_bundle(tmp_path)
    whole = _write_tar(tmp_path / "whole.tar", manifest, members).read_bytes()
    with tarfile.open(tmp_path / "whole.tar") as tar:
        end = max(m.offset_data + -(-m.size // 512) * 512 for m in tar.getmembers())  # where the end blocks start
    cuts = sorted({*range(0, len(whole), 256), *range(100, end, 512), end + 1, end + 1024})
    said: dict[str, list[int]] = {}
    for cut in cuts:
        bundle = tmp_path / f"cut-{cut}.tar"
        bundle.write_bytes(whole[:cut])
        r = cli("import", str(bundle))
        if cut >= end + 1024:  # the end-of-archive blocks are there: only padding was cut
            assert r.code == 0, (cut, r.err)
            continue
        assert (r.code, r.out, _stored(tmp_path / "home")) == (2, "", []), cut  # no bundle: bad input
        head = f"envlock: error: {bundle}: not a whole tar ("
        assert r.err.startswith(head), (cut, r.err)
        assert r.err.endswith("); expected a .tar written by `envlock export`\n"), (cut, r.err)
        assert r.err.count("\n") == 1, r.err
        said.setdefault(r.err[len(head):].rpartition(")")[0], []).append(cut)
    assert _stored(tmp_path / "home") == ["pins/demo", f"wheels/{manifest['entries'][0]['key']}"]
    assert said.pop("empty file") == [0]
    assert {c for c in cuts if 0 < c < 512} <= set(said.pop("truncated header"))
    assert set(said) <= {"unexpected end of data", "missing or bad subsequent header", "empty header",
                         "cut short: no end-of-archive blocks after its last member"}
    short = said["cut short: no end-of-archive blocks after its last member"]
    assert [c for c in short if c > end] == [c for c in cuts if end < c < end + 1024]  # in the end blocks


@pytest.mark.parametrize(("given", "said"), [
    ("nosuch.tar", "{p}: no such bundle (expected a folder or a .tar written by `envlock export`)"),
    ("some.py", "{p}: not a whole tar (invalid header); expected a .tar written by `envlock export`"),
    ("folder", f"{{p}}: no {MANIFEST}; expected a folder or tar written by `envlock export`"),
])
def test_an_import_of_what_is_no_bundle_is_bad_input(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, given: str, said: str) -> None:
    (tmp_path / "some.py").write_text("print('not a bundle, though long enough to hold a tar header')\n" * 20)
    (tmp_path / "folder").mkdir()
    r = cli("import", str(tmp_path / given))
    assert (r.code, r.out, r.err) == (2, "", f"envlock: error: {said.format(p=tmp_path / given)}\n")
    assert _stored(tmp_path / "home") == []


def _with_entry(manifest: dict[str, Any], members: dict[str, bytes], key: str, files: dict[str, bytes],
                links: list[tuple[str, str]]) -> None:
    """A ``sources/<key>`` entry of ``files`` and ``links`` added to a bundle."""
    manifest["entries"].append({
        "kind": "sources", "key": key, "dirs": [],
        "files": [{"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "executable": False}
                  for rel, data in files.items()],
        "links": [{"path": path, "target": target} for path, target in links]})
    members.update({f"store/sources/{key}/{rel}": data for rel, data in files.items()})


def test_a_chain_of_links_that_climbs_out_on_disk_is_refused_and_the_pth_never_runs(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's chain: ``u`` is the entry's root on disk, ``u/ESC`` climbs from there to ``/`` (or as
    far up as 9 steps go), and a ``.pth`` through it lands in a venv's site-packages, pointing back at a
    file of the entry. Each link stays inside the entry on paper."""
    venv = tmp_path / "victim"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    marker = tmp_path / "planted-pth-ran"
    home = tmp_path / "fresh"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    work_depth = len((home / "v1" / "tmp" / "work").parts) - 1  # where import assembles an entry
    up9 = Path(*(home / "v1" / "tmp" / "work").parts[:max(1, work_depth + 1 - 9)])  # where u/ESC lands
    rel = site.relative_to(up9).as_posix()
    key = "path-" + "7" * 64
    payload = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n".encode()
    chain = "a/b/c/d/e/f/g/h/u"
    back = "../" * (10 + len(rel.split("/"))) + (home / "v1" / "sources" / key / "payload.pth").as_posix()[1:]
    manifest, members = _small_bundle(tmp_path)
    _with_entry(manifest, members, key, {"payload.pth": payload}, [
        (chain, "../../../../../../../.."),
        (f"{chain}/ESC", "../../../../../../../../.."),
        (f"{chain}/ESC/{rel}/zz.pth", back)])
    bundle = _write_tar(tmp_path / "evil.tar", manifest, members)
    r = cli("import", str(bundle))
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {bundle}: {MANIFEST}: entries[1]: symlink sources/{key}/{chain}/ESC runs "
                     f"through the symlink {chain}; refused (a link is made only in real folders of its entry)\n")
    assert not (site / "zz.pth").exists() and not (site / "zz.pth").is_symlink()
    assert _stored(home) == [] and list((home / "v1" / "tmp").iterdir()) == []
    python = subprocess.run([str(venv / "bin" / "python"), "-c", "print('started')"], capture_output=True, text=True)
    assert python.stdout == "started\n" and not marker.exists()


@pytest.mark.parametrize(("links", "said"), [
    # No link runs through another, and each stays inside on paper; on disk "x" resolves through "a/up"
    # (the entry's root) to its parent.
    ([("a/up", ".."), ("x", "a/up/..")], "symlink sources/{key}/x -> a/up/.. leads out of its entry on disk"),
    ([("a/up", ".."), ("b/x", "../a/up/../y")], "symlink sources/{key}/b/x -> ../a/up/../y leads out of its entry "
                                                "on disk"),
])
def test_a_link_is_resolved_against_what_is_on_disk(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, links: list[tuple[str, str]], said: str) -> None:
    key = "path-" + "7" * 64
    manifest, members = _small_bundle(tmp_path)
    _with_entry(manifest, members, key, {"f": b"x"}, links)
    bundle = _write_tar(tmp_path / "evil.tar", manifest, members)
    r = cli("import", str(bundle))
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {bundle}: " + said.format(key=key)
                     + "; refused, nothing of the bundle was stored\n")
    assert _stored(tmp_path / "home") == [] and list((tmp_path / "home" / "v1" / "tmp").iterdir()) == []


def _replace(out: Path, manifest: dict[str, Any], kind: str, key: str, rel: str, data: bytes | None) -> None:
    """Member ``rel`` of entry ``kind/key`` of the folder bundle ``out`` made ``data`` (None: taken out),
    its manifest record to match (as an attacker would)."""
    entry = next(e for e in manifest["entries"] if (e["kind"], e["key"]) == (kind, key))
    path = out / "store" / kind / key / rel
    entry["files"] = [f for f in entry["files"] if f["path"] != rel]
    if data is None:
        path.unlink()
    else:
        path.write_bytes(data)
        entry["files"].append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                               "executable": False})
    (out / MANIFEST).write_text(json.dumps(manifest))


def _planted(synced: Synced, cli: Cli, tmp_path: Path) -> tuple[Path, dict[str, Any], Path]:
    """The env's bundle with its build's wheel swapped for another of the same name (``wheel.json`` to
    match), and no wheelhouse here (as on another machine): the bundle, its manifest, the planted wheel."""
    recorded = read_lock(synced.lock).builds["tiny"]
    key = recorded.input_digest.removeprefix("sha256:")
    out, manifest = _export_dir(cli, tmp_path)
    evil = build_wheel(tmp_path / "evil", "tiny", "1.0", files={"tiny.py": "VALUE = 666\n"})
    assert evil.name == recorded.wheel
    _replace(out, manifest, "builds", key, recorded.wheel, evil.read_bytes())
    _replace(out, manifest, "builds", key, "wheel.json",
             json.dumps({"sha256": sha256_of(evil), "wheel": evil.name}, sort_keys=True).encode() + b"\n")
    shutil.rmtree(synced.ws / "wheelhouse")
    return out, manifest, evil


def _installed_value(cli: Cli) -> str:
    """What ``tiny.py`` of env e's current venv holds."""
    r = cli("path", "e")
    assert r.code == 0, r.err
    return next(Path(r.out.strip()).glob("lib/python3*/site-packages/tiny.py")).read_text()


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_a_planted_build_the_bundles_lock_does_not_vouch_for_is_refused(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = read_lock(synced.lock).builds["tiny"]
    key = recorded.input_digest.removeprefix("sha256:")
    out, _, evil = _planted(synced, cli, tmp_path)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {out}: builds/{key}: wheel {evil.name} sha256 {sha256_of(evil)}: the "
                     f"bundle's lock records sha256 {recorded.sha256} for this input digest (builds.tiny), and no "
                     "build record signed by a trusted key comes with it; refused, nothing of the bundle was "
                     "stored\n")
    assert _stored(tmp_path / "fresh") == []
    # Was: "tiny: unchanged (from the store)", the lock's sha256 replaced by the planted wheel's, and installed.
    r = cli("build", "e")
    assert r.code == 0, r.err
    assert read_lock(synced.lock).builds["tiny"] == recorded
    assert cli("sync", "e").code == 0
    assert _installed_value(cli) == "VALUE = 2\n"


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_build_never_records_a_stored_build_the_lock_does_not_vouch_for(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundle's own lock vouches for the planted wheel, so it imports (a pin is the sender's
    lock); the workspace's lock records another wheel for the same inputs: build and sync refuse."""
    recorded = read_lock(synced.lock).builds["tiny"]
    key = recorded.input_digest.removeprefix("sha256:")
    out, manifest, evil = _planted(synced, cli, tmp_path)
    planted = sha256_of(evil)
    lock_member = out / manifest["lock"]["path"]
    lock_member.write_text(lock_member.read_text().replace(recorded.sha256, planted))
    manifest["lock"]["sha256"] = sha256_of(lock_member)
    (out / "store" / "wheels" / planted).mkdir()
    shutil.copyfile(evil, out / "store" / "wheels" / planted / evil.name)
    manifest["entries"].append({"kind": "wheels", "key": planted, "dirs": [], "links": [], "files": [
        {"path": evil.name, "sha256": planted, "size": evil.stat().st_size, "executable": False}]})
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    assert cli("import", str(out)).code == 0
    before = synced.lock.read_bytes()
    said = (f"envlock: error: locks/pylock.e.toml: builds.tiny: the store holds wheel sha256 {planted} for input "
            f"digest {recorded.input_digest[:23]} (builds/{key}), the lock records {recorded.sha256} for these very "
            "inputs; not taken (the store's build is not the lock's: imported, or not reproducible)\n"
            "  to build it again here and replace the store's: `envlock build e tiny --rebuild`\n")
    r = cli("build", "e")
    assert (r.code, r.out, r.err) == (1, "", said)
    assert synced.lock.read_bytes() == before
    assert not (synced.ws / "wheelhouse" / evil.name).exists()
    r = cli("sync", "e")
    assert (r.code, r.err) == (1, said)
    assert not (tmp_path / "fresh" / "v1" / "envs" / "e").exists()
    r = cli("build", "e", "tiny", "--rebuild")
    assert r.code == 0, r.err
    assert r.out.startswith(f"tiny: built wheelhouse/{evil.name} sha256 {recorded.sha256[:16]} ")
    assert synced.lock.read_bytes() == before
    assert cli("sync", "e").code == 0
    assert _installed_value(cli) == "VALUE = 2\n"


@pytest.mark.parametrize("synced", [True], indirect=True)
@pytest.mark.parametrize("signer", ["trusted", "stranger", "trusted-other-build"])
def test_a_build_the_lock_does_not_vouch_for_comes_in_with_a_trusted_signed_record(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signer: str) -> None:
    """As from a cache: a build record signed by a trusted key naming the entry's input digest and wheel."""
    from envlock.cache.signing import generate, sign_record

    recorded = read_lock(synced.lock).builds["tiny"]
    key = recorded.input_digest.removeprefix("sha256:")
    out, manifest, evil = _planted(synced, cli, tmp_path)
    ci, stranger = generate("ci"), generate("stranger")
    digest = recorded.input_digest if signer != "trusted-other-build" else "sha256:" + "0" * 64
    record = {"input-digest": digest, "name": "tiny", "wheel": evil.name, "sha256": sha256_of(evil),
              "size": evil.stat().st_size}
    _replace(out, manifest, "builds", key, "record.json", sign_record(record, stranger if signer == "stranger" else ci))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out), "--trusted-key", str(ci.public()))
    if signer == "trusted":
        assert r.code == 0, r.err
        assert (tmp_path / "fresh" / "v1" / "builds" / key / evil.name).read_bytes() == evil.read_bytes()
        return
    why = (f"its signed build record is of another build (input digest {digest[:23]}, wheel sha256 "
           f"{sha256_of(evil)})" if signer != "stranger" else
           "its build record is refused (record.json: signed by 'stranger', which is not a trusted key (trusted: "
           "'ci'))")
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {out}: builds/{key}: wheel {evil.name} sha256 {sha256_of(evil)}: the bundle's "
                     f"lock records sha256 {recorded.sha256} for this input digest (builds.tiny), and {why}; refused, "
                     "nothing of the bundle was stored\n")
    assert _stored(tmp_path / "fresh") == []


def _git_tree_id(tree: Path, scratch: Path) -> str:
    """The id git gives the tree of the files under ``tree``."""
    env = {**os.environ, "GIT_DIR": str(scratch / ".git"), "GIT_WORK_TREE": str(tree)}
    subprocess.run(["git", "init", "-q", str(scratch)], check=True)
    subprocess.run(["git", "add", "-A", "-f", "."], cwd=tree, env=env, check=True)
    return subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("synced", [True], indirect=True)
@pytest.mark.parametrize("how", ["poisoned", "no-commit-object"])
def test_a_git_source_is_held_to_its_commit_at_import(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    from envlock.store.trees import tree_digest

    commit = read_lock(synced.lock).sources["tiny"].commit
    assert commit is not None
    key = f"git-{commit}"
    out, manifest = _export_dir(cli, tmp_path)
    tree = out / "store" / "sources" / key / "tree"
    if how == "poisoned":
        _replace(out, manifest, "sources", key, "tree/tiny.py", b"VALUE = 666\n")
        _replace(out, manifest, "sources", key, "tree-digest", tree_digest(tree, links_inside=False).encode() + b"\n")
        names = subprocess.run(["git", "-C", str(tmp_path / "repos" / "tiny"), "rev-parse", f"{commit}^{{tree}}"],
                               check=True, capture_output=True, text=True).stdout.strip()
        why = (f"its files make git tree {_git_tree_id(tree, tmp_path / 'scratch')}, but commit {commit[:12]} "
               f"names tree {names}")
    else:  # as an envlock before this check exported it
        _replace(out, manifest, "sources", key, "commit", None)
        why = "it holds no commit object to check its tree against (export it again with this envlock)"
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert (r.code, r.out) == (1, "")
    assert r.err == f"envlock: error: {out}: sources/{key}: {why}; refused, nothing of the bundle was stored\n"
    assert _stored(tmp_path / "fresh") == []


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_a_patched_tree_is_never_taken_from_a_bundle(
        synced: Synced, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A patched tree is keyed by its source's digest and its patches' sha256, which no import can check:
    a bundle carries none, and one that does (an older envlock's, or a planted one) is left out."""
    out, manifest = _export_dir(cli, tmp_path)
    assert not [e for e in manifest["entries"] if e["key"].startswith("patched-")]
    key = "patched-" + "5" * 64
    members: dict[str, bytes] = {}
    _with_entry(manifest, members, key, {"tree/tiny.py": b"VALUE = 666\n", "tree-digest": b"sha256:x\n"}, [])
    for name, data in members.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 0, r.err
    assert r.err == (f"envlock: note: {out}: sources/{key} not stored: a patched tree is made again from its source "
                     "and the workspace's patches when a build needs it\n")
    assert not (tmp_path / "fresh" / "v1" / "sources" / key).exists()


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_export_leaves_out_a_stored_build_the_lock_does_not_vouch_for(
        synced: Synced, cli: Cli, tmp_path: Path) -> None:
    """A store whose build of the lock's inputs is another wheel (a build that does not reproduce): an
    importer would refuse it, so the bundle goes without it (the lock's wheel is carried either way)."""
    recorded = read_lock(synced.lock).builds["tiny"]
    key = recorded.input_digest.removeprefix("sha256:")
    info = Store.open().path("builds", key) / "wheel.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "sha256": "f" * 64}))
    out = tmp_path / "bundle"
    r = cli("export", "e", "--to", str(out), "--json")
    assert r.code == 0, r.err
    assert r.err == (f"envlock: note: builds/{key} left out: the store's build of tiny is wheel sha256 {'f' * 64}, "
                     f"the lock's is {recorded.sha256} (the build is not reproducible?)\n")
    assert json.loads(r.out)["entries"] == {"sources": 2, "wheels": 3}
    entries = json.loads((out / MANIFEST).read_text())["entries"]
    assert recorded.sha256 in {e["key"] for e in entries if e["kind"] == "wheels"}


def _small_filesystem(path: Path, size: str) -> Iterator[None]:
    """A tmpfs of ``size`` mounted at ``path`` for the block (skips the test where mount is not allowed)."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root, or CAP_SYS_ADMIN); the RLIMIT_FSIZE case runs")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("synced", [True], indirect=True)
@pytest.mark.parametrize("how", ["file-size-limit", "full-tmpfs"])
@pytest.mark.parametrize("form", ["e.tar", "e-folder"])
def test_export_that_cannot_write_names_the_file_and_leaves_nothing(
        synced: Synced, cli: Cli, tmp_path: Path, how: str, form: str) -> None:
    """A full disk (ENOSPC, on a 64 kB tmpfs) or a file-size limit (EFBIG, RLIMIT_FSIZE in a child
    envlock: portable, no privilege): the error names the bundle and the member it was writing."""
    whole = tmp_path / "whole.tar"
    assert cli("export", "e", "--to", str(whole)).code == 0
    with tarfile.open(whole) as tar:
        members = {m.name for m in tar.getmembers()}
    assert whole.stat().st_size > 64 << 10  # does not fit, either way
    if how == "full-tmpfs":
        mounted = contextlib.contextmanager(_small_filesystem)(tmp_path / "small", "64k")
        with mounted:
            to = tmp_path / "small" / form
            r = cli("export", "e", "--to", str(to))
            left = sorted(p.name for p in (tmp_path / "small").iterdir())
        code, err, reason = r.code, r.err, "No space left on device"
    else:
        to = tmp_path / form

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 10, 32 << 10))

        child = subprocess.run([sys.executable, "-m", "envlock", "export", "e", "--to", str(to)], preexec_fn=limit,
                               capture_output=True, text=True)
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".e", "e")))
        code, err, reason = child.returncode, child.stderr, "File too large"
    assert code == 1, err
    head, _, tail = err.partition(": cannot write member ")
    assert head == f"envlock: error: {to}", err
    member, _, rest = tail.partition(" ")
    assert member in members or member == MANIFEST, err
    assert rest == f"({reason}); nothing was written, the partial bundle was removed\n", err
    assert left == []


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_a_lock_whose_builds_are_pending_is_refused_or_with_allow_pending_exported_with_a_note(
        synced: Synced, cli: Cli, tmp_path: Path) -> None:
    spec = synced.ws / "envs" / "e.toml"
    spec.write_text(spec.read_text().replace('[builds.tiny]\nsource = "tiny"\n',
                                             '[builds.tiny]\nsource = "tiny"\nenv = { TINY = "2" }\n'))
    assert cli("lock", "e").code == 0  # the build's inputs moved: pending until `envlock build e`
    r = cli("export", "e", "--out", str(tmp_path / "b.tar"))
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: 1 local build not built for this lock (tiny): "
                                  "the bundle would carry no wheel of it (nor a build record or backend wheels), and a "
                                  "sync of it (`--offline` too) would be refused; build first (`envlock build e`), or "
                                  "export the rest with --allow-pending\n")
    assert not (tmp_path / "b.tar").exists()
    r = cli("export", "e", "--out", str(tmp_path / "b.tar"), "--allow-pending", "--json")
    assert r.code == 0, r.err
    note = ("tiny: not built for this lock, so the bundle carries no wheel of it (nor a build record or backend "
            "wheels): a sync of it, offline too, needs `envlock build e` first")
    assert r.err == f"envlock: note: {note}\n"
    doc = json.loads(r.out)
    assert (doc["pending"], doc["notes"]) == (["tiny"], [note])
    assert "builds" not in doc["entries"] and doc["entries"]["wheels"] == 1  # torch alone
