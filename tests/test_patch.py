"""patching: the patch commands end to end (status, edit, record) through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envlock.commands.patch import PatchCheck
from envlock.patches.patchapply import PatchStatus
from envlock.patches.upstream import Touch, UpstreamCommit
from kit.patches import ESCAPE, MODIFY, QUOTED, new_file
from kit.sglike import write
from kit.workspaces import Cli, ScratchWorkspace

_SPEC = ('[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://127.0.0.1:9/simple"\ndefault = true\n'
         '[sources.s]\npath = "src"\npatches = [{patches}]\n')


def test_patch_status_and_lock_name_the_patch_creating_a_file_over_a_directory(ws: ScratchWorkspace, cli: Cli) -> None:
    """QA's repro: status said "applies" and lock failed on a store temp path ("tree/adir: Is a directory")."""
    write(ws.root, {"src/a.txt": "hello\n", "src/adir/f": "x\n", "patches/s/0001-p.patch": new_file("adir")})
    ws.write_spec("e", _SPEC.format(patches='"patches/s/0001-p.patch"'))
    r = cli("patch", "status", "e")
    assert (r.code, r.out) == (1, "s\n"
                                  "  conflict         patches/s/0001-p.patch  -- refresh it: adir no longer matches\n"
                                  "      adir: would be created, but the tree has a directory there\n")
    r = cli("lock", "e")
    assert (r.code, r.err) == (1, "envlock: error: source 's': patches/s/0001-p.patch: does not apply\n"
                                  "  adir: would be created, but the tree has a directory there\n")


def test_patch_status_reports_a_malformed_patch_as_an_error(ws: ScratchWorkspace, cli: Cli) -> None:
    """QA's repros ended in a traceback (ValueError) instead of one error line naming the patch file."""
    write(ws.root, {"src/a.txt": "hello\n"})
    ws.write_spec("e", _SPEC.format(patches='"patches/s/0001-p.patch"'))
    for text, error in [
        (QUOTED.format(r"x\08y"), rf'line 1: bad escape \08y in the quoted path "a/x\08y"; {ESCAPE}'),
        (QUOTED.format(r"x\000y"), r"refuses to touch 'x\x00y': holds a NUL byte, which no file name can"),
        (new_file("n").replace("100644", "zzz"), "line 2: malformed file mode 'zzz'; expected octal digits, such as "
                                                  "100644"),
    ]:
        write(ws.root, {"patches/s/0001-p.patch": text})
        r = cli("patch", "status", "e")
        assert (r.code, r.err) == (1, f"envlock: error: patches/s/0001-p.patch: {error}\n")


def test_patch_record_refuses_a_work_dir_the_spec_has_moved_from(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> None:
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


@pytest.mark.parametrize(("touches", "head"), [
    (("touched", "same-file", "same-file"), "3 upstream commits touch its files: 1 within its hunks, 2 only elsewhere "
                                            "in them:"),
    (("touched", "touched"), "2 upstream commits touch lines within its hunks:"),
    (("same-file",), "1 upstream commit touches its files, not its hunks:"),
])
def test_the_upstream_commits_of_a_patch_are_counted_as_they_are_listed(touches: tuple[Touch, ...], head: str) -> None:
    commits = tuple(UpstreamCommit(f"{i:040x}", f"commit {i}", touch, ("f.py",)) for i, touch in enumerate(touches))
    check = PatchCheck(PatchStatus("patches/s/0001-x.patch", "x", "applies", upstream="none"), commits)
    assert check.describe_upstream() == ["Upstream: none", head, *(
        f"  {c.commit[:12]} {c.touch:9} {c.subject}" for c in commits)]
