"""A build's locked toolchain: unpacked once per digest into the store, read-only, tools located;
and the input digest's toolchain part (the wheels' hashes instead of the host's version lines)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.build import builder, toolchain
from envlock.errors import BuildError
from envlock.model.spec import BuildSpec
from envlock.store.store import STORE_MTIME, Store
from kit.cudalike import OLDER_NVCC, TOOLCHAIN, serve_cuda_index
from kit.index import IndexServer
from kit.universe import backend_wheels
from kit.wheels import build_wheel
from kit.workspaces import Cli
from kit.workspaces import ScratchWorkspace as Workspace


def _stored(store: Store, wheel: Path) -> Path:
    """``wheel`` put into the store as a fetch does (``wheels/<sha256>/<filename>``)."""
    from envlock.store.home import file_sha256

    sha = file_sha256(str(wheel))
    assert sha is not None
    folder = store.path("wheels", sha)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, folder / wheel.name)
    return folder / wheel.name


def _fake_cuda(dest: Path) -> list[Path]:
    """Small wheels laid out as NVIDIA's and ninja's are (a CUDA root ``nvidia/cu13``, a script in ``.data``)."""
    nvcc = build_wheel(dest, "nvidia-cuda-nvcc", "13.0.88", tag="py3-none-manylinux_2_17_x86_64",
                       requires=["nvidia-cuda-runtime"],
                       files={"nvidia/cu13/bin/nvcc": "#!/bin/sh\necho fake nvcc\n",
                              "nvidia/cu13/bin/nvcc.profile": "TOP = $(_HERE_)/..\n"})
    runtime = build_wheel(dest, "nvidia-cuda-runtime", "13.0.96", tag="py3-none-manylinux_2_17_x86_64",
                          files={"nvidia/cu13/lib/libcudart.so.13": "ELF", "nvidia/cu13/include/cuda.h": "//\n"})
    ninja = build_wheel(dest, "ninja", "1.13.2", tag="py3-none-manylinux_2_17_x86_64",
                        files={"ninja-1.13.2.data/scripts/ninja": "#!/bin/sh\necho 1.13.2\n", "ninja/__init__.py": ""})
    return [nvcc, runtime, ninja]


def test_a_toolchain_is_unpacked_once_read_only_with_its_tools_located(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    wheels = [_stored(store, w) for w in _fake_cuda(tmp_path / "wheels")]
    first = toolchain.unpacked(store, wheels, what="[builds.k]")
    assert first.unpacked
    assert first.tree == store.path("toolchains", toolchain.digest(wheels)) / "tree"
    assert dict(first.tools) == {"nvcc": "nvidia/cu13/bin/nvcc", "ninja": "bin/ninja"}
    assert (first.cuda, first.bin_dirs) == ("nvidia/cu13", ("bin", "nvidia/cu13/bin"))
    assert os.readlink(first.tree / "nvidia/cu13/lib64") == "lib"  # nvcc.profile links against lib64
    assert (first.tree / "nvidia/cu13/lib64/libcudart.so.13").read_text() == "ELF"
    assert os.access(first.tree / "bin/ninja", os.X_OK)
    assert not (first.tree / "nvidia/cu13/include/cuda.h").stat().st_mode & 0o222  # read-only
    assert not (first.tree / "nvidia/cu13").stat().st_mode & 0o222
    # One mtime for every file, whenever it was unpacked (ptxas writes a header's into a -lineinfo cubin).
    assert {p.lstat().st_mtime for p in [first.tree, *first.tree.rglob("*")]} == {STORE_MTIME}
    # Another build naming the same wheels (in any order) shares it: nothing unpacked again.
    again = toolchain.unpacked(store, list(reversed(wheels)), what="[builds.other]")
    assert not again.unpacked and again.tree == first.tree and again.tools == first.tools
    env = again.env("/usr/bin")
    root = str(first.tree / "nvidia/cu13")
    assert env["PATH"] == f"{first.tree / 'bin'}:{first.tree / 'nvidia/cu13/bin'}:/usr/bin"
    assert (env["CUDA_HOME"], env["CUDA_PATH"], env["CUDAToolkit_ROOT"]) == (root, root, root)
    assert env["CUDACXX"] == f"{root}/bin/nvcc"
    assert again.cmake_defines() == {"CMAKE_CUDA_COMPILER": f"{root}/bin/nvcc", "CUDAToolkit_ROOT": root}


def test_a_toolchain_is_matched_to_locked_lines_by_its_wheels_hashes(tmp_path: Path) -> None:
    """What gc keeps a toolchain by: one stored wheel of each locked line, and nothing else."""
    store = Store.open(tmp_path / "home")
    wheels = [_stored(store, w) for w in _fake_cuda(tmp_path / "wheels")]
    made = toolchain.unpacked(store, wheels, what="[builds.k]")
    nvcc, runtime, ninja = (w.parent.name for w in wheels)
    assert toolchain.in_store(store) == {made.digest: frozenset({nvcc, runtime, ninja})}
    lines = [f"nvidia-cuda-nvcc==13.0.88 --hash=sha256:{'0' * 64} --hash=sha256:{nvcc}",  # another platform's too
             f"nvidia-cuda-runtime==13.0.96 --hash=sha256:{runtime}", f"ninja==1.13.2 --hash=sha256:{ninja}"]
    assert toolchain.made_from(frozenset({nvcc, runtime, ninja}), lines)
    assert not toolchain.made_from(frozenset({nvcc, runtime, ninja}), lines[:2])  # a wheel no line names
    assert not toolchain.made_from(frozenset({nvcc, runtime}), lines)  # a line with no wheel of it
    assert not toolchain.made_from(frozenset(), [])
    # An entry of an older format names no hashes: no lock matches it.
    meta = made.tree.parent / "toolchain.json"
    meta.write_text(meta.read_text().replace(f'"format": {toolchain.TOOLCHAIN_FORMAT}', '"format": 1'))
    assert toolchain.in_store(store) == {made.digest: None}


def test_a_path_two_wheels_write_differently_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    a = build_wheel(tmp_path / "w", "tool-a", "1", files={"bin/tool": "a"})
    b = build_wheel(tmp_path / "w", "tool-b", "1", files={"bin/tool": "b"})
    with pytest.raises(BuildError) as err:
        toolchain.unpacked(store, [_stored(store, a), _stored(store, b)], what="[builds.k]")
    assert err.value.message == ("[builds.k]: toolchain wheels tool_a-1-py3-none-any.whl and tool_b-1-py3-none-any.whl "
                                 "both hold bin/tool, with other bytes: one toolchain cannot hold both")
    assert not store.has("toolchains", toolchain.digest([_stored(store, a), _stored(store, b)]))


def test_a_member_that_climbs_out_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    bad = build_wheel(tmp_path / "w", "evil", "1", files={"../../outside": "x"})
    with pytest.raises(BuildError) as err:
        toolchain.unpacked(store, [_stored(store, bad)], what="[builds.k]")
    assert err.value.message == ("[builds.k]: toolchain wheel evil-1-py3-none-any.whl: member '../../outside' would "
                                 "land outside the toolchain's folder; refused")
    assert not (tmp_path / "outside").exists()


def test_a_dependency_the_toolchain_does_not_name_is_refused() -> None:
    lines = ("nvidia-cuda-nvcc==13.0.88 --hash=sha256:aa", "nvidia-nvvm==13.5.1 --hash=sha256:bb")
    with pytest.raises(BuildError) as err:
        toolchain.resolve(["nvidia-cuda-nvcc==13.0.88"], "[builds.k]", lambda reqs: lines)
    assert err.value.message == ("[builds.k]: toolchain: nvidia-nvvm==13.5.1 came in unnamed (a dependency of a "
                                 "toolchain wheel, which names no version); name each with == in toolchain = [...]")
    assert toolchain.resolve(["nvidia-cuda-nvcc==13.0.88", "nvidia_nvvm"], "[builds.k]", lambda reqs: lines) == lines
    assert toolchain.provided(lines) == {"nvcc"}


@pytest.fixture(scope="module")
def cuda_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """A loopback index of the build backends and the CUDA toolchain wheels."""
    yield from serve_cuda_index(tmp_path_factory)


def test_the_input_digest_holds_the_toolchain_wheels_not_the_host_tools(
    tmp_path: Path, cuda_index: IndexServer
) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    store = Store.open(tmp_path / "home")

    def plan(tools: tuple[str, ...]) -> builder.BuildPlan:
        spec = BuildSpec(name="k", source="k", toolchain=tools)
        request = builder.BuildRequest(spec, tree, 315532800, "3.11", index_url=cuda_index.url("pypi"))
        return builder.plan(request, store)

    none, ours = plan(()), plan(TOOLCHAIN)
    assert "toolchain-wheels" not in none.recipe and set(none.recipe["toolchain"]) == {"cc", "c++", "cmake",
                                                                                         "nvcc", "uv"}
    assert set(ours.recipe["toolchain"]) == {"cc", "c++", "ld", "uv"}  # nvcc and cmake: the wheels' hashes
    assert [line.split()[0] for line in ours.recipe["toolchain-wheels"]] == [
        "cmake==3.31.10", "ninja==1.13.2", "nvidia-cuda-cccl==13.0.85", "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.96", "nvidia-nvvm==13.0.88"]
    assert ours.toolchain == tuple(ours.recipe["toolchain-wheels"])
    older = plan(tuple(OLDER_NVCC if t.startswith("nvidia-cuda-nvcc") else t for t in TOOLCHAIN))
    assert len({none.input_digest, ours.input_digest, older.input_digest}) == 3
    assert [line.split()[0] for line in older.toolchain if "nvcc" in line] == ["nvidia-cuda-nvcc==13.0.48"]
    # Planned from the lock's lines (a frozen rebuild): the same digest, no resolution.
    spec = BuildSpec(name="k", source="k", toolchain=TOOLCHAIN)
    request = builder.BuildRequest(spec, tree, 315532800, "3.11", index_url=None, locked_toolchain=ours.toolchain,
                                 locked_requirements=ours.build_requirements)
    frozen = builder.plan(request, store)
    assert frozen.input_digest == ours.input_digest


def _tool_wheels(dest: Path, versions: tuple[str, ...] = ("1.11.1", "1.13.2")) -> None:
    """Releases of a small ``ninja`` wheel laid out as the real one is (a script in ``.data``)."""
    for version in versions:
        script = f"#!/bin/sh\necho {version}\n"
        build_wheel(dest, "ninja", version, files={f"ninja-{version}.data/scripts/ninja": script,
                                                   "ninja/__init__.py": f"VERSION = {version!r}\n"})


def _tool_demo(root: Path, index_url: str, tool: str, packages: str = "") -> None:
    """A workspace whose one build (a pure-Python setuptools project, built in seconds) declares ``tool``."""
    project = root / "tool-demo"
    (project / "tool_demo").mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                            'build-backend = "setuptools.build_meta"\n\n'
                                            '[project]\nname = "tool-demo"\nversion = "0.1.0"\n')
    (project / "tool_demo" / "__init__.py").write_text("")
    (root / "envs" / "demo.toml").write_text(f"""\
[env]
python = "3.11"

[indexes.pypi]
url = "{index_url}"
default = true

[packages]
tool-demo = {{ build = "tool-demo" }}
{packages}
[sources.tool-demo]
path = "tool-demo"

[builds.tool-demo]
source = "tool-demo"
toolchain = ["{tool}"]
""")


def _toolchains(home: Path) -> set[str]:
    return {p.name for p in (home / "v1" / "toolchains").iterdir()}


@pytest.mark.slow
def test_build_check_names_a_toolchain_move_and_gc_collects_the_toolchains_no_lock_names(
    ws: Workspace, cli: Cli, tmp_path: Path
) -> None:
    _tool_wheels(tmp_path / "tools")
    server = IndexServer(tmp_path / "index")
    server.add_dir("pypi", backend_wheels())
    server.add_dir("pypi", tmp_path / "tools")
    server.start()
    try:
        _tool_demo(ws.root, server.url("pypi"), "ninja==1.11.1")
        assert cli("-q", "lock", "demo").code == 0
        r = cli("-q", "build", "demo")
        assert r.code == 0, r.err
        home = Path(os.environ["ENVLOCK_HOME"])
        (old,) = _toolchains(home)
        # The spec moves the toolchain; `build --check` (which writes no lock) says the lock's build is of another.
        _tool_demo(ws.root, server.url("pypi"), "ninja==1.13.2")
        r = cli("build", "demo", "--check")
        assert r.code == 0, r.err
        assert re.search(r"^envlock: tool-demo: the lock records a build of other inputs \(builds\.tool-demo: changed; "
                         r"toolchain ninja: 1\.11\.1 -> 1\.13\.2; input digest sha256:[0-9a-f]{12}, now "
                         r"sha256:[0-9a-f]{12}\): --check compared two builds of the inputs as they are now$", r.err,
                         re.M), r.err
        (new,) = _toolchains(home) - {old}
        # gc: the lock's build names the old toolchain (kept); the check's, no lock names (removed, counted).
        r = cli("gc", "--json", "--keep-git", "none")
        assert r.code == 0, r.err
        report = json.loads(r.out)
        assert f"toolchains/{new}" in report["removed"] and f"toolchains/{old}" not in report["removed"]
        assert _toolchains(home) == {old}
        # Built and recorded: now the old one goes, and what it frees is counted.
        assert cli("-q", "build", "demo").code == 0
        assert len(_toolchains(home)) == 2
        before = json.loads(cli("gc", "--json", "--keep-git", "none", "--dry-run").out)
        r = cli("gc", "--json", "--keep-git", "none")
        report = json.loads(r.out)
        assert [name for name in report["removed"] if name.startswith("toolchains/")] == [f"toolchains/{old}"]
        assert report["freed"] >= before["freed"] > 0
        assert _toolchains(home) == {new}
    finally:
        server.stop()


@pytest.mark.slow
def test_the_upgrade_report_names_a_loose_toolchain_pin_that_moved(ws: Workspace, cli: Cli, tmp_path: Path) -> None:
    """``ninja>=1.11`` locked at 1.11.1; the index gains 1.13.2; an upgrade of something else rebuilds the
    kernel with the newer ninja, with no spec edit to the toolchain: the report says so."""
    _tool_wheels(tmp_path / "tools", ("1.11.1",))
    for version in ("1.0", "2.0"):
        build_wheel(tmp_path / "tools", "alpha", version)
    server = IndexServer(tmp_path / "index")
    server.add_dir("pypi", backend_wheels())
    server.add_dir("pypi", tmp_path / "tools")
    server.start()
    try:
        _tool_demo(ws.root, server.url("pypi"), "ninja>=1.11", 'alpha = "==1.0"\n')
        assert cli("-q", "lock", "demo").code == 0
        r = cli("-q", "build", "demo")
        assert r.code == 0, r.err
        _tool_wheels(tmp_path / "newer", ("1.13.2",))
        server.add_dir("pypi", tmp_path / "newer")
        r = cli("upgrade", "demo", "--version", "alpha=2.0", "--dry-run")
        assert r.code == 0, r.err
        assert "tool-demo: toolchain ninja: 1.11.1 -> 1.13.2 (resolved now)" in r.out, r.out
        doc = json.loads(cli("upgrade", "demo", "--version", "alpha=2.0", "--dry-run", "--json").out)
        inputs = [i for b in doc["diff"]["builds"] for i in b["inputs"] if i["kind"] == "toolchain"]
        assert [(i["name"], i["old"], i["new"]) for i in inputs] == [("ninja", "1.11.1", "1.13.2")]
    finally:
        server.stop()
