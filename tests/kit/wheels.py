"""Write small, real, spec-conforming wheels for tests (PEP 427 / PEP 376 RECORD)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

# A fixed timestamp keeps fixture wheels byte-identical from run to run.
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    tag: str = "py3-none-any",
    requires: Iterable[str] = (),
    files: Mapping[str, bytes | str] | None = None,
    requires_python: str | None = None,
) -> Path:
    """Write ``dest/<name>-<version>-<tag>.whl`` and return its path.

    Without ``files`` the wheel carries ``<module>/__init__.py`` that records its
    own name and version, so a test can import it and see which one was installed.
    """
    dest.mkdir(parents=True, exist_ok=True)
    dist = canonicalize_name(name).replace("-", "_")
    if files is None:
        files = {f"{dist}/__init__.py": f"NAME = {name!r}\nVERSION = {version!r}\n"}
    dist_info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        metadata.append(f"Requires-Python: {requires_python}")
    metadata += [f"Requires-Dist: {req}" for req in requires]
    entries: dict[str, bytes] = {
        path: content.encode() if isinstance(content, str) else content
        for path, content in files.items()
    }
    entries[f"{dist_info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    purelib = "true" if tag.endswith("-none-any") else "false"
    entries[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: envlock-tests\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    ).encode()
    record_name = f"{dist_info}/RECORD"
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in entries.items())
    entries[record_name] = (record + f"{record_name},,\n").encode()
    path = dest / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in entries.items():
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path

