"""End-to-end CLI: exit codes, messages on stderr, --json documents, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlock import __version__, ui
from envlock.cli.main import main
from envlock.model.lockfile import Lock, read_lock
from envlock.workspace import Workspace
from kit.locks import sha256_of
from kit.sglike import commit_all, init_repo
from kit.universe import TORCH, TRITON, Universe, spec_text
from kit.workspaces import Cli, CliResult, ScratchWorkspace
from kit.workspaces import ScratchWorkspace as Ws


def test_console_script_runs_and_reports_errors_without_traceback(ws: ScratchWorkspace) -> None:
    # The installed entry point ([project.scripts]), as users run it.
    script = Path(sys.executable).with_name("envlock")
    proc = subprocess.run([script, "lock", "nope"], capture_output=True, text=True, cwd=ws.root)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr == f"envlock: error: {ws.root}/envs/nope.toml: no env 'nope' (envs: none)\n"
    version = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert (version.returncode, version.stdout.strip()) == (0, f"envlock {__version__}")


def test_unknown_env_suggests_close_name(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("qwen35-blackwell", spec_text(universe, 'tinydep = "==1.0"'))
    result = cli("lock", "qwen35-blackwel")
    assert result.code == 2
    assert result.err == (f"envlock: error: {ws.root}/envs/qwen35-blackwel.toml: no env 'qwen35-blackwel'; "
                          "did you mean 'qwen35-blackwell'? (envs: qwen35-blackwell)\n")


def test_bad_spec_exits_2_listing_every_problem(ws: ScratchWorkspace, cli: Cli) -> None:
    ws.write_spec("e", '[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\n'
                       'default = true\n[packages]\ntorch = { nightly = "yesterday" }\n')
    result = cli("lock", "e")
    assert result.code == 2
    assert result.err.splitlines() == [
        f"envlock: error: {ws.root}/envs/e.toml: 2 problems in env spec 'e'",
        "  packages.torch.nightly: expected a date YYYY-MM-DD, found 'yesterday'",
        "  packages.torch.index: missing; a nightly pin must name its index (nightlies are never taken from "
        "the default index by accident)",
    ]
    assert result.out == ""


def test_common_options_work_before_and_after_the_command(ws: ScratchWorkspace, cli: Cli, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", '[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\n'
                       'default = true\n[packages]\ntorch = { nightly = "yesterday" }\n')
    monkeypatch.chdir(tmp_path)  # outside the workspace: only --root finds it
    for args in (["--root", str(ws.root), "lock", "--check", "e"], ["lock", "--root", str(ws.root), "--check", "e"],
                 ["--root", "/", "lock", "--root", str(ws.root), "--check", "e"]):
        result = cli(*args)
        assert (result.code, result.err.splitlines()[0]) == (
            2, f"envlock: error: {ws.root}/envs/e.toml: 2 problems in env spec 'e'"), args
    # --debug shows where the error was raised, and exits as without it (scripts test the code).
    debug = cli("--debug", "--root", str(ws.root), "lock", "--check", "e")
    assert debug.code == 2
    assert debug.err.startswith("Traceback (most recent call last):\n") and "envlock.errors.SpecError: " in debug.err
    assert f"\nenvlock: error: {ws.root}/envs/e.toml: 2 problems in env spec 'e'\n" in debug.err


def test_unknown_option_exits_2(ws: ScratchWorkspace, cli: Cli) -> None:
    with pytest.raises(SystemExit) as info:
        cli("lock", "e", "--frobnicate")
    assert info.value.code == 2


def test_bad_index_option(ws: ScratchWorkspace, cli: Cli, universe: Universe, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    result = cli("lock", "e", "--index", "pytorch")
    assert (result.code, result.err) == (
        2, "envlock: error: --index 'pytorch': expected NAME=URL (a spec index name and the mirror's URL)\n")
    result = cli("lock", "e", "--index", "nope=http://x")
    assert result.code == 2
    assert "has no [indexes.nope]; indexes: flashinfer, pypi, pytorch" in result.err
    result = cli("lock", "e", "--index", "pypi=notaurl")
    assert (result.code, result.err) == (2, "envlock: error: --index pypi='notaurl': expected an http(s):// or "
                                            "file:// URL\n")
    monkeypatch.setenv("ENVLOCK_INDEX_PYTORCH", "mirror.internal/whl")
    result = cli("lock", "e")
    assert (result.code, result.err) == (2, "envlock: error: ENVLOCK_INDEX_PYTORCH='mirror.internal/whl': expected "
                                            "an http(s):// or file:// URL\n")
    result = cli("lock", "e", "--index", "pypi=notaurl", "--index", f"pytorch={universe.pytorch}")
    # --index overrides the variable: only the option's bad URL is named.
    assert (result.code, result.err) == (2, "envlock: error: --index pypi='notaurl': expected an http(s):// or "
                                            "file:// URL\n")
    # A URL that fails only when parsed to be fetched is named here too, for lock and sync alike.
    monkeypatch.delenv("ENVLOCK_INDEX_PYTORCH")
    for command in (["lock", "e"], ["sync", "e", "--frozen"]):
        for url in ("http://127.0.0.1:99999/", "http://[::1/"):
            result = cli(*command, "--index", f"pypi={url}")
            assert (result.code, result.err) == (2, f"envlock: error: --index pypi={url!r}: expected an http(s):// "
                                                    "or file:// URL\n"), (command, url)


def test_lock_then_check_current_stale_missing(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'tinydep = "==1.0"'))
    missing = cli("lock", "e", "--check")
    assert missing.code == 2
    assert "no lock file; create it with `envlock lock e`" in missing.err

    made = cli("lock", "e")
    assert made.code == 0
    # torch (a pinned nightly) and pytorch-triton (uv picks it), both from the hash-less index
    locked = read_lock(ws.root / "locks" / "pylock.e.toml").packages
    hashed = [p.wheels[0] for p in locked if p.index == universe.pytorch]
    assert sorted(a.filename.split("-")[0] for a in hashed) == ["pytorch_triton", "torch"]
    size = ui.size(sum(a.size or 0 for a in hashed))
    assert made.out.splitlines() == [
        "wrote locks/pylock.e.toml (3 packages)",
        "  nightly torch -> 2.12.0.dev20260307+cu130",
        f"  {size} read into the store, to hash wheels whose index publishes no hash (or is a folder on disk)",
    ]
    assert cli("lock", "e", "--check").out == "locks/pylock.e.toml is current for envs/e.toml\n"
    # A relock finds the nightly in the store: nothing downloaded, nothing said.
    assert cli("lock", "e").out.splitlines() == [
        "unchanged: locks/pylock.e.toml (3 packages)", "  nightly torch -> 2.12.0.dev20260307+cu130"]

    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'tinydep = "==1.1"'))
    stale = cli("lock", "e", "--check")
    assert stale.code == 1
    assert stale.out.splitlines() == [
        "locks/pylock.e.toml is stale:", "  packages.tinydep: changed", "run `envlock lock e` to update it"]
    doc = json.loads(cli("lock", "e", "--check", "--json").out)
    assert doc == {"env": "e", "lock": str(ws.root / "locks" / "pylock.e.toml"), "current": False,
                   "reasons": ["packages.tinydep: changed"], "yanked": [], "notes": []}


def test_a_lock_edited_by_hand_or_of_another_env_is_not_current(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'tinydep = "==1.0"'))
    assert cli("-q", "lock", "e").code == 0
    path = ws.root / "locks" / "pylock.e.toml"
    made = path.read_text()
    start = made.index('[[packages]]\nname = "tinydep"')
    end = made.index("[[packages]]", start + 1) if "[[packages]]" in made[start + 1:] else made.index("\n[tool")
    for edited, reason in [
        (made[:start] + made[end:], "packages.tinydep: declared, but the lock leaves it out (edited by hand?)"),
        (made.replace('name = "tinydep"\nversion = "1.0"', 'name = "tinydep"\nversion = "1.1"'),
         "packages.tinydep: pinned ==1.0, but the lock has 1.1 (edited by hand?)"),
        (made.replace('torch"\nversion = "2.12.0.dev20260307+cu130"', 'torch"\nversion = "2.12.0.dev20260310+cu130"'),
         "packages.torch: nightly 2026-03-07 is 2.12.0.dev20260307+cu130, but the lock has 2.12.0.dev20260310+cu130 "
         "(edited by hand?)"),
        (made.replace('env = "e"', 'env = "other"'), "tool.envlock.env: the lock of env 'other', not 'e'"),
    ]:
        assert edited != made, reason
        path.write_text(edited)
        check = cli("lock", "e", "--check")
        assert (check.code, check.out.splitlines()[1:2]) == (1, [f"  {reason}"]), check.out
    # Synced as it is, another env's lock would make this env's generations hold that env's packages.
    for frozen in ((), ("--frozen",)):
        r = cli("sync", "e", *frozen)
        assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: the lock of env 'other', not 'e'; "
                                      "expected the lock of env 'e' there (`envlock lock e` writes it anew)\n")
    assert path.read_text() == edited  # nothing written


def test_check_reads_one_index_page_per_package_and_offline_none(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    # The drift needs no network; the yanked files (PEP 592, tests/test_yanks.py) one page per package.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("lock", "e").code == 0
    before = len(universe.server.requests)
    assert cli("lock", "e", "--check", "--offline").code == 0
    assert len(universe.server.requests) == before
    assert cli("lock", "e", "--check").code == 0
    assert [path for path, _ in universe.server.requests[before:]] == ["/pypi/simple/tinydep/"]


def test_lock_json(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    doc = json.loads(cli("lock", "e", "--json").out)
    assert doc["nightlies"] == {"torch": "2.12.0.dev20260307+cu130"}
    assert doc["packages"] == 3
    assert doc["changed"] is True


def test_diff_nightly_upgrade_from_git_history(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    init_repo(ws.root)
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    assert cli("lock", "e").code == 0
    commit_all(ws.root, "known good")
    ws.write_spec("e", spec_text(universe, TORCH.replace("2026-03-07", "2026-03-10") + TRITON))
    assert cli("lock", "e").code == 0

    result = cli("diff", "locks/pylock.e.toml@HEAD", "e")
    assert result.code == 0
    assert result.out.splitlines() == [
        "--- locks/pylock.e.toml@HEAD",
        "+++ locks/pylock.e.toml",
        "nightlies:",
        "  pytorch 2026-03-07 -> 2026-03-10: torch",
        "packages:",
        "  ~ torch 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260310+cu130 [1.1 kB -> 1.1 kB]  (nightly 2026-03-07 -> "
        "2026-03-10)",
        "download: 2.2 kB -> 2.2 kB (-2 B); size unknown: tinydep (before); tinydep (after)",
        "changes:",
        "~ package  torch: 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260310+cu130",
        "~ nightly  torch: 2026-03-07 -> 2026-03-10  (2.12.0.dev20260307+cu130 -> 2.12.0.dev20260310+cu130)",
        "2 changes, 2 packages identical",
    ]
    doc = json.loads(cli("diff", "locks/pylock.e.toml@HEAD", "e", "--json").out)
    assert doc["changes"][0] == {"kind": "package", "name": "torch", "action": "changed",
                                 "old": "2.12.0.dev20260307+cu130", "new": "2.12.0.dev20260310+cu130", "note": ""}
    missing_rev = cli("diff", "locks/pylock.e.toml@nope", "e")
    assert missing_rev.code == 2
    assert "git has no locks/pylock.e.toml at 'nope'" in missing_rev.err
    # A rev git would take for an option (`--output=FILE` writes a file) is refused before git runs;
    # an empty rev is not read as the working tree's file; a folder at a rev is not a lock.
    written = ws.root.parent / "injected:locks"
    written.mkdir()
    for rev in ("--output=" + str(ws.root.parent / "injected"), "-p", ""):
        r = cli("diff", f"locks/pylock.e.toml@{rev}", "e")
        assert (r.code, r.err) == (2, f"envlock: error: locks/pylock.e.toml@{rev}: expected a git revision after "
                                      f"'@' (a commit, tag or branch, such as HEAD~1), found {rev!r}\n"), rev
    assert list(written.iterdir()) == []
    folder = cli("diff", "locks@HEAD", "e")
    assert (folder.code, folder.err) == (2, "envlock: error: locks@HEAD: locks at 'HEAD' is a git tree, "
                                            "expected a lock file\n")
    # An absolute PATH@REV through a symlink to the workspace reads the same file.
    link = ws.root.parent / "ws-link"
    link.symlink_to(ws.root)
    via_link = cli("diff", f"{link}/locks/pylock.e.toml@HEAD", "e")
    assert via_link.code == 0, via_link.err
    assert via_link.out.splitlines()[2:] == result.out.splitlines()[2:]
    # A lock at a rev is read as strictly as a file: bytes that are not UTF-8 are refused, not replaced.
    bad = ws.root / "locks" / "pylock.bad.toml"
    bad.write_bytes(ws.lock_text("e").encode() + b"# caf\xe9\n")
    commit_all(ws.root, "a lock that is not UTF-8")
    for ref, named in (("locks/pylock.bad.toml", bad), ("locks/pylock.bad.toml@HEAD", "locks/pylock.bad.toml@HEAD")):
        r = cli("diff", ref, "e")
        assert (r.code, r.err) == (2, f"envlock: error: {named}: not UTF-8 text (byte {bad.stat().st_size - 2}); "
                                      "not a lock file\n"), ref


def test_a_lock_path_holding_an_at_sign_is_a_path_and_a_rev_may_hold_one(ws: ScratchWorkspace, cli: Cli,
                                                                         universe: Universe) -> None:
    init_repo(ws.root)
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("lock", "e").code == 0
    (ws.root / "user@host").mkdir()
    (ws.root / "user@host" / "pylock.e.toml").write_text(ws.lock_text("e"))
    commit_all(ws.root, "a lock in a folder named like user@host")
    for old in ("user@host/pylock.e.toml", f"{ws.root}/user@host/pylock.e.toml", "user@host/pylock.e.toml@HEAD",
                "user@host/pylock.e.toml@HEAD@{0}"):
        r = cli("diff", old, "e")
        assert (r.code, r.out.splitlines()[-1]) == (0, "no differences (1 package identical)"), (old, r.err)
    r = cli("-q", "sync", "e", "--lock", "user@host/pylock.e.toml")
    assert r.code == 0, r.err


def test_workspace_paths_are_shown_relative_even_through_a_symlinked_folder(tmp_path: Path) -> None:
    outside = tmp_path / "big-disk" / "wheelhouse"
    outside.mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "wheelhouse").symlink_to(outside)
    ws = Workspace(tmp_path / "ws")
    assert ws.relative(ws.wheelhouse / "k-1.0-py3-none-any.whl") == "wheelhouse/k-1.0-py3-none-any.whl"
    assert ws.relative(tmp_path / "elsewhere.whl") == str(tmp_path / "elsewhere.whl")


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    from envlock.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["lock", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal width
    assert "--index NAME=URL" in out
    assert "ENVLOCK_INDEX_<NAME>=URL" in out
    assert "exit 0 if the lock is current, 1 if stale" in out


def test_help_names_a_readme_section_and_a_script_that_exist(capsys: pytest.CaptureFixture[str]) -> None:
    from envlock.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "`python examples/world/serve.py --dir DIR` (README.md, A first tour)" in out
    repo = Path(__file__).resolve().parents[1]
    headings = {line.lstrip("#").strip() for line in (repo / "README.md").read_text().splitlines()
                if line.startswith("#")}
    named = re.findall(r"\(README\.md, ([^)]+)\)", out)
    assert named and set(named) <= headings, (named, headings)
    assert all((repo / path).is_file() for path in re.findall(r"`python (\S+\.py)", out))


def test_unreadable_specs_and_locks_exit_2_without_traceback(ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> None:
    (ws.root / "envs" / "latin1.toml").write_bytes(b'[env]\npython = "3.11"\n# caf\xe9\n')
    r = cli("lock", "latin1")
    assert (r.code, r.err) == (
        2, f"envlock: error: {ws.root}/envs/latin1.toml: not UTF-8 text (byte 27); TOML files are UTF-8\n")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'x = "\xff"\n')
    r = cli("diff", str(bad), str(bad))
    assert (r.code, r.err) == (2, f"envlock: error: {bad}: not UTF-8 text (byte 5); not a lock file\n")
    r = cli("diff", str(ws.root / "locks"), str(bad))
    assert r.code == 2 and r.err.startswith(f"envlock: error: {ws.root / 'locks'}: cannot read the lock (")


@pytest.mark.parametrize("command", [["path"], ["generations"], ["rollback"], ["run"]])
def test_store_commands_refuse_names_that_are_no_env_names(cli: Cli, command: list[str]) -> None:
    r = cli(*command, "..", *(["--", "true"] if command == ["run"] else []))
    assert (r.code, r.err) == (2, "envlock: error: '..': not an env name (letters, digits, '.', '_', '-')\n")


def test_a_disk_error_is_one_line_naming_the_file_and_leaves_no_temp_file(ws: ScratchWorkspace, cli: Cli,
                                                                          universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    (ws.root / "locks" / "pylock.e.toml").mkdir()  # where the lock file belongs
    r = cli("lock", "e")
    target = ws.root / "locks" / "pylock.e.toml"
    assert (r.code, r.err) == (1, f"envlock: error: {target}: Is a directory (rerun with --debug for where)\n")
    assert sorted(p.name for p in (ws.root / "locks").iterdir()) == ["pylock.e.toml"]  # no .tmp left
    r = cli("lock", "e", "--json")
    assert json.loads(r.out) == {"error": {"kind": "OSError", "exit_code": 1, "details": [],
                                           "message": f"{target}: Is a directory (rerun with --debug for where)"}}


def test_a_lock_written_by_another_envlock_during_resolution_is_kept(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from envlock.resolution import resolve

    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    lock_file = ws.root / "locks" / "pylock.e.toml"
    real_resolve = resolve.resolve

    def another_lock_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = real_resolve(*args, **kwargs)
        lock_file.write_text("# another envlock's lock\n")
        return result

    monkeypatch.setattr(resolve, "resolve", another_lock_meanwhile)
    r = cli("lock", "e")
    assert (r.code, r.err) == (1, "envlock: error: locks/pylock.e.toml: changed by another envlock while this one "
                                  "resolved; nothing written. Run `envlock lock e` again\n")
    assert lock_file.read_text() == "# another envlock's lock\n"
    monkeypatch.setattr(resolve, "resolve", real_resolve)
    assert cli("lock", "e").code == 0
    assert lock_file.read_text().startswith("lock-version")


def test_json_errors_are_a_document_on_stdout_too(
        ws: ScratchWorkspace, cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    r = cli("lock", "nosuch", "--json")
    assert r.code == 2 and r.err.startswith("envlock: error: ")
    error = json.loads(r.out)["error"]
    assert (error["kind"], error["exit_code"]) == ("UsageError", 2) and "no env 'nosuch'" in error["message"]
    with pytest.raises(SystemExit) as info:  # argparse's own errors too (it exits itself)
        main(["lock", "--json"])
    assert info.value.code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error == {"kind": "UsageError", "exit_code": 2, "details": [],
                     "message": "the following arguments are required: ENV"}


def test_sync_refuses_what_it_cannot_do_as_asked(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    ws.write_spec("f", spec_text(universe, 'tinydep = "==1.1"'))
    # --offline cannot lock: it says so before any network.
    requests = len(universe.server.requests)
    r = cli("sync", "e", "--offline")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: missing; --offline cannot lock (that needs "
                                  "the indexes): run `envlock lock e` where they are reachable\n")
    assert len(universe.server.requests) == requests
    r = cli("sync", "e", "--source", "nosuch=/x")
    assert r.code == 2 and "--source nosuch=...: " in r.err and "has no [sources.nosuch]" in r.err
    assert cli("lock", "e").code == 0
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.1"'))  # the lock is stale now
    r = cli("sync", "e", "--offline")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: stale (packages.tinydep: changed); --offline "
                                  "cannot lock (that needs the indexes): run `envlock lock e` where they are "
                                  "reachable, or sync the lock as it is with --frozen --offline\n")
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    # Another env's lock: its generations and path would hold the wrong packages.
    r = cli("sync", "f", "--lock", "locks/pylock.e.toml")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.e.toml: the lock of env 'e', not 'f'; expected "
                                  "`envlock sync e --lock locks/pylock.e.toml`\n")
    # A --source is checked as every command checks it (and unused: `sync --lock` fetches no source).
    r = cli("sync", "e", "--lock", "locks/pylock.e.toml", "--source", "x=/y")
    assert r.code == 2 and "--source x=...: " in r.err and "has no [sources.x]" in r.err
    assert cli("sync", "e", "--lock", "locks/pylock.e.toml").code == 0
    # --json answers up-to-date syncs from the stamp; it must not skip what is refused.
    r = cli("sync", "e", "--lock", "locks/pylock.e.toml", "--source", "x=/y", "--json")
    assert r.code == 2 and json.loads(r.out)["error"]["kind"] == "UsageError"
    r = cli("sync", "e", "--source", "nosuch=/x", "--json")
    assert r.code == 2 and "has no [sources.nosuch]" in json.loads(r.out)["error"]["message"]
    r = cli("sync", "e", "--lock", "nope.toml")
    assert (r.code, r.err) == (2, f"envlock: error: nope.toml: no such lock file ({ws.root / 'nope.toml'})\n")
    assert not (ws.root / "locks" / "pylock.f.toml").exists()


def test_diff_names_what_is_missing_and_reads_lock_files_in_the_current_folder(ws: ScratchWorkspace, cli: Cli,
                                                                               universe: Universe,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("lock", "e").code == 0
    r = cli("diff", "e", "f")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.f.toml: no lock of env 'f'; there is no "
                                  "envs/f.toml either (expected a lock path, PATH@GITREV or an env name; envs: e)\n")
    ws.write_spec("f", spec_text(universe, 'tinydep = "==1.1"'))
    r = cli("diff", "e", "f")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.f.toml: no lock of env 'f'; create it with "
                                  "`envlock lock f`\n")
    # Files named without a slash or .toml are files when no env lock has that name.
    monkeypatch.chdir(ws.root / "locks")
    (ws.root / "locks" / "a.lock").write_text(ws.lock_text("e"))
    (ws.root / "locks" / "b.lock").write_text(ws.lock_text("e"))
    r = cli("diff", "a.lock", "b.lock")
    assert (r.code, r.out) == (0, "no differences (1 package identical)\n")
    # Two lock paths need no workspace.
    outside = ws.root.parent / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    r = cli("diff", str(ws.root / "locks" / "a.lock"), str(ws.root / "locks" / "b.lock"))
    assert (r.code, r.out) == (0, "no differences (1 package identical)\n"), r.err
    r = cli("diff", "e", str(ws.root / "locks" / "b.lock"))
    assert (r.code, r.err) == (2, f"envlock: error: 'e': no such lock file, and {outside} is not inside an envlock "
                                  "workspace (no envs/ folder here or above) where it would be an env name; pass "
                                  "--root DIR, or a lock path\n")
    r = cli("diff", "--root", str(outside), "e", "e")
    assert (r.code, r.err) == (2, f"envlock: error: {outside}: --root names no workspace (expected an envs/ folder "
                                  "there)\n")


def test_a_folder_where_a_spec_belongs_is_named(ws: ScratchWorkspace, cli: Cli) -> None:
    (ws.root / "envs" / "dirspec.toml").mkdir()
    r = cli("lock", "dirspec")
    assert (r.code, r.err) == (2, f"envlock: error: {ws.root}/envs/dirspec.toml: not a file; expected env "
                                  "'dirspec''s spec (a TOML file) there\n")


def test_spec_paths_that_do_not_exist_are_spec_errors_through_every_command(ws: ScratchWorkspace, cli: Cli,
                                                                            universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"',
                                 extra='[sources.k]\npath = "examples/nope"\npatches = ["patches/k/0001-x.patch"]\n'))
    for command in (["lock", "e"], ["sync", "e"], ["build", "e"], ["patch", "status", "e"]):
        r = cli(*command)
        assert r.code == 2, (command, r.err)
        assert "sources.k.path:" in r.err and "sources.k.patches[0]:" in r.err, (command, r.err)


def test_sync_says_it_relocked_and_diff_says_a_lock_is_stale(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    r = cli("sync", "e")
    assert r.code == 0 and "  locked envs/e.toml anew first (the lock was missing or stale)" in r.out.splitlines()
    init_repo(ws.root)
    commit_all(ws.root, "e at tinydep 1.0")
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.1"'))
    r = cli("diff", "locks/pylock.e.toml@HEAD", "e")  # the lock file itself has not moved yet
    assert (r.code, r.out) == (0, "no differences (1 package identical)\n")
    assert r.err == ("envlock: note: locks/pylock.e.toml is stale for envs/e.toml (packages.tinydep: changed); "
                     "run `envlock lock e` to diff what the spec asks for\n")
    r = cli("sync", "e", "--json")
    assert r.code == 0 and json.loads(r.out)["relocked"] is True
    r = cli("sync", "e")
    assert r.code == 0 and "anew" not in r.out  # current now: a no-op says nothing of locking
    # A damaged generation record is named, not hidden.
    record = Path(cli("path", "e").out.strip()).parent / "2" / "generation.json"
    record.write_text("{")
    r = cli("generations", "e")
    assert r.code == 0 and r.out.splitlines()[-1] == (
        f"  unreadable: {record} (not listed; `envlock sync e` makes a new generation)")


def test_an_unreachable_index_is_not_called_unsolvable(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"').replace(universe.pypi, "http://127.0.0.1:9/simple"))
    r = cli("lock", "e")
    assert r.code == 1
    assert r.err.startswith(f"envlock: error: {ws.root}/envs/e.toml: uv could not read an index for env 'e' "
                            "(no network, or a mirror is needed: --index NAME=URL)\n"), r.err


def test_an_env_neither_synced_nor_declared_is_named_as_a_typo(ws: ScratchWorkspace, cli: Cli) -> None:
    # Not sent to `envlock sync nosuch`, which would fail on it too.
    ws.write_spec("demo", "")
    for command in (["path"], ["verify"], ["generations"], ["rollback"], ["run", "--", "true"]):
        r = cli(command[0], "dem", *command[1:])
        assert (r.code, r.err) == (2, f"envlock: error: env 'dem': not synced in {ws.root.parent / 'home'}, and "
                                      f"{ws.root / 'envs'} declares no such env (did you mean 'demo'? envs: demo)\n")


def test_generations_of_an_env_never_synced_exits_2_as_path_does(ws: ScratchWorkspace, cli: Cli) -> None:
    from envlock.install import generations
    from envlock.store.store import Store

    home = ws.root.parent / "home"
    with generations.env_lock(Store.open(home), "nope"):  # a first sync that failed leaves the env's folder
        pass
    for command in ("generations", "path"):
        r = cli(command, "nope")
        assert (r.code, r.err) == (2, f"envlock: error: env 'nope': no current generation in {home}; "
                                      "run `envlock sync nope`\n"), command


def test_commands_that_read_the_store_do_not_make_a_mistyped_home(ws: ScratchWorkspace, cli: Cli,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = ws.root / "typo-home"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    ws.write_spec("e", "")  # declared: never synced is what they say
    for command in (["path"], ["generations"], ["verify"], ["rollback"], ["run", "--", "true"]):
        r = cli(command[0], "e", *command[1:])
        assert r.code == 2 and "no current generation" in r.err, (command, r.err)
    assert not home.exists()


def test_a_static_index_on_disk_serves_a_pinned_package(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                                        tmp_path: Path) -> None:
    # An air-gapped cluster's mirror can be a folder (a mounted share): file:// for any index.
    from kit.locks import sha256_of
    from kit.wheels import build_wheel

    wheel = build_wheel(tmp_path / "static" / "files", "tinyextra", "1.0", files={"tinyextra/__init__.py": "X = 1\n"})
    project = tmp_path / "static" / "extra" / "tinyextra"
    project.mkdir(parents=True)
    (project.parent / "index.html").write_text('<a href="tinyextra/">tinyextra</a>\n')
    link = f"../../files/{wheel.name}#sha256={sha256_of(wheel)}"
    (project / "index.html").write_text(f'<a href="{link}">{wheel.name}</a>\n')
    extra = f'[indexes.extra]\nurl = "{(tmp_path / "static" / "extra").as_uri()}"\n'
    ws.write_spec("e", spec_text(universe, 'tinyextra = { index = "extra" }', extra))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert f'url = "{wheel.as_uri()}"' in ws.lock_text("e")
    r = cli("-q", "sync", "e")
    assert r.code == 0, r.err
    python = Path(r.out.splitlines()[-1]) / "bin" / "python"
    probe = subprocess.run([python, "-c", "import tinyextra; print(tinyextra.X)"], capture_output=True, text=True)
    assert probe.stdout == "1\n", probe.stderr
    # A nightly on a mirror folder, listing no hashes (as PyTorch's index does) or listing them.
    nightly = build_wheel(tmp_path / "mirror" / "torch", "torch", "2.12.0.dev20260307+cu130",
                          tag="cp311-cp311-manylinux_2_28_x86_64")
    (tmp_path / "mirror" / "index.html").write_text('<a href="torch/">torch</a>\n')
    ws.write_spec("n", spec_text(universe, 'torch = { nightly = "2026-03-07", local = "cu130", index = "pytorch" }'))
    page = tmp_path / "mirror" / "torch" / "index.html"
    for fragment in ("", f"#sha256={sha256_of(nightly)}"):
        page.write_text(f'<a href="{nightly.name}{fragment}">{nightly.name}</a>\n')
        r = cli("lock", "n", "--index", f"pytorch={(tmp_path / 'mirror').as_uri()}")
        assert r.code == 0, (fragment, r.err)
        assert f'url = "{(tmp_path / "mirror" / "torch").as_uri()}/{nightly.name}"' in ws.lock_text("n")
        assert f'hashes = {{ sha256 = "{sha256_of(nightly)}" }}' in ws.lock_text("n")
    # A listed hash the file does not have is refused.
    page.write_text(f'<a href="{nightly.name}#sha256={"0" * 64}">{nightly.name}</a>\n')
    r = cli("lock", "n", "--index", f"pytorch={(tmp_path / 'mirror').as_uri()}")
    assert r.code == 1 and f"the index lists sha256 {'0' * 64}, the file's is {sha256_of(nightly)}" in r.err, r.err


def test_ctrl_c_while_envlock_still_starts_is_one_line_not_a_traceback() -> None:
    # A supervisor stopping a service it just started: the interrupt lands in cli's imports.
    starting = ("import builtins, sys\n"
                "real = builtins.__import__\n"
                "def interrupted(name, *args, **kwargs):\n"
                "    if name == 'argparse':\n"
                "        raise KeyboardInterrupt\n"
                "    return real(name, *args, **kwargs)\n"
                "builtins.__import__ = interrupted\n"
                "from envlock.__main__ import main\n"
                "sys.exit(main())\n")
    proc = subprocess.run([sys.executable, "-c", starting, "--help"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "envlock: interrupted\n", "")
    proc = subprocess.run([sys.executable, "-c", starting, "verify", "demo", "--json"], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (130, "envlock: interrupted\n")
    assert json.loads(proc.stdout) == {"error": {"details": [], "exit_code": 130, "kind": "KeyboardInterrupt",
                                                 "message": "interrupted"}}
    # A `--json` of the command `run` runs is the command's: envlock prints no document for it.
    for command in (["run", "demo", "--", "jq", "--json"], ["run", "demo", "jq", "--json"]):
        proc = subprocess.run([sys.executable, "-c", starting, *command], capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stderr, proc.stdout) == (130, "envlock: interrupted\n", ""), command


def test_help_is_wrapped_to_the_terminal_as_argparse_wraps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from envlock.cli.main import build_parser

    helps = set()
    for columns in ("50", "132", "", "junk", "-3"):
        monkeypatch.setenv("COLUMNS", columns)
        parser = build_parser(only="sync")
        ours = parser.format_help()
        helps.add(ours)
        with monkeypatch.context() as stock:  # the width from shutil, as argparse takes it
            stock.setattr(type(parser), "_get_formatter", argparse.ArgumentParser._get_formatter)
            assert parser.format_help() == ours, columns
    assert len(helps) == 3  # 50, 132 and the terminal's (80 off one) wrap differently


def test_the_console_script_skips_the_teardown_only_when_the_exit_has_nothing_left_to_do() -> None:
    # stdout is a pipe here, so block-buffered: what the command printed must reach the reader first.
    ends = ("import sys\nfrom envlock.__main__ import _exit_now\nprint('said')\nprint('warned', file=sys.stderr)\n"
            "{before}sys.exit(_exit_now(3) + 1)\n")  # 3: ended at once; 4: the ordinary exit
    proc = subprocess.run([sys.executable, "-c", ends.format(before="")], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "said\n", "warned\n")
    # An atexit callback, a thread still working: the ordinary exit, which runs the one and waits for the other.
    for before, last in (("import atexit\natexit.register(print, 'at exit')\n", "at exit"),
                         ("import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), "
                          "print('thread done'))).start()\n", "thread done")):
        proc = subprocess.run([sys.executable, "-c", ends.format(before=before)], capture_output=True, text=True,
                              timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (4, f"said\n{last}\n", "warned\n"), before


def test_sync_downloads_from_a_mirror_of_the_index_a_lock_names(
        ws: ScratchWorkspace, cli: Cli, universe: Universe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock made where download.pytorch.org answers, synced on a cluster that reaches only a mirror."""
    upstream = "https://download.pytorch.org/whl/nightly/cu130"  # the test's proxy refuses it
    ws.write_spec("n", spec_text(universe, TORCH + TRITON))
    assert cli("-q", "lock", "n").code == 0
    served = universe.pytorch.removesuffix("/simple")
    ws.write_spec("n", spec_text(universe, TORCH + TRITON).replace(universe.pytorch, f"{upstream}/simple"))
    lock_file = ws.root / "locks" / "pylock.n.toml"
    lock_file.write_text(ws.lock_text("n").replace(served, upstream))
    locked = ws.lock_text("n")
    assert f'index = "{upstream}/simple"' in locked and served not in locked

    # Synced on the cluster: its store holds none of the wheels the lock hashed into the lock machine's.
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home"))
    triton = next(line for line in locked.splitlines() if "/pytorch_triton-" in line).split('"')[1]
    unreachable = cli("-q", "sync", "n", "--frozen")
    assert unreachable.code == 1 and f"download failed from {triton}: cannot connect" in unreachable.err
    # ... and how to reach it: the failure names a URL, the mirror is named by the spec's index.
    hint = "no access to that host? read its index from a mirror: --index pytorch=URL or ENVLOCK_INDEX_PYTORCH=URL"
    assert unreachable.err.rstrip().endswith(hint), unreachable.err
    relock = cli("-q", "lock", "n")
    assert relock.code == 1 and relock.err.rstrip().endswith(hint), relock.err
    before = len(universe.server.downloads(triton.rsplit("/", 1)[1]))
    r = cli("sync", "n", "--frozen", "--index", f"pytorch={universe.pytorch}", "--json")
    assert r.code == 0, r.err
    assert len(universe.server.downloads(triton.rsplit("/", 1)[1])) == before + 1  # from the mirror
    assert ws.lock_text("n") == locked  # a mirror changes where bytes come from, not the lock
    assert cli("verify", "n").code == 0

    # ENVLOCK_INDEX_<NAME> does the same, also for `--lock PATH`; a fresh store must download again.
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home2"))
    monkeypatch.setenv("ENVLOCK_INDEX_PYTORCH", universe.pytorch)
    r = cli("-q", "sync", "n", "--lock", str(lock_file))
    assert r.code == 0, r.err

    # A lock made through one mirror (it records that mirror's URLs), synced through another:
    # the mirror given is where the bytes come from, not the URLs the lock names.
    monkeypatch.delenv("ENVLOCK_INDEX_PYTORCH")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home3"))
    through_mirror = tmp_path / "pylock.n.toml"
    through_mirror.write_text(locked.replace(upstream, served))
    (tmp_path / "no-mirror").mkdir()  # an index on disk that lists nothing
    absent = (tmp_path / "no-mirror").as_uri()
    r = cli("-q", "sync", "n", "--lock", str(through_mirror), "--index", f"pytorch={absent}")
    assert r.code == 1 and f"mirror {absent} lists no such file for pytorch-triton" in r.err, r.err
    # A spec that does not read, with ENVLOCK_INDEX_* set for another env: `--lock` syncs as it is.
    monkeypatch.setenv("ENVLOCK_INDEX_SOMETHING_ELSE", absent)
    spec = ws.root / "envs" / "n.toml"
    good_spec = spec.read_text()
    spec.write_text(good_spec + "[bogus]\n")
    r = cli("-q", "sync", "n", "--lock", str(through_mirror))
    assert r.code == 0, r.err
    assert ("note: ENVLOCK_INDEX_* is set, but envs/n.toml does not read (`envlock lock n --check` says why), so "
            "no mirror was applied to this sync's downloads") in r.out
    spec.write_text(good_spec)
    monkeypatch.delenv("ENVLOCK_INDEX_SOMETHING_ELSE")

    # Bad input is named before any work.
    r = cli("sync", "n", "--frozen", "--index", f"torch={universe.pytorch}")
    assert (r.code, r.err) == (2, f"envlock: error: --index torch=...: {ws.root / 'envs' / 'n.toml'} has no "
                                  "[indexes.torch]; indexes: flashinfer, pypi, pytorch\n")
    r = cli("sync", "n", "--frozen", "--offline", "--index", f"pytorch={universe.pytorch}")
    assert (r.code, r.err) == (2, "envlock: error: --index: --offline downloads nothing, so no mirror is read; "
                                  "drop one of the two\n")
    # `--lock PATH` of an env this workspace has no spec for: no index names to go by.
    r = cli("sync", "other", "--lock", str(lock_file), "--index", f"pytorch={universe.pytorch}")
    assert (r.code, r.err) == (2, "envlock: error: --index pytorch=...: mirrors are named by the spec's indexes and "
                                  "sources, and env 'other' has no spec (envs/other.toml)\n")


def test_a_lock_copied_out_of_locks_finds_its_built_wheels_in_the_wheelhouse(ws: ScratchWorkspace, cli: Cli,
                                                                             tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Its `path` wheels are written relative to locks/ (`../wheelhouse/...`), as --help promises
    # "in the store or the wheelhouse"; beside a copy elsewhere they are not.
    from kit.locks import lock_for
    from kit.wheels import build_wheel

    wheel = build_wheel(ws.root / "wheelhouse", "kern", "0.1", files={"kern/__init__.py": "K = 1\n"})
    # Beside the copy: another build of kern of the same size (one byte of a zip time differs),
    # and the only copy of a second wheel.
    (tmp_path / "wheelhouse").mkdir()
    stale = bytearray(wheel.read_bytes())
    stale[10] ^= 1
    (tmp_path / "wheelhouse" / wheel.name).write_bytes(bytes(stale))
    aux = build_wheel(tmp_path / "wheelhouse", "aux", "0.1", files={"aux/__init__.py": "A = 3\n"})
    copy = tmp_path / "saved" / "pylock.e.toml"
    copy.parent.mkdir()
    local = [(wheel, f"../wheelhouse/{wheel.name}"), (aux, f"../wheelhouse/{aux.name}")]
    copy.write_text(lock_for(None, "pypi", [], env="e", local=local).to_toml())
    r = cli("-q", "sync", "e", "--lock", str(copy))
    assert r.code == 0, r.err
    python = Path(r.out.splitlines()[-1]) / "bin" / "python"
    probe = subprocess.run([python, "-c", "import aux, kern; print(kern.K, aux.A)"], capture_output=True, text=True)
    assert probe.stdout == "1 3\n", probe.stderr
    # The locked bytes nowhere, another build in the workspace: that one is named, with what it is.
    (ws.root / "wheelhouse" / wheel.name).write_bytes(bytes(stale))
    (tmp_path / "wheelhouse" / wheel.name).unlink()
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home2"))
    r = cli("-q", "sync", "e", "--lock", str(copy))
    assert r.code == 1 and f"sha256 mismatch for local file {ws.root / 'wheelhouse' / wheel.name}" in r.err, r.err


def test_verify_checks_a_known_good_env_against_the_lock_it_was_synced_from(ws: ScratchWorkspace, cli: Cli,
                                                                            universe: Universe) -> None:
    """Back to a known-good lock after a regression: `verify --lock` passes for it, and the plain
    verify's "not this lock" says how to check it; with no lock at all, verify says so."""
    init_repo(ws.root)
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "sync", "e").code == 0
    commit_all(ws.root, "known good")
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.1"'))
    assert cli("-q", "sync", "e").code == 0
    assert cli("-q", "sync", "e", "--lock", "locks/pylock.e.toml@HEAD").code == 0

    plain = cli("verify", "e")
    assert plain.code == 1
    assert plain.out.startswith("e: NOT THIS LOCK: intact (sha256:")
    assert plain.out.rstrip().endswith("`envlock sync e` makes the env this lock's, `envlock verify e --lock "
                                       "PATH[@REV]` checks it against the lock it was built from")
    good = cli("verify", "e", "--lock", "locks/pylock.e.toml@HEAD")
    assert (good.code, good.out.startswith("e: ok (sha256:")) == (0, True), good.out + good.err
    # Checked against a named lock it is not: the way to make it that lock's is to sync that lock.
    other = cli("verify", "e", "--lock", "locks/pylock.e.toml")
    assert other.code == 1 and other.out.rstrip().endswith(
        "`envlock sync e --lock locks/pylock.e.toml` makes the env this lock's"), other.out
    ws.write_spec("f", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "lock", "f").code == 0
    theirs = cli("verify", "e", "--lock", "locks/pylock.f.toml")
    assert (theirs.code, theirs.err) == (2, "envlock: error: locks/pylock.f.toml: the lock of env 'f', not 'e'; "
                                            "expected `envlock verify f --lock locks/pylock.f.toml`\n")
    doc = json.loads(cli("verify", "e", "--lock", "locks/pylock.e.toml@HEAD", "--json").out)
    assert (doc["ok"], doc["other_lock"], doc["note"]) == (True, False, "")
    assert cli("verify", "e", "--lock", "locks/pylock.e.toml@nope").code == 2
    # Generation 2's venv (tinydep 1.1) removed from the store: listed as such, as it cannot be rolled back to.
    shutil.rmtree((Path(cli("path", "e").out.strip()).parent / "2" / "venv").resolve())
    rows = cli("generations", "e").out.splitlines()
    assert [row.endswith("(venv gone from the store)") for row in rows[1:]] == [False, True, False]
    listed = json.loads(cli("generations", "e", "--json").out)["generations"]
    assert [g["venv_present"] for g in listed] == [True, False, True]
    gone = cli("rollback", "e", "--to", "2")
    copy = Path(cli("path", "e").out.strip()).parent / "2" / "pylock.toml"
    assert gone.code != 0 and f"`envlock sync e --lock {copy}`" in gone.err, gone.err
    before = copy.read_bytes()
    rebuilt = cli("-q", "sync", "e", "--lock", str(copy))  # what that message and `path` say to run
    assert rebuilt.code == 0, rebuilt.err
    assert copy.read_bytes() == before  # a store entry
    assert cli("verify", "e", "--lock", str(copy)).code == 0
    # Nor is a generation's copy written when it has no venv digest to keep (a frozen sync's).
    bare = ws.root.parent / "bare.toml"  # generation 1's lock (tinydep 1.0, not current), with no digest
    first = (copy.parent.parent / "1" / "pylock.toml").read_text()
    bare.write_text("".join(line for line in first.splitlines(keepends=True)
                            if not line.startswith(("venv-digest", "venv-python", "venv-install-digest"))))
    assert cli("-q", "sync", "e", "--frozen", "--lock", str(bare)).code == 0
    # Checked against the generation's own digest, and said so (it was said only with no lock file).
    unrecorded = cli("verify", "e", "--lock", str(bare))
    assert unrecorded.code == 0
    assert unrecorded.out.rstrip().endswith(
        "; compared with this generation's own digest: the lock records no venv digest "
        f"(`envlock sync e --lock {bare}` records it; a --frozen sync does not)"), unrecorded.out
    assert cli("-q", "sync", "e", "--lock", str(bare)).code == 0  # ... as it says
    assert "venv-digest = " in bare.read_text()
    assert json.loads(cli("verify", "e", "--lock", str(bare), "--json").out)["note"] == ""
    current = Path(cli("path", "e").out.strip())
    frozen_copy = current.parent / os.readlink(current).split("/")[0] / "pylock.toml"  # current -> N/venv
    assert "venv-digest" not in frozen_copy.read_text()
    assert cli("-q", "sync", "e", "--lock", str(frozen_copy)).code == 0
    assert "venv-digest" not in frozen_copy.read_text()
    assert cli("-q", "sync", "e", "--lock", "locks/pylock.e.toml@HEAD").code == 0

    (ws.root / "locks" / "pylock.e.toml").unlink()
    alone = cli("verify", "e")
    assert alone.code == 0
    assert alone.out.rstrip().endswith("; no lock at locks/pylock.e.toml to compare with: checked against the "
                                       "current generation's own digest (--lock PATH[@REV] names a lock)")


def read_lock_text(text: str) -> Lock:
    return Lock.from_toml(text, Path("pylock.toml"))


def test_a_lock_edited_by_hand_after_its_venv_digest_was_recorded(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    """The recorded venv digest names the packages it was taken for: after a hand edit of the
    packages it is not held against the new venv (which would fail every sync alike)."""
    ws.write_spec("e", spec_text(universe, 'otherdep = "==2.0"'))
    assert cli("-q", "sync", "e").code == 0
    text = ws.lock_text("e")
    recorded = read_lock(ws.root / "locks" / "pylock.e.toml")
    assert f'venv-install-digest = "{recorded.install_digest()}"' in text
    old_url = next(w.url for p in recorded.packages if p.name == "tinydep" for w in p.wheels)
    assert old_url is not None and old_url.endswith("/tinydep-1.1-py3-none-any.whl")
    served = universe.server.indexes["pypi"].files["tinydep-1.0-py3-none-any.whl"]
    edited = text.replace('version = "1.1"', 'version = "1.0"').replace(old_url, old_url.replace("1.1", "1.0"))
    old_sha = next(w.sha256 for p in recorded.packages if p.name == "tinydep" for w in p.wheels)
    edited = edited.replace(old_sha, sha256_of(served)).replace(
        next(f"size = {w.size}" for p in recorded.packages if p.name == "tinydep" for w in p.wheels),
        f"size = {served.stat().st_size}")
    now = read_lock_text(edited).install_digest()
    # venv-digest names the packages it was taken for: without them it is no lock envlock wrote.
    (ws.root / "locks" / "pylock.e.toml").write_text(
        edited.replace(f'venv-install-digest = "{recorded.install_digest()}"\n', ""))
    unnamed = cli("sync", "e", "--lock", "locks/pylock.e.toml")
    assert (unnamed.code, unnamed.err) == (2, (
        f"envlock: error: {ws.root}/locks/pylock.e.toml: tool.envlock.venv-install-digest: missing; expected the "
        "install digest of the packages venv-digest was taken for, beside it\n")), unnamed.err
    (ws.root / "locks" / "pylock.e.toml").write_text(edited)

    check = cli("lock", "e", "--check")
    assert check.code == 1
    assert (f"  tool.envlock.venv-digest: recorded for other packages than the lock's (install digest "
            f"{recorded.install_digest()}, now {now}): the packages were edited by hand since"
            ) in check.out.splitlines()
    frozen = cli("sync", "e", "--frozen")
    assert frozen.code == 0, frozen.err
    assert ("edited by hand since), so it was not compared; the lock keeps it (`envlock sync e --lock "
            f"{ws.root}/locks/pylock.e.toml` records this venv's; `envlock lock e` locks the spec anew)") in frozen.out
    # Back on the generation of before the edit, verify's next step keeps the edit (a plain
    # `sync e` would lock the spec anew over it).
    assert cli("-q", "rollback", "e", "--to", "1").code == 0
    v = cli("verify", "e")
    assert v.code == 1 and "`envlock sync e --lock locks/pylock.e.toml` makes the env this lock's" in v.out, v.out
    synced = cli("sync", "e", "--lock", "locks/pylock.e.toml")  # the edited lock as it is
    assert synced.code == 0, synced.err
    assert "edited by hand since), so it was not compared; this venv's digest is recorded in its place" in synced.out
    assert f'venv-install-digest = "{now}"' in ws.lock_text("e")
    again = cli("sync", "e", "--lock", "locks/pylock.e.toml")
    assert again.code == 0 and "up to date" in again.out, again.out
    assert cli("verify", "e").code == 0
    # A plain sync holds the lock to the spec: stale (edited), it is locked anew, which the sync says.
    (ws.root / "locks" / "pylock.e.toml").write_text(edited)
    relocked = cli("sync", "e")
    assert relocked.code == 0 and "  locked envs/e.toml anew first (the lock was missing or stale)" in relocked.out
    assert read_lock(ws.root / "locks" / "pylock.e.toml").install_digest() == recorded.install_digest()


def test_a_frozen_sync_says_when_the_spec_asks_for_more_than_the_lock(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "sync", "e").code == 0
    quiet = cli("sync", "e", "--frozen")
    assert quiet.code == 0 and "up to date" in quiet.out and "note" not in quiet.out
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"\notherdep = "==2.0"'))
    note = ("note: locks/pylock.e.toml is stale for envs/e.toml (packages.otherdep: added to the spec): --frozen "
            "synced the lock as it is; `envlock lock e` locks the spec anew")
    for _ in range(2):  # said every time, not only by the sync that first saw the spec changed
        r = cli("sync", "e", "--frozen")
        assert r.code == 0 and "up to date" in r.out and note in r.out, r.out
    doc = json.loads(cli("sync", "e", "--frozen", "--json").out)
    assert doc["noop"] is True and doc["note"] == note.removeprefix("note: ")
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))  # back as the lock was made
    for _ in range(2):
        r = cli("sync", "e", "--frozen")
        assert r.code == 0 and "note" not in r.out, r.out


def test_an_index_on_disk_that_is_missing_and_a_misspelt_mirror_variable_are_named(
        ws: ScratchWorkspace, cli: Cli, universe: Universe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: uv's "not found in the package registry" for every package (exit 1), and a
    # misspelt ENVLOCK_INDEX_* read as nothing at all.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    gone = (tmp_path / "nonexist" / "simple").as_uri()
    r = cli("lock", "e", "--index", f"pypi={gone}")
    assert (r.code, r.err) == (2, f"envlock: error: --index pypi={gone!r}: no such folder "
                                  f"({tmp_path}/nonexist/simple); expected an index on disk (a folder per project)\n")
    monkeypatch.setenv("ENVLOCK_INDEX_PYPI", gone)
    r = cli("sync", "e")
    assert r.code == 2 and r.err.startswith(f"envlock: error: ENVLOCK_INDEX_PYPI={gone!r}: no such folder"), r.err
    monkeypatch.delenv("ENVLOCK_INDEX_PYPI")
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"').replace(universe.flashinfer, gone))
    r = cli("lock", "e")
    assert (r.code, r.err) == (2, f"envlock: error: {ws.root}/envs/e.toml: indexes.flashinfer.url: {gone!r}: no such "
                                  f"folder ({tmp_path}/nonexist/simple); expected an index on disk (a folder per "
                                  "project)\n")

    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    ws.write_spec("other", spec_text(universe, 'tinydep = "==1.0"').replace("[indexes.flashinfer]",
                                                                           "[indexes.internal]"))
    monkeypatch.setenv("ENVLOCK_INDEX_PYPII", gone)  # a typo
    monkeypatch.setenv("ENVLOCK_INDEX_INTERNAL", universe.flashinfer)  # another env's index: no typo
    r = cli("lock", "e")
    assert r.code == 0, r.err
    note = ("note: ENVLOCK_INDEX_PYPII set, but no env spec here has an index of that name, so it was not used "
            "(this env's: ENVLOCK_INDEX_FLASHINFER, ENVLOCK_INDEX_PYPI, ENVLOCK_INDEX_PYTORCH)")
    assert r.out.splitlines()[-1] == f"  {note}"
    r = cli("sync", "e")
    assert r.code == 0 and f"  {note}" in r.out.splitlines(), r.out
    assert json.loads(cli("lock", "e", "--json").out)["note"] == note.removeprefix("note: ")
    # Most needed when the index it was meant for cannot be read: named under the error.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"').replace(universe.pypi, "http://127.0.0.1:9/simple"))
    r = cli("lock", "e")
    assert r.code == 1 and r.err.rstrip().endswith(f"  {note}"), r.err
    ws.write_spec("e", spec_text(universe, TORCH).replace(universe.pytorch, "http://127.0.0.1:9/simple"))
    r = cli("lock", "e")  # the nightly's index page cannot be read
    assert r.code == 1 and r.err.rstrip().endswith(f"  {note}"), r.err


def test_a_file_where_a_folder_is_expected_is_named_so(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: "File exists" / "Not a directory", which say nothing of what to do.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    shutil.rmtree(ws.root / "locks")
    (ws.root / "locks").write_text("")
    r = cli("lock", "e")
    assert (r.code, r.err) == (1, f"envlock: error: {ws.root}/locks: a file is there, expected a folder (rerun with "
                                  "--debug for where)\n")
    (ws.root / "locks").unlink()
    (tmp_path / "f").write_text("x")
    for home, what in ((tmp_path / "f", "a file is there, expected a folder"),
                       (tmp_path / "f" / "sub", "a part of this path is a file, expected folders")):
        monkeypatch.setenv("ENVLOCK_HOME", str(home))
        r = cli("sync", "e")
        assert (r.code, r.err) == (1, f"envlock: error: {home}: cannot use as store: {what}\n"), r.err


def test_run_takes_its_options_between_env_and_the_dashes(ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "sync", "e").code == 0

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "envlock", "run", "e", *args], cwd=ws.root, capture_output=True,
                              text=True, timeout=60)

    for options in (["-q"], ["--debug"], ["-q", "--debug"]):
        proc = run(*options, "--", "python", "-c", "import tinydep, sys; print(tinydep.VERSION, sys.argv[1:])", "--",
                   "-x")
        assert (proc.returncode, proc.stdout) == (0, "1.0 ['--', '-x']\n"), proc.stderr  # a later -- is the command's
        # A SIGTERM its parent ignores stays ignored for the command (as an ignored signal does across exec).
        ignoring = subprocess.run([sys.executable, "-m", "envlock", "run", "e", *options, "--", "python", "-c",
                                   "import signal; print(signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)"],
                                  cwd=ws.root, capture_output=True, text=True, timeout=60,
                                  preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
        assert ignoring.stdout == "True\n", ignoring.stderr
        # A command that is not there exits 127 as in a shell, --debug or not (it was 1 with --debug).
        missing = run(*options, "--", "no-such-command-here")
        assert missing.returncode == 127 and "no-such-command-here: command not found" in missing.stderr, (
            options, missing.stderr)
    proc = run("--json", "--", "true")
    assert (proc.returncode, proc.stderr) == (2, "envlock: error: envlock run e --json -- ...: '--json' is no option "
                                                 "of run here (-q, --debug; --root goes before ENV); the command goes "
                                                 "after `--`\n")
    proc = run("--root", str(ws.root), "--", "true")
    assert (proc.returncode, proc.stderr) == (2, "envlock: error: envlock run e --root ...: --root goes before ENV "
                                                 "(envlock --root DIR run ENV -- CMD...), where the workspace is "
                                                 "looked for\n")
    # A command's own --root (and its own `--` later on) is the command's, not an envlock option.
    proc = run("python", "-c", "import sys; print(sys.argv[1:])", "--root=/x", "--", "y")
    assert (proc.returncode, proc.stdout) == (0, "['--root=/x', '--', 'y']\n"), proc.stderr
    proc = run("-q", "python", "-c", "pass")  # an option, but no `--`: the command would be "-q"
    assert (proc.returncode, proc.stderr) == (2, "envlock: error: envlock run e -q ...: '-q' is not a command; options "
                                                 "go before `--` and the command after it: envlock run ENV [-q] -- "
                                                 "CMD...\n")


def test_an_unknown_option_is_shown_with_its_commands_usage(ws: ScratchWorkspace, cli: Cli,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    for command, usage in ((["sync", "e", "--bogus"], "usage: envlock sync "),
                           (["patch", "status", "e", "--bogus"], "usage: envlock patch status ")):
        with pytest.raises(SystemExit) as info:
            cli(*command)
        err = capsys.readouterr().err
        assert info.value.code == 2
        assert err.startswith(usage) and err.endswith("envlock: error: unrecognized arguments: --bogus\n"), err


@pytest.mark.parametrize("hashes", [True, False], ids=["index with hashes", "hash-less index (PyTorch's)"])
def test_a_private_index_named_with_credentials_locks_and_syncs(ws: ScratchWorkspace, cli: Cli, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, hashes: bool) -> None:
    """`https://user:token@host/simple` in the spec, no ~/.netrc: the lock keeps no credentials, and
    the sync sends the index's again (it answered 401 to the lock's bare URLs); so does the lock
    hashing a wheel a hash-less index serves (a private nightly index)."""
    import base64

    from kit.index import IndexServer
    from kit.wheels import build_wheel

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no netrc here
    server = IndexServer(tmp_path / "served").start()
    try:
        server.add_index("priv", hashes=hashes)
        server.add("priv", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
        # A nightly of a hash-less index is hashed by envlock itself, from the file URL its page lists.
        server.add("priv", build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260310+cpu"))
        server.required_auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
        url = server.url("priv").replace("http://", "http://alice:s3cret@")
        ws.write_spec("e", f'[env]\npython = "{sys.version_info.major}.{sys.version_info.minor}"\n'
                           f'[indexes.priv]\nurl = "{url}"\ndefault = true\n[packages]\ntinydep = "==1.0"\n'
                           + ('' if hashes else 'torch = { nightly = "2026-03-10", local = "cpu", index = "priv" }\n'))
        locked = cli("-q", "lock", "e")
        assert locked.code == 0, locked.err
        assert "s3cret" not in ws.lock_text("e")
        synced = cli("-q", "sync", "e")
        assert synced.code == 0, synced.err
        assert server.auth_seen("tinydep-1.0-py3-none-any.whl") == server.required_auth
        if not hashes:
            assert server.auth_seen("torch-2.12.0.dev20260310+cpu-py3-none-any.whl") == server.required_auth
        # A typo in such a URL is named without its password (the error reaches CI logs).
        typo = cli("lock", "e", "--index", "priv=http://alice:s3cret@mirror:4433O/simple")
        assert typo.code == 2 and "s3cret" not in typo.err and "http://mirror:4433O/simple" in typo.err, typo.err
        for given in ("priv=http//alice:s3cret@mirror/simple", "https://alice:s3=cret@mirror.example/simple"):
            typo = cli("lock", "e", "--index", given)  # no URL at all; NAME= left out (an "=" in the password)
            assert typo.code == 2 and "s3" not in typo.err.replace("s3cret", "").replace("=cret", "") and (
                "s3cret" not in typo.err and "cret@" not in typo.err), typo.err
        # `sync --lock` reads the spec for its index credentials too (it did only with a mirror variable set).
        monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home2"))
        by_path = cli("-q", "sync", "e", "--lock", "locks/pylock.e.toml")
        assert by_path.code == 0, by_path.err
        # A git source's token in a failure (git's own output included) is cut too.
        ws.write_spec("g", f'[env]\npython = "{sys.version_info.major}.{sys.version_info.minor}"\n'
                           f'[indexes.priv]\nurl = "{url}"\ndefault = true\n[sources.s]\n'
                           'git = "http://alice:t0ken@127.0.0.1:9/s.git"\nrev = "main"\n')
        failed = cli("lock", "g")
        assert failed.code == 1 and "t0ken" not in failed.err and "http://127.0.0.1:9/s.git" in failed.err, failed.err
        debug = cli("--debug", "lock", "g")  # the traceback too
        assert debug.code == 1 and "Traceback" in debug.err and "t0ken" not in debug.err, debug.err
    finally:
        server.stop()


def test_a_lock_names_a_python_version_and_sources_stay_in_the_workspace(ws: ScratchWorkspace, cli: Cli,
                                                                         universe: Universe) -> None:
    # A sync hands the lock's python to `uv python find`: a path there ran that program.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "lock", "e").code == 0
    text = ws.lock_text("e")
    python = f'python = "{sys.version_info.major}.{sys.version_info.minor}"'
    assert python in text
    lock_file = ws.root / "locks" / "pylock.e.toml"
    lock_file.write_text(text.replace(python, 'python = "tools/python3.11"'))
    for argv in (["sync", "e"], ["lock", "e", "--check"], ["sync", "e", "--frozen"]):
        r = cli(*argv)
        assert (r.code, r.err) == (2, f"envlock: error: {lock_file}: tool.envlock.python: found "
                                      "'tools/python3.11'; expected a Python version like \"3.12\"\n"), (argv, r.err)
    # Another version, hand-edited: stale for the spec (its digest covers env.python).
    lock_file.write_text(text.replace(python, 'python = "3.99"'))
    check = cli("lock", "e", "--check")
    assert check.code == 1 and "tool.envlock.python: '3.99', but env.python is" in check.out, check.out
    # A source name is a name, not a path: patches/NAME/ is written from it.
    ws.write_spec("f", spec_text(universe, 'tinydep = "==1.0"') + '[sources."../../escaped"]\npath = "src"\n')
    bad = cli("lock", "f")
    assert bad.code == 2 and "sources.\"../../escaped\": expected a source name of letters" in bad.err, bad.err


def test_a_lock_read_from_a_pipe_syncs_and_is_not_written(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # `envlock sync ENV --lock <(git show REV:locks/pylock.ENV.toml)`: the shell passes /dev/fd/N.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "lock", "e").code == 0
    text = ws.lock_text("e")
    read, write = os.pipe()
    try:
        os.write(write, text.encode())
        os.close(write)
        r = cli("-q", "sync", "e", "--lock", f"/dev/fd/{read}")
    finally:
        os.close(read)
    assert r.code == 0, r.err
    assert ws.lock_text("e") == text  # the workspace's lock is not the one synced: not written
    # A typo'd option with a URL (a pip habit) is echoed by argparse: without its password.
    with pytest.raises(SystemExit):
        cli("lock", "e", "--index-url", "https://bob:tok3n@host/simple")
    err = capsys.readouterr().err
    assert "tok3n" not in err and "https://host/simple" in err, err


def test_a_lock_linked_to_an_endless_file_is_refused_not_read_forever(
        ws: ScratchWorkspace, cli: Cli, universe: Universe) -> None:
    # The fast no-op hashed it forever; lock, build and patch status read it until memory ran out.
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"'))
    assert cli("-q", "sync", "e").code == 0  # a no-op stamp now names the lock's sha256
    lock_file = ws.root / "locks" / "pylock.e.toml"
    lock_file.unlink()
    lock_file.symlink_to("/dev/zero")
    for command in (["sync", "e"], ["lock", "e"], ["sync", "e", "--frozen"]):
        proc = subprocess.run([sys.executable, "-m", "envlock", *command], cwd=ws.root, capture_output=True,
                              text=True, timeout=120)
        assert (proc.returncode, proc.stderr) == (2, f"envlock: error: {lock_file}: larger than 64 MiB; not a lock "
                                                     "file\n"), (command, proc.stderr)


def _locked_e(ws: Ws, cli: Callable[..., CliResult], universe: Universe) -> Path:
    """Env e (otherdep, which requires tinydep) locked: its lock file."""
    ws.write_spec("e", spec_text(universe, 'otherdep = "==2.0"'))
    assert cli("-q", "lock", "e").code == 0
    return ws.root / "locks" / "pylock.e.toml"


def test_a_package_no_spec_key_vouches_for_is_drift_and_a_frozen_sync_refuses_it(
        ws: Ws, cli: Callable[..., CliResult], universe: Universe, tmp_path: Path) -> None:
    # As found: a hand-edited lock adds a [[packages]] entry, a file:// URL outside the workspace with its
    # right sha256, no index, required by nothing: `lock --check` called it current, `sync` installed
    # it and `verify` said ok.
    from kit.wheels import build_wheel

    path = _locked_e(ws, cli, universe)
    made = path.read_text()
    assert cli("lock", "e", "--check").code == 0  # tinydep: required through the recorded graph
    evil = build_wheel(tmp_path / "elsewhere", "evil", "6.6")
    entry = (f'[[packages]]\nname = "evil"\nversion = "6.6"\nwheels = [\n    {{ url = "{evil.as_uri()}", '
             f'size = {evil.stat().st_size}, hashes = {{ sha256 = "{sha256_of(evil)}" }} }},\n]\n\n')
    path.write_text(made.replace("[[packages]]", entry + "[[packages]]", 1))

    check = cli("lock", "e", "--check")
    pypi = universe.pypi
    assert (check.code, check.out.splitlines()) == (1, [
        "locks/pylock.e.toml is stale:",
        "  [[packages]] evil 6.6: required by nothing the spec asks for (not in [packages], nor required through "
        "the lock's tool.envlock.requires by what is) (edited by hand?)",
        f"  [[packages]] evil 6.6: no index, and the spec builds no evil ({evil.as_uri()}); expected a wheel of "
        f"index 'pypi' ({pypi}) (edited by hand?)",
        "run `envlock lock e` to update it"])

    frozen = cli("sync", "e", "--frozen")
    assert frozen.code == 2
    assert frozen.err.splitlines()[0] == ("envlock: error: locks/pylock.e.toml: --frozen, but the spec does not vouch "
                                          "for what it locks; nothing was installed. `envlock lock e` locks the "
                                          "spec anew")
    assert "evil 6.6: required by nothing" in frozen.err
    assert not (Path(os.environ["ENVLOCK_HOME"]) / "v1" / "envs" / "e").exists()

    synced = cli("sync", "e")
    assert synced.code == 0, synced.err
    assert "evil" not in path.read_text() and path.read_text().startswith(made.split("[tool.envlock]")[0])
    site = Path(synced.out.splitlines()[-1]) / "lib" / "python3.11" / "site-packages"
    assert not list(site.glob("evil*")) and list(site.glob("otherdep*"))
    assert cli("verify", "e").code == 0


def test_a_stale_lock_vouches_for_nothing_itself_and_a_frozen_sync_refuses_an_index_move(
        ws: Ws, cli: Callable[..., CliResult], universe: Universe) -> None:
    # As found: a lock from a pull request zeroes its spec-digest, so it reads as made for another spec, and
    # moves a package to another of the spec's indexes: a frozen sync took any of the spec's indexes for a
    # stale lock's packages, and installed it with only a note.
    path = _locked_e(ws, cli, universe)
    made = path.read_text()
    digest = re.search(r'^spec-digest = "(sha256:[0-9a-f]{64})"$', made, re.M)
    assert digest is not None
    edited = made.replace(digest[1], "sha256:" + "0" * 64).replace(
        f'index = "{universe.pypi}"', f'index = "{universe.flashinfer}"', 1)
    assert edited.count("0" * 64) == 1 and f'index = "{universe.flashinfer}"' in edited
    path.write_text(edited)

    frozen = cli("sync", "e", "--frozen")
    assert frozen.code == 2, frozen.out
    assert frozen.err.splitlines()[0] == ("envlock: error: locks/pylock.e.toml: --frozen, but the spec does not vouch "
                                          "for what it locks; nothing was installed. `envlock lock e` locks the "
                                          "spec anew")
    moved = next(line for line in frozen.err.splitlines() if f"index {universe.flashinfer}" in line)
    assert moved.strip().endswith(f"but the spec takes {moved.split()[1]} from index 'pypi' ({universe.pypi}) "
                                  "(the spec changed since, or edited by hand?)"), moved
    assert not (Path(os.environ["ENVLOCK_HOME"]) / "v1" / "envs" / "e").exists()


@pytest.mark.parametrize(("edit", "reason"), [
    # Moved to another index (a mirror nobody gave): "index X, but the spec takes ... from".
    (lambda text, u: text.replace(f'index = "{u.pypi}"', 'index = "https://elsewhere.example/simple"', 1),
     "[[packages]] otherdep 2.0: index https://elsewhere.example/simple, but the spec takes otherdep from index "
     "'pypi' ({pypi}) (edited by hand?)"),
    # A remote index's package pointed at a file on this machine.
    (lambda text, u: text.replace(f'url = "{u.server.url("pypi").rsplit("/simple", 1)[0]}', 'url = "file:///srv', 1),
     "[[packages]] otherdep 2.0: file:///srv/files/otherdep-2.0-py3-none-any.whl is a file on this machine, not a "
     "file of index {pypi} (edited by hand?)"),
    # Its graph taken out: every package but the spec's own is unaccounted for.
    (lambda text, u: text.replace("\n[tool.envlock.requires]\n", "\n[tool.envlock.old]\n"),
     "tool.envlock.requires: missing (a lock written before envlock recorded what each package requires), so its "
     "packages cannot be held to the spec's: lock again"),
])
def test_each_way_a_lock_leaves_the_spec_is_named(ws: Ws, cli: Callable[..., CliResult], universe: Universe,
                                                  edit: Callable[[str, Universe], str], reason: str) -> None:
    path = _locked_e(ws, cli, universe)
    edited = edit(path.read_text(), universe)
    assert edited != path.read_text()
    path.write_text(edited)
    check = cli("lock", "e", "--check")
    assert check.code == 1
    assert f"  {reason.format(pypi=universe.pypi)}" in check.out.splitlines(), check.out


def test_a_lock_without_its_graph_is_stale_once_and_a_frozen_sync_says_what_it_held(
        ws: Ws, cli: Callable[..., CliResult], universe: Universe) -> None:
    # A lock written before envlock recorded [tool.envlock.requires]: `lock --check` calls it stale
    # (one reason), a frozen sync installs it held to the spec's indexes only and says so, a sync relocks.
    path = _locked_e(ws, cli, universe)
    made = path.read_text()
    old = made.replace('\n[tool.envlock.requires]\n"otherdep" = ["tinydep"]\n', "")
    assert old != made
    path.write_text(old)
    check = cli("lock", "e", "--check")
    assert (check.code, check.out.splitlines()[1:-1]) == (1, [
        "  tool.envlock.requires: missing (a lock written before envlock recorded what each package requires), so "
        "its packages cannot be held to the spec's: lock again"])
    frozen = cli("sync", "e", "--frozen")
    assert frozen.code == 0, frozen.err
    assert ("note: locks/pylock.e.toml records no dependency graph (written before envlock recorded "
            "[tool.envlock.requires]): --frozen held its packages to the spec's indexes and builds only; "
            "`envlock lock e` records it") in frozen.out
    assert path.read_text() == old  # frozen: never written
    assert cli("sync", "e").code == 0
    assert path.read_text().split("\n[tool.envlock]")[0] == made.split("\n[tool.envlock]")[0]
    assert cli("lock", "e", "--check").code == 0
