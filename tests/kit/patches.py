"""Small patch texts and helpers shared by the tests of the patch modules (patchfile, patchapply,
patchedit, patching)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envlock.patches.patchfile import PatchFile, load_patches, parse_patch
from kit.sglike import SgLike, commit_all, git, init_repo, write

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


# -- a source that moved on under its patches: one upstream commit per way it can go --------


@dataclass(frozen=True)
class Moves:
    """A git repo with four patches recorded on ``pin`` and four upstream commits after it:

    - ``merged`` takes 0001's change as it is (0001: already-applied, retired);
    - ``reworked`` rewrites a line next to 0002's (a plain apply fails, a 3-way merge is clean);
    - ``elsewhere`` edits 0003's file far from its hunk (0003 applies; the commit touches its file);
    - ``clash`` changes the very line 0004 changes, another way (a true conflict at its hunk 1;
      its hunk 2 merges).
    The last one is tagged ``v2``.
    """

    repo: Path
    url: str
    pin: str
    merged: str
    reworked: str
    elsewhere: str
    clash: str
    patches: tuple[str, ...]  # workspace-relative labels, patches/s/NNNN-*.patch


MOVES_FILES = {
    "a.py": "SIZES = {\n    9: 64,\n    10: 64,\n}\n",
    "b.py": "def limits():\n    low = 1\n    mid = 5\n    high = 10\n    return low, mid, high\n",
    "c.py": "NAME = 'c'\nLEVEL = 1\n" + "".join(f"STEP_{n} = {n}\n" for n in range(3, 21)),
    "d.py": "TIMEOUT = 30\n" + "".join(f"OPTION_{n} = {n}\n" for n in range(2, 10)) + "RETRIES = 3\nDONE = True\n",
}
MOVES_PATCHES = (
    ("0001-sm12-size.patch", "a.py", ("    10: 64,\n}", "    10: 64,\n    12: 64,\n}"), "Add 12 to SIZES"),
    ("0002-higher-limit.patch", "b.py", ("high = 10", "high = 12"), "Raise the high limit"),
    ("0003-level-two.patch", "c.py", ("LEVEL = 1", "LEVEL = 2"), "Level two"),
    ("0004-longer-timeout.patch", "d.py", ("TIMEOUT = 30", "TIMEOUT = 60"), "Longer timeout, more retries"),
)


def make_moves(root: Path, workspace: Path) -> Moves:
    """The repo under ``root``; the patches written into ``workspace``/patches/s/."""
    repo = root / "moves"
    init_repo(repo)
    write(repo, MOVES_FILES)
    pin = commit_all(repo, "pin")
    labels = []
    for name, path, (old, new), subject in MOVES_PATCHES:
        target = repo / path
        text = target.read_text().replace(old, new)
        if name.startswith("0004"):
            text = text.replace("RETRIES = 3", "RETRIES = 5")  # its hunk 2, far from hunk 1
        target.write_text(text)
        diff = git(repo, "diff", "--no-color", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", raw=True)
        git(repo, "checkout", "-q", "--", ".")
        header = f"Subject: {subject}\nWhy: the fixture needs it.\nUpstream: https://example.invalid/pr/{name[:4]}\n---\n"
        write(workspace, {f"patches/s/{name}": header + diff})
        labels.append(f"patches/s/{name}")

    def change(path: str, old: str, new: str, message: str, day: int) -> str:
        (repo / path).write_text((repo / path).read_text().replace(old, new))
        return commit_all(repo, message, date=f"2026-03-{day:02d}T10:00:00+00:00")

    merged = change("a.py", "    10: 64,\n}", "    10: 64,\n    12: 64,\n}", "Support cc 12 (#101)", 8)
    reworked = change("b.py", "low = 1", "low = 2  # reworked", "Rework the low limit (#102)", 9)
    elsewhere = change("c.py", "STEP_20 = 20\n", "STEP_20 = 20\nSTEP_21 = 21\n", "Add a step at the end (#103)", 10)
    clash = change("d.py", "TIMEOUT = 30", "TIMEOUT = 45", "Tune the timeout (#104)", 11)
    git(repo, "tag", "v2")
    return Moves(repo, repo.as_uri(), pin, merged, reworked, elsewhere, clash, tuple(labels))


def moves_spec(url: str, pin: str, patches: tuple[str, ...]) -> str:
    """An env spec with source ``s`` at ``pin`` and its ``patches``, with comments to keep."""
    listed = "".join(f'    "{p}",\n' for p in patches)
    return ('# moves: a fixture env\n[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://127.0.0.1:9/simple"\n'
            f'default = true\n\n[sources.s]\ngit = "{url}"\nrev = "{pin}"   # the pin the patches were recorded on\n'
            f'patches = [\n    # ours, in order\n{listed}]\n')
