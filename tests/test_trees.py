"""Tree digests: what they cover, and the links that lead out of a tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlock.errors import SourceTreeError
from envlock.store import trees
from kit.sglike import write


def test_tree_digest_covers_paths_bytes_and_exec_bit(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {"a.txt": "a\n", "sub/b.sh": "echo\n"})
    base = trees.tree_digest(tree)
    (tree / "sub/b.sh").chmod(0o755)
    executable = trees.tree_digest(tree)
    assert executable != base
    (tree / "sub/b.sh").chmod(0o644)
    assert trees.tree_digest(tree) == base
    (tree / "a.txt").write_text("A\n")
    assert trees.tree_digest(tree) != base
    (tree / "a.txt").write_text("a\n")
    (tree / "sub/b.sh").rename(tree / "sub/c.sh")
    assert trees.tree_digest(tree) != base
    (tree / "sub/c.sh").rename(tree / "sub/b.sh")
    os.utime(tree / "a.txt", (1, 1))  # mtimes do not count
    (tree / "__pycache__").mkdir()
    (tree / "__pycache__/x.pyc").write_bytes(b"junk")
    assert trees.tree_digest(tree) == base


def test_tree_digest_takes_names_that_are_not_utf8(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {"a.txt": "a\n"})
    base = trees.tree_digest(tree)
    latin1 = os.fsdecode(b"caf\xe9.txt")  # a name written on a latin-1 system
    (tree / latin1).write_text("x\n")
    os.symlink(os.fsdecode(b"caf\xe9.txt"), tree / "link")
    with_it = trees.tree_digest(tree)
    assert with_it != base
    assert trees.tree_digest(tree) == with_it
    # Hashed as the bytes they are: another undecodable name is another tree (a lossy
    # encoding would give both one digest).
    (tree / latin1).rename(tree / os.fsdecode(b"caf\xe8.txt"))
    assert trees.tree_digest(tree) not in (base, with_it)


def test_a_build_subdirectory_is_hashed_with_links_into_the_rest_of_its_source(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write(tree, {"src/py/pkg/a.py": "A = 1\n", "LICENSE": "MIT\n"})
    os.symlink("../../LICENSE", tree / "src/py/LICENSE")
    os.symlink("src/py", tree / "python")
    # The subdirectory may be a link inside the tree; its links are followed from where it really is.
    assert trees.tree_digest(tree / "python", within=tree) == trees.tree_digest(tree / "src/py", within=tree)
    # A build gets the subdirectory alone (links copied as links): what such a link names elsewhere
    # in the source is nothing the build can read, so the digest is the subdirectory's own.
    before = trees.tree_digest(tree / "src/py", within=tree)
    (tree / "LICENSE").write_text("GPL\n")
    assert trees.tree_digest(tree / "src/py", within=tree) == before
    with pytest.raises(SourceTreeError) as info:
        trees.tree_digest(tree / "src/py")  # on its own, ../../LICENSE leaves it
    assert "symlink LICENSE -> ../../LICENSE leads outside the source tree" in str(info.value)
    os.symlink(tmp_path, tree / "elsewhere")
    with pytest.raises(SourceTreeError) as info:
        trees.tree_digest(tree / "elsewhere" / "tree", within=tree, name="[builds.x] (source 's')")
    assert str(info.value) == (f"[builds.x] (source 's'): subdirectory elsewhere/tree leads outside the source tree "
                               f"(through the symlink elsewhere -> {tmp_path}); expected a folder inside it")
