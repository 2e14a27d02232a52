"""Every ELF of a wheel or a folder (a venv), read by its headers (``elf``), and kept per wheel sha256.

A wheel is read from its zip central directory: each member whose name says it may be an ELF (a
``.so`` or ``.so.N``, a ``.cubin``, a file without a suffix) is read where it lies. A member stored
as it is is read by seeking (a few KB of a 1 GB ``libtorch_cuda.so``); a deflated one is inflated
front to back in chunks and read in one pass, never held whole. What was found is kept in the
store as ``kernels/<wheel sha256>.json`` (written atomically), so each wheel is read once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from envlock.gpu.elf import ELF_MAGIC, ElfFile, read_elf, scan_elf
from envlock.store.store import Store, write_atomic

#: The version of ``kernels/<sha256>.json``: a record of another one is read anew.
RECORD_FORMAT = 2  # 2: containers outside .nv_fatbin read too (cuFFT's in .ldata)
CHUNK = 256 << 10  # compressed bytes read at a time
#: At most this many bytes inflated at a time: small enough to stay in the CPU's cache while the
#: scan searches them for fatbin containers.
_WINDOW = 512 << 10
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_MAYBE_ELF = re.compile(r"\.so(\.\d+)*$|\.cubin$")


def maybe_elf(path: str) -> bool:
    """Whether a file of this name may be an ELF worth opening: a shared object, a cubin, or a
    name without a suffix (an executable); the bytes decide."""
    name = path.rsplit("/", 1)[-1]
    return bool(_MAYBE_ELF.search(name)) or ("." not in name and bool(name) and not path.endswith("/"))


@dataclass(frozen=True)
class Binaries:
    """Every ELF of one wheel or folder, in path order (non-ELF files left out)."""

    files: tuple[ElfFile, ...]
    problem: str = ""  # why it could not be read at all ("" when it was)

    @property
    def kernel_files(self) -> tuple[ElfFile, ...]:
        return tuple(f for f in self.files if f.kernels)

    def to_dict(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, "files": [f.to_dict() for f in self.files], "problem": self.problem}

    @classmethod
    def from_dict(cls, doc: object) -> Binaries:
        if not isinstance(doc, dict) or doc.get("format") != RECORD_FORMAT or not isinstance(doc.get("files"), list):
            raise ValueError("not a kernels record")
        return cls(tuple(ElfFile.from_dict(f) for f in doc["files"]), str(doc.get("problem", "")))


def read_wheel(path: Path) -> Binaries:
    """Every ELF in the wheel (a zip) at ``path``. The members are read on a few threads, each with
    a file handle of its own: inflating is most of the time (a CPU torch wheel holds 574 MB of
    deflated ELFs), and both zlib and ISA-L inflate without the GIL."""
    try:
        with path.open("rb") as fh:
            try:
                members = zipfile.ZipFile(fh).infolist()
            except (zipfile.BadZipFile, EOFError, ValueError) as exc:
                return Binaries((), f"not a readable zip ({exc})")
        wanted = sorted((i for i in members if not i.is_dir() and maybe_elf(i.filename) and i.file_size >= 4),
                        key=lambda i: i.filename)
        if len(wanted) < 2:
            return Binaries(tuple(f for i in wanted if (f := _member_of(path, i)) is not None))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(_READERS, len(wanted))) as pool:
            # Largest first, so that no big member starts last and runs alone.
            started = {i.filename: pool.submit(_member_of, path, i)
                       for i in sorted(wanted, key=lambda i: -i.compress_size)}
            found = [started[i.filename].result() for i in wanted]
        return Binaries(tuple(f for f in found if f is not None))
    except OSError as exc:
        return Binaries((), f"cannot read {path} ({exc.strerror})")


#: Threads reading a wheel's members: inflating is CPU-bound and GIL-free, so one per core (memory
#: stays bounded: each holds a few MiB of inflated bytes at a time).
_READERS = max(1, min(4, os.cpu_count() or 1))


def _member_of(path: Path, info: zipfile.ZipInfo) -> ElfFile | None:
    """The ELF zip member ``info`` of the wheel at ``path`` holds (None: no ELF), on a handle of its own."""
    with path.open("rb") as fh:
        return _member(fh, info)


def _member(fh: IO[bytes], info: zipfile.ZipInfo) -> ElfFile | None:
    """The ELF zip member ``info`` holds (None: no ELF)."""
    fh.seek(info.header_offset)
    local = fh.read(_LOCAL_HEADER.size)
    if len(local) < _LOCAL_HEADER.size or local[:4] != b"PK\x03\x04":
        return ElfFile(info.filename, problem="its zip local header does not read")
    name_length, extra_length = _LOCAL_HEADER.unpack(local)[-2:]
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if info.compress_type == zipfile.ZIP_STORED:
        def read(offset: int, length: int) -> bytes:
            if offset < 0 or offset >= info.file_size:
                return b""
            fh.seek(start + offset)
            return fh.read(min(length, info.file_size - offset))

        if read(0, 4) != ELF_MAGIC:
            return None
        return read_elf(read, info.file_size, info.filename)
    if info.compress_type != zipfile.ZIP_DEFLATED:
        return ElfFile(info.filename, problem=f"compressed with zip method {info.compress_type} (not read)")
    stream = _inflate(fh, start, info.compress_size)
    try:  # one pass, sniffed by its own first bytes; the second reads the first few MB for the library names
        return scan_elf(stream, lambda limit: _inflate(fh, start, info.compress_size, limit), info.filename)
    except _INFLATE_ERRORS as exc:
        return ElfFile(info.filename, problem=f"its deflated bytes do not inflate ({exc})")
    finally:
        stream.close()


def _inflate_errors() -> tuple[type[Exception], ...]:
    try:
        from isal import isal_zlib
    except ImportError:
        return (zlib.error,)
    return (zlib.error, cast("type[Exception]", isal_zlib.error))  # typed as an instance in isal's stubs


_INFLATE_ERRORS = _inflate_errors()


class _ZlibInflater:
    """The standard library's raw inflate behind ISA-L's ``IgzipDecompressor`` interface (``needs_input``,
    ``eof``, ``decompress(data, max_length)``), for where ``isal`` is not installed."""

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        self.needs_input = True

    @property
    def eof(self) -> bool:
        return self._zlib.eof

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._zlib.decompress(data or self._zlib.unconsumed_tail, max_length)
        # A full window may leave output behind (input not consumed, or the rest of a long match).
        self.needs_input = len(out) < max_length and not self._zlib.unconsumed_tail
        return out


def _inflater() -> Any:
    """A raw-deflate decompressor: ISA-L's (``isal``, a dependency) where it is installed, 2-3 times
    zlib's speed on a 400 MB ``libtorch_cpu.so``; else the standard library's. ``IgzipDecompressor``
    keeps the input it has not used yet itself (zlib's ``unconsumed_tail`` is a copy per call)."""
    try:
        from isal import igzip_lib
    except ImportError:
        return _ZlibInflater()
    return igzip_lib.IgzipDecompressor(flag=igzip_lib.DECOMP_DEFLATE)


def _inflate(fh: IO[bytes], start: int, size: int, limit: int | None = None, *,
             make: Callable[[], Any] = _inflater) -> Generator[bytes, None, None]:
    """The inflated bytes of the raw deflate stream at ``start`` (``size`` bytes), a window at a time;
    the first ``limit`` bytes only, when given. ``make``: the decompressor (the tests pass zlib's)."""
    inflater = make()
    left, pos, out = size, start, 0
    while not inflater.eof and (limit is None or out < limit):
        raw = b""
        if inflater.needs_input:
            if left <= 0:
                return
            fh.seek(pos)  # the second pass shares the handle
            raw = fh.read(min(CHUNK, left))
            if not raw:
                return
            pos, left = pos + len(raw), left - len(raw)
        data = inflater.decompress(raw, _WINDOW if limit is None else min(_WINDOW, limit - out))
        if data:
            out += len(data)
            yield data
        elif not raw:  # asked for the rest of a window and given nothing: no progress to wait for
            return


def read_tree(root: Path) -> Binaries:
    """Every ELF under the folder ``root`` (a venv, an unpacked wheel), paths relative to it;
    symbolic links are not followed (a venv's ``bin/python``)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            full = Path(folder) / name
            rel = full.relative_to(root).as_posix()
            if not maybe_elf(rel) or full.is_symlink():
                continue
            one = read_file(full, rel)
            if one is not None:
                found.append(one)
    return Binaries(tuple(sorted(found, key=lambda f: f.path)))


def read_file(path: Path, label: str | None = None) -> ElfFile | None:
    """The ELF at ``path`` (None: no ELF, or unreadable)."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size

            def read(offset: int, length: int) -> bytes:
                if offset < 0 or offset >= size:
                    return b""
                fh.seek(offset)
                return fh.read(length)

            if read(0, 4) != ELF_MAGIC:
                return None
            return read_elf(read, size, label or path.name)
    except OSError:
        return None


def wheel_binaries(store: Store, sha256: str, wheel: Path) -> Binaries:
    """``read_wheel`` of ``wheel`` (whose bytes are ``sha256``), from the store's record of an earlier
    read when there is one, else read and recorded (``kernels/<sha256>.json``)."""
    record = store.path("kernels", f"{sha256}.json")
    try:
        return Binaries.from_dict(json.loads(record.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    found = read_wheel(wheel)
    if not found.problem:
        with contextlib.suppress(OSError):  # a shortcut only: the next read reads the wheel again
            write_atomic(record, json.dumps(found.to_dict(), sort_keys=True).encode())
    return found


def by_path(binaries: Mapping[str, Binaries]) -> dict[str, tuple[ElfFile, ...]]:
    """Name -> its kernel-bearing files, for the names that have any."""
    return {name: b.kernel_files for name, b in binaries.items() if b.kernel_files}
