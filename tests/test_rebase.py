"""rebasing: `envlock patch rebase` end to end, on a source whose upstream moved four ways under
its four patches (kit.patches.make_moves): already-applied, rebased by a 3-way merge, applies
as it is, and a true conflict resolved with --continue (or given up with --abort)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.patches import Moves, make_moves, moves_spec
from kit.sglike import git
from kit.workspaces import Cli, ScratchWorkspace


@pytest.fixture
def moves(ws: ScratchWorkspace, tmp_path: Path) -> Moves:
    made = make_moves(tmp_path / "upstream", ws.root)
    ws.write_spec("e", moves_spec(made.url, made.pin, made.patches))
    return made


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _workdir() -> Path:
    import os

    from envlock.store.store import Store

    return Store.open(Path(os.environ["ENVLOCK_HOME"])).root / "rebase" / "e-s"


def test_status_against_a_moved_upstream_says_what_touched_each_patch(
        ws: ScratchWorkspace, cli: Cli, moves: Moves) -> None:
    r = cli("patch", "status", "e", "--against", "v2")
    assert (r.code, r.err) == (1, "")
    assert r.out == (
        f"s @ {moves.clash} (--against v2, pin {moves.pin})\n"
        "  already-applied  patches/s/0001-sm12-size.patch  -- upstream has it: retire this patch\n"
        "      Upstream: https://example.invalid/pr/0001\n"
        "      1 upstream commit touches lines within its hunks:\n"
        f"        {moves.merged[:12]} touched   Support cc 12 (#101)\n"
        "  conflict         patches/s/0002-higher-limit.patch  -- a 3-way merge carries it cleanly: "
        "`envlock patch rebase` rewrites it\n"
        "      Upstream: https://example.invalid/pr/0002\n"
        "      1 upstream commit touches lines within its hunks:\n"
        f"        {moves.reworked[:12]} touched   Rework the low limit (#102)\n"
        "  applies          patches/s/0003-level-two.patch\n"
        "      Upstream: https://example.invalid/pr/0003\n"
        "      1 upstream commit touches its files, not its hunks:\n"
        f"        {moves.elsewhere[:12]} same-file Add a step at the end (#103)\n"
        "  conflict         patches/s/0004-longer-timeout.patch  -- refresh it: d.py hunk 1 no longer matches\n"
        "      Upstream: https://example.invalid/pr/0004\n"
        "      1 upstream commit touches lines within its hunks:\n"
        f"        {moves.clash[:12]} touched   Tune the timeout (#104)\n"
        "      d.py: hunk 1 (@@ -1,4 +1,4 @@): upstream changed these lines too (3-way merge)\n"
        "      the patch expected:\n"
        "        | TIMEOUT = 30\n"
        "      upstream has, at line 1:\n"
        "        | TIMEOUT = 45\n"
    )
    doc = json.loads(cli("patch", "status", "e", "--against", "v2", "--json").out)
    source = doc["sources"]["s"]
    assert (source["pin"], source["commit"], doc["conflicts"]) == (moves.pin, moves.clash, 2)
    rows = [(p["state"], p["merge"], p["touch"], [c["commit"] for c in p["commits"]]) for p in source["patches"]]
    assert rows == [("already-applied", None, "touched", [moves.merged]),
                    ("conflict", "clean", "touched", [moves.reworked]),
                    ("applies", None, "same-file", [moves.elsewhere]),
                    ("conflict", "conflict", "touched", [moves.clash])]
    # A plain apply of 0002 fails (its context moved); the merge carries it.
    assert source["patches"][1]["failure"]["reason"] == "context does not match (first difference at line 2)"
    assert source["patches"][3]["conflicts"] == [{
        "file": "d.py", "hunk": 1, "header": "@@ -1,4 +1,4 @@", "line": 1, "merged": True,
        "reason": "upstream changed these lines too (3-way merge)", "expected": ["TIMEOUT = 30"],
        "actual": ["TIMEOUT = 45"]}]
    assert source["patches"][2]["commits"][0] == {"commit": moves.elsewhere, "subject": "Add a step at the end (#103)",
                                                  "touch": "same-file", "files": ["c.py"]}
    # At the pin itself: nothing moved, every patch applies, nothing is said about upstream.
    r = cli("patch", "status", "e")
    assert r.code == 0 and r.out.count("applies") == 4 and "Upstream" not in r.out


def test_rebase_through_a_conflict_then_continue_writes_the_patches_and_the_rev(ws: ScratchWorkspace, cli: Cli,
                                                                                moves: Moves) -> None:
    before = _snapshot(ws.root)
    r = cli("patch", "rebase", "e", "s", "--to", "v2")
    workdir = _workdir()
    assert (r.code, r.err) == (1, "")
    assert r.out == (
        f"s of env e: {moves.pin[:12]} -> v2 ({moves.clash})\n"
        "  already-applied  patches/s/0001-sm12-size.patch  (its reverse applies)\n"
        "  rebased          patches/s/0002-higher-limit.patch  (3-way merge)\n"
        "  applies          patches/s/0003-level-two.patch  (as it is)\n"
        "  conflict         patches/s/0004-longer-timeout.patch  (3-way merge)\n"
        "      d.py: hunk 1 (@@ -1,4 +1,4 @@): upstream changed these lines too (3-way merge)\n"
        "      the patch expected:\n"
        "        | TIMEOUT = 30\n"
        "      upstream has, at line 1:\n"
        "        | TIMEOUT = 45\n"
        f"stopped at patches/s/0004-longer-timeout.patch: resolve the conflict in the work dir {workdir}\n"
        "  (the source at v2 with the patches before it applied, this one as far as it goes: conflict markers "
        "<<<<<<< v2 / >>>>>>> patch 0004)\n"
        f"then: envlock patch rebase --continue {workdir}   (or: envlock patch rebase --abort {workdir})\n"
        "nothing in the workspace has changed\n"
    )
    assert _snapshot(ws.root) == before
    # The work dir: v2, then a commit per patch carried; 0004 as far as it goes, markers and all.
    assert git(workdir, "log", "--format=%s").splitlines() == [
        "patches/s/0003-level-two.patch", "patches/s/0002-higher-limit.patch", f"v2 ({moves.clash})"]
    d = (workdir / "d.py").read_text()
    assert d.startswith("<<<<<<< v2\nTIMEOUT = 45\n=======\nTIMEOUT = 60\n>>>>>>> patch 0004\nOPTION_2 = 2\n")
    assert "RETRIES = 5\n" in d  # its hunk 2 merged cleanly
    assert "    low = 2  # reworked\n    mid = 5\n    high = 12\n" in (workdir / "b.py").read_text()

    r = cli("patch", "rebase", "--continue", str(workdir))
    assert (r.code, r.out) == (1, "")
    assert r.err == (f"envlock: error: {workdir}: the conflict is not resolved yet; edit the files, then run "
                     f"`envlock patch rebase --continue {workdir}`\n"
                     "  d.py: line 1: conflict marker\n  d.py: line 3: conflict marker\n"
                     "  d.py: line 5: conflict marker\n")
    (workdir / "d.py").write_text(d.replace("<<<<<<< v2\nTIMEOUT = 45\n=======\nTIMEOUT = 60\n>>>>>>> patch 0004\n",
                                            "TIMEOUT = 90\n"))
    r = cli("patch", "rebase", "--continue", str(workdir))
    assert r.code == 0, r.err
    assert r.err == ("envlock: RETIRED patches/s/0001-sm12-size.patch: upstream has its change at "
                     f"{moves.clash[:12]}; dropped from the spec and deleted (it stays in git history)\n")
    assert r.out.splitlines()[-6:] == [
        "  rebased          patches/s/0004-longer-timeout.patch  (resolved by hand)",
        f"rewrote patches/s/0002-higher-limit.patch (Rebased-onto: {moves.clash})",
        f"rewrote patches/s/0004-longer-timeout.patch (Rebased-onto: {moves.clash})",
        f'wrote envs/e.toml: [sources.s] rev = "{moves.clash}"; 2 patches rewritten, 1 retired',
        "note: the comment after rev is kept as it was (# the pin the patches were recorded on): check it still holds",
        "run `envlock lock e` to lock the env at the new commit"]
    assert not workdir.exists()
    # The spec: the new rev, 0001 out of the list, every comment where it was.
    assert (ws.root / "envs/e.toml").read_text() == moves_spec(moves.url, moves.pin, moves.patches).replace(
        moves.pin, moves.clash).replace('    "patches/s/0001-sm12-size.patch",\n', "")
    assert sorted(p.name for p in (ws.root / "patches/s").iterdir()) == [
        "0002-higher-limit.patch", "0003-level-two.patch", "0004-longer-timeout.patch"]
    assert (ws.root / "patches/s/0003-level-two.patch").read_bytes() == before["patches/s/0003-level-two.patch"]
    rebased = (ws.root / "patches/s/0004-longer-timeout.patch").read_text()
    assert rebased.startswith("Subject: Longer timeout, more retries\nWhy: the fixture needs it.\n"
                              f"Upstream: https://example.invalid/pr/0004\nRebased-onto: {moves.clash}\n---\n"
                              "diff --git a/d.py b/d.py\n")
    assert "-TIMEOUT = 45\n+TIMEOUT = 90\n" in rebased and "-RETRIES = 3\n+RETRIES = 5\n" in rebased
    # At the new pin the series applies as it is.
    r = cli("patch", "status", "e", "--json")
    assert [p["state"] for p in json.loads(r.out)["sources"]["s"]["patches"]] == ["applies"] * 3
    # Rebasing again to where it stands: every patch applies, the Rebased-onto line is not doubled.
    r = cli("patch", "rebase", "e", "s", "--to", moves.clash)
    assert r.code == 0 and r.out.count("applies ") == 3 and "0 patches rewritten, 0 retired" in r.out


def test_abort_leaves_the_workspace_byte_identical(ws: ScratchWorkspace, cli: Cli, moves: Moves) -> None:
    before = _snapshot(ws.root)
    assert cli("patch", "rebase", "e", "s", "--to", "v2").code == 1
    workdir = _workdir()
    r = cli("patch", "rebase", "e", "s", "--to", "v2")  # one rebase at a time, as git
    assert (r.code, r.err) == (2, f"envlock: error: {workdir}: a rebase of source 's' of env 'e' is in progress "
                                  f"there; run `envlock patch rebase --continue {workdir}` or `--abort {workdir}`\n")
    r = cli("patch", "rebase", "--abort", str(workdir))
    assert (r.code, r.out, r.err) == (0, f"aborted: removed {workdir}; nothing in the workspace changed\n", "")
    assert not workdir.exists()
    assert _snapshot(ws.root) == before
    r = cli("patch", "rebase", "--abort", str(workdir))
    assert (r.code, r.err) == (2, f"envlock: error: {workdir}: not a rebase work dir (no .git/envlock-rebase.json); "
                                  "expected the directory `envlock patch rebase` printed when it stopped\n")


def test_continue_refuses_a_workspace_that_changed_meanwhile(ws: ScratchWorkspace, cli: Cli, moves: Moves) -> None:
    assert cli("patch", "rebase", "e", "s", "--to", "v2").code == 1
    workdir = _workdir()
    (workdir / "d.py").write_text("TIMEOUT = 90\n")
    patch = ws.root / moves.patches[2]
    patch.write_text(patch.read_text().replace("Why:", "Why: edited meanwhile,"))
    before = _snapshot(ws.root)
    r = cli("patch", "rebase", "--continue", str(workdir))
    assert (r.code, r.err) == (1, f"envlock: error: {workdir}: the workspace changed since this rebase started; "
                                  f"nothing was written. Run `envlock patch rebase --abort {workdir}` and start again\n"
                                  "  patches/s/0003-level-two.patch: changed\n")
    assert _snapshot(ws.root) == before


@pytest.mark.parametrize(("args", "message"), [
    (("e", "s"), "patch rebase: expected ENV SOURCE --to REV (or --continue DIR, --abort DIR)"),
    (("e", "s", "--to", "v2", "--abort", "x"),
     "patch rebase: --continue DIR and --abort DIR take no ENV, SOURCE or --to, nor each other"),
    (("e", "nope", "--to", "v2"), "envs/e.toml: no [sources.nope]"),
])
def test_rebase_usage_errors(ws: ScratchWorkspace, cli: Cli, moves: Moves, args: tuple[str, ...], message: str) -> None:
    r = cli("patch", "rebase", *args)
    assert (r.code, r.err) == (2, f"envlock: error: {message}\n")


def test_edit_against_a_moved_upstream_merges_the_conflict_with_markers(ws: ScratchWorkspace, cli: Cli, moves: Moves,
                                                                        tmp_path: Path) -> None:
    """edit --against: --source like the other commands, the commit printed, the first patch that
    does not apply as it is carried as far as it goes (a clean 3-way merge here, uncommitted)."""
    ws.write_spec("e", moves_spec("https://example.invalid/moves.git", moves.pin, moves.patches))
    work = tmp_path / "work"
    r = cli("patch", "edit", "e", "s", "--against", "v2", "--dir", str(work), "--source", f"s={moves.url}")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == f"{work}: s at {moves.clash} with 0 patches applied (one commit each)"
    assert lines[1:4] == ["patches/s/0001-sm12-size.patch is already upstream at v2: retire it (drop it from the spec)",
                          "patches/s/0002-higher-limit.patch does not apply here:",
                          "  a 3-way merge carried it whole (uncommitted): check it"]
    assert lines[-1] == f'then set [sources.s] rev = "{moves.clash}" and run `envlock lock e`'
    assert git(work, "diff").splitlines()[-3:] == ["-    high = 10", "+    high = 12", "     return low, mid, high"]
    # Recorded, 0003 follows by itself and 0004 is carried as far as it goes: conflict markers.
    r = cli("patch", "record", str(work), "--refresh")
    assert r.code == 0, r.err
    assert r.out.splitlines()[1:] == [
        "next: patches/s/0004-longer-timeout.patch does not apply as it is either; finish it, then record --refresh "
        "again", "  applied as far as it goes; conflict markers in d.py"]
    markers = "<<<<<<< v2\nTIMEOUT = 45\n=======\nTIMEOUT = 60\n>>>>>>> patch 0004\n"
    assert (work / "d.py").read_text().startswith(markers)
    r = cli("patch", "record", str(work), "--refresh")
    assert (r.code, r.err) == (1, f"envlock: error: {work}: conflict markers would be recorded; expected the "
                                  "conflict resolved first\n  d.py: <<<<<<<\n  d.py: =======\n  d.py: >>>>>>>\n")


def test_a_conflict_resolved_to_upstreams_lines_retires_the_patch(ws: ScratchWorkspace, cli: Cli, moves: Moves) -> None:
    """As `git rebase --continue` with nothing left of a commit: the patch is no longer needed."""
    assert cli("patch", "rebase", "e", "s", "--to", "v2").code == 1
    workdir = _workdir()
    # Upstream's lines everywhere: the conflict taken their way, the merged hunk 2 undone too.
    (workdir / "d.py").write_text(git(moves.repo, "show", "v2:d.py", raw=True))
    r = cli("patch", "rebase", "--continue", str(workdir), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [(p["patch"], p["outcome"], p["how"]) for p in doc["patches"]][3] == (
        "patches/s/0004-longer-timeout.patch", "already-applied", "resolved to upstream's lines")
    assert (doc["state"], doc["retired"], doc["rewritten"]) == (
        "done", ["patches/s/0001-sm12-size.patch", "patches/s/0004-longer-timeout.patch"],
        ["patches/s/0002-higher-limit.patch"])
    assert "RETIRED patches/s/0004-longer-timeout.patch" in r.err
    assert sorted(p.name for p in (ws.root / "patches/s").iterdir()) == ["0002-higher-limit.patch",
                                                                          "0003-level-two.patch"]


def test_a_patch_that_does_not_apply_where_it_was_recorded_leaves_no_work_dir(ws: ScratchWorkspace, cli: Cli,
                                                                              moves: Moves) -> None:
    """Nothing to continue from: the rebase fails (exit 1) as if it had not started."""
    patch = ws.root / moves.patches[2]
    patch.write_text(patch.read_text().replace(" LEVEL = 1\n", "").replace("-LEVEL = 1", "-LEVEL = 7"))
    before = _snapshot(ws.root)
    r = cli("patch", "rebase", "e", "s", "--to", "v2")
    assert r.code == 1
    assert r.err.startswith("envlock: error: patches/s/0003-level-two.patch: does not apply to the tree it was "
                            "recorded on\n  c.py: hunk 1"), r.err
    assert not _workdir().exists() and _snapshot(ws.root) == before


def test_continue_refuses_leftovers_it_would_record(ws: ScratchWorkspace, cli: Cli, moves: Moves) -> None:
    assert cli("patch", "rebase", "e", "s", "--to", "v2").code == 1
    workdir = _workdir()
    d = (workdir / "d.py").read_text()
    (workdir / "d.py").write_text(d.replace("<<<<<<< v2\nTIMEOUT = 45\n=======\nTIMEOUT = 60\n>>>>>>> patch 0004\n",
                                            "TIMEOUT = 90\n"))
    (workdir / "d.py.orig").write_text(d)
    r = cli("patch", "rebase", "--continue", str(workdir))
    assert (r.code, r.err) == (1, f"envlock: error: {workdir}: patches/s/0004-longer-timeout.patch would be rewritten "
                                  "with these; expected them gone first\n  d.py.orig: patch(1) leftover\n"
                                  "  d.py.orig: conflict marker <<<<<<<\n  d.py.orig: conflict marker =======\n"
                                  "  d.py.orig: conflict marker >>>>>>>\n")
    (workdir / "d.py.orig").unlink()
    assert cli("patch", "rebase", "--continue", str(workdir)).code == 0
