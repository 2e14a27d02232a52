"""``envlock export`` / ``import``: a lock's closure carried to a fresh store and synced there offline,
after its nightly left the index; tampered and escaping members refused by name."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import backend_wheels
from envlock.bundle import MANIFEST
from envlock.lockfile import read_lock
from envlock.store import Store
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.sglike import commit_all, init_repo, write
from kit.wheels import build_wheel

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
def synced(ws, cli, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Synced]:  # type: ignore[no-untyped-def]
    """An env with a torch nightly from a hash-less index (and, if asked, a local build) synced."""
    build = getattr(request, "param", False)
    server = IndexServer(tmp_path / "served")
    server.add_index("pt", hashes=False)
    nightly = build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260305+cu130", tag=TAG)
    server.add("pt", nightly, build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260306+cu130", tag=TAG))
    server.add_dir("pypi", backend_wheels())
    server.start()
    lines = _tiny_project(ws.root, tmp_path / "repos") if build else ""
    ws.write_spec("e", _spec(server, "2026-03-05", lines))
    r = cli("sync", "e")
    assert r.code == 0, r.err
    yield Synced(server, ws.root, ws.root / "locks" / "pylock.e.toml", nightly.name)
    server.stop()


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_export_import_into_a_fresh_store_syncs_offline_to_the_recorded_digest(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = read_lock(synced.lock)
    assert recorded.venv_digest is not None and recorded.builds
    del synced.server.indexes["pt"].files[synced.nightly]  # the index moved on
    bundle = tmp_path / "e.tar"
    r = cli("export", "e", "--to", str(bundle), "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    # The build; its source's checkout, its patched tree and its FetchContent checkout; the lock's 2
    # wheels and the setuptools wheel its build installs.
    assert result["entries"] == {"builds": 1, "sources": 3, "wheels": 3}
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
    assert {k.split("/")[1].split("-")[0] for k in keys if k.startswith("sources/")} == {"git", "patched"}
    # Imported again: nothing new, every file still checked.
    again = json.loads(cli("import", str(bundle), "--json").out)
    assert again["added"] == {} and again["present"] == sum(result["entries"].values())
    assert json.loads(cli("pins", "e", "--json").out)["pins"][0]["path"] == imported["lock"]


def _export_again(cli, tmp_path: Path) -> bytes:  # type: ignore[no-untyped-def]
    again = tmp_path / "again.tar"
    assert cli("export", "e", "--to", str(again)).code == 0
    return again.read_bytes()


def _export_dir(cli, tmp_path: Path) -> tuple[Path, dict]:  # type: ignore[no-untyped-def,type-arg]
    out = tmp_path / "bundle"
    r = cli("export", "e", "--to", str(out))
    assert r.code == 0, r.err
    return out, json.loads((out / MANIFEST).read_text())


def test_a_tampered_member_is_refused_by_name_and_nothing_is_stored(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
def test_a_member_that_would_escape_is_refused_by_name(  # type: ignore[no-untyped-def]
        ws, cli, tmp_path: Path, member: tarfile.TarInfo, said: str) -> None:
    bundle = tmp_path / "evil.tar"
    _tar_with(bundle, [member], b"{}")
    r = cli("import", str(bundle))
    assert r.code == 1
    assert r.err == f"envlock: error: {bundle}: {said}\n"
    assert not (tmp_path / "home" / "v1" / "wheels").exists()


def test_a_manifest_naming_a_path_out_of_its_entry_is_refused(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, manifest = _export_dir(cli, tmp_path)
    manifest["entries"][0]["files"][0]["path"] = "../../escaped.whl"
    (out / MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 1
    assert r.err == (f"envlock: error: {out}: {MANIFEST}: entries[0].files: '../../escaped.whl' is a path with "
                     "'..', '.' or an empty part; expected a relative path inside the bundle\n")
    assert not (tmp_path / "escaped.whl").exists()


def test_a_member_the_manifest_does_not_list_is_refused(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = _export_dir(cli, tmp_path)
    (out / "store" / "extra.whl").write_bytes(b"x")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("import", str(out))
    assert r.code == 1
    assert r.err == (f"envlock: error: {out}: member store/extra.whl is not listed in {MANIFEST}; refused (a bundle "
                     "holds only what its manifest names)\n")


def test_export_refuses_an_existing_target_and_names_missing_entries(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = cli("export", "e", "--to", str(tmp_path / "full"))
    assert r.code == 2
    assert r.err == (f"envlock: error: --to {tmp_path / 'full'}: already exists; expected a new path (a folder, or "
                     "FILE.tar)\n")
    store = Store.open()
    sha = read_lock(synced.lock).packages[0].wheels[0].sha256
    store.remove_entry("wheels", sha)  # fetched again from the index for the export
    assert cli("export", "e", "--to", str(tmp_path / "b")).code == 0
    assert store.has("wheels", sha)


def _elsewhere(synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
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
def test_build_check_offline_after_an_import_rebuilds_the_locks_wheel(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_build_offline_names_a_backend_wheel_the_bundle_lacks(  # type: ignore[no-untyped-def]
        synced: Synced, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
                     "alone); bring it with `envlock export e --to DIR` on a machine that built this lock, then "
                     "`envlock import DIR` here\n"
                     f"  setuptools==84.2.1 (locked sha256: {line.split('sha256:')[1]})\n")
    assert r.out == ""
    # A git input the store lacks is named before anything is planned (here: the FetchContent checkout).
    kdep = read_lock(synced.lock).fetchcontent["tiny"]["kdep"]
    Store.open().remove_entry("sources", f"git-{kdep.commit}")
    r = cli("build", "e", "--check", "--offline")
    assert r.code == 1
    assert r.err == (f"envlock: error: envs/e.toml: --offline, but 1 git or URL input of the builds is not in the "
                     f"store {root}; bring it with `envlock export e --to DIR` on a machine that built this lock, "
                     "then `envlock import DIR` here\n"
                     f"  builds.tiny.fetchcontent.kdep: commit {kdep.commit} of {kdep.git}\n")


@pytest.mark.parametrize("synced", [True], indirect=True)
def test_a_lock_whose_builds_are_pending_is_refused_or_with_allow_pending_exported_with_a_note(  # type: ignore[no-untyped-def]
        synced: Synced, ws, cli, tmp_path: Path) -> None:
    spec = ws.root / "envs" / "e.toml"
    spec.write_text(spec.read_text().replace('[builds.tiny]\nsource = "tiny"\n',
                                             '[builds.tiny]\nsource = "tiny"\nenv = { TINY = "2" }\n'))
    assert cli("lock", "e").code == 0  # the build's inputs moved: pending until `envlock build e`
    r = cli("export", "e", "--to", str(tmp_path / "b.tar"))
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: 1 local build not built for this lock (tiny): "
                                  "the bundle would carry no wheel of it (nor a build record or backend wheels), and a "
                                  "sync of it (`--offline` too) would be refused; build first (`envlock build e`), or "
                                  "export the rest with --allow-pending\n")
    assert not (tmp_path / "b.tar").exists()
    r = cli("export", "e", "--to", str(tmp_path / "b.tar"), "--allow-pending", "--json")
    assert r.code == 0, r.err
    note = ("tiny: not built for this lock, so the bundle carries no wheel of it (nor a build record or backend "
            "wheels): a sync of it, offline too, needs `envlock build e` first")
    assert r.err == f"envlock: note: {note}\n"
    doc = json.loads(r.out)
    assert (doc["pending"], doc["notes"]) == (["tiny"], [note])
    assert "builds" not in doc["entries"] and doc["entries"]["wheels"] == 1  # torch alone
