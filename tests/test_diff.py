"""Lock diffs: what an upgrade changes, including same-version re-uploads."""

from __future__ import annotations

from dataclasses import replace

from envlock.diff import diff_locks
from envlock.lockfile import Artifact, LockedPatch, LockedSource, NightlyPin
from test_lockfile import sample


def test_identical_locks_have_no_changes() -> None:
    d = diff_locks(sample(), sample(), old_label="a", new_label="b")
    assert d.changes == ()
    assert d.unchanged == 2


def test_nightly_upgrade_source_bump_patch_change_and_reupload() -> None:
    old = sample()
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
    old = sample()
    new = replace(old, packages=old.packages[:1], sources={**old.sources, "extra": LockedSource("path", "x",
                                                                                               tree_digest="sha256:1")})
    rows = [(c.kind, c.name, c.action) for c in diff_locks(old, new, old_label="a", new_label="b").changes]
    assert rows == [("package", "sgl-kernel", "removed"), ("source", "extra", "added")]


def test_a_build_is_a_rebuild_only_when_its_inputs_changed() -> None:
    old = sample()
    recorded = old.builds["sgl-kernel"]
    same_inputs = replace(old, builds={"sgl-kernel": replace(recorded, sha256="9" * 64)})
    new_inputs = replace(old, builds={"sgl-kernel": replace(recorded, input_digest="sha256:" + "8" * 64)})
    rows = [(c.kind, c.name, c.old, c.new, c.note) for c in diff_locks(old, same_inputs, old_label="a",
                                                                        new_label="b").changes]
    assert rows == [("build", "sgl-kernel", "b" * 64, "9" * 64, "same inputs, another wheel sha256")]
    rows = [(c.kind, c.name, c.old, c.new, c.note) for c in diff_locks(old, new_inputs, old_label="a",
                                                                        new_label="b").changes]
    assert rows == [("build", "sgl-kernel", recorded.input_digest, "sha256:" + "8" * 64, "inputs changed: rebuild")]
