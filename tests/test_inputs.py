"""What builds read: FetchContent pins, every unreachable input in one error, closure-only wheel fetches."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.build import inputs
from envlock.commands import buildsession
from envlock.errors import BuildError, SourceError
from envlock.install import fetch
from envlock.model.lockfile import LockedFetchContent, LockedPackage
from envlock.model.spec import FetchContentInput, load_spec
from envlock.store.store import Store
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.locks import lock_for, sha256_of
from kit.sglike import KDEP_NAME, KDEP_TAG, SgLike
from kit.wheels import build_wheel

URL = "https://github.com/triton-lang/triton"
ARCHIVE = "https://github.com/nlohmann/json/releases/download/v3.11.3/json.tar.xz"
C40, D40, S64 = "c" * 40, "d" * 40, "5" * 64


@pytest.mark.parametrize(("dep", "recorded", "pin"), [
    # The spec's own pin needs no lock.
    (FetchContentInput("t", URL, C40), None, LockedFetchContent(git=URL, commit=C40)),
    (FetchContentInput("j", url=ARCHIVE, sha256=S64), None, LockedFetchContent(url=ARCHIVE, sha256=S64)),
    # A tag's commit, an archive's sha256: the lock's, while the spec names the same URL and rev.
    (FetchContentInput("t", URL, "v3.5.1"), LockedFetchContent(git=URL, commit=D40, rev="v3.5.1"),
     LockedFetchContent(git=URL, commit=D40, rev="v3.5.1")),
    (FetchContentInput("j", url=ARCHIVE), LockedFetchContent(url=ARCHIVE, sha256=S64),
     LockedFetchContent(url=ARCHIVE, sha256=S64)),
    # Another rev, another URL: resolved anew.
    (FetchContentInput("t", URL, "v3.6.0"), LockedFetchContent(git=URL, commit=D40, rev="v3.5.1"), None),
    (FetchContentInput("t", URL + "-fork", "v3.5.1"), LockedFetchContent(git=URL, commit=D40, rev="v3.5.1"), None),
    (FetchContentInput("j", url=ARCHIVE + ".2.tar.xz"), LockedFetchContent(url=ARCHIVE, sha256=S64), None),
    (FetchContentInput("t", URL, "v3.5.1"), None, None),
])
def test_a_pin_is_the_spec_s_or_the_lock_s_for_the_same_url_and_rev(
        dep: FetchContentInput, recorded: LockedFetchContent | None, pin: LockedFetchContent | None) -> None:
    assert inputs.known_pin(dep, recorded) == pin


def test_a_tag_is_resolved_to_its_commit_and_kept(sg: SgLike, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    dep = FetchContentInput(KDEP_NAME, sg.kdep_url, KDEP_TAG)
    got = inputs.fetch_input(dep, store, mirror=None, recorded=None)
    assert got.pin == LockedFetchContent(git=sg.kdep_url, commit=sg.kdep_commit, rev=KDEP_TAG)
    assert got.tree == store.path("sources", f"git-{sg.kdep_commit}") / "tree"
    assert got.pin.recipe(KDEP_NAME) == {"name": KDEP_NAME, "git": sg.kdep_url, "rev": sg.kdep_commit}
    # With the lock's record (and the commit in the store), nothing is asked: not even a mirror that is gone.
    again = inputs.fetch_input(dep, store, mirror=str(tmp_path / "nowhere"), recorded=got.pin)
    assert again.pin == got.pin


def test_every_unreachable_source_and_input_is_named_in_one_error(sg: SgLike, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "envs").mkdir(parents=True)
    gone = tmp_path / "gone"
    (root / "envs" / "e.toml").write_text(f"""
[env]
python = "3.11"
[indexes.pypi]
url = "https://pypi.org/simple"
default = true
[sources.s]
git = "{gone}/s.git"
rev = "{sg.pin}"
[builds.k]
source = "s"
[builds.k.fetchcontent]
{KDEP_NAME} = {{ git = "{sg.kdep_url}", rev = "{KDEP_TAG}" }}
repo-gone = {{ url = "{(gone / 'x.tar.gz').as_uri()}" }}
""")
    ws = Workspace(root)
    spec = load_spec(root / "envs" / "e.toml", root=root)
    store = Store.open(tmp_path / "home")
    with pytest.raises(SourceError) as info:
        buildsession.prepare_inputs(ws, spec, store, buildsession.InputsWanted(builds=list(spec.builds.values())))
    assert info.value.message == ("envs/e.toml: 2 git or URL inputs of the builds cannot be fetched; every such input "
                                  "is fetched before any wheel, so nothing else was downloaded")
    source, archive = info.value.details
    assert source.startswith(f"sources.s: {gone}/s.git: ")
    assert source.endswith("; from a mirror: --source s=URL-OR-PATH or ENVLOCK_SOURCE_S=URL-OR-PATH")
    assert archive == (f"builds.k.fetchcontent.repo-gone: {(gone / 'x.tar.gz').as_uri()}: cannot download the "
                       "archive (no such file); from a mirror: --source repo-gone=URL-OR-PATH or "
                       "ENVLOCK_SOURCE_REPO_GONE=URL-OR-PATH")
    # The reachable input was fetched all the same (its tag resolved): the next try starts from there.
    assert (store.path("sources", f"git-{sg.kdep_commit}") / "tree").is_dir()


def test_the_closure_is_fetched_level_by_level_and_nothing_else(tmp_path: Path) -> None:
    # torchlike (a root) needs numpylike on linux only, which needs nothing; requests and its
    # idna are the env's, but no build imports them: never fetched.
    folder = tmp_path / "wheels"
    wheels = [
        build_wheel(folder, "torchlike", "1.0", requires=["numpylike>=1", 'winlike; sys_platform == "win32"']),
        build_wheel(folder, "numpylike", "1.0"),
        build_wheel(folder, "winlike", "1.0"),
        build_wheel(folder, "requests", "2.0", requires=["idna"]),
        build_wheel(folder, "idna", "3.0"),
    ]
    server = IndexServer(tmp_path / "index")
    server.add("pypi", *wheels)
    server.start()
    try:
        lock = lock_for(server, "pypi", wheels)
        store = Store.open(tmp_path / "home")
        levels: list[list[str]] = []

        def fetch_wheels(packages: list[LockedPackage]) -> fetch.FetchResult:
            levels.append([p.name for p in packages])
            return fetch.fetch([p.wheels[0] for p in packages], store, base_dir=tmp_path)

        reached, results = inputs.closure_packages(
            lock, {"torchlike", "scikit-build-core"}, python="3.11", platform="x86_64-manylinux_2_28",
            exclude=set(), fetch_wheels=fetch_wheels)
        assert [p.name for p in reached] == ["numpylike", "torchlike"]
        assert levels == [["torchlike"], ["numpylike"]]
        assert sorted(p.rsplit("/", 1)[-1] for p in server.downloads()) == [
            "numpylike-1.0-py3-none-any.whl", "torchlike-1.0-py3-none-any.whl"]
        assert sum(len(r.artifacts) for r in results) == 2
    finally:
        server.stop()


@pytest.mark.parametrize("hashes", [True, False])
def test_a_backend_wheel_comes_from_the_index_held_to_the_locked_hashes(tmp_path: Path, hashes: bool) -> None:
    server = IndexServer(tmp_path / "served")
    server.add_index("pypi", hashes=hashes)
    wheel = build_wheel(tmp_path / "w", "tool", "1.0")
    windows = build_wheel(tmp_path / "w", "tool", "1.0", tag="cp311-cp311-win_amd64")  # not for this machine
    server.add("pypi", wheel, windows)
    server.start()
    store = Store.open(tmp_path / "home")
    sha = sha256_of(wheel)
    line = f"tool==1.0 --hash=sha256:{sha} --hash=sha256:{sha256_of(windows)} --hash=sha256:{'0' * 64}"
    try:
        got = inputs.backend_wheels([line], store, python="3.11", index_url=server.url("pypi"), offline=False,
                                         what="[builds.x]", env="e")
        assert got == (store.path("wheels", sha) / wheel.name,) and sha256_of(got[0]) == sha
        # Bytes the lock does not record: refused, naming them (a hash-less index's are downloaded to hash).
        other = "tool==1.0 --hash=sha256:" + "1" * 64
        with pytest.raises(BuildError) as caught:
            inputs.backend_wheels([other], store, python="3.11", index_url=server.url("pypi"), offline=False,
                                       what="[builds.x]", env="e")
        assert caught.value.message == (
            f"[builds.x]: build requirement tool==1.0: {server.url('pypi')}/tool/ lists no wheel of it with a locked "
            "sha256 that python 3.11 installs here (2 files of that version); a build installs its backend from "
            "hash-checked wheels in the store alone, so that it can be repeated offline" if hashes else
            f"[builds.x]: build requirement tool==1.0: {server.base}/pypi/files/{wheel.name} holds sha256 {sha}, not "
            f"one the lock records ({'1' * 64}); refused")
    finally:
        server.stop()
    # Offline, from the store alone; what it lacks is named, with the way to bring it.
    assert inputs.backend_wheels([line], store, python="3.11", index_url=None, offline=True,
                                      what="[builds.x]", env="e") == got
    with pytest.raises(BuildError) as caught:
        inputs.backend_wheels([line, "more==2.0 --hash=sha256:" + "2" * 64], Store.open(tmp_path / "fresh"),
                                   python="3.11", index_url=None, offline=True, what="[builds.x]", env="e")
    assert str(caught.value) == (
        f"[builds.x]: --offline, but the store {tmp_path / 'fresh' / 'v1'} holds no wheel for python 3.11 on this "
        "machine of 2 build requirements (a build installs its backend from the store's wheels alone); bring them "
        "with `envlock export e --out DIR` on a machine that built this lock, then `envlock import DIR` here\n"
        f"  tool==1.0 (locked sha256: {sha}, {sha256_of(windows)}, {'0' * 64})\n"
        f"  more==2.0 (locked sha256: {'2' * 64})")
