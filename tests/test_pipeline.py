"""The whole chain on an SGLang-shaped env: spec -> lock -> source -> patch -> build -> venv.

What rebuilds when: changing only a PyPI pin re-syncs with no build; moving the torch
stand-in or a kernel patch rebuilds the kernel (and only what the patch touches).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.lockfile import read_lock
from kit import sglike
from kit.sglike import SgLike
from kit.universe import Universe

TORCH_A = "2.12.0.dev20260307"
TORCH_B = "2.12.0.dev20260308"


@pytest.fixture(scope="module")
def sg(tmp_path_factory: pytest.TempPathFactory, universe: Universe, backend_index: object) -> SgLike:
    """The fixture repo, with the torch stand-in published on the universe's default index."""
    sg = sglike.make_sglike(tmp_path_factory.mktemp("sglike"))
    wheels = tmp_path_factory.mktemp("torchlike")
    universe.server.add("pypi", *(sglike.torchlike_wheel(wheels, v) for v in (TORCH_A, TORCH_B)))
    return sg


def spec(u: Universe, sg: SgLike, *, tinydep: str = "1.0", torch: str = TORCH_A) -> str:
    patches = ", ".join(f'"patches/sglike/{name}"' for name in sg.patches)
    return f"""
[env]
python = "3.11"
[indexes.pypi]
url = "{u.pypi}"
default = true
[packages]
tinydep = "=={tinydep}"
torchlike = "=={torch}"
sglike = {{ build = "sglike" }}
sglike-kernel = {{ build = "sglike-kernel" }}
[sources.sglike]
git = "{sg.url}"
rev = "{sg.pin}"
patches = [{patches}]
[builds.sglike]
source = "sglike"
subdirectory = "python"
env = {{ SETUPTOOLS_SCM_PRETEND_VERSION = "0.5.9" }}
[builds.sglike-kernel]
source = "sglike"
subdirectory = "sgl-kernel"
isolation = false
requires = ["scikit-build-core>=0.10"]
env = {{ SGLIKE_ARCH_LIST = "12.0a" }}
config-settings = {{ "cmake.define.SGLIKE_ENABLE_FA3" = "OFF" }}
[builds.sglike-kernel.fetchcontent]
{sglike.KDEP_NAME} = {{ git = "{sg.kdep_url}", rev = "{sg.kdep_commit}" }}
"""


def built_inputs(home: Path) -> set[str]:
    """Input digests the store holds a built wheel for (a new one = a build ran)."""
    folder = home / "v1" / "builds"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def sync(cli, env: str = "e") -> dict:  # type: ignore[no-untyped-def, type-arg]
    result = cli("sync", env, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)  # type: ignore[no-any-return]


def in_env(ws_root: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "envlock.cli", "run", "e", "--", "python", "-c", code], cwd=ws_root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow
def test_sglang_shaped_env_end_to_end_and_what_rebuilds(ws, cli, universe: Universe, sg: SgLike, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    shutil.copytree(sg.patches_dir, ws.root / "patches" / "sglike")
    ws.write_spec("e", spec(universe, sg))

    first = sync(cli)
    assert len(built_inputs(home)) == 2  # the kernel and the python package
    lock = ws.lock_text("e")
    assert f'commit = "{sg.pin}"' in lock and "[tool.envlock.builds.\"sglike-kernel\"]" in lock
    # Patched (0001: capability 12; 0002: mul), compiled against torchlike's header, fetched dep inlined.
    out = in_env(ws.root, "import sglike, sglike.comm as c, sglike_kernel as k, tinydep; "
                          "print(c.max_size(12, 4), k.mul(6, 7), tinydep.VERSION)")
    assert out.split() == [str(64 * 1024 * 1024), "42", "1.0"]

    # Only a PyPI pin moves: a new generation, no build.
    ws.write_spec("e", spec(universe, sg, tinydep="1.1"))
    before = built_inputs(home)
    second = sync(cli)
    assert built_inputs(home) == before
    assert second["generation"] == first["generation"] + 1
    assert in_env(ws.root, "import tinydep; print(tinydep.VERSION)") == "1.1"

    # The torch pin moves: the kernel (built against it) rebuilds; the python package does not.
    ws.write_spec("e", spec(universe, sg, tinydep="1.1", torch=TORCH_B))
    sync(cli)
    assert len(built_inputs(home) - before) == 1
    assert in_env(ws.root, "import torchlike; print(torchlike.__version__)") == TORCH_B

    # A kernel patch changes: the kernel rebuilds once more.
    patch_file = ws.root / "patches" / "sglike" / sg.patches[1]
    patch_file.write_text(patch_file.read_text().replace("Why:", "Why: (reworded)", 1))
    before = built_inputs(home)
    check = cli("lock", "e", "--check")
    assert check.code == 1 and f"sources.sglike.patches: patches/sglike/{sg.patches[1]} changed" in check.out
    for _ in range(2):  # frozen: nothing to do, and the edited patch the lock lacks is said
        frozen = cli("sync", "e", "--frozen")
        assert frozen.code == 0 and "up to date" in frozen.out, frozen.err
        assert (f"(sources.sglike.patches: patches/sglike/{sg.patches[1]} changed since the lock): --frozen synced "
                "the lock as it is") in frozen.out, frozen.out
    sync(cli)
    # The header is not part of the diff, so the patched tree, and so the build inputs, are unchanged.
    assert built_inputs(home) == before

    # The kernel patch's code changes: only the kernel rebuilds, and the venv has the new code.
    patch_file.write_text(patch_file.read_text().replace("+    return PyLong_FromLong(a * b);",
                                                         "+    return PyLong_FromLong(a * b + 1);"))
    sync(cli)
    assert len(built_inputs(home) - before) == 1
    assert in_env(ws.root, "import sglike_kernel as k; print(k.mul(6, 7))") == "43"

    # A relock through a mirror (--index): the build requirements resolve there too, so
    # the recorded builds carry over even though the spec's own index URL is unreachable.
    builds_before = ws.lock_text("e").split("[tool.envlock.builds.", 1)[1]
    ws.write_spec("e", spec(universe, sg, tinydep="1.1", torch=TORCH_B).replace(
        f'url = "{universe.pypi}"', 'url = "http://127.0.0.1:9/simple"'))
    relock = cli("lock", "e", "--index", f"pypi={universe.pypi}")
    assert relock.code == 0, relock.err
    assert ws.lock_text("e").split("[tool.envlock.builds.", 1)[1] == builds_before

    # A fresh machine that reaches only the mirror (the lock names the upstream): the frozen sync
    # rebuilds the kernels, the env's wheels the non-isolated build reads and its build requirements
    # come through the mirror too, and the summary counts every wheel it brought in.
    served = universe.pypi.removesuffix("/pypi/simple")
    lock_file = ws.root / "locks" / "pylock.e.toml"
    lock_file.write_text(ws.lock_text("e").replace(f'index = "{universe.pypi}"', 'index = "http://127.0.0.1:9/simple"')
                         .replace(served, "http://127.0.0.1:9"))  # the spec's index, as a lock made there says
    locked = read_lock(lock_file).packages
    remote = [p.wheels[0].filename for p in locked if p.wheels[0].url]
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home"))
    r = cli("sync", "e", "--frozen", "--index", f"pypi={universe.pypi}", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    served_size = {name: path.stat().st_size for name, path in universe.server.indexes["pypi"].files.items()}
    # Every wheel: the remote ones downloaded, the two built ones copied in from the wheelhouse.
    assert (doc["fetched"], doc["downloaded"]) == (len(locked), sum(served_size[name] for name in remote))
    assert in_env(ws.root, "import sglike_kernel as k; print(k.mul(6, 7))") == "43"
    # `envlock build` there: the env's wheels the kernel's build reads come through ENVLOCK_INDEX_* too.
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home2"))
    monkeypatch.setenv("ENVLOCK_INDEX_PYPI", universe.pypi)
    r = cli("-q", "build", "e")
    assert r.code == 0, r.err
    # A relock on a fresh store says what it fetched to compute the kernel's input digest.
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home3"))
    doc = json.loads(cli("lock", "e", "--json").out)
    assert doc["build_downloaded"] > 0


def test_sync_mirrors_go_by_the_index_the_lock_records_else_the_spec_pins(tmp_path: Path) -> None:
    # `sync --lock PATH@REV`: an older lock may have taken a package from an index today's spec
    # no longer pins it to; a lock made through another mirror records a URL the spec does not name.
    from envlock.lockfile import Artifact, Lock, LockedPackage
    from envlock.mirrors import Mirrors
    from envlock.spec import load_spec

    nightly = "https://download.pytorch.org/whl/nightly/cu130"
    spec_file = tmp_path / "e.toml"
    spec_file.write_text(f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\ndefault = true\n'
                         f'[indexes.pytorch]\nurl = "{nightly}"\n'
                         '[packages]\ntorch = { nightly = "2026-03-07", index = "pytorch" }\n')
    spec = load_spec(spec_file)

    def pkg(name: str, index: str) -> LockedPackage:
        return LockedPackage(name=name, version="1.0", index=index,  # type: ignore[arg-type]
                             wheels=(Artifact(sha256=name[0] * 64, url=f"{index}/{name}-1.0-py3-none-any.whl"),))

    lock = Lock(env="e", python="3.11", platform=None, spec_digest="sha256:" + "0" * 64, spec_keys={},
                packages=(pkg("filelock", nightly), pkg("torch", "https://mirror.other/pytorch"),
                          pkg("idna", "https://pypi.org/simple")))
    assert Mirrors(spec, {"pytorch": "https://m/pt"}).for_packages(lock) == {"filelock": "https://m/pt",
                                                                          "torch": "https://m/pt"}
    assert Mirrors(spec, {"pypi": "https://m/pypi"}).for_packages(lock) == {"idna": "https://m/pypi"}
    # Two spec indexes at one URL: the one the spec pins the package to, not the first declared.
    spec_file.write_text(spec_file.read_text().replace(
        "[packages]", '[indexes.internal]\nurl = "https://pypi.org/simple/"\n'
                      '[packages]\nidna = { version = "==1.0", index = "internal" }'))
    both = {"pypi": "https://m/pypi", "internal": "https://m/internal"}
    assert Mirrors(load_spec(spec_file), both).for_packages(lock) == {"idna": "https://m/internal"}
