"""A PEP 517 build backend small enough to ship inside a project (``backend-path``), for the example world.

The world's buildable projects (the SGLang-shaped repository's ``python/``, the demo's ``mini-kernel``)
carry this file as ``_backend.py`` with ``requires = []``: a build installs nothing, so the world builds
with no index of build backends and no network. It packs the project's top-level packages (the folders
with an ``__init__.py``) into a pure-Python wheel, byte for byte the same on every run.

``SOURCE`` is this module's own text, written into each project by ``kit.world``.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = '''\
"""A tiny in-tree PEP 517 backend (envlock's example world): pure-Python wheels, reproducible bytes."""

import base64
import hashlib
import os
import tomllib
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    with open("pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]


def _dist(project):
    return project["name"].replace("-", "_").replace(".", "_").lower()


def _metadata(project):
    lines = ["Metadata-Version: 2.1", "Name: " + project["name"], "Version: " + project["version"]]
    lines += ["Requires-Dist: " + req for req in project.get("dependencies", [])]
    return "\\n".join(lines) + "\\n"


def _files():
    out = {}
    for top in sorted(os.listdir(".")):
        if os.path.isfile(os.path.join(top, "__init__.py")):
            for folder, dirs, names in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(names):
                    if name.endswith(".py"):
                        path = os.path.join(folder, name)
                        with open(path, "rb") as fh:
                            out[path.replace(os.sep, "/")] = fh.read()
    return out


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    info = _dist(project) + "-" + project["version"] + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w") as fh:
        fh.write(_metadata(project))
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist, version = _dist(project), project["version"]
    info = dist + "-" + version + ".dist-info"
    entries = _files()
    entries[info + "/METADATA"] = _metadata(project).encode()
    entries[info + "/WHEEL"] = (b"Wheel-Version: 1.0\\nGenerator: world-backend\\nRoot-Is-Purelib: true\\n"
                                b"Tag: py3-none-any\\n")
    record = "".join(p + "," + _record_hash(d) + "," + str(len(d)) + "\\n" for p, d in entries.items())
    entries[info + "/RECORD"] = (record + info + "/RECORD,,\\n").encode()
    name = dist + "-" + version + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            member = zipfile.ZipInfo(path, date_time=_EPOCH)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(member, data)
    return name
'''

PYPROJECT = """\
[build-system]
requires = []
build-backend = "_backend"
backend-path = ["."]

[project]
name = "{name}"
version = "{version}"
requires-python = ">=3.10"
dependencies = [{dependencies}]
"""


def project_files(name: str, version: str, dependencies: tuple[str, ...] = ()) -> dict[str, str]:
    """``pyproject.toml`` and ``_backend.py`` of a project built by this backend."""
    deps = ", ".join(f'"{d}"' for d in dependencies)
    return {"pyproject.toml": PYPROJECT.format(name=name, version=version, dependencies=deps),
            "_backend.py": SOURCE}


def write_project(root: Path, name: str, version: str, files: dict[str, str],
                  dependencies: tuple[str, ...] = ()) -> Path:
    """A project folder at ``root``: the backend, its pyproject and ``files``."""
    for rel, text in {**project_files(name, version, dependencies), **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
