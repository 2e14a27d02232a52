"""``[env] gpus`` at lock time, ``envlock kernels`` and ``diff``'s kernel changes, on wheels holding
shared objects compiled by the real nvcc (tests/kit/cuda.py), served by the loopback index."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.model.lockfile import read_lock
from kit.cuda import CudaKit, gencode
from kit.index import IndexServer
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

TAG = "py3-none-manylinux_2_28_x86_64"
#: The wheel of the issue: only sm_90 SASS and compute_120a PTX.
KERN_1 = [*gencode("sm_90"), *gencode("compute_120a")]
KERN_2 = [*gencode("sm_120a"), *gencode("compute_120a")]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, cuda_kit: CudaKit) -> Iterator[IndexServer]:
    root = tmp_path_factory.mktemp("gpu-index")
    server = IndexServer(root / "served")
    server.add_index("pypi", hashes=True)

    def add(name: str, version: str, files: dict[str, bytes | str]) -> None:
        server.add("pypi", build_wheel(root / "wheels", name, version, tag=TAG, files=files))

    add("kern", "1.0", {"kern/__init__.py": "", "kern/ops.so": cuda_kit.library("kern1", KERN_1).read_bytes()})
    add("kern", "2.0", {"kern/__init__.py": "", "kern/ops.so": cuda_kit.library("kern2", KERN_2).read_bytes()})
    sm120a = cuda_kit.library("a", gencode("sm_120a")).read_bytes()
    sm90 = cuda_kit.library("b", gencode("sm_90")).read_bytes()
    add("duo", "1.0", {"duo/a.so": sm120a, "duo/b.so": sm90})
    # One file with a kernel for sm_120a, 20 without (flashinfer-cubin's sm_103 cubins, small).
    many: dict[str, bytes | str] = {"many/a.so": sm120a, **{f"many/k{i:02}.so": sm90 for i in range(20)}}
    add("many", "1.0", many)
    server.add("pypi", build_wheel(root / "wheels", "many", "1.0", tag="py3-none-manylinux_2_28_aarch64", files=many))
    add("plain", "1.0", {"plain/__init__.py": "X = 1\n"})
    server.add("pypi", build_wheel(root / "wheels", "kern", "1.0", tag="py3-none-manylinux_2_28_aarch64",
                                   files={"kern/__init__.py": "",
                                          "kern/ops.so": cuda_kit.library("kern1", KERN_1).read_bytes()}))
    server.start()
    yield server
    server.stop()


def spec(index: IndexServer, packages: str, gpus: str | None = None) -> str:
    line = f"gpus = {gpus}\n" if gpus is not None else ""
    return (f'[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"\n{line}'
            f'[indexes.pypi]\nurl = "{index.url("pypi")}"\ndefault = true\n[packages]\n{packages}\n')


def test_a_named_gpu_no_file_has_a_kernel_for_fails_the_lock_naming_the_wheel_the_file_and_its_arches(  # type: ignore[no-untyped-def]
        ws, cli, index: IndexServer) -> None:
    path = ws.write_spec("e", spec(index, 'kern = "==1.0"\nplain = "==1.0"', '["sm_100"]'))
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err == (f"envlock: error: {path}: env.gpus: kern has no kernel for sm_100 (10.0)\n"
                          "  kern has no kernel for sm_100 (10.0): kern/ops.so: SASS sm_90; PTX compute_120a\n")
    assert not (ws.root / "locks" / "pylock.e.toml").exists()


def test_a_known_gap_the_spec_allows_for_that_package_and_gpu_is_a_note(
        ws: ScratchWorkspace, cli: Cli, index: IndexServer) -> None:
    """``[resolution] allow-no-kernels``: a package known to need no kernel for a GPU (flashinfer-cubin's
    trtllm-gen cubins are for sm_100/sm_103; on SM120 flashinfer runs others) is a note for that GPU only."""
    allow = ('[resolution]\nallow-no-kernels = [{ package = "kern", gpus = ["10.0"], '
             'reason = "its ops are for Hopper; not called on Blackwell" }]\n')
    ws.write_spec("e", spec(index, 'kern = "==1.0"\nplain = "==1.0"', '["sm_100"]') + allow)
    done = cli("lock", "e")
    assert done.code == 0, done.err
    assert ("  note: kern has no kernel for sm_100 (10.0), allowed by resolution.allow-no-kernels (its ops are "
            "for Hopper; not called on Blackwell)") in done.out.splitlines()
    # Another GPU the package lacks still fails: the allowance names its GPUs.
    path = ws.write_spec("e", spec(index, 'kern = "==1.0"', '["sm_100", "sm_89"]') + allow)
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err.splitlines()[1:] == ["  kern has no kernel for sm_89 (8.9): kern/ops.so: SASS sm_90; PTX "
                                           "compute_120a"], failed.err
    bad = ('[resolution]\nallow-no-kernels = [{ package = "kern", gpus = ["h100"], reason = "" }, '
           '{ package = "kern", gpus = [] , reason = "x", extra = 1 }]\n')
    path = ws.write_spec("e", spec(index, 'kern = "==1.0"', '["sm_100"]') + bad)
    failed = cli("lock", "e")
    assert failed.code == 2
    assert failed.err.splitlines()[1:] == [
        "  resolution.allow-no-kernels[0].reason: expected why the package needs no kernel for those GPUs, found ''",
        "  resolution.allow-no-kernels[1].extra: unknown key; expected one of: gpus, package, reason",
        "  resolution.allow-no-kernels[1].gpus: expected one GPU or more, as env.gpus names them (\"sm_120a\")",
        "  resolution.allow-no-kernels[0].gpus[0]: expected a GPU as nvcc names its arch (\"sm_120a\", \"sm_90\") or "
        "a compute capability (\"12.0\"), found 'h100'"], failed.err
    assert str(path) in failed.err


def test_with_sm_120a_it_passes_and_the_lock_records_the_arches_and_the_minimum_driver(  # type: ignore[no-untyped-def]
        ws, cli, index: IndexServer) -> None:
    ws.write_spec("e", spec(index, 'kern = "==1.0"\nplain = "==1.0"', '["sm_120a", "9.0"]'))
    done = cli("lock", "e")
    assert done.code == 0, done.err
    text = ws.lock_text("e")
    assert 'min-driver = "580"\n' in text  # PTX ISA 9.0: CUDA 13
    assert text.endswith('\n[tool.envlock.kernels]\nkern = { sass = ["sm_90"], ptx = ["compute_120a"], cuda = [13] }\n')
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    assert lock.to_toml() == text  # read back as written
    listing = cli("kernels", "e", "--json")
    assert listing.code == 0, listing.err
    report = json.loads(listing.out)
    assert [(v["package"], v["gpu"], v["runs"]) for v in report["verdicts"]] == [
        ("kern", "sm_120a", True), ("kern", "9.0", True)]
    assert report["min_driver"] == "580"
    [kern] = [p for p in report["packages"] if p["name"] == "kern"]
    assert kern["files"][0]["kernels"] == [["sass", 90, "", "", ""], ["sass", 90, "", "", ""],
                                           ["ptx", 120, "a", "9.0", "zstd"]]


def test_a_spec_without_gpus_locks_as_before(ws, cli, index: IndexServer) -> None:  # type: ignore[no-untyped-def]
    ws.write_spec("e", spec(index, 'kern = "==1.0"\nplain = "==1.0"'))
    assert cli("lock", "e").code == 0
    text = ws.lock_text("e")
    assert "kernels" not in text and "min-driver" not in text
    store_home = Path(str(ws.root.parent / "home"))
    assert not (store_home / "v1" / "kernels").exists()  # no wheel was read for it


def test_partial_coverage_is_a_note_per_package_and_gpu(ws, cli, index: IndexServer) -> None:  # type: ignore[no-untyped-def]
    ws.write_spec("e", spec(index, 'duo = "==1.0"', '["sm_120a"]'))
    done = cli("lock", "e")
    assert done.code == 0, done.err
    assert ("  note: duo: 1 of 2 kernel-bearing files has no kernel for sm_120a (12.0) (duo/b.so); "
            "`envlock kernels e` lists each file" in done.out.splitlines())


def test_partial_coverage_of_many_files_is_one_line_with_the_count(ws: ScratchWorkspace, cli: Cli,
                                                                   index: IndexServer) -> None:
    """A real lock printed 1,146 such notes (a line per file): now one per package and GPU, naming three
    files; ``envlock kernels`` (and its ``--json``) lists every file."""
    ws.write_spec("e", spec(index, 'many = "==1.0"', '["sm_120a"]'))
    done = cli("lock", "e")
    assert done.code == 0, done.err
    said = [line for line in done.out.splitlines() if "many" in line and "note:" in line]
    assert said == ["  note: many: 20 of 21 kernel-bearing files have no kernel for sm_120a (12.0) (many/k00.so, "
                    "many/k01.so, many/k02.so and 17 more); `envlock kernels e` lists each file"]
    listing = cli("kernels", "e", "--json")
    assert listing.code == 0, listing.err
    [verdict] = json.loads(listing.out)["verdicts"]
    assert [m["path"] for m in verdict["missing"]] == [f"many/k{i:02}.so" for i in range(20)]
    assert verdict["files"] == ["many/a.so"]
    shown = cli("kernels", "e")
    assert sum("has no kernel for sm_120a" in line for line in shown.out.splitlines()) == 20  # each file there
    ws.write_spec("e", spec(index, 'many = "==1.0"', '["sm_100"]'))  # no file has one: the failure, bounded too
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err.splitlines()[1:] == [
        "  many has no kernel for sm_100 (10.0): many/a.so: SASS sm_120a; many/k00.so: SASS sm_90; many/k01.so: "
        "SASS sm_90; and 18 more file(s) (sm_90) (`envlock kernels e` lists each file)"]


def test_each_target_notes_its_partial_coverage_in_a_line(ws: ScratchWorkspace, cli: Cli,
                                                          index: IndexServer) -> None:
    """A spec of targets: a line per package, GPU and target, naming the ``kernels --target`` that lists each."""
    ws.write_spec("e", spec(index, 'many = "==1.0"').replace('platform = "x86_64-manylinux_2_28"\n', "")
                  + '[targets.x86]\nplatform = "x86_64-manylinux_2_28"\ngpus = ["sm_120a"]\n'
                  + '[targets.arm]\nplatform = "aarch64-manylinux_2_28"\ngpus = ["sm_120a"]\n')
    done = cli("lock", "e")
    assert done.code == 0, done.err
    said = [line for line in done.out.splitlines() if "kernel" in line]
    assert said == [f"  note: targets.{t}: many: 20 of 21 kernel-bearing files have no kernel for sm_120a (12.0) "
                    f"(many/k00.so, many/k01.so, many/k02.so and 17 more); `envlock kernels e --target {t}` lists "
                    "each file" for t in ("arm", "x86")]


def test_kernels_says_which_gpu_runs_what(ws, cli, index: IndexServer) -> None:  # type: ignore[no-untyped-def]
    ws.write_spec("e", spec(index, 'kern = "==1.0"\nduo = "==1.0"'))
    assert cli("lock", "e").code == 0
    ws.write_spec("e", spec(index, 'kern = "==1.0"\nduo = "==1.0"', '["sm_100"]'))  # named after the lock
    shown = cli("kernels", "e")
    assert shown.code == 1
    assert shown.out.splitlines() == [
        "duo 1.0: 2 files with kernels (duo-1.0-py3-none-manylinux_2_28_x86_64.whl)",
        "  duo/a.so: SASS sm_120a",
        "  duo/b.so: SASS sm_90",
        "kern 1.0: 1 file with kernels (kern-1.0-py3-none-manylinux_2_28_x86_64.whl)",
        "  kern/ops.so: SASS sm_90; PTX compute_120a (compressed: zstd)",
        "sm_100 (10.0): does NOT run",
        "  duo has no kernel for sm_100 (10.0): duo/a.so: SASS sm_120a; duo/b.so: SASS sm_90",
        "  kern has no kernel for sm_100 (10.0): kern/ops.so: SASS sm_90; PTX compute_120a",
        "min driver: 580 (CUDA 13: kern/ops.so PTX ISA 9.0)",
        "(2 wheels fetched into the store to be read)",
    ]


def test_diff_names_the_arches_a_package_lost_and_gained(ws, cli, index: IndexServer) -> None:  # type: ignore[no-untyped-def]
    ws.write_spec("e", spec(index, 'kern = "==1.0"', '["sm_120a"]'))
    assert cli("lock", "e").code == 0
    old = ws.root / "old.toml"
    shutil.copy(ws.root / "locks" / "pylock.e.toml", old)
    ws.write_spec("e", spec(index, 'kern = "==2.0"', '["sm_120a"]'))
    assert cli("lock", "e").code == 0
    shown = cli("diff", str(old), "e")
    assert shown.code == 0, shown.err
    assert "kernels:\n  kern: lost sm_90 SASS; gained sm_120a SASS\n" in shown.out


@pytest.mark.parametrize(("gpus", "message"), [
    ('["h100"]', 'env.gpus[0]: expected a GPU as nvcc names its arch ("sm_120a", "sm_90") or a compute capability '
                 '("12.0"), found \'h100\''),
    ('"sm_90"', "env.gpus: expected an array of strings, found 'sm_90'"),
])
def test_a_bad_gpus_key_is_named(ws, cli, index: IndexServer, gpus: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = ws.write_spec("e", spec(index, 'plain = "==1.0"', gpus))
    failed = cli("lock", "e")
    assert failed.code == 2
    assert failed.err == f"envlock: error: {path}: 1 problem in env spec 'e'\n  {message}\n"


def test_kernels_reads_a_wheel_file(cli, cuda_kit: CudaKit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wheel = build_wheel(tmp_path, "one", "1.0", tag=TAG,
                        files={"one/ops.so": cuda_kit.library("kern2", KERN_2).read_bytes()})
    shown = cli("kernels", str(wheel))
    assert shown.code == 0
    assert shown.out.splitlines()[1] == "  one/ops.so: SASS sm_120a; PTX compute_120a (compressed: zstd)"


def test_sync_on_a_machine_whose_gpus_cannot_run_the_env_notes_it(  # type: ignore[no-untyped-def]
        ws, cli, index: IndexServer, stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec(index, 'kern = "==2.0"\nplain = "==1.0"', '["sm_120a"]'))
    monkeypatch.setenv("ENVLOCK_NVML_LIBRARY", str(stub))
    monkeypatch.setenv("NVML_STUB_GPUS", "NVIDIA H100:9.0")
    synced = cli("sync", "e")
    assert synced.code == 0, synced.err
    [note] = [line for line in synced.out.splitlines() if line.startswith("  note:")]
    assert note == ("  note: this machine's GPUs cannot run the env: no kernel for kern on GPU 0 (NVIDIA H100, 9.0) "
                    "(`envlock doctor e` says what to do)")
    monkeypatch.setenv("ENVLOCK_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")  # a CPU machine: no note
    ws.write_spec("e", spec(index, 'kern = "==2.0"\nplain = "==1.0"', '["12.0"]'))
    again = cli("sync", "e")
    assert again.code == 0, again.err
    assert "note" not in again.out


def test_build_holds_what_it_built_to_the_named_gpus_with_the_rebuild_hint(  # type: ignore[no-untyped-def]
        ws, cli, backend_index: IndexServer, cuda_kit: CudaKit) -> None:
    src = ws.root / "kb"
    (src / "kb").mkdir(parents=True)
    (src / "kb" / "__init__.py").write_text("")
    (src / "kb" / "ops.so").write_bytes(cuda_kit.library("common_ops", gencode("sm_120a")).read_bytes())
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "kb"\nversion = "1.0"\n[tool.setuptools]\npackages = ["kb"]\n'
        '[tool.setuptools.package-data]\nkb = ["*.so"]\n')

    def write(gpus: str) -> Path:
        return Path(ws.write_spec("e", f'[env]\npython = "3.11"\ngpus = {gpus}\n[indexes.pypi]\n'
                                  f'url = "{backend_index.url("pypi")}"\ndefault = true\n'
                                  '[packages]\nkb = { build = "kb" }\n[sources.kb]\npath = "kb"\n'
                                  '[builds.kb]\nsource = "kb"\nenv = { TORCH_CUDA_ARCH_LIST = "12.0a" }\n'))

    path = write('["sm_90"]')
    assert cli("lock", "e").code == 0  # nothing built yet: nothing to check
    failed = cli("build", "e")
    assert failed.code == 1
    assert failed.err == (f"envlock: error: {path}: env.gpus: kb has no kernel for sm_90 (9.0)\n"
                          "  kb has no kernel for sm_90 (9.0): kb/ops.so: SASS sm_120a; rebuild with "
                          "TORCH_CUDA_ARCH_LIST=\"12.0a;9.0\" ([builds.kb] env in e.toml)\n")
    assert "[tool.envlock.builds" not in ws.lock_text("e")  # the lock was not written
    write('["sm_120a"]')
    assert cli("lock", "e").code == 0
    built = cli("build", "e")
    assert built.code == 0, built.err
    assert ws.lock_text("e").endswith('[tool.envlock.kernels]\nkb = { sass = ["sm_120a"], ptx = [] }\n')


def test_the_kernels_check_runs_per_target_against_its_own_gpus(ws: ScratchWorkspace, cli: Cli,
                                                                index: IndexServer) -> None:
    """An aarch64 target with GB200 GPUs needs sm_100 kernels; the x86_64 target's sm_90 is carried."""
    targets = ('[targets.x86]\nplatform = "x86_64-manylinux_2_28"\ngpus = ["sm_90"]\n'
               '[targets.gb200]\nplatform = "aarch64-manylinux_2_28"\ngpus = ["{gb200}"]\n')
    body = (f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "{index.url("pypi")}"\ndefault = true\n'
            '[packages]\nkern = "==1.0"\n')
    path = ws.write_spec("e", body + targets.format(gb200="sm_100"))
    failed = cli("lock", "e")
    assert failed.code == 1
    assert failed.err.splitlines() == [
        f"envlock: error: {path}: env.gpus: kern has no kernel for sm_100 (10.0)",
        "  kern has no kernel for sm_100 (10.0): kern/ops.so: SASS sm_90; PTX compute_120a",
        "  (target gb200: aarch64-manylinux_2_28, python 3.11; each target is locked on its own)"]
    ws.write_spec("e", body + targets.format(gb200="12.0"))  # its PTX compute_120a runs there
    assert cli("lock", "e").code == 0
    for target, gpu in (("x86", "sm_90"), ("gb200", "12.0")):
        report = json.loads(cli("kernels", "e", "--target", target, "--json").out)
        assert [(v["package"], v["gpu"], v["runs"]) for v in report["verdicts"]] == [("kern", gpu, True)]

