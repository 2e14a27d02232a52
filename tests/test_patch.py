"""patch: strict all-or-nothing application, status in three states, refusals, edit/record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envlock import patch, sources
from envlock.errors import PatchError, UsageError
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
    assert result.tree_digest == sources.tree_digest(result.tree) != co.tree_digest
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
    result = patch.apply_all("t", tree, sources.tree_digest(tree), [_one(text)], store)
    assert (result.tree / "new/file.py").read_text() == "print('hi')\nx = 1\n"
    assert not (result.tree / "gone.txt").exists()
    assert os.stat(result.tree / "run.sh").st_mode & 0o111
    assert (result.tree / "tail.txt").read_bytes() == b"x\nz"
    assert patch.status(result.tree, [_one(text)])[0].state == "already-applied"


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


def test_edit_then_record_writes_the_next_patch(sg: SgLike, store: Store, tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches" / "sglike")
    work = tmp_path / "work"
    session = patch.edit("sglike", tree, _patches(sg), work)
    assert session.levels == tuple(sg.patches)
    log = git(work, "log", "--format=%s").splitlines()
    assert log == [*reversed(sg.patches), "base (unpatched)"]
    assert "12: {" in (work / "python/sglike/comm.py").read_text()

    comm = work / "python/sglike/comm.py"
    comm.write_text(comm.read_text().replace("    12: {", "    11: {\n        2: 32 * MiB,\n    },\n    12: {"))
    (work / "python/sglike/extra.py").write_text("EXTRA = True\n")
    recorded = patch.record(work, patches_dir, subject="Add cc 11 (a test)", why="Because.", upstream="not proposed")
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
        patch.record(work, patches_dir, subject="again", why="Still.", upstream="")
    with pytest.raises(UsageError, match="a new patch needs a subject and a why"):  # exit 2, before any work
        patch.record(work, patches_dir, subject="again", why="", upstream="")

    # patch(1)'s leftovers from redoing a change by hand are refused, and left where they are.
    (work / "python/sglike/comm.py.orig").write_text("old\n")
    (work / "python/sglike/comm.py.rej").write_text("hunk\n")
    with pytest.raises(PatchError, match=r"2 patch\(1\) leftover file\(s\) would be recorded") as info:
        patch.record(work, patches_dir, subject="Leftovers", why="No.", upstream="")
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
    second = patch.record(work, patches_dir, subject="Table", why="Kept in git.", upstream="no")
    assert second.files == (".gitignore", "python/sglike/table with space.py")
    assert "+T = 1" in second.path.read_text()


def test_refresh_workflow_for_a_new_upstream_commit(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """edit --against NEW: 0001 is upstream (retire), 0002 conflicts (redo + record --refresh), 0003 follows."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches")
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
    recorded = patch.record(work, patches_dir, subject=None, why=None, upstream=None, refresh=True,
                            workspace_root=patches_dir)
    assert recorded.path == patches_dir / sg.patches[1]  # same file, same name
    after = recorded.path.read_text()
    assert after != before
    assert after.startswith("Subject: sgl-kernel: add mul()\nWhy: the fixture needs a C patch.\nUpstream: fixture\n")
    assert recorded.pending == ()  # 0003 applied on top by itself
    # The refreshed series (without the upstreamed 0001) applies cleanly to the new commit.
    states = patch.status(tree, patch.load_patches(patches_dir, sg.patches[1:]))
    assert [st.state for st in states] == ["applies", "applies"]
    (work / "README.md").write_text("changed\n")
    with pytest.raises(UsageError, match="no pending patch to refresh; record a new one with --subject and --why"):
        patch.record(work, patches_dir, subject=None, why=None, upstream=None, refresh=True,
                     workspace_root=patches_dir)


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
    recorded = patch.record(work, patches_dir, subject=None, why=None, upstream=None, refresh=True,
                            workspace_root=patches_dir)
    assert recorded.upstreamed == (sg.patches[0],)
    assert recorded.pending == ()
    assert json.loads((work / ".git" / "envlock-edit.json").read_text())["levels"] == [sg.patches[1], sg.patches[2]]


def test_record_needs_an_edit_workdir(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="not an envlock edit work dir"):
        patch.record(tmp_path, tmp_path, subject="x", why="", upstream="")


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
