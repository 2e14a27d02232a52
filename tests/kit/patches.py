"""Small patch texts and helpers shared by the tests of the patch modules (patchfile, patchapply,
patchedit, patching)."""

from __future__ import annotations

from envlock.patchfile import PatchFile, load_patches, parse_patch
from kit.sglike import SgLike

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

# A new file at a C-quoted path (git's spelling of unusual bytes), and the message of a bad escape there.
QUOTED = 'diff --git "a/{0}" "b/{0}"\nnew file mode 100644\n--- /dev/null\n+++ "b/{0}"\n@@ -0,0 +1 @@\n+z\n'
ESCAPE = "expected a backslash and three octal digits, \\000 to \\377, as git quotes a byte"


def one(text: str, label: str = "p.patch") -> PatchFile:
    """``text`` parsed as one patch named ``label``."""
    return parse_patch(text.encode(), label=label)


def new_file(path: str) -> str:
    """A patch creating the one-line file ``path``."""
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+z\n"


def sg_patches(sg: SgLike) -> list[PatchFile]:
    """The SGLang-shaped fixture's patches, parsed."""
    return load_patches(sg.patches_dir, sg.patches)
