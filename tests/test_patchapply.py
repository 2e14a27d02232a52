"""patchapply: strict all-or-nothing application, status in three states, containment."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from envlock.build import sources
from envlock.errors import PatchError
from envlock.patches import patchapply, patchfile, patchmerge
from envlock.store import trees
from envlock.store.store import Store
from kit.patches import MODIFY, new_file, one, sg_patches
from kit.sglike import SgLike, write

# -- status -----------------------------------------------------------------


def test_status_all_apply_at_the_pin(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    states = [(s.patch, s.state) for s in patchapply.status(tree, sg_patches(sg))]
    assert states == [(name, "applies") for name in sg.patches]


def test_status_shows_all_three_states_against_upstream(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    result = patchapply.status(tree, sg_patches(sg))
    assert [s.state for s in result] == ["already-applied", "conflict", "applies"]
    assert result[0].advice == "upstream has it: retire this patch"
    conflict = result[1]
    assert conflict.failure is not None
    assert (conflict.failure.file, conflict.failure.hunk) == ("sgl-kernel/csrc/ops.c", 2)
    assert conflict.advice == "refresh it: sgl-kernel/csrc/ops.c hunk 2 no longer matches"
    text = conflict.failure.describe()
    assert text[0].startswith("sgl-kernel/csrc/ops.c: hunk 2 (@@ -21,6 +29,7 @@")
    assert text[0].endswith("context does not match (first difference at line 23)")
    assert '  |     {"add", add, METH_VARARGS, "a + b"},' in text[text.index("expected at line 21:") :]
    assert '  |     {"add", add, METH_VARARGS, "add two integers"},' in text[text.index("found:") :]
    doc = conflict.to_dict()
    assert doc["state"] == "conflict" and doc["failure"]["hunk"] == 2
    assert result[0].subject == "Add compute capability 12 to MAX_SIZES"


def test_a_conflict_after_a_conflict_names_the_earlier_one(tmp_path: Path) -> None:
    # 0002 edits the line 0001 adds: with 0001 conflicting, 0002 cannot apply on its own,
    # and must not read as a patch to refresh by itself.
    tree = tmp_path / "t"
    write(tree, {"f.txt": "a\nx\nc\n"})  # upstream changed b: 0001 no longer applies
    first = one(MODIFY, "0001-change-b.patch")
    second = one(MODIFY.replace("-b\n+B", "-B\n+BB").replace("change b", "change B again"), "0002-again.patch")
    result = patchapply.status(tree, [first, second])
    assert [s.state for s in result] == ["conflict", "conflict"]
    assert result[0].after is None and result[0].advice.startswith("refresh it: f.txt hunk 1")
    assert result[1].after == "0001-change-b.patch"
    assert result[1].advice == ("checked without 0001-change-b.patch, which conflicts first on the same file: "
                                "refresh that one, then look again (this one may only build on it)")
    assert result[1].to_dict()["after"] == "0001-change-b.patch"
    # A conflict on another file is its own: no note (it was "checked without" a patch it never reads).
    other = one(MODIFY.replace("f.txt", "g.txt"), "0003-other-file.patch")
    write(tree, {"g.txt": "a\nz\nc\n"})
    third = patchapply.status(tree, [first, second, other])[2]
    assert (third.state, third.after, third.advice) == ("conflict", None, "refresh it: g.txt hunk 1 no longer matches")


def test_upstreamed_patch_is_not_applied_twice(sg: SgLike, store: Store) -> None:
    # 0001's context also matches a few lines further down once upstream has it; applying
    # it there would duplicate the table entry. The reverse matching in place wins.
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    with pytest.raises(PatchError) as exc:
        patchapply.apply_all("sglike", tree, "sha256:x", sg_patches(sg)[:1], store)
    assert str(exc.value) == (
        "source 'sglike': 0001-sm12-max-sizes.patch: already applied (its reverse applies): "
        "upstream has it; remove it from the source's patches"
    )


# -- apply_all ----------------------------------------------------------------


def test_apply_all_writes_a_patched_copy_into_the_store(sg: SgLike, store: Store) -> None:
    co = sources.checkout(store, sg.url, sg.pin)
    result = patchapply.apply_all("sglike", co.tree, co.tree_digest, sg_patches(sg), store)
    assert "12: {" in (result.tree / "python/sglike/comm.py").read_text()
    assert "mul(PyObject" in (result.tree / "sgl-kernel/csrc/ops.c").read_text()
    assert "12: {" not in (co.tree / "python/sglike/comm.py").read_text()  # the pin is untouched
    assert result.tree_digest == trees.tree_digest(result.tree) != co.tree_digest
    assert [p.path for p in result.patches] == list(sg.patches)
    assert result.tree.parent.name.startswith("patched-")
    again = patchapply.apply_all("sglike", co.tree, co.tree_digest, sg_patches(sg), store)
    assert again == result


def test_changing_a_patch_changes_the_patched_tree(sg: SgLike, store: Store, tmp_path: Path) -> None:
    co = sources.checkout(store, sg.url, sg.pin)
    first = patchapply.apply_all("sglike", co.tree, co.tree_digest, sg_patches(sg), store)
    edited = tmp_path / "0002-kernel-mul.patch"
    edited.write_text((sg.patches_dir / sg.patches[1]).read_text().replace("a * b", "a times b"))
    patches = sg_patches(sg)
    patches[1] = patchfile.parse_patch_file(edited, label=sg.patches[1])
    second = patchapply.apply_all("sglike", co.tree, co.tree_digest, patches, store)
    assert second.tree_digest != first.tree_digest
    assert second.patches[1].sha256 != first.patches[1].sha256


def test_failed_patch_leaves_nothing_behind(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches = sg_patches(sg)[1:]  # 0002 conflicts upstream, 0003 would apply
    with pytest.raises(PatchError) as exc:
        patchapply.apply_all("sglike", tree, "sha256:up", patches, store)
    message = str(exc.value).splitlines()
    assert message[0] == "source 'sglike': 0002-kernel-mul.patch: does not apply"
    assert message[1].startswith("  sgl-kernel/csrc/ops.c: hunk 2 (@@ -21,6 +29,7 @@")
    assert "  expected at line 21:" in message and "  found:" in message
    assert not [p for p in store.path("sources", "x").parent.iterdir() if p.name.startswith("patched-")]
    assert [p for p in store.tmp.iterdir() if p.name != "partial"] == []


def test_strict_no_fuzz_but_offsets_allowed(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {"f.txt": "new first line\na\nb\nc\n"})
    view = patchapply.TreeView(tree)
    view.apply(one(MODIFY))  # the hunk sits one line lower than its header says
    assert view.changes["f.txt"] == (b"new first line\na\nB\nc\n", 0o100644)
    write(tree, {"f.txt": "a\nb\nC\n"})  # one context line differs: refused, no fuzz
    with pytest.raises(PatchError) as exc:
        patchapply.TreeView(tree).apply(one(MODIFY))
    assert str(exc.value) == "\n".join(
        [
            "p.patch: does not apply",
            "  f.txt: hunk 1 (@@ -1,3 +1,3 @@): context does not match (first difference at line 3)",
            "  expected at line 1:",
            "    | a",
            "    | b",
            "    | c",
            "  found:",
            "    | a",
            "    | b",
            "    | C",
        ]
    )


def test_create_delete_mode_and_no_newline(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {"gone.txt": "bye\n", "run.sh": "echo\n", "tail.txt": "x\ny"})
    text = """\
diff --git a/new/file.py b/new/file.py
new file mode 100644
--- /dev/null
+++ b/new/file.py
@@ -0,0 +1,2 @@
+print('hi')
+x = 1
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
diff --git a/tail.txt b/tail.txt
--- a/tail.txt
+++ b/tail.txt
@@ -1,2 +1,2 @@
 x
-y
\\ No newline at end of file
+z
\\ No newline at end of file
"""
    store = Store.open(tmp_path / "home")
    result = patchapply.apply_all("t", tree, trees.tree_digest(tree), [one(text)], store)
    assert (result.tree / "new/file.py").read_text() == "print('hi')\nx = 1\n"
    assert not (result.tree / "gone.txt").exists()
    assert os.stat(result.tree / "run.sh").st_mode & 0o111
    assert (result.tree / "tail.txt").read_bytes() == b"x\nz"
    assert patchapply.status(result.tree, [one(text)])[0].state == "already-applied"


@contextlib.contextmanager
def _within(seconds: float) -> Iterator[None]:
    """Fail the test, rather than hang the run, when the block takes longer than ``seconds``."""

    class LateError(Exception):
        pass

    def stop(signum: int, frame: FrameType | None) -> None:
        raise LateError

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except LateError:
        # Failed here, without the interrupted frames: pytest cannot show one stopped mid-line.
        pytest.fail(f"took longer than {seconds} s", pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_FAR = 99999999999999999999


def test_a_hunk_line_far_past_the_end_is_looked_for_within_the_file(tmp_path: Path) -> None:
    """QA's hang: the search for a hunk's context is bounded by the file's length, not by its header's line."""
    tree = tmp_path / "t"
    write(tree, {"a.txt": "hello\n"})
    header = f"@@ -{_FAR},1 +1,1 @@"
    with _within(10):  # the search went on for as many lines as the header names: forever
        # Its context is at line 1: an offset like any other, as git apply takes it.
        applied = patchapply.TreeView(tree).try_apply(one(f"--- a/a.txt\n+++ b/a.txt\n{header}\n-hello\n+bye\n"))
        result = patchapply.status(tree, [one(f"--- a/a.txt\n+++ b/a.txt\n{header}\n-other\n+bye\n")])
    assert applied == patchapply.Applied({"a.txt": (b"bye\n", 0o100644)}, _FAR - 1)
    assert [s.state for s in result] == ["conflict"]
    assert result[0].failure is not None
    assert result[0].failure.describe() == [
        f"a.txt: hunk 1 ({header}): the file ends before the hunk",
        f"expected at line {_FAR}:",
        "  | other",
        "found:",
        "  (end of file)",
    ]


def _tree_with_a_dir(tmp_path: Path) -> Path:
    tree = tmp_path / "t"
    write(tree, {"a.txt": "hello\n", "adir/f": "x\n"})
    return tree


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        (new_file("adir"), "adir: would be created, but the tree has a directory there"),
        (new_file("a.txt/n"), "a.txt/n: would be created, but 'a.txt' is a file, not a directory"),
        # A plain diff whose ---/+++ names differ moves the file: where it goes must be free too.
        ("--- a/a.txt\n+++ b/adir\n@@ -1 +1 @@\n-hello\n+bye\n",
         "adir: would be created, but the tree has a directory there"),
        # A directory an earlier file of the patch makes (by creating a file in it).
        (new_file("new/f") + new_file("new"), "new: would be created, but the tree has a directory there"),
    ],
    ids=["over-a-directory", "below-a-file", "moved-over-a-directory", "over-a-new-directory"],
)
def test_creating_a_file_where_the_tree_has_a_directory_is_a_conflict(tmp_path: Path, text: str,
                                                                      failure: str) -> None:
    tree = _tree_with_a_dir(tmp_path)
    [result] = patchapply.status(tree, [one(text)])
    assert result.state == "conflict" and result.failure is not None
    assert result.failure.describe() == [failure]
    assert result.advice == f"refresh it: {result.failure.file} no longer matches"  # no "hunk 0": the file itself
    with pytest.raises(PatchError) as exc:
        patchapply.apply_all("s", tree, trees.tree_digest(tree), [one(text)], Store.open(tmp_path / "home"))
    assert str(exc.value) == f"source 's': p.patch: does not apply\n  {failure}"


def test_a_file_deleted_earlier_may_become_a_directory(tmp_path: Path) -> None:
    tree = _tree_with_a_dir(tmp_path)
    text = "diff --git a/a.txt b/a.txt\ndeleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n"
    result = patchapply.apply_all("s", tree, trees.tree_digest(tree), [one(text + new_file("a.txt/n"))],
                                  Store.open(tmp_path / "home"))
    assert (result.tree / "a.txt" / "n").read_text() == "z\n"


def test_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, {"f.txt": "a\nb\nc\n"})
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    text = MODIFY.replace("f.txt", "link/f.txt")
    with pytest.raises(PatchError) as exc:
        patchapply.TreeView(tree).apply(one(text))
    assert str(exc.value) == (
        "p.patch: does not apply\n"
        f"  link/f.txt: refused: goes through the symlink 'link' in the source tree (-> {outside})"
    )
    assert (outside / "f.txt").read_text() == "a\nb\nc\n"


# -- 3-way ----------------------------------------------------------------------------


def test_merge_keeps_a_rej_where_upstream_deleted_the_file(tmp_path: Path) -> None:
    base, ours = tmp_path / "base", tmp_path / "ours"
    write(base, {"f.txt": "a\nb\nc\n"})
    write(ours, {"g.txt": "other\n"})
    merged = patchmerge.merge_patch(patchapply.TreeView(ours), patchapply.TreeView(base), one(MODIFY),
                                    ours_label="v2", theirs_label="patch 0001")
    assert [c.reason for c in merged.conflicts] == [
        "upstream deleted it, the patch changes it; its diff is in f.txt.rej"]
    assert merged.rejects == {"f.txt": b"--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"}
    assert merged.changes == {}


def test_merge_finds_upstreams_lines_where_the_hunk_moved(tmp_path: Path) -> None:
    """The conflict shows what upstream has where the hunk's lines went, not the old line number."""
    base, ours = tmp_path / "base", tmp_path / "ours"
    write(base, {"f.txt": "a\nb\nc\n"})
    write(ours, {"f.txt": "new 1\nnew 2\nnew 3\na\nb, reworded\nc\n"})
    merged = patchmerge.merge_patch(patchapply.TreeView(ours), patchapply.TreeView(base), one(MODIFY),
                                    ours_label="v2", theirs_label="patch 0001")
    assert merged.conflicted == ("f.txt",)
    failure = merged.conflicts[0]
    assert (failure.hunk, failure.line, failure.expected, failure.actual) == (1, 5, ("b",), ("b, reworded",))
    assert merged.changes["f.txt"] == (b"new 1\nnew 2\nnew 3\na\n<<<<<<< v2\nb, reworded\n=======\nB\n"
                                       b">>>>>>> patch 0001\nc\n", 0o100644)
