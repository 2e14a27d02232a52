"""Targets (issue 30): one spec, several kinds of machine, one lock.

A loopback nightly index (no hashes, as PyTorch's) with a torch-like nightly for x86_64 (``+cu130``) and
aarch64 (no local tag), one date with no aarch64 wheel; a default index with a pure-Python and a native
(x86_64 and aarch64) package. Both targets are locked into one PEP 751 file, read by ``packaging.pylock``
and by uv for each target's platform; the x86_64 target is synced and verified here.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from envlock import runner
from envlock.errors import LockError, SpecError
from envlock.model.lockfile import Lock, read_lock
from envlock.model.spec import load_spec
from envlock.model.targets import pick, runs_here
from kit.inbackend import write_project
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli
from kit.workspaces import ScratchWorkspace as Workspace

X86, ARM = "manylinux_2_28_x86_64", "manylinux_2_28_aarch64"


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[IndexServer]:
    """``pypi`` (tinydep, pure; nativedep for x86_64 and aarch64) and ``nightly`` (torch, no hashes)."""
    w = tmp_path / "w"
    server = IndexServer(tmp_path / "served")
    server.add("pypi", build_wheel(w, "tinydep", "1.0"),
               build_wheel(w, "nativedep", "1.0", tag=f"cp311-cp311-{X86}"),
               build_wheel(w, "nativedep", "1.0", tag=f"cp311-cp311-{ARM}"))
    server.add_index("nightly", hashes=False)
    for day, arches in (("04", (X86, ARM)), ("05", (X86, ARM)), ("06", (X86,)), ("07", (X86, ARM))):
        for arch in arches:
            local = "+cu130" if arch == X86 else ""
            server.add("nightly", build_wheel(w, "torch", f"2.12.0.dev202603{day}{local}", tag=f"cp311-cp311-{arch}",
                                              requires=["tinydep>=1"]))
    with server.start() as started:
        yield started


def _spec(server: IndexServer, *, date: str = "2026-03-05", extra: str = "", targets: bool = True) -> str:
    head = f"""\
[env]
python = "3.11"
{'' if targets else 'platform = "x86_64-manylinux_2_28"'}

[indexes.pypi]
url = "{server.url('pypi')}"
default = true

[indexes.nightly]
url = "{server.url('nightly')}"

[packages]
torch = {{ nightly = "{date}", local = "cu130", index = "nightly" }}
nativedep = "==1.0"
{extra}"""
    if not targets:
        return head
    return head + """
[targets.x86]
platform = "x86_64-manylinux_2_28"
gpus = ["sm_120a"]

[targets.gb200]
platform = "aarch64-manylinux_2_28"
gpus = ["sm_100a"]
local = ""
"""


def _uv() -> str:
    return runner.uv_bin()


# -- item 1: targets in the spec -------------------------------------------------


def test_a_spec_without_targets_is_one_target_and_its_lock_is_unchanged(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes, targets=False))
    assert cli("lock", "e").code == 0
    text = ws.lock_text("e")
    spec = load_spec(ws.root / "envs" / "e.toml")
    assert (spec.targets, spec.target) == ({}, None)
    assert "environments" not in text and "marker" not in text and "[tool.envlock.targets" not in text
    assert read_lock(ws.root / "locks" / "pylock.e.toml").to_toml() == text
    # The repository's own committed locks read and write back byte for byte, as before targets.
    for path in sorted((Path(__file__).parents[1] / "locks").glob("pylock.*.toml")):
        committed = path.read_text(encoding="utf-8")
        assert Lock.from_toml(committed, path).to_toml() == committed
        assert Lock.from_toml(committed, path).multi is None


@pytest.mark.parametrize(("targets", "problems"), [
    ('[targets.x86]\npython = "3.11"\n', ['targets.x86.platform: missing; expected a string']),
    ('[targets.x86]\nplatform = "x86_64-apple-darwin"\n',
     ['targets.x86.platform: expected an x86_64 or aarch64 manylinux platform as uv spells it '
      '("x86_64-manylinux_2_28", "aarch64-manylinux_2_28"), found \'x86_64-apple-darwin\'']),
    ('[targets.x86]\nplatform = "x86_64-manylinux_2_28"\ngpu = ["sm_120a"]\n',
     ["targets.x86.gpu: unknown key (did you mean 'gpus'?); expected one of: build-env, exclude, gpus, local, "
      "nightly, overrides, platform, python"]),
    ('[targets.a]\nplatform = "x86_64-manylinux_2_28"\n[targets.b]\nplatform = "x86_64-manylinux_2_34"\n',
     ["targets.b: expected another platform or python than [targets.a] (x86_64, python 3.11): a lock cannot tell "
      "their machines apart"]),
    ('[targets.x86]\nplatform = "x86_64-manylinux_2_28"\ngpus = ["sm120"]\nnightly = "03-05"\nlocal = 1\n',
     ['targets.x86.gpus[0]: expected a GPU as nvcc names its arch ("sm_120a", "sm_90") or a compute capability '
      '("12.0"), found \'sm120\'', "targets.x86.nightly: expected a date YYYY-MM-DD, found '03-05'",
      'targets.x86.local: expected a local version tag like "cu130" ("" for none), found 1']),
    ('[targets."x 86"]\nplatform = "x86_64-manylinux_2_28"\n',
     ['targets."x 86": expected a target name of letters, digits, \'-\' or \'_\' (like "gb200"), found \'x 86\'']),
])
def test_a_bad_target_is_named_by_file_and_key(ws: Workspace, targets: str, problems: list[str]) -> None:
    path = ws.write_spec("e", f'[env]\npython = "3.11"\n\n[indexes.pypi]\nurl = "http://x/simple"\ndefault = true\n\n'
                              f'{targets}')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.message.startswith(f"{path}: ")
    assert list(info.value.details) == problems


def test_env_platform_and_targets_exclude_each_other(ws: Workspace) -> None:
    path = ws.write_spec("e", '[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"\n\n[indexes.pypi]\n'
                              'url = "http://x/simple"\ndefault = true\n\n[targets.a]\nplatform = '
                              '"aarch64-manylinux_2_28"\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert list(info.value.details) == ["env.platform: expected no platform in [env] when the spec has [targets]: "
                                        "each [targets.NAME] names its own platform"]


def test_a_target_sees_its_own_platform_gpus_date_and_local_tag(ws: Workspace, indexes: IndexServer) -> None:
    path = ws.write_spec("e", _spec(indexes).replace('local = ""\n', 'local = ""\nnightly = "2026-03-04"\n'))
    spec = load_spec(path)
    x86, arm = spec.for_target("x86"), spec.for_target("gb200")
    torch = canonicalize_name("torch")
    assert (x86.platform, x86.gpus, x86.packages[torch].nightly, x86.packages[torch].local) == (
        "x86_64-manylinux_2_28", ("sm_120a",), "2026-03-05", "cu130")
    assert (arm.platform, arm.gpus, arm.packages[torch].nightly, arm.packages[torch].local) == (
        "aarch64-manylinux_2_28", ("sm_100a",), "2026-03-04", None)
    assert (arm.digest(), arm.key_digests()) == (spec.digest(), spec.key_digests())  # the whole spec's


@pytest.mark.parametrize(("machine", "glibc", "chosen", "answer"), [
    ("x86_64", "2.36", None, "x86"),
    ("aarch64", "2.39", None, "gb200"),
    ("x86_64", "2.36", "gb200", "gb200"),
    ("x86_64", "2.17", None, "e.toml: this machine (x86_64, glibc 2.17) is none of the targets: gb200 "
                             "(aarch64-manylinux_2_28), x86 (x86_64-manylinux_2_28); name one with --target NAME "
                             "(a sync installs only on a machine of its target)"),
    ("x86_64", "2.36", "gb20", "e.toml: --target gb20: no such target (did you mean 'gb200'?); targets: gb200 "
                               "(aarch64-manylinux_2_28), x86 (x86_64-manylinux_2_28)"),
])
def test_the_target_a_command_works_on(machine: str, glibc: str, chosen: str | None, answer: str) -> None:
    platforms = {"x86": "x86_64-manylinux_2_28", "gb200": "aarch64-manylinux_2_28"}
    if " " not in answer:
        assert pick(platforms, chosen, "e.toml", machine=machine, glibc=glibc) == answer
        return
    with pytest.raises(LockError) as info:
        pick(platforms, chosen, "e.toml", machine=machine, glibc=glibc)
    assert info.value.message == answer


def test_several_targets_on_this_machine_need_one_chosen() -> None:
    platforms = {"a": "x86_64-manylinux_2_28", "b": "x86_64-manylinux_2_17"}
    assert runs_here("x86_64-manylinux_2_17", "x86_64", "2.28")
    with pytest.raises(LockError) as info:
        pick(platforms, None, "e.toml", machine="x86_64", glibc="2.36")
    assert info.value.message == "e.toml: 2 targets run on this machine (a, b); choose one with --target NAME"


# -- item 2: one lock for every target -----------------------------------------------


def test_both_targets_lock_into_one_pep751_file(ws: Workspace, cli: Cli, indexes: IndexServer,
                                                tmp_path: Path) -> None:
    from packaging.pylock import Pylock

    ws.write_spec("e", _spec(indexes))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    text = ws.lock_text("e")
    doc = tomllib.loads(text)
    x86 = "sys_platform == 'linux' and platform_machine == 'x86_64' and python_version == '3.11'"
    arm = "sys_platform == 'linux' and platform_machine == 'aarch64' and python_version == '3.11'"
    assert doc["environments"] == [arm, x86]  # sorted by target name: gb200, x86
    assert [(p["name"], p["version"], p.get("marker")) for p in doc["packages"]] == [
        ("nativedep", "1.0", arm), ("nativedep", "1.0", x86),
        ("tinydep", "1.0", None),  # the same wheel on both targets: once, with no marker
        ("torch", "2.12.0.dev20260305", arm), ("torch", "2.12.0.dev20260305+cu130", x86)]
    assert doc["tool"]["envlock"]["targets"]["gb200"]["platform"] == "aarch64-manylinux_2_28"
    assert doc["tool"]["envlock"]["targets"]["x86"]["nightlies"] == {
        "torch": {"date": "2026-03-05", "version": "2.12.0.dev20260305+cu130"}}
    Pylock.from_dict(doc)  # valid PEP 751
    assert "  nightly x86: torch -> 2.12.0.dev20260305+cu130" in r.out.splitlines()
    assert "  nightly gb200: torch -> 2.12.0.dev20260305" in r.out.splitlines()
    # The note of a package CUDA on one target only.
    assert ("  note: torch is a CUDA build on x86 (x86 2.12.0.dev20260305+cu130) and not on gb200 (gb200 "
            "2.12.0.dev20260305): check that those machines need no CUDA from it") in r.out.splitlines()
    # uv installs each target's part of the lock, for that platform.
    for platform, torch in (("x86_64-manylinux_2_28", "2.12.0.dev20260305+cu130"),
                            ("aarch64-manylinux_2_28", "2.12.0.dev20260305")):
        dry = runner.run([_uv(), "pip", "install", "--dry-run", "--python-platform", platform, "--python-version",
                          "3.11", "--target", str(tmp_path / platform), "-r", str(ws.root / "locks/pylock.e.toml")])
        assert dry.ok, dry.stderr
        assert f"torch=={torch}" in dry.stderr and "nativedep==1.0" in dry.stderr and "tinydep==1.0" in dry.stderr
    # Relocked: the same bytes. Each target reads back as its own one-target lock.
    assert cli("lock", "e").out.startswith("unchanged: locks/pylock.e.toml")
    assert ws.lock_text("e") == text
    locks = Lock.targets_of(doc, "x")
    assert {n: (lk.platform, [p.version for p in lk.packages]) for n, lk in locks.items()} == {
        "gb200": ("aarch64-manylinux_2_28", ["1.0", "1.0", "2.12.0.dev20260305"]),
        "x86": ("x86_64-manylinux_2_28", ["1.0", "1.0", "2.12.0.dev20260305+cu130"])}
    assert locks["gb200"].to_toml() == text and cli("lock", "e", "--check").code == 0


def test_a_date_one_target_lacks_fails_naming_it_and_the_dates_usable_on_all(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes, date="2026-03-06"))
    r = cli("lock", "e")
    assert r.code == 1
    url = indexes.url("nightly")
    assert r.err.splitlines() == [
        f"envlock: error: {ws.root}/envs/e.toml: a nightly date one of the targets cannot use",
        f"  targets.gb200: packages.torch.nightly = 2026-03-06: index 'nightly' ({url}) has no torch (no local tag) "
        "nightly of that date for python 3.11 on aarch64-manylinux_2_28; nearest dates usable on every target: "
        "2026-03-05 before, 2026-03-07 after, or give [targets.gb200] its own nightly = \"YYYY-MM-DD\""]
    assert not (ws.root / "locks" / "pylock.e.toml").exists()
    # Its own date: each target locks its own, and the file says which.
    ws.write_spec("e", _spec(indexes, date="2026-03-06") + 'nightly = "2026-03-05"\n')
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert {"  nightly x86: torch -> 2.12.0.dev20260306+cu130",
            "  nightly gb200: torch -> 2.12.0.dev20260305"} <= set(r.out.splitlines())


def test_a_target_taking_the_cpu_build_from_the_default_index_is_refused(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path) -> None:
    # torch-vision-like nightly pinned to the CUDA index; torch itself left to the default index.
    w = tmp_path / "w2"
    indexes.add("pypi", build_wheel(w, "torch", "2.9.0", tag=f"cp311-cp311-{ARM}"),
                build_wheel(w, "torch", "2.9.0", tag=f"cp311-cp311-{X86}"))
    indexes.add("nightly", build_wheel(w, "tinydep", "1.0"),
                build_wheel(w, "vision", "0.25.0.dev20260305+cu130", tag=f"cp311-cp311-{X86}",
                                       requires=["torch"]),
                build_wheel(w, "vision", "0.25.0.dev20260305+cu130", tag=f"cp311-cp311-{ARM}", requires=["torch"]))
    spec = _spec(indexes).replace('torch = { nightly = "2026-03-05", local = "cu130", index = "nightly" }',
                                  'vision = { nightly = "2026-03-05", local = "cu130", index = "nightly" }')
    ws.write_spec("e", spec.replace('local = ""\n', ""))
    r = cli("lock", "e")
    assert r.code == 1
    assert r.err.splitlines()[0] == (f"envlock: error: {ws.root}/envs/e.toml: a target would take a CPU build where "
                                     "the spec pins CUDA")
    assert r.err.splitlines()[1] == (
        "  targets.gb200: torch 2.9.0 comes from the default index 'pypi', a build without CUDA (no +cuNNN local "
        "tag), while the spec pins CUDA nightlies to index 'nightly', which has CUDA builds of torch; pin it there "
        "(packages.torch = { nightly = \"YYYY-MM-DD\", index = \"nightly\" }) or exclude it")
    # tinydep, on the nightly index too (as PyTorch's lists numpy) but with no CUDA build there: not asked about.
    assert len(r.err.splitlines()) == 3 and "tinydep" not in r.err


def test_nightlies_shows_a_table_per_target(ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes))
    r = cli("nightlies", "e", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    usable = {name: [d["date"] for d in t["packages"][0]["dates"] if d["status"] == "usable"]
              for name, t in doc["targets"].items()}
    assert usable == {"gb200": ["2026-03-07", "2026-03-05", "2026-03-04"],
                      "x86": ["2026-03-07", "2026-03-06", "2026-03-05", "2026-03-04"]}
    text = cli("nightlies", "e").out
    assert "target gb200 (aarch64-manylinux_2_28):" in text and "target x86 (x86_64-manylinux_2_28):" in text


# -- items 3 and 4: commands and builds per target ------------------------------------


def test_sync_makes_this_machines_target_and_its_digest_is_the_one_target_specs(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes))
    r = cli("sync", "e")
    assert r.code == 0, r.err
    assert ("synced target x86 (x86_64-manylinux_2_28); the lock's other targets, gb200 (aarch64-manylinux_2_28), "
            "are made (and their builds run) on machines of their platforms") in r.out
    lock_path = ws.root / "locks" / "pylock.e.toml"
    doc = tomllib.loads(lock_path.read_text())
    digest = doc["tool"]["envlock"]["targets"]["x86"]["venv-digest"]
    assert "venv-digest" not in doc["tool"]["envlock"]["targets"]["gb200"]  # not made here
    assert len(doc["environments"]) == 2  # the file still holds both
    assert cli("verify", "e").code == 0
    assert cli("verify", "e", "--target", "x86").code == 0
    assert cli("sync", "e").out.startswith("e: up to date")  # the no-op stamp holds for the file of two targets
    assert cli("sync", "e", "--frozen").code == 0
    assert cli("lock", "e", "--check").code == 0
    r = cli("verify", "e", "--target", "gb200")
    assert r.code == 2 and "gb200" in r.err
    r = cli("sync", "e", "--target", "gb200")
    assert r.code == 2
    assert r.err.startswith("envlock: error: ") and "aarch64-manylinux_2_28" in r.err
    # The one-target spec of the same platform gives the same venv digest.
    ws.write_spec("one", _spec(indexes, targets=False))
    assert cli("sync", "one").code == 0
    one = tomllib.loads((ws.root / "locks" / "pylock.one.toml").read_text())
    assert one["tool"]["envlock"]["venv-digest"] == digest


def test_a_build_runs_for_this_machines_target_and_the_others_stay_pending(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    write_project(ws.root / "kernel", "kern", "0.1.0", {"kern/__init__.py": "X = 1\n"})
    ws.write_spec("e", _spec(indexes, extra='kern = { build = "kern" }\n\n[sources.kern]\npath = "kernel"\n\n'
                                             '[builds.kern]\nsource = "kern"\n'))
    r = cli("lock", "e", "--json")
    assert r.code == 0, r.err
    assert {n: t["unbuilt"] for n, t in json.loads(r.out)["targets"].items()} == {"gb200": ["kern"], "x86": ["kern"]}
    r = cli("sync", "e")
    assert r.code == 0, r.err
    doc = tomllib.loads(ws.lock_text("e"))
    targets = doc["tool"]["envlock"]["targets"]
    assert "kern" in targets["x86"]["builds"] and "builds" not in targets["gb200"]
    r = cli("lock", "e")
    assert "  gb200: kern: not built for this lock yet; it builds on a machine of target gb200 " \
           "(aarch64-manylinux_2_28): `envlock sync e --target gb200` there" in r.out.splitlines()
    r = cli("build", "e", "--target", "gb200")
    assert r.code == 2
    assert "aarch64-manylinux_2_28" in r.err
    # A target's own build environment (its GPUs' arch list) is an input of its builds: x86's rebuilds.
    spec = ws.root / "envs" / "e.toml"
    spec.write_text(spec.read_text().replace('gpus = ["sm_120a"]\n', 'gpus = ["sm_120a"]\n'
                                             'build-env = { TORCH_CUDA_ARCH_LIST = "12.0a" }\n'))
    assert load_spec(spec).for_target("x86").builds["kern"].env == {"TORCH_CUDA_ARCH_LIST": "12.0a"}
    assert load_spec(spec).for_target("gb200").builds["kern"].env == {}
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert "  x86: kern: not built for this lock yet; `envlock build e --target x86` builds it here " \
           "(`envlock sync e` too)" in r.out.splitlines()
    assert cli("build", "e").code == 0
    rebuilt = tomllib.loads(ws.lock_text("e"))["tool"]["envlock"]["targets"]["x86"]["builds"]["kern"]
    assert rebuilt["input-digest"] != targets["x86"]["builds"]["kern"]["input-digest"]


def test_diff_per_target_of_a_two_target_upgrade_and_between_targets(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes))
    assert cli("lock", "e").code == 0
    old = ws.root / "old.toml"
    old.write_text(ws.lock_text("e"))
    ws.write_spec("e", _spec(indexes, date="2026-03-07"))  # the upgrade: a newer nightly on both targets
    assert cli("lock", "e").code == 0
    for target, before, after in (("x86", "2.12.0.dev20260305+cu130", "2.12.0.dev20260307+cu130"),
                                  ("gb200", "2.12.0.dev20260305", "2.12.0.dev20260307")):
        r = cli("diff", str(old), "e", "--target", target, "--json")
        assert r.code == 0, r.err
        changed = {c["name"]: (c["old"], c["new"]) for c in json.loads(r.out)["packages"]}
        assert changed == {"torch": (before, after)}
    # Between the targets of one lock: torch's local tag and the native wheel.
    r = cli("diff", "e", "e", "--target", "x86", "--new-target", "gb200", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {c["name"]: (c["old"], c["new"]) for c in doc["packages"]} == {
        "nativedep": ("1.0", "1.0"), "torch": ("2.12.0.dev20260307+cu130", "2.12.0.dev20260307")}


def test_upgrade_of_a_two_target_spec_relocks_both_and_reports_the_target_asked(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes))
    assert cli("lock", "e").code == 0
    r = cli("upgrade", "e", "--nightly", "nightly=2026-03-07", "--target", "gb200", "--json")
    assert r.code == 0, r.err
    changed = {c["name"]: (c["old"], c["new"]) for c in json.loads(r.out)["diff"]["packages"]}
    assert changed == {"torch": ("2.12.0.dev20260305", "2.12.0.dev20260307")}
    doc = tomllib.loads(ws.lock_text("e"))
    assert {n: t["nightlies"]["torch"]["version"] for n, t in doc["tool"]["envlock"]["targets"].items()} == {
        "gb200": "2.12.0.dev20260307", "x86": "2.12.0.dev20260307+cu130"}
    # A date one target lacks: the upgrade stops, naming it, and writes nothing.
    before = ws.lock_text("e")
    r = cli("upgrade", "e", "--nightly", "nightly=2026-03-06")
    assert r.code == 1 and "targets.gb200: packages.torch.nightly = 2026-03-06" in r.err
    assert ws.lock_text("e") == before


def test_export_and_cache_push_take_the_target_asked(ws: Workspace, cli: Cli, indexes: IndexServer,
                                                     tmp_path: Path) -> None:
    ws.write_spec("e", _spec(indexes))
    assert cli("lock", "e").code == 0
    out = tmp_path / "bundle"
    r = cli("export", "e", "--target", "gb200", "--out", str(out), "--json")
    assert r.code == 0, r.err
    names = sorted(p.name for p in out.rglob("*.whl"))
    assert names == [f"nativedep-1.0-cp311-cp311-{ARM}.whl", "tinydep-1.0-py3-none-any.whl",
                     f"torch-2.12.0.dev20260305-cp311-cp311-{ARM}.whl"]
    cache = tmp_path / "cache"
    r = cli("cache", "push", "e", "--target", "x86", "--to", f"file://{cache}")
    assert r.code == 0, r.err
    x86 = read_lock(ws.root / "locks" / "pylock.e.toml", "x86")  # the wheels by sha256: x86_64's
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == sorted(p.wheels[0].sha256 for p in x86.packages)


def test_gc_keeps_every_targets_wheels_of_a_two_target_lock(ws: Workspace, cli: Cli, indexes: IndexServer,
                                                             tmp_path: Path) -> None:
    ws.write_spec("e", _spec(indexes))
    assert cli("lock", "e").code == 0  # the nightlies of both targets are hashed into the store
    text = ws.lock_text("e")
    every = Lock.every_target(text, "x")
    assert sorted((str(p.name), p.version) for p in every.packages) == [
        ("nativedep", "1.0"), ("nativedep", "1.0"), ("tinydep", "1.0"), ("torch", "2.12.0.dev20260305"),
        ("torch", "2.12.0.dev20260305+cu130")]
    r = cli("gc", "--json")
    assert r.code == 0, r.err
    wheels = {p.name for p in (tmp_path / "home").rglob("*.whl")}
    assert {f"torch-2.12.0.dev20260305-cp311-cp311-{ARM}.whl",
            f"torch-2.12.0.dev20260305+cu130-cp311-cp311-{X86}.whl"} <= wheels


def test_a_target_does_without_a_package_only_other_machines_have(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path) -> None:
    indexes.add("pypi", build_wheel(tmp_path / "w3", "jitcache", "1.0", tag=f"cp311-cp311-{X86}"))
    ws.write_spec("e", _spec(indexes, extra='jitcache = "==1.0"\n'))
    r = cli("lock", "e")
    assert r.code == 1
    assert "(target gb200: aarch64-manylinux_2_28, python 3.11; each target is locked on its own)" in r.err
    ws.write_spec("e", _spec(indexes, extra='jitcache = "==1.0"\n') + 'exclude = ["jitcache"]\n')
    r = cli("lock", "e")
    assert r.code == 0, r.err
    doc = tomllib.loads(ws.lock_text("e"))
    assert [p.get("marker") for p in doc["packages"] if p["name"] == "jitcache"] == [
        "sys_platform == 'linux' and platform_machine == 'x86_64' and python_version == '3.11'"]
    assert cli("lock", "e", "--check").code == 0


def test_a_target_overrides_an_upstream_pin_its_platform_has_no_wheel_of(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path) -> None:
    """Upstream pins ``memsaver==1.0``, built for x86_64 only; its ``1.0.post1`` has both (as sglang's
    ``torch_memory_saver==0.0.9`` and PyPI's 0.0.9.post1): gb200 overrides the pin, x86 keeps upstream's."""
    w = tmp_path / "w4"
    indexes.add("pypi", build_wheel(w, "memsaver", "1.0", tag=f"cp311-cp311-{X86}"),
                build_wheel(w, "memsaver", "1.0.post1", tag=f"cp311-cp311-{X86}"),
                build_wheel(w, "memsaver", "1.0.post1", tag=f"cp311-cp311-{ARM}"),
                build_wheel(w, "upstream", "1.0", requires=["memsaver==1.0"]))
    ws.write_spec("e", _spec(indexes, extra='upstream = "==1.0"\n'))
    r = cli("lock", "e")
    assert r.code == 1
    assert "(target gb200: aarch64-manylinux_2_28, python 3.11; each target is locked on its own)" in r.err
    ws.write_spec("e", _spec(indexes, extra='upstream = "==1.0"\n') + 'overrides = ["memsaver==1.0.post1"]\n')
    r = cli("lock", "e")
    assert r.code == 0, r.err
    doc = tomllib.loads(ws.lock_text("e"))
    assert [(p["version"], p.get("marker")) for p in doc["packages"] if p["name"] == "memsaver"] == [
        ("1.0", "sys_platform == 'linux' and platform_machine == 'x86_64' and python_version == '3.11'"),
        ("1.0.post1", "sys_platform == 'linux' and platform_machine == 'aarch64' and python_version == '3.11'")]
    assert cli("lock", "e", "--check").code == 0
    # Checked as [resolution]'s are: a requirement, and never one that moves the spec's own nightly pin.
    ws.write_spec("e", _spec(indexes) + 'overrides = ["Bad Req!", "torch==2.0"]\n')
    with pytest.raises(SpecError) as info:
        load_spec(ws.root / "envs" / "e.toml")
    assert list(info.value.details) == [
        "targets.gb200.overrides[0]: expected a requirement like \"flashinfer-python==0.6.5\", found 'Bad Req!'",
        "targets.gb200.overrides[1]: expected no override of torch: packages.torch is a nightly pin (2026-03-05), "
        "which already beats upstream's pins; found 'torch==2.0' (change the date there)"]


def test_a_target_cannot_do_without_a_build(ws: Workspace) -> None:
    path = ws.write_spec("e", '[env]\npython = "3.11"\n[indexes.pypi]\nurl = "http://x/simple"\ndefault = true\n'
                              '[packages]\nkern = { build = "kern" }\n[sources.kern]\npath = "."\n'
                              '[builds.kern]\nsource = "kern"\n[targets.a]\nplatform = "x86_64-manylinux_2_28"\n'
                              'exclude = ["kern", "Bad Name"]\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert list(info.value.details) == [
        "targets.a.exclude[1]: expected a package name like \"flashinfer-jit-cache\", found 'Bad Name'",
        "targets.a.exclude[0]: expected a package no build provides, found 'kern' ([builds.kern] is built for "
        "every target)"]


# -- the flagship, opt-in (network) ------------------------------------------------------

@pytest.mark.network
def test_the_flagship_spec_with_an_x86_and_an_aarch64_target_locks_into_one_file(
        ws: Workspace, cli: Cli, flagship_mirrors: IndexServer) -> None:
    """The flagship spec, its [env] platform replaced by an x86_64 (SM120) and an aarch64 (SM100) target:
    one lock against today's PyPI and the stand-in nightly and flashinfer indexes, a relock byte-identical,
    its x86_64 part the one-target spec's very packages (so the same venv digest).

    What a user adds for the aarch64 target besides its platform and GPUs, as today's PyPI showed: sglang at
    the pin requires ``torch_memory_saver==0.0.9``, which PyPI has as an x86_64 wheel only (and an sdist,
    which a lock never builds); ``0.0.9.post1`` has x86_64 and aarch64 wheels, so gb200 overrides the pin
    (``[targets.gb200] overrides``) and x86 keeps upstream's.

    The stand-ins (x86_64 and aarch64 nightlies) and the sglang source are those of ``tests/kit/flagship.py``
    (the ``flagship_mirrors`` fixture), read through envlock's mirror variables:

        ENVLOCK_TEST_SGLANG_GIT=/path/to/sglang.git nice .venv/bin/pytest --run-network -k flagship -s
    """
    import shutil
    import time

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "patches", ws.root / "patches")
    text = (root / "envs" / "qwen35-blackwell.toml").read_text()
    ws.write_spec("one", text)
    two = text.replace('platform = "x86_64-manylinux_2_28"\n', "", 1) + (
        # What the GPU check finds in today's wheels, as each package ships it (kernels read from the wheels).
        'allow-no-kernels = [\n'
        '    { package = "flashinfer-cubin", gpus = ["sm_120a"], reason = "its cubins are trtllm-gen kernels for '
        'sm_100a/sm_103a; on SM120 flashinfer runs the jit-cache kernels" },\n'
        '    { package = "torchao", gpus = ["sm_120a"], reason = "its _C ops are built for sm_80 to sm_90; the NVFP4 '
        'path does not call them" },\n'
        ']\n'
        '\n[targets.x86]\nplatform = "x86_64-manylinux_2_28"\ngpus = ["sm_120a"]\n'
        '\n[targets.gb200]\nplatform = "aarch64-manylinux_2_28"\ngpus = ["sm_100a"]\n'
        # sglang pins torch_memory_saver==0.0.9, whose only wheel on PyPI is x86_64; 0.0.9.post1 has both.
        'overrides = ["torch-memory-saver==0.0.9.post1"]\n')
    ws.write_spec("two", two)
    began = time.monotonic()
    r = cli("lock", "two")
    took = time.monotonic() - began
    assert r.code == 0, r.err
    locked = ws.lock_text("two")
    again = cli("lock", "two")
    assert again.code == 0, again.err

    def said(out: str) -> list[str]:  # what each lock said (the GPU check's notes: a line per package and GPU)
        return out.splitlines()

    assert ws.lock_text("two") == locked, (said(r.out), said(again.out))
    began = time.monotonic()
    assert cli("lock", "one").code == 0
    took_one = time.monotonic() - began
    one = read_lock(ws.root / "locks" / "pylock.one.toml")
    x86 = read_lock(ws.root / "locks" / "pylock.two.toml", "x86")
    gb200 = read_lock(ws.root / "locks" / "pylock.two.toml", "gb200")
    assert [(p.name, p.version, p.wheels) for p in x86.packages] == [(p.name, p.version, p.wheels)
                                                                    for p in one.packages]
    assert x86.install_digest() == one.install_digest()  # so one venv digest
    torch = gb200.package("torch")
    assert torch is not None and torch.version == "2.11.0.dev20260307+cu130"
    assert torch.wheels and all(w.filename.endswith("_aarch64.whl") for w in torch.wheels)
    doc = tomllib.loads(locked)
    markers = sorted({str(p.get("marker", "")) for p in doc["packages"]})
    print(f"\ntwo targets: exit 0 in {took:.1f} s (one target: {took_one:.1f} s), {len(locked)} bytes, "
          f"{len(doc['packages'])} package entries (x86 {len(x86.packages)}, gb200 {len(gb200.packages)}); "
          f"environments {doc.get('environments')}; markers {markers}")


def test_lock_check_names_the_target_whose_key_the_spec_changed(ws: Workspace, cli: Cli,
                                                                indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes))
    assert cli("lock", "e").code == 0
    assert cli("lock", "e", "--check").code == 0
    ws.write_spec("e", _spec(indexes) + 'nightly = "2026-03-04"\n')  # gb200's own date now
    r = cli("lock", "e", "--check")
    assert r.code == 1
    assert r.out.splitlines()[1:] == ["  targets.gb200: changed", "run `envlock lock e` to update it"]
    # A hand edit of one target's part is named with its target.
    ws.write_spec("e", _spec(indexes))
    path = ws.root / "locks" / "pylock.e.toml"
    path.write_text(path.read_text().replace('version = "2.12.0.dev20260305"\n', 'version = "2.12.0.dev20260304"\n'))
    r = cli("lock", "e", "--check")
    assert r.code == 1
    assert "  targets.gb200: packages.torch: nightly 2026-03-05 is 2.12.0.dev20260305, but the lock has " \
           "2.12.0.dev20260304 (edited by hand?)" in r.out.splitlines()


def test_bisect_over_nightly_dates_of_a_two_target_spec_on_this_machines_target(
        ws: Workspace, cli: Cli, indexes: IndexServer) -> None:
    ws.write_spec("e", _spec(indexes, date="2026-03-04"))
    assert cli("lock", "e").code == 0
    check = "import torch, sys; sys.exit(0 if torch.VERSION < '2.12.0.dev20260305' else 1)"
    r = cli("bisect", "e", "--nightly", "2026-03-04..2026-03-07", "--target", "x86", "--json", "--", "python", "-c",
            check)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["first_bad"] == "2026-03-05", doc


# -- a machine that is none of the lock's targets --------------------------------------------


def _elsewhere_spec(server: IndexServer, date: str = "2026-03-05") -> str:
    """Two targets, neither of them this machine: aarch64, and x86_64 with a glibc newer than this machine's
    (``runs_here``: the machine's glibc must be at least the platform's; 2.40, the newest uv locks for)."""
    if runs_here("x86_64-manylinux_2_40") or runs_here("aarch64-manylinux_2_28"):
        pytest.skip("this machine runs one of the targets (an aarch64 machine, or glibc 2.40 or newer)")
    return _spec(server, date=date).replace('platform = "x86_64-manylinux_2_28"', 'platform = "x86_64-manylinux_2_40"')


def test_commands_on_the_whole_lock_work_on_a_machine_of_none_of_its_targets(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path) -> None:
    from envlock.model.lockfile import LockFile
    from envlock.model.targets import machine_words

    ws.write_spec("e", _elsewhere_spec(indexes))
    r = cli("lock", "e")
    assert r.code == 0, r.err
    assert cli("lock", "e", "--check").code == 0
    old = tmp_path / "old.toml"
    old.write_text(ws.lock_text("e"))
    # upgrade relocks every target; its report is of the first, said so.
    r = cli("upgrade", "e", "--nightly", "nightly=2026-03-07")
    assert r.code == 0, r.err
    note = (f"note: the report is of target gb200 (aarch64-manylinux_2_28): this machine ({machine_words()}) is none "
            "of the lock's targets; --target NAME for another")
    assert note in r.out.splitlines()
    doc = tomllib.loads(ws.lock_text("e"))
    assert {n: t["nightlies"]["torch"]["version"] for n, t in doc["tool"]["envlock"]["targets"].items()} == {
        "gb200": "2.12.0.dev20260307", "x86": "2.12.0.dev20260307+cu130"}
    # diff: the first target's, with the same note; --target for another.
    r = cli("diff", str(old), "e", "--json")
    assert r.code == 0, r.err
    assert {c["name"]: (c["old"], c["new"]) for c in json.loads(r.out)["packages"]} == {
        "torch": ("2.12.0.dev20260305", "2.12.0.dev20260307")}
    assert r.err.splitlines() == [f"envlock: {note.replace('the report', 'the diff')}"]
    r = cli("diff", str(old), "e", "--target", "x86", "--json")
    assert r.code == 0 and r.err == ""
    assert {c["name"]: c["new"] for c in json.loads(r.out)["packages"]} == {"torch": "2.12.0.dev20260307+cu130"}
    # patch status and rebase read only the sources' pins: any target's.
    found = LockFile.read(ws.root / "locks" / "pylock.e.toml")
    assert found.lock is None
    whole = found.lock_of(whole=True)
    assert whole is not None and whole.target == "gb200"
    assert cli("patch", "status", "e").code == 0
    # gc keeps both targets' wheels; nightlies lists both.
    assert cli("gc", "--json").code == 0
    r = cli("nightlies", "e")
    assert r.code == 0 and "target x86 (x86_64-manylinux_2_40):" in r.out
    # kernels of a target named: its wheels are read, whichever machine this is; a pin keeps the whole file.
    assert cli("kernels", "e", "--target", "gb200").code == 0
    r = cli("pin", "e")
    assert r.code == 0, r.err


@pytest.mark.parametrize("command", [
    ("verify", "e"), ("kernels", "e"), ("export", "e", "--out", "OUT"), ("cache", "push", "e", "--to", "CACHE"),
    ("bisect", "e", "--nightly", "2026-03-04..2026-03-07", "--", "true"),
])
def test_a_command_on_one_target_says_this_machine_is_none_of_them(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path, command: tuple[str, ...]) -> None:
    from envlock.model.targets import machine_words

    ws.write_spec("e", _elsewhere_spec(indexes))
    assert cli("lock", "e").code == 0
    args = [a.replace("OUT", str(tmp_path / "out")).replace("CACHE", f"file://{tmp_path / 'cache'}") for a in command]
    r = cli(*args)
    assert r.code == 2
    where = ws.root / ("envs/e.toml" if command[0] == "bisect" else "locks/pylock.e.toml")
    if command[0] == "export":
        where = Path("locks/pylock.e.toml")
    assert r.err.splitlines() == [
        f"envlock: error: {where}: this machine ({machine_words()}) is none of the targets: gb200 "
        "(aarch64-manylinux_2_28), x86 (x86_64-manylinux_2_40); name one with --target NAME (a sync installs only "
        "on a machine of its target)"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# -- a --target that names no target of the lock ------------------------------------------------


@pytest.mark.parametrize("command", [
    ("diff", "e", "e", "--target", "NAME"), ("kernels", "e", "--target", "NAME"),
    ("export", "e", "--target", "NAME", "--out", "OUT"), ("cache", "push", "e", "--target", "NAME", "--to", "CACHE"),
    ("verify", "e", "--target", "NAME"),
])
@pytest.mark.parametrize(("targets", "name", "said"), [
    (False, "x86", "--target x86: no such target; the lock has no [targets] (one target, x86_64-manylinux_2_28's); "
                   "drop --target"),
    (True, "gb20", "--target gb20: no such target (did you mean 'gb200'?); targets: gb200 (aarch64-manylinux_2_28), "
                   "x86 (x86_64-manylinux_2_28)"),
])
def test_a_target_the_lock_has_not_is_an_error_naming_the_file_and_its_targets(
        ws: Workspace, cli: Cli, indexes: IndexServer, tmp_path: Path, command: tuple[str, ...], targets: bool,
        name: str, said: str) -> None:
    ws.write_spec("e", _spec(indexes, targets=targets))
    assert cli("lock", "e").code == 0
    before = ws.lock_text("e")
    args = [a.replace("NAME", name).replace("OUT", str(tmp_path / "out")).replace("CACHE", f"file://{tmp_path}/c")
            for a in command]
    r = cli(*args)
    assert r.code == 2
    where = "locks/pylock.e.toml" if command[0] == "export" else f"{ws.root}/locks/pylock.e.toml"
    assert r.err.splitlines() == [f"envlock: error: {where}: {said}"]
    assert r.out == "" and not (tmp_path / "out").exists() and not (tmp_path / "c").exists()
    assert ws.lock_text("e") == before
