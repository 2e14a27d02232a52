"""Fetch: verified streaming downloads into the store, resume, retries, offline, memory."""

from __future__ import annotations

import base64
import hashlib
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from envlock.errors import FetchError
from envlock.install import partial
from envlock.install.fetch import FetchOptions, fetch, fetch_unhashed
from envlock.model.lockfile import Artifact, LockedPackage, canonicalize_name
from envlock.model.mirrors import package_locator
from envlock.net import indexes
from envlock.progress import DownloadStoppedError, NullProgress
from envlock.store.store import STORE_MTIME, Store, store_file
from kit.index import IndexServer
from kit.locks import artifact, lock_for, sha256_of, sync_workspace
from kit.processes import envlock, wait_for
from kit.wheels import build_wheel


def _publish(server: IndexServer, tmp_path: Path, name: str, payload: int = 200_000) -> tuple[Path, Artifact]:
    # Random bytes do not compress: the wheel is about ``payload`` bytes on the wire.
    wheel = build_wheel(tmp_path / "wheels", name, "1.0", files={f"{name}/blob.bin": os.urandom(payload)})
    server.add("pypi", wheel)
    return wheel, artifact(wheel, url=server.file_url("pypi", wheel.name))


def test_downloads_verify_and_store_read_only_with_fixed_mtime(server: IndexServer, store: Store,
                                                               tmp_path: Path) -> None:
    wheels = [_publish(server, tmp_path, n) for n in ("alpha", "beta", "gamma")]
    result = fetch([a for _, a in wheels], store, base_dir=tmp_path)
    for wheel, art in wheels:
        stored = store_file(store, art)
        assert stored.read_bytes() == wheel.read_bytes()
        st = stored.stat()
        assert stat.S_IMODE(st.st_mode) == 0o444
        assert st.st_mtime == STORE_MTIME
        assert result.paths()[art.sha256] == stored
    assert {a.source for a in result.artifacts} == {"download"}
    assert result.downloaded == sum(w.stat().st_size for w, _ in wheels)
    assert list(store.partial_dir.iterdir()) == []


def test_artifact_in_store_is_never_downloaded_again(server: IndexServer, store: Store, tmp_path: Path) -> None:
    _, art = _publish(server, tmp_path, "alpha")
    fetch([art], store, base_dir=tmp_path)
    before = len(server.downloads())
    again = fetch([art], store, base_dir=tmp_path)
    assert len(server.downloads()) == before == 1
    assert [a.source for a in again.artifacts] == ["store"]
    assert again.downloaded == 0


def test_cut_download_resumes_with_range_request(server: IndexServer, store: Store, tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha", payload=3_000_000)
    server.faults[wheel.name] = "cut-once"
    result = fetch([art], store, base_dir=tmp_path, options=FetchOptions(backoff=0.01))
    assert store_file(store, art).read_bytes() == wheel.read_bytes()
    ranges = [r for p, r in server.requests if p.endswith(wheel.name)]
    assert ranges[0] == ""
    assert ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-"
    (got,) = result.artifacts
    assert got.resumed_from == int(ranges[1][len("bytes="):-1]) > 0
    # The first half was kept: the whole file crossed the wire once.
    assert got.downloaded == wheel.stat().st_size


def test_partial_left_by_a_killed_run_is_resumed(server: IndexServer, store: Store, tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha", payload=1_000_000)
    store.partial_dir.mkdir(parents=True, exist_ok=True)
    (store.partial_dir / f"{art.sha256}.part").write_bytes(wheel.read_bytes()[:400_000])
    (got,) = fetch([art], store, base_dir=tmp_path).artifacts
    assert server.requests[-1] == (f"/pypi/files/{wheel.name}", "bytes=400000-")
    assert got.resumed_from == 400_000
    assert store_file(store, art).read_bytes() == wheel.read_bytes()


def test_wrong_bytes_fail_naming_both_hashes_and_store_nothing(server: IndexServer, store: Store,
                                                                tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha")
    server.faults[wheel.name] = "corrupt"
    data = wheel.read_bytes()
    actual = hashlib.sha256(bytes(b ^ 0xFF for b in data[:64]) + data[64:]).hexdigest()
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=tmp_path)
    assert str(info.value) == (
        f"{wheel.name}: sha256 mismatch for {art.url}: expected {art.sha256}, got {actual}; nothing was stored"
    )
    assert not store.has("wheels", art.sha256)
    assert list(store.partial_dir.iterdir()) == []


@pytest.mark.parametrize("delta", [-10, 1])
def test_a_wrong_locked_size_is_named_as_such(server: IndexServer, store: Store, tmp_path: Path,
                                              delta: int) -> None:
    # The bytes have the locked sha256, so they are the locked bytes: the lock's size is wrong.
    wheel, art = _publish(server, tmp_path, "alpha")
    size = wheel.stat().st_size
    wrong = Artifact(sha256=art.sha256, url=art.url, size=size + delta)
    with pytest.raises(FetchError) as info:
        fetch([wrong], store, base_dir=tmp_path)
    assert str(info.value) == (
        f"{wheel.name}: size mismatch for {art.url}: the bytes have the locked sha256 but are {size} bytes, "
        f"the lock says {size + delta}; nothing was stored"
    )
    assert not store.has("wheels", art.sha256)
    assert list(store.partial_dir.iterdir()) == []


def test_wrong_bytes_of_the_wrong_size_name_both_hashes_and_sizes(server: IndexServer, store: Store,
                                                                  tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha")
    other = Artifact(sha256="0" * 64, url=art.url, size=(art.size or 0) + 1)
    with pytest.raises(FetchError) as info:
        fetch([other], store, base_dir=tmp_path)
    assert str(info.value) == (
        f"{wheel.name}: sha256 mismatch for {art.url}: expected {'0' * 64}, got {art.sha256} "
        f"({art.size} bytes, expected {(art.size or 0) + 1}); nothing was stored"
    )


def test_a_local_file_of_the_wrong_size_is_refused(store: Store, tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "wheelhouse", "kernel", "0.1")
    art = artifact(wheel, rel=str(wheel))
    size = wheel.stat().st_size
    with pytest.raises(FetchError) as info:
        fetch([Artifact(sha256=art.sha256, path=art.path, size=size - 1)], store, base_dir=tmp_path)
    assert str(info.value) == (
        f"{wheel.name}: size mismatch for local file {wheel}: the bytes have the locked sha256 but are "
        f"{size} bytes, the lock says {size - 1}; nothing was stored"
    )
    assert not store.has("wheels", art.sha256)


def test_a_store_file_of_another_size_is_named_with_what_to_do(server: IndexServer, store: Store,
                                                                tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha")
    fetch([art], store, base_dir=tmp_path)
    stored = store_file(store, art)
    stored.chmod(0o644)
    stored.write_bytes(wheel.read_bytes()[:1000])  # a truncated copy, a disk error, a stray tool
    before = len(server.downloads())
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=tmp_path)
    cut = hashlib.sha256(wheel.read_bytes()[:1000]).hexdigest()
    assert str(info.value) == (
        f"{wheel.name}: store file {stored} is 1000 bytes, the lock says {art.size} (its sha256 is {cut}, "
        f"the lock's {art.sha256}): the store entry is damaged; remove {stored.parent} and sync again "
        "to fetch it anew"
    )
    assert len(server.downloads()) == before and stored.stat().st_size == 1000  # left as found
    # Offline, with another artifact missing: both are named, each artifact counted once.
    _, beta = _publish(server, tmp_path, "beta")
    _, gamma = _publish(server, tmp_path, "gamma")
    with pytest.raises(FetchError) as info:
        fetch([art, beta, gamma], store, base_dir=tmp_path, options=FetchOptions(offline=True))
    assert info.value.message == "3 artifacts failed to fetch; nothing unverified was stored"
    assert [d.split(":")[0] for d in info.value.details] == [wheel.name, "--offline"]
    # Done as told: fetched anew.
    shutil.rmtree(stored.parent)
    (got,) = fetch([art], store, base_dir=tmp_path).artifacts
    assert got.source == "download" and stored.read_bytes() == wheel.read_bytes()


def test_an_intact_store_file_and_a_wrong_locked_size_blame_the_lock(server: IndexServer, store: Store,
                                                                     tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha")
    fetch([art], store, base_dir=tmp_path)
    wrong = Artifact(sha256=art.sha256, url=art.url, size=(art.size or 0) + 1)
    with pytest.raises(FetchError) as info:
        fetch([wrong], store, base_dir=tmp_path)
    assert str(info.value) == (
        f"{wheel.name}: store file {store_file(store, art)} has the locked sha256 but is {art.size} bytes, "
        f"the lock says {(art.size or 0) + 1}: the lock's size is wrong (the store file is intact)"
    )
    assert store_file(store, art).read_bytes() == wheel.read_bytes()


def test_http_404_is_not_retried(server: IndexServer, store: Store, tmp_path: Path) -> None:
    art = Artifact(sha256="0" * 64, url=server.file_url("pypi", "nope-1.0-py3-none-any.whl"))
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=tmp_path)
    # A locked wheel the index no longer serves (an old nightly): what to do with the lock's sha256.
    assert str(info.value) == (
        f"nope-1.0-py3-none-any.whl: download failed from {art.url}: HTTP 404; the index no longer serves it "
        f"(a nightly index keeps only its newest builds): its bytes are the lock's sha256, so copy "
        f"wheels/{'0' * 64}/ from a store that has it (another machine's $ENVLOCK_HOME/v1/) into this one and "
        "sync again, or sync with --index NAME=URL from a mirror that keeps it")
    assert len(server.requests) == 1


def test_connection_refused_is_retried_then_reported(store: Store, tmp_path: Path) -> None:
    art = Artifact(sha256="0" * 64, url="http://127.0.0.1:9/x/files/dead-1.0-py3-none-any.whl")
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=tmp_path, options=FetchOptions(retries=2, backoff=0.01))
    assert str(info.value) == (
        f"dead-1.0-py3-none-any.whl: download failed from {art.url}: cannot connect "
        "(ConnectionRefusedError: [Errno 111] Connection refused) (after 2 retries)"
    )


def test_every_failure_is_reported(server: IndexServer, store: Store, tmp_path: Path) -> None:
    arts = [Artifact(sha256=f"{i}" * 64, url=server.file_url("pypi", f"n{i}-1.0-py3-none-any.whl"))
            for i in range(2)]
    with pytest.raises(FetchError) as info:
        fetch(arts, store, base_dir=tmp_path)
    assert info.value.message == "2 artifacts failed to fetch; nothing unverified was stored"
    assert [d.split(":")[0] for d in info.value.details] == ["n0-1.0-py3-none-any.whl", "n1-1.0-py3-none-any.whl"]


def test_offline_names_every_missing_artifact(server: IndexServer, store: Store, tmp_path: Path) -> None:
    pairs = [_publish(server, tmp_path, n) for n in ("alpha", "beta", "gamma")]
    fetch([pairs[0][1]], store, base_dir=tmp_path)
    with pytest.raises(FetchError) as info:
        fetch([a for _, a in pairs], store, base_dir=tmp_path, options=FetchOptions(offline=True))
    assert info.value.message == f"--offline: 2 locked artifacts not in the store {store.root / 'wheels'}"
    assert info.value.details == tuple(
        f"{w.name} (sha256 {a.sha256}) from {a.url}" for w, a in pairs[1:]
    )
    assert len(server.downloads()) == 1
    ok = fetch([pairs[0][1]], store, base_dir=tmp_path, options=FetchOptions(offline=True))
    assert [a.source for a in ok.artifacts] == ["store"]


def test_offline_copies_local_wheels_and_names_only_what_needs_the_network(
        server: IndexServer, store: Store, tmp_path: Path) -> None:
    # A built wheel in the wheelhouse is on this machine: offline is no reason to refuse it.
    wheel = build_wheel(tmp_path / "ws" / "wheelhouse", "kernel", "0.1", tag="cp311-cp311-linux_x86_64")
    lock_dir = tmp_path / "ws" / "locks"
    lock_dir.mkdir()
    local = artifact(wheel, rel=f"../wheelhouse/{wheel.name}")
    (got,) = fetch([local], store, base_dir=lock_dir, options=FetchOptions(offline=True)).artifacts
    assert got.source == "local" and store_file(store, local).read_bytes() == wheel.read_bytes()
    # A file: URL is local too; a remote wheel is still named as missing, with nothing downloaded.
    other = build_wheel(tmp_path / "house", "other", "0.1")
    by_url = artifact(other, url=other.as_uri())
    remote_wheel, remote = _publish(server, tmp_path, "alpha")
    with pytest.raises(FetchError) as info:
        fetch([local, by_url, remote], store, base_dir=lock_dir, options=FetchOptions(offline=True))
    assert info.value.message == f"--offline: 1 locked artifact not in the store {store.root / 'wheels'}"
    assert info.value.details == (f"{remote_wheel.name} (sha256 {remote.sha256}) from {remote.url}",)
    assert store_file(store, by_url).read_bytes() == other.read_bytes()
    assert server.downloads() == []


def test_local_path_artifacts_are_hash_checked_and_copied(store: Store, tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "ws" / "wheelhouse", "kernel", "0.1", tag="cp311-cp311-linux_x86_64")
    art = artifact(wheel, rel=f"../wheelhouse/{wheel.name}")
    lock_dir = tmp_path / "ws" / "locks"
    lock_dir.mkdir()
    (got,) = fetch([art], store, base_dir=lock_dir).artifacts
    assert got.source == "local"
    assert store_file(store, art).read_bytes() == wheel.read_bytes()
    bad = Artifact(sha256="f" * 64, path=f"../wheelhouse/{wheel.name}")
    assert _fetch_error(bad, store, lock_dir) == (
        f"{wheel.name}: sha256 mismatch for local file {lock_dir.parent}/wheelhouse/{wheel.name}: "
        f"expected {'f' * 64}, got {art.sha256}; nothing was stored; the wheelhouse holds another build of it "
        "(a lock from another revision?): check that revision's envs/, locks/ and patches/ out and "
        "`envlock sync ENV --frozen` rebuilds it"
    )
    gone = Artifact(sha256="e" * 64, path="../wheelhouse/gone-1.0-py3-none-any.whl")
    assert _fetch_error(gone, store, lock_dir) == (
        f"gone-1.0-py3-none-any.whl: local artifact {lock_dir.parent}/wheelhouse/gone-1.0-py3-none-any.whl "
        "cannot be read (No such file or directory); expected the wheel recorded in the lock (`envlock build ENV` "
        "builds it for the current spec; for a lock from another revision, check that revision out and "
        "`envlock sync ENV --frozen`)"
    )


def test_memory_stays_flat_for_a_big_download(server: IndexServer, store: Store, tmp_path: Path) -> None:
    size = 50 * 1024 * 1024
    big = tmp_path / "big-1.0-py3-none-any.whl"  # the bytes need not be a wheel to be fetched
    h = hashlib.sha256()
    with big.open("wb") as fh:
        for _ in range(size // (1 << 20)):
            block = os.urandom(1 << 20)
            h.update(block)
            fh.write(block)
    server.add("pypi", big)
    art = Artifact(sha256=h.hexdigest(), url=server.file_url("pypi", big.name), size=size)
    tracemalloc.start()
    try:
        fetch([art], store, base_dir=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store_file(store, art).stat().st_size == size
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes for a {size}-byte download"


def test_unhashed_download_is_stored_under_its_hash_and_restarts_from_the_start(
        server: IndexServer, store: Store, tmp_path: Path) -> None:
    # An index that publishes no hash (PyTorch nightlies): the resolver hashes the bytes.
    wheel, art = _publish(server, tmp_path, "alpha")
    server.faults[wheel.name] = "cut-once"
    got = fetch_unhashed(server.file_url("pypi", wheel.name), store)
    assert (got.sha256, got.downloaded, got.source) == (art.sha256, wheel.stat().st_size, "download")
    assert got.path == store_file(store, art) and got.path.read_bytes() == wheel.read_bytes()
    # No Range after the cut: with no hash to check it, a prefix could be from another upload.
    assert [r for p, r in server.requests if p.endswith(wheel.name)] == ["", ""]
    assert list(store.partial_dir.iterdir()) == []
    # The sync's fetch then finds it in the store.
    before = len(server.downloads())
    assert [a.source for a in fetch([art], store, base_dir=tmp_path).artifacts] == ["store"]
    assert len(server.downloads()) == before


def test_unhashed_download_that_fails_leaves_nothing(server: IndexServer, store: Store) -> None:
    url = server.file_url("pypi", "gone-1.0-py3-none-any.whl")
    with pytest.raises(FetchError, match=r"gone-1.0-py3-none-any.whl: download failed from .*: HTTP 404$"):
        fetch_unhashed(url, store)
    assert len(server.requests) == 1  # a 404 is not retried
    assert list(store.partial_dir.iterdir()) == []
    assert not (store.root / "wheels").exists()


@pytest.mark.parametrize("name", ["..%2F..%2F..%2Fescaped.whl", "x%2F..%2F..%2F..%2Fescaped.whl", "%2E%2E",
                                  ".hidden.whl", "x.tar.gz"])
def test_a_file_name_that_would_leave_the_store_entry_is_refused(server: IndexServer, store: Store,
                                                                 tmp_path: Path, name: str) -> None:
    # The store path is wheels/<sha256>/<file name from the URL>: an encoded slash in a
    # URL (a hostile lock or index page) must not write, nor find, a file outside it.
    url = f"{server.base}/pypi/files/{name}"
    art = Artifact(sha256="a" * 64, url=url)
    with pytest.raises(FetchError, match=r"expected a plain \*\.whl file name"):
        fetch([art], store, base_dir=tmp_path)
    with pytest.raises(FetchError, match=r"expected a plain \*\.whl file name"):
        fetch_unhashed(url, store)
    assert server.downloads() == []
    assert sorted(p.name for p in store.root.parent.rglob("*") if p.is_file()) == ["layout"]


def test_the_same_bytes_under_another_file_name_get_that_name_too(store: Store, tmp_path: Path) -> None:
    # PyYAML-6.0-… from an index and pyyaml-6.0-… from a wheelhouse: one sha256, two names.
    wheel = build_wheel(tmp_path / "wheels", "PyYAML", "6.0", files={"yaml/__init__.py": "X = 1\n"})
    other = tmp_path / "house" / wheel.name.replace(wheel.name.split("-")[0], "PyYAML_", 1)
    other.parent.mkdir()
    other.write_bytes(wheel.read_bytes())
    first, second = artifact(wheel, rel=str(wheel)), artifact(other, rel=str(other))
    assert first.sha256 == second.sha256 and first.filename != second.filename
    fetch([first], store, base_dir=tmp_path)
    (got,) = fetch([second], store, base_dir=tmp_path).artifacts
    assert got.path == store_file(store, second) and got.path.read_bytes() == wheel.read_bytes()
    assert store_file(store, first).read_bytes() == wheel.read_bytes()  # the first name is still there
    assert stat.S_IMODE(got.path.stat().st_mode) == 0o444
    assert store.path("wheels", first.sha256).stat().st_mtime == STORE_MTIME
    for art in (first, second):
        assert [a.source for a in fetch([art], store, base_dir=tmp_path).artifacts] == ["store"]
    assert list(store.partial_dir.iterdir()) == []


def test_a_store_that_cannot_be_written_is_a_fetch_error(server: IndexServer, store: Store, tmp_path: Path) -> None:
    wheel, art = _publish(server, tmp_path, "alpha")
    # Something in the way of the partial file (a full disk gives an OSError the same way).
    (store.partial_dir / f"{art.sha256}.part").mkdir(parents=True)
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=tmp_path)
    assert info.value.message == (f"{wheel.name}: Is a directory ({store.partial_dir / art.sha256}.part); "
                                  "nothing was stored")
    assert not store_file(store, art).exists()


def test_a_write_that_fails_names_the_file_being_written(server: IndexServer, store: Store, tmp_path: Path) -> None:
    # A full disk fails a write with an OSError that names no file (as this file size limit does).
    wheel, art = _publish(server, tmp_path, "alpha", payload=300_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        with pytest.raises(FetchError) as info:
            fetch([art], store, base_dir=tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert info.value.message == (f"{wheel.name}: File too large ({store.partial_dir / art.sha256}.part); "
                                  "nothing was stored")
    assert not store_file(store, art).exists()


@pytest.mark.network  # the real PyPI: opt in with --run-network
def test_https_index_page_and_streamed_hash(tmp_path: Path) -> None:
    files = indexes.project_files("https://pypi.org/simple", "six")
    wheel = next(f for f in files if f.filename == "six-1.17.0-py2.py3-none-any.whl")
    assert wheel.sha256 is not None
    got = fetch_unhashed(wheel.url, Store.open(tmp_path / "home"))
    assert (got.sha256, got.downloaded) == (wheel.sha256, 11050)
    assert got.path.read_bytes()[:2] == b"PK"


# -- mirrors: where a sync downloads from when the locked URLs are not reachable ------------

UPSTREAM = "https://download.pytorch.org/whl/nightly/cu130"  # what the lock names; the test proxy refuses it


def _locked_upstream(wheel: Path) -> LockedPackage:
    """A package locked from UPSTREAM (unreachable here), as a lock made elsewhere records it."""
    name = wheel.name.split("-")[0]
    return LockedPackage(name=canonicalize_name(name), version="1.0", index=UPSTREAM,
                         wheels=(artifact(wheel, url=f"{UPSTREAM}/{name}/{wheel.name}"),))


def test_a_mirror_serves_the_locked_files_and_the_locked_urls_are_not_asked(
        server: IndexServer, store: Store, tmp_path: Path) -> None:
    wheels = [_publish(server, tmp_path, n)[0] for n in ("alpha", "beta")]
    packages = [_locked_upstream(w) for w in wheels]
    locate = package_locator(packages, {p.name: server.url("pypi") for p in packages})
    result = fetch([p.wheels[0] for p in packages], store, base_dir=tmp_path, options=FetchOptions(locate=locate))
    assert sorted(server.downloads()) == sorted(f"/pypi/files/{w.name}" for w in wheels)
    for wheel, pkg in zip(wheels, packages, strict=True):
        assert store_file(store, pkg.wheels[0]).read_bytes() == wheel.read_bytes()
    assert result.downloaded == sum(w.stat().st_size for w in wheels)
    # In the store now: the mirror is not even listed again.
    listed = len(server.requests)
    fetch([p.wheels[0] for p in packages], store, base_dir=tmp_path, options=FetchOptions(locate=locate))
    assert len(server.requests) == listed


def test_a_mirror_whose_file_is_not_the_locked_one_stores_nothing(server: IndexServer, store: Store,
                                                                 tmp_path: Path) -> None:
    locked = build_wheel(tmp_path / "locked", "alpha", "1.0", files={"alpha/blob.bin": os.urandom(1000)})
    other = build_wheel(tmp_path / "other", "alpha", "1.0", files={"alpha/blob.bin": os.urandom(1000)})
    server.add_index("plain", hashes=False)
    server.add("plain", other)  # same name, other bytes, no hash listed: the download tells
    server.add("pypi", other)  # same name, other bytes, its hash listed: known before any download
    pkg = _locked_upstream(locked)
    sha = pkg.wheels[0].sha256
    with pytest.raises(FetchError) as unlisted_hash:
        fetch([pkg.wheels[0]], store, base_dir=tmp_path,
              options=FetchOptions(locate=package_locator([pkg], {pkg.name: server.url("plain")})))
    assert f"sha256 mismatch for {server.file_url('plain', other.name)}: expected {sha}" in unlisted_hash.value.message
    with pytest.raises(FetchError) as listed_hash:
        fetch([pkg.wheels[0]], store, base_dir=tmp_path,
              options=FetchOptions(locate=package_locator([pkg], {pkg.name: server.url("pypi")})))
    other_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    assert listed_hash.value.message == (f"{locked.name}: mirror {server.url('pypi')} lists it with sha256 "
                                         f"{other_sha}, the lock says {sha}: not the locked file")
    assert server.downloads() == [f"/plain/files/{other.name}"]
    assert not store_file(store, pkg.wheels[0]).exists()


def test_a_file_the_mirror_lacks_is_named_and_the_others_are_fetched(server: IndexServer, store: Store,
                                                                     tmp_path: Path) -> None:
    present = _publish(server, tmp_path, "alpha")[0]
    absent = build_wheel(tmp_path / "absent", "beta", "1.0", files={"beta/x.py": "x = 1\n"})
    own = _publish(server, tmp_path, "gamma")[1]  # from an index with no mirror: its locked URL
    packages = [_locked_upstream(present), _locked_upstream(absent)]
    with pytest.raises(FetchError) as info:
        fetch([*(p.wheels[0] for p in packages), own], store, base_dir=tmp_path,
              options=FetchOptions(locate=package_locator(packages, {p.name: server.url("pypi") for p in packages})))
    assert info.value.message == (f"{absent.name}: mirror {server.url('pypi')} lists no such file for beta "
                                  f"(expected the locked wheel, sha256 {packages[1].wheels[0].sha256})")
    # Not the mirror's other file, nor the unreachable locked URL; the rest are fetched.
    assert sorted(server.downloads()) == [f"/pypi/files/{present.name}", f"/pypi/files/{own.filename}"]
    assert store_file(store, own).is_file() and store_file(store, packages[0].wheels[0]).is_file()


def test_a_mirror_page_cannot_send_envlock_to_read_local_files(store: Store, tmp_path: Path) -> None:
    import http.server
    import threading

    wheel = build_wheel(tmp_path / "w", "alpha", "1.0", files={"alpha/x.py": "x = 1\n"})
    page = tmp_path / "site" / "alpha"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "site"))  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        mirror = f"http://127.0.0.1:{httpd.server_address[1]}"
        pkg = _locked_upstream(wheel)
        with pytest.raises(FetchError) as info:
            fetch([pkg.wheels[0]], store, base_dir=tmp_path,
                  options=FetchOptions(locate=package_locator([pkg], {pkg.name: mirror})))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert info.value.message == (f"{wheel.name}: {mirror}/alpha/: lists {wheel.name} at {wheel.as_uri()}: file: links "
                                  "are refused on an http index page; expected http or https (a file: link would be "
                                  "copied from this machine's own disk)")
    assert not store_file(store, pkg.wheels[0]).exists()


def test_a_mirror_with_credentials_gets_them_for_its_files_and_never_prints_them(
        server: IndexServer, store: Store, tmp_path: Path) -> None:
    wheel = _publish(server, tmp_path, "alpha")[0]
    server.faults[wheel.name] = "corrupt"
    pkg = _locked_upstream(wheel)
    secret = server.url("pypi").replace("http://", "http://ci:s3cret@")
    with pytest.raises(FetchError) as info:
        fetch([pkg.wheels[0]], store, base_dir=tmp_path,
              options=FetchOptions(locate=package_locator([pkg], {pkg.name: secret})))
    assert f"sha256 mismatch for {server.file_url('pypi', wheel.name)}: " in info.value.message
    assert "s3cret" not in info.value.message
    assert server.auth_seen(wheel.name) == "Basic " + base64.b64encode(b"ci:s3cret").decode()


class _Counted:
    """Progress that counts the bytes read of each artifact (what reached the partial file)."""

    def __init__(self) -> None:
        self.read: dict[str, int] = {}

    def begin(self, name: str, total: int | None) -> None:
        self.read.setdefault(name, 0)

    def advance(self, name: str, nbytes: int) -> None:
        self.read[name] += nbytes

    def end(self, name: str) -> None:
        pass


@pytest.mark.parametrize(("locked", "limit"), [(1000, None), (None, 5000)])
def test_a_local_file_longer_than_locked_is_read_no_further(store: Store, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           locked: int | None, limit: int | None) -> None:
    # A wheelhouse file far longer than the lock's size (or, with none, than UNSIZED_LIMIT):
    # one byte past it shows the length is wrong; the rest is never read into the store.
    if limit is not None:
        monkeypatch.setattr(partial, "UNSIZED_LIMIT", limit)
    wheel = tmp_path / "ws" / "wheelhouse" / "x-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(os.urandom(3_000_000))
    lock_dir = tmp_path / "ws" / "locks"
    lock_dir.mkdir()
    art = Artifact(sha256="0" * 64, path=f"../wheelhouse/{wheel.name}", size=locked)
    progress = _Counted()
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=lock_dir, progress=progress)
    longer = ("longer than the 1000 bytes the lock says (reading stopped at 1001)" if locked is not None else
              "more than 5000 bytes, and the lock records no size for it (envlock reads no more without one; "
              "record the wheel's `size` in the lock)")
    assert str(info.value) == (
        f"{wheel.name}: size mismatch for local file {wheel}: {longer}; nothing was stored; the wheelhouse holds "
        "another build of it (a lock from another revision?): check that revision's envs/, locks/ and patches/ "
        "out and `envlock sync ENV --frozen` rebuilds it"
    )
    assert progress.read == {wheel.name: (locked or limit or 0) + 1}
    assert list(store.partial_dir.iterdir()) == []
    assert not store.has("wheels", art.sha256)


@pytest.mark.parametrize(("kind", "make"), [
    ("a character device", lambda p: p.symlink_to("/dev/zero")),  # a pull request can add this symlink
    ("a character device", lambda p: p.symlink_to("/dev/null")),
    ("a FIFO", lambda p: os.mkfifo(p)),  # no writer: opening it to read would wait forever
    ("a directory", lambda p: p.mkdir()),
])
def test_a_local_artifact_that_is_not_a_regular_file_is_refused(store: Store, tmp_path: Path, kind: str,
                                                                make: Callable[[Path], None]) -> None:
    wheelhouse = tmp_path / "ws" / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    make(wheelhouse / "x-1.0-py3-none-any.whl")
    lock_dir = tmp_path / "ws" / "locks"
    lock_dir.mkdir()
    art = Artifact(sha256="0" * 64, path="../wheelhouse/x-1.0-py3-none-any.whl", size=1000)
    assert _fetch_error(art, store, lock_dir) == (
        f"x-1.0-py3-none-any.whl: local artifact {wheelhouse}/x-1.0-py3-none-any.whl (the lock's "
        f'path = "../wheelhouse/x-1.0-py3-none-any.whl") is {kind}; expected a regular file, the wheel '
        "recorded in the lock; nothing was stored"
    )
    assert list(store.partial_dir.iterdir()) == []
    assert not store.has("wheels", art.sha256)


def test_a_stopped_local_copy_leaves_no_partial_file(store: Store, tmp_path: Path) -> None:
    # A download's partial file is kept to resume; a copy always starts over, so its bytes are litter.
    wheel = build_wheel(tmp_path / "wheelhouse", "kernel", "0.1", files={"kernel/blob.bin": os.urandom(3_000_000)})
    art = artifact(wheel, rel=str(wheel))

    class Interrupted(NullProgress):
        def advance(self, name: str, nbytes: int) -> None:
            raise DownloadStoppedError("stopped")  # as Stop.check raises on Ctrl-C or SIGTERM

    with pytest.raises(DownloadStoppedError):
        fetch([art], store, base_dir=tmp_path, progress=Interrupted())
    assert list(store.partial_dir.iterdir()) == []


@pytest.mark.parametrize("hashing", [False, True], ids=["sync of a lock without size", "lock hashing a wheel"])
def test_a_body_that_does_not_end_stops_at_the_limit(
        server: IndexServer, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashing: bool) -> None:
    # No Content-Length and no size to hold the bytes to (a lock without `size`, or the lock hashing
    # what a hash-less index such as PyTorch's serves): the body is not read forever (the server here
    # sends 64 MiB); nothing partial is kept and it is not tried again.
    monkeypatch.setattr(partial, "UNSIZED_LIMIT", 3_000_000)
    wheel, art = _publish(server, tmp_path, "alpha")
    server.faults[wheel.name] = "flood"
    progress = _Counted()
    with pytest.raises(FetchError) as info:
        if hashing:
            fetch_unhashed(art.url or "", store, progress=progress)
        else:
            fetch([Artifact(sha256=art.sha256, url=art.url)], store, base_dir=tmp_path, progress=progress)
    assert str(info.value) == (
        f"{wheel.name}: {art.url} sent more than 3000000 bytes, more than any wheel an index serves; read no "
        "further, nothing was stored" if hashing else
        f"{wheel.name}: size mismatch for {art.url}: more than 3000000 bytes, and the lock records no size for it "
        "(envlock reads no more without one; record the wheel's `size` in the lock); nothing was stored"
    )
    assert 3_000_000 < progress.read[wheel.name] <= 3_000_000 + partial.CHUNK
    assert server.downloads(wheel.name) == [f"/pypi/files/{wheel.name}"]
    assert list(store.partial_dir.iterdir()) == []


def _fetch_error(art: Artifact, store: Store, base_dir: Path) -> str:
    """The message of the ``FetchError`` fetching ``art`` (relative to ``base_dir``) raises."""
    with pytest.raises(FetchError) as info:
        fetch([art], store, base_dir=base_dir)
    return str(info.value)


# -- Ctrl-C during a real envlock download ----------------------------------------------------------
# Ctrl-C (SIGINT) during a real ``envlock`` download: the run stops at once, nothing half-made
# stays.
#
# Downloads run on worker threads; the interrupt lands in the main thread, which must tell the
# workers to stop rather than wait for GBs to finish arriving.

# 20 MB trickling at ~3 MB/s: a run that waited for it would finish the download.
PAYLOAD = 20_000_000


def _big(server: IndexServer, tmp_path: Path, index: str, name: str, version: str) -> Path:
    """A wheel of PAYLOAD random bytes on ``index``, trickling out (fault "slow")."""
    server.slow_chunk, server.slow_delay = 64 * 1024, 0.02
    wheel = build_wheel(tmp_path / "wheels", name, version, files={f"{name}/blob.bin": os.urandom(PAYLOAD)})
    server.add(index, wheel)
    server.faults[wheel.name] = "slow"
    return wheel


def _interrupt(ws: Path, home: Path, wheel: Path, *args: str,
               sig: signal.Signals = signal.SIGINT) -> subprocess.CompletedProcess[str]:
    """Run ``envlock ARGS`` in ``ws``, SIGINT (or ``sig``) it once ``wheel``'s download is under way."""
    proc = envlock(ws, home, *args)
    partial = home / "v1" / "tmp" / "partial"

    def downloading() -> bool:
        assert proc.poll() is None, proc.communicate()
        return any(p.stat().st_size > 0 for p in partial.glob("*.part")) if partial.is_dir() else False

    wait_for(downloading, f"{wheel.name} to start downloading")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_stops_a_sync_download_and_keeps_its_partial_to_resume(server: IndexServer, tmp_path: Path) -> None:
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    lock = ws / "locks" / "pylock.demo.toml"
    lock.write_text(lock_for(server, "pypi", [big]).to_toml())
    home = tmp_path / "home"
    done = _interrupt(ws, home, big, "sync", "demo", "--lock", str(lock))
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    sha = sha256_of(big)
    store = Store.open(home)
    assert not store.has("wheels", sha)  # stopped, not waited out
    part = store.partial_dir / f"{sha}.part"
    assert 0 < part.stat().st_size < big.stat().st_size
    # The next sync resumes from where the interrupted one stopped.
    server.faults.pop(big.name)
    again = subprocess.run([sys.executable, "-m", "envlock.cli.main", "sync", "demo", "--lock", str(lock)], cwd=ws,
                           env=dict(os.environ, ENVLOCK_HOME=str(home)), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert any(path.endswith(big.name) and rng.startswith("bytes=") for path, rng in server.requests)
    assert sha256_of(next(store.path("wheels", sha).iterdir())) == sha


def test_sigterm_stops_a_sync_as_ctrl_c_does(server: IndexServer, tmp_path: Path) -> None:
    # `kill`, `timeout` and supervisors send SIGTERM: handled as an interrupt (the download
    # stopped, its partial kept), said, and exit 143, the shell's code for it.
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws, lock = sync_workspace(server, tmp_path, big)
    done = _interrupt(ws, tmp_path / "home", big, "sync", "demo", "--lock", str(lock), sig=signal.SIGTERM)
    assert (done.returncode, done.stderr) == (143, "envlock: terminated\n")
    store = Store.open(tmp_path / "home")
    assert not store.has("wheels", sha256_of(big))
    assert 0 < (store.partial_dir / f"{sha256_of(big)}.part").stat().st_size < big.stat().st_size


def test_ctrl_c_stops_a_lock_hashing_a_nightly_and_leaves_nothing(server: IndexServer, tmp_path: Path) -> None:
    server.add_index("pypi")
    server.add_index("pytorch", hashes=False)  # as PyTorch's: the lock downloads the nightly to hash it
    torch = _big(server, tmp_path, "pytorch", "torch", "2.12.0.dev20260307+cpu")
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "envs" / "e.toml").write_text(f"""
[env]
python = "3.11"
[indexes.pypi]
url = "{server.url('pypi')}"
default = true
[indexes.pytorch]
url = "{server.url('pytorch')}"
[packages]
torch = {{ nightly = "2026-03-07", local = "cpu", index = "pytorch" }}
""")
    home = tmp_path / "home"
    done = _interrupt(ws, home, torch, "lock", "e")
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    # Looked at before Store.open, which would clear an unheld one anyway.
    assert list((home / "v1" / "tmp" / "partial").glob("*.part")) == []  # no hash to resume against
    store = Store.open(home)
    assert not (store.root / "wheels").exists() or not any((store.root / "wheels").iterdir())
    assert not (ws / "locks" / "pylock.e.toml").exists()


def test_ctrl_c_does_not_wait_out_a_stalled_server(server: IndexServer, tmp_path: Path) -> None:
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    server.faults[big.name] = "stall"  # half the bytes, then nothing: the read waits on its 60 s timeout
    ws, lock = sync_workspace(server, tmp_path, big)
    done = _interrupt(ws, tmp_path / "home", big, "sync", "demo", "--lock", str(lock))  # 60 s communicate limit
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    assert len(server.downloads(big.name)) == 1  # and no retry after the interrupt


def test_ctrl_c_does_not_wait_for_another_process_download(server: IndexServer, tmp_path: Path) -> None:
    import fcntl

    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws, lock = sync_workspace(server, tmp_path, big)
    home = tmp_path / "home"
    partial = Store.open(home).partial_dir
    partial.mkdir(parents=True, exist_ok=True)
    part = partial / f"{sha256_of(big)}.part"
    with open(part, "a+b") as held:  # as a concurrent sync downloading it holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write(b"x")
        held.flush()
        proc = envlock(ws, home, "sync", "demo", "--lock", str(lock))

        def waiting() -> bool:
            assert proc.poll() is None, proc.communicate()
            fds = Path(f"/proc/{proc.pid}/fd")
            return any(os.path.realpath(fd) == str(part) for fd in fds.iterdir())

        wait_for(waiting, "the sync to wait for the partial file")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)  # the lock is still held: waiting it out would hang here
    assert (proc.returncode, err) == (130, "envlock: interrupted\n")
    assert server.downloads(big.name) == []
