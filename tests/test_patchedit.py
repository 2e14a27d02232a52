"""patchedit: the edit/record workflow, and record holding a work dir to the spec's patches."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from envlock.build import sources
from envlock.errors import PatchError, UsageError
from envlock.model.lockfile import LockedPatch
from envlock.patches import patchapply, patchedit, patchfile
from envlock.patches.patchedit import EditOptions, PatchHeader
from envlock.store.store import Store
from kit.patches import MODIFY, sg_patches
from kit.sglike import SgLike, git

# -- edit / record ----------------------------------------------------------------


def _patches_copied(sg: SgLike, patches_dir: Path) -> Path:
    """The fixture's patch files copied into ``patches_dir`` (record writes there)."""
    patches_dir.mkdir(parents=True)
    for name in sg.patches:
        (patches_dir / name).write_bytes((sg.patches_dir / name).read_bytes())
    return patches_dir


def _listed(patches_dir: Path, labels: Sequence[str]) -> tuple[LockedPatch, ...]:
    """The patches a spec lists now, as ``record`` is given them (labels relative to ``patches_dir``)."""
    return tuple(p.locked() for p in patchfile.load_patches(patches_dir, labels))


def test_edit_then_record_writes_the_next_patch(sg: SgLike, store: Store, tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches" / "sglike")
    listed = _listed(patches_dir, sg.patches)  # the spec's patches, unchanged while the work dir is in use
    work = tmp_path / "work"
    session = patchedit.edit("sglike", tree, sg_patches(sg), work)
    assert session.levels == tuple(sg.patches)
    log = git(work, "log", "--format=%s").splitlines()
    assert log == [*reversed(sg.patches), "base (unpatched)"]
    assert "12: {" in (work / "python/sglike/comm.py").read_text()

    comm = work / "python/sglike/comm.py"
    comm.write_text(comm.read_text().replace("    12: {", "    11: {\n        2: 32 * MiB,\n    },\n    12: {"))
    (work / "python/sglike/extra.py").write_text("EXTRA = True\n")
    recorded = patchedit.record(work, patches_dir, PatchHeader("Add cc 11 (a test)", "Because.", "not proposed"),
                                current=listed, workspace_root=patches_dir)
    assert recorded.path == patches_dir / "0004-add-cc-11-a-test.patch"
    assert recorded.files == ("python/sglike/comm.py", "python/sglike/extra.py")
    text = recorded.path.read_text()
    assert text.startswith("Subject: Add cc 11 (a test)\nWhy: Because.\nUpstream: not proposed\n---\n")
    assert "diff --git a/python/sglike/comm.py b/python/sglike/comm.py" in text
    assert "+    11: {" in text and "+EXTRA = True" in text

    # The recorded patch is the next level: the whole series applies at the pin.
    labels = [*sg.patches, recorded.path.name]
    states = patchapply.status(tree, patchfile.load_patches(patches_dir, labels))
    assert [s.state for s in states] == ["applies"] * 4
    with pytest.raises(PatchError, match="nothing to record"):
        patchedit.record(work, patches_dir, PatchHeader("again", "Still.", ""), current=listed,
                         workspace_root=patches_dir)
    with pytest.raises(UsageError, match="a new patch needs a subject and a why"):  # exit 2, before any work
        patchedit.record(work, patches_dir, PatchHeader("again", "", ""), current=listed, workspace_root=patches_dir)

    # patch(1)'s leftovers from redoing a change by hand are refused, and left where they are.
    (work / "python/sglike/comm.py.orig").write_text("old\n")
    (work / "python/sglike/comm.py.rej").write_text("hunk\n")
    with pytest.raises(PatchError, match=r"2 patch\(1\) leftover file\(s\) would be recorded") as info:
        patchedit.record(work, patches_dir, PatchHeader("Leftovers", "No.", ""), current=listed,
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
    second = patchedit.record(work, patches_dir, PatchHeader("Table", "Kept in git.", "no"), current=listed,
                              workspace_root=patches_dir)
    assert second.files == (".gitignore", "python/sglike/table with space.py")
    assert "+T = 1" in second.path.read_text()


def test_record_keeps_the_bytes_of_a_file_that_is_not_utf8(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """A Latin-1 file's change is recorded byte for byte, and the patch applies at the pin."""
    tree = sources.checkout(store, sg.url, sg.pin).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches" / "sglike")
    listed = _listed(patches_dir, sg.patches)
    work = tmp_path / "work"
    patchedit.edit("sglike", tree, sg_patches(sg), work)
    latin1 = "# caf\u00e9 cr\u00e8me, \u00b5s\nNAME = 'Se\u00f1or'\n".encode("latin-1")
    (work / "python/sglike/names.py").write_bytes(latin1)
    recorded = patchedit.record(work, patches_dir, PatchHeader("Names", "Latin-1 data.", ""), current=listed,
                                workspace_root=patches_dir)
    data = recorded.path.read_bytes()
    assert b"+# caf\xe9 cr\xe8me, \xb5s\n+NAME = 'Se\xf1or'\n" in data
    assert b"\xef\xbf\xbd" not in data  # no U+FFFD replacement character
    labels = [*sg.patches, recorded.path.name]
    states = patchapply.status(tree, patchfile.load_patches(patches_dir, labels))
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
    session = patchedit.edit("sglike", tree, patchfile.load_patches(patches_dir, sg.patches), work,
                             EditOptions(stop_at_conflict=True))
    assert session.upstreamed == (sg.patches[0],)
    assert session.levels == ()
    assert session.pending == sg.patches[1:]
    assert session.conflict is not None and session.conflict.file == "sgl-kernel/csrc/ops.c"
    # Without a base to merge on, 0002 is applied hunk by hunk, never left out whole: the mul()
    # function and the __init__ change are in; the method-table hunk waits in ops.c.rej.
    assert (session.merge, session.rejects) == ("partly", ("sgl-kernel/csrc/ops.c.rej",))
    ops = work / "sgl-kernel/csrc/ops.c"
    assert "return PyLong_FromLong(a * b);" in ops.read_text()
    assert "magic, mul" in (work / "sgl-kernel/python/sglike_kernel/__init__.py").read_text()
    rej = (work / "sgl-kernel/csrc/ops.c.rej").read_text()
    assert rej.startswith("--- a/sgl-kernel/csrc/ops.c\n+++ b/sgl-kernel/csrc/ops.c\n@@ -21,6 +29,7 @@")
    assert '+    {"mul", mul, METH_VARARGS, "a * b"},\n' in rej and "return PyLong_FromLong(a * b)" not in rej

    # Redo the rejected hunk by hand on the new code (upstream reworded the method table).
    ops.write_text(ops.read_text().replace(
        '    {"add", add, METH_VARARGS, "add two integers"},\n',
        '    {"add", add, METH_VARARGS, "add two integers"},\n    {"mul", mul, METH_VARARGS, "a * b"},\n'))
    (work / "sgl-kernel/csrc/ops.c.rej").unlink()
    before = (patches_dir / sg.patches[1]).read_text()
    recorded = patchedit.record(work, patches_dir, PatchHeader(),
                                current=_listed(patches_dir, sg.patches), refresh=True, workspace_root=patches_dir)
    assert recorded.path == patches_dir / sg.patches[1]  # same file, same name
    after = recorded.path.read_text()
    assert after != before
    assert after.startswith("Subject: sgl-kernel: add mul()\nWhy: the fixture needs\n  a C patch.\n"
                            "Upstream: fixture\n---\n")
    assert recorded.pending == ()  # 0003 applied on top by itself
    # The refreshed series (without the upstreamed 0001) applies cleanly to the new commit.
    states = patchapply.status(tree, patchfile.load_patches(patches_dir, sg.patches[1:]))
    assert [st.state for st in states] == ["applies", "applies"]
    (work / "README.md").write_text("changed\n")
    with pytest.raises(UsageError, match="no pending patch to refresh; record a new one with --subject and --why"):
        patchedit.record(work, patches_dir, PatchHeader(), current=_listed(patches_dir, sg.patches),
                         refresh=True, workspace_root=patches_dir)


def test_refresh_retires_a_later_patch_the_new_code_already_has(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """As edit does: after the conflicting patch is redone, a pending one upstream has is retired, not stuck."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    patches_dir = _patches_copied(sg, tmp_path / "patches")
    order = (sg.patches[1], sg.patches[0], sg.patches[2])  # the conflict first, then the upstreamed one
    work = tmp_path / "work"
    session = patchedit.edit("sglike", tree, patchfile.load_patches(patches_dir, order), work,
                             EditOptions(stop_at_conflict=True))
    assert session.pending == order
    ops = work / "sgl-kernel/csrc/ops.c"
    ops.write_text(ops.read_text() + "\n/* redone by hand */\n")
    (work / "sgl-kernel/csrc/ops.c.rej").unlink()  # the hunk that did not apply: done with
    recorded = patchedit.record(work, patches_dir, PatchHeader(), current=_listed(patches_dir, order),
                                refresh=True, workspace_root=patches_dir)
    assert recorded.upstreamed == (sg.patches[0],)
    assert recorded.pending == ()
    assert json.loads((work / ".git" / "envlock-edit.json").read_text())["levels"] == [sg.patches[1], sg.patches[2]]


def test_record_needs_an_edit_workdir(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="not an envlock edit work dir"):
        patchedit.record(tmp_path, tmp_path, PatchHeader("x", "", ""), current=())


def test_edit_refuses_a_non_empty_workdir(sg: SgLike, store: Store, tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "x").write_text("")
    with pytest.raises(UsageError, match="work dir exists and is not empty"):
        patchedit.edit("sglike", tree, sg_patches(sg), tmp_path / "work")
    with pytest.raises(UsageError, match="work dir exists and is a file; expected a new or empty directory"):
        patchedit.edit("sglike", tree, sg_patches(sg), tmp_path / "work" / "x")


def test_format_header_indents_continuations() -> None:
    assert patchedit.format_header("S", "line one\nline two", "U") == (
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
    patchedit.edit("sglike", tree, patchfile.load_patches(root, labels), work, EditOptions(env="e"))
    (work / "README.md").write_text("changed\n")
    now = labels
    if change == "removed":
        now, details = [first, second], [f"{third}: removed from the spec"]
    elif change == "added":
        more = "patches/sglike/0004-more.patch"
        (root / more).write_text(MODIFY)
        now, details = [*labels, more], [f"{more}: added to the spec"]
    elif change == "changed":
        was = patchfile.parse_patch_file(root / second).sha256
        (root / second).write_text((root / second).read_text().replace("Why:", "Why: reworded,", 1))
        is_now = patchfile.parse_patch_file(root / second).sha256
        details = [f"{second}: its file changed (sha256 {was[:12]} -> {is_now[:12]})"]
    else:
        now = [second, first, third]
        details = [f"the spec lists {second}, {first}, {third}; expected {first}, {second}, {third}"]
    listing = sorted(p.name for p in (root / "patches/sglike").iterdir())
    with pytest.raises(PatchError) as info:
        patchedit.record(work, root / "patches/sglike", PatchHeader("S", "W", ""), current=_listed(root, now),
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
        patchedit.edit("sglike", tree, patchfile.load_patches(root, labels), work, EditOptions(env="e"))
    (one / "README.md").write_text("one\n")
    (two / "python/sglike/__init__.py").write_text("TWO = 2\n")
    first = patchedit.record(one, patches_dir, PatchHeader("One", "W", ""), current=_listed(root, labels),
                             workspace_root=root)
    assert first.path == patches_dir / "0004-one.patch"
    with pytest.raises(PatchError) as info:
        patchedit.record(two, patches_dir, PatchHeader("Two", "W", ""), current=_listed(root, labels),
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
        patchedit.record(two, patches_dir, PatchHeader("Two", "W", ""), current=grown, workspace_root=root)
    assert info.value.details == ("patches/sglike/0004-one.patch: added to the spec",)
    # The first goes on: its own patches may be in the spec or not yet.
    (one / "README.md").write_text("one, again\n")
    assert patchedit.record(one, patches_dir, PatchHeader("Again", "W", ""), current=_listed(root, labels),
                            workspace_root=root).number == 5
    (one / "README.md").write_text("one, a third time\n")
    assert patchedit.record(one, patches_dir, PatchHeader("Third", "W", ""), current=grown,
                            workspace_root=root).number == 6


def test_record_follows_what_refresh_rewrote_and_what_upstream_has(sg: SgLike, store: Store, tmp_path: Path) -> None:
    """After record --refresh the spec lists the rewritten file; a patch upstream has may leave the spec."""
    tree = sources.checkout(store, sg.url, sg.upstream).tree
    root = tmp_path / "ws"
    labels = _in_workspace(sg, root)
    order = [labels[1], labels[0], labels[2]]  # the conflict first, then the upstreamed one
    patches_dir = root / "patches/sglike"
    work = tmp_path / "work"
    patchedit.edit("sglike", tree, patchfile.load_patches(root, order), work,
                   EditOptions(stop_at_conflict=True, env="e"))
    ops = work / "sgl-kernel/csrc/ops.c"
    ops.write_text(ops.read_text() + "\n/* redone by hand */\n")
    (work / "sgl-kernel/csrc/ops.c.rej").unlink()  # the hunk that did not apply: done with
    refreshed = patchedit.record(work, patches_dir, PatchHeader(), current=_listed(root, order),
                                 refresh=True, workspace_root=root)
    assert refreshed.upstreamed == (labels[0],)
    (work / "README.md").write_text("next\n")
    assert patchedit.record(work, patches_dir, PatchHeader("Next", "W", ""), current=_listed(root, order),
                            workspace_root=root).number == 4
    retired = [labels[1], labels[2]]  # the advice taken: 0001 dropped from the spec
    (work / "README.md").write_text("after\n")
    assert patchedit.record(work, patches_dir, PatchHeader("After", "W", ""), current=_listed(root, retired),
                            workspace_root=root).number == 5
    # Listed, the upstreamed patch is still held to the bytes the work dir saw.
    was = patchfile.parse_patch_file(root / labels[0]).sha256
    (root / labels[0]).write_text((root / labels[0]).read_text().replace("Why:", "Why: reworded,", 1))
    (work / "README.md").write_text("later\n")
    with pytest.raises(PatchError) as info:
        patchedit.record(work, patches_dir, PatchHeader("Later", "W", ""), current=_listed(root, order),
                         workspace_root=root)
    is_now = patchfile.parse_patch_file(root / labels[0]).sha256
    assert info.value.details == (f"{labels[0]}: its file changed (sha256 {was[:12]} -> {is_now[:12]})",)


def test_record_refuses_a_work_dir_that_does_not_say_what_it_was_made_on(sg: SgLike, store: Store,
                                                                         tmp_path: Path) -> None:
    tree = sources.checkout(store, sg.url, sg.pin).tree
    work = tmp_path / "work"
    patchedit.edit("sglike", tree, sg_patches(sg), work, EditOptions(env="e"))
    state = work / ".git" / "envlock-edit.json"
    older = {k: v for k, v in json.loads(state.read_text()).items() if k in ("source", "levels", "pending")}
    state.write_text(json.dumps(older))  # as an envlock before made_on wrote it
    (work / "README.md").write_text("changed\n")
    message = (f"{work}: the work dir does not record the env and the patches it was made on (made by an earlier "
               "envlock, or not by `envlock patch edit`); expected a work dir made with `envlock patch edit ENV "
               "sglike`: make one and redo your change there")
    with pytest.raises(PatchError) as info:
        patchedit.edited_env(work)
    assert str(info.value) == message
    with pytest.raises(PatchError) as info:
        patchedit.record(work, sg.patches_dir, PatchHeader("S", "W", ""), current=_listed(sg.patches_dir, sg.patches),
                         workspace_root=sg.patches_dir)
    assert str(info.value) == message
