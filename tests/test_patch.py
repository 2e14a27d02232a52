"""patch: strict all-or-nothing application, status in three states, refusals, edit/record."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import pytest

from envlock import patch, sources, trees
from envlock.errors import PatchError, UsageError
from envlock.lockfile import LockedPatch
from envlock.store import Store
from kit.sglike import SgLike, git, write

ROOT = Path(__file__).resolve().parents[1]


def _patches(sg: SgLike) -> list[patch.PatchFile]:
    return patch.load_patches(sg.patches_dir, sg.patches)


def _one(text: str, label: str = "p.patch") -> patch.PatchFile:
    return patch.parse_patch(text.encode(), label=label)


MODIFY = """\
Subject: change b
Why: a test.
  It goes on.
Upstream: none
---
diff --git a/f.txt b/f.txt
--- a/f.txt
+++ b/f.txt
@@ -1,3 +1,3 @@
 a
-b
+B
 c
"""


# -- status -----------------------------------------------------------------


def test_status_all_apply_at_the_pin(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    states = [(s.patch, s.state) for s in patch.status(tree, _patches(sg))]
    assert states == [(name, "applies") for name in sg.patches]


def test_status_shows_all_three_states_against_upstream(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    result = patch.status(tree, _patches(sg))
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
    first = _one(MODIFY, "0001-change-b.patch")
    second = _one(MODIFY.replace("-b\n+B", "-B\n+BB").replace("change b", "change B again"), "0002-again.patch")
    result = patch.status(tree, [first, second])
    assert [s.state for s in result] == ["conflict", "conflict"]
    assert result[0].after is None and result[0].advice.startswith("refresh it: f.txt hunk 1")
    assert result[1].after == "0001-change-b.patch"
    assert result[1].advice == ("checked without 0001-change-b.patch, which conflicts first: refresh that one, "
                                "then look again (this one may only build on it)")
    assert result[1].to_dict()["after"] == "0001-change-b.patch"


def test_upstreamed_patch_is_not_applied_twice(sg: SgLike, store: Store) -> None:
    # 0001's context also matches a few lines further down once upstream has it; applying
    # it there would duplicate the table entry. The reverse matching in place wins.
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    with pytest.raises(PatchError) as exc:
        patch.apply_all("sglike", tree, "sha256:x", _patches(sg)[:1], store)
    assert str(exc.value) == (
        "source 'sglike': 0001-sm12-max-sizes.patch: already applied (its reverse applies): "
        "upstream has it; remove it from the source's patches"
    )


# -- apply_all ----------------------------------------------------------------


def test_apply_all_writes_a_patched_copy_into_the_store(sg: SgLike, store: Store) -> None:
    co = sources.checkout(store, sg.url, sg.pin)
    result = patch.apply_all("sglike", co.tree, co.tree_digest, _patches(sg), store)
    assert "12: {" in (result.tree / "python/sglike/comm.py").read_text()
    assert "mul(PyObject" in (result.tree / "sgl-kernel/csrc/ops.c").read_text()
    assert "12: {" not in (co.tree / "python/sglike/comm.py").read_text()  # the pin is untouched
    assert result.tree_digest == trees.tree_digest(result.tree) != co.tree_digest
    assert [p.path for p in result.patches] == list(sg.patches)
    assert result.tree.parent.name.startswith("patched-")
    again = patch.apply_all("sglike", co.tree, co.tree_digest, _patches(sg), store)
    assert again == result


def test_changing_a_patch_changes_the_patched_tree(sg: SgLike, store: Store, tmp_path: Path) -> None:
    co = sources.checkout(store, sg.url, sg.pin)
    first = patch.apply_all("sglike", co.tree, co.tree_digest, _patches(sg), store)
    edited = tmp_path / "0002-kernel-mul.patch"
    edited.write_text((sg.patches_dir / sg.patches[1]).read_text().replace("a * b", "a times b"))
    patches = _patches(sg)
    patches[1] = patch.parse_patch_file(edited, label=sg.patches[1])
    second = patch.apply_all("sglike", co.tree, co.tree_digest, patches, store)
    assert second.tree_digest != first.tree_digest
    assert second.patches[1].sha256 != first.patches[1].sha256


def test_failed_patch_leaves_nothing_behind(sg: SgLike, store: Store) -> None:
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches = _patches(sg)[1:]  # 0002 conflicts upstream, 0003 would apply
    with pytest.raises(PatchError) as exc:
        patch.apply_all("sglike", tree, "sha256:up", patches, store)
    message = str(exc.value).splitlines()
    assert message[0] == "source 'sglike': 0002-kernel-mul.patch: does not apply"
    assert message[1].startswith("  sgl-kernel/csrc/ops.c: hunk 2 (@@ -21,6 +29,7 @@")
    assert "  expected at line 21:" in message and "  found:" in message
    assert not [p for p in store.path("sources", "x").parent.iterdir() if p.name.startswith("patched-")]
    assert [p for p in store.tmp.iterdir() if p.name != "partial"] == []


def test_strict_no_fuzz_but_offsets_allowed(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {"f.txt": "new first line\na\nb\nc\n"})
    view = patch.TreeView(tree)
    view.apply(_one(MODIFY))  # the hunk sits one line lower than its header says
    assert view.changes["f.txt"] == (b"new first line\na\nB\nc\n", 0o100644)
    write(tree, {"f.txt": "a\nb\nC\n"})  # one context line differs: refused, no fuzz
    with pytest.raises(PatchError) as exc:
        patch.TreeView(tree).apply(_one(MODIFY))
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
    result = patch.apply_all("t", tree, trees.tree_digest(tree), [_one(text)], store)
    assert (result.tree / "new/file.py").read_text() == "print('hi')\nx = 1\n"
    assert not (result.tree / "gone.txt").exists()
    assert os.stat(result.tree / "run.sh").st_mode & 0o111
    assert (result.tree / "tail.txt").read_bytes() == b"x\nz"
    assert patch.status(result.tree, [_one(text)])[0].state == "already-applied"


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
        applied = patch.TreeView(tree).try_apply(_one(f"--- a/a.txt\n+++ b/a.txt\n{header}\n-hello\n+bye\n"))
        result = patch.status(tree, [_one(f"--- a/a.txt\n+++ b/a.txt\n{header}\n-other\n+bye\n")])
    assert applied == patch.Applied({"a.txt": (b"bye\n", 0o100644)}, _FAR - 1)
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


def _new_file(path: str) -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+z\n"


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        (_new_file("adir"), "adir: would be created, but the tree has a directory there"),
        (_new_file("a.txt/n"), "a.txt/n: would be created, but 'a.txt' is a file, not a directory"),
        # A plain diff whose ---/+++ names differ moves the file: where it goes must be free too.
        ("--- a/a.txt\n+++ b/adir\n@@ -1 +1 @@\n-hello\n+bye\n",
         "adir: would be created, but the tree has a directory there"),
        # A directory an earlier file of the patch makes (by creating a file in it).
        (_new_file("new/f") + _new_file("new"), "new: would be created, but the tree has a directory there"),
    ],
    ids=["over-a-directory", "below-a-file", "moved-over-a-directory", "over-a-new-directory"],
)
def test_creating_a_file_where_the_tree_has_a_directory_is_a_conflict(tmp_path: Path, text: str,
                                                                      failure: str) -> None:
    tree = _tree_with_a_dir(tmp_path)
    [result] = patch.status(tree, [_one(text)])
    assert result.state == "conflict" and result.failure is not None
    assert result.failure.describe() == [failure]
    assert result.advice == f"refresh it: {result.failure.file} no longer matches"  # no "hunk 0": the file itself
    with pytest.raises(PatchError) as exc:
        patch.apply_all("s", tree, trees.tree_digest(tree), [_one(text)], Store.open(tmp_path / "home"))
    assert str(exc.value) == f"source 's': p.patch: does not apply\n  {failure}"


def test_a_file_deleted_earlier_may_become_a_directory(tmp_path: Path) -> None:
    tree = _tree_with_a_dir(tmp_path)
    text = "diff --git a/a.txt b/a.txt\ndeleted file mode 100644\n--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n"
    result = patch.apply_all("s", tree, trees.tree_digest(tree), [_one(text + _new_file("a.txt/n"))],
                             Store.open(tmp_path / "home"))
    assert (result.tree / "a.txt" / "n").read_text() == "z\n"


def test_patch_status_and_lock_name_the_patch_creating_a_file_over_a_directory(ws, cli) -> None:  # type: ignore[no-untyped-def]
    """QA's repro: status said "applies" and lock failed on a store temp path ("tree/adir: Is a directory")."""
    write(ws.root, {"src/a.txt": "hello\n", "src/adir/f": "x\n", "patches/s/0001-p.patch": _new_file("adir")})
    ws.write_spec("e", _SPEC.format(patches='"patches/s/0001-p.patch"'))
    r = cli("patch", "status", "e")
    assert (r.code, r.out) == (1, "s\n"
                                  "  conflict         patches/s/0001-p.patch  -- refresh it: adir no longer matches\n"
                                  "      adir: would be created, but the tree has a directory there\n")
    r = cli("lock", "e")
    assert (r.code, r.err) == (1, "envlock: error: source 's': patches/s/0001-p.patch: does not apply\n"
                                  "  adir: would be created, but the tree has a directory there\n")


# -- refusals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../outside.txt", "'..' component leaves the source tree"),
        ("sub/../../outside.txt", "'..' component leaves the source tree"),
        ("/etc/passwd", "absolute path, outside the source tree"),
        (".git/config", "writes into a .git directory"),
    ],
)
def test_paths_outside_the_tree_are_refused(path: str, problem: str) -> None:
    a = path if path.startswith("/") else f"a/{path}"
    b = path if path.startswith("/") else f"b/{path}"
    text = f"diff --git {a} {b}\n--- {a}\n+++ {b}\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(PatchError) as exc:
        _one(text, label="patches/evil.patch")
    assert str(exc.value) == f"patches/evil.patch: refuses to touch {path!r}: {problem}"


def test_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, {"f.txt": "a\nb\nc\n"})
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    text = MODIFY.replace("f.txt", "link/f.txt")
    with pytest.raises(PatchError) as exc:
        patch.TreeView(tree).apply(_one(text))
    assert str(exc.value) == (
        "p.patch: does not apply\n"
        f"  link/f.txt: refused: goes through the symlink 'link' in the source tree (-> {outside})"
    )
    assert (outside / "f.txt").read_text() == "a\nb\nc\n"


_QUOTED = 'diff --git "a/{0}" "b/{0}"\nnew file mode 100644\n--- /dev/null\n+++ "b/{0}"\n@@ -0,0 +1 @@\n+z\n'
_ESCAPE = "expected a backslash and three octal digits, \\000 to \\377, as git quotes a byte"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_QUOTED.format(r"x\08y"), rf'p.patch: line 1: bad escape \08y in the quoted path "a/x\08y"; {_ESCAPE}'),
        (_QUOTED.format(r"x\777"), rf'p.patch: line 1: bad escape \777 in the quoted path "a/x\777"; {_ESCAPE}'),
        (_QUOTED.format(r"x\0"), rf'p.patch: line 1: bad escape \0 in the quoted path "a/x\0"; {_ESCAPE}'),
        (_QUOTED.format(r"x\000y"), r"p.patch: refuses to touch 'x\x00y': holds a NUL byte, which no file name can"),
        (_new_file("n").replace("100644", "zzz"),
         "p.patch: line 2: malformed file mode 'zzz'; expected octal digits, such as 100644"),
        (_new_file("n").replace("100644", "10_0644"),  # int(..., 8) would take it
         "p.patch: line 2: malformed file mode '10_0644'; expected octal digits, such as 100644"),
        ("diff --git a/n b/n\nold mode 100644\nnew mode -100755\n",
         "p.patch: line 3: malformed file mode '-100755'; expected octal digits, such as 100644"),
    ],
    ids=["escape-08", "escape-777", "escape-short", "nul", "mode-zzz", "mode-underscore", "mode-sign"],
)
def test_malformed_paths_and_modes_are_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(PatchError) as exc:
        _one(text)
    assert str(exc.value) == message


def test_patch_status_reports_a_malformed_patch_as_an_error(ws, cli) -> None:  # type: ignore[no-untyped-def]
    """QA's repros ended in a traceback (ValueError) instead of one error line naming the patch file."""
    write(ws.root, {"src/a.txt": "hello\n"})
    ws.write_spec("e", _SPEC.format(patches='"patches/s/0001-p.patch"'))
    for text, error in [
        (_QUOTED.format(r"x\08y"), rf'line 1: bad escape \08y in the quoted path "a/x\08y"; {_ESCAPE}'),
        (_QUOTED.format(r"x\000y"), r"refuses to touch 'x\x00y': holds a NUL byte, which no file name can"),
        (_new_file("n").replace("100644", "zzz"), "line 2: malformed file mode 'zzz'; expected octal digits, such as "
                                                  "100644"),
    ]:
        write(ws.root, {"patches/s/0001-p.patch": text})
        r = cli("patch", "status", "e")
        assert (r.code, r.err) == (1, f"envlock: error: patches/s/0001-p.patch: {error}\n")


def test_binary_and_rename_patches_are_refused() -> None:
    with pytest.raises(PatchError, match="binary patches are not supported"):
        _one("diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n")
    with pytest.raises(PatchError, match="renames and copies are not supported"):
        _one("diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n")


def test_header_fields() -> None:
    parsed = _one(MODIFY)
    assert (parsed.subject, parsed.why, parsed.upstream) == ("change b", "a test. It goes on.", "none")


def test_the_real_sglang_patches_parse() -> None:
    labels = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "patches/sglang").glob("*.patch"))
    parsed = patch.load_patches(ROOT, labels)
    assert len(parsed) == 6
    assert all(p.subject and p.why and p.upstream for p in parsed)
    touched = {f.path for p in parsed for f in p.files}
    assert touched == {
        "python/sglang/srt/distributed/device_communicators/all_reduce_utils.py",
        "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py",
        "sgl-kernel/CMakeLists.txt",
        "sgl-kernel/python/sgl_kernel/flash_attn.py",
    }


# -- edit / record ----------------------------------------------------------------


def _patches_copied(sg: SgLike, patches_dir: Path) -> Path:
    """The fixture's patch files copied into ``patches_dir`` (record writes there)."""
    patches_dir.mkdir(parents=True)
    for name in sg.patches:
        (patches_dir / name).write_bytes((sg.patches_dir / name).read_bytes())
    return patches_dir


def _listed(patches_dir: Path, labels: Sequence[str]) -> tuple[LockedPatch, ...]:
    """The patches a spec lists now, as ``record`` is given them (labels relative to ``patches_dir``)."""
    return tuple(p.locked() for p in patch.load_patches(patches_dir, labels))


def test_edit_then_record_writes_the_next_patch(sg: SgLike, store: Store, tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches" / "sglike")
    listed = _listed(patches_dir, sg.patches)  # the spec's patches, unchanged while the work dir is in use
    work = tmp_path / "work"
    session = patch.edit("sglike", tree, _patches(sg), work)
    assert session.levels == tuple(sg.patches)
    log = git(work, "log", "--format=%s").splitlines()
    assert log == [*reversed(sg.patches), "base (unpatched)"]
    assert "12: {" in (work / "python/sglike/comm.py").read_text()

    comm = work / "python/sglike/comm.py"
    comm.write_text(comm.read_text().replace("    12: {", "    11: {\n        2: 32 * MiB,\n    },\n    12: {"))
    (work / "python/sglike/extra.py").write_text("EXTRA = True\n")
    recorded = patch.record(work, patches_dir, subject="Add cc 11 (a test)", why="Because.", upstream="not proposed",
                            current=listed, workspace_root=patches_dir)
    assert recorded.path == patches_dir / "0004-add-cc-11-a-test.patch"
    assert recorded.files == ("python/sglike/comm.py", "python/sglike/extra.py")
    text = recorded.path.read_text()
    assert text.startswith("Subject: Add cc 11 (a test)\nWhy: Because.\nUpstream: not proposed\n---\n")
    assert "diff --git a/python/sglike/comm.py b/python/sglike/comm.py" in text
    assert "+    11: {" in text and "+EXTRA = True" in text

    # The recorded patch is the next level: the whole series applies at the pin.
    labels = [*sg.patches, recorded.path.name]
    states = patch.status(tree, patch.load_patches(patches_dir, labels))
    assert [s.state for s in states] == ["applies"] * 4
    with pytest.raises(PatchError, match="nothing to record"):
        patch.record(work, patches_dir, subject="again", why="Still.", upstream="", current=listed,
                     workspace_root=patches_dir)
    with pytest.raises(UsageError, match="a new patch needs a subject and a why"):  # exit 2, before any work
        patch.record(work, patches_dir, subject="again", why="", upstream="", current=listed,
                     workspace_root=patches_dir)

    # patch(1)'s leftovers from redoing a change by hand are refused, and left where they are.
    (work / "python/sglike/comm.py.orig").write_text("old\n")
    (work / "python/sglike/comm.py.rej").write_text("hunk\n")
    with pytest.raises(PatchError, match=r"2 patch\(1\) leftover file\(s\) would be recorded") as info:
        patch.record(work, patches_dir, subject="Leftovers", why="No.", upstream="", current=listed,
                     workspace_root=patches_dir)
    assert info.value.details == ("python/sglike/comm.py.orig", "python/sglike/comm.py.rej")
    assert git(work, "diff", "--cached", "--name-only") == "" and (work / "python/sglike/comm.py.rej").is_file()
    (work / "python/sglike/comm.py.orig").unlink()
    (work / "python/sglike/comm.py.rej").unlink()

    # The files are named as the diff names them (a space is part of a name), and what the
    # source's .gitignore covers (the byte-code of trying the change) is left out.
    (work / ".gitignore").write_text("__pycache__/\n")
    (work / "python/sglike/__pycache__").mkdir()
    (work / "python/sglike/__pycache__/comm.cpython-311.pyc").write_bytes(b"\x00\xa7binary")
    (work / "python/sglike/table with space.py").write_text("T = 1\n")
    second = patch.record(work, patches_dir, subject="Table", why="Kept in git.", upstream="no", current=listed,
                          workspace_root=patches_dir)
    assert second.files == (".gitignore", "python/sglike/table with space.py")
    assert "+T = 1" in second.path.read_text()


def test_record_keeps_the_bytes_of_a_file_that_is_not_utf8(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """A Latin-1 file's change is recorded byte for byte, and the patch applies at the pin."""
    tree = sources.checkout(store, sg.url, sg.pin).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches" / "sglike")
    listed = _listed(patches_dir, sg.patches)
    work = tmp_path / "work"
    patch.edit("sglike", tree, _patches(sg), work)
    latin1 = "# caf\u00e9 cr\u00e8me, \u00b5s\nNAME = 'Se\u00f1or'\n".encode("latin-1")
    (work / "python/sglike/names.py").write_bytes(latin1)
    recorded = patch.record(work, patches_dir, subject="Names", why="Latin-1 data.", upstream="", current=listed,
                            workspace_root=patches_dir)
    data = recorded.path.read_bytes()
    assert b"+# caf\xe9 cr\xe8me, \xb5s\n+NAME = 'Se\xf1or'\n" in data
    assert b"\xef\xbf\xbd" not in data  # no U+FFFD replacement character
    labels = [*sg.patches, recorded.path.name]
    states = patch.status(tree, patch.load_patches(patches_dir, labels))
    assert [s.state for s in states] == ["applies"] * 4


def test_refresh_workflow_for_a_new_upstream_commit(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """edit --against NEW: 0001 is upstream (retire), 0002 conflicts (redo + record --refresh), 0003 follows."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches")
    # A header written over two lines, as people do: a refresh keeps it as it is.
    second = patches_dir / sg.patches[1]
    second.write_text(second.read_text().replace("Why: the fixture needs a C patch.\n",
                                                 "Why: the fixture needs\n  a C patch.\n"))
    work = tmp_path / "work"
    session = patch.edit("sglike", tree, patch.load_patches(patches_dir, sg.patches), work, stop_at_conflict=True)
    assert session.upstreamed == (sg.patches[0],)
    assert session.levels == ()
    assert session.pending == sg.patches[1:]
    assert session.conflict is not None and session.conflict.file == "sgl-kernel/csrc/ops.c"

    # Redo 0002's change by hand on the new code (upstream reworded the method table).
    ops = work / "sgl-kernel/csrc/ops.c"
    ops.write_text(ops.read_text().replace(
        "static PyObject *built_against(",
        "static PyObject *mul(PyObject *self, PyObject *args) {\n    long a, b;\n"
        '    if (!PyArg_ParseTuple(args, "ll", &a, &b)) {\n        return NULL;\n    }\n'
        "    return PyLong_FromLong(a * b);\n}\n\nstatic PyObject *built_against(",
    ).replace('    {"add", add, METH_VARARGS, "add two integers"},\n',
              '    {"add", add, METH_VARARGS, "add two integers"},\n    {"mul", mul, METH_VARARGS, "a * b"},\n'))
    init = work / "sgl-kernel/python/sglike_kernel/__init__.py"
    init.write_text(init.read_text().replace("built_against, magic", "built_against, magic, mul")
                    .replace('"magic"]', '"magic", "mul"]'))
    before = (patches_dir / sg.patches[1]).read_text()
    recorded = patch.record(work, patches_dir, current=_listed(patches_dir, sg.patches), subject=None, why=None,
                            upstream=None, refresh=True, workspace_root=patches_dir)
    assert recorded.path == patches_dir / sg.patches[1]  # same file, same name
    after = recorded.path.read_text()
    assert after != before
    assert after.startswith("Subject: sgl-kernel: add mul()\nWhy: the fixture needs\n  a C patch.\n"
                            "Upstream: fixture\n---\n")
    assert recorded.pending == ()  # 0003 applied on top by itself
    # The refreshed series (without the upstreamed 0001) applies cleanly to the new commit.
    states = patch.status(tree, patch.load_patches(patches_dir, sg.patches[1:]))
    assert [st.state for st in states] == ["applies", "applies"]
    (work / "README.md").write_text("changed\n")
    with pytest.raises(UsageError, match="no pending patch to refresh; record a new one with --subject and --why"):
        patch.record(work, patches_dir, current=_listed(patches_dir, sg.patches), subject=None, why=None,
                     upstream=None, refresh=True, workspace_root=patches_dir)


def test_refresh_retires_a_later_patch_the_new_code_already_has(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """As edit does: after the conflicting patch is redone, a pending one upstream has is retired, not stuck."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches")
    order = (sg.patches[1], sg.patches[0], sg.patches[2])  # the conflict first, then the upstreamed one
    work = tmp_path / "work"
    session = patch.edit("sglike", tree, patch.load_patches(patches_dir, order), work, stop_at_conflict=True)
    assert session.pending == order
    ops = work / "sgl-kernel/csrc/ops.c"
    ops.write_text(ops.read_text() + "\n/* redone by hand */\n")
    recorded = patch.record(work, patches_dir, current=_listed(patches_dir, order), subject=None, why=None,
                            upstream=None, refresh=True, workspace_root=patches_dir)
    assert recorded.upstreamed == (sg.patches[0],)
    assert recorded.pending == ()
    assert json.loads((work / ".git" / "envlock-edit.json").read_text())["levels"] == [sg.patches[1], sg.patches[2]]


def test_record_needs_an_edit_workdir(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="not an envlock edit work dir"):
        patch.record(tmp_path, tmp_path, current=(), subject="x", why="", upstream="")


def test_edit_refuses_a_non_empty_workdir(sg: SgLike, store: Store, tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "x").write_text("")
    with pytest.raises(UsageError, match="work dir exists and is not empty"):
        patch.edit("sglike", tree, _patches(sg), tmp_path / "work")
    with pytest.raises(UsageError, match="work dir exists and is a file; expected a new or empty directory"):
        patch.edit("sglike", tree, _patches(sg), tmp_path / "work" / "x")


def test_format_header_indents_continuations() -> None:
    assert patch.format_header("S", "line one\nline two", "U") == (
        "Subject: S\nWhy: line one\n  line two\nUpstream: U\n---\n"
    )


# -- record holds the work dir to the spec's patches ----------------------------


def _in_workspace(sg: SgLike, root: Path) -> list[str]:
    """The fixture's patches copied into ``root/patches/sglike``; their labels as a spec lists them."""
    _patches_copied(sg, root / "patches" / "sglike")
    return [f"patches/sglike/{name}" for name in sg.patches]


def _stale(work: Path) -> str:
    return (f"{work}: the spec's patches of source 'sglike' are no longer those this work dir was made on, so a patch "
            "recorded here would be diffed against a tree the spec does not build; make a new work dir with "
            "`envlock patch edit e sglike` and redo your change there")


@pytest.mark.parametrize("change", ["removed", "added", "changed", "reordered"])
def test_record_refuses_a_work_dir_made_on_other_patches_than_the_spec_lists(sg: SgLike, store: Store, tmp_path: Path,
                                                                             change: str) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    root = tmp_path / "ws"
    first, second, third = labels = _in_workspace(sg, root)
    work = tmp_path / "work"
    patch.edit("sglike", tree, patch.load_patches(root, labels), work, env="e")
    (work / "README.md").write_text("changed\n")
    now = labels
    if change == "removed":
        now, details = [first, second], [f"{third}: removed from the spec"]
    elif change == "added":
        more = "patches/sglike/0004-more.patch"
        (root / more).write_text(MODIFY)
        now, details = [*labels, more], [f"{more}: added to the spec"]
    elif change == "changed":
        was = patch.parse_patch_file(root / second).sha256
        (root / second).write_text((root / second).read_text().replace("Why:", "Why: reworded,", 1))
        is_now = patch.parse_patch_file(root / second).sha256
        details = [f"{second}: its file changed (sha256 {was[:12]} -> {is_now[:12]})"]
    else:
        now = [second, first, third]
        details = [f"the spec lists {second}, {first}, {third}; expected {first}, {second}, {third}"]
    listing = sorted(p.name for p in (root / "patches/sglike").iterdir())
    with pytest.raises(PatchError) as info:
        patch.record(work, root / "patches/sglike", current=_listed(root, now), subject="S", why="W", upstream="",
                     workspace_root=root)
    assert (info.value.message, info.value.details) == (_stale(work), tuple(details))
    assert info.value.exit_code == 1  # as the other refusals of record's work dir
    # Checked before anything is written or staged.
    assert sorted(p.name for p in (root / "patches/sglike").iterdir()) == listing
    assert git(work, "status", "--porcelain") == "M README.md"


def test_record_refuses_a_new_patch_numbered_after_one_the_work_dir_was_not_made_on(sg: SgLike, store: Store,
                                                                                    tmp_path: Path) -> None:
    """Two work dirs made on 0001-0003: the second's patch must not be 0005, after the first's 0004."""
    tree = sources.checkout(store, sg.url, sg.pin).tree
    root = tmp_path / "ws"
    labels = _in_workspace(sg, root)
    patches_dir = root / "patches/sglike"
    one, two = tmp_path / "one", tmp_path / "two"
    for work in (one, two):
        patch.edit("sglike", tree, patch.load_patches(root, labels), work, env="e")
    (one / "README.md").write_text("one\n")
    (two / "python/sglike/__init__.py").write_text("TWO = 2\n")
    first = patch.record(one, patches_dir, current=_listed(root, labels), subject="One", why="W", upstream="",
                         workspace_root=root)
    assert first.path == patches_dir / "0004-one.patch"
    with pytest.raises(PatchError) as info:
        patch.record(two, patches_dir, current=_listed(root, labels), subject="Two", why="W", upstream="",
                     workspace_root=root)
    assert str(info.value) == (
        f"{two}: a new patch of source 'sglike' would be numbered after patches/sglike/0004-one.patch, which this work "
        "dir was not made on (recorded from another work dir since?); the new patch was diffed without it. Add it to "
        "the spec and make a new work dir with `envlock patch edit e sglike` and redo your change there, or delete it "
        "if retired")
    assert not list(patches_dir.glob("0005-*"))
    # Once the spec lists 0004, the second work dir is made on other patches than the spec's.
    grown = _listed(root, [*labels, "patches/sglike/0004-one.patch"])
    with pytest.raises(PatchError) as info:
        patch.record(two, patches_dir, current=grown, subject="Two", why="W", upstream="", workspace_root=root)
    assert info.value.details == ("patches/sglike/0004-one.patch: added to the spec",)
    # The first goes on: its own patches may be in the spec or not yet.
    (one / "README.md").write_text("one, again\n")
    assert patch.record(one, patches_dir, current=_listed(root, labels), subject="Again", why="W", upstream="",
                        workspace_root=root).number == 5
    (one / "README.md").write_text("one, a third time\n")
    assert patch.record(one, patches_dir, current=grown, subject="Third", why="W", upstream="",
                        workspace_root=root).number == 6


def test_record_follows_what_refresh_rewrote_and_what_upstream_has(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """After record --refresh the spec lists the rewritten file; a patch upstream has may leave the spec."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    root = tmp_path / "ws"
    labels = _in_workspace(sg, root)
    order = [labels[1], labels[0], labels[2]]  # the conflict first, then the upstreamed one
    patches_dir = root / "patches/sglike"
    work = tmp_path / "work"
    patch.edit("sglike", tree, patch.load_patches(root, order), work, stop_at_conflict=True, env="e")
    ops = work / "sgl-kernel/csrc/ops.c"
    ops.write_text(ops.read_text() + "\n/* redone by hand */\n")
    refreshed = patch.record(work, patches_dir, current=_listed(root, order), subject=None, why=None, upstream=None,
                             refresh=True, workspace_root=root)
    assert refreshed.upstreamed == (labels[0],)
    (work / "README.md").write_text("next\n")
    assert patch.record(work, patches_dir, current=_listed(root, order), subject="Next", why="W", upstream="",
                        workspace_root=root).number == 4
    retired = [labels[1], labels[2]]  # the advice taken: 0001 dropped from the spec
    (work / "README.md").write_text("after\n")
    assert patch.record(work, patches_dir, current=_listed(root, retired), subject="After", why="W", upstream="",
                        workspace_root=root).number == 5
    # Listed, the upstreamed patch is still held to the bytes the work dir saw.
    was = patch.parse_patch_file(root / labels[0]).sha256
    (root / labels[0]).write_text((root / labels[0]).read_text().replace("Why:", "Why: reworded,", 1))
    (work / "README.md").write_text("later\n")
    with pytest.raises(PatchError) as info:
        patch.record(work, patches_dir, current=_listed(root, order), subject="Later", why="W", upstream="",
                     workspace_root=root)
    assert info.value.details == (
        f"{labels[0]}: its file changed (sha256 {was[:12]} -> {patch.parse_patch_file(root / labels[0]).sha256[:12]})",)


def test_record_refuses_a_work_dir_that_does_not_say_what_it_was_made_on(sg: SgLike, store: Store,
                                                                         tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    work = tmp_path / "work"
    patch.edit("sglike", tree, _patches(sg), work, env="e")
    state = work / ".git" / "envlock-edit.json"
    older = {k: v for k, v in json.loads(state.read_text()).items() if k in ("source", "levels", "pending")}
    state.write_text(json.dumps(older))  # as an envlock before made_on wrote it
    (work / "README.md").write_text("changed\n")
    message = (f"{work}: the work dir does not record the env and the patches it was made on (made by an earlier "
               "envlock, or not by `envlock patch edit`); expected a work dir made with `envlock patch edit ENV "
               "sglike`: make one and redo your change there")
    with pytest.raises(PatchError) as info:
        patch.edited_env(work)
    assert str(info.value) == message
    with pytest.raises(PatchError) as info:
        patch.record(work, sg.patches_dir, current=_listed(sg.patches_dir, sg.patches), subject="S", why="W",
                     upstream="", workspace_root=sg.patches_dir)
    assert str(info.value) == message


_SPEC = ('[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://127.0.0.1:9/simple"\ndefault = true\n'
         '[sources.s]\npath = "src"\npatches = [{patches}]\n')


def test_patch_record_refuses_a_work_dir_the_spec_has_moved_from(ws, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """QA's repro: W2 is made on 0001 + 0002; 0002 leaves the spec; W2's patch would be diffed against it."""
    write(ws.root, {"src/f.txt": "a\nb\nc\n", "patches/s/0001-x.patch": MODIFY})

    def spec(*names: str) -> None:
        ws.write_spec("e", _SPEC.format(patches=", ".join(f'"patches/s/{n}"' for n in names)))

    spec("0001-x.patch")
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    assert cli("patch", "edit", "e", "s", "--dir", str(w1)).code == 0
    (w1 / "g.txt").write_text("one\n")
    r = cli("patch", "record", str(w1), "--subject", "x", "--why", "y")
    assert (r.code, r.out.splitlines()[0]) == (0, "wrote patches/s/0002-x.patch (1 file)"), r.err
    spec("0001-x.patch", "0002-x.patch")
    assert cli("patch", "edit", "e", "s", "--dir", str(w2)).code == 0
    spec("0001-x.patch")
    (ws.root / "patches/s/0002-x.patch").unlink()
    (w2 / "h.txt").write_text("two\n")
    r = cli("patch", "record", str(w2), "--subject", "more", "--why", "y")
    assert (r.code, r.err) == (1, f"envlock: error: {w2}: the spec's patches of source 's' are no longer those this "
                                  "work dir was made on, so a patch recorded here would be diffed against a tree the "
                                  "spec does not build; make a new work dir with `envlock patch edit e s` and redo "
                                  "your change there\n  patches/s/0002-x.patch: removed from the spec\n")
    assert sorted(p.name for p in (ws.root / "patches/s").iterdir()) == ["0001-x.patch"]

    # Two work dirs recorded one after the other: the second is not numbered after the first's.
    w3, w4 = tmp_path / "w3", tmp_path / "w4"
    for work in (w3, w4):
        assert cli("patch", "edit", "e", "s", "--dir", str(work)).code == 0
        (work / f"{work.name}.txt").write_text(f"{work.name}\n")
    assert cli("patch", "record", str(w3), "--subject", "three", "--why", "y").code == 0
    r = cli("patch", "record", str(w4), "--subject", "four", "--why", "y", "--json")
    assert r.code == 1
    assert json.loads(r.out)["error"]["message"].startswith(
        f"{w4}: a new patch of source 's' would be numbered after patches/s/0002-three.patch, which this work dir was "
        "not made on")
    assert sorted(p.name for p in (ws.root / "patches/s").iterdir()) == ["0001-x.patch", "0002-three.patch"]

    # patches/s/ is the source's: another env that lists 0002 (or 0001) does not make it a stray one.
    ws.write_spec("e2", _SPEC.format(patches='"patches/s/0001-x.patch", "patches/s/0002-three.patch"'))
    r = cli("patch", "record", str(w4), "--subject", "four", "--why", "y")
    assert (r.code, r.out.splitlines()[0]) == (0, "wrote patches/s/0003-four.patch (1 file)"), r.err
    # Another env's higher-numbered patch does not hide the strays below it.
    shutil.copy(ws.root / "patches/s/0001-x.patch", ws.root / "patches/s/0005-other.patch")
    ws.write_spec("e2", _SPEC.format(patches='"patches/s/0001-x.patch", "patches/s/0005-other.patch"'))
    w5 = tmp_path / "w5"
    assert cli("patch", "edit", "e", "s", "--dir", str(w5)).code == 0
    (w5 / "w5.txt").write_text("w5\n")
    r = cli("patch", "record", str(w5), "--subject", "five", "--why", "y")
    assert r.code == 1 and ("would be numbered after patches/s/0002-three.patch, patches/s/0003-four.patch, which "
                            "this work dir was not made on") in r.err, r.err


@pytest.mark.parametrize(
    ("data", "kept"),
    [
        (b"Subject: x\nWhy: two\n  lines\nUpstream: z\n---\n"
         b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",
         b"Subject: x\nWhy: two\n  lines\nUpstream: z\n---\n"),
        # Not UTF-8: kept as bytes, not decoded and encoded again.
        (b"Subject: x\nWhy: caf\xe9\nUpstream: z\n---\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",
         b"Subject: x\nWhy: caf\xe9\nUpstream: z\n---\n"),
        # No separator before a plain unified diff whose hunk removes a "--" line: no header to keep.
        (b"Subject: x\nWhy: y\nUpstream: z\n--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,2 @@\n a\n---\n b\n", None),
        (b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", None),
        # A field holding a "---" line, as format_header writes it (indented): not the separator.
        (b"Subject: x\nWhy: first\n  ---\n  second\nUpstream: u\n---\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n"
         b"@@ -1 +1 @@\n-a\n+b\n", b"Subject: x\nWhy: first\n  ---\n  second\nUpstream: u\n---\n"),
        # A blank line, or git format-patch's diffstat, between the header and the diff.
        (b"Subject: x\nWhy: y\nUpstream: z\n---\n\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",
         b"Subject: x\nWhy: y\nUpstream: z\n---\n"),
        (b"From: a@b\nSubject: [PATCH] x\n\nWhy: body\n---\n f | 2 +-\n 1 file changed\n\n"
         b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n",
         b"From: a@b\nSubject: [PATCH] x\n\nWhy: body\n---\n"),
    ],
)
def test_the_header_a_refresh_keeps_is_what_parse_patch_reads_as_one(data: bytes, kept: bytes | None) -> None:
    from envlock.patch import _written_header, format_header

    assert _written_header(data) == kept
    if kept is not None and kept.startswith(b"Subject: x\nWhy: first"):
        parsed = patch.parse_patch(data, label="p")
        assert (parsed.why, parsed.upstream) == ("first --- second", "u")
        assert format_header("x", "first\n---\nsecond", "u").encode() == kept
