"""An ELF file's headers: the libraries it needs (``DT_NEEDED``), its name (``DT_SONAME``) and the
device code in its fatbin containers (those that fill ``.nv_fatbin``, and those a library keeps among its
other data and loads itself: cuFFT's in ``.ldata``), read without holding the file whole.

Two readers give one answer. ``read_elf`` seeks (a file on disk, a zip member stored as it is): the
ELF header, the program and section headers, then each fatbin container and entry header,
stepping over the payloads (a section that starts with a container, as ``.nv_fatbin`` does; the rest of
it, and every other section, is searched for containers window by window). ``scan_elf`` reads a
stream once, front to back (a zip member that is deflated, which cannot be seeked): it keeps the few
header ranges it will need, and every fatbin container header it meets (found by its 8-byte signature
at a multiple of 8, where nvcc and clang put one, see ``ALIGN``; then its entry headers chained from it);
at the end the section headers say which of them lie in a section (one inside another's body is that
one's payload). It stops as soon as nothing ahead can change that (the section headers are
usually an ELF's last bytes: then at the end). The names ``DT_NEEDED`` points at lie in ``.dynstr``,
which comes before ``.dynamic``: the stream is read a second time up to them (the first few MB).
Memory stays at a chunk plus those small pieces; the search for signatures is most of its own time
(a seventh of the inflating's, see docs/performance.md).

Only 64-bit little-endian ELF is read (every CUDA platform: x86_64, aarch64, ppc64le); a device ELF
(a ``.cubin``, ``e_machine`` EM_CUDA) is one SASS kernel, its arch from ``e_flags`` (its variant is
not in the file: it is read as a plain ``sm_XY``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from envlock.gpu.fatbin import ENTRY_SIZE, MAX_ENTRIES, SIGNATURE, Kernel, decode_container, decode_entry

ELF_MAGIC = b"\x7fELF"
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_PROGBITS, _SHT_NOBITS = 1, 8
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME = 0, 1, 5, 10, 14
EM_CUDA = 190
#: Far above any real table (libtorch_cuda.so has ~40 sections, ~10 program headers, ~60 dynamic entries).
_MAX_TABLE = 1 << 22
_MAX_NAME = 4096
#: Between two containers of a section: the padding that aligns the next one.
_MAX_PADDING = 64


@dataclass(frozen=True)
class ElfFile:
    """What one ELF carries, as its headers say."""

    path: str  # the member's path in its wheel, or the file's under the folder read
    kernels: tuple[Kernel, ...] = ()  # in the file's order, as cuobjdump lists them
    needed: tuple[str, ...] = ()  # DT_NEEDED, in order
    soname: str = ""
    cubin: bool = False  # a device ELF itself (EM_CUDA), not a host library holding fatbins
    problem: str = ""  # what could not be read ("" when all of it was)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "kernels": [k.to_list() for k in self.kernels],
                               "needed": list(self.needed)}
        if self.soname:
            out["soname"] = self.soname
        if self.cubin:
            out["cubin"] = True
        if self.problem:
            out["problem"] = self.problem
        return out

    @classmethod
    def from_dict(cls, doc: object) -> ElfFile:
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
            raise ValueError("not an ELF record")
        needed = doc.get("needed", [])
        kernels = doc.get("kernels", [])
        if not (isinstance(needed, list) and all(isinstance(n, str) for n in needed) and isinstance(kernels, list)):
            raise ValueError("not an ELF record")
        return cls(doc["path"], tuple(Kernel.from_list(k) for k in kernels), tuple(needed),
                   str(doc.get("soname", "")), bool(doc.get("cubin", False)), str(doc.get("problem", "")))


@dataclass(frozen=True)
class _Header:
    """The fields of an ELF header read here: the machine, flags and ABI version, and where the program and
    section header tables are."""

    machine: int
    flags: int
    abi_version: int
    phoff: int
    phnum: int
    phentsize: int
    shoff: int
    shnum: int
    shentsize: int


def _header(data: bytes) -> _Header | str:
    """The ELF header ``data`` starts with, or why it is none envlock reads."""
    if len(data) < _HEADER.size or data[:4] != ELF_MAGIC:
        return "not an ELF file"
    if data[4] != 2 or data[5] != 1:
        return "a 32-bit or big-endian ELF (not read: no CUDA platform uses one)"
    (ident, _type, machine, _version, _entry, phoff, shoff, flags, _ehsize, phentsize, phnum, shentsize, shnum,
     _shstrndx) = _HEADER.unpack_from(data)
    return _Header(machine, flags, ident[8], phoff, phnum, phentsize, shoff, shnum, shentsize)


def _cubin(path: str, head: _Header) -> ElfFile:
    """A device ELF: one SASS kernel. Its arch is ``e_flags`` bits 8-15 from ELF ABI version 8 (CUDA
    13), bits 0-7 before."""
    arch = (head.flags >> 8) & 0xFF if head.abi_version >= 8 else head.flags & 0xFF
    return ElfFile(path, (Kernel("sass", arch),), cubin=True)


@dataclass(frozen=True)
class _Segment:
    """A program header: the segment's type, file offset, virtual address and size in the file."""

    kind: int
    offset: int
    vaddr: int
    filesz: int


def _segments(data: bytes, head: _Header) -> list[_Segment]:
    out = []
    for i in range(head.phnum):
        at = i * head.phentsize
        if at + _PHDR.size > len(data):
            break
        kind, _flags, offset, vaddr, _paddr, filesz, _memsz, _align = _PHDR.unpack_from(data, at)
        out.append(_Segment(kind, offset, vaddr, filesz))
    return out


def _sections(data: bytes, head: _Header) -> list[tuple[int, int, int]]:
    """(type, offset, size) of each section the table ``data`` holds."""
    out = []
    for i in range(len(data) // max(head.shentsize, 1)):
        at = i * head.shentsize
        if at + _SHDR.size > len(data):
            break
        _name, kind, _flags, _addr, offset, size, _link, _info, _align, _entsize = _SHDR.unpack_from(data, at)
        out.append((kind, offset, size))
    return out


def _table_sizes(head: _Header) -> tuple[int, int]:
    """The bytes of the program header table and the section header table."""
    return (min(head.phnum * head.phentsize, _MAX_TABLE), min(head.shnum * head.shentsize, _MAX_TABLE))


@dataclass(frozen=True)
class _Dynamic:
    """What ``.dynamic`` says: the ``DT_NEEDED`` and ``DT_SONAME`` names as string table offsets, and where the
    string table is in the file and its size."""

    needed: tuple[int, ...]  # string table offsets
    soname: int | None
    strtab: int | None  # file offset of the string table
    strsz: int


def _dynamic(data: bytes, segments: Iterable[_Segment]) -> _Dynamic:
    needed, soname, strtab_addr, strsz = [], None, None, 0
    for at in range(0, len(data) - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(data, at)
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_SONAME:
            soname = value
        elif tag == _DT_STRTAB:
            strtab_addr = value
        elif tag == _DT_STRSZ:
            strsz = value
    strtab = None
    if strtab_addr is not None:  # an address: the load segment holding it says where it is in the file
        for s in segments:
            if s.kind == _PT_LOAD and s.vaddr <= strtab_addr < s.vaddr + s.filesz:
                strtab = s.offset + strtab_addr - s.vaddr
                break
    return _Dynamic(tuple(needed), soname, strtab, strsz)


def _problem(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# -- seeking ---------------------------------------------------------------------------------------


def read_elf(read: Callable[[int, int], bytes], size: int, path: str) -> ElfFile:
    """The ELF at ``read(offset, length)`` (``size`` bytes long), seeking to each header it needs."""
    head = _header(read(0, _HEADER.size))
    if isinstance(head, str):
        return ElfFile(path, problem=head)
    if head.machine == EM_CUDA:
        return _cubin(path, head)
    phsize, shsize = _table_sizes(head)
    segments = _segments(read(head.phoff, phsize), head) if phsize else []
    sections = _sections(read(head.shoff, shsize), head) if shsize and head.shoff + shsize <= size else []
    kernels: list[Kernel] = []
    problems = [] if sections else ["no section headers (its fatbins, if any, were not read)"]
    for kind, offset, length in sections:
        if kind != _SHT_PROGBITS or length < 16 or offset + length > size:
            continue
        pos, problem = offset, ""
        if offset % ALIGN == 0 and read(offset, 8) == SIGNATURE:  # .nv_fatbin: header by header
            found, problem, pos = _walk_seeking(read, offset, offset + length)
            kernels += found
        if not problem and pos < offset + length:  # the rest (cuFFT's .ldata): searched
            found, problem = _scattered_seeking(read, pos, offset + length)
            kernels += found
        problems.append(problem)
    needed, soname = _names_seeking(read, segments, size)
    return ElfFile(path, tuple(kernels), needed, soname, problem=_problem(*problems))


def _walk_seeking(read: Callable[[int, int], bytes], start: int, end: int) -> tuple[list[Kernel], str, int]:
    """The kernels of the containers that fill ``[start, end)`` from its start, read header by header, and
    where that stopped (``end``, or a gap wider than padding: what follows is searched)."""
    kernels: list[Kernel] = []
    pos = start
    while pos + 16 <= end:
        size = decode_container(read(pos, 16)) if pos % ALIGN == 0 else None
        if size is None:  # padding before the next container, or the section's end
            ahead = read(pos, min(_MAX_PADDING + 16, end - pos))
            skip = next((k for k in signatures(ahead, pos) if k > 0), 0)
            if skip <= 0:
                return kernels, "", pos
            pos += skip
            continue
        found, problem = _entries_seeking(read, pos, min(pos + 16 + size, end))
        kernels += found
        if problem:
            return kernels, problem, end
        pos += 16 + size
    return kernels, "", end


def _entries_seeking(read: Callable[[int, int], bytes], container: int, stop: int) -> tuple[list[Kernel], str]:
    """The kernels of the entries of the container at ``container`` (whose body ends at ``stop``)."""
    kernels: list[Kernel] = []
    at = container + 16
    for _ in range(MAX_ENTRIES):
        if at + ENTRY_SIZE > stop:
            break
        entry = decode_entry(read(at, ENTRY_SIZE))
        if entry is None:
            return kernels, f"a fatbin entry header at offset {at} does not read"
        if entry.kernel is not None:
            kernels.append(entry.kernel)
        at += entry.length
    return kernels, ""


#: The window a section is searched in for containers that do not start it.
_SEARCH_WINDOW = 1 << 22


def _scattered_seeking(read: Callable[[int, int], bytes], start: int, end: int) -> tuple[list[Kernel], str]:
    """The kernels of every container in ``[start, end)`` found by its signature, where a library keeps
    its own fatbins among other data (cuFFT's 24,000 in ``.ldata``), each read once (one inside another's
    body is the other's payload)."""
    found: set[int] = set()
    for pos in range(start, end, _SEARCH_WINDOW):  # windows overlap by 7 bytes: a signature across two is seen
        found.update(pos + k for k in signatures(read(pos, min(_SEARCH_WINDOW + 7, end - pos)), pos))
    kernels: list[Kernel] = []
    covered = start
    for at in sorted(found):
        size = decode_container(read(at, 16)) if at >= covered and at + 16 <= end else None
        if size is None:
            continue
        more, problem = _entries_seeking(read, at, min(at + 16 + size, end))
        kernels += more
        if problem:
            return kernels, problem
        covered = at + 16 + size
    return kernels, ""


def _names_seeking(read: Callable[[int, int], bytes], segments: list[_Segment], size: int) -> tuple[tuple[str, ...],
                                                                                                  str]:
    dyn_segment = next((s for s in segments if s.kind == _PT_DYNAMIC), None)
    if dyn_segment is None or dyn_segment.offset + dyn_segment.filesz > size:
        return (), ""
    dyn = _dynamic(read(dyn_segment.offset, min(dyn_segment.filesz, _MAX_TABLE)), segments)
    if dyn.strtab is None:
        return (), ""
    strtab = dyn.strtab

    def name(offset: int) -> str:
        raw = read(strtab + offset, min(_MAX_NAME, max(size - strtab - offset, 0)))
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    return tuple(name(o) for o in dyn.needed), name(dyn.soname) if dyn.soname is not None else ""


# -- one pass --------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Want:
    """A byte range the stream must keep, and what to do with it once whole."""

    start: int
    end: int
    then: Callable[[bytes], None]
    got: bytearray = field(default_factory=bytearray)


@dataclass
class _Container:
    """A fatbin container met in the one pass: the size of its entries, the kernels read from them so far, and
    what could not be read."""

    size: int
    kernels: list[Kernel] = field(default_factory=list)
    problem: str = ""


class _Scan:
    """The state of one pass over an ELF's bytes (see the module's docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0
        self.wants: list[_Want] = []
        self.head: _Header | None = None
        self.done: ElfFile | None = None  # an answer before the end (not an ELF, a cubin)
        self.segments: list[_Segment] = []
        self.sections: list[tuple[int, int, int]] | None = None
        self.dynamic: bytes | None = None
        self.containers: dict[int, _Container] = {}
        self.tail = b""  # the last bytes of the previous chunk, for matches across chunks
        self.elf = True  # False once the first bytes are no ELF magic
        self.want(0, len(ELF_MAGIC), self._on_magic)
        self.want(0, _HEADER.size, self._on_header)

    def want(self, start: int, length: int, then: Callable[[bytes], None]) -> None:
        if start < self.pos - len(self.tail):  # passed: a layout this one-pass reader cannot follow
            return
        self.wants.append(_Want(start, start + length, then))

    def _on_header(self, data: bytes) -> None:
        head = _header(data)
        if isinstance(head, str):
            self.done = ElfFile(self.path, problem=head)
            return
        if head.machine == EM_CUDA:
            self.done = _cubin(self.path, head)
            return
        self.head = head
        phsize, shsize = _table_sizes(head)
        if phsize:
            self.want(head.phoff, phsize, self._on_segments)
        if shsize:
            self.want(head.shoff, shsize, lambda d: setattr(self, "sections", _sections(d, head)))

    def _on_segments(self, data: bytes) -> None:
        assert self.head is not None
        self.segments = _segments(data, self.head)
        dyn = next((s for s in self.segments if s.kind == _PT_DYNAMIC), None)
        if dyn is not None:
            self.want(dyn.offset, min(dyn.filesz, _MAX_TABLE), lambda d: setattr(self, "dynamic", d))

    def _container_at(self, at: int) -> Callable[[bytes], None]:
        return lambda data: self._on_container(at, data)

    def _on_container(self, at: int, data: bytes) -> None:
        size = decode_container(data)
        if size is None:
            return
        self.containers[at] = _Container(size)
        self._next_entry(at, at + 16)

    def _next_entry(self, container: int, at: int) -> None:
        c = self.containers[container]
        if at + ENTRY_SIZE <= container + 16 + c.size and len(c.kernels) < MAX_ENTRIES:
            self.want(at, ENTRY_SIZE, lambda d: self._on_entry(container, at, d))

    def _on_entry(self, container: int, at: int, data: bytes) -> None:
        entry = decode_entry(data)
        c = self.containers[container]
        if entry is None:
            c.problem = f"a fatbin entry header at offset {at} does not read"
            return
        if entry.kernel is not None:
            c.kernels.append(entry.kernel)
        self._next_entry(container, at + entry.length)

    def _on_magic(self, data: bytes) -> None:
        if data != ELF_MAGIC:
            self.elf = False

    def feed(self, chunk: bytes) -> bool:
        """Take the next bytes; False once the answer is known (the rest need not be read)."""
        start, end = self.pos, self.pos + len(chunk)
        hits = [start + at for at in signatures(chunk, start)]
        # The one aligned offset whose 8 bytes this chunk and the last share, if any (the tail is 7 bytes).
        straddling, seam = start - start % ALIGN, self.tail + chunk[:len(SIGNATURE)]
        at = straddling - (start - len(self.tail))  # in the seam
        if start % ALIGN and at >= 0 and seam.startswith(SIGNATURE, at):
            hits.append(straddling)
        for at in hits:
            if at not in self.containers:
                self.want(at, 16, self._container_at(at))
        if self.wants:
            view = self.tail + chunk if self.tail and any(w.start < start for w in self.wants) else chunk
            self._take(view, end - len(view), end)
        keep = len(SIGNATURE) - 1
        self.tail = chunk[-keep:] if len(chunk) >= keep else (self.tail + chunk)[-keep:]
        self.pos = end
        return self.done is None and self.elf and not self._all_read()

    def _all_read(self) -> bool:
        """Whether nothing ahead can change the answer: every range wanted is read and every section a
        fatbin may start lies behind (the section headers are usually the last bytes: then the end)."""
        return (self.sections is not None and not self.wants
                and all(offset + length <= self.pos for kind, offset, length in self.sections if kind == _SHT_PROGBITS))

    def _take(self, view: bytes, base: int, end: int) -> None:
        """Fill every want the bytes of ``view`` (from offset ``base``) reach, and those their answers add."""
        while True:
            whole = []
            for w in self.wants:
                lo, hi = max(w.start + len(w.got), base), min(w.end, end)
                if lo < hi and w.start + len(w.got) == lo:
                    w.got += view[lo - base:hi - base]
                if w.start + len(w.got) >= w.end:
                    whole.append(w)
            if not whole:
                return
            self.wants = [w for w in self.wants if w not in whole]
            for w in whole:
                w.then(bytes(w.got))
                if self.done is not None or not self.elf:
                    return

    def result(self, again: Callable[[int], Iterable[bytes]]) -> ElfFile | None:
        """The answer, once every byte was fed (None: no ELF); ``again(n)`` reads the first ``n`` bytes of
        the stream anew, for the names ``.dynamic`` points back at."""
        if not self.elf or self.pos < len(ELF_MAGIC):
            return None
        if self.done is not None:
            return self.done
        if self.head is None:
            return ElfFile(self.path, problem="not an ELF file")  # shorter than its header, as read_elf says
        kernels: list[Kernel] = []
        problems = [] if self.sections else ["no section headers (its fatbins, if any, were not read)"]
        for kind, offset, length in self.sections or ():
            if kind == _SHT_PROGBITS:
                found, problem = self._walk(offset, offset + length)
                kernels += found
                problems.append(problem)
        needed, soname = self._names(again)
        return ElfFile(self.path, tuple(kernels), needed, soname, problem=_problem(*problems))

    def _walk(self, start: int, end: int) -> tuple[list[Kernel], str]:
        """The kernels of every container in ``[start, end)``: the containers that fill ``.nv_fatbin``, and
        those a library keeps among other data (cuFFT's in ``.ldata``); one inside another's body is that
        one's payload."""
        kernels: list[Kernel] = []
        covered = start
        for at in sorted(p for p in self.containers if start <= p < end):
            if at < covered:
                continue
            c = self.containers[at]
            kernels += c.kernels
            if c.problem:
                return kernels, c.problem
            covered = at + 16 + c.size
        return kernels, ""

    def _names(self, again: Callable[[int], Iterable[bytes]]) -> tuple[tuple[str, ...], str]:
        """DT_NEEDED and DT_SONAME: ``.dynstr`` comes before ``.dynamic`` in the file, so the stream is
        read a second time, from its start up to the last name only (7 MB of a 414 MiB libtorch_cpu.so)."""
        if self.dynamic is None:
            return (), ""
        dyn = _dynamic(self.dynamic, self.segments)
        strtab = dyn.strtab
        if strtab is None:
            return (), ""
        offsets = [*dyn.needed, *([dyn.soname] if dyn.soname is not None else [])]
        if not offsets:
            return (), ""
        start, stop = strtab + min(offsets), strtab + max(offsets) + _MAX_NAME
        if dyn.strsz:
            stop = min(stop, strtab + dyn.strsz)
        table, pos = bytearray(), 0
        for chunk in again(stop):
            lo, hi = max(start, pos), min(stop, pos + len(chunk))
            if lo < hi:
                table += chunk[lo - pos:hi - pos]
            pos += len(chunk)

        def name(offset: int) -> str:
            at = strtab + offset - start
            return bytes(table[at:at + _MAX_NAME]).split(b"\0", 1)[0].decode("utf-8", "replace") if at >= 0 else "?"

        return tuple(name(o) for o in dyn.needed), name(dyn.soname) if dyn.soname is not None else ""


#: nvcc writes a fatbin as ``.quad``s after ``.align 8`` in ``.nv_fatbin`` (and ``__nv_relfatbin``), and
#: clang aligns its ``.nv_fatbin`` to 8: a container starts at a multiple of 8 in the file (an
#: allocated section's offset is its address modulo the page size), and only there is one looked for.
ALIGN = 8
_SIGNATURE = re.compile(re.escape(SIGNATURE))
#: Candidates in one window past this: the window is searched by the regular expression engine instead.
_MAX_CANDIDATES = 512


def signatures(data: bytes, start: int) -> list[int]:
    """The offsets in ``data`` (whose first byte is at file offset ``start``) of every aligned fatbin
    container signature that lies wholly in it. It searches one byte in eight: each aligned 8 bytes'
    fourth (``0xBA`` in a signature, about one aligned 8 bytes in 1,000 of ``libtorch_cpu.so``), found by
    ``memchr`` in a strided copy, then each candidate compared whole: 2.4 times faster than the
    regular expression engine's literal search of every byte, which is the fallback for a window
    dense with candidates."""
    phase = -start % ALIGN
    lane = data[phase + 3::ALIGN]
    found: list[int] = []
    k, candidates = lane.find(SIGNATURE[3]), 0
    while k >= 0:
        candidates += 1
        if candidates > _MAX_CANDIDATES:  # one pass of the engine costs less than the candidates left
            return [m.start() for m in _SIGNATURE.finditer(data) if (start + m.start()) % ALIGN == 0]
        at = phase + ALIGN * k
        if data.startswith(SIGNATURE, at):
            found.append(at)
        k = lane.find(SIGNATURE[3], k + 1)
    return found


def scan_elf(chunks: Iterable[bytes], again: Callable[[int], Iterable[bytes]], path: str) -> ElfFile | None:
    """The ELF whose bytes ``chunks`` yields front to back (None: the bytes are no ELF): read in one pass,
    stopping once nothing ahead can change the answer (a device ELF: after its header); then, for
    the names of the libraries it needs, ``again(n)``: the first ``n`` bytes once more."""
    scan = _Scan(path)
    for chunk in chunks:
        if chunk and not scan.feed(chunk):
            break
    return scan.result(again)
