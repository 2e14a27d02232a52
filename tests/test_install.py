"""Install with the real pinned uv from store wheels; two homes and two uv caches give one venv."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from packaging.tags import sys_tags

from envlock import runner
from envlock.errors import InstallError, VerifyError
from envlock.install import digest, install, uvcache
from envlock.install.fetch import fetch
from envlock.model import target
from envlock.model.lockfile import Lock
from envlock.store.store import Store
from kit.index import IndexServer
from kit.locks import lock_for
from kit.processes import wait_for, waits_on_flock
from kit.wheels import build_wheel

#: Where the running interpreter's venvs keep packages (the locks here are for it).
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IndexServer, Lock]]:
    root = tmp_path_factory.mktemp("install-index")
    server = IndexServer(root / "served").start()
    wheels = root / "wheels"
    files = [
        build_wheel(wheels, "alpha", "1.0", files={
            "alpha/__init__.py": "from beta import B\nA = 'alpha'\n",
            "alpha-1.0.data/scripts/alpha-tool": "#!python\nimport alpha\nprint(alpha.A)\n",
        }),
        build_wheel(wheels, "beta", "2.0", requires=["gamma>=9"],  # gamma is not locked: --no-deps
                    files={"beta/__init__.py": "B = 'beta'\n", "beta/data.bin": os.urandom(50_000)}),
        build_wheel(wheels, "native-thing", "0.3", tag=str(next(iter(sys_tags()))),  # this machine's own
                    files={"native_thing/__init__.py": "", "native_thing/_lib.so": os.urandom(20_000)}),
    ]
    server.add("pypi", *files)
    yield server, lock_for(server, "pypi", files)
    server.stop()


@contextlib.contextmanager
def _uv_calls() -> Iterator[list[list[str]]]:
    """Record the arguments of every uv run inside the block (the real uv still runs)."""
    calls: list[list[str]] = []
    real = runner.uv

    def spy(args: Sequence[str | os.PathLike[str]], **kwargs: object) -> runner.Result:
        calls.append([str(a) for a in args])
        return real(args, **kwargs)  # type: ignore[arg-type]

    runner.uv = spy
    try:
        yield calls
    finally:
        runner.uv = real


def _sync_venv(server: IndexServer, home: Path, lock: Lock, cache: Path,
               monkeypatch: pytest.MonkeyPatch) -> install.InstallResult:
    monkeypatch.setenv("UV_CACHE_DIR", str(cache))
    store = Store.open(home)
    got = fetch([p.wheels[0] for p in lock.packages], store, base_dir=home)
    asked = len(server.requests)
    with _uv_calls() as calls:
        result = install.install(store, lock, got.paths())
    assert len(server.requests) == asked  # install reads the store only, never the index
    # ... because uv is told so: no index, offline, no resolution, no builds; hard links
    # (not clones: the hash cache vouches for inodes), the store's files themselves.
    (pip,) = [c for c in calls if c[:2] == ["pip", "install"]]
    assert pip[4:10] == ["--link-mode", "hardlink", "--no-index", "--offline", "--no-deps", "--no-build"]
    assert sorted(pip[10:]) == sorted(str(p) for p in got.paths().values())
    return result


def test_installs_exactly_the_locked_wheels(published: tuple[IndexServer, Lock], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server, lock = published
    flushed: list[bool] = []  # each walk: flushed, and before uv's store-naming records were dropped?
    real_manifest = digest.manifest  # what install calls as install.manifest

    def walk(venv: Path, **kw: Any) -> digest.Manifest:
        flushed.append(kw.get("flush", False) and not list(venv.glob(f"{SITE}/*.dist-info/direct_url.json")))
        return real_manifest(venv, **kw)

    monkeypatch.setattr(install, "manifest", walk)
    result = _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    venv = result.venv
    assert result.built and venv == install.venv_path(Store.open(tmp_path / "home"), lock.install_digest())
    assert flushed[-1] and flushed.count(True) == 1  # the venv's walk wrote back its final bytes (not the skeleton's)
    # Run without writing byte-code: a run writes __pycache__ (which the digest leaves out) into the venv, and
    # the checks below are of what the install made.
    out = subprocess.run([venv / "bin" / "alpha-tool"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.stdout == "alpha\n"
    site = venv / SITE
    assert sorted(p.name for p in site.glob("*.dist-info")) == [
        "alpha-1.0.dist-info", "beta-2.0.dist-info", "native_thing-0.3.dist-info",
    ]
    assert not list(site.glob("*.dist-info/direct_url.json"))  # named the store path: dropped
    assert not list(site.glob("*.dist-info/uv_cache.json"))  # holds a ctime: dropped
    for dist in site.glob("*.dist-info"):
        record = (dist / "RECORD").read_text()
        assert "uv_cache.json" not in record and "direct_url.json" not in record
        assert f"{dist.name}/METADATA," in record  # the rest of RECORD is kept
    # Files are hard links into the store's own uv cache (what the hash cache relies on),
    # not clones, and never into the user's uv cache; and they are sealed read-only.
    data = (site / "beta" / "data.bin").stat()
    assert data.st_nlink > 1
    store_cache = uvcache.uv_cache_dir(Store.open(tmp_path / "home"))
    assert any(p.stat().st_ino == data.st_ino for p in store_cache.rglob("data.bin"))
    assert not any(p.stat().st_ino == data.st_ino for p in (tmp_path / "uv-cache").rglob("data.bin"))
    writable = [p for p in venv.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o222]
    assert writable == []
    # Nothing in the venv names this store (the wheels were installed from its files).
    assert not subprocess.run(["grep", "-rl", str(tmp_path / "home"), venv], capture_output=True).stdout
    assert not list(venv.rglob("*.pyc"))
    assert "relocatable = true" in (venv / "pyvenv.cfg").read_text()
    assert digest.stored_manifest(venv) == result.manifest == digest.manifest(venv)
    # No temp litter; the manifest is also kept by digest for later verifies.
    store = Store.open(tmp_path / "home")
    assert list(store.tmp.iterdir()) == [store.partial_dir]
    assert store.has("manifests", result.manifest.digest)
    again = install.install(store, lock, {})
    assert not again.built and again.manifest == result.manifest
    # A reused entry is walked again: one edited since it was built is refused, naming the file.
    (site / "alpha" / "__init__.py").chmod(0o644)  # sealed read-only (root writes anyway)
    with (site / "alpha" / "__init__.py").open("a") as fh:
        fh.write("EDITED = True\n")
    with pytest.raises(VerifyError) as info:
        install.install(store, lock, {})
    found = digest.manifest(venv).digest
    # No generation uses it (none made here): its removal takes no env's venv (test_recordcheck: one that is used).
    assert info.value.message == (f"{venv}: store venv was modified after it was built (recorded "
                                  f"{result.manifest.digest}, found {found}); no generation uses it: remove that "
                                  "folder and sync again")
    assert list(info.value.details) == [f"~ {SITE}/alpha/__init__.py"]


def test_two_homes_cold_and_warm_uv_cache_give_one_venv(published: tuple[IndexServer, Lock], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    server, lock = published
    cache = tmp_path / "uv-cache"
    first = _sync_venv(server, tmp_path / "home-a", lock, cache, monkeypatch)  # cold uv cache (the store's own)
    home_a = Store.open(tmp_path / "home-a")
    assert any(uvcache.uv_cache_dir(home_a).iterdir())
    home_a.remove_entry("venvs", install.venv_entry(lock.install_digest()))
    warm = _sync_venv(server, tmp_path / "home-a", lock, cache, monkeypatch)  # again: its uv cache is warm
    assert warm.built and warm.manifest == first.manifest
    second = _sync_venv(server, tmp_path / "home-b", lock, cache, monkeypatch)  # cold, another store
    third = _sync_venv(server, tmp_path / "home-c", lock, tmp_path / "other-cache", monkeypatch)  # cold again
    assert first.manifest.digest == second.manifest.digest == third.manifest.digest
    # Same relative location under each home: diff -r sees identical trees.
    diff = subprocess.run(["diff", "-r", "--no-dereference", first.venv, second.venv],
                          capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout


def test_lock_python_not_on_this_machine(published: tuple[IndexServer, Lock], tmp_path: Path) -> None:
    _, lock = published
    from dataclasses import replace

    with pytest.raises(InstallError) as info:
        fake = {p.wheels[0].sha256: tmp_path / p.wheels[0].filename for p in lock.packages}
        install.install(Store.open(tmp_path), replace(lock, python="3.99"), fake)
    assert info.value.message == (
        "python 3.99 (the lock's python) is not available on this machine; envlock never downloads "
        "interpreters (UV_PYTHON_DOWNLOADS=never): install it, or lock the env for a python that is here"
    )
    assert not any(Store.open(tmp_path).root.joinpath("venvs").glob("*"))


def test_missing_wheel_is_named_and_leaves_no_entry(published: tuple[IndexServer, Lock], tmp_path: Path) -> None:
    _, lock = published
    store = Store.open(tmp_path)
    with pytest.raises(InstallError) as info:
        install.install(store, lock, {})
    art = lock.packages[0].wheels[0]
    assert str(info.value) == (
        f"{art.filename}: not fetched into the store (sha256 {art.sha256}); expected every locked wheel before install"
    )
    assert not store.has("venvs", install.venv_entry(lock.install_digest()))
    assert list(store.tmp.iterdir()) == []


def test_venvs_are_copies_of_one_uv_made_skeleton(published: tuple[IndexServer, Lock], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    server, lock = published
    result = _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    store = Store.open(tmp_path / "home")
    (skeleton,) = (store.root / "skeletons").iterdir()
    # A second lock reuses the skeleton: one uv venv per interpreter, not per sync.
    smaller = replace(lock, packages=lock.packages[:1])
    with _uv_calls() as calls:
        install.install(store, smaller, {lock.packages[0].wheels[0].sha256: install_path(store, lock)})
    assert [c[:2] for c in calls] == [["pip", "install"]]  # no `uv venv`
    assert list((store.root / "skeletons").iterdir()) == [skeleton]
    # The copy is what `uv venv` makes in place: same digest as a venv made there directly.
    direct = tmp_path / "direct"
    python = target.find_python(lock.python)
    out = runner.uv(["venv", "--relocatable", "--prompt", "envlock", "--python", str(python), str(direct)])
    assert out.ok, out.tail()
    copied = tmp_path / "copied"
    shutil.copytree(skeleton, copied, symlinks=True)
    assert digest.manifest(copied) == digest.manifest(direct)
    assert "prompt = envlock" in (result.venv / "pyvenv.cfg").read_text()
    assert not (result.venv / ".envlock-skeleton-digest").exists()
    # Its files are hard links, as uv's are to its cache (no bytes copied, inodes the hash cache
    # knows), but for pyvenv.cfg, the one users edit: an edit there stays in its venv.
    assert (result.venv / "bin" / "activate").stat().st_ino == (skeleton / "bin" / "activate").stat().st_ino
    assert (result.venv / "pyvenv.cfg").stat().st_ino != (skeleton / "pyvenv.cfg").stat().st_ino
    # A skeleton someone edited is made again, not copied into later venvs.
    cfg = skeleton / "pyvenv.cfg"
    cfg.write_text(cfg.read_text() + "include-system-site-packages = true\n")
    again = install.venv_skeleton(store, python, tmp_path / "log")
    assert again == skeleton and "include-system-site-packages = true" not in cfg.read_text()


def test_a_skeleton_is_checked_by_its_stat_snapshot_once_its_files_matched(published: tuple[IndexServer, Lock],
                                                                           tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server, lock = published
    _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    store = Store.open(tmp_path / "home")
    (skeleton,) = (store.root / "skeletons").iterdir()
    python = target.find_python(lock.python)
    snapshot = store.stat_snapshot("skeletons", skeleton.name)
    assert snapshot.parent == store.hash_cache / "snapshots"
    # The first use after the venv's walk sealed its (shared) files hashes them again, and keeps their snapshot.
    snapshot.unlink(missing_ok=True)
    assert install.venv_skeleton(store, python, tmp_path / "log") == skeleton and snapshot.is_file()
    # From then on lstats alone answer: an edit whose mtime and size are set back by hand goes unseen (as
    # for a venv a switch reuses; `envlock verify` and the venv's own digest walk read every byte) ...
    activate = skeleton / "bin" / "activate"
    st = activate.stat()
    os.chmod(activate, 0o644)
    text = activate.read_text()
    activate.write_text(text.replace("deactivate", "deactivatE", 1))
    os.chmod(activate, stat.S_IMODE(st.st_mode))
    os.utime(activate, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert install.venv_skeleton(store, python, tmp_path / "log") == skeleton
    assert "deactivatE" in activate.read_text()
    # ... but without the snapshot the files are hashed again: the edit is found and the skeleton made anew.
    snapshot.unlink()
    assert install.venv_skeleton(store, python, tmp_path / "log") == skeleton
    assert "deactivatE" not in activate.read_text()
    # The snapshot goes with its skeleton.
    store.remove_entry("skeletons", skeleton.name)
    assert not skeleton.exists() and not snapshot.exists()


def test_a_skeleton_naming_its_own_folder_is_not_kept(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("VIRTUAL_ENV=/elsewhere\n")
    assert not install._names_folder(venv)
    (venv / "bin" / "activate").write_text(f"VIRTUAL_ENV={venv}\n")
    assert install._names_folder(venv)
    (venv / "bin" / "activate").write_text("relative\n")
    os.symlink(venv / "bin" / "activate", venv / "bin" / "link")
    assert install._names_folder(venv)


def install_path(store: Store, lock: Lock) -> Path:
    from envlock.store.store import store_file

    return store_file(store, lock.packages[0].wheels[0])


def test_a_local_version_wheel_served_percent_encoded_installs(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # PyTorch's index writes the "+" of a local version as %2B in its file URLs.
    server = IndexServer(tmp_path / "served").start()
    try:
        wheel = build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260307+cu130",
                            files={"torch/__init__.py": "__version__ = '2.12.0.dev20260307+cu130'\n"})
        server.add("nightly", wheel)
        lock = lock_for(server, "nightly", [wheel])
        quoted = server.file_url("nightly", wheel.name.replace("+", "%2B"))
        from dataclasses import replace

        pkg = lock.packages[0]
        lock = replace(lock, packages=(replace(pkg, wheels=(replace(pkg.wheels[0], url=quoted),)),))
        result = _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    finally:
        server.stop()
    out = subprocess.run([result.venv / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout == "2.12.0.dev20260307+cu130\n"
    assert (result.venv / SITE / "torch-2.12.0.dev20260307+cu130.dist-info").is_dir()


def test_a_package_locked_to_another_wheel_is_refused(published: tuple[IndexServer, Lock], tmp_path: Path) -> None:
    from dataclasses import replace

    _, lock = published
    alpha, beta = lock.packages[0], lock.packages[1]
    # "beta 2.0" pointing at alpha's wheel: the sha256 is right, the name is not.
    forged = replace(lock, packages=(replace(beta, wheels=alpha.wheels),))
    store = Store.open(tmp_path)
    got = fetch([alpha.wheels[0]], store, base_dir=tmp_path)
    with pytest.raises(InstallError) as info:
        install.install(store, forged, got.paths())
    assert str(info.value) == (
        "alpha-1.0-py3-none-any.whl: locked as beta 2.0, but that is not this wheel's name and version; "
        "expected the lock's [[packages]] entry to point at its own wheel"
    )
    assert not store.has("venvs", install.venv_entry(forged.install_digest()))


def test_a_store_wheel_damaged_at_its_size_is_named_when_uv_cannot_unzip_it(published: tuple[IndexServer, Lock],
                                                                           tmp_path: Path) -> None:
    from envlock.errors import StoreError

    _, lock = published
    store = Store.open(tmp_path)
    got = fetch([p.wheels[0] for p in lock.packages], store, base_dir=tmp_path)
    damaged = got.paths()[lock.packages[0].wheels[0].sha256]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside a member: uv's unzip fails its CRC; the size stays
    os.chmod(damaged, 0o644)
    damaged.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        install.install(store, lock, got.paths())
    assert info.value.message.startswith("1 store wheel(s) damaged (their bytes changed since they were verified)")
    assert list(info.value.details) == [
        f"{damaged}: sha256 {hashlib.sha256(data).hexdigest()}, expected {lock.packages[0].wheels[0].sha256}; "
        f"remove {damaged.parent}"]
    assert not store.has("venvs", install.venv_entry(lock.install_digest()))


def test_wheel_names_compare_canonically() -> None:
    assert install._wheel_is("Foo_Bar-1.0-py3-none-any.whl", "foo-bar", "1.0")
    assert install._wheel_is("torch-2.12.0.dev20260307+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
                             "torch", "2.12.0.dev20260307+cu130")
    assert install._wheel_is("pkg-1.0.0-1-py3-none-any.whl", "pkg", "1.0")  # build tag; 1.0.0 == 1.0
    assert not install._wheel_is("pkg-1.1-py3-none-any.whl", "pkg", "1.0")
    assert not install._wheel_is("pkg-1.0.tar.gz", "pkg", "1.0")


def test_a_venv_folder_without_its_manifest_is_replaced(published: tuple[IndexServer, Lock], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Not an entry envlock completed (a foreign writer's, or a copy): never trusted, made anew.
    server, lock = published
    planted = Store.open(tmp_path / "home").path("venvs", install.venv_entry(lock.install_digest()))
    planted.mkdir(parents=True)
    (planted / "planted").write_text("not ours\n")
    result = _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    assert result.built and result.venv == planted
    assert not (planted / "planted").exists()
    assert digest.stored_manifest(result.venv) == result.manifest


def test_clearing_the_uv_cache_waits_for_installs_from_it(tmp_path: Path) -> None:
    import threading

    store = Store.open(tmp_path / "home")
    cache = uvcache.uv_cache_dir(store)
    (cache / "archive-v0" / "x").mkdir(parents=True)
    cleared = threading.Event()

    def clear() -> None:
        uvcache.clear_uv_cache(store)
        cleared.set()

    with store.locked("uv-cache", shared=True):  # as a running `uv pip install` holds it
        t = threading.Thread(target=clear)
        t.start()
        # Still waiting, on the flock the install holds (this process's, in /proc/locks): its files stay.
        wait_for(lambda: waits_on_flock(store.root / "locks" / "uv-cache.lock", os.getpid()),
                 "the clear to wait for the uv cache's lock")
        assert not cleared.is_set() and cache.is_dir()
    t.join()
    assert cleared.is_set() and not cache.exists()


def test_a_rebuild_under_the_same_file_name_installs_its_own_bytes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # A local build (sgl-kernel) rebuilt with a new patch keeps its wheel file name. The store's
    # uv cache has the first build unpacked: the second sync must install the second build's
    # bytes. (uv caches a --find-links wheel by its folder and file name: from one shared
    # folder it installed the first build's bytes again. The store paths name the sha256.)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    store = Store.open(tmp_path / "home")
    got = {}
    for label in ("first", "second"):
        wheel = build_wheel(tmp_path / label, "sgl-kernel", "0.3.21",
                            files={"sgl_kernel/__init__.py": f"BUILD = {label!r}\n"})
        lock = lock_for(None, "", [], local=[(wheel, wheel.name)])
        fetched = fetch([lock.packages[0].wheels[0]], store, base_dir=tmp_path / label)
        result = install.install(store, lock, fetched.paths())
        got[label] = (result.venv / SITE / "sgl_kernel" / "__init__.py").read_text()
    assert got == {"first": "BUILD = 'first'\n", "second": "BUILD = 'second'\n"}


def test_a_full_disk_while_copying_the_skeleton_is_one_message(published: tuple[IndexServer, Lock], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # copytree raises one shutil.Error holding every file's failure: it was printed as that list.
    import errno

    from envlock.store.store import store_file

    server, lock = published
    result = _sync_venv(server, tmp_path / "home", lock, tmp_path / "uv-cache", monkeypatch)
    store = Store.open(tmp_path / "home")
    store.remove_entry("venvs", result.venv.name)

    def full(src: str, dst: str, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", dst)

    monkeypatch.setattr(os, "link", full)  # the skeleton's files are linked into the new venv
    with pytest.raises(InstallError) as info:
        install.install(store, lock, {p.wheels[0].sha256: store_file(store, p.wheels[0]) for p in lock.packages})
    assert info.value.message.startswith(f"{store.root / 'tmp'}/venv-slot")
    assert ": cannot copy the venv skeleton there: [Errno 28] No space left on device: " in info.value.message
    assert not store.path("venvs", result.venv.name).exists()


def _alpha_then_beta(tmp_path: Path) -> tuple[Store, Lock, Lock, dict[str, Path]]:
    """A store, a lock of ``alpha`` and one of ``alpha`` and ``beta`` (local wheels), and both wheels fetched."""
    store = Store.open(tmp_path / "home")
    w = tmp_path / "wheels"
    alpha, beta = build_wheel(w, "alpha", "1.0"), build_wheel(w, "beta", "1.0")
    first = lock_for(None, "", [], local=[(alpha, alpha.name)])
    second = lock_for(None, "", [], local=[(alpha, alpha.name), (beta, beta.name)])
    return store, first, second, fetch([p.wheels[0] for p in second.packages], store, base_dir=w).paths()


def test_a_uv_cache_entry_whose_archive_is_gone_is_dropped_and_the_install_repeated_once(tmp_path: Path) -> None:
    # uv's wheel entries (wheels-v*/…) name an unpacked archive (archive-v0/<id>); with that archive
    # gone (an older envlock's gc, a hand) every install of the wheel failed: "failed to read
    # directory `…/uv-cache/archive-v0/…`: No such file or directory", until uv-cache was removed by hand.
    store, first, second, got = _alpha_then_beta(tmp_path)
    assert install.install(store, first, got).note == ""
    archives = list((uvcache.uv_cache_dir(store) / "archive-v0").iterdir())
    assert len(archives) == 1
    shutil.rmtree(archives[0])

    result = install.install(store, second, got)
    assert (result.venv / SITE / "alpha" / "__init__.py").read_text() == "NAME = 'alpha'\nVERSION = '1.0'\n"
    assert result.note == ("uv's cache named 1 unpacked wheel that is gone (uv-cache/archive-v0/"
                           f"{archives[0].name}); dropped its entry and installed again")
    assert install.install(store, second, got).note == ""  # reused, nothing left to repair


def test_a_uv_cache_uv_cannot_read_is_cleared_and_the_install_repeated_once(tmp_path: Path) -> None:
    # An archive that is no longer a folder (its entry is whole): uv fails naming it.
    store, first, second, got = _alpha_then_beta(tmp_path)
    install.install(store, first, got)
    (archive,) = (uvcache.uv_cache_dir(store) / "archive-v0").iterdir()
    shutil.rmtree(archive)
    archive.write_bytes(b"")

    result = install.install(store, second, got)
    assert (result.venv / SITE / "alpha" / "__init__.py").read_text() == "NAME = 'alpha'\nVERSION = '1.0'\n"
    assert result.note.startswith("uv could not read its own cache (")
    assert result.note.endswith("); cleared it and installed again")
    assert str(archive) in result.note


def _cli_sync(lock: Lock, ws: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``envlock sync demo --frozen --lock`` of ``lock`` (written in ``ws``) into ``home``, with the step timeline."""
    lock_path = ws / "pylock.demo.toml"
    ws.mkdir(parents=True, exist_ok=True)
    lock_path.write_text(lock.to_toml())
    env = {**os.environ, "ENVLOCK_HOME": str(home), "ENVLOCK_TIMINGS": "1", "UV_CACHE_DIR": str(home / "uv")}
    return subprocess.run([sys.executable, "-m", "envlock", "sync", "demo", "--frozen", "--lock", str(lock_path),
                           "--json"], cwd=ws, env=env, capture_output=True, text=True)


def test_a_cold_sync_installs_the_wheels_as_they_come_and_gives_the_venv_of_one_install(tmp_path: Path) -> None:
    """The store lacks the wheels: uv installs those in the store while a slow one still downloads, then it;
    the venv is the one a single uv run over every wheel gives (its digest, each file)."""
    server = IndexServer(tmp_path / "served").start()
    try:
        files = [build_wheel(tmp_path / "wheels", f"quick{i}", "1.0") for i in range(4)]
        slow = build_wheel(tmp_path / "wheels", "slowpoke", "1.0", files={"slowpoke/blob.bin": os.urandom(400_000)})
        server.add("pypi", *files, slow)
        server.faults[slow.name] = "slow"  # 16 kB every 50 ms: over a second
        lock = lock_for(server, "pypi", [*files, slow], env="demo")
        cold = _cli_sync(lock, tmp_path / "ws", tmp_path / "home")
    finally:
        server.stop()
    assert cold.returncode == 0, cold.stderr
    batches = [line.rsplit("  ", 1)[1] for line in cold.stderr.splitlines() if "  uv pip install (" in line]
    assert batches == ["uv pip install (4 wheels)", "uv pip install (1 wheels)"]
    store = Store.open(tmp_path / "home")
    venv = install.venv_path(store, lock.install_digest())
    built = digest.stored_manifest(venv)
    assert built is not None
    # The same lock from the store's wheels, all there: one uv run over all five.
    got = {p.wheels[0].sha256: store.path("wheels", p.wheels[0].sha256) / p.wheels[0].filename for p in lock.packages}
    whole = install.install(Store.open(tmp_path / "home-b"), lock, got)
    assert whole.manifest == built


def test_a_failed_fetch_discards_the_venv_installed_so_far(tmp_path: Path) -> None:
    """One wheel's download fails (its bytes are not the lock's) while the others are installed: the sync
    fails with the fetch's error, naming that wheel; no venv entry, no generation; the good wheels stay."""
    server = IndexServer(tmp_path / "served").start()
    try:
        files = [build_wheel(tmp_path / "wheels", f"fine{i}", "1.0") for i in range(4)]
        bad = build_wheel(tmp_path / "wheels", "broken", "1.0", files={"broken/blob.bin": os.urandom(300_000)})
        server.add("pypi", *files, bad)
        lock = lock_for(server, "pypi", [*files, bad], env="demo")
        server.faults[bad.name] = "corrupt"
        failed = _cli_sync(lock, tmp_path / "ws", tmp_path / "home")
    finally:
        server.stop()
    assert failed.returncode == 1
    error = json.loads(failed.stdout)["error"]
    assert error["kind"] == "FetchError" and bad.name in error["message"] + "".join(error["details"])
    store = Store.open(tmp_path / "home")
    assert not store.has("venvs", install.venv_entry(lock.install_digest()))
    assert not (store.root / "envs" / "demo" / "current").exists()
    assert all((store.path("wheels", p.wheels[0].sha256) / p.wheels[0].filename).is_file()
               for p in lock.packages if p.wheels[0].filename != bad.name)
