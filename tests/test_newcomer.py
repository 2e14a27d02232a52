"""What a newcomer hit trying each doc on a fresh clone (issue 28), each fixed and held here.

The counts of gc, of a sync from a cache and of a build offline are held in ``test_gc``,
``test_caches`` and ``test_export``; the docs themselves in ``test_docs``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
from pathlib import Path

import pytest

from kit.inbackend import write_project
from kit.index import IndexServer
from kit.universe import Universe
from kit.wheels import build_wheel
from kit.workspaces import Cli
from kit.workspaces import ScratchWorkspace as Workspace


def _spec(index: str, extra: str = "") -> str:
    return f'[env]\npython = "3.11"\n\n[indexes.pypi]\nurl = "{index}"\ndefault = true\n\n[packages]\n' \
           f'tinydep = "==1.0"\n{extra}'


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- item 2: import's next step ------------------------------------------------


def test_imports_next_step_runs_outside_a_workspace_and_never_writes_the_pin(
        ws: Workspace, cli: Cli, universe: Universe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", _spec(universe.pypi))
    assert cli("lock", "e").code == 0  # locked, never synced: no venv digest recorded yet
    bundle = tmp_path / "e.tar"
    assert cli("export", "e", "--to", str(bundle)).code == 0
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "other-machine"))
    elsewhere = tmp_path / "nowhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no envs/ here or above: another machine, no checkout
    r = cli("import", str(bundle))
    assert r.code == 0, r.err
    step = r.out.splitlines()[-1]
    assert step.startswith("sync it with `envlock sync e --lock ") and step.endswith(" --offline`")
    argv = shlex.split(step.removeprefix("sync it with `").removesuffix("`"))[1:]
    pin = Path(argv[argv.index("--lock") + 1])
    before = _sha(pin)
    assert pin.name == f"{before}.toml"  # a pin is named by its bytes' sha256
    r = cli(*argv)
    assert r.code == 0, r.err
    assert "recorded the venv digest" not in r.out
    assert _sha(pin) == before
    assert cli("verify", "e", "--lock", str(pin)).code == 0  # verify of a --lock: no workspace either
    # Inside a workspace, the pin (a store entry) is not written either.
    monkeypatch.chdir(ws.root)
    r = cli("sync", "e", "--lock", str(pin), "--offline")
    assert r.code == 0, r.err
    assert _sha(pin) == before
    assert json.loads(cli("pins", "--json").out)["pins"][0]["sha256"] == before
    # Without --lock, a sync still needs a workspace, and says so.
    monkeypatch.chdir(elsewhere)
    r = cli("sync", "e")
    assert (r.code, r.err) == (2, f"envlock: error: {elsewhere}: not inside an envlock workspace (no envs/ folder "
                                  "here or above); pass --root DIR\n")


# -- item 8: counts that add up ------------------------------------------------


def test_lock_counts_a_package_whose_build_has_not_run(ws: Workspace, cli: Cli, universe: Universe) -> None:
    write_project(ws.root / "kernel", "kern", "0.1.0", {"kern/__init__.py": "X = 1\n"})
    ws.write_spec("e", _spec(universe.pypi, 'kern = { build = "kern" }\n\n[sources.kern]\npath = "kernel"\n\n'
                                            '[builds.kern]\nsource = "kern"\n'))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "wrote locks/pylock.e.toml (2 packages)"  # tinydep, and kern to build
    assert "  kern: not built for this lock yet; `envlock build e` builds it (`envlock sync e` too)" in r.out
    assert cli("build", "e").code == 0
    r = cli("lock", "e", "--json")
    assert (json.loads(r.out)["packages"], json.loads(r.out)["unbuilt"]) == (2, [])


def test_lock_names_each_version_it_moves_with_the_spec_unchanged(
        ws: Workspace, cli: Cli, tmp_path: Path) -> None:
    server = IndexServer(tmp_path / "served")
    server.add("pypi", build_wheel(tmp_path / "w", "tinydep", "1.0"),
               build_wheel(tmp_path / "w", "otherdep", "2.0", requires=["idnaish>=3"]),
               build_wheel(tmp_path / "w", "idnaish", "3.20"))
    server.start()
    try:
        ws.write_spec("e", _spec(server.url("pypi"), 'otherdep = "==2.0"\n'))
        r = cli("lock", "e")
        assert (r.code, r.out.splitlines()) == (0, ["wrote locks/pylock.e.toml (3 packages)"])
        server.add("pypi", build_wheel(tmp_path / "w", "idnaish", "3.21"))  # a release on the index; the spec as it was
        r = cli("lock", "e")
        assert (r.code, r.out.splitlines()) == (0, ["wrote locks/pylock.e.toml (3 packages)", "  idnaish 3.20 -> 3.21"])
        r = cli("lock", "e", "--json")
        assert (json.loads(r.out)["changed"], json.loads(r.out)["moved"]) == (False, [])
        server.add("pypi", build_wheel(tmp_path / "w", "otherdep", "2.1"))
        ws.write_spec("e", _spec(server.url("pypi")))  # otherdep dropped: it and what only it pulled in go
        r = cli("lock", "e", "--json")
        assert json.loads(r.out)["moved"] == [{"package": "idnaish", "old": "3.21", "new": None},
                                              {"package": "otherdep", "old": "2.0", "new": None}]
        assert cli("lock", "e").out.splitlines()[1:] == []
    finally:
        server.stop()


def test_lock_check_says_a_misspelt_index_variable_as_lock_does(
        ws: Workspace, cli: Cli, universe: Universe, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", _spec(universe.pypi))
    assert cli("lock", "e").code == 0
    monkeypatch.setenv("ENVLOCK_INDEX_PYPII", universe.pypi)
    note = ("envlock: note: ENVLOCK_INDEX_PYPII set, but no env spec here has an index of that name, so it was not "
            "used (this env's: ENVLOCK_INDEX_PYPI)")
    assert note.removeprefix("envlock: note: ") in cli("lock", "e").out
    r = cli("lock", "e", "--check")
    assert (r.code, r.out, r.err) == (0, "locks/pylock.e.toml is current for envs/e.toml\n", note + "\n")
    r = cli("lock", "e", "--check", "--offline")
    assert r.code == 0 and r.err.splitlines()[0] == note
    assert json.loads(cli("lock", "e", "--check", "--json").out)["notes"] == [note.removeprefix("envlock: note: ")]


# -- item 7: patch edit's work dir -----------------------------------------------


def test_patch_edit_work_dir_is_ignored_by_git_and_removed_once_recorded(
        ws: Workspace, cli: Cli, universe: Universe) -> None:
    from kit.sglike import commit_all, git

    write_project(ws.root / "kernel", "kern", "0.1.0", {"kern/__init__.py": "X = 1\n"})
    ws.write_spec("e", _spec(universe.pypi, '\n[sources.kern]\npath = "kernel"\n'))
    git(ws.root, "init", "-q", "-b", "main")
    commit_all(ws.root, "the workspace")
    for attempt in ("first", "second"):  # the second edit finds no leftover of the first
        r = cli("patch", "edit", "e", "kern")
        assert r.code == 0, r.err
        work = ws.root / "kern-edit"
        # A path source has no commit to name: its tree as it is, with the patches.
        applied = "0 patches" if attempt == "first" else "1 patch"
        assert r.out.splitlines()[0] == f"{work}: kern with {applied} applied (one commit each)"
        # Ignored (.git/info/exclude): nothing of it to commit by mistake.
        assert "kern-edit" not in git(ws.root, "status", "--short", "--untracked-files=all")
        (work / "kern" / f"{attempt}.py").write_text("Y = 2\n")
        r = cli("patch", "record", str(work), "--subject", f"Add {attempt}", "--why", "a test")
        assert r.code == 0, r.err
        number = 1 if attempt == "first" else 2
        assert r.out.splitlines() == [
            f"wrote patches/kern/000{number}-add-{attempt}.patch (1 file)", f"removed the work dir {work}",
            f'add it to [sources.kern] patches = [..., "patches/kern/000{number}-add-{attempt}.patch"] and run '
            "`envlock lock e`"]
        assert not work.exists()
        patches = ", ".join(f'"patches/kern/000{n}-add-{a}.patch"' for n, a in ((1, "first"), (2, "second"))[:number])
        ws.write_spec("e", _spec(universe.pypi, f'\n[sources.kern]\npath = "kernel"\npatches = [{patches}]\n'))
    # What is left to commit is the spec and the patches, no work dir.
    assert git(ws.root, "status", "--short", raw=True).splitlines() == [" M envs/e.toml", "?? patches/"]
    assert (ws.root / ".git" / "info" / "exclude").read_text().splitlines()[-1] == "/kern-edit/"


# -- item 4 (and 6): cache keygen on a fresh machine ---------------------------------


def test_cache_keygen_makes_the_missing_folder_0700_as_ssh_keygen_does(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    monkeypatch.chdir(tmp_path)  # no workspace: keygen needs none
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    out = tmp_path / "home" / ".config" / "envlock" / "team-ci.key"  # neither ~ nor .config exists yet
    r = cli("cache", "keygen", "team-ci", "--out", str(out))
    assert r.code == 0, r.err
    assert r.out.startswith("team-ci:") and r.out.count("\n") == 1
    assert r.err == (f"envlock: made {out.parent} (mode 0700); secret key written to {out} (mode 0600): keep it to "
                     "the machines that push; trust the public key below where caches are read\n")
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    # --json: one document, as every reporting command gives; the folder exists now, so none is made.
    second = out.parent / "laptop.key"
    r = cli("cache", "keygen", "laptop", "--out", str(second), "--json")
    assert (r.code, r.err) == (0, "")
    doc = json.loads(r.out)
    assert (doc["name"], doc["secret_key"], doc["made_folder"]) == ("laptop", str(second), None)
    assert doc["public_key"].startswith("laptop:")
    r = cli("cache", "keygen", "laptop", "--out", str(second))  # never over an existing key
    assert (r.code, r.err) == (2, f"envlock: error: {second}: exists; a secret key is never overwritten (remove it, "
                                  "or choose another --out)\n")


# -- item 3: diff of two lock paths outside a workspace ---------------------------------


def test_diff_outside_a_workspace_does_not_guess_why_a_build_rebuilds(
        ws: Workspace, cli: Cli, universe: Universe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_project(ws.root / "kernel", "kern", "0.1.0", {"kern/__init__.py": "X = 1\n"})
    patch = ws.root / "patches" / "kern" / "0001-x.patch"
    patch.parent.mkdir(parents=True)

    def locked(value: str, copy: Path) -> None:
        patch.write_text("Subject: x\nWhy: a test.\n---\ndiff --git a/kern/__init__.py b/kern/__init__.py\n"
                         "--- a/kern/__init__.py\n+++ b/kern/__init__.py\n@@ -1 +1 @@\n-X = 1\n+X = " + value + "\n")
        assert cli("lock", "e").code == 0
        assert cli("build", "e").code == 0
        copy.write_text((ws.root / "locks" / "pylock.e.toml").read_text())

    ws.write_spec("e", _spec(universe.pypi, 'kern = { build = "kern" }\n\n[sources.kern]\npath = "kernel"\n'
                                            'patches = ["patches/kern/0001-x.patch"]\n\n'
                                            '[builds.kern]\nsource = "kern"\n'))
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    locked("2", a)
    locked("3", b)
    inside = cli("diff", str(a), str(b))
    assert inside.code == 0, inside.err
    assert "  rebuild kern: patch patches/kern/0001-x.patch changed" in inside.out.splitlines()
    monkeypatch.chdir(tmp_path)  # no envs/ here or above
    outside = cli("diff", str(a), str(b))
    assert outside.code == 0, outside.err
    assert ("  rebuild kern: cannot tell why: its source, patches and recipe are named by the env's spec, which this "
            "diff did not read (run it in the env's workspace, or with --root)") in outside.out.splitlines()
    assert "toolchain" not in outside.out
    assert cli("diff", str(a), str(b), "--root", str(ws.root)).out == inside.out


# -- item 5: a venv file edited anyway ---------------------------------------------


def test_verify_names_every_generation_an_edited_hard_link_touches_and_repairs_them_all(
        ws: Workspace, cli: Cli, universe: Universe) -> None:
    import os
    import stat

    ws.write_spec("e", _spec(universe.pypi, 'otherdep = "==2.0"\n'))
    assert cli("sync", "e").code == 0
    ws.write_spec("e", _spec(universe.pypi, 'otherdep = "==2.0"\nfilelock-lite = "==3.0"\n'))
    assert cli("sync", "e").code == 0  # generation 2: otherdep's files are generation 1's (hard links)
    venv = Path(cli("path", "e").out.strip()).resolve()
    edited = venv / "lib" / "python3.11" / "site-packages" / "otherdep" / "__init__.py"
    assert edited.stat().st_nlink > 2  # this venv, generation 1's and the store's uv cache
    os.chmod(edited, stat.S_IMODE(edited.stat().st_mode) | stat.S_IWUSR)  # read-only: root, or a chmod, writes anyway
    with edited.open("a") as fh:  # in place: the inode every venv shares
        fh.write("BROKEN = True\n")

    r = cli("verify", "e")
    assert r.code == 1
    assert r.out.splitlines()[3:] == [
        "  ~ lib/python3.11/site-packages/otherdep/__init__.py",
        "  the changed files are hard links (uv's cache): the same edit is in the venvs of generations e/1, e/2",
        "  repair them all: envlock verify e --repair (rebuilds each from its lock and the store's wheels)"]
    assert json.loads(cli("verify", "e", "--json").out)["shared"] == ["e/1", "e/2"]
    r = cli("rollback", "e")  # generation 1 holds the edit too: refused, with the same way out
    assert r.code == 1
    assert r.err.splitlines()[0].endswith("the env was not switched; `envlock verify e --repair` builds it anew (and "
                                          "every venv sharing its modified files), then roll back again")

    r = cli("verify", "e", "--repair")
    assert r.code == 0, r.out + r.err
    assert r.out.splitlines()[0] == "e: repaired 2 venvs (generations e/1, e/2)"
    assert r.out.splitlines()[1].startswith("e: ok (sha256:")
    assert "BROKEN" not in (venv / edited.relative_to(venv)).read_text()
    assert cli("rollback", "e").code == 0
    assert json.loads(cli("verify", "e", "--json").out)["intact"] is True  # generation 1, whole again
    r = cli("verify", "e", "--repair", "--json")
    assert json.loads(r.out)["repair"] == {"venvs": [], "generations": [], "removed": []}


# -- item 6: options ------------------------------------------------------------------


def _choice(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subcommand parser ``name`` of ``parser`` (argparse keeps them in its subparsers action)."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]  # type: ignore[no-any-return]


def test_help_says_the_global_options_once_and_its_examples_use_the_demo_env(cli: Cli) -> None:
    from envlock.cli.main import build_parser

    top = build_parser().format_help()
    assert "--keyring-provider" in top and "envlock sync demo" in top and "qwen35-blackwell" not in top
    for argv in (["sync"], ["export"], ["cache", "push"], ["patch", "edit"]):
        parser = build_parser()
        sub = _choice(parser, argv[0])
        if len(argv) > 1:
            sub = _choice(sub, argv[1])
        text = sub.format_help()
        assert "--keyring-provider {" not in text and "--native-tls " not in text.split("global options")[0]
        assert " ".join(text.split()).endswith("global options, before or after the command: --root DIR, --debug, "
                                               "-q, --keyring-provider, --native-tls (`envlock --help`)")


def test_export_out_and_its_index_mirror_and_syncs_summary_names_its_build(
        ws: Workspace, cli: Cli, tmp_path: Path) -> None:
    origin, mirror = IndexServer(tmp_path / "origin"), IndexServer(tmp_path / "mirror")
    for server in (origin, mirror):
        server.add("pypi", build_wheel(tmp_path / "w", "tinydep", "1.0"))
        server.start()
    try:
        write_project(ws.root / "kernel", "kern", "0.1.0", {"kern/__init__.py": "X = 1\n"})
        ws.write_spec("e", _spec(origin.url("pypi"), 'kern = { build = "kern" }\n\n[sources.kern]\npath = "kernel"\n'
                                                     '\n[builds.kern]\nsource = "kern"\n'))
        r = cli("sync", "e")
        assert r.code == 0, r.err
        assert [line for line in r.out.splitlines() if line.startswith("  built ")] == [
            f"  built kern (inputs {read_lock_build(ws, 'kern')[:19]})"]
        assert json.loads(cli("sync", "e", "--json").out)["built"] == []  # up to date: nothing built
        origin.stop()  # the lock's index is gone, and the store lacks its wheel
        from envlock.model.lockfile import read_lock
        from envlock.store.store import Store

        tinydep = read_lock(ws.root / "locks" / "pylock.e.toml").package("tinydep")
        assert tinydep is not None
        Store.open().remove_entry("wheels", tinydep.wheels[0].sha256)
        r = cli("export", "e", "--out", str(tmp_path / "a.tar"))
        assert r.code == 1 and "Connection refused" in r.err
        r = cli("export", "e", "--out", str(tmp_path / "a.tar"), "--index", f"pypi={mirror.url('pypi')}")
        assert r.code == 0, r.err
        assert r.out.startswith(f"exported locks/pylock.e.toml to {tmp_path / 'a.tar'}: 1 build, 1 source, ")
        assert mirror.downloads("tinydep-1.0-py3-none-any.whl")  # from the mirror, held to the lock's sha256
        r = cli("export", "e", "--to", str(tmp_path / "b.tar"))  # the old spelling still works
        assert r.code == 0, r.err
        # cache push brings what the store lacks the same way.
        Store.open().remove_entry("wheels", tinydep.wheels[0].sha256)
        cache = f"file://{tmp_path / 'cache'}"
        r = cli("cache", "push", "e", "--to", cache)
        assert r.code == 1 and "Connection refused" in r.err
        r = cli("cache", "push", "e", "--to", cache, "--index", f"pypi={mirror.url('pypi')}", "--json")
        assert r.code == 0, r.err
        assert f"wheels/{tinydep.wheels[0].sha256}" in json.loads(r.out)["uploaded"]
        r = cli("export", "e")
        assert (r.code, r.err) == (2, "envlock: error: export: expected --out DIR|FILE.tar, where to write the "
                                      "bundle\n")
    finally:
        mirror.stop()


def read_lock_build(ws: Workspace, name: str) -> str:
    from envlock.model.lockfile import read_lock

    return read_lock(ws.root / "locks" / "pylock.e.toml").builds[name].input_digest


def test_bisect_and_diff_take_the_mirror_flags(ws: Workspace, cli: Cli, universe: Universe) -> None:
    ws.write_spec("e", _spec(universe.pypi))
    assert cli("lock", "e").code == 0
    r = cli("bisect", "e", "--nightly", "2026-03-01..2026-03-05", "--index", f"pypi={universe.pypi}", "--", "true")
    assert (r.code, r.err.splitlines()[-1]) == (2, f"envlock: error: {ws.root / 'envs' / 'e.toml'}: no nightly pin "
                                                   "to move; --nightly bisects the date of the spec's "
                                                   '`nightly = "YYYY-MM-DD"` packages')  # the flag was taken
    lock = str(ws.root / "locks" / "pylock.e.toml")
    r = cli("diff", lock, lock, "--fetch", "--source", "nosuch=file:///x", "--index", f"pypi={universe.pypi}")
    # Read and checked as every command checks a mirror's name (tests/test_mirror_flags.py): refused by name.
    assert r.code == 2, r.err
    assert (f"--source nosuch=...: {ws.root / 'envs' / 'e.toml'} has no [sources.nosuch] nor a fetchcontent.nosuch; "
            "known: none") in r.err, r.err
    assert cli("diff", lock, lock, "--yanked", "--index", f"pypi={universe.pypi}").code == 0
