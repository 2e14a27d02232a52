"""Resolution against the loopback universe: nightly pins, index pins, hashes, component sets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from packaging.pylock import Pylock
from packaging.utils import canonicalize_name
from packaging.version import Version

from envlock import runner
from envlock.commands.lock import lock_env
from envlock.commands.sync import SyncOptions, sync
from envlock.errors import ResolveError
from envlock.install import fetch as fetch_module
from envlock.install.fetch import fetch
from envlock.model.lockfile import Artifact, LockedPackage, read_lock
from envlock.model.mirrors import MirrorOptions
from envlock.net.indexes import IndexFile
from envlock.resolution.nightly import nightlies_by_date, nightly_date
from envlock.resolution.resolve import ResolveInputs, _stored_package
from envlock.resolution.unhashed import hash_unlisted
from envlock.store.store import Store, store_file
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.universe import TORCH, TRITON, Universe, spec_text
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace


def lock(ws_root: Path, name: str = "e") -> dict:  # type: ignore[type-arg]
    lock_env(Workspace(ws_root), name)
    return tomllib.loads(Workspace(ws_root).lock_path(name).read_text())


@pytest.mark.parametrize(
    ("version", "date"),
    [("2.12.0.dev20260307+cu130", "2026-03-07"), ("3.6.0a20260307", "2026-03-07"),
     ("2.12.0.dev2026030701", "2026-03-07"), ("2.9.1", None), ("1.0.dev3", None), ("1.0.dev20261399", None)],
)
def test_nightly_date_from_dev_or_pre_segment(version: str, date: str | None) -> None:
    assert nightly_date(Version(version)) == date


def test_nightly_pin_resolves_exact_version_and_tag(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON
                                 + 'torchvision = { nightly = "2026-03-07", local = "cu130", index = "pytorch" }'))
    doc = lock(ws.root)
    versions = {p["name"]: p["version"] for p in doc["packages"]}
    assert versions["torch"] == "2.12.0.dev20260307+cu130"
    assert versions["torchvision"] == "0.27.0.dev20260307+cu130"
    assert versions["pytorch-triton"] == "3.6.0+git5e7b3f4e"
    assert doc["tool"]["envlock"]["nightlies"]["torch"] == {
        "date": "2026-03-07", "version": "2.12.0.dev20260307+cu130"}


def test_hostile_default_index_package_never_wins(ws: ScratchWorkspace, universe: Universe) -> None:
    # torch, pytorch-triton and torchvision 99.0 sit on the default index with higher versions.
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    doc = lock(ws.root)
    for pkg in doc["packages"]:
        assert pkg["version"] != "99.0", pkg
        if pkg["name"] in ("torch", "pytorch-triton"):
            assert pkg["index"] == universe.pytorch
            assert pkg["wheels"][0]["url"].startswith(universe.server.base + "/pytorch/files/")
    assert universe.server.downloads("torch-99.0-py3-none-any.whl") == []
    assert universe.server.downloads("pytorch_triton-99.0-py3-none-any.whl") == []


def test_unpinned_dependency_of_a_nightly_is_not_taken_from_the_default_index(
        ws: ScratchWorkspace, universe: Universe) -> None:
    # torch needs pytorch-triton==3.6.0+git5e7b3f4e, which only the pytorch index has; the
    # spec doesn't pin pytorch-triton there, so the only candidate is PyPI's hostile 99.0: refuse.
    ws.write_spec("e", spec_text(universe, TORCH))
    with pytest.raises(ResolveError) as info:
        lock_env(Workspace(ws.root), "e")
    assert "uv found no resolution for env 'e'" in info.value.message
    assert "pytorch-triton" in str(info.value)
    assert not (ws.root / "locks" / "pylock.e.toml").exists()


def test_every_artifact_has_sha256_even_without_index_hashes(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'tinydep = "==1.0"'))
    doc = lock(ws.root)
    for pkg in doc["packages"]:
        (wheel,) = pkg["wheels"]
        filename = wheel["url"].rsplit("/", 1)[1]
        served = next(p for p in (universe.server.root).rglob(filename))
        assert wheel["hashes"]["sha256"] == sha256_of(served)


def test_lock_is_valid_pep751_and_byte_identical(ws: ScratchWorkspace, universe: Universe, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'otherdep = ">=1"'))
    lock_env(Workspace(ws.root), "e")
    first = ws.lock_text("e")
    Pylock.from_dict(tomllib.loads(first))
    (ws.root / "locks" / "pylock.e.toml").unlink()
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cold-cache"))  # a cold uv cache too
    result = lock_env(Workspace(ws.root), "e")
    assert result.changed
    assert ws.lock_text("e") == first
    assert lock_env(Workspace(ws.root), "e").changed is False


def test_missing_nightly_date_names_nearest_dates(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'torch = { nightly = "2026-03-04", local = "cu130", index = "pytorch" }'))
    with pytest.raises(ResolveError) as info:
        lock_env(Workspace(ws.root), "e")
    assert info.value.message.endswith(
        "packages.torch.nightly: no nightly with local tag +cu130 dated 2026-03-04 on index 'pytorch' "
        f"({universe.pytorch}); listed range 2026-03-01 .. 2026-03-10; nearest dates with a wheel for python 3.11 "
        "on x86_64-manylinux_2_28: 2026-03-02 before, 2026-03-05 after"
    )  # more cases: tests/test_nightly.py, tests/test_nightlies.py


def test_a_relock_keeps_a_nightly_the_index_dropped_while_the_store_holds_it(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.index import IndexServer

    # Nightly indexes keep ~60 builds: a spec edit weeks later must still lock the pinned torch.
    server = IndexServer(tmp_path / "served").start()
    try:
        server.add_index("pytorch", hashes=False)
        tag = "cp311-cp311-manylinux_2_28_x86_64"
        old, new = (build_wheel(tmp_path / "wheels", "torch", f"2.12.0.dev{d}+cu130", tag=tag)
                    for d in ("20260307", "20260310"))
        server.add("pytorch", old, new)
        server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
        spec = ("[env]\npython = \"3.11\"\nplatform = \"x86_64-manylinux_2_28\"\n"
                f"[indexes.pypi]\nurl = \"{server.url('pypi')}\"\ndefault = true\n"
                f"[indexes.pytorch]\nurl = \"{server.url('pytorch')}\"\n"
                '[packages]\ntorch = { nightly = "2026-03-07", local = "cu130", index = "pytorch" }\n')
        ws.write_spec("e", spec)
        first = lock(ws.root)
        del server.indexes["pytorch"].files[old.name]  # the index moves on
        assert lock_env(Workspace(ws.root), "e").changed is False  # nothing to do, nothing downloaded
        ws.write_spec("e", spec + 'tinydep = "==1.0"\n')  # a real edit
        relocked = lock(ws.root)
        torch = next(p for p in relocked["packages"] if p["name"] == "torch")
        assert torch["wheels"] == next(p for p in first["packages"] if p["name"] == "torch")["wheels"]
        assert relocked["tool"]["envlock"]["nightlies"]["torch"]["version"] == "2.12.0.dev20260307+cu130"
        assert len(server.downloads(old.name)) == 1  # hashed once, by the first lock
        # Without the wheel in the store (another machine), the date is gone: say so.
        monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "fresh-home"))
        with pytest.raises(ResolveError, match="no nightly with local tag \\+cu130 dated 2026-03-07"):
            lock_env(Workspace(ws.root), "e")
    finally:
        server.stop()


@pytest.mark.parametrize(("python", "local", "index_url", "kept"), [
    ("3.11", "cu130", "{url}", True),
    ("3.11", "CU130", "{url}", True),  # the spec's spelling of the tag, normalized
    ("3.11", "cu130", "{creds}", True),  # the lock keeps the index URL without its credentials
    ("3.11", "cu130", "http://mirror.internal/pytorch/simple", False),  # another index: its listing decides
    ("3.11", "cpu", "{url}", False),  # another local tag
    ("3.12", "cu130", "{url}", False),  # the kept wheel is cp311's
])
def test_a_kept_nightly_is_the_same_package_index_tag_and_target(
        universe: Universe, store: Store, tmp_path: Path, python: str, local: str, index_url: str, kept: bool) -> None:
    from envlock.model.lockfile import NightlyPin
    from envlock.model.spec import load_spec
    from envlock.resolution.resolve import kept_pins

    served = universe.server.indexes["pytorch"].files
    filename = next(f for f in served if f.startswith("torch-2.12.0.dev20260307+cu130-cp311"))
    art = Artifact(sha256=sha256_of(served[filename]), url=universe.server.file_url("pytorch", filename))
    fetch([art], store, base_dir=tmp_path)
    url = universe.pytorch
    creds = url.replace("http://", "http://user:secret@")
    spec_file = tmp_path / "e.toml"
    pin = f'torch = {{ nightly = "2026-03-07", local = "{local}", index = "pytorch" }}'
    spec_file.write_text(spec_text(universe, pin, python=python))
    inputs = ResolveInputs(
        index_urls={"pypi": universe.pypi, "flashinfer": universe.flashinfer,
                    "pytorch": index_url.format(url=url, creds=creds)},
        store=store, hash_unlisted=fetch_module.hash_unlisted,
        kept_nightlies={"torch": (NightlyPin("2026-03-07", "2.12.0.dev20260307+cu130"), art, url)})
    assert ("torch" in kept_pins(load_spec(spec_file), inputs)) is kept


def test_a_nightly_date_takes_the_days_latest_build_the_target_can_install(
        ws: ScratchWorkspace, tmp_path: Path) -> None:
    from kit.index import IndexServer

    # Builds of one day go up one python at a time: 23:00's has no cp311 wheel yet.
    server = IndexServer(tmp_path / "served").start()
    try:
        server.add_index("pt", hashes=False)
        wheels = tmp_path / "wheels"
        for build, pythons in (("2026030701", ("cp311", "cp312")), ("2026030723", ("cp312",))):
            for py in pythons:
                server.add("pt", build_wheel(wheels, "torch", f"2.12.0.dev{build}+cu130",
                                             tag=f"{py}-{py}-manylinux_2_28_x86_64"))
        server.add("pypi", build_wheel(wheels, "tinydep", "1.0"))
        spec = ("[env]\npython = \"{py}\"\nplatform = \"x86_64-manylinux_2_28\"\n"
                f"[indexes.pypi]\nurl = \"{server.url('pypi')}\"\ndefault = true\n"
                f"[indexes.pt]\nurl = \"{server.url('pt')}\"\n"
                '[packages]\ntorch = { nightly = "2026-03-07", local = "cu130", index = "pt" }\n')
        ws.write_spec("e", spec.replace("{py}", "3.11"))
        assert lock(ws.root)["tool"]["envlock"]["nightlies"]["torch"]["version"] == "2.12.0.dev2026030701+cu130"
        ws.write_spec("e", spec.replace("{py}", "3.12"))
        assert lock(ws.root)["tool"]["envlock"]["nightlies"]["torch"]["version"] == "2.12.0.dev2026030723+cu130"
        ws.write_spec("e", spec.replace("{py}", "3.13"))
        with pytest.raises(ResolveError) as info:
            lock(ws.root)
        assert info.value.message.endswith(
            f"packages.torch.nightly: index 'pt' ({server.url('pt')}) lists torch nightlies dated 2026-03-07, but "
            "none with a wheel for python 3.13 on x86_64-manylinux_2_28: that date has manylinux_2_28_x86_64 "
            "(cp311, cp312) only; no listed date has a wheel for python 3.13 on x86_64-manylinux_2_28: they have "
            "manylinux_2_28_x86_64 (cp311, cp312)")
        # A date not listed at all, and none for the target: what the listed ones are for.
        ws.write_spec("e", spec.replace("{py}", "3.13").replace("2026-03-07", "2026-03-08"))
        with pytest.raises(ResolveError, match=r"no nightly with local tag \+cu130 dated 2026-03-08 on index 'pt' "
                                               r".*; listed range 2026-03-07 .. 2026-03-07; no listed date has a "
                                               r"wheel for python 3.13 on x86_64-manylinux_2_28: they have "
                                               r"manylinux_2_28_x86_64 \(cp311, cp312\)\n"):
            lock(ws.root)
        # ... and the target's own dates when it has some: not a cp311-only build of 03-09.
        server.add("pt", build_wheel(wheels, "torch", "2.12.0.dev20260309+cu130",
                                     tag="cp311-cp311-manylinux_2_28_x86_64"))
        ws.write_spec("e", spec.replace("{py}", "3.12").replace("2026-03-07", "2026-03-08"))
        with pytest.raises(ResolveError, match=r"dated 2026-03-08 .*: 2026-03-07 before, none after\n"):
            lock(ws.root)
    finally:
        server.stop()


def test_a_package_pinned_to_an_index_that_lacks_it_is_named(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, 'tinydep = { index = "flashinfer" }'))
    with pytest.raises(ResolveError) as info:
        lock(ws.root)
    assert info.value.message.endswith(
        f"e.toml: packages.tinydep.index: index 'flashinfer' ({universe.flashinfer}) lists no tinydep")


def test_nightly_from_html_only_index(ws: ScratchWorkspace, universe: Universe) -> None:
    universe.server.html_only.add("pytorch")
    try:
        ws.write_spec("e", spec_text(universe, 'torch = { nightly = "2026-03-10", local = "cpu", index = "pytorch" }\n'
                                     + TRITON))
        doc = lock(ws.root)
    finally:
        universe.server.html_only.discard("pytorch")
    assert {p["name"]: p["version"] for p in doc["packages"]}["torch"] == "2.12.0.dev20260310+cpu"


def test_same_version_set_is_enforced(ws: ScratchWorkspace, universe: Universe) -> None:
    packages = ('flashinfer-python = "==0.6.5"\nflashinfer-cubin = "==0.6.5"\n'
                'flashinfer-jit-cache = { version = "==0.6.4+cu130", index = "flashinfer" }')
    extra = ('[resolution]\nexclude = ["sgl-fa4"]\n'
             'same-version = [["flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"]]')
    assert _refused(ws, universe, packages, extra).details == (
        "resolution.same-version[0]: public versions differ: flashinfer-python 0.6.5, flashinfer-cubin 0.6.5, "
        "flashinfer-jit-cache 0.6.4+cu130",
    )


def _refused(ws: ScratchWorkspace, universe: Universe, packages: str, extra: str) -> ResolveError:
    """The ResolveError locking env "e" of ``packages`` and ``extra`` raises."""
    ws.write_spec("e", spec_text(universe, packages, extra))
    with pytest.raises(ResolveError) as info:
        lock_env(Workspace(ws.root), "e")
    return info.value


def test_same_version_name_missing_from_the_lock_is_an_error(ws: ScratchWorkspace, universe: Universe) -> None:
    # A misspelt name used to drop out of the comparison, so the check held vacuously.
    packages = 'flashinfer-python = "==0.6.5"\nflashinfer-cubin = "==0.6.5"'
    extra = '[resolution]\nexclude = ["sgl-fa4"]\nsame-version = [["flashinfer-python", "flashinfer-cubn"]]'
    assert _refused(ws, universe, packages, extra).details == (
        "resolution.same-version[0]: 'flashinfer-cubn' is not in the resolved lock (did you mean "
        "'flashinfer-cubin'?); expected names of packages the env resolves to",
    )
    assert not (ws.root / "locks" / "pylock.e.toml").exists()


@pytest.mark.parametrize(
    ("groups", "details"),
    [
        ('[["requests", "urlib3"]]',
         ["resolution.same-version[0]: 'urlib3' is not in the resolved lock (did you mean 'urllib3'?); "
          "expected names of packages the env resolves to"]),
        ('[["requests", "urllib3"], ["zzz", "kernel", "requests"]]',
         ["resolution.same-version[0]: public versions differ: requests 2.34.2, urllib3 2.5.0",
          "resolution.same-version[1]: 'zzz' is not in the resolved lock; expected names of packages the env "
          "resolves to"]),
        ('[["kernel", "requests"], ["requests", "Requests"]]', []),  # a build's wheel is not resolved here
    ],
)
def test_check_same_version(tmp_path: Path, groups: str, details: list[str]) -> None:
    from envlock.model.spec import parse_spec
    from envlock.resolution.resolve import check_same_version

    doc = tomllib.loads('[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\ndefault = true\n'
                       '[packages]\nrequests = "==2.34.2"\nkernel = { build = "kernel" }\n'
                       '[sources.kernel]\ngit = "https://x/kernel"\nrev = "main"\n[builds.kernel]\nsource = "kernel"\n'
                       f"[resolution]\nsame-version = {groups}\n")
    spec = parse_spec(doc, name="e", origin=tmp_path / "e.toml")
    resolved = [LockedPackage(canonicalize_name(n), v, (Artifact("a" * 64, url=f"https://x/{n}-{v}-py3-none-any.whl"),))
                for n, v in [("requests", "2.34.2"), ("urllib3", "2.5.0"), ("idna", "3.10")]]
    if not details:
        check_same_version(spec, resolved)
        return
    with pytest.raises(ResolveError) as info:
        check_same_version(spec, resolved)
    assert list(info.value.details) == details
    assert info.value.message == f"{tmp_path / 'e.toml'}: inconsistent component set"


def test_overrides_and_excludes(ws: ScratchWorkspace, universe: Universe) -> None:
    # flashinfer-python 0.6.5 requires sgl-fa4 and flashinfer-cubin==0.6.5; override the cubin down
    # (as an env fighting an upstream == pin would) and exclude sgl-fa4.
    packages = 'flashinfer-python = "==0.6.5"'
    extra = '[resolution]\noverrides = ["flashinfer-cubin==0.6.4"]\nexclude = ["sgl-fa4"]'
    ws.write_spec("e", spec_text(universe, packages, extra))
    versions = {p["name"]: p["version"] for p in lock(ws.root)["packages"]}
    assert versions == {"flashinfer-cubin": "0.6.4", "flashinfer-python": "0.6.5", "tinydep": "1.1"}


def test_an_override_range_cannot_move_the_specs_own_pin(ws: ScratchWorkspace, universe: Universe) -> None:
    # uv lets an override replace every requirement on a package, the spec's own included:
    # a range may pass the spec's check, but the lock must still hold the spec's pin.
    packages = 'flashinfer-cubin = "==0.6.4"'
    extra = '[resolution]\noverrides = ["flashinfer-cubin>=0.6.4"]'
    ws.write_spec("e", spec_text(universe, packages, extra))
    with pytest.raises(ResolveError) as info:
        lock(ws.root)
    assert info.value.message.endswith("e.toml: the resolution does not keep the spec's pins")
    assert list(info.value.details) == ["packages.flashinfer-cubin: pinned ==0.6.4, but the resolution has 0.6.5"]
    assert not (ws.root / "locks" / "pylock.e.toml").exists()


def test_an_override_cannot_take_a_declared_package_out_of_the_env(ws: ScratchWorkspace, universe: Universe) -> None:
    # A marker false for the target drops the requirement, as `exclude` does: never a declared one.
    extra = '[resolution]\noverrides = ["tinydep==1.0; sys_platform == \'win32\'"]'
    ws.write_spec("e", spec_text(universe, 'tinydep = "==1.0"', extra))
    with pytest.raises(ResolveError) as info:
        lock(ws.root)
    assert list(info.value.details) == ["packages.tinydep: declared, but the resolution leaves it out (an override "
                                        "of it with a marker false for this target?)"]
    assert not (ws.root / "locks" / "pylock.e.toml").exists()


def test_mirror_by_option_and_environment(ws: ScratchWorkspace, cli: Cli, universe: Universe,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The spec names the real index; without the mirror the test's closed proxy fails it.
    real_url = "https://download.pytorch.org/whl/nightly/cu130"
    text = spec_text(universe, TORCH + TRITON).replace(universe.pytorch, real_url)
    ws.write_spec("e", text)
    unmirrored = cli("lock", "e")
    assert unmirrored.code == 1 and "download.pytorch.org" in unmirrored.err
    result = cli("lock", "e", "--index", f"pytorch={universe.pytorch}", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["nightlies"] == {"torch": "2.12.0.dev20260307+cu130"}
    by_option = ws.lock_text("e")
    assert f'index = "{universe.pytorch}"' in by_option  # the wheels were found on the mirror
    (ws.root / "locks" / "pylock.e.toml").unlink()
    monkeypatch.setenv("ENVLOCK_INDEX_PYTORCH", universe.pytorch)
    assert cli("lock", "e").code == 0
    assert ws.lock_text("e") == by_option
    # A mirror's credentials are used, never printed (the output lands in CI logs).
    secret = universe.pytorch.replace("http://", "http://ci:s3cret@")
    for extra in ((), ("--json",)):
        shown = cli("lock", "e", "--index", f"pytorch={secret}", *extra)
        assert shown.code == 0, shown.err
        assert "s3cret" not in shown.out + shown.err and universe.pytorch in shown.out
    assert ws.lock_text("e") == by_option


def test_real_qwen_spec_index_part_locks_against_mirrors(ws: ScratchWorkspace, universe: Universe) -> None:
    """envs/qwen35-blackwell.toml minus its builds, every index mirrored to the kit's."""
    real = tomllib.loads((Path(__file__).resolve().parents[1] / "envs" / "qwen35-blackwell.toml").read_text())
    packages = {k: v for k, v in real["packages"].items() if not (isinstance(v, dict) and "build" in v)}
    assert set(packages) >= {"torch", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"}
    import json

    lines = [f'[env]\npython = "{real["env"]["python"]}"\nplatform = "{real["env"]["platform"]}"']
    for name, idx in real["indexes"].items():
        default = "\ndefault = true" if idx.get("default") else ""
        lines.append(f"[indexes.{name}]\nurl = {json.dumps(idx['url'])}{default}")
    lines.append("[packages]")
    lines += [f"{json.dumps(k)} = {json.dumps(v) if isinstance(v, str) else _inline(v)}" for k, v in packages.items()]
    lines.append("[resolution]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in real["resolution"].items() if k != "allow-overlap"]
    lines.append(f"allow-overlap = [{', '.join(_inline(o) for o in real['resolution']['allow-overlap'])}]")
    ws.write_spec("qwen-index", "\n".join(lines) + "\n")
    mirrors = {"pypi": universe.pypi, "pytorch-nightly": universe.pytorch, "flashinfer": universe.flashinfer}
    lock_env(Workspace(ws.root), "qwen-index", MirrorOptions(indexes=mirrors))
    text = ws.lock_text("qwen-index")
    Pylock.from_dict(tomllib.loads(text))
    got = read_lock(ws.root / "locks" / "pylock.qwen-index.toml")
    versions: dict[str, str] = {p.name: p.version for p in got.packages}
    assert versions["torch"] == "2.12.0.dev20260307+cu130"
    assert versions["torchvision"] == "0.27.0.dev20260307+cu130"
    assert versions["flashinfer-python"] == versions["flashinfer-cubin"] == "0.6.5"
    assert versions["flashinfer-jit-cache"] == "0.6.5+cu130"
    assert "sgl-fa4" not in versions
    assert all(len(w.sha256) == 64 for p in got.packages for w in p.wheels)
    assert got.python == "3.12"


def _inline(table: dict) -> str:  # type: ignore[type-arg]
    import json

    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def test_index_credentials_are_used_but_never_written_or_shown(ws: ScratchWorkspace, universe: Universe) -> None:
    secret_url = universe.pytorch.replace("http://", "http://alice:s3cret@")
    ws.write_spec("e", spec_text(universe, TORCH + TRITON).replace(universe.pytorch, secret_url))
    lock_env(Workspace(ws.root), "e")
    text = ws.lock_text("e")
    assert "s3cret" not in text and "alice" not in text
    assert f'index = "{universe.pytorch}"' in text
    ws.write_spec("e", spec_text(universe, 'torch = { nightly = "2026-03-04", local = "cu130", index = "pytorch" }')
                  .replace(universe.pytorch, secret_url))
    with pytest.raises(ResolveError) as info:
        lock_env(Workspace(ws.root), "e")
    assert "s3cret" not in str(info.value) and f"({universe.pytorch})" in str(info.value)


def _inputs(store: Store, **given: Any) -> ResolveInputs:
    """What the resolver needs to hash wheels no index hashes: the store, and fetch's downloader."""
    return ResolveInputs(index_urls={}, store=store, hash_unlisted=fetch_module.hash_unlisted, **given)



def test_wheel_without_any_hash_is_hashed_into_the_store_once(universe: Universe, store: Store,
                                                              tmp_path: Path) -> None:
    # uv reports the hashes it computed; for a wheel it reports none for (an index with
    # neither hashes nor a download by uv), envlock downloads the bytes into the store,
    # where the sync after the lock finds them, and a relock keeps that hash.
    filename = next(f for f in universe.server.indexes["pytorch"].files if f.startswith("torch-2.12.0.dev20260307"))
    url = universe.server.file_url("pytorch", filename)
    served = sha256_of(universe.server.indexes["pytorch"].files[filename])
    shown = RecordedProgress()
    inputs = _inputs(store, progress=shown)
    before = len(universe.server.downloads(filename))
    sha, size, downloaded = hash_unlisted("torch", "2.12.0.dev20260307+cu130", url, inputs)
    art = Artifact(sha256=sha, url=url, size=size)
    assert sha == served and sha256_of(store_file(store, art)) == served
    assert size == downloaded == universe.server.indexes["pytorch"].files[filename].stat().st_size
    assert len(universe.server.downloads(filename)) == before + 1
    assert shown.events == [("begin", art.filename, size), ("advance", art.filename, size), ("end", art.filename, 0)]
    assert [a.source for a in fetch([art], store, base_dir=tmp_path).artifacts] == ["store"]
    # A relock: the earlier lock's hash is kept while the store holds its bytes, and so
    # is what the store recorded for the URL (a lock that failed after hashing it).
    relock = _inputs(store, hashed={url: art})
    assert hash_unlisted("torch", "2.12.0.dev20260307+cu130", url, relock) == (sha, size, 0)
    assert hash_unlisted("torch", "2.12.0.dev20260307+cu130", url, inputs) == (sha, size, 0)
    # A lock written before sizes were recorded for these: the size comes from the store.
    unsized = _inputs(store, hashed={url: Artifact(sha256=sha, url=url)})
    assert hash_unlisted("torch", "2.12.0.dev20260307+cu130", url, unsized) == (sha, size, 0)
    assert len(universe.server.downloads(filename)) == before + 1
    store.remove_entry("wheels", sha)
    assert hash_unlisted("torch", "2.12.0.dev20260307+cu130", url, relock) == (sha, size, size)
    assert len(universe.server.downloads(filename)) == before + 2
    with pytest.raises(ResolveError, match=r"^torch 1.0: cannot hash .*/gone.whl: gone.whl: download failed"):
        hash_unlisted("torch", "1.0", universe.server.file_url("pytorch", "gone.whl"), inputs)


def _hashed_nightly(universe: Universe, store: Store, prefix: str) -> tuple[str, str, ResolveInputs]:
    """A nightly of the universe (by file name ``prefix``) hashed into ``store`` as a lock does;
    its file name, URL, and the inputs of a relock whose earlier lock has that hash."""
    filename = next(f for f in universe.server.indexes["pytorch"].files if f.startswith(prefix))
    url = universe.server.file_url("pytorch", filename)
    sha, size, _ = hash_unlisted("torch", "v", url, _inputs(store))
    earlier = Artifact(sha256=sha, url=url, size=size)
    return filename, url, _inputs(store, hashed={url: earlier})


def test_a_relock_checks_the_url_still_holds_those_bytes_and_the_store_copy_is_whole(
        universe: Universe, store: Store, tmp_path: Path) -> None:
    served = universe.server.indexes["pytorch"].files
    filename = next(f for f in served if f.startswith("torch-2.12.0.dev20260306+cu130-cp311"))
    url = universe.server.file_url("pytorch", filename)
    original = served[filename]
    inputs = _inputs(store)
    sha, size, _ = hash_unlisted("torch", "2.12.0.dev20260306+cu130", url, inputs)
    relock = _inputs(store, hashed={url: Artifact(sha256=sha, url=url, size=size)})
    probes = universe.server.probes(filename)
    assert hash_unlisted("torch", "v", url, relock) == (sha, size, 0)
    assert universe.server.probes(filename) == probes + 1  # one byte asked for, not the file
    # Uploaded again under the same URL (other bytes, another size): hashed again, not kept.
    reupload = build_wheel(tmp_path / "reupload", "torch", "2.12.0.dev20260306+cu130",
                           files={"torch/new.py": "X = 2\n" * 100}, tag="cp311-cp311-manylinux_2_28_x86_64")
    served[filename] = reupload
    try:
        new_sha, new_size, got = hash_unlisted("torch", "v", url, relock)
        assert (new_sha, new_size) == (sha256_of(reupload), reupload.stat().st_size) and got == new_size
        assert hash_unlisted("torch", "v", url, inputs)[:2] == (new_sha, new_size)  # the store's record too
        # Uploaded again with bytes of the very same size: the ETag recorded when hashed tells.
        same_size = _same_size_other_bytes(reupload, tmp_path / "same-size")
        served[filename] = same_size
        assert hash_unlisted("torch", "v", url, relock)[:2] == (sha256_of(same_size), new_size)
    finally:
        served[filename] = original
    # A store copy of another size than recorded is damaged: named, with what to do.
    copy = store_file(store, Artifact(sha256=sha, url=url))
    copy.chmod(0o644)
    copy.write_bytes(copy.read_bytes()[:-1])
    with pytest.raises(ResolveError, match=rf"is {size - 1} bytes, the lock says {size} .*the store entry is "
                                           rf"damaged; remove {re.escape(str(copy.parent))} and lock again"):
        hash_unlisted("torch", "v", url, relock)


def _same_size_other_bytes(wheel: Path, dest: Path) -> Path:
    """``wheel`` uploaded again: the same name and size, one byte of its zip trailer other."""
    dest.mkdir(parents=True, exist_ok=True)
    data = bytearray(wheel.read_bytes())
    data[-30] ^= 0xFF
    (dest / wheel.name).write_bytes(bytes(data))
    return dest / wheel.name


def test_a_relock_takes_the_bytes_the_store_last_hashed_from_the_url(universe: Universe, store: Store,
                                                                      tmp_path: Path) -> None:
    # The lock says A; since then a lock here hashed B, uploaded at the same size (and then
    # failed): the URL holds B, which the store has, so B is locked without a download.
    filename, url, lock_a = _hashed_nightly(universe, store, "torch-2.12.0.dev20260301+cu130-cp311")
    (sha_a, size), = [(a.sha256, a.size) for a in lock_a.hashed.values()]
    served = universe.server.indexes["pytorch"].files
    original = served[filename]
    served[filename] = _same_size_other_bytes(original, tmp_path / "b")
    try:
        sha_b, _, got = hash_unlisted("torch", "v", url, _inputs(store))
        assert sha_b != sha_a and got == size
        before = len(universe.server.downloads(filename))
        assert hash_unlisted("torch", "v", url, lock_a) == (sha_b, size, 0)
        assert len(universe.server.downloads(filename)) == before
        # B's bytes removed from the store by hand: the lock's A is still not what the URL holds.
        store.remove_entry("wheels", sha_b)
        assert hash_unlisted("torch", "v", url, lock_a) == (sha_b, size, size)
    finally:
        served[filename] = original


@pytest.mark.parametrize("replicas", [2, 3])
def test_relocks_against_hosts_with_their_own_etags_stop_downloading(universe: Universe, store: Store,
                                                                     replicas: int) -> None:
    universe.server.replicas = replicas
    try:
        _, url, relock = _hashed_nightly(universe, store, "torch-2.12.0.dev20260301+cu130-cp312")
        downloaded = [hash_unlisted("torch", "v", url, relock)[2] for _ in range(8)]
    finally:
        universe.server.replicas = 1
    assert sum(1 for n in downloaded if n) < replicas  # each host's ETag learnt once, at most
    assert downloaded[-4:] == [0, 0, 0, 0]


def test_a_server_without_etags_is_judged_by_the_size(universe: Universe, store: Store, tmp_path: Path) -> None:
    from envlock.net import http

    assert http.validator('"abc"', "Mon, 30 Nov 2026 06:00:00 GMT") == 'etag "abc"'
    assert http.validator(None, "Mon, 30 Nov 2026 06:00:00 GMT") == "modified Mon, 30 Nov 2026 06:00:00 GMT"
    assert http.validator(None, None) is None
    universe.server.replicas = 0
    try:
        filename, url, relock = _hashed_nightly(universe, store, "torch-2.12.0.dev20260302+cu130-cp311")
        (known,) = relock.hashed.values()
        assert hash_unlisted("torch", "v", url, relock) == (known.sha256, known.size, 0)
        # Uploaded again at another size: hashed again.
        served = universe.server.indexes["pytorch"].files
        original = served[filename]
        served[filename] = build_wheel(tmp_path / "other", "torch", "2.12.0.dev20260302+cu130",
                                       files={"torch/x.py": "X = 1\n" * 50}, tag="cp311-cp311-manylinux_2_28_x86_64")
        try:
            again = hash_unlisted("torch", "v", url, relock)
            assert again == (sha256_of(served[filename]), served[filename].stat().st_size, again[1])
            assert again[1] != known.size and again[2] == again[1]
        finally:
            served[filename] = original
    finally:
        universe.server.replicas = 1


def test_two_locks_hashing_one_nightly_download_it_once(universe: Universe, store: Store) -> None:
    import threading

    served = universe.server.indexes["pytorch"].files
    filename = next(f for f in served if f.startswith("torch-2.12.0.dev20260305+cu130-cp311"))
    url = universe.server.file_url("pytorch", filename)
    before = len(universe.server.downloads(filename))  # the universe is the session's: earlier tests count too
    universe.server.faults[filename] = "slow"  # the second waits for the first's partial file
    results: list[object] = []
    try:
        threads = [threading.Thread(target=lambda: results.append(fetch_module.fetch_unhashed(url, store)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        universe.server.faults.pop(filename)
    assert len(universe.server.downloads(filename)) == before + 1
    assert sorted(r.source for r in results) == ["download", "store"]  # type: ignore[attr-defined]
    assert list(store.partial_dir.glob("*.part")) == []


class RecordedProgress:
    """Progress that records what it is told (advances summed per file)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int | None]] = []

    def begin(self, name: str, total: int | None) -> None:
        self.events.append(("begin", name, total))

    def advance(self, name: str, nbytes: int) -> None:
        if self.events[-1][:2] == ("advance", name):
            nbytes += self.events.pop()[2] or 0
        self.events.append(("advance", name, nbytes))

    def end(self, name: str) -> None:
        self.events.append(("end", name, 0))


def test_a_pinned_nightly_crosses_the_network_once_for_lock_relock_and_sync(
        ws: ScratchWorkspace, universe: Universe) -> None:
    # Handed the nightly's URL, uv downloaded it to hash it on every lock, and the sync
    # downloaded it once more. It is stored first now, and uv reads the store copy.
    filename = next(f for f in universe.server.indexes["pytorch"].files if f.startswith("torch-2.12.0.dev20260307"))
    served = universe.server.indexes["pytorch"].files[filename]
    before = len(universe.server.downloads(filename))
    # A first try fails after the nightly was stored (pytorch-triton not pinned to its
    # index): the store's record of the URL spares the next try the download.
    ws.write_spec("e", spec_text(universe, TORCH))
    with pytest.raises(ResolveError, match="uv found no resolution"):
        lock_env(Workspace(ws.root), "e")
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    lock_env(Workspace(ws.root), "e")
    text = ws.lock_text("e")
    torch = next(p for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages if p.name == "torch")
    assert torch.wheels[0].url == universe.server.file_url("pytorch", filename)  # the index's URL, not the store's
    assert (torch.wheels[0].sha256, torch.wheels[0].size) == (sha256_of(served), served.stat().st_size)
    assert torch.index == universe.pytorch and "file:" not in text
    assert lock_env(Workspace(ws.root), "e").changed is False
    sync(Workspace(ws.root), "e", SyncOptions())
    assert len(universe.server.downloads(filename)) == before + 1
    assert ws.lock_text("e").startswith(text.split("[tool.envlock]")[0].rstrip())


def test_a_wheel_uv_picks_from_a_hashless_index_crosses_the_network_once(
        ws: ScratchWorkspace, universe: Universe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytorch-triton has no pin (uv picks the version torch requires) and its index publishes
    # no hash. Asked for a pylock, uv downloaded it to hash it (twice with a cold cache) and
    # the sync downloaded it again. uv is asked for its version first (metadata only, by
    # range requests), and the wheel is stored and hashed once, like a pinned nightly.
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "cold-uv-cache"))
    filename = next(f for f in universe.server.indexes["pytorch"].files
                    if f.startswith("pytorch_triton-3.6.0") and "cp311" in f)
    served = universe.server.indexes["pytorch"].files[filename]

    def whole_file_gets() -> int:  # uv's metadata reads are range requests (of the whole file, for so small a wheel)
        return sum(1 for path, rng in universe.server.requests if path.endswith("/" + filename) and not rng)

    before = whole_file_gets()
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    lock_env(Workspace(ws.root), "e")
    assert whole_file_gets() == before + 1
    triton = next(p for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages if p.name == "pytorch-triton")
    assert (triton.version, triton.index) == ("3.6.0+git5e7b3f4e", universe.pytorch)
    assert triton.wheels[0] == Artifact(sha256=sha256_of(served), url=universe.server.file_url("pytorch", filename),
                                        size=served.stat().st_size)
    # torch's own metadata requires that pytorch-triton exactly: one uv run per lock, a relock
    # and a new nightly date included (the same pytorch-triton, held in the store, is probed).
    passes = _uv_passes(monkeypatch)
    assert lock_env(Workspace(ws.root), "e").changed is False
    assert passes == [("pylock.toml", True)]
    result = sync(Workspace(ws.root), "e", SyncOptions())
    assert result.fetched == 1  # tinydep, from the default index
    assert whole_file_gets() == before + 1
    ws.write_spec("e", spec_text(universe, TORCH.replace("2026-03-07", "2026-03-10") + TRITON))
    assert lock_env(Workspace(ws.root), "e").changed is True
    assert passes == [("pylock.toml", True)] * 2
    assert whole_file_gets() == before + 1


@contextlib.contextmanager
def _two_indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pypi: Sequence[Path],
                 hashless: Sequence[Path]) -> Iterator[IndexServer]:
    """A loopback ``pypi`` index (hashes published) and a ``hashless`` one (none, as PyTorch's),
    serving these wheels, with a cold uv cache."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    server = IndexServer(tmp_path / "served")
    server.add_index("pypi", hashes=True)
    server.add_index("hashless", hashes=False)
    server.add("pypi", *pypi)
    server.add("hashless", *hashless)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _two_index_spec(server: IndexServer, packages: str) -> str:
    return (f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
            f'[indexes.hashless]\nurl = "{server.url("hashless")}"\n[packages]\n{packages}')


#: A spec's part pinning `top` by an exact override to the hash-less index, `companion` taken from there.
PINNED_TOP = ('top = { index = "hashless" }\ncompanion = { index = "hashless" }\nplain = "==1.0"\n'
              '[resolution]\noverrides = ["top==1.0"]\n')


def _uv_passes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each ``uv pip compile`` run from now on whose answer was read (a relock's run started ahead
    and taken included, one it ended not): (its output format, whether it succeeded)."""
    passes: list[tuple[str, bool]] = []
    real_uv, real_result = runner.uv, runner.Started.result

    def counted(result: runner.Result) -> runner.Result:
        if "compile" in result.argv:
            passes.append((result.argv[result.argv.index("--format") + 1], result.ok))
        return result

    def counting(args: Sequence[str | os.PathLike[str]], **kwargs: Any) -> runner.Result:
        return counted(real_uv(args, **kwargs))

    monkeypatch.setattr(runner, "uv", counting)
    monkeypatch.setattr(runner.Started, "result", lambda started: counted(real_result(started)))
    return passes


def test_an_unpinned_hashless_wheel_no_pinned_wheel_requires_is_chosen_by_asking_uv(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `top` (hashed index, not pinned by the spec) requires `companion` exactly: uv is asked for
    # versions first, each lock, so a relock for new pins takes the version they need.
    w = tmp_path / "w"
    tops = [build_wheel(w, "top", v, requires=[f"companion=={v}"]) for v in ("1.0", "2.0")]
    with _two_indexes(tmp_path, monkeypatch, tops, [build_wheel(w, "companion", v) for v in ("1.0", "2.0")]) as server:
        ws.write_spec("e", _two_index_spec(server, 'top = "==1.0"\ncompanion = { index = "hashless" }\n'))
        lock_env(Workspace(ws.root), "e")
        passes = _uv_passes(monkeypatch)
        ws.write_spec("e", _two_index_spec(server, 'top = "==2.0"\ncompanion = { index = "hashless" }\n'))
        assert lock_env(Workspace(ws.root), "e").changed is True
        assert passes == [("requirements.txt", True), ("pylock.toml", True)]  # no pinned wheel requires it
        locked: dict[str, LockedPackage] = {p.name: p for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages}
        assert (locked["top"].version, locked["companion"].version) == ("2.0", "2.0")
        served = server.indexes["hashless"].files["companion-2.0-py3-none-any.whl"]
        assert locked["companion"].wheels[0] == Artifact(
            sha256=sha256_of(served), url=server.file_url("hashless", served.name), size=served.stat().st_size)
        assert [rng for path, rng in server.requests if path.endswith("/companion-2.0-py3-none-any.whl")
                and not rng] == [""]  # stored once, by envlock


def test_a_hashless_wheel_a_pinned_wheel_requires_is_probed_on_relock_and_locks_alike_anywhere(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version comes from the pinned wheel's metadata, not from an earlier lock or the store:
    a re-upload under the same URL is seen (as for a nightly), and a fresh store locks the same."""
    w = tmp_path / "w"
    with _two_indexes(tmp_path, monkeypatch, [build_wheel(w, "plain", "1.0")],
                      [build_wheel(w, "top", "1.0", requires=["companion==1.0"]),
                       build_wheel(w, "companion", "1.0")]) as server:
        ws.write_spec("e", _two_index_spec(server, PINNED_TOP))
        passes = _uv_passes(monkeypatch)
        lock_env(Workspace(ws.root), "e")
        assert passes == [("pylock.toml", True)]  # the version read off top's metadata: one uv run
        first = read_lock(ws.root / "locks" / "pylock.e.toml").package("companion")
        assert first is not None and first.version == "1.0"
        # Uploaded again under its URL, with other bytes: the relock's probe sees it and hashes anew.
        again = build_wheel(tmp_path / "w2", "companion", "1.0", files={"companion/__init__.py": "CHANGED = 1\n"})
        server.add("hashless", again)
        lock_env(Workspace(ws.root), "e")
        relocked = ws.lock_text("e")
        companion = read_lock(ws.root / "locks" / "pylock.e.toml").package("companion")
        assert companion is not None and companion.wheels[0].sha256 == sha256_of(again) != first.wheels[0].sha256
        # Another machine (no lock, empty store) locks the same bytes.
        monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "elsewhere"))
        (ws.root / "locks" / "pylock.e.toml").unlink()
        lock_env(Workspace(ws.root), "e")
        assert ws.lock_text("e") == relocked


def test_an_exact_public_requirement_with_local_builds_listed_is_left_to_uv(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `==1.0` admits 1.0+loc1 (PEP 440), which uv takes: reading the version off the metadata
    # would lock 1.0 here and 1.0+loc1 wherever the pin is not stored (another transport).
    w = tmp_path / "w"
    with _two_indexes(tmp_path, monkeypatch, [build_wheel(w, "plain", "1.0")],
                      [build_wheel(w, "top", "1.0", requires=["companion==1.0"]),
                       *(build_wheel(w, "companion", v) for v in ("1.0", "1.0+loc1"))]) as server:
        ws.write_spec("e", _two_index_spec(server, PINNED_TOP))
        passes = _uv_passes(monkeypatch)
        lock_env(Workspace(ws.root), "e")
        companion = read_lock(ws.root / "locks" / "pylock.e.toml").package("companion")
        assert companion is not None and companion.version == "1.0+loc1"
        assert passes == [("requirements.txt", True), ("pylock.toml", True)]


#: A nightly of `top` on the hash-less index (its date's build requires `companion` exactly).
TOP_NIGHTLY = 'top = { nightly = "2026-03-07", local = "cu130", index = "hashless" }\n'
COMPANION = 'companion = { index = "hashless" }\n'


def _old_top(w: Path) -> Path:
    return build_wheel(w, "top", "2.12.0.dev20260307+cu130", requires=["companion==3.6.0+gitaaa"])


def _index_moves_on(server: IndexServer, w: Path, dropped: Sequence[Path]) -> None:
    """The hash-less index drops ``dropped`` (as PyTorch's drops old nightlies) and lists a newer
    `top` with the newer `companion` it requires."""
    for wheel in dropped:
        (server.root / "hashless" / wheel.name).unlink()
        del server.indexes["hashless"].files[wheel.name]
    server.add("hashless", build_wheel(w, "top", "2.12.0.dev20260320+cu130", requires=["companion==3.7.0+gitbbb"]),
               build_wheel(w, "companion", "3.7.0+gitbbb"))


@contextlib.contextmanager
def _locked_top_and_companion(ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              w: Path) -> Iterator[tuple[IndexServer, list[Path]]]:
    """The env `e` locked with `top`'s nightly and the `companion` it requires, both from the
    hash-less index; yields the server and those two wheels."""
    old = [_old_top(w), build_wheel(w, "companion", "3.6.0+gitaaa")]
    with _two_indexes(tmp_path, monkeypatch, [build_wheel(w, "plain", "1.0")], old) as server:
        ws.write_spec("e", _two_index_spec(server, TOP_NIGHTLY + COMPANION))
        lock_env(Workspace(ws.root), "e")
        yield server, old


def test_a_kept_nightly_keeps_the_stored_wheel_it_requires_when_the_index_dropped_both(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # PyTorch's index keeps ~60 nightlies: torch and the pytorch-triton it requires drop off together.
    w = tmp_path / "w"
    with _locked_top_and_companion(ws, tmp_path, monkeypatch, w) as (server, old):
        _index_moves_on(server, w, old)
        ws.write_spec("e", _two_index_spec(server, TOP_NIGHTLY + COMPANION + 'plain = "==1.0"\n'))
        lock_env(Workspace(ws.root), "e")  # an edit of the spec, locked again
        locked = {p.name: p.version for p in read_lock(ws.root / "locks" / "pylock.e.toml").packages}
        assert locked == {"companion": "3.6.0+gitaaa", "plain": "1.0", "top": "2.12.0.dev20260307+cu130"}


def test_a_kept_nightly_never_takes_a_required_wheel_the_earlier_lock_had_from_another_index(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The torchtriton shape: the earlier lock took `companion` from the default index (not pinned
    # then); pinned to the hash-less index now, that wheel must not stand in for one of that index.
    w = tmp_path / "w"
    old_top = _old_top(w)
    on_pypi = [build_wheel(w, "plain", "1.0"), build_wheel(w, "companion", "3.6.0+gitaaa")]
    with _two_indexes(tmp_path, monkeypatch, on_pypi, [old_top]) as server:
        ws.write_spec("e", _two_index_spec(server, TOP_NIGHTLY))
        lock_env(Workspace(ws.root), "e")
        first = read_lock(ws.root / "locks" / "pylock.e.toml").package("companion")
        assert first is not None and first.index == server.url("pypi")
        sync(Workspace(ws.root), "e", SyncOptions())  # the store holds that wheel now
        _index_moves_on(server, w, [old_top])
        ws.write_spec("e", _two_index_spec(server, TOP_NIGHTLY + COMPANION))
        with pytest.raises(ResolveError, match="uv found no resolution"):
            lock_env(Workspace(ws.root), "e")


def test_a_kept_wheel_whose_url_is_on_another_server_than_its_index_is_not_kept(
        ws: ScratchWorkspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The lock's index field names the hash-less index; its URL (edited) names another server.
    w = tmp_path / "w"
    with _locked_top_and_companion(ws, tmp_path, monkeypatch, w) as (server, old):
        sync(Workspace(ws.root), "e", SyncOptions())  # the store holds both wheels
        lock_file = ws.root / "locks" / "pylock.e.toml"
        url = server.file_url("hashless", old[1].name)
        assert url.startswith("http://127.0.0.1:") and url in lock_file.read_text()
        lock_file.write_text(lock_file.read_text().replace(url, url.replace("127.0.0.1", "localhost")))
        _index_moves_on(server, w, old)
        with pytest.raises(ResolveError, match="uv found no resolution"):
            lock_env(Workspace(ws.root), "e")


def test_a_kept_wheel_must_be_on_its_index_server() -> None:
    # PyPI's files live on files.pythonhosted.org, PyTorch's on download.pytorch.org: a lock whose
    # index field was edited to name the PyTorch index keeps a URL on the other server.
    from envlock.net.auth import same_origin as _same_server

    index = "https://user:tok@download.pytorch.org/whl/nightly/cu130"
    assert _same_server("https://download.pytorch.org/whl/nightly/cu130/pytorch_triton-3.6.0-x.whl", index)
    assert not _same_server("https://files.pythonhosted.org/packages/aa/pytorch_triton-3.6.0-x.whl", index)
    assert not _same_server("http://download.pytorch.org/whl/pytorch_triton-3.6.0-x.whl", index)
    assert not _same_server("https://download.pytorch.org:8443/whl/x.whl", index)


def test_a_sync_that_relocks_counts_what_the_lock_downloaded(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("g", spec_text(universe, TORCH.replace("2026-03-07", "2026-03-06") + TRITON))
    result = sync(Workspace(ws.root), "g", SyncOptions())  # no lock yet: the sync locks first, hashing the nightly
    locked = read_lock(ws.root / "locks" / "pylock.g.toml").packages
    assert result.fetched == len(locked) - 2  # the nightly and pytorch-triton were stored by the lock
    served = {name: path.stat().st_size for idx in universe.server.indexes.values() for name, path in idx.files.items()}
    assert result.downloaded == sum(served[p.wheels[0].filename] for p in locked)


def test_uv_answer_for_a_stored_pin_must_be_that_file_at_its_version(store: Store) -> None:
    art = Artifact(sha256="a" * 64, url="http://i/torch-1.0-py3-none-any.whl", size=3)
    pin = IndexFile("torch-1.0-py3-none-any.whl", str(art.url), Version("1.0"), None)
    copy = str(store_file(store, art))

    def answer(path: str | None = copy, version: str = "1.0", sha: str = "a" * 64) -> dict[str, object]:
        archive = {"path": path, "hashes": {"sha256": sha}} if path else None
        return {"name": "torch", "version": version, **({"archive": archive} if archive else {})}

    def check(entry: dict[str, object]) -> object:
        return _stored_package(canonicalize_name("torch"), entry, pin, art, store, "http://u:p@i")

    with pytest.raises(ResolveError, match=f"uv hashed its store copy as sha256 {'b' * 64}, stored as {'a' * 64}"):
        check(answer(sha="b" * 64))  # the store entry changed under uv
    with pytest.raises(ResolveError, match=r"^torch: uv answered .*/elsewhere.whl.*expected the pinned wheel"):
        check(answer(path="/s/elsewhere.whl"))
    with pytest.raises(ResolveError, match=r"^torch: uv answered None, expected the pinned wheel"):
        check(answer(path=None))
    with pytest.raises(ResolveError, match=r"holds version 99.0, but its index lists it as 1.0"):
        check(answer(version="99.0"))
    locked = check(answer())
    assert locked == LockedPackage(name=canonicalize_name("torch"), version="1.0", wheels=(art,), index="http://i")


@pytest.mark.parametrize("local", ["cu130", "CU130", "Cu130"])
def test_nightly_local_tag_is_compared_as_pep440_normalizes_it(local: str) -> None:
    files = [IndexFile(f"torch-{v}-cp311-cp311-linux_x86_64.whl", f"https://x/{v}.whl", Version(v), None)
             for v in ("2.12.0.dev20260307+cu130", "2.12.0.dev20260307+cpu", "2.12.0.dev20260306+cu130")]
    assert nightlies_by_date(files, local) == {"2026-03-07": {Version("2.12.0.dev20260307+cu130")},
                                               "2026-03-06": {Version("2.12.0.dev20260306+cu130")}}


@contextlib.contextmanager
def _uv_answer_edited(edit: Callable[[str], str]) -> Iterator[None]:
    """Run the real uv, then change the pylock.toml it wrote (as an index or uv could answer)."""
    real = runner.uv

    def edited(args: Sequence[str | os.PathLike[str]], **kwargs: Any) -> runner.Result:
        result = real(args, **kwargs)
        answer = Path(kwargs["cwd"]) / "pylock.toml" if kwargs.get("cwd") else None
        if answer is not None and answer.is_file():
            answer.write_text(edit(answer.read_text()))
        return result

    runner.uv = edited
    try:
        yield
    finally:
        runner.uv = real


def _without_pytorch_hashes(text: str) -> str:
    return "\n".join(re.sub(r', hashes = \{ sha256 = "[0-9a-f]{64}" \}', "", line) if "/pytorch/files/" in line
                     else line for line in text.splitlines())


def test_a_lock_hashes_what_uv_reports_no_hash_for_once(ws: ScratchWorkspace, universe: Universe, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    hashed: list[str] = []
    real_fetch = fetch_module.fetch_unhashed

    def counting(url: str, store: Store, **kwargs: Any) -> Any:
        hashed.append(url.rsplit("/", 1)[1])
        return real_fetch(url, store, **kwargs)

    monkeypatch.setattr(fetch_module, "fetch_unhashed", counting)
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'tinydep = "==1.0"'))
    with _uv_answer_edited(_without_pytorch_hashes):
        lock_env(Workspace(ws.root), "e")
        first = ws.lock_text("e")
        locked = read_lock(ws.root / "locks" / "pylock.e.toml")
        for pkg in locked.packages:
            (art,) = pkg.wheels
            if "/pytorch/" in str(art.url):  # hashed by envlock: its sha256 and size are the served file's
                served = universe.server.indexes["pytorch"].files[art.filename]
                assert (art.sha256, art.size) == (sha256_of(served), served.stat().st_size)
        assert sorted(h.split("-")[0] for h in hashed) == ["pytorch_triton", "torch"]
        # A relock keeps those hashes while the store holds the bytes.
        assert lock_env(Workspace(ws.root), "e").changed is False
    assert len(hashed) == 2 and ws.lock_text("e") == first


def test_a_wheel_url_naming_another_folder_is_refused_at_lock(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    hostile = re.compile(r"/pypi/files/tinydep-[^\"]+\.whl")
    answer = _uv_answer_edited(lambda text: hostile.sub("/pytorch/files/x%2F..%2F..%2Fescaped.whl", text))
    refused = pytest.raises(ResolveError, match=r"names the file 'x/\.\./\.\./escaped\.whl', expected a plain")
    with answer, refused:
        lock_env(Workspace(ws.root), "e")
    assert universe.server.downloads("x%2F..%2F..%2Fescaped.whl") == []
    assert not (ws.root / "locks" / "pylock.e.toml").exists()
