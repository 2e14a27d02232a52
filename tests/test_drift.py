"""drift.unvouched: each locked package held to the spec (named, or required through the lock's recorded
graph; from the index the spec takes it from, or the wheel of one of its builds), anything else named."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from envlock.model.lockfile import Artifact, Lock, LockedBuild, LockedPackage
from envlock.model.spec import EnvSpec, read_spec
from envlock.resolution.drift import NO_GRAPH, unvouched

PYPI = "https://pypi.example/simple"
NIGHTLY = "https://nightly.example/whl"
KERNEL = "kernel-1.0-cp311-cp311-linux_x86_64.whl"


@pytest.fixture
def spec(tmp_path: Path) -> EnvSpec:
    path = tmp_path / "e.toml"
    path.write_text(f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "{PYPI}"\ndefault = true\n'
                    f'[indexes.nightly]\nurl = "{NIGHTLY}"\n'
                    '[packages]\napp = "==1.0"\ntorch = { index = "nightly" }\nkernel = { build = "kernel" }\n'
                    '[sources.kernel]\npath = "kernel"\n'
                    '[builds.kernel]\nsource = "kernel"\nisolation = false\nrequires = ["cmake>=3.26"]\n')
    return read_spec(path, name="e")[0]


def _pkg(name: str, version: str, index: str | None, *, url: str | None = None, path: str | None = None,
         sha: str = "a") -> LockedPackage:
    filename = f"{name}-{version}-py3-none-any.whl"
    where = url if url is not None or path is not None else f"https://files.example/{filename}"
    return LockedPackage(canonicalize_name(name), version,
                         (Artifact(sha * 64, url=where if path is None else None, path=path),), index=index)


@pytest.fixture
def lock(spec: EnvSpec) -> Lock:
    return Lock(env="e", python="3.11", platform=None, spec_digest=spec.digest(), spec_keys=spec.key_digests(),
                packages=(_pkg("app", "1.0", PYPI), _pkg("cmake", "3.30", PYPI), _pkg("dep", "2.0", PYPI),
                          _pkg("kernel", "1.0", None, path=f"../wheelhouse/{KERNEL}", sha="b"),
                          _pkg("torch", "2.12", NIGHTLY), _pkg("triton", "3.6", PYPI)),
                builds={"kernel": LockedBuild("sha256:" + "c" * 64, KERNEL, "b" * 64)},
                requires={"app": ("dep",), "kernel": ("torch",), "torch": ("triton",)})


def test_a_lock_made_for_the_spec_is_vouched_for(spec: EnvSpec, lock: Lock) -> None:
    # app and torch named, dep and triton required through the graph, cmake a non-isolated build's
    # requirement, kernel the wheel the lock records for [builds.kernel].
    assert unvouched(spec, lock) == []


def _with(lock: Lock, name: str, **changes: Any) -> Lock:
    return replace(lock, packages=tuple(replace(p, **changes) if p.name == name else p for p in lock.packages))


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda lock: replace(lock, requires={"app": ("dep",), "kernel": ("torch",)}),
     "[[packages]] triton 3.6: required by nothing the spec asks for (not in [packages], nor required through the "
     "lock's tool.envlock.requires by what is) (edited by hand?)"),
    (lambda lock: _with(lock, "torch", index=PYPI),
     f"[[packages]] torch 2.12: index {PYPI}, but the spec takes torch from index 'nightly' ({NIGHTLY}) "
     "(edited by hand?)"),
    (lambda lock: _with(lock, "kernel", wheels=(Artifact("d" * 64, path=f"../wheelhouse/{KERNEL}"),)),
     f"[[packages]] kernel 1.0: ../wheelhouse/{KERNEL} (sha256 {'d' * 64}) is not the wheel the lock records for "
     f"[builds.kernel] ({KERNEL}, sha256 {'b' * 64}) (edited by hand?)"),
    (lambda lock: _with(lock, "dep", index=None, wheels=(Artifact("e" * 64, path="../wheelhouse/dep-2.0-py3-none-"
                                                                                 "any.whl"),)),
     f"[[packages]] dep 2.0: no index, and the spec builds no dep (../wheelhouse/dep-2.0-py3-none-any.whl); "
     f"expected a wheel of index 'pypi' ({PYPI}) (edited by hand?)"),
    (lambda lock: _with(lock, "dep", wheels=(Artifact("e" * 64, url="file:///srv/dep-2.0-py3-none-any.whl"),)),
     f"[[packages]] dep 2.0: file:///srv/dep-2.0-py3-none-any.whl is a file on this machine, not a file of index "
     f"{PYPI} (edited by hand?)"),
    (lambda lock: _with(lock, "dep", wheels=(Artifact("e" * 64, url="FILE:///srv/dep-2.0-py3-none-any.whl"),)),
     f"[[packages]] dep 2.0: FILE:///srv/dep-2.0-py3-none-any.whl is a file on this machine, not a file of index "
     f"{PYPI} (edited by hand?)"),  # a scheme is case-blind: the fetch read FILE: as a local path
    (lambda lock: replace(lock, requires=None), NO_GRAPH),
])
def test_each_way_out_of_the_spec_is_named(spec: EnvSpec, lock: Lock, edit: Callable[[Lock], Lock],
                                           reason: str) -> None:
    assert unvouched(spec, edit(lock)) == [reason]


def test_a_mirror_given_is_the_index_a_lock_made_through_it_records(spec: EnvSpec, lock: Lock) -> None:
    mirrored = _with(lock, "torch", index="https://mirror.internal/whl")
    assert len(unvouched(spec, mirrored)) == 1
    assert unvouched(spec, mirrored, {"nightly": "https://user:token@mirror.internal/whl/"}) == []


def test_a_stale_lock_is_held_to_the_spec_not_to_its_own_word_of_an_older_one(spec: EnvSpec, lock: Lock) -> None:
    # The lock's spec-digest and spec-keys are the lock's own word: a lock from a pull request that
    # zeroes its spec-digest and names a package in its spec-keys gets no more than one that does not.
    # A package moved to another index, or one the spec names nowhere, is refused all the same.
    old = replace(lock, spec_digest="sha256:" + "0" * 64,
                  spec_keys={**lock.spec_keys, "packages.gone": "x", "packages.torch": "y"},
                  packages=(*[p for p in lock.packages if p.name != "torch"], _pkg("torch", "2.12", PYPI),
                            _pkg("gone", "1.0", NIGHTLY)))
    stale = "(the spec changed since, or edited by hand?)"
    assert unvouched(spec, old) == [
        f"[[packages]] torch 2.12: index {PYPI}, but the spec takes torch from index 'nightly' ({NIGHTLY}) {stale}",
        "[[packages]] gone 1.0: required by nothing the spec asks for (not in [packages], nor required through the "
        f"lock's tool.envlock.requires by what is) {stale}",
        f"[[packages]] gone 1.0: index {NIGHTLY}, but the spec takes gone from index 'pypi' ({PYPI}) {stale}"]


@pytest.mark.parametrize("url", [
    "file:///srv/idx/../elsewhere/dep-2.0-py3-none-any.whl",
    "file:///srv/idx/%2e%2e/elsewhere/dep-2.0-py3-none-any.whl",
    "file:///srv/idx/%2E%2E/elsewhere/dep-2.0-py3-none-any.whl",
    "file:///srv/idx/dep/../../elsewhere/dep-2.0-py3-none-any.whl",
    "file:///srv/idx/./dep-2.0-py3-none-any.whl",
    "file:///srv/idx-evil/dep-2.0-py3-none-any.whl",
    "file://attacker.example/srv/idx/dep-2.0-py3-none-any.whl",
])
def test_a_file_wheel_of_an_index_on_disk_stays_inside_its_folder(tmp_path: Path, url: str) -> None:
    # What the fetch reads is the URL's path unquoted: a ".." (or "%2e%2e") part leaves the folder.
    path = tmp_path / "e.toml"
    path.write_text('[env]\npython = "3.11"\n[indexes.disk]\nurl = "file:///srv/idx"\ndefault = true\n'
                    '[packages]\ndep = "==2.0"\n')
    disk = read_spec(path, name="e")[0]
    lock = Lock(env="e", python="3.11", platform=None, spec_digest=disk.digest(), spec_keys=disk.key_digests(),
                packages=(_pkg("dep", "2.0", "file:///srv/idx", url=url),), requires={})
    assert unvouched(disk, lock) == [f"[[packages]] dep 2.0: {url} is a file on this machine, not a file of index "
                                     "file:///srv/idx (edited by hand?)"]
    inside = replace(lock, packages=(_pkg("dep", "2.0", "file:///srv/idx",
                                          url="file:///srv/idx/dep/dep-2.0-py3-none-any.whl"),))
    assert unvouched(disk, inside) == []
