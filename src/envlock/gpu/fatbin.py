"""The fatbin format: what nvcc puts into an ELF's ``.nv_fatbin`` section, read from headers only.

A section holds fatbin containers one after another (each compilation unit's, and the one nvcc's
device link adds). A container is a 16-byte header (magic ``0xBA55ED50``, version, header size,
the size of the entries after it) and its entries; each entry is a header (kind, header size,
payload size, flags, arch, PTX version, ...) and a payload (a cubin or PTX text, maybe compressed).
The ``a`` and ``f`` suffixes live only in an entry's flags: a cubin's own ``e_flags`` say ``sm_120``
for ``sm_120``, ``sm_120a`` and ``sm_120f`` alike. Offsets and flag bits were read from nvcc 13.0
output and checked against ``cuobjdump -lelf -lptx`` (tests/test_gpu_binaries.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

MAGIC = 0xBA55ED50
#: A container header as nvcc writes it: the magic, version 1, header size 16, little-endian.
SIGNATURE = struct.pack("<IHH", MAGIC, 1, 16)
CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
#: The first 64 bytes of an entry header: kind, version, header size, payload size, compressed size,
#: options offset, minor, major, arch, name offset, name length, flags, (reserved), uncompressed size.
ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")
ENTRY_SIZE = ENTRY.size  # 64

KIND_PTX, KIND_SASS = 1, 2
FLAG_DEBUG = 0x2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # "a": runs only on that very arch
FLAG_FAMILY = 0x200000  # "f": runs on that arch's family (same major, a later minor)

#: Entries of one container past this are no fatbin (a chain read from bytes that only looked like one).
MAX_ENTRIES = 100_000


@dataclass(frozen=True, order=True)
class Kernel:
    """One fatbin entry: device code for one arch."""

    kind: str  # "sass" (a cubin) or "ptx"
    arch: int  # 90, 120: compute capability major*10 + minor
    variant: str = ""  # "", "a" (arch-specific) or "f" (family)
    ptx: str = ""  # a PTX entry's ISA version ("9.0"); "" for SASS
    compression: str = ""  # "", "zstd" or "lz4"

    @property
    def capability(self) -> tuple[int, int]:
        return divmod(self.arch, 10)

    @property
    def name(self) -> str:
        """``sm_120a`` for SASS, ``compute_120a`` for PTX (nvcc's ``-gencode code=`` spelling)."""
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.arch}{self.variant}"

    def to_list(self) -> list[Any]:
        return [self.kind, self.arch, self.variant, self.ptx, self.compression]

    @classmethod
    def from_list(cls, row: object) -> Kernel:
        if not (isinstance(row, list) and len(row) == 5 and row[0] in ("sass", "ptx") and isinstance(row[1], int)
                and all(isinstance(v, str) for v in (row[2], row[3], row[4]))):
            raise ValueError(f"not a kernel entry: {row!r}")
        return cls(row[0], row[1], row[2], row[3], row[4])


@dataclass(frozen=True)
class EntryHeader:
    """An entry header as read: the kernel it describes and where the next entry starts."""

    kernel: Kernel | None  # None: a kind other than PTX or SASS (skipped, as cuobjdump does)
    length: int  # header size + payload size: the next entry is this far on


def decode_entry(data: bytes) -> EntryHeader | None:
    """The entry whose header ``data`` starts with (at least ``ENTRY_SIZE`` bytes); None when it is
    no entry header (a header size below 64, a payload past any sane size)."""
    (kind, _version, header_size, size, _compressed, _options, minor, major, arch, _name, _name_length, flags,
     _reserved, _uncompressed) = ENTRY.unpack_from(data)
    if header_size < ENTRY_SIZE or header_size > 1 << 16 or size >= 1 << 40:
        return None
    if kind not in (KIND_PTX, KIND_SASS) or not 10 <= arch < 1000:
        return EntryHeader(None, header_size + size)
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    compression = "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else ""
    kernel = Kernel("ptx" if kind == KIND_PTX else "sass", arch, variant,
                    f"{major}.{minor}" if kind == KIND_PTX else "", compression)
    return EntryHeader(kernel, header_size + size)


def decode_container(data: bytes) -> int | None:
    """The size of the entries after the container header ``data`` starts with (16 bytes); None
    when it is no container header."""
    magic, _version, header_size, size = CONTAINER.unpack_from(data)
    if magic != MAGIC or header_size != CONTAINER.size or size >= 1 << 40:
        return None
    return int(size)
