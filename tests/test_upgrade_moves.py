"""``envlock upgrade`` on a move shaped like SGLang's f016738f -> 69b02ea6 (tests/kit/moves.py): a patch
that conflicts, the kernel project renamed with a FetchContent table under its build, an input upstream
dropped and one it added (an archive under a CMake cache variable, with its URL_HASH), a build that now
reads ``..`` and needs another build requirement, and two wheels that install one file with different
bytes. Every problem is named in one run, each with its fix; ``--fix-renames`` moves a renamed build's
tables in one step; the report names every other move."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.index import IndexServer
from kit.moves import NEW_HASH, Move, make_move, move_index, spec_text
from kit.sglike import commit_all, init_repo
from kit.universe import backend_wheels
from kit.workspaces import Cli, ScratchWorkspace

EXCLUDE = '\n[resolution]\nexclude = ["libbase-cu13"]   # the overlap, settled\n'
PATCHES = 'patches = ["patches/up/0001-sizes.patch"]\n'


@pytest.fixture(scope="module")
def move(tmp_path_factory: pytest.TempPathFactory) -> Move:
    return make_move(tmp_path_factory.mktemp("move"))


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    server = move_index(tmp_path_factory.mktemp("move-index"), backend_wheels())
    yield server
    server.stop()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _locked(ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer, text: str) -> Path:
    (ws.root / "patches" / "up").mkdir(parents=True)
    (ws.root / "patches" / "up" / "0001-sizes.patch").write_text(move.patch)
    spec = ws.write_spec("e", text)
    r = cli("lock", "e")
    assert r.code == 0, r.err
    return spec


def test_an_upgrade_names_every_problem_it_finds_in_one_report(
        ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer) -> None:
    _locked(ws, cli, move, index, spec_text(move, index))
    before = _files(ws.root)
    r = cli("upgrade", "e", "--rev", "up=main")
    assert r.code == 1
    lines = r.err.splitlines()
    assert lines[0] == ("envlock: error: envs/e.toml: 3 problems stop `envlock upgrade e --rev up=main`; nothing was "
                        "changed")
    assert [line for line in lines if line[2:3].isdigit()] == [
        f"  1. builds.kern: source up's kernel/pyproject.toml at {move.main[:12]} names the project 'kern-ng': "
        "upstream renamed it, so the build, its package and every table under it move to that name",
        f"  2. sources.up: 1 of 1 patches do not apply at {move.main} (--rev up=main)",
        "  3. libbase and libbase-cu13 install the same files with different bytes; the one installed last would "
        "overwrite the other's, so nothing is locked"]
    # Each with its fix.
    assert lines[2:6] == ["     [builds.kern] -> [builds.kern-ng]",
                          "     [builds.kern.fetchcontent] -> [builds.kern-ng.fetchcontent]",
                          '     packages.kern -> packages.kern-ng = { build = "kern-ng" }',
                          "     fix: `envlock upgrade e --rev up=main --fix-renames` moves them in one step (every "
                          "comment kept)"]
    assert ("     carry them with `envlock patch rebase e up --to main` (3-way; it stops at a real conflict), then run "
            "the upgrade again") in lines
    assert ('       fix: resolution.exclude = ["libbase"] or resolution.exclude = ["libbase-cu13"] in e.toml, for the '
            "one the env does not need; or, if the shared file is harmless, resolution.allow-overlap = [{ path = "
            '"cutlass_dsl/_mlir/x.py", packages = ["libbase", "libbase-cu13"], reason = "..." }]') in lines
    # How the rest was found, and what else moved: the input upstream dropped (from the store's mirror), the one
    # it added (the relock's note), in the spec's own form.
    assert lines[-3:] == [
        "  the relock was tried with sources.up without its patches and builds.kern as kern-ng, as the fixes would "
        "leave them",
        f"  note: builds.kern-ng.fetchcontent.repo-old: the CMake files of kernel/ no longer declare it at "
        f"{move.main[:12]} (they did at {move.pin[:12]}): it is still fetched, in the input digest and in the lock; "
        "drop it from [builds.kern-ng.fetchcontent]",
        "  note: builds.kern-ng.fetchcontent: kernel/CMakeLists.txt declares repo-new (URL "
        "https://github.com/x/new/archive/v2.0.tar.gz), the spec does not: the build downloads it unchecked, or "
        'cannot configure (declare repo-new = { url = "https://github.com/x/new/archive/v2.0.tar.gz", sha256 = '
        f'"{NEW_HASH}" }})']
    assert _files(ws.root) == before  # spec, lock and patches
    doc = json.loads(cli("upgrade", "e", "--rev", "up=main", "--json").out)["error"]
    assert (doc["kind"], doc["exit_code"]) == ("UpgradeError", 1)


def test_fix_renames_moves_every_table_of_a_renamed_build_and_the_report_names_every_move(
        ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer) -> None:
    spec = _locked(ws, cli, move, index, spec_text(move, index).replace(PATCHES, "") + EXCLUDE)
    init_repo(ws.root)  # the workspace is a git checkout, as yours should be: `diff ...@HEAD` reads the old lock
    commit_all(ws.root, "locked at the pin")
    r = cli("upgrade", "e", "--rev", "up=main", "--dry-run")
    assert r.code == 2  # the one problem: a spec that names the build by its old name
    assert r.err.splitlines()[-4:-2] == [
        "  fix: `envlock upgrade e --rev up=main --fix-renames` moves them in one step (every comment kept)",
        "  the relock was tried with builds.kern as kern-ng, as the fixes would leave them"]
    before = spec.read_text()
    r = cli("upgrade", "e", "--rev", "up=main", "--fix-renames")
    assert r.code == 0, r.err
    # In place: the tables and the package entry renamed, every comment and line kept.
    assert spec.read_text() == (
        spec_text(move, index, kernel="kern-ng").replace(PATCHES, "") + EXCLUDE).replace(
        f'rev = "{move.pin}"   # the pin', f'rev = "{move.main}"   # the pin')
    assert len(spec.read_text().splitlines()) == len(before.splitlines())
    out = r.out.splitlines()
    assert out[2] == (f"  builds.kern renamed kern-ng (source up's kernel/pyproject.toml at {move.main[:12]}): "
                      "[builds.kern] -> [builds.kern-ng]; [builds.kern.fetchcontent] -> [builds.kern-ng.fetchcontent]; "
                      'packages.kern -> packages.kern-ng = { build = "kern-ng" }')
    builds = out[out.index("builds:") + 1:out.index("packages:")]
    assert builds == [
        "  no rebuild kern: renamed kern-ng (the same source and subdirectory; no longer built as kern)",
        f"  rebuild kern-ng: renamed from kern; source up {move.pin[:12]} -> {move.main[:12]} (kernel/ changed); "
        "pending: not built for this lock yet",
        f"  rebuild upapp: source up {move.pin[:12]} -> {move.main[:12]} (python/ changed); [build-system] requires + "
        "setuptools-rustlike>=1.10; its pyproject.toml now reads ../rust/grpc/Cargo.toml "
        "(tool.setuptools-rust.ext-modules[0].path), outside python/ (the build sees the whole tree, and its source "
        "digest covers what it reads); pending: not built for this lock yet"]
    assert [line for line in out if line.startswith("note: builds.")] == [
        "note: builds.kern-ng.fetchcontent: kernel/CMakeLists.txt declares repo-new (URL "
        "https://github.com/x/new/archive/v2.0.tar.gz), the spec does not: the build downloads it unchecked, or "
        'cannot configure (declare repo-new = { url = "https://github.com/x/new/archive/v2.0.tar.gz", sha256 = '
        f'"{NEW_HASH}" }})',
        f"note: builds.kern-ng.fetchcontent.repo-old: the CMake files of kernel/ no longer declare it at "
        f"{move.main[:12]} (they did at {move.pin[:12]}): it is still fetched, in the input digest and in the lock; "
        "drop it from [builds.kern-ng.fetchcontent]"]
    assert out[-1] == "wrote envs/e.toml and locks/pylock.e.toml"
    assert cli("lock", "e", "--check").code == 0
    # `envlock diff` of the two locks gives the same report, with the same reasons (the old spec read from git).
    diff = cli("diff", "locks/pylock.e.toml@HEAD", "e")
    assert diff.code == 0, diff.err
    report = out[out.index("--- locks/pylock.e.toml") + 2:next(i for i, line in enumerate(out) if "identical" in line)]
    assert diff.out.splitlines()[2:-1] == report
    assert {line.removeprefix("envlock: ") for line in diff.err.splitlines()} == {
        line for line in out if line.startswith("note: builds.kern-ng.fetchcontent.")}


def test_fix_renames_alone_renames_at_the_pin(ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer) -> None:
    """After `patch rebase` moved the spec's rev, the kernel's new name is fixed with nothing else to move."""
    spec = _locked(ws, cli, move, index, spec_text(move, index).replace(PATCHES, "") + EXCLUDE)
    spec.write_text(spec.read_text().replace(move.pin, move.main))
    r = cli("lock", "e")
    assert r.code == 2 and "`envlock upgrade e --fix-renames` moves its tables and its package entry" in r.err
    r = cli("upgrade", "e", "--fix-renames")
    assert r.code == 0, r.err
    assert "[builds.kern-ng.fetchcontent]" in spec.read_text() and "kern =" not in spec.read_text()


def test_a_lock_names_every_build_that_does_not_match_its_source(
        ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer) -> None:
    text = spec_text(move, index, rev=move.main).replace(PATCHES, "").replace(
        'upapp = { build = "upapp" }', 'upapp2 = { build = "upapp2" }').replace("[builds.upapp]", "[builds.upapp2]")
    spec = ws.write_spec("e", text + EXCLUDE)
    r = cli("lock", "e")
    assert (r.code, r.err.splitlines()) == (2, [
        f"envlock: error: {spec}: 2 builds do not match their sources",
        "  [builds.upapp2]: source 'up' builds project 'upapp' (python/pyproject.toml), expected 'upapp2': a build "
        "makes the package of its own name; name the build (and its package) 'upapp': `envlock upgrade e "
        "--fix-renames` moves its tables and its package entry",
        "  [builds.kern]: source 'up' builds project 'kern-ng' (kernel/pyproject.toml), expected 'kern': a build makes "
        "the package of its own name; name the build (and its package) 'kern-ng': `envlock upgrade e --fix-renames` "
        "moves its tables and its package entry"])


def test_a_table_left_behind_by_a_rename_by_hand_says_where_it_goes(
        ws: ScratchWorkspace, cli: Cli, move: Move, index: IndexServer) -> None:
    text = spec_text(move, index, rev=move.main).replace(PATCHES, "").replace(
        'kern = { build = "kern" }', 'kern-ng = { build = "kern-ng" }').replace("[builds.kern]", "[builds.kern-ng]")
    spec = ws.write_spec("e", text)
    r = cli("lock", "e")
    assert (r.code, r.err) == (2, f"envlock: error: {spec}: 1 problem in env spec 'e'\n"
                                  "  builds.kern: only [builds.kern.fetchcontent] is left of it, no source: left "
                                  "behind when the build was renamed? move it to [builds.kern-ng.fetchcontent] "
                                  "(`envlock upgrade ENV --fix-renames` moves every table of a build upstream "
                                  "renamed)\n")
