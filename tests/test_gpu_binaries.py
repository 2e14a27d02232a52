"""Reading CUDA binaries by their headers (envlock.gpu): fixtures compiled by the real nvcc, the listing
held to cuobjdump's, wheels read stored and deflated, the store's record, and the compatibility rules."""

from __future__ import annotations

import json
import subprocess
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.gpu import binaries, coverage, drivers, elf
from envlock.gpu.binaries import read_tree, read_wheel, wheel_binaries
from envlock.gpu.coverage import Gpu, judge, kernel_named, runs
from envlock.gpu.elf import ElfFile, scan_elf
from envlock.gpu.fatbin import SIGNATURE, Kernel
from envlock.store.store import Store
from kit.cuda import CudaKit, cuobjdump_path, gencode

#: name -> nvcc flags: the issue's sm_90, sm_120a and compute_120a PTX; one compressed (zstd, the ELF
#: too), one lz4; an f family and an a arch of another major; the CUDA runtime linked shared.
FIXTURES = {
    "plain": [*gencode("sm_90"), *gencode("sm_120a"), *gencode("compute_120a")],
    "small": [*gencode("sm_90"), *gencode("compute_120a"), "--compress-mode=size"],
    "fast": [*gencode("sm_90"), *gencode("compute_120a"), "--compress-mode=speed"],
    "family": [*gencode("sm_120f"), *gencode("compute_120f"), *gencode("sm_100a"), *gencode("compute_90")],
    "shared": [*gencode("sm_120a"), "-cudart", "shared"],
}


@pytest.fixture(scope="session")
def kit(cuda_kit: CudaKit) -> CudaKit:
    return cuda_kit


@pytest.fixture(scope="session")
def cuobjdump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = cuobjdump_path(tmp_path_factory.mktemp("cuobjdump"))
    if found is None:
        pytest.skip("no nvidia-cuda-cuobjdump wheel in tests/.wheels (`python tests/kit/backends.py` fetches it "
                    "where PyPI has one for this machine)")
    return found


def cuobjdump_listing(files: list[Kernel], stem: str) -> list[str]:
    """Our kernels as ``cuobjdump -lelf -lptx`` prints them: ELF and PTX numbered apart, in file order;
    cuobjdump names an ``f`` cubin by its arch alone (``sm_120``), an ``f`` PTX with it."""
    lines, counts = [], {"sass": 0, "ptx": 0}
    for k in files:
        counts[k.kind] += 1
        n = counts[k.kind]
        if k.kind == "sass":
            lines.append(f"ELF file {n:>4}: {stem}.{n}.sm_{k.arch}{'' if k.variant == 'f' else k.variant}.cubin")
        else:
            lines.append(f"PTX file {n:>4}: {stem}.{n}.sm_{k.arch}{k.variant}.ptx")
    return lines


def wheel_of(tmp: Path, so: Path, compression: int) -> Path:
    path = tmp / f"fixture-1.0-py3-none-linux_x86_64.{compression}.whl"
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr("fixture/README.txt", "not an ELF")
        zf.write(so, f"fixture/lib/{so.name}")
    return path


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_the_listing_equals_cuobjdumps(kit: CudaKit, cuobjdump: Path, name: str) -> None:
    so = kit.library(name, FIXTURES[name])
    theirs = subprocess.run([str(cuobjdump), "-lelf", "-lptx", str(so)], capture_output=True, text=True, check=True)
    found = binaries.read_file(so)
    assert found is not None
    assert cuobjdump_listing(list(found.kernels), name) == theirs.stdout.splitlines()
    assert found.problem == ""


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_wheel_member_reads_as_the_file_does_seeking_or_streaming(kit: CudaKit, tmp_path: Path, name: str,
                                                                      compression: int) -> None:
    so = kit.library(name, FIXTURES[name])
    direct = binaries.read_file(so, f"fixture/lib/{so.name}")
    read = read_wheel(wheel_of(tmp_path, so, compression))
    assert read.problem == ""
    assert read.files == (direct,)


def test_what_the_fixtures_carry(kit: CudaKit) -> None:
    def names(name: str) -> list[str]:
        found = binaries.read_file(kit.library(name, FIXTURES[name]))
        assert found is not None
        return [k.name + (f" ({k.compression})" if k.compression else "") for k in found.kernels]

    # nvcc's own device-link fatbin first (sm_90, sm_120a), then the unit's; PTX is zstd-compressed by default.
    assert names("plain") == ["sm_90", "sm_120a", "sm_90", "compute_120a (zstd)", "sm_120a"]
    assert names("small") == ["sm_90 (zstd)", "sm_90 (zstd)", "compute_120a (zstd)"]
    assert names("fast") == ["sm_90", "sm_90", "compute_120a (lz4)"]
    assert names("family") == ["sm_120f", "sm_100a", "compute_120f (zstd)", "sm_120f", "sm_100a",
                               "compute_90 (zstd)"]


def test_fatbins_a_library_keeps_among_its_data_are_read_as_cuffts_are(kit: CudaKit, tmp_path: Path) -> None:
    """cuFFT (nvidia-cufft 12.0 for CUDA 13) has one sm_75 cubin in ``.nv_fatbin`` and loads the rest, 24,000
    containers with sm_100 and sm_120 SASS, from ``.ldata``, where cuobjdump does not look. A library holding
    two fatbins in a data array, after other data and apart by more than padding, is read the same by seeking
    (a file, a stored member) and by streaming (a deflated member)."""
    def words(data: bytes) -> list[int]:
        data = data.ljust(-(-len(data) // 8) * 8, b"\0")
        return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]

    # After other data, and 4 KiB of it between the two: neither starts a section, nor follows another.
    blob = [0x1234] * 3 + words(kit.fatbin("sm_100a").read_bytes()) + [7] * 512 + words(
        kit.fatbin("sm_120a").read_bytes())
    source = tmp_path / "selfload.c"
    source.write_text("const unsigned long long selfload_kernels[] __attribute__((aligned(8))) = {"
                      + ", ".join(f"{w}ULL" for w in blob) + "};\n")
    so = tmp_path / "libselfload.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(source)], check=True, capture_output=True)
    direct = binaries.read_file(so, f"fixture/lib/{so.name}")
    assert direct is not None and direct.problem == ""
    assert [k.name for k in direct.kernels] == ["sm_100a", "sm_120a"]
    for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        assert read_wheel(wheel_of(tmp_path, so, compression)).files == (direct,)


def test_the_libraries_it_needs_are_readelfs(kit: CudaKit) -> None:
    so = kit.library("shared", FIXTURES["shared"])
    found = binaries.read_file(so)
    assert found is not None
    said = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert list(found.needed) == [line.split("[", 1)[1].rstrip("]") for line in said.splitlines() if "(NEEDED)" in line]
    assert "libcudart.so.13" in found.needed
    assert [(n.major, n.why) for n in drivers.needs(found)] == [(13, "needs libcudart.so.13")]


def test_a_cubin_is_one_sass_kernel_of_its_arch(kit: CudaKit) -> None:
    found = binaries.read_file(kit.cubin("sm_90"))
    assert found is not None and found.cubin
    assert [k.name for k in found.kernels] == ["sm_90"]


def test_a_folder_is_read_file_by_file(kit: CudaKit, tmp_path: Path) -> None:
    lib = tmp_path / "venv" / "lib" / "site-packages" / "pkg"
    lib.mkdir(parents=True)
    (lib / "ops.so").write_bytes(kit.library("plain", FIXTURES["plain"]).read_bytes())
    (lib / "ops.py").write_text("import ctypes\n")
    (lib / "broken.so").write_bytes(b"\x7fELF" + b"\0" * 10)  # an ELF header cut short
    found = read_tree(tmp_path / "venv")
    assert [f.path for f in found.files] == ["lib/site-packages/pkg/broken.so", "lib/site-packages/pkg/ops.so"]
    assert found.files[0].problem == "not an ELF file" and found.files[0].kernels == ()
    assert len(found.files[1].kernels) == 5


def test_a_wheel_is_read_once_and_recorded_in_the_store(kit: CudaKit, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    wheel = wheel_of(tmp_path, kit.library("plain", FIXTURES["plain"]), zipfile.ZIP_DEFLATED)
    first = wheel_binaries(store, "a" * 64, wheel)
    record = store.path("kernels", f"{'a' * 64}.json")
    assert json.loads(record.read_text())["files"][0]["path"] == "fixture/lib/plain.so"
    wheel.unlink()  # the record answers now
    assert wheel_binaries(store, "a" * 64, wheel) == first


def test_a_deflated_member_that_is_no_elf_is_left_out_as_a_stored_one_is(kit: CudaKit, tmp_path: Path) -> None:
    so = kit.library("plain", FIXTURES["plain"])
    members = {"fixture/bin/tool": b"#!/bin/sh\nexec true\n", "fixture/lib/tiny.so": b"abcd",
               "fixture/lib/cut.so": b"\x7fELF" + b"\0" * 10, "fixture/lib/plain.so": so.read_bytes()}
    read = {}
    for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"fixture-1.0-py3-none-any.{compression}.whl"
        with zipfile.ZipFile(path, "w", compression=compression) as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        read[compression] = read_wheel(path)
    assert read[zipfile.ZIP_DEFLATED] == read[zipfile.ZIP_STORED]
    cut, plain = read[zipfile.ZIP_DEFLATED].files
    assert (cut.path, cut.problem) == ("fixture/lib/cut.so", "not an ELF file")
    assert plain == binaries.read_file(so, "fixture/lib/plain.so")


def test_the_one_pass_stops_once_nothing_ahead_can_change_the_answer(kit: CudaKit) -> None:
    # A library with 4 MB appended (as a self-extracting file has): its section headers, its last part
    # of its own, are read, and the bytes after them are not.
    data = kit.library("plain", FIXTURES["plain"]).read_bytes()
    fed: list[int] = []

    def chunks(blob: bytes) -> Iterator[bytes]:
        for at in range(0, len(blob), 1 << 16):
            fed.append(at)
            yield blob[at:at + (1 << 16)]

    def again(limit: int) -> Iterator[bytes]:
        yield data[:limit]

    found = scan_elf(chunks(data + b"\xa5" * (4 << 20)), again, "plain.so")
    assert found == binaries.read_file(kit.library("plain", FIXTURES["plain"]), "plain.so")
    assert fed[-1] < len(data)
    fed.clear()
    cubin = kit.cubin("sm_90").read_bytes()
    assert scan_elf(chunks(cubin + b"\0" * (1 << 20)), again, "k.cubin") == ElfFile("k.cubin", (Kernel("sass", 90),),
                                                                                    cubin=True)
    assert fed == [0]  # a device ELF: its header says all
    assert scan_elf(chunks(b"#!/bin/sh\n"), again, "tool") is None


@pytest.mark.parametrize("size", [13, 4099, 1 << 16])
def test_the_one_pass_reads_the_same_however_the_stream_is_cut(kit: CudaKit, size: int) -> None:
    so = kit.library("plain", FIXTURES["plain"])
    data = so.read_bytes()
    found = scan_elf((data[at:at + size] for at in range(0, len(data), size)), lambda n: [data[:n]], "plain.so")
    assert found == binaries.read_file(so, "plain.so")
    assert found is not None and len(found.kernels) == 5


def test_a_container_is_looked_for_where_nvcc_puts_one_at_a_multiple_of_8() -> None:
    # In a window starting at file offset 5: the signatures at 3 (file offset 8) and 27 (32) count, the one
    # at 14 (19) does not; the one cut by the window's end at 35 (40) is the next window's to find.
    data = bytearray(40)
    for at in (3, 14, 27):
        data[at:at + 8] = SIGNATURE
    data[35:40] = SIGNATURE[:5]
    assert elf.signatures(bytes(data), 5) == [3, 27]
    # A window dense with candidate bytes (0xBA in each aligned 8 bytes' fourth place) finds the same.
    dense = (b"\0\0\0\xba" * 2) * 700 + SIGNATURE + b"\xba" * 64
    assert elf.signatures(dense, 0) == [5600]


def test_zlib_inflates_window_by_window_as_isal_does(tmp_path: Path) -> None:
    # Long runs and matches across the 512 KiB windows, and a stream ending inside one.
    data = b"".join(bytes([i % 251]) * (i * 997 % 70_000) + i.to_bytes(4, "little") * 300 for i in range(200))
    path = tmp_path / "stream"
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    path.write_bytes(compressor.compress(data) + compressor.flush())
    size = path.stat().st_size
    with path.open("rb") as fh:
        for limit in (None, 1_000_003):
            by_zlib = b"".join(binaries._inflate(fh, 0, size, limit, make=binaries._ZlibInflater))
            by_default = b"".join(binaries._inflate(fh, 0, size, limit))
            assert by_zlib == by_default == data[:limit]


def test_what_is_no_wheel_says_so(tmp_path: Path) -> None:
    path = tmp_path / "x.whl"
    path.write_bytes(b"not a zip")
    assert read_wheel(path).problem == "not a readable zip (File is not a zip file)"


@pytest.mark.parametrize(("kernel", "gpu", "expected"), [
    ("sm_90", "9.0", True), ("sm_80", "8.9", True), ("sm_86", "8.0", False), ("sm_90", "10.0", False),
    ("sm_90a", "9.0", True), ("sm_100a", "10.3", False), ("sm_100f", "10.3", True), ("sm_120f", "12.1", True),
    ("sm_120", "12.1", True), ("sm_120", "10.0", False),
    ("compute_90", "12.0", True), ("compute_120", "10.0", False), ("compute_120a", "12.0", True),
    ("compute_120a", "12.1", False), ("compute_100f", "10.3", True), ("compute_100f", "12.0", False),
])
def test_what_runs_where(kernel: str, gpu: str, expected: bool) -> None:
    k, g = kernel_named(kernel), Gpu.parse(gpu)
    assert k is not None and g is not None
    assert runs(k, g) is expected


@pytest.mark.parametrize(("name", "capability"), [("sm_120a", "12.0"), ("sm_90", "9.0"), ("12.0", "12.0"),
                                                  ("sm_100f", "10.0")])
def test_a_gpu_is_named_as_nvcc_or_as_a_compute_capability(name: str, capability: str) -> None:
    gpu = Gpu.parse(name)
    assert gpu is not None and gpu.capability == capability


def test_a_package_runs_if_a_file_does_and_notes_the_others() -> None:
    runs_here = ElfFile("pkg/a.so", (Kernel("sass", 120, "a"),))
    not_here = ElfFile("pkg/b.so", (Kernel("sass", 90), Kernel("ptx", 100, "a", "8.8")))
    [verdict] = judge({"pkg": [runs_here, not_here, ElfFile("pkg/c.so")]}, [Gpu(12, 0, "sm_120a")])
    assert verdict.runs
    assert verdict.notes() == ["pkg: pkg/b.so has no kernel for sm_120a (12.0) (SASS sm_90; PTX compute_100a); "
                               "1 other file(s) of it do"]
    [failing] = judge({"pkg": [not_here]}, [Gpu(10, 3, "sm_103")])
    assert failing.problem() == "pkg has no kernel for sm_103 (10.3): pkg/b.so: SASS sm_90; PTX compute_100a"
    assert failing.note() == ""  # no file runs there: the failure, not a note
    assert verdict.note() == "pkg: 1 of 2 kernel-bearing files has no kernel for sm_120a (12.0) (pkg/b.so)"


def test_the_check_names_the_first_files_then_how_many_more() -> None:
    """``note`` and ``problem(shown)`` are a line however many files lack the GPU (the check's text);
    ``notes`` and ``problem()`` name each (``envlock kernels``)."""
    lacking = [ElfFile(f"pkg/k{i}.so", (Kernel("sass", 100, "a"), Kernel("sass", 103, "a"))) for i in range(5)]
    [partial] = judge({"pkg": [ElfFile("pkg/a.so", (Kernel("sass", 120, "a"),)), *lacking]}, [Gpu(12, 0, "sm_120a")])
    assert partial.note(shown=2) == ("pkg: 5 of 6 kernel-bearing files have no kernel for sm_120a (12.0) "
                                     "(pkg/k0.so, pkg/k1.so and 3 more)")
    assert len(partial.notes()) == 5
    [failing] = judge({"pkg": lacking}, [Gpu(9, 0, "sm_90")])
    assert failing.problem(2) == ("pkg has no kernel for sm_90 (9.0): pkg/k0.so: SASS sm_100a, sm_103a; "
                                  "pkg/k1.so: SASS sm_100a, sm_103a; and 3 more file(s) (sm_100a, sm_103a)")
    assert failing.problem().count("pkg/k") == 5


@pytest.mark.parametrize(("driver", "minimum", "older"), [
    ("575.57.08", "580", True), ("580.65.06", "580", False), ("525.60.13", "525.60.13", False),
    ("525.60.11", "525.60.13", True),
])
def test_driver_versions_compare_by_number(driver: str, minimum: str, older: bool) -> None:
    assert drivers.older(driver, minimum) is older


def test_the_driver_table() -> None:
    assert drivers.MIN_DRIVER == {13: "580", 12: "525.60.13", 11: "450.80.02"}
    assert drivers.min_driver([12, 13]) == "580"
    assert coverage.how(Kernel("ptx", 90)) == "9.0 and later (JIT)"
