"""Archive inputs: unpacked safely (no member escapes), fetched by sha256, tampered bytes refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.build import sources
from envlock.errors import SourceError
from envlock.store import archives
from envlock.store.store import Store
from kit.locks import sha256_of
from kit.sglike import hostile_archive, karch_archive

REFUSED = "; the archive is refused, nothing was unpacked"


def _entries(store: Store) -> list[Path]:
    """The archive entries in the store (none: nothing was kept)."""
    return sorted(store.root.glob("sources/archive-*"))


def test_an_archive_unpacks_to_its_one_top_folder(tmp_path: Path) -> None:
    # As FetchContent does with GitHub's archive/<commit>.tar.gz: karch-1.0/ is the tree.
    archives.unpack(karch_archive(tmp_path), tmp_path / "tree", what="karch")
    assert sorted(str(p.relative_to(tmp_path / "tree")) for p in (tmp_path / "tree").rglob("*")) == [
        "include", "include/karch.h"]
    assert (tmp_path / "tree" / "include" / "karch.h").read_text() == "#pragma once\n#define KARCH_MAGIC 7\n"


@pytest.mark.parametrize(("kind", "problem"), [
    ("dotdot", "archive member 'karch-1.0/../x' is a path that climbs out (..)"),
    ("absolute", "archive member '/envlock-absolute/x' is an absolute path"),
    ("symlink", "archive member 'karch-1.0/include/host.h' is a symlink to '../../../etc/passwd', outside the archive"),
    ("hardlink", "archive member 'karch-1.0/include/host.h' is a hard link to '/etc/passwd', which is no earlier "
                 "member of the archive"),
    ("fifo", "archive member 'karch-1.0/fifo' is a device, FIFO or other special file"),
])
def test_a_member_that_could_escape_refuses_the_whole_archive(tmp_path: Path, kind: str, problem: str) -> None:
    with pytest.raises(SourceError) as info:
        archives.unpack(hostile_archive(tmp_path, kind), tmp_path / "tree", what="https://x/karch.tar.gz")
    assert info.value.message == f"https://x/karch.tar.gz: {problem}{REFUSED}"
    assert not (tmp_path / "tree").exists() and not (tmp_path / "tree.unpack").exists()  # not a byte written


def test_what_is_no_tar_is_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"<html>rate limited</html>\n")
    with pytest.raises(SourceError) as info:
        archives.unpack(junk, tmp_path / "tree", what="https://x/junk.tar.gz")
    assert info.value.message.startswith("https://x/junk.tar.gz: not a tar archive envlock can unpack (")
    assert info.value.message.endswith("); nothing was kept")


def test_an_archive_is_fetched_by_sha256_and_held_to_it(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    archive = karch_archive(tmp_path / "served")
    url = archive.as_uri()
    # No sha256 yet (the spec gave none): hashed now, for the lock to record.
    got = sources.fetch_archive(store, url)
    assert (got.sha256, got.downloaded) == (sha256_of(archive), archive.stat().st_size)
    assert got.tree == store.path("sources", f"archive-{got.sha256}") / "tree"
    assert (got.tree / "include" / "karch.h").is_file() and _entries(store) == [got.tree.parent]
    # Held to it: the store's entry answers without a download (the URL could be gone).
    archive.rename(tmp_path / "away.tar.gz")
    again = sources.fetch_archive(store, url, got.sha256)
    assert (again.tree, again.downloaded) == (got.tree, 0)
    # Other bytes at the URL (an upload under the same name, a hostile mirror): refused on a fresh store.
    karch_archive(tmp_path / "served", magic=8)
    fresh = Store.open(tmp_path / "fresh")
    with pytest.raises(SourceError) as info:
        sources.fetch_archive(fresh, url, got.sha256)
    assert info.value.message == (
        f"{url}: the archive has sha256 {sha256_of(archive.parent / 'karch-1.0.tar.gz')}, expected {got.sha256}; "
        "refused, nothing was unpacked (the bytes at that URL changed, or are not the pinned ones)")
    assert _entries(fresh) == []
    # From a mirror that holds the pinned bytes: taken, and checked all the same.
    mirror = tmp_path / "away.tar.gz"
    assert sources.fetch_archive(fresh, url, got.sha256, fetch_from=mirror.as_uri()).sha256 == got.sha256


def test_an_escaping_member_is_refused_when_fetched(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    url = hostile_archive(tmp_path, "dotdot").as_uri()
    with pytest.raises(SourceError) as info:
        sources.fetch_archive(store, url)
    assert info.value.message == f"{url}: archive member 'karch-1.0/../x' is a path that climbs out (..){REFUSED}"
    assert _entries(store) == []


def test_an_archive_that_cannot_be_downloaded_is_named(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    url = (tmp_path / "gone.tar.gz").as_uri()
    with pytest.raises(SourceError) as info:
        sources.fetch_archive(store, url)
    assert info.value.message == f"{url}: cannot download the archive (no such file)"
