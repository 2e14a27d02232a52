"""Lock diffs: what an upgrade changes, including same-version re-uploads."""

from __future__ import annotations

import json
from dataclasses import replace

from envlock.model.lockdiff import BuildFacts, DiffContext, diff_locks
from envlock.model.lockfile import Artifact, LockedPackage, LockedPatch, LockedSource, NightlyPin, canonicalize_name
from kit.locks import sample_lock
from kit.workspaces import Cli, ScratchWorkspace

H1, H2, H3 = (f"--hash=sha256:{c * 64}" for c in "123")


def test_identical_locks_have_no_changes() -> None:
    d = diff_locks(sample_lock(), sample_lock(), old_label="a", new_label="b")
    assert d.changes == ()
    assert d.unchanged == 2


def test_nightly_upgrade_source_bump_patch_change_and_reupload() -> None:
    old = sample_lock()
    torch = replace(old.packages[0], version="2.12.0.dev20260310+cu130")
    kernel = replace(old.packages[1], wheels=(Artifact("9" * 64, path=old.packages[1].wheels[0].path),))
    src = old.sources["sglang"]
    new = replace(
        old,
        packages=(torch, kernel),
        nightlies={"torch": NightlyPin("2026-03-10", "2.12.0.dev20260310+cu130")},
        sources={"sglang": replace(src, commit="e" * 40, patches=(
            LockedPatch("patches/sglang/0001-x.patch", "0" * 64),
            LockedPatch("patches/sglang/0002-y.patch", "1" * 64),
        ))},
    )
    d = diff_locks(old, new, old_label="a", new_label="b")
    rows = [(c.kind, c.name, c.action, c.note) for c in d.changes]
    assert rows == [
        ("package", "sgl-kernel", "changed", "same version, different wheel sha256"),
        ("package", "torch", "changed", ""),
        ("nightly", "torch", "changed", "2.12.0.dev20260307+cu130 -> 2.12.0.dev20260310+cu130"),
        ("source", "sglang", "changed", ""),
        ("patch", "patches/sglang/0001-x.patch", "changed", "source sglang"),
        ("patch", "patches/sglang/0002-y.patch", "added", "source sglang"),
    ]
    assert d.unchanged == 0


def test_added_and_removed_packages_and_sources() -> None:
    old = sample_lock()
    new = replace(old, packages=old.packages[:1], sources={**old.sources, "extra": LockedSource("path", "x",
                                                                                               tree_digest="sha256:1")})
    rows = [(c.kind, c.name, c.action) for c in diff_locks(old, new, old_label="a", new_label="b").changes]
    assert rows == [("package", "sgl-kernel", "removed"), ("source", "extra", "added")]


def test_a_build_is_a_rebuild_only_when_its_inputs_changed() -> None:
    old = sample_lock()
    recorded = old.builds["sgl-kernel"]
    same_inputs = replace(old, builds={"sgl-kernel": replace(recorded, sha256="9" * 64)})
    new_inputs = replace(old, builds={"sgl-kernel": replace(recorded, input_digest="sha256:" + "8" * 64)})
    rows = [(c.kind, c.name, c.old, c.new, c.note) for c in diff_locks(old, same_inputs, old_label="a",
                                                                        new_label="b").changes]
    assert rows == [("build", "sgl-kernel", "b" * 64, "9" * 64, "same inputs, another wheel sha256")]
    rows = [(c.kind, c.name, c.old, c.new, c.note) for c in diff_locks(old, new_inputs, old_label="a",
                                                                        new_label="b").changes]
    assert rows == [("build", "sgl-kernel", recorded.input_digest, "sha256:" + "8" * 64, "inputs changed: rebuild")]


def test_a_build_says_which_build_requirements_changed() -> None:
    old = sample_lock()
    recorded = replace(old.builds["sgl-kernel"], requirements=(
        f"ninja==1.11.1 {H1}", f"packaging==26.4 {H1}", f"scikit-build-core==1.1.2 {H1} {H2}"))
    old = replace(old, builds={"sgl-kernel": recorded})
    bumped = replace(recorded, input_digest="sha256:" + "8" * 64, sha256="9" * 64, requirements=(
        f"cmake==4.0.0 {H1}", f"packaging==26.4 {H3}", f"scikit_build_core==1.1.3 {H1}"))
    rows: list[tuple[str | None, ...]] = [(c.kind, c.name, c.action, c.old, c.new, c.note)
            for c in diff_locks(old, replace(old, builds={"sgl-kernel": bumped}), old_label="a", new_label="b").changes]
    assert rows == [
        ("build", "sgl-kernel", "changed", recorded.input_digest, bumped.input_digest, "inputs changed: rebuild"),
        ("build-requirement", "cmake", "added", None, "4.0.0", "build sgl-kernel"),
        ("build-requirement", "ninja", "removed", "1.11.1", None, "build sgl-kernel"),
        ("build-requirement", "packaging", "changed", "26.4", "26.4", "build sgl-kernel; same version, other hashes"),
        ("build-requirement", "scikit-build-core", "changed", "1.1.2", "1.1.3", "build sgl-kernel"),
    ]
    # Only the requirements changed (a lock edited by hand): named, never "another wheel sha256"
    # between two equal hashes.
    edited = replace(recorded, requirements=(f"ninja==1.11.1 {H1}", f"packaging==26.4 {H1}",
                                             f"scikit-build-core==1.1.3 {H1} {H2}"))
    rows = [(c.kind, c.name, c.old, c.new, c.note)
            for c in diff_locks(old, replace(old, builds={"sgl-kernel": edited}), old_label="a", new_label="b").changes]
    assert rows == [("build-requirement", "scikit-build-core", "1.1.2", "1.1.3",
                     "build sgl-kernel; its input digest did not change")]


def test_the_venv_digest_and_its_python_are_changes() -> None:
    old = sample_lock(venv_python="3.12.3")
    other_venv = old.with_venv_digest("sha256:" + "7" * 64, "3.12.3")
    rows: list[tuple[str | None, ...]] = [(c.kind, c.name, c.action, c.old, c.new, c.note)
            for c in diff_locks(old, other_venv, old_label="a", new_label="b").changes]
    assert rows == [("env", "venv-digest", "changed", old.venv_digest, other_venv.venv_digest,
                     "same wheels, another venv")]
    other_python = old.with_venv_digest("sha256:" + "7" * 64, "3.12.4")
    rows = [(c.kind, c.name, c.action, c.old, c.new, c.note)
            for c in diff_locks(old, other_python, old_label="a", new_label="b").changes]
    assert rows == [("env", "venv-digest", "changed", old.venv_digest, other_python.venv_digest,
                     "same wheels, another venv"),
                    ("env", "venv-python", "changed", "3.12.3", "3.12.4", "")]
    # Before its first sync a lock has none; another package makes another venv, said plainly.
    rows = [(c.kind, c.name, c.action, c.note)
            for c in diff_locks(old.with_venv_digest(None), old, old_label="a", new_label="b").changes]
    assert rows == [("env", "venv-digest", "added", ""), ("env", "venv-python", "added", "")]
    fewer = replace(other_venv, packages=old.packages[:1])
    rows = [(c.kind, c.name, c.note) for c in diff_locks(old, fewer, old_label="a", new_label="b").changes]
    assert rows == [("env", "venv-digest", ""), ("package", "sgl-kernel", "")]


def test_diff_prints_and_reports_build_requirements_and_the_venv_digest(ws: ScratchWorkspace, cli: Cli) -> None:
    recorded = replace(sample_lock().builds["sgl-kernel"], requirements=(f"scikit-build-core==1.1.2 {H1}",))
    old = sample_lock(builds={"sgl-kernel": recorded})
    new = replace(old, builds={"sgl-kernel": replace(recorded, requirements=(f"scikit-build-core==1.1.3 {H1}",))},
                  venv_digest="sha256:" + "7" * 64)
    (ws.root / "locks" / "a.toml").write_text(old.to_toml())
    (ws.root / "locks" / "b.toml").write_text(new.to_toml())
    r = cli("diff", "locks/a.toml", "locks/b.toml")
    assert (r.code, r.out.splitlines()) == (0, [
        "--- locks/a.toml",
        "+++ locks/b.toml",
        "builds:",
        "  no rebuild sgl-kernel: inputs unchanged",
        "download: 10 B -> 10 B (+0 B); size unknown: torch (before); torch (after)",
        "changes:",
        f"~ env      venv-digest: {old.venv_digest} -> {new.venv_digest}  (same wheels, another venv)",
        "~ build-requirement scikit-build-core: 1.1.2 -> 1.1.3  (build sgl-kernel; its input digest did not change)",
        "2 changes, 2 packages identical",
    ]), r.err
    doc = json.loads(cli("diff", "locks/a.toml", "locks/b.toml", "--json").out)
    assert doc["changes"] == [
        {"kind": "env", "name": "venv-digest", "action": "changed", "old": old.venv_digest, "new": new.venv_digest,
         "note": "same wheels, another venv"},
        {"kind": "build-requirement", "name": "scikit-build-core", "action": "changed", "old": "1.1.2",
         "new": "1.1.3", "note": "build sgl-kernel; its input digest did not change"},
    ]


# -- the report: reasoned from the two locks and a DiffContext ------------------------------------

def _pkg(name: str, version: str, char: str, index: str | None = "https://x/simple",
         size: int | None = 100) -> LockedPackage:
    return LockedPackage(canonicalize_name(name), version, (Artifact(char * 64, url=f"https://x/{name}-{version}.whl",
                                                                     size=size),), index=index)


def test_a_build_names_the_recipe_its_build_requirements_or_what_the_lock_does_not_record() -> None:
    from envlock.model.lockdiff import BuildFacts, DiffContext

    old = sample_lock(spec_keys={"builds.sgl-kernel": "1", "env": "def"})
    recorded = replace(old.builds["sgl-kernel"], requirements=(f"scikit-build-core==1.1.2 {H1}",))
    old = replace(old, builds={"sgl-kernel": recorded})
    rebuilt = replace(recorded, input_digest="sha256:" + "8" * 64, requirements=(f"scikit-build-core==1.1.3 {H1}",))
    new = replace(old, builds={"sgl-kernel": rebuilt}, spec_keys={"builds.sgl-kernel": "2", "env": "def"})
    ctx = DiffContext(builds={"sgl-kernel": BuildFacts("sglang", "sgl-kernel", False, ("torch",))},
                      recipe_keys={"sgl-kernel": ("config-settings",)})
    (verdict,) = diff_locks(old, new, old_label="a", new_label="b", context=ctx).builds
    assert (verdict.rebuild, verdict.pending, verdict.text()) == (True, False, (
        "sgl-kernel: the recipe [builds.sgl-kernel]: config-settings; "
        "build requirement scikit-build-core 1.1.2 -> 1.1.3"))
    # The same digest move with nothing the locks show: what the digest covers beyond them.
    quiet = replace(old, builds={"sgl-kernel": replace(recorded, input_digest="sha256:" + "8" * 64)})
    (verdict,) = diff_locks(old, quiet, old_label="a", new_label="b", context=ctx).builds
    assert verdict.text() == ("sgl-kernel: an input the lock does not record moved (the toolchain: compilers, "
                              "cmake, nvcc, uv; the interpreter or the host)")
    assert [i.kind for i in verdict.inputs] == ["unrecorded"]
    # No spec read (two lock paths outside a workspace): a patch may as well have moved; not guessed.
    (verdict,) = diff_locks(old, quiet, old_label="a", new_label="b", context=DiffContext()).builds
    assert verdict.text() == ("sgl-kernel: cannot tell why: its source, patches and recipe are named by the env's "
                              "spec, which this diff did not read (run it in the env's workspace, or with --root)")


def test_torch_moving_rebuilds_a_non_isolated_build_and_not_an_isolated_one() -> None:
    from envlock.model.lockdiff import BuildFacts, DiffContext

    old = sample_lock()
    kernel = old.builds["sgl-kernel"]
    old = replace(old, builds={"sgl-kernel": kernel, "iso": replace(kernel, input_digest="sha256:" + "3" * 64)},
                  spec_keys={"builds.sgl-kernel": "1", "builds.iso": "2"})
    torch = replace(old.packages[0], version="2.12.0.dev20260310+cu130",
                    wheels=(Artifact("c" * 64, url="https://x/torch.whl"),))
    new = replace(old, packages=(torch, old.packages[1]), builds={"iso": old.builds["iso"]})
    ctx = DiffContext(builds={"sgl-kernel": BuildFacts("sglang", "sgl-kernel", False, ("torch",)),
                              "iso": BuildFacts("sglang", "iso", True)})
    verdicts = {b.name: (b.rebuild, b.pending, b.text()) for b in
                diff_locks(old, new, old_label="a", new_label="b", context=ctx).builds}
    assert verdicts == {
        "iso": (False, False, "iso: inputs unchanged"),
        "sgl-kernel": (True, True, "sgl-kernel: torch 2.12.0.dev20260307+cu130 -> 2.12.0.dev20260310+cu130; "
                                   "pending: not built for this lock yet"),
    }
    # Without the spec the locks still say it rebuilds, and no more than they know.
    texts = {b.name: b.text() for b in diff_locks(old, new, old_label="a", new_label="b").builds}
    assert texts["sgl-kernel"] == "sgl-kernel: pending: not built for this lock yet"


def test_nightlies_are_one_line_per_index_and_date_pair() -> None:
    from envlock.model.lockdiff import DiffContext

    nightly = "https://n/simple"
    old = replace(sample_lock(), packages=(
        _pkg("torch", "2.12.0.dev20260307", "1", nightly), _pkg("torchvision", "0.27.0.dev20260307", "2", nightly),
        _pkg("helper", "1.0.dev20260301", "3", "https://other/simple"), _pkg("pytorch-triton", "3.5.0", "4", nightly),
        _pkg("requests", "2.0", "5")),
        nightlies={"torch": NightlyPin("2026-03-07", "2.12.0.dev20260307"),
                   "torchvision": NightlyPin("2026-03-07", "0.27.0.dev20260307"),
                   "helper": NightlyPin("2026-03-01", "1.0.dev20260301")})
    new = replace(old, packages=(
        _pkg("torch", "2.12.0.dev20260308", "6", nightly), _pkg("torchvision", "0.27.0.dev20260308", "7", nightly),
        _pkg("helper", "1.0.dev20260302", "8", "https://other/simple"), _pkg("pytorch-triton", "3.6.0", "9", nightly),
        _pkg("requests", "2.1", "a")),
        nightlies={"torch": NightlyPin("2026-03-08", "2.12.0.dev20260308"),
                   "torchvision": NightlyPin("2026-03-08", "0.27.0.dev20260308"),
                   "helper": NightlyPin("2026-03-02", "1.0.dev20260302")})
    ctx = DiffContext(index_names={nightly: "pytorch-nightly"}, nightly_order=("torchvision", "torch"))
    d = diff_locks(old, new, old_label="a", new_label="b", context=ctx)
    assert [n.line() for n in d.nightlies] == [
        "pytorch-nightly 2026-03-07 -> 2026-03-08: torchvision, torch, pytorch-triton 3.5.0 -> 3.6.0",
        "https://other/simple 2026-03-01 -> 2026-03-02: helper",
    ]
    assert {p.name: p.why for p in d.packages}["requests"] == ()


def test_package_reasons_the_locks_show_and_download_sizes() -> None:
    from envlock.model.lockdiff import DiffContext

    old = replace(sample_lock(), packages=(_pkg("a", "1.0", "1"), _pkg("fa4", "4.0", "2", size=None),
                                      _pkg("fi", "0.6.4", "3")),
                  spec_keys={"packages.a": "x", "resolution": "r1"})
    new = replace(old, packages=(_pkg("a", "2.0", "4", size=250), _pkg("fi", "0.6.5", "5")),
                  spec_keys={"packages.a": "y", "resolution": "r2"})
    ctx = DiffContext(overrides={"fi": "fi==0.6.5"}, excludes=frozenset({"fa4"}))
    d = diff_locks(old, new, old_label="a", new_label="b", context=ctx)
    assert [(p.name, p.action, p.why, p.old_size, p.new_size) for p in d.packages] == [
        ("a", "changed", ("packages.a edited in the spec",), 100, 250),
        ("fa4", "removed", ("resolution.exclude names it",), None, None),
        ("fi", "changed", ("resolution.overrides: fi==0.6.5 (resolution edited)",), 100, 100),
    ]
    assert (d.old_size.known, d.old_size.unknown, d.new_size.known, d.new_size.unknown) == (200, ("fa4",), 350, ())


def test_a_build_new_in_the_spec_and_one_never_built_in_either_lock() -> None:
    old = replace(sample_lock(), builds={}, packages=sample_lock().packages[:1], spec_keys={"builds.never": "1"})
    new = replace(old, spec_keys={"builds.never": "1", "builds.fresh": "2"})
    verdicts = {b.name: (b.action, b.rebuild, b.pending, b.text()) for b in
                diff_locks(old, new, old_label="a", new_label="b").builds}
    # Built for neither lock and nothing it reads moved (a --version move of another package): no rebuild pending.
    assert verdicts == {
        "fresh": ("added", True, True, "fresh: new build; pending: not built for this lock yet"),
        "never": ("unchanged", False, True, "never: inputs unchanged; not built for either lock yet"),
    }
    # Built for the old lock, not for the new one, with no input the locks show moving: said so, not bare.
    old = sample_lock(spec_keys={"builds.sgl-kernel": "1"})
    new = replace(old, builds={}, packages=old.packages[:1])
    ctx = DiffContext(builds={"sgl-kernel": BuildFacts("sglang", "sgl-kernel", True)})
    (kernel,) = diff_locks(old, new, old_label="a", new_label="b", context=ctx).builds
    assert (kernel.rebuild, kernel.text()) == (True, "sgl-kernel: an input the lock does not record moved (the "
                                                     "toolchain: compilers, cmake, nvcc, uv; the interpreter or the "
                                                     "host); pending: not built for this lock yet")


def test_two_recipes_in_the_store_name_the_toolchain_that_moved() -> None:
    from envlock.model.lockdiff import DiffContext

    old = sample_lock()
    new = replace(old, builds={"sgl-kernel": replace(old.builds["sgl-kernel"], input_digest="sha256:" + "8" * 64)})
    recipe = {"python": "3.12.3", "host": "linux-x86_64", "machine": "x86_64",
              "toolchain": {"cc": "cc (GCC) 13.2", "cmake": "cmake version 3.28.3", "nvcc": "absent"}}
    moved = {**recipe, "toolchain": {"cc": "cc (GCC) 13.2", "cmake": "cmake version 3.31.0", "nvcc": "absent"}}
    ctx = DiffContext(recipes={"sgl-kernel": (recipe, moved)})
    (verdict,) = diff_locks(old, new, old_label="a", new_label="b", context=ctx).builds
    assert verdict.text() == "sgl-kernel: toolchain cmake: cmake version 3.28.3 -> cmake version 3.31.0"
