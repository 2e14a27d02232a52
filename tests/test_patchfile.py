"""patchfile: parsing git-format diffs and their header; refusing paths and kinds envlock will not apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.errors import PatchError
from envlock.patches import patchfile
from envlock.patches.patchedit import format_header
from kit.patches import ESCAPE, MODIFY, QUOTED, new_file, one

ROOT = Path(__file__).resolve().parents[1]

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
        one(text, label="patches/evil.patch")
    assert str(exc.value) == f"patches/evil.patch: refuses to touch {path!r}: {problem}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (QUOTED.format(r"x\08y"), rf'p.patch: line 1: bad escape \08y in the quoted path "a/x\08y"; {ESCAPE}'),
        (QUOTED.format(r"x\777"), rf'p.patch: line 1: bad escape \777 in the quoted path "a/x\777"; {ESCAPE}'),
        (QUOTED.format(r"x\0"), rf'p.patch: line 1: bad escape \0 in the quoted path "a/x\0"; {ESCAPE}'),
        (QUOTED.format(r"x\000y"), r"p.patch: refuses to touch 'x\x00y': holds a NUL byte, which no file name can"),
        (new_file("n").replace("100644", "zzz"),
         "p.patch: line 2: malformed file mode 'zzz'; expected octal digits, such as 100644"),
        (new_file("n").replace("100644", "10_0644"),  # int(..., 8) would take it
         "p.patch: line 2: malformed file mode '10_0644'; expected octal digits, such as 100644"),
        ("diff --git a/n b/n\nold mode 100644\nnew mode -100755\n",
         "p.patch: line 3: malformed file mode '-100755'; expected octal digits, such as 100644"),
    ],
    ids=["escape-08", "escape-777", "escape-short", "nul", "mode-zzz", "mode-underscore", "mode-sign"],
)
def test_malformed_paths_and_modes_are_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(PatchError) as exc:
        one(text)
    assert str(exc.value) == message


def test_binary_and_rename_patches_are_refused() -> None:
    with pytest.raises(PatchError, match="binary patches are not supported"):
        one("diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n")
    with pytest.raises(PatchError, match="renames and copies are not supported"):
        one("diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n")


def test_header_fields() -> None:
    parsed = one(MODIFY)
    assert (parsed.subject, parsed.why, parsed.upstream) == ("change b", "a test. It goes on.", "none")


def test_the_real_sglang_patches_parse() -> None:
    labels = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "patches/sglang").glob("*.patch"))
    parsed = patchfile.load_patches(ROOT, labels)
    assert len(parsed) == 6
    assert all(p.subject and p.why and p.upstream for p in parsed)
    touched = {f.path for p in parsed for f in p.files}
    assert touched == {
        "python/sglang/srt/distributed/device_communicators/all_reduce_utils.py",
        "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py",
        "sgl-kernel/CMakeLists.txt",
        "sgl-kernel/python/sgl_kernel/flash_attn.py",
    }


# -- the header a refresh keeps ---------------------------------------------------


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
    assert patchfile.written_header(data) == kept
    if kept is not None and kept.startswith(b"Subject: x\nWhy: first"):
        parsed = patchfile.parse_patch(data, label="p")
        assert (parsed.why, parsed.upstream) == ("first --- second", "u")
        assert format_header("x", "first\n---\nsecond", "u").encode() == kept


@pytest.mark.parametrize(("data", "header"), [
    (b"Subject: s\nWhy: w\n  more\nUpstream: u\n---\ndiff --git a/f b/f\n",
     b"Subject: s\nWhy: w\n  more\nUpstream: u\nRebased-onto: c0ffee\n---\n"),
    (b"Subject: s\nRebased-onto: old\nUpstream: u\n---\ndiff --git a/f b/f\n",
     b"Subject: s\nUpstream: u\nRebased-onto: c0ffee\n---\n"),
    (b"diff --git a/f b/f\n", b"Rebased-onto: c0ffee\n---\n"),
])
def test_a_rebased_patch_keeps_its_header_and_says_onto_what(data: bytes, header: bytes) -> None:
    assert patchfile.with_rebased_onto(data, "c0ffee") == header
    parsed = patchfile.parse_patch(header + MODIFY.split("---\n", 1)[1].encode(), label="p")
    assert parsed.rebased_onto == "c0ffee"


def test_a_patch_a_symbolic_link_takes_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "patches").mkdir(parents=True)
    (tmp_path / "elsewhere.patch").write_text("")
    (root / "patches" / "0001-x.patch").symlink_to(tmp_path / "elsewhere.patch")
    with pytest.raises(PatchError) as exc:
        patchfile.load_patches(root, ["patches/0001-x.patch"])
    assert exc.value.message == (f"patches/0001-x.patch: a symbolic link takes it out of the workspace (to "
                                 f"{tmp_path / 'elsewhere.patch'}); expected a patch file inside the workspace")
