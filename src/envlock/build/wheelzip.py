"""A built wheel's zip: rewritten with fixed timestamps, permissions and compression, so that one
set of inputs gives one wheel's bytes (``normalize_wheel``); two builds compared member by member,
to name what differs when they do not (``wheel_diff``, for ``build --check``).
"""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

from envlock.store.store import temp_beside

ZIP_EPOCH_MIN = 315532800  # 1980-01-01T00:00:00Z, the earliest date a zip entry can carry


def normalize_wheel(path: Path, epoch: int) -> None:
    """Rewrite a wheel's zip with fixed timestamps, permissions and compression (contents unchanged)."""
    stamp = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
    tmp = temp_beside(path)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            out = zipfile.ZipInfo(info.filename, date_time=stamp)
            out.create_system = 3
            if info.is_dir():
                out.external_attr = (0o40755 << 16) | 0x10
            else:
                executable = (info.external_attr >> 16) & 0o111
                out.external_attr = (0o100755 if executable else 0o100644) << 16
            out.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(out, data, compresslevel=6)
    os.replace(tmp, path)



def wheel_diff(a: Path, b: Path) -> list[str]:
    """Names of the files inside two wheels that differ (content, presence or zip metadata)."""
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        ia = {i.filename: i for i in za.infolist()}
        ib = {i.filename: i for i in zb.infolist()}
        out = []
        for name in sorted(ia.keys() | ib.keys()):
            if name not in ib:
                out.append(f"{name} (only in the first build)")
            elif name not in ia:
                out.append(f"{name} (only in the rebuild)")
            elif za.read(name) != zb.read(name):
                out.append(name)
            elif (ia[name].date_time, ia[name].external_attr) != (ib[name].date_time, ib[name].external_attr):
                out.append(f"{name} (zip metadata: time or permissions)")
        if not out and [i.filename for i in za.infolist()] != [i.filename for i in zb.infolist()]:
            out.append("(zip member order)")
    return out
