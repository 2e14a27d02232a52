"""End to end through the CLI: a demo-shaped env with a patched local C extension.

lock -> build -> build again (nothing rebuilt) -> build --check -> patch status -> relock
(byte-identical) -> sync -> import. Build backends come from tests/.wheels on a loopback
index (see tests/test_builder.py).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from envlock import runner
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.sglike import commit_all, init_repo
from kit.universe import backend_wheels
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace, write_demo

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_lock_build_check_status_sync(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_demo(ws.root, backend_index.url("pypi"))
    r = cli("lock", "demo")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == ("  mini-kernel: not built for this lock yet; `envlock build demo` builds it "
                                      "(`envlock sync demo` too)")
    # Offline, an unbuilt lock cannot be built (that needs the index): refused, not synced without the kernel.
    r = cli("sync", "demo", "--offline")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.demo.toml: --offline, but the lock records no build "
                                  "of mini-kernel (building needs the index); run `envlock sync demo` online\n")
    # Nor built offline: the build requirements are known only from a lock that records the build.
    r = cli("build", "demo", "--offline")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.demo.toml: --offline, but the lock records no build "
                                  "of mini-kernel, so the build requirements are unknown without the index; run "
                                  "`envlock build demo` online\n")
    r = cli("build", "demo", "--offline", "--source", "mini-kernel=/elsewhere")
    assert (r.code, r.err) == (2, "envlock: error: --source: --offline downloads nothing, so no mirror is read; "
                                  "drop one of the two\n")
    # A frozen sync could only refuse this lock after an (hour-long, for sgl-kernel) build: it refuses first.
    r = cli("sync", "demo", "--frozen")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.demo.toml: --frozen, but the lock records no build "
                                  "of mini-kernel; run `envlock build demo` (or sync without --frozen)\n")
    # Synced as it is, this lock would make a venv without the kernel: refused.
    r = cli("sync", "demo", "--lock", "locks/pylock.demo.toml")
    assert (r.code, r.err) == (2, "envlock: error: locks/pylock.demo.toml: records no build of mini-kernel (its spec "
                                  "declares [builds.mini-kernel]; the lock was written before `envlock build demo`); "
                                  "build first, or run `envlock sync demo`, which builds\n")
    lock = tomllib.loads(ws.lock_text("demo"))
    source = lock["tool"]["envlock"]["sources"]["mini-kernel"]
    assert source["path"] == "examples/mini-kernel" and source["tree-digest"].startswith("sha256:")
    assert [p["path"] for p in source["patches"]] == ["patches/mini-kernel/0001-add-dot.patch"]

    r = cli("build", "demo")
    assert r.code == 0, r.err
    assert "mini-kernel: built wheelhouse/mini_kernel-0.1.0-cp311-cp311-linux_x86_64.whl" in r.out
    assert "1 rebuilt, 0 reused; updated locks/pylock.demo.toml" in r.out
    text = ws.lock_text("demo")
    lock = tomllib.loads(text)
    built = lock["tool"]["envlock"]["builds"]["mini-kernel"]
    package = next(p for p in lock["packages"] if p["name"] == "mini-kernel")
    assert package["wheels"][0]["path"] == "../wheelhouse/" + built["wheel"]
    assert package["wheels"][0]["hashes"]["sha256"] == built["sha256"]

    r = cli("build", "demo", "--json")
    assert r.code == 0 and '"rebuilt": 0' in r.out

    r = cli("build", "demo", "--check")
    assert r.code == 0, r.err
    assert "mini-kernel: reproducible (rebuilt bit-identical" in r.out

    r = cli("patch", "status", "demo")
    assert r.code == 0
    assert "applies          patches/mini-kernel/0001-add-dot.patch" in r.out

    assert cli("lock", "demo").code == 0
    assert ws.lock_text("demo") == text  # the build record survives a relock of the same spec

    r = cli("sync", "demo")
    assert r.code == 0, r.err
    env_path = Path(r.out.strip().splitlines()[-1])
    # Offline, nothing is built (a build needs the index): the built wheel comes from the store,
    # where the sync above put it by its sha256, or is named missing; the lock is left as it is.
    shutil.rmtree(ws.root / "wheelhouse")
    before = ws.lock_text("demo")
    r = cli("sync", "demo", "--offline")  # not -q: a build would be announced
    assert r.code == 0 and "building" not in r.err, r.err
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-offline"))
    r = cli("sync", "demo", "--offline")
    assert r.code == 1 and "building" not in r.err
    assert "mini_kernel-0.1.0-cp311-cp311-linux_x86_64.whl: local artifact " in r.err, r.err
    assert "(`envlock build demo` builds it for the current spec;" in r.err  # the env named, not ENV
    assert ws.lock_text("demo") == before
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    assert cli("-q", "build", "demo").code == 0  # the wheelhouse back, for what follows
    # Frozen, with every wheel at hand, the sources are never read: a checkout without them syncs.
    tree = ws.root / "examples" / "mini-kernel"
    tree.rename(tmp_path / "mini-kernel-away")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-frozen"))
    r = cli("-q", "sync", "demo", "--frozen")
    assert r.code == 0, r.err
    (tmp_path / "mini-kernel-away").rename(tree)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    probe = runner.run([env_path / "bin" / "python", "-c", "import mini_kernel as m; print(m.dot([1, 2], [3, 4]))"])
    assert probe.stdout.strip() == "11.0", probe.tail()

    # The known-good lock from git history syncs into a fresh store: its wheelhouse path is
    # relative to locks/ in the work tree, not to the current directory.
    init_repo(ws.root)
    commit_all(ws.root, "known good")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home2"))
    monkeypatch.chdir(ws.root / "examples")
    r = cli("sync", "demo", "--lock", "../locks/pylock.demo.toml@HEAD")
    assert r.code == 0, r.err

    # A path source is content-hashed: an edit in its tree makes the lock stale and rebuilds.
    monkeypatch.chdir(ws.root)
    init = ws.root / "examples" / "mini-kernel" / "python" / "mini_kernel" / "__init__.py"
    init.write_text(init.read_text() + "\nEDITED = True\n")
    r = cli("lock", "demo", "--check")
    assert r.code == 1
    assert r.out.splitlines()[1] == "  sources.mini-kernel.path: examples/mini-kernel changed since the lock"
    # Frozen, the env is the lock's (nothing to do), and the edit the lock lacks is said, each time.
    for _ in range(2):
        r = cli("sync", "demo", "--frozen")
        assert r.code == 0 and "up to date" in r.out, r.err
        assert ("  note: locks/pylock.demo.toml is stale for envs/demo.toml (sources.mini-kernel.path: "
                "examples/mini-kernel changed since the lock): --frozen synced the lock as it is; `envlock lock demo` "
                "locks the spec anew") in r.out.splitlines(), r.out
    # A tree that cannot be hashed (a link out of it) is named as such, not as the lock being stale.
    link = ws.root / "examples" / "mini-kernel" / "outside"
    link.symlink_to("/etc/hostname")
    r = cli("sync", "demo", "--frozen")
    assert r.code == 0 and "is stale" not in r.out, r.out
    assert "symlink outside -> /etc/hostname leads outside the source tree" in r.out, r.out
    assert "(--frozen reads no source; `envlock lock demo` and a build refuse it until it is fixed)" in r.out
    link.unlink()
    # A frozen sync that must rebuild (the wheelhouse gone) names the edit before a build is spent on it.
    stale = ws.lock_text("demo")
    locked_wheel = tomllib.loads(stale)["tool"]["envlock"]["builds"]["mini-kernel"]
    kept_wheel = (ws.root / "wheelhouse" / locked_wheel["wheel"]).read_bytes()
    shutil.rmtree(ws.root / "wheelhouse")
    r = cli("sync", "demo", "--frozen")
    assert r.code == 2 and "building" not in r.err, r.err  # input that is not the lock's, as a missing build
    recorded_inputs = locked_wheel["input-digest"]
    assert re.fullmatch(
        r"envlock: error: locks/pylock\.demo\.toml: --frozen, but the inputs of mini-kernel changed since the lock "
        rf"\(input digest {re.escape(recorded_inputs[:19])}, now sha256:[0-9a-f]{{12}}\), so the recorded wheel cannot "
        r"be rebuilt; restore them, or sync without --frozen \(`envlock sync demo` relocks and rebuilds\)\n"
        r"  sources\.mini-kernel\.path: examples/mini-kernel changed since the lock\n", r.err), r.err
    assert not (ws.root / "wheelhouse").exists()  # nothing put where the lock's wheel belongs
    # `build --check` is a diagnosis: it says the lock records other inputs, and writes nothing,
    # neither the lock nor the wheelhouse (where the lock's wheel is, under the same file name).
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-check"))  # its builds stay out of the store below
    (ws.root / "wheelhouse").mkdir()
    (ws.root / "wheelhouse" / locked_wheel["wheel"]).write_bytes(kept_wheel)  # the locked wheel back
    assert sha256_of(ws.root / "wheelhouse" / locked_wheel["wheel"]) == locked_wheel["sha256"]
    r = cli("build", "demo", "--check")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home2"))
    assert r.code == 0, r.err
    assert ("envlock: mini-kernel: the lock records a build of other inputs (sources.mini-kernel.path: "
            "examples/mini-kernel changed since the lock; input digest sha256:") in r.err, r.err
    assert ("envlock: --check does not write the lock: `envlock build demo` records these builds in "
            "locks/pylock.demo.toml") in r.err
    assert not r.out.rstrip().endswith("updated locks/pylock.demo.toml")
    assert ws.lock_text("demo") == stale
    assert sha256_of(ws.root / "wheelhouse" / locked_wheel["wheel"]) == locked_wheel["sha256"]
    # Locked anew before the build: the diff says the kernel is to be rebuilt, not that it leaves the env.
    assert cli("-q", "lock", "demo").code == 0
    r = cli("diff", "locks/pylock.demo.toml@HEAD", "demo")
    assert r.code == 0, r.err
    assert ("~ package  mini-kernel: 0.1.0  (not built for this lock yet: `envlock build demo` (or `envlock sync "
            "demo`) builds it)") in r.out.splitlines()
    assert re.search(r"^~ build    mini-kernel: sha256:[0-9a-f]{64}  \(not built for this lock yet: rebuild "
                     r"pending\)$", r.out, re.M)
    doc = json.loads(cli("diff", "locks/pylock.demo.toml@HEAD", "demo", "--json").out)
    assert {c["kind"]: c["action"] for c in doc["changes"] if c["name"] == "mini-kernel"} == {
        "package": "pending", "source": "changed", "build": "pending"}
    r = cli("sync", "demo")
    assert r.code == 0, r.err
    assert r.out.startswith("demo: generation 2 (")
    # Said even off a terminal: a real kernel build is an hour of otherwise silent work.
    assert re.search(r"^envlock: building mini-kernel \(inputs sha256:[0-9a-f]{12}\); a native build can take "
                     r"long$", r.err, re.M), r.err
    # The same inputs again (the wheelhouse emptied): the store's wheel is copied, nothing is built or said.
    shutil.rmtree(ws.root / "wheelhouse")
    r = cli("sync", "demo")
    assert r.code == 0 and "building" not in r.err, r.err
    assert tomllib.loads(ws.lock_text("demo"))["tool"]["envlock"]["builds"]["mini-kernel"] != built
    env_path = Path(cli("path", "demo").out.strip())
    probe = runner.run([env_path / "bin" / "python", "-c", "import mini_kernel as m; print(m.EDITED)"])
    assert probe.stdout.strip() == "True", probe.tail()

    edit = tmp_path / "mk-edit"  # the patched tree, as a work dir
    assert cli("patch", "edit", "demo", "mini-kernel", "--dir", str(edit)).code == 0

    # A path source edited under its patch: `patch edit` stops at the conflict for a redo and
    # `record --refresh` rewrites the patch (a path source has no pin to go back to).
    init_py = ws.root / "examples" / "mini-kernel" / "python" / "mini_kernel" / "__init__.py"
    init_py.write_text(init_py.read_text().replace("from mini_kernel._core import add\n",
                                                   "from mini_kernel._core import add  # the C core\n"))
    redo = tmp_path / "mk-redo"
    r = cli("patch", "edit", "demo", "mini-kernel", "--dir", str(redo))
    assert r.code == 0, r.err
    assert "patches/mini-kernel/0001-add-dot.patch does not apply here:" in r.out
    hint = r.out.splitlines()[-1]
    assert hint == f"redo its change in {redo}, then: envlock patch record {redo} --refresh --root {ws.root}"
    redone = redo / "python" / "mini_kernel" / "__init__.py"
    redone.write_text(redone.read_text().replace("import add  # the C core", "import add, dot  # the C core")
                      .replace('["add"]', '["add", "dot"]'))
    (redo / "src" / "core.c").write_text((edit / "src" / "core.c").read_text())
    # The patch was applied hunk by hunk (no pin to merge against): the hunk redone above waited in a .rej.
    (redo / "python" / "mini_kernel" / "__init__.py.rej").unlink()
    monkeypatch.chdir(redo)  # the printed command works from inside the work dir too
    r = cli(*shlex.split(hint.split(": ", 1)[1])[1:])
    monkeypatch.chdir(ws.root)
    assert r.code == 0, r.err
    assert r.out.splitlines() == ["refreshed patches/mini-kernel/0001-add-dot.patch (2 files)",
                                  "every patch applies now; run `envlock lock demo` (for a git source, once its rev in "
                                  "the spec is the commit you edited against)"]
    # A new patch: where to list it, and the lock command to run, named with the env.
    (redo / "python" / "mini_kernel" / "extra.py").write_text("EXTRA = 1\n")
    r = cli("patch", "record", str(redo), "--subject", "Extra", "--why", "A test.")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == ('add it to [sources.mini-kernel] patches = [..., '
                                      '"patches/mini-kernel/0002-extra.patch"] and run `envlock lock demo`')
    (ws.root / "patches" / "mini-kernel" / "0002-extra.patch").unlink()
    r = cli("patch", "status", "demo")
    assert r.code == 0 and "applies          patches/mini-kernel/0001-add-dot.patch" in r.out

    # --override-source takes an unpatched tree: a `patch edit` work dir (patches applied) is named as such.
    r = cli("build", "demo", "--override-source", f"mini-kernel={edit}")
    assert r.code == 1 and ("--override-source mini-kernel=...: the spec's patches are applied to that tree, so it "
                            "must be unpatched (a `patch edit` work dir has them applied already)") in r.err, r.err
    # An overridden tree's build goes to wheelhouse/overrides/, never over the locked wheel, and
    # the lock is left as it is.
    trial = tmp_path / "mk-trial"
    shutil.copytree(ws.root / "examples" / "mini-kernel", trial)
    (trial / "python" / "mini_kernel" / "trial.py").write_text("TRIAL = True\n")
    lock_before = ws.lock_text("demo")
    locked = tomllib.loads(lock_before)["tool"]["envlock"]["builds"]["mini-kernel"]
    r = cli("build", "demo", "--override-source", f"mini-kernel={trial}")
    assert r.code == 0, r.err
    assert ("envlock: the lock was not updated: an overridden source is not a pin; its build is in "
            "wheelhouse/overrides/, which no sync installs") in r.err, r.err
    assert r.out.startswith("mini-kernel: built wheelhouse/overrides/mini_kernel-0.1.0-"), r.out
    assert ws.lock_text("demo") == lock_before
    assert sha256_of(ws.root / "wheelhouse" / locked["wheel"]) == locked["sha256"]


def test_patch_status_exit_code_and_json_on_conflict(ws: ScratchWorkspace, cli: Cli, tmp_path: Path) -> None:
    (ws.root / "src").mkdir()
    (ws.root / "src" / "f.txt").write_text("a\nB\nc\n")
    (ws.root / "patches" / "s").mkdir(parents=True)
    (ws.root / "patches" / "s" / "0001-x.patch").write_text(
        "Subject: x\nWhy: y\nUpstream: z\n---\n"
        "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+b2\n c\n"
    )
    (ws.root / "envs" / "e.toml").write_text(
        '[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://127.0.0.1:9/simple"\ndefault = true\n'
        '[sources.s]\npath = "src"\npatches = ["patches/s/0001-x.patch"]\n'
    )
    r = cli("patch", "status", "e")
    assert r.code == 1
    assert "conflict         patches/s/0001-x.patch  -- refresh it: f.txt hunk 1 no longer matches" in r.out
    r = cli("patch", "status", "e", "--json")
    assert r.code == 1 and '"conflicts": 1' in r.out
    r = cli("patch", "status", "e", "--against", "main")
    assert r.code == 2 and "source 's' is a path source" in r.err


def test_build_refuses_a_missing_lock_and_unknown_build(ws: ScratchWorkspace, cli: Cli) -> None:
    write_demo(ws.root, "http://127.0.0.1:9/simple")
    r = cli("build", "demo")
    assert r.code == 2 and "no lock file; create it with `envlock lock demo` before building" in r.err
    r = cli("build", "demo", "--override-source", "nope")
    assert r.code == 2 and "--override-source 'nope': expected NAME=PATH" in r.err


def test_a_build_subdirectory_the_source_lacks_is_named_by_lock(ws: ScratchWorkspace, cli: Cli) -> None:
    # Before any index is asked (this one is closed): uv would call it a failed resolution.
    write_demo(ws.root, "http://127.0.0.1:9/simple")
    spec = ws.root / "envs" / "demo.toml"
    spec.write_text(spec.read_text() + 'subdirectory = "nonexist"\n')
    r = cli("lock", "demo")
    assert (r.code, r.err) == (2, f"envlock: error: {spec}: builds.mini-kernel.subdirectory: expected a folder of "
                                  "source 'mini-kernel' (as patched), found no 'nonexist' there\n")


@pytest.mark.slow
def test_frozen_sync_rebuilds_from_the_locked_build_requirements(
    ws: ScratchWorkspace, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The known-good rebuild: the index has newer build tools than the lock recorded, the
    # wheel is gone from this machine, and sync --frozen must rebuild the recorded wheel.
    server = IndexServer(tmp_path / "index")
    server.add_dir("pypi", backend_wheels())
    server.start()
    try:
        write_demo(ws.root, server.url("pypi"))
        assert cli("lock", "demo").code == 0
        r = cli("sync", "demo")
        assert r.code == 0, r.err
        recorded = tomllib.loads(ws.lock_text("demo"))["tool"]["envlock"]["builds"]["mini-kernel"]
        assert any(line.startswith("scikit-build-core==") for line in recorded["build-requirements"])
        server.add("pypi", build_wheel(tmp_path / "newer", "scikit_build_core", "99.0",
                                       files={"scikit_build_core/__init__.py": "raise ImportError('never used')\n"}))
        shutil.rmtree(ws.root / "wheelhouse")
        monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh-home"))
        before = ws.lock_text("demo")
        r = cli("sync", "demo", "--frozen")
        assert r.code == 0, r.err
        assert ws.lock_text("demo") == before
        assert sha256_of(ws.root / "wheelhouse" / recorded["wheel"]) == recorded["sha256"]
    finally:
        server.stop()


@pytest.mark.slow
def test_a_lock_written_while_a_build_ran_is_not_undone(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlock.build import builder

    write_demo(ws.root, backend_index.url("pypi"))
    assert cli("lock", "demo").code == 0
    lock_file = ws.root / "locks" / "pylock.demo.toml"
    meanwhile = ws.lock_text("demo") + "# written by another envlock during the build\n"
    real_build_wheel = builder.build_wheel

    def another_lock_during_the_build(*args: Any, **kwargs: Any) -> Any:
        lock_file.write_text(meanwhile)
        return real_build_wheel(*args, **kwargs)

    monkeypatch.setattr(builder, "build_wheel", another_lock_during_the_build)
    r = cli("build", "demo")
    assert (r.code, r.err) == (1, "envlock: error: locks/pylock.demo.toml: changed by another envlock while this "
                                  "build ran; the lock was not written. The wheels just built are in the store: "
                                  "`envlock build demo` again records them without building\n")
    assert ws.lock_text("demo") == meanwhile
    monkeypatch.setattr(builder, "build_wheel", real_build_wheel)
    r = cli("build", "demo")
    assert r.code == 0, r.err
    assert "0 rebuilt, 1 reused; updated locks/pylock.demo.toml" in r.out


def test_a_build_named_other_than_its_project_is_refused_at_its_key(ws: ScratchWorkspace, cli: Cli,
                                                                    backend_index: IndexServer) -> None:
    # Before: uv's "metadata name does not match" at lock time, reported as a failed resolution (exit 1).
    write_demo(ws.root, backend_index.url("pypi"))
    spec = ws.root / "envs" / "demo.toml"
    spec.write_text(spec.read_text().replace('mini-kernel = { build = "mini-kernel" }', 'mk2 = { build = "mk2" }')
                    .replace("[builds.mini-kernel]", "[builds.mk2]"))
    for command in (["lock", "demo"], ["sync", "demo"]):
        r = cli(*command)
        assert (r.code, r.err) == (2, f"envlock: error: {spec}: [builds.mk2]: source 'mini-kernel' builds project "
                                      "'mini-kernel' (pyproject.toml), expected 'mk2': a build makes the package of "
                                      "its own name; name the build (and its package) 'mini-kernel': `envlock "
                                      "upgrade demo --fix-renames` moves its tables and its package entry\n"), command


@pytest.mark.slow
def test_build_check_never_replaces_the_wheel_the_lock_names(ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same inputs, other bytes (as a build that does not reproduce gives): the check says so, and
    the wheelhouse keeps the wheel the lock records."""
    write_demo(ws.root, backend_index.url("pypi"))
    assert cli("-q", "lock", "demo").code == 0
    assert cli("-q", "build", "demo").code == 0
    lock_file = ws.root / "locks" / "pylock.demo.toml"
    built = tomllib.loads(lock_file.read_text())["tool"]["envlock"]["builds"]["mini-kernel"]
    wheel = ws.root / "wheelhouse" / built["wheel"]
    recorded = wheel.read_bytes() + b"\0"  # stands for the bytes an earlier build gave
    size = f"size = {wheel.stat().st_size}, "
    wheel.write_bytes(recorded)
    lock_file.write_text(lock_file.read_text().replace(built["sha256"], sha256_of(wheel))
                         .replace(size, f"size = {len(recorded)}, "))
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))  # no stored build of these inputs
    r = cli("build", "demo", "--check")
    assert r.code == 1 and "mini-kernel: NOT reproducible" in r.out, r.out + r.err
    assert wheel.read_bytes() == recorded
    # A build then (the check's own build in this store): same inputs, the wheelhouse holds the lock's
    # wheel, so nothing is built or replaced, and the lock is left as it is.
    lock_before = lock_file.read_text()
    r = cli("build", "demo")
    assert r.code == 0 and "building" not in r.err, r.err
    assert r.out.startswith("mini-kernel: unchanged (the wheelhouse holds the lock's wheel) "
                            f"wheelhouse/{built['wheel']}"), r.out
    assert wheel.read_bytes() == recorded and lock_file.read_text() == lock_before
    # Not when the lock records other build requirements than these inputs have (a merge gone wrong):
    # the input digest alone does not vouch for the wheelhouse's wheel then. Nor does it for the store's
    # build (the check's, other bytes than the lock's): it is not taken, the lock is left as it is, and
    # --rebuild builds it again.
    requirement = built["build-requirements"][0]
    odd = lock_before.replace(requirement, requirement.replace("--hash=sha256:", "--hash=sha256:0", 1))
    lock_file.write_text(odd)
    r = cli("build", "demo")
    assert r.code == 1 and "the wheelhouse holds the lock's wheel" not in r.out, r.out
    assert r.err.startswith(f"envlock: error: locks/pylock.demo.toml: builds.mini-kernel: the store holds wheel sha256 "
                            f"{built['sha256']} for input digest {built['input-digest'][:23]} "), r.err
    assert r.err.endswith("  to build it again here and replace the store's: `envlock build demo mini-kernel "
                          "--rebuild`\n"), r.err
    assert lock_file.read_text() == odd and wheel.read_bytes() == recorded
    r = cli("build", "demo", "--rebuild")
    assert r.code == 0 and r.out.startswith(f"mini-kernel: built wheelhouse/{built['wheel']} "), r.out + r.err
    assert sha256_of(wheel) == built["sha256"] and built["sha256"] in lock_file.read_text()


@pytest.mark.slow
def test_a_frozen_sync_rebuilds_after_an_edit_that_leaves_the_build_inputs_alone(
        ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reworded patch header changes the file (the lock calls itself stale), not the patched tree.
    write_demo(ws.root, backend_index.url("pypi"))
    assert cli("-q", "sync", "demo").code == 0
    patch_file = ws.root / "patches" / "mini-kernel" / "0001-add-dot.patch"
    patch_file.write_text(patch_file.read_text().replace("Why:", "Why: (reworded)", 1))
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh"))
    r = cli("sync", "demo", "--frozen")
    assert r.code == 0, r.err
    assert "sources.mini-kernel.patches: patches/mini-kernel/0001-add-dot.patch changed since the lock" in r.out


@pytest.mark.slow
def test_a_sync_that_records_a_build_of_other_inputs_says_it_changed_the_lock(
    ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As found: in a fresh clone, `envlock sync demo` rewrote the committed lock's build record (its input
    # digest covers this machine's compilers) and said only "built mini-kernel": a tracked file changed unsaid.
    write_demo(ws.root, backend_index.url("pypi"))
    assert cli("-q", "sync", "demo").code == 0  # locked, built and recorded, "locked anew first" said
    text = ws.lock_text("demo")
    digest = tomllib.loads(text)["tool"]["envlock"]["builds"]["mini-kernel"]["input-digest"]
    (ws.root / "locks" / "pylock.demo.toml").write_text(text.replace(digest, "sha256:" + "0" * 64))  # another machine's
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-clone"))  # a fresh clone's machine: nothing built

    r = cli("sync", "demo")
    assert r.code == 0, r.err
    assert r.out.splitlines()[2:4] == [f"  built mini-kernel (inputs {digest[:19]})",
                                       "  recorded mini-kernel's build in the lock"], r.out
    assert ws.lock_text("demo") == text
    r = cli("sync", "demo")  # nothing recorded again: nothing said
    assert r.code == 0 and "recorded" not in r.out, r.out

    # A sync that fails after it wrote the record says so all the same (the tracked file changed).
    venv = re.search(r'^venv-digest = "(sha256:[0-9a-f]{64})"$', text, re.M)
    assert venv is not None
    (ws.root / "locks" / "pylock.demo.toml").write_text(
        text.replace(digest, "sha256:" + "0" * 64).replace(venv[1], "sha256:" + "1" * 64))
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home-clone-2"))
    r = cli("sync", "demo")
    assert r.code == 1 and "not reproducible" in r.err, r.err
    assert "  the lock file changed before this: locks/pylock.demo.toml records mini-kernel's new build" in (
        r.err.splitlines()), r.err
