"""FetchContent inputs as upstream writes them, end to end through the CLI.

A tag (``repo-kdep = { git, rev = "v1.0" }``) is locked to its commit and kept while the
spec's rev is unchanged; an archive (``repo-karch = { url }``, no sha256) is hashed once at
lock time and held to that hash afterwards. Both reach a real, disconnected CMake configure
of the SGLang-shaped kernel (tests/kit/sglike.py). Every git or URL input is fetched before
any wheel, and several that cannot be are named in one message; a non-isolated build fetches
only the closure of its build requirements among the env's wheels.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock import runner
from envlock.build import buildenv
from kit import sglike
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.sglike import commit_all, git, kernel_index, kernel_spec, make_sglike, write
from kit.workspaces import Cli, ScratchWorkspace, said


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The kernel's index, with its archive input (kit.sglike.kernel_index), built once for the module:
    here it stands for the conftest's empty one."""
    with kernel_index(tmp_path_factory.mktemp("kernel-index"), with_archives=True).start() as started:
        yield started


def wheel_gets(server: IndexServer) -> list[str]:
    return [p.rsplit("/", 1)[-1] for p in server.downloads() if p.endswith(".whl")]


def pins(ws_root: Path) -> dict[str, dict[str, str]]:
    lock = tomllib.loads((ws_root / "locks" / "pylock.e.toml").read_text())
    return lock["tool"]["envlock"]["fetchcontent"]["sglike-kernel"]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_tag_and_an_archive_are_pinned_and_built_disconnected(
    ws: ScratchWorkspace, cli: Cli, server: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sg = make_sglike(tmp_path / "repos")
    archive = server.indexes["archives"].files["karch-1.0.tar.gz"]
    archive_url = server.file_url("archives", "karch-1.0.tar.gz")
    ws.write_spec("e", kernel_spec(server, sg))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    # The tag's commit (peeled: v1.0 is an annotated tag) and the archive's sha256, hashed now.
    assert pins(ws.root) == {
        sglike.KARCH_NAME: {"url": archive_url, "sha256": sha256_of(archive)},
        sglike.KDEP_NAME: {"git": sg.kdep_url, "commit": sg.kdep_commit, "rev": sglike.KDEP_TAG},
    }
    text = ws.lock_text("e")
    assert (f'"{sglike.KDEP_NAME}" = {{ git = "{sg.kdep_url}", commit = "{sg.kdep_commit}", rev = "v1.0" }}'
            in text.replace(f"{sglike.KDEP_NAME} =", f'"{sglike.KDEP_NAME}" ='))

    # The tag moves upstream: a relock keeps the commit while the spec says v1.0, and does not
    # download the archive again (the lock holds its sha256, the store its bytes).
    kdep = Path(sg.kdep_url.removeprefix("file://"))
    write(kdep, {"include/kdep.h": "#pragma once\n#define KDEP_MAGIC 43\n"})
    moved = commit_all(kdep, "kdep: moved", date="2026-03-09T10:00:00+00:00")
    git(kdep, "tag", "-f", "-a", sglike.KDEP_TAG, "-m", "moved")
    archive_gets = len(server.downloads("karch-1.0.tar.gz"))
    assert cli("lock", "e").code == 0
    assert ws.lock_text("e") == text
    assert len(server.downloads("karch-1.0.tar.gz")) == archive_gets

    # `envlock build` on a fresh store: a real CMake configure with FETCHCONTENT_FULLY_DISCONNECTED=ON,
    # both inputs handed over as FETCHCONTENT_SOURCE_DIR_<NAME>; only the build's closure is downloaded.
    home = tmp_path / "home-build"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    server.requests.clear()
    r = cli("build", "e", "--json")
    assert r.code == 0, r.err
    built = json.loads(r.out)["builds"][0]
    log = Path(built["log"]).read_text()
    store = home / "v1" / "sources"
    for name, tree in ((sglike.KDEP_NAME, store / f"git-{sg.kdep_commit}" / "tree"),
                       (sglike.KARCH_NAME, store / f"archive-{sha256_of(archive)}" / "tree")):
        # Where it is, or (in a private mount namespace) mounted at one fixed path.
        seen = tree if "(not fixed: " in log else buildenv.FIXED / buildenv.INNER / "fetchcontent" / name
        assert f"--config-setting cmake.define.FETCHCONTENT_SOURCE_DIR_{name.upper()}={seen}" in log
        assert str(tree) in log
    assert "--config-setting cmake.define.FETCHCONTENT_FULLY_DISCONNECTED=ON" in log
    gets = wheel_gets(server)
    assert f"torchlike-{sglike.KERNEL_TORCH}-py3-none-any.whl" in gets  # in the build's closure: headers compiled in
    assert not [g for g in gets if g.startswith("tinydep-")]  # a runtime wheel no build reads: not fetched
    # The kernel compiled against both inputs: KDEP_MAGIC from the tag's commit (not the moved one), KARCH_MAGIC.
    r = cli("-q", "sync", "e")
    assert r.code == 0, r.err
    env = Path(r.out.strip().splitlines()[-1])
    probe = runner.run([env / "bin" / "python", "-c",
                        "from sglike_kernel import _karch, _ops; print(_ops.magic(), _karch.karch())"])
    assert probe.stdout.split() == ["42", "7"], probe.tail()

    # The spec names the branch instead: resolved anew, to the moved commit, and recorded with it.
    ws.write_spec("e", kernel_spec(server, sg, kdep_rev="main"))
    assert cli("lock", "e").code == 0
    assert pins(ws.root)[sglike.KDEP_NAME] == {"git": sg.kdep_url, "commit": moved, "rev": "main"}

    # Other bytes at the archive's URL: a build on a fresh store refuses them, naming the input.
    ws.write_spec("e", kernel_spec(server, sg))
    assert cli("lock", "e").code == 0
    pinned = sha256_of(archive)
    sglike.karch_archive(archive.parent, magic=8)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-tampered"))
    r = cli("build", "e")
    assert r.code == 1
    assert said(r.err).splitlines()[0] == (
        f"envlock: error: [builds.sglike-kernel]: fetchcontent.{sglike.KARCH_NAME}: {archive_url}: the archive has "
        f"sha256 {sha256_of(archive)}, expected {pinned}; refused, nothing was unpacked (the bytes at that URL "
        "changed, or are not the pinned ones)")
    sglike.karch_archive(archive.parent)  # the served archive back, for the other tests
    assert sha256_of(archive) == pinned


def test_unreachable_inputs_are_named_together_before_any_wheel_is_fetched(
    ws: ScratchWorkspace, cli: Cli, server: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sg = make_sglike(tmp_path / "repos")
    gone_git = tmp_path / "gone.git"
    gone_archive = server.file_url("archives", "gone-1.0.tar.gz")
    ws.write_spec("e", kernel_spec(server, sg, kdep=str(gone_git), karch=gone_archive))

    def expected(git_why: str) -> re.Pattern[str]:
        return re.compile(
            r"envlock: error: envs/e\.toml: 2 git or URL inputs of the builds cannot be fetched; every such input is "
            r"fetched before any wheel, so nothing else was downloaded\n"
            rf"  builds\.sglike-kernel\.fetchcontent\.repo-kdep: {re.escape(str(gone_git))}: {git_why} \(fatal: .*\); "
            r"from a mirror: --source repo-kdep=URL-OR-PATH or ENVLOCK_SOURCE_REPO_KDEP=URL-OR-PATH\n"
            rf"  builds\.sglike-kernel\.fetchcontent\.repo-karch: {re.escape(gone_archive)}: cannot download the "
            r"archive \(HTTP 404\); from a mirror: --source repo-karch=URL-OR-PATH or "
            r"ENVLOCK_SOURCE_REPO_KARCH=URL-OR-PATH\n$")

    # Without a lock, the tag is resolved first; with one, its recorded commit is fetched.
    unresolved = expected(r"cannot list refs to resolve rev 'v1\.0' \(git ls-remote exit 128\)")
    server.requests.clear()
    for command in ("lock", "sync"):
        r = cli(command, "e")
        assert r.code == 1 and unresolved.fullmatch(said(r.err)), (command, r.err)
    assert wheel_gets(server) == []  # uv never ran, nothing was hashed
    # `envlock build` with a lock (made through mirrors): the same one message on a fresh store, and
    # not one of the env's wheels (torchlike, which the kernel's build reads) fetched before it.
    kdep_mirror, archive_mirror = sg.kdep_url, server.file_url("archives", "karch-1.0.tar.gz")
    r = cli("lock", "e", "--source", f"repo-kdep={kdep_mirror}", "--source", f"repo-karch={archive_mirror}")
    assert r.code == 0, r.err
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    server.requests.clear()
    r = cli("build", "e")
    assert r.code == 1 and expected(r"full fetch: `git .* fetch .*` failed \(exit 128\)").fullmatch(said(r.err)), r.err
    assert wheel_gets(server) == []
    # Through the mirrors, the pins the lock recorded are fetched (the commit and sha256 checked).
    monkeypatch.setenv("ENVLOCK_SOURCE_REPO_KDEP", kdep_mirror)
    monkeypatch.setenv("ENVLOCK_SOURCE_REPO_KARCH", archive_mirror)
    assert pins(ws.root)[sglike.KDEP_NAME]["commit"] == sg.kdep_commit


def _mirrored_urls(home: Path) -> set[str]:
    """The URLs the store holds a git mirror of (each mirror names its URL)."""
    folder = home / "v1" / "git-mirrors"
    return {(m / "envlock-url").read_text().strip() for m in folder.iterdir()} if folder.is_dir() else set()


def test_lock_fetches_no_fetchcontent_input(
    ws: ScratchWorkspace, cli: Cli, server: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolution reads no FetchContent input: `lock` pins each without fetching it (a commit: nothing,
    a tag: `git ls-remote`, an archive: one download the first time, to hash it, none with a sha256 in the
    spec); `build` fetches them all, first. Counted on a cold store: the git objects in it, the requests
    on the archive server."""
    sg = make_sglike(tmp_path / "repos")
    archive = server.indexes["archives"].files["karch-1.0.tar.gz"]
    home = tmp_path / "cold"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))

    def archive_gets() -> int:
        return len([1 for path, _ in server.requests if path.endswith("/karch-1.0.tar.gz")])

    for rev in (sg.kdep_commit, sglike.KDEP_TAG):  # by its commit, then by its tag
        server.requests.clear()
        ws.write_spec("e", kernel_spec(server, sg, kdep_rev=rev))
        r = cli("lock", "e")
        assert r.code == 0, r.err
        assert pins(ws.root)[sglike.KDEP_NAME]["commit"] == sg.kdep_commit  # the tag: by `git ls-remote`
        assert _mirrored_urls(home) == {sg.url}  # the source whose metadata the resolution reads, and no more
        assert not (home / "v1" / "sources" / f"git-{sg.kdep_commit}").exists()
        assert archive_gets() == (1 if rev == sg.kdep_commit else 0)  # hashed once, by the first lock
    assert pins(ws.root)[sglike.KARCH_NAME]["sha256"] == sha256_of(archive)
    # With its sha256 in the spec, not even once (a fresh store).
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cold-2"))
    ws.write_spec("e", kernel_spec(server, sg, kdep_rev=sg.kdep_commit).replace(
        "karch-1.0.tar.gz\" }", f"karch-1.0.tar.gz\", sha256 = \"{sha256_of(archive)}\" }}"))
    server.requests.clear()
    assert cli("lock", "e").code == 0
    assert archive_gets() == 0
    # The store holds the source's checkout, and nothing of its builds' FetchContent inputs.
    assert sorted(p.name for p in (tmp_path / "cold-2" / "v1" / "sources").iterdir()) == [f"git-{sg.pin}"]
