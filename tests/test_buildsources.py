"""Fetched sources in binary caches, end to end: a real nginx cache and a ``file://`` folder.

Home A locks and builds the SGLang-shaped kernel (a git source, a git FetchContent input pinned by
a tag, an archive input on a loopback server) and pushes; home B, which does not trust A's key (so
no build record is usable) and reaches neither the git repositories nor the archive server, builds
from the cached sources and gets the lock's wheel. A git tar with one flipped byte, one with a
``../`` member and an archive with other bytes are refused by name, and envlock falls back to git
(or fails with the unreachable-source message when git is gone too).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock import runner
from envlock.build import sources
from envlock.cache import buildsources
from envlock.cache.backends import FileBackend
from envlock.cache.buildsources import Pinned
from envlock.cache.caches import CacheConfig, Caches
from envlock.cache.signing import generate
from envlock.model.lockfile import read_lock
from envlock.store.store import Store
from kit import sglike
from kit.cacheservers import free_port
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.sglike import SgLike, kernel_index, kernel_spec, make_sglike
from kit.workspaces import Cli, ScratchWorkspace, said


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The kernel's index without its archive input (served by ``archives``), built once for the module."""
    with kernel_index(tmp_path_factory.mktemp("kernel-index"), with_archives=False).start() as started:
        yield started


@pytest.fixture
def archives(tmp_path: Path) -> Iterator[IndexServer]:
    """The archive input's own server (stopped in the test: the URL unreachable)."""
    with IndexServer(tmp_path / "archive-index").start() as server:
        server.add("archives", sglike.karch_archive(tmp_path / "karch"))
        yield server


class Env:
    """The SGLang-shaped env of ``test_cmakefetch``, locked and built in home A."""

    def __init__(
            self, ws: ScratchWorkspace, cli: Cli, pypi: IndexServer, archives: IndexServer, tmp_path: Path) -> None:
        self.sg: SgLike = make_sglike(tmp_path / "repos")
        self.archive_url = archives.file_url("archives", "karch-1.0.tar.gz")
        ws.write_spec("e", kernel_spec(pypi, self.sg, karch=self.archive_url))
        self.ws, self.cli, self.tmp = ws, cli, tmp_path

    def pins(self) -> list[Pinned]:
        lock = read_lock(self.ws.root / "locks" / "pylock.e.toml")
        return buildsources.locked(lock)

    def clone(self, name: str, cache: str, trusted: str, monkeypatch: pytest.MonkeyPatch) -> Path:
        """Another machine: the workspace without its wheelhouse, its own home, no git and no archive server."""
        dest = self.tmp / f"ws-{name}"
        shutil.copytree(self.ws.root, dest, ignore=shutil.ignore_patterns("wheelhouse"))
        (dest / "envlock.toml").write_text(f'[cache]\nurls = ["{cache}"]\ntrusted-keys = ["{trusted}"]\n')
        monkeypatch.chdir(dest)
        monkeypatch.setenv("ENVLOCK_HOME", str(self.tmp / f"home-{name}"))
        for var in ("ENVLOCK_SOURCE_SGLIKE", "ENVLOCK_SOURCE_REPO_KDEP", "ENVLOCK_SOURCE_REPO_KARCH"):
            monkeypatch.setenv(var, str(self.tmp / "missing" / var.lower()))
        return dest


def _flip(path: Path, needle: bytes) -> None:
    """One byte of ``path`` flipped, inside the first ``needle`` (a file's bytes inside a tar)."""
    data = bytearray(path.read_bytes())
    data[data.index(needle) + len(needle) // 2] ^= 1
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def _git_tree_of(tar: Path, scratch: Path) -> str:
    """The tree id real git gives the files under ``tree/`` of ``tar`` (what the refusal names)."""
    with tarfile.open(tar) as t:
        t.extractall(scratch, filter="data")
    runner.git(["init", "-q", scratch / "repo"])
    where: list[str | Path] = ["--git-dir", scratch / "repo" / ".git", "--work-tree", scratch / "tree"]
    runner.git([*where, "add", "-A", "-f", "--", "."], cwd=scratch / "tree")
    return runner.git([*where, "write-tree"]).stdout.strip()


@pytest.mark.slow
def test_home_b_builds_from_cached_sources_with_git_and_the_archive_server_gone(
    ws: ScratchWorkspace, cli: Cli, pypi: IndexServer, archives: IndexServer, nginx: tuple[str, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, folder = nginx
    env = Env(ws, cli, pypi, archives, tmp_path)
    r = cli("cache", "keygen", "team-ci", "--out", str(tmp_path / "ci.key"))
    public = r.out.strip()
    (ws.root / "envlock.toml").write_text(f'[cache]\nurls = ["{url}"]\npush = "{url}"\n'
                                          f'key = "{tmp_path / "ci.key"}"\ntrusted-keys = ["{public}"]\n')
    assert cli("lock", "e").code == 0
    r = cli("sync", "e", "--json")  # home A builds; the hook pushes the wheel, its record and its 3 sources
    assert r.code == 0, r.err
    assert json.loads(r.out)["note"] == "caches: 5 uploads"
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    built = lock.builds["sglike-kernel"]
    archive_sha = sha256_of(archives.indexes["archives"].files["karch-1.0.tar.gz"])
    keys = [p.key for p in env.pins()]
    assert keys == [f"sources/git-{env.sg.pin}.tar", f"sources/archive-{archive_sha}",
                    f"sources/git-{env.sg.kdep_commit}.tar"]
    assert all((folder / k).is_file() for k in keys)
    # The archive input is its own bytes; a git tar is the commit object and the checkout, sorted, time 0.
    assert sha256_of(folder / keys[1]) == archive_sha
    with tarfile.open(folder / keys[0]) as tar:
        members = tar.getmembers()
    assert [m.name for m in members[:2]] == ["commit", "tree/README.md"]
    assert [m.name for m in members[1:]] == sorted(m.name for m in members[1:])
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(0, 0, 0, "")}
    r = cli("cache", "push", "e", "--to", url, "--json")  # the closure; the sources are there already
    assert r.code == 0, r.err
    assert json.loads(r.out)["present"] == 5
    again = tmp_path / "again"
    r = cli("cache", "push", "e", "--to", again.as_uri(), "--json")
    assert r.code == 0 and sorted(k for k in json.loads(r.out)["uploaded"] if k.startswith("sources/")) == sorted(keys)
    assert (again / keys[0]).read_bytes() == (folder / keys[0]).read_bytes()  # one tree, one tar

    # Home B trusts another key (A's record is refused), and reaches no git repository or archive server.
    archives.stop()
    stranger = generate("laptop")
    b = env.clone("b", url, str(stranger.public()), monkeypatch)
    r = cli("sync", "e", "--frozen", "--json")
    assert r.code == 0, r.err
    notes = json.loads(r.out)["note"].split("; ")
    assert notes[0] == "caches: 1 wheel, 3 sources"  # the wheel: tinydep (the build read torchlike from the index)
    assert notes[1] == (f"cache {url}: refused build record of sglike-kernel ({built.input_digest[:19]}): signed "
                        "by 'team-ci', which is not a trusted key (trusted: 'laptop')")
    assert sha256_of(b / "wheelhouse" / built.wheel) == built.sha256  # built here, from the cached sources
    home = Store.open(tmp_path / "home-b")
    assert (home.path("sources", f"git-{env.sg.pin}") / "commit-time").read_text() == f"{env.sg.pin_time}\n"
    assert not list((home.root / "git-mirrors").glob("*"))  # git was never asked
    log = (home.path("builds", built.input_digest.removeprefix("sha256:")) / "build.log").read_text()
    assert not log.startswith("not built here")


@pytest.mark.slow
def test_a_tampered_source_is_refused_by_name_and_git_is_the_fallback(ws: ScratchWorkspace, cli: Cli, pypi: IndexServer,
                                                                      archives: IndexServer, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    url = cache.as_uri()
    env = Env(ws, cli, pypi, archives, tmp_path)
    assert cli("lock", "e").code == 0
    assert cli("build", "e").code == 0
    r = cli("cache", "push", "e", "--to", url, "--json")  # no --key: no record, the sources all the same
    assert r.code == 0, r.err
    pins = env.pins()
    git_tar, archive = cache / pins[0].key, cache / pins[1].key
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    built = lock.builds["sglike-kernel"]
    archives.stop()
    b = env.clone("c", url, str(generate("laptop").public()), monkeypatch)

    # One byte flipped in a file of the source's tar, one in the archive: each refused, naming why.
    good = git_tar.read_bytes()
    _flip(git_tar, b"sglike: test fixture")
    _flip(archive, archive.read_bytes()[200:232])
    expected_tree = _git_tree_of(git_tar, tmp_path / "tampered")
    named = runner.git(["-C", env.sg.repo, "rev-parse", f"{env.sg.pin}^{{tree}}"]).stdout.strip()
    caches = Caches(CacheConfig(urls=(url,)))
    assert buildsources.sources_into_store(caches, Store.open(tmp_path / "home-x"), pins) == 1  # kdep's alone
    assert caches.notes == [
        f"cache {url}: refused {pins[0].key}: its files make git tree {expected_tree}, but commit {env.sg.pin[:12]} "
        f"names tree {named}",
        f"cache {url}: refused {pins[1].key}: served bytes of sha256 {sha256_of(archive)}, expected the lock's "
        f"{pins[1].pin}",
    ]
    # A member that climbs out, and a tar whose commit object is another commit's.
    archive.chmod(0o644)
    archive.write_bytes(archives.indexes["archives"].files["karch-1.0.tar.gz"].read_bytes())
    git_tar.write_bytes(_tar([("commit", good_commit(good)), ("tree/../../evil", b"x")]))
    caches = Caches(CacheConfig(urls=(url,)))
    store = Store.open(tmp_path / "home-y")
    assert buildsources.sources_into_store(caches, store, pins[:1]) == 0
    assert caches.notes == [f"cache {url}: refused {pins[0].key}: archive member 'tree/../../evil' is a path that "
                            "climbs out (..); the archive is refused, nothing was unpacked"]
    assert not (tmp_path / "home-y").joinpath("evil").exists() and not store.has("sources", pins[0].entry)
    other = b"tree " + b"0" * 40 + b"\n"
    git_tar.write_bytes(_tar([("commit", other), ("tree/README.md", b"x")]))
    caches = Caches(CacheConfig(urls=(url,)))
    assert buildsources.sources_into_store(caches, store, pins[:1]) == 0
    other_id = hashlib.sha1(b"commit %d\0" % len(other) + other).hexdigest()
    assert caches.notes == [f"cache {url}: refused {pins[0].key}: its commit object is {other_id}, not the lock's "
                            "commit"]

    # With the git source gone too, the sync fails as it does without a cache (the refusal said first).
    git_tar.write_bytes(good)
    _flip(git_tar, b"sglike: test fixture")
    r = cli("sync", "e", "--frozen")
    missing = tmp_path / "missing" / "envlock_source_sglike"
    assert r.code == 1, r.err
    mirror = tmp_path / "home-c" / "v1" / "git-mirrors"
    assert re.fullmatch(
        rf"envlock: error: {re.escape(str(missing))}: full fetch: `git --git-dir {re.escape(str(mirror))}/[0-9a-f]+ "
        rf"fetch -q --no-tags -- {re.escape(str(missing))} \+refs/heads/\*:refs/heads/\* \+refs/tags/\*:refs/tags/\*` "
        rf"failed \(exit 128\)\n  fatal: '{re.escape(str(missing))}' does not appear to be a git repository\n"
        r"(  .*\n)+"
        rf"  cache {re.escape(url)}: refused {re.escape(pins[0].key)}: its files make git tree [0-9a-f]{{40}}, "
        rf"but commit {env.sg.pin[:12]} names tree {named}\n", said(r.err)), r.err
    # With git reachable, the refused source comes from git and the rest from the cache: the lock's wheel.
    monkeypatch.delenv("ENVLOCK_SOURCE_SGLIKE")
    r = cli("sync", "e", "--frozen", "--json")
    assert r.code == 0, r.err
    notes = json.loads(r.out)["note"].split("; ")
    # kdep's tar and the archive were taken by the sync that failed: the store has them now.
    assert notes[0] == "caches: 1 wheel" and len(notes) == 2
    assert notes[1].startswith(f"cache {url}: refused {pins[0].key}: its files make git tree ")
    assert runner.git(["--git-dir", next(mirror.iterdir()), "cat-file", "-e", env.sg.pin]).ok  # from git
    assert sha256_of(b / "wheelhouse" / built.wheel) == built.sha256


def good_commit(tar: bytes) -> bytes:
    """The ``commit`` member of a git tar's bytes."""
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        got = t.extractfile("commit")
        assert got is not None
        return got.read()


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- push and take, without a build ---------------------------------------------------------------


def _repo(tmp_path: Path) -> tuple[str, str]:
    """A git repo with an executable file, a link, a tracked ignored file and a crlf file: (URL, commit)."""
    repo = tmp_path / "upstream"
    sglike.init_repo(repo)
    sglike.write(repo, {"run.sh": "#!/bin/sh\n", "docs/a.md": "a\n", ".gitignore": "build/\n",
                        "build/kept.txt": "tracked though ignored\n", ".gitattributes": "*.bat eol=crlf\n",
                        "x.bat": "echo\n"})
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("docs/a.md")
    sglike.git(repo, "add", "-f", "build/kept.txt")
    return repo.as_uri(), sglike.commit_all(repo, "upstream\n\nmessage line\ncommitter not a header 1 +0000")


def test_a_git_checkout_goes_through_a_cache_byte_for_byte(tmp_path: Path) -> None:
    url, commit = _repo(tmp_path)
    a, b = Store.open(tmp_path / "home-a"), Store.open(tmp_path / "home-b")
    co = sources.checkout(a, url, commit)
    cache = FileBackend(tmp_path / "cache", "file://cache")
    pin = Pinned("git", commit, url)
    assert buildsources.push_sources(cache, a, [pin]) == buildsources.SourcesPushed((pin.key,), 0, ())
    assert buildsources.push_sources(cache, a, [pin]) == buildsources.SourcesPushed((), 1, ())
    caches = Caches(CacheConfig(urls=((tmp_path / "cache").as_uri(),)))
    assert buildsources.sources_into_store(caches, b, [pin]) == 1 and caches.notes == []
    assert caches.summary() == "caches: 1 source"
    got = sources.checkout(b, "file:///nowhere", commit)  # in the store: git is not asked
    assert (got.tree_digest, got.commit_time) == (co.tree_digest, co.commit_time)
    assert (got.tree / "x.bat").read_bytes() == b"echo\r\n" and os.access(got.tree / "run.sh", os.X_OK)


def test_bytes_git_would_clean_to_the_pinned_tree_are_not_what_is_kept(tmp_path: Path) -> None:
    """An ``ident`` (or ``text``) attribute makes ``git add`` clean what it reads: a cached file with a
    line of code inside ``$Id: ... $`` still hashes to the pinned tree, so the store keeps git's own
    checkout of that verified tree, never the served bytes."""
    repo = tmp_path / "upstream"
    sglike.init_repo(repo)
    sglike.write(repo, {".gitattributes": "*.py ident\n", "v.py": 'v = "$Id$"\n'})
    commit = sglike.commit_all(repo, "upstream")
    a, b = Store.open(tmp_path / "home-a"), Store.open(tmp_path / "home-b")
    honest = (sources.checkout(a, repo.as_uri(), commit).tree / "v.py").read_bytes()
    assert honest.startswith(b'v = "$Id: ') and honest != b'v = "$Id$"\n'
    pin = Pinned("git", commit, repo.as_uri())
    cache = FileBackend(tmp_path / "cache", "file://cache")
    buildsources.push_sources(cache, a, [pin])
    served = tmp_path / "cache" / pin.key
    evil = b'v = "$Id: x"; import os; os.system("echo pwned"); y = "$"\n'
    served.chmod(0o644)
    served.write_bytes(_tar([("commit", good_commit(served.read_bytes())), ("tree/.gitattributes", b"*.py ident\n"),
                             ("tree/v.py", evil)]))
    caches = Caches(CacheConfig(urls=((tmp_path / "cache").as_uri(),)))
    assert buildsources.sources_into_store(caches, b, [pin]) == 1 and caches.notes == []
    got = sources.checkout(b, "file:///nowhere", commit)
    assert (got.tree / "v.py").read_bytes() == honest


def test_a_compressed_git_tar_is_refused_before_anything_is_unpacked(tmp_path: Path) -> None:
    """A git tar is checked only after it is unpacked, so it must be the plain tar envlock writes: a
    compressed one (a few kB of gzip can unpack to GBs) is refused, even holding the right files."""
    url, commit = _repo(tmp_path)
    a = Store.open(tmp_path / "home-a")
    sources.checkout(a, url, commit)
    pin = Pinned("git", commit, url)
    buildsources.push_sources(FileBackend(tmp_path / "cache", "file://cache"), a, [pin])
    served = tmp_path / "cache" / pin.key
    served.chmod(0o644)
    served.write_bytes(gzip.compress(served.read_bytes()))
    caches = Caches(CacheConfig(urls=((tmp_path / "cache").as_uri(),)))
    assert buildsources.sources_into_store(caches, Store.open(tmp_path / "home-b"), [pin]) == 0
    assert caches.notes == [f"cache file://{tmp_path / 'cache'}: refused {pin.key}: not a tar archive envlock can "
                            "unpack (truncated header); nothing was kept"]
    # Nor a sparse member: 10 kB of tar that declare a file of 1 TB (PAX sparse format 1.0).
    big = tarfile.TarInfo("tree/big")
    big.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "tree/big",
                       "GNU.sparse.realsize": str(1 << 40)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("commit"), io.BytesIO())
        big.size = 512
        tar.addfile(big, io.BytesIO(b"1\n0\n0\n".ljust(512, b"\0")))
    served.write_bytes(buf.getvalue())
    caches = Caches(CacheConfig(urls=((tmp_path / "cache").as_uri(),)))
    assert buildsources.sources_into_store(caches, Store.open(tmp_path / "home-b"), [pin]) == 0
    assert caches.notes == [f"cache file://{tmp_path / 'cache'}: refused {pin.key}: archive member 'tree/big' is a "
                            "sparse file; the archive is refused, nothing was unpacked"]


def test_a_commit_whose_message_is_not_plain_utf8_text_is_pushed_byte_for_byte(tmp_path: Path) -> None:
    """A commit object is read as bytes: CRLF line ends and a Latin-1 message (as Windows and older
    tools write them) hash to the commit only as git stores them."""
    repo = tmp_path / "upstream"
    sglike.init_repo(repo)
    sglike.write(repo, {"a.txt": "a\n"})
    message = tmp_path / "message"
    message.write_bytes(b"upstream\r\n\r\ncaf\xe9 \xa0 r\xe9sum\xe9\r\n")
    sglike.git(repo, "add", "-A")
    sglike.git(repo, "-c", "i18n.commitEncoding=ISO-8859-1", "commit", "-q", "--cleanup=verbatim", "-F", str(message))
    commit = sglike.git(repo, "rev-parse", "HEAD")
    a, b = Store.open(tmp_path / "home-a"), Store.open(tmp_path / "home-b")
    co = sources.checkout(a, repo.as_uri(), commit)
    pin = Pinned("git", commit, repo.as_uri())
    cache = FileBackend(tmp_path / "cache", "file://cache")
    assert buildsources.push_sources(cache, a, [pin]) == buildsources.SourcesPushed((pin.key,), 0, ())
    caches = Caches(CacheConfig(urls=((tmp_path / "cache").as_uri(),)))
    assert buildsources.sources_into_store(caches, b, [pin]) == 1 and caches.notes == []
    got = sources.checkout(b, "file:///nowhere", commit)
    assert (got.tree_digest, got.commit_time) == (co.tree_digest, co.commit_time)


def test_what_cannot_be_pushed_or_reached_is_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, commit = _repo(tmp_path)
    store = Store.open(tmp_path / "home")
    sources.checkout(store, url, commit)
    shutil.rmtree(store.path("git-mirrors", next(p.name for p in (store.root / "git-mirrors").iterdir())))
    # The checkout keeps its commit object: pushed without the mirror.
    other = FileBackend(tmp_path / "other", "file://other")
    kept = buildsources.push_sources(other, store, [Pinned("git", commit, url)])
    assert kept == buildsources.SourcesPushed((f"sources/git-{commit}.tar",), 0, ())
    (store.path("sources", f"git-{commit}") / sources.COMMIT_OBJECT).unlink()  # an older envlock's: no commit object
    with store.new_entry("sources", "archive-" + "a" * 64) as work:  # as an older envlock left it: no bytes
        (work / "tree").mkdir()
    cache = FileBackend(tmp_path / "cache", "file://cache")
    old = Pinned("archive", "a" * 64, "https://example.invalid/a.tar.gz")
    gone = Pinned("archive", "b" * 64, "https://example.invalid/b.tar.gz")
    pushed = buildsources.push_sources(cache, store, [Pinned("git", commit, url), old, gone])
    assert pushed == buildsources.SourcesPushed((), 0, (
        f"sources/git-{commit}.tar: not pushed: the store's git mirror of {url} lacks commit {commit[:12]} "
        "(removed by gc?)",
        f"{old.key}: not pushed: the store keeps the tree of {old.location}, not its bytes (fetched by an older "
        "envlock)",
        f"{gone.key}: not pushed: the store has no {gone.location} at {'b' * 12}",
    ))
    monkeypatch.setenv("ENVLOCK_CACHE_TIMEOUT", "0.5")
    port = free_port()  # nothing listens there
    caches = Caches(CacheConfig(urls=(f"http://127.0.0.1:{port}/c",)))
    assert buildsources.sources_into_store(caches, Store.open(tmp_path / "fresh"), [gone, old]) == 0
    assert len(caches.notes) == 1  # said once, not asked again
    assert caches.notes[0].startswith(f"cache http://127.0.0.1:{port}/c: {gone.key}: ")
    assert caches.notes[0].endswith(": not used for the rest of this command")
