"""build: wheels from patched sources, keyed by input digest, bit-reproducible, hermetic.

Build backends come from tests/.wheels (the README's test set-up step, ``python
tests/kit/backends.py``), served on a loopback index: no test reaches PyPI. CMake builds
are slow on small machines, so the C extension fixture is built as few times as possible:
the module-scoped fixtures below share one store between tests.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from envlock import runner
from envlock.build import buildenv, builder, requirements, sources, wheelzip
from envlock.commands import buildsession
from envlock.errors import BuildError, SourceTreeError
from envlock.model.spec import BuildSpec, FetchContentInput, SourceSpec
from envlock.model.target import find_python
from envlock.patches import patchapply, patchfile
from envlock.store import trees
from envlock.store.store import Store
from kit import sglike
from kit.index import IndexServer
from kit.locks import sha256_of
from kit.sglike import SgLike, commit_all, init_repo, write

ROOT = Path(__file__).resolve().parents[1]
TORCH_A = "2.12.0.dev20260307"
TORCH_B = "2.12.0.dev20260308"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store.open(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wheelhouse")


@dataclass(frozen=True)
class Kit:
    sg: SgLike
    store: Store
    index: IndexServer
    wheelhouse: Path
    patched: patchapply.PatchedTree
    epoch: int
    torch_wheels: dict[str, Path]
    kdep: Path  # the kernel's FetchContent input, checked out (as envlock.commands.build does)

    def env(self, torch: str) -> tuple[requirements.BuildEnvPackage, ...]:
        wheel = self.torch_wheels[torch]
        return (requirements.BuildEnvPackage("torchlike", torch, sha256_of(wheel), wheel),)

    def kernel(self, torch: str = TORCH_A, tree: patchapply.PatchedTree | None = None) -> builder.BuildRequest:
        spec = BuildSpec(
            name="sglike-kernel",
            source="sglike",
            subdirectory="sgl-kernel",
            isolation=False,  # compiled against the env's own torchlike headers
            env={"SGLIKE_ARCH_LIST": "12.0a"},
            config_settings={"cmake.define.SGLIKE_ENABLE_FA3": "OFF"},
            requires=("scikit-build-core>=0.10",),
            fetchcontent=(FetchContentInput(sglike.KDEP_NAME, self.sg.kdep_url, self.sg.kdep_commit),),
        )
        return builder.BuildRequest(
            spec, (tree or self.patched).tree, self.epoch, "3.11", None, self.index.url("pypi"), self.env(torch),
            fetchcontent={sglike.KDEP_NAME: self.kdep},
        )

    def package(self, tree: patchapply.PatchedTree | None = None) -> builder.BuildRequest:
        spec = BuildSpec(
            name="sglike", source="sglike", subdirectory="python", env={"SETUPTOOLS_SCM_PRETEND_VERSION": "0.5.9"}
        )
        return builder.BuildRequest(spec, (tree or self.patched).tree, self.epoch, "3.11", None, self.index.url("pypi"))


@pytest.fixture(scope="module")
def kit(
    sg: SgLike, store: Store, backend_index: IndexServer, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Kit:
    source = sources.prepare(SourceSpec("sglike", git=sg.url, rev=sg.pin), store, sg.repo)
    patches = patchfile.load_patches(sg.patches_dir, sg.patches)
    patched = patchapply.apply_all("sglike", source.tree, source.tree_digest, patches, store)
    folder = tmp_path_factory.mktemp("torch")
    torch = {v: sglike.torchlike_wheel(folder, v) for v in (TORCH_A, TORCH_B)}
    kdep = sources.checkout(store, sg.kdep_url, sg.kdep_commit).tree
    return Kit(sg, store, backend_index, wheelhouse, patched, source.source_date_epoch, torch, kdep)


@pytest.fixture(scope="module")
def built(kit: Kit) -> tuple[builder.BuiltWheel, builder.BuiltWheel]:
    """The kernel and the package, built once for the module."""
    return (
        builder.build_wheel(kit.kernel(), kit.store, kit.wheelhouse),
        builder.build_wheel(kit.package(), kit.store, kit.wheelhouse),
    )


def _venv_python(tmp: Path, *wheels: Path) -> Path:
    venv = tmp / "venv"
    assert runner.uv(["venv", "--no-project", "--python", "3.11", venv]).ok
    python = venv / "bin" / "python"
    result = runner.uv(["pip", "install", "--python", python, "--no-deps", "--no-index", *wheels])
    assert result.ok, result.tail()
    return python


@pytest.mark.slow
def test_patched_sglike_builds_installs_and_imports(
    kit: Kit, built: tuple[builder.BuiltWheel, ...], tmp_path: Path
) -> None:
    kernel, package = built
    assert kernel.rebuilt and package.rebuilt
    assert kernel.filename == "sglike_kernel-0.1.0-cp311-cp311-linux_x86_64.whl"
    assert package.filename == "sglike-0.5.9-py3-none-any.whl"
    for wheel in built:
        assert wheel.wheel == kit.wheelhouse / wheel.filename
        assert sha256_of(wheel.wheel) == wheel.sha256
        assert wheel.store_path == kit.store.path("builds", wheel.input_digest.removeprefix("sha256:")) / wheel.filename
        assert wheel.locked().sha256 == wheel.sha256
    python = _venv_python(tmp_path, kernel.wheel, package.wheel, kit.torch_wheels[TORCH_A])
    probe = runner.run(
        [
            python,
            "-c",
            (
                "import sglike, sglike_kernel as k; "
                "print(sglike.kernel_add(2, 3), k.mul(6, 7), k.magic(), k.built_against(), sglike.max_size(12, 4))"
            ),
        ]
    )
    assert probe.ok, probe.tail()
    # add from the pin, mul from patch 0002, magic from the FetchContent dep, the env's torch
    # headers, and compute capability 12 from patch 0001.
    assert probe.stdout.split() == ["5", "42", "42", TORCH_A, str(64 * 1024 * 1024)]


@pytest.mark.slow
def test_fetchcontent_input_is_prefetched_and_nothing_is_downloaded(
    kit: Kit, built: tuple[builder.BuiltWheel, ...]
) -> None:
    kernel = built[0]
    assert kernel.log is not None
    log = kernel.log.read_text()
    fc_dir = kit.store.path("sources", f"git-{kit.sg.kdep_commit}") / "tree"
    # The build sees it where it is, or (in a private mount namespace) mounted at one fixed path.
    seen = fc_dir if "(not fixed: " in log else buildenv.FIXED / buildenv.INNER / "fetchcontent" / "repo-kdep"
    assert f"--config-setting cmake.define.FETCHCONTENT_SOURCE_DIR_REPO-KDEP={seen}" in log
    assert str(fc_dir) in log
    assert "--config-setting cmake.define.FETCHCONTENT_FULLY_DISCONNECTED=ON" in log
    assert "invalid.invalid" not in log  # CMakeLists' URL (which does not exist) was never tried
    recipe = (kernel.store_path.parent / "recipe.json").read_text()
    assert kit.sg.kdep_commit in recipe


@pytest.mark.slow
def test_same_inputs_do_not_rebuild(kit: Kit, built: tuple[builder.BuiltWheel, ...]) -> None:
    again = [
        builder.build_wheel(kit.kernel(), kit.store, kit.wheelhouse),
        builder.build_wheel(kit.package(), kit.store, kit.wheelhouse),
    ]
    assert sum(w.rebuilt for w in again) == 0
    assert [(w.sha256, w.input_digest) for w in again] == [(w.sha256, w.input_digest) for w in built]
    # A deleted wheelhouse copy comes back from the store, still without a build.
    again[0].wheel.unlink()
    restored = builder.build_wheel(kit.kernel(), kit.store, kit.wheelhouse)
    assert not restored.rebuilt and restored.wheel.is_file()


@pytest.mark.slow
def test_check_is_bit_identical_for_kernel_and_package(kit: Kit, built: tuple[builder.BuiltWheel, ...]) -> None:
    for request, first in ((kit.kernel(), built[0]), (kit.package(), built[1])):
        result = builder.check(request, kit.store, kit.wheelhouse, expected_sha256=first.sha256)
        assert result.reproducible, result.to_dict()
        assert result.actual_sha256 == first.sha256 and result.differing == ()


@pytest.mark.slow
def test_torch_pin_changes_the_kernel_digest_and_rebuilds(kit: Kit, built: tuple[builder.BuiltWheel, ...]) -> None:
    plan_a = builder.plan(kit.kernel(TORCH_A), kit.store)
    plan_b = builder.plan(kit.kernel(TORCH_B), kit.store)
    assert plan_a.input_digest == built[0].input_digest != plan_b.input_digest
    assert plan_b.recipe["build-env"]["env-packages"] == [
        f"torchlike=={TORCH_B} sha256:{kit.env(TORCH_B)[0].sha256}"
    ]
    rebuilt = builder.build_wheel(kit.kernel(TORCH_B), kit.store, kit.wheelhouse)
    assert rebuilt.rebuilt and rebuilt.sha256 != built[0].sha256  # other headers, other binary


@pytest.mark.slow
def test_other_pypi_pins_do_not_touch_the_kernel(
    kit: Kit, built: tuple[builder.BuiltWheel, ...], tmp_path: Path
) -> None:
    """The build env is the closure of the kernel's build requirements, not the whole env."""
    from kit.wheels import build_wheel

    torch = kit.env(TORCH_A)[0]
    extras = []
    for version in ("1.0", "2.0"):  # an unrelated PyPI package, pinned two ways
        wheel = build_wheel(tmp_path / version, "requestslike", version)
        extras.append(requirements.BuildEnvPackage("requestslike", version, sha256_of(wheel),
                                            wheel))
    digests = {
        builder.plan(replace(kit.kernel(), env_packages=(torch, extra)), kit.store).input_digest for extra in extras
    }
    assert digests == {built[0].input_digest}
    again = builder.build_wheel(replace(kit.kernel(), env_packages=(torch, extras[1])), kit.store, kit.wheelhouse)
    assert not again.rebuilt  # build count 0
    # And the build cannot see what its digest leaves out: the build venv holds the closure only.
    plan_ = builder.plan(replace(kit.kernel(), env_packages=(torch, extras[0])), kit.store)
    assert [p.name for p in plan_.env_packages] == ["torchlike"]
    python = builder._make_build_venv(plan_, tmp_path / "scratch", tmp_path / "build.log", kit.store)
    site = python.parent.parent / "lib" / "python3.11" / "site-packages"
    assert (site / "torchlike").is_dir() and not (site / "requestslike").exists()


def test_build_env_closure_follows_requirements_and_markers(tmp_path: Path) -> None:
    from kit.wheels import build_wheel

    def pkg(name: str, requires: list[str]) -> requirements.BuildEnvPackage:
        wheel = build_wheel(tmp_path, name, "1.0", requires=requires)
        return requirements.BuildEnvPackage(name, "1.0", "0" * 64, wheel)

    env = (
        pkg("torch", ["filelock", "pytorch-triton; platform_machine == 'x86_64'", "winonly; sys_platform == 'win32'"]),
        pkg("filelock", []),
        pkg("pytorch-triton", []),
        pkg("winonly", []),
        pkg("transformers", ["filelock"]),
    )
    environment = {"python_version": "3.12", "python_full_version": "3.12.0", "sys_platform": "linux",
                   "platform_machine": "x86_64", "platform_system": "Linux", "os_name": "posix",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython",
                   "platform_release": "", "platform_version": "", "implementation_version": "3.12.0"}
    names = [p.name for p in requirements.build_env_closure(env, {"torch"}, environment)]
    assert names == ["torch", "filelock", "pytorch-triton"]


def test_patch_changes_rebuild_only_what_they_touch(
    kit: Kit, built: tuple[builder.BuiltWheel, ...], tmp_path: Path
) -> None:
    source = sources.prepare(SourceSpec("sglike", git=kit.sg.url, rev=kit.sg.pin), kit.store, kit.sg.repo)
    patches = patchfile.load_patches(kit.sg.patches_dir, kit.sg.patches)

    def with_edit(index: int, old: str, new: str) -> patchapply.PatchedTree:
        edited = tmp_path / kit.sg.patches[index]
        edited.write_text((kit.sg.patches_dir / kit.sg.patches[index]).read_text().replace(old, new))
        changed = list(patches)
        changed[index] = patchfile.parse_patch_file(edited, label=kit.sg.patches[index])
        return patchapply.apply_all("sglike", source.tree, source.tree_digest, changed, kit.store)

    kernel_patch = with_edit(1, '"a * b"', '"a times b"')  # 0002 touches sgl-kernel/ only
    assert builder.plan(kit.kernel(tree=kernel_patch), kit.store).input_digest != built[0].input_digest
    assert builder.plan(kit.package(tree=kernel_patch), kit.store).input_digest == built[1].input_digest

    python_patch = with_edit(2, "kernel is optional", "kernel may be missing")  # 0003: python/ only
    assert builder.plan(kit.kernel(tree=python_patch), kit.store).input_digest == built[0].input_digest
    rebuilt = builder.build_wheel(kit.package(tree=python_patch), kit.store, kit.wheelhouse)
    assert rebuilt.rebuilt and rebuilt.input_digest != built[1].input_digest


def test_recipe_changes_change_the_digest(kit: Kit, built: tuple[builder.BuiltWheel, ...]) -> None:
    base = kit.package()
    digests = {builder.plan(base, kit.store).input_digest}
    for spec in (
        replace(base.spec, env={"SETUPTOOLS_SCM_PRETEND_VERSION": "0.5.10"}),
        replace(base.spec, config_settings={"x": "y"}),
    ):
        digests.add(builder.plan(replace(base, spec=spec), kit.store).input_digest)
    digests.add(builder.plan(replace(base, source_date_epoch=base.source_date_epoch + 1), kit.store).input_digest)
    assert len(digests) == 4
    recipe = builder.plan(base, kit.store).recipe
    assert set(recipe["toolchain"]) == {"cc", "c++", "cmake", "nvcc", "uv"}
    assert recipe["build-env"]["requirements"][0].startswith("setuptools==")
    assert "--hash=sha256:" in recipe["build-env"]["requirements"][0]


def test_non_deterministic_build_is_caught_and_the_file_named(kit: Kit, tmp_path: Path) -> None:
    folder = tmp_path / "nondet"
    write(folder, sglike.NONDET)
    tree, _digest = sources.snapshot_path(kit.store, folder)
    spec = BuildSpec(name="nondet", source="nondet")
    request = builder.BuildRequest(spec, tree, trees.PATH_SOURCE_EPOCH, "3.11", None, kit.index.url("pypi"))
    result = builder.check(request, kit.store, kit.wheelhouse)
    assert not result.reproducible
    assert result.differing == ("nondet-1.0.dist-info/RECORD", "nondet/stamp.py")
    assert result.kept is not None and result.kept.is_file()
    assert result.to_dict()["reproducible"] is False


def test_failed_build_keeps_its_log(kit: Kit, tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    write(
        folder,
        {
            "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "broken"\nversion = "1.0"\n',
            "setup.py": "raise SystemExit('broken on purpose: expected failure 1234')\n",
        },
    )
    tree, _digest = sources.snapshot_path(kit.store, folder)
    request = builder.BuildRequest(
        BuildSpec(name="broken", source="broken"), tree, trees.PATH_SOURCE_EPOCH, "3.11", None, kit.index.url("pypi")
    )
    with pytest.raises(BuildError) as exc:
        builder.build_wheel(request, kit.store, kit.wheelhouse)
    message = str(exc.value)
    assert message.startswith("[builds.broken]: build failed (uv build exit ")
    log = Path(message.splitlines()[0].rsplit("build log: ", 1)[1])
    assert log.is_file() and log.parent == kit.store.path("logs", "x").parent
    assert "broken on purpose: expected failure 1234" in log.read_text()
    assert "broken on purpose: expected failure 1234" in message  # the tail is shown
    assert not any(p.name.startswith("build-broken") for p in kit.store.tmp.iterdir())


def test_wrong_distribution_name_is_an_error(kit: Kit) -> None:
    request = kit.package()
    request = replace(request, spec=replace(request.spec, name="sglang"))
    with pytest.raises(BuildError, match=r"built sglike-0\.5\.9-py3-none-any\.whl, but the build is named 'sglang'"):
        builder.build_wheel(request, kit.store, kit.wheelhouse)


def test_isolation_false_needs_requires(kit: Kit) -> None:
    request = kit.kernel()
    request = replace(request, spec=replace(request.spec, requires=()))
    with pytest.raises(BuildError, match=r"isolation = false needs requires = \[\.\.\.\]"):
        builder.plan(request, kit.store)


def test_a_build_refuses_links_out_of_its_source_in_what_it_reads(store: Store, tmp_path: Path) -> None:
    """A git commit pins a link's text, not what it points to: a build must not read through it."""
    outside = tmp_path / "outside"
    write(outside, {"extra.py": "VALUE = 1\n", "pyproject.toml": "[project]\nname = 'pkg'\n"})
    repo = tmp_path / "repo"
    init_repo(repo)
    write(repo, {"python/pyproject.toml": "[project]\nname = 'pkg'\nversion = '1'\n", "python/pkg/__init__.py": ""})
    (repo / "python/pkg/extra.py").symlink_to(outside / "extra.py")
    (repo / "vendored").symlink_to(outside)
    commit = commit_all(repo, "links out of the tree")
    # Checked out all the same: a commit may hold such a link where no build reads it.
    tree = sources.checkout(store, str(repo), commit).tree
    spec = BuildSpec(name="pkg", source="s", subdirectory="python")
    request = builder.BuildRequest(spec, tree, 0, "3.11", None, "http://127.0.0.1:9/simple")
    with pytest.raises(SourceTreeError) as info:  # before anything is resolved or built
        builder.plan(request, store)
    assert str(info.value) == (f"[builds.pkg] (source 's'): symlink python/pkg/extra.py -> {outside}/extra.py leads "
                               "outside the source tree; expected links that stay inside it (a link is hashed by its "
                               "text, not by what it points to)")
    with pytest.raises(SourceTreeError) as info:
        builder.plan(replace(request, spec=replace(spec, subdirectory="vendored")), store)
    assert str(info.value) == (f"[builds.pkg] (source 's'): subdirectory vendored leads outside the source tree "
                               f"(through the symlink vendored -> {outside}); expected a folder inside it")


@pytest.mark.slow
def test_mini_kernel_example_builds_patched_and_isolated(kit: Kit, tmp_path: Path) -> None:
    """examples/mini-kernel (the demo env's path source) with patches/mini-kernel/0001."""
    source = sources.prepare(SourceSpec("mini-kernel", path="examples/mini-kernel"), kit.store, ROOT)
    labels = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "patches/mini-kernel").glob("*.patch"))
    assert [s.state for s in patchapply.status(source.tree, patchfile.load_patches(ROOT, labels))] == ["applies"]
    patched = patchapply.apply_all(
        "mini-kernel", source.tree, source.tree_digest, patchfile.load_patches(ROOT, labels), kit.store
    )
    request = builder.BuildRequest(
        BuildSpec(name="mini-kernel", source="mini-kernel"),
        patched.tree,
        source.source_date_epoch,
        "3.11",
        None,
        kit.index.url("pypi"),
    )
    wheel = builder.build_wheel(request, kit.store, kit.wheelhouse)
    with zipfile.ZipFile(wheel.wheel) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    python = _venv_python(tmp_path, wheel.wheel)
    probe = runner.run([python, "-c", "import mini_kernel as m; print(m.add(2, 3), m.dot([1, 2], [3, 4]))"])
    assert probe.stdout.split() == ["5", "11.0"], probe.tail()


def test_wheel_diff_names_members(tmp_path: Path) -> None:
    def wheel(name: str, files: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            for arc, data in files.items():
                zf.writestr(zipfile.ZipInfo(arc, (2020, 1, 1, 0, 0, 0)), data)
        return path

    a = wheel("a.whl", {"p/a.py": b"1", "p/b.py": b"2", "p/gone.py": b""})
    b = wheel("b.whl", {"p/a.py": b"1", "p/b.py": b"3", "p/new.py": b""})
    assert wheelzip.wheel_diff(a, b) == ["p/b.py", "p/gone.py (only in the first build)",
                                        "p/new.py (only in the rebuild)"]


def test_normalize_wheel_fixes_times_and_modes(tmp_path: Path) -> None:
    path = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("x/run.sh", (2031, 5, 6, 7, 8, 10))
        info.external_attr = 0o100775 << 16
        zf.writestr(info, b"#!/bin/sh\n")
        zf.writestr(zipfile.ZipInfo("x/a.py", (2030, 1, 1, 0, 0, 0)), b"")
    wheelzip.normalize_wheel(path, 1772877960)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == ["x/run.sh", "x/a.py"]
    assert {i.date_time for i in infos} == {(2026, 3, 7, 10, 6, 0)}
    assert [i.external_attr >> 16 for i in infos] == [0o100755, 0o100644]


def test_the_build_interpreter_does_not_depend_on_a_nearby_venv(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # uv's discovery prefers an active or ./.venv; the build must take what install takes.
    assert runner.uv(["venv", "-q", "--python", "3.11", str(tmp_path / ".venv")]).ok
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / ".venv"))
    requirements.interpreter.cache_clear()
    try:
        found = requirements.interpreter("3.11")
    finally:
        requirements.interpreter.cache_clear()
    assert found["executable"] == str(find_python("3.11"))
    assert not found["executable"].startswith(str(tmp_path))
    assert found["version"].startswith("3.11.") and found["platform"]



def test_a_fetchcontent_repository_is_fetched_through_its_mirror(kit: Kit, tmp_path: Path) -> None:
    # An air-gapped cluster cannot reach github.com/NVIDIA/cutlass: --source NAME=URL serves it.
    request = kit.kernel()
    unreachable = replace(request.spec, fetchcontent=(
        FetchContentInput(sglike.KDEP_NAME, "https://example.invalid/kdep.git", kit.sg.kdep_commit),))
    store = Store.open(tmp_path / "home")  # nothing fetched yet
    with pytest.raises(BuildError) as info:
        buildsession.checkout_fetchcontent(unreachable, store, {})
    assert f"--source {sglike.KDEP_NAME}=URL" in str(info.value)
    checkouts = buildsession.checkout_fetchcontent(unreachable, store, {sglike.KDEP_NAME: str(kit.sg.kdep_url)})
    planned = builder.plan(replace(request, spec=unreachable, fetchcontent=checkouts), store)
    assert planned.fetchcontent_dirs[sglike.KDEP_NAME] == store.path("sources", f"git-{kit.sg.kdep_commit}") / "tree"
    assert "https://example.invalid/kdep.git" in json.dumps(planned.recipe)  # the recipe names the spec's URL


def test_a_fetchcontent_checkout_with_a_link_out_of_it_is_refused(kit: Kit, tmp_path: Path) -> None:
    # CMake reads it as a source folder, and the recipe pins only its commit: a header that is a
    # link to the host's /usr/include would build from this machine's bytes under one digest.
    repo = tmp_path / "dep"
    init_repo(repo)
    write(repo, {"CMakeLists.txt": "project(dep)\n", "include/ok.h": "#define OK 1\n"})
    (repo / "include" / "inside.h").symlink_to("ok.h")
    (repo / "include" / "host.h").symlink_to("/usr/include/stdio.h")
    commit = commit_all(repo, "dep")
    request = kit.kernel()
    spec = replace(request.spec, fetchcontent=(FetchContentInput(sglike.KDEP_NAME, str(repo), commit),))
    store = Store.open(tmp_path / "home")
    checkouts = {sglike.KDEP_NAME: sources.checkout(store, str(repo), commit).tree}
    with pytest.raises(SourceTreeError) as info:
        builder.plan(replace(request, spec=spec, fetchcontent=checkouts), store)
    assert str(info.value) == (
        f"[builds.{request.spec.name}]: fetchcontent.{sglike.KDEP_NAME}: symlink include/host.h -> "
        "/usr/include/stdio.h leads outside the source tree; expected links that stay inside it (a link is hashed "
        "by its text, not by what it points to)")
    assert info.value.exit_code == 2


def test_the_input_digest_covers_a_tag_s_commit_and_an_archive_s_sha256(kit: Kit) -> None:
    request = kit.kernel()
    url, commit = kit.sg.kdep_url, kit.sg.kdep_commit
    tagged = replace(request.spec, fetchcontent=(FetchContentInput(sglike.KDEP_NAME, url, sglike.KDEP_TAG),))
    with pytest.raises(ValueError, match="has no pin of fetchcontent repo-kdep"):  # a tag alone pins nothing
        builder.plan(replace(request, spec=tagged), kit.store)
    pin = {"name": sglike.KDEP_NAME, "git": url, "rev": commit}
    by_tag = builder.plan(replace(request, spec=tagged, fetchcontent_pins={sglike.KDEP_NAME: pin}), kit.store)
    # The tag's commit is what is digested: the same as naming that commit in the spec.
    assert by_tag.input_digest == builder.plan(request, kit.store).input_digest
    assert by_tag.recipe["fetchcontent"] == [pin]
    moved = {**pin, "rev": "e" * 40}
    assert builder.plan(replace(request, spec=tagged, fetchcontent_pins={sglike.KDEP_NAME: moved}),
                      kit.store).input_digest != by_tag.input_digest
    archive = replace(request.spec, fetchcontent=(FetchContentInput(sglike.KDEP_NAME, url="https://x/kdep.tar.gz"),))
    digests = {
        builder.plan(replace(request, spec=archive, fetchcontent_pins={sglike.KDEP_NAME: {
            "name": sglike.KDEP_NAME, "url": "https://x/kdep.tar.gz", "sha256": sha * 64}}), kit.store).input_digest
        for sha in "12"
    }
    assert len(digests) == 2  # another archive, another build


READS_OUT = {
    # As sglang's python/pyproject.toml names ../rust/sglang-grpc/Cargo.toml for setuptools-rust: a backend
    # that reads, from the source outside the subdirectory, what the pyproject.toml names.
    "python/pyproject.toml": ('[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
                              '\n[project]\nname = "readsout"\nversion = "1.0"\n\n[tool.setuptools]\npackages = '
                              '["readsout"]\n\n[tool.readsout]\ndata = "../rust/grpc/data.txt"\n'),
    "python/setup.py": ("import tomllib\nfrom pathlib import Path\n\nfrom setuptools import setup\n\n"
                        "named = tomllib.loads(Path('pyproject.toml').read_text())['tool']['readsout']['data']\n"
                        "Path('readsout/_data.py').write_text(f'DATA = {Path(named).read_text()!r}\\n')\nsetup()\n"),
    "python/readsout/__init__.py": "",
    "rust/grpc/data.txt": "v1\n",
    "docs/unrelated.txt": "not read by the build\n",
}


def test_a_subdirectory_build_reads_its_source_above_it_and_its_digest_covers_that(
        backend_index: IndexServer, store: Store, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init_repo(repo)
    write(repo, READS_OUT)
    (repo / "docs" / "host").symlink_to("/etc")  # a link out of the source, where no build reads
    first = commit_all(repo, "reads ../rust")
    write(repo, {"docs/unrelated.txt": "edited\n"})
    unrelated = commit_all(repo, "docs moved")
    write(repo, {"rust/grpc/data.txt": "v2\n"})
    read = commit_all(repo, "the data it reads moved")
    spec = BuildSpec(name="readsout", source="s", subdirectory="python")

    def request(commit: str) -> builder.BuildRequest:
        tree = sources.checkout(store, str(repo), commit).tree
        return builder.BuildRequest(spec, tree, trees.PATH_SOURCE_EPOCH, "3.11", None, backend_index.url("pypi"))

    plans = {c: builder.plan(request(c), store) for c in (first, unrelated, read)}
    assert list(plans[first].recipe["source-outside"]) == ["rust/grpc"]  # the folder of the file it names
    assert plans[unrelated].input_digest == plans[first].input_digest  # docs/ is not read
    assert plans[read].input_digest != plans[first].input_digest  # rust/grpc/ is
    wheel = builder.build_wheel(request(first), store, tmp_path / "wheelhouse")
    with zipfile.ZipFile(wheel.wheel) as zf:
        assert zf.read("readsout/_data.py").decode() == "DATA = 'v1\\n'\n"
    # The link out of the source is left out of the build's copy (it would read this machine's /etc).
    assert trees.links_out(request(first).tree) == ["docs/host"]
    assert builder.check(request(first), store, tmp_path / "wheelhouse-check").reproducible


def test_a_link_in_the_subdirectory_to_elsewhere_in_the_source_is_covered(store: Store, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init_repo(repo)
    write(repo, {"python/pyproject.toml": "[project]\nname = 'pkg'\nversion = '1'\n", "python/pkg/__init__.py": "",
                 "shared/common.py": "X = 1\n", "docs/x.txt": "x\n"})
    (repo / "python/pkg/common.py").symlink_to("../../shared/common.py")
    commits = [commit_all(repo, "a link to shared/")]
    for rel, text in (("docs/x.txt", "y\n"), ("shared/common.py", "X = 2\n")):
        write(repo, {rel: text})
        commits.append(commit_all(repo, f"{rel} moved"))
    spec = BuildSpec(name="pkg", source="s", subdirectory="python")
    digests = []
    for commit in commits:
        tree = sources.checkout(store, str(repo), commit).tree
        plan = builder.plan(builder.BuildRequest(spec, tree, 0, "3.11", None, None, locked_requirements=()), store)
        digests.append(plan.input_digest)
        assert list(plan.recipe["source-outside"]) == ["shared"]
    assert digests[0] == digests[1] != digests[2]
