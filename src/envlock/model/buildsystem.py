"""A project's ``pyproject.toml`` as its build reads it: the backend, the build requirements, and the
paths outside the project's folder it names.

A build of a subdirectory (``subdirectory = "python"``) may read ``..``, as pip's does: SGLang's
``python/pyproject.toml`` builds a Rust extension from ``../rust/sglang-grpc/Cargo.toml`` (since
69b02ea6) and reads its version from the repository root (``[tool.setuptools_scm] root = ".."``).
Those paths are what ``outside`` finds: every string value of the document that leads out of the
folder (``..`` or ``../...``), with the key that holds it. ``envlock.build.builder`` digests them with the
subdirectory; the upgrade report names the ones that appear.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: PEP 517's defaults, for a project that names no backend.
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
DEFAULT_REQUIRES = ("setuptools>=40.8.0",)


@dataclass(frozen=True)
class BuildSystem:
    """What a project's ``pyproject.toml`` tells its build: ``[build-system]`` and the paths outside."""

    backend: str
    requires: tuple[str, ...]
    outside: tuple[tuple[str, str], ...] = ()  # (path as written, the key holding it), sorted

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> BuildSystem:
        """The build system of a parsed ``pyproject.toml`` (None: there is none; PEP 517's defaults)."""
        system = doc.get("build-system") if doc is not None else None
        system = system if isinstance(system, dict) else {}
        requires = system.get("requires", list(DEFAULT_REQUIRES))
        return cls(str(system.get("build-backend", DEFAULT_BACKEND)),
                   tuple(str(r) for r in requires) if isinstance(requires, list) else DEFAULT_REQUIRES,
                   outside(doc) if doc is not None else ())

    def changes(self, new: BuildSystem) -> list[tuple[str, str | None, str | None]]:
        """What moved to ``new``: ("build-backend", old, new), ("requires", old line, new line) per
        requirement added, removed or changed (by name), ("reads", None, path) per path outside added."""
        out: list[tuple[str, str | None, str | None]] = []
        if self.backend != new.backend:
            out.append(("build-backend", self.backend, new.backend))
        was, now = _by_name(self.requires), _by_name(new.requires)
        out += [("requires", was.get(n), now.get(n)) for n in sorted(set(was) | set(now)) if was.get(n) != now.get(n)]
        known = {path for path, _ in self.outside}
        out += [("reads", None, f"{path} ({key})") for path, key in new.outside if path not in known]
        return out


def _by_name(lines: Sequence[str]) -> dict[str, str]:
    import re

    return {re.sub(r"[-_.]+", "-", re.split(r"[\s;<>=!~\[(@]", line, maxsplit=1)[0]).lower(): line for line in lines}


def outside(doc: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Each string of ``doc`` that names a path out of the project's folder (``..``, ``../x``), with its key."""
    found: list[tuple[str, str]] = []

    def visit(value: object, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(v, f"{key}[{i}]")
        elif isinstance(value, str) and leaves(value):
            found.append((value, key))

    visit({k: v for k, v in doc.items() if k != "project"}, "")  # [project] names no file a build reads outside
    return tuple(sorted(set(found)))


def leaves(path: str) -> bool:
    """Whether relative ``path`` leads out of the folder it is relative to (``..``, ``../x``, ``a/../../x``)."""
    if not path or path.startswith("/") or "://" in path or "\n" in path:
        return False
    return posixpath.normpath(path).split("/")[0] == ".."


def reach(subdirectory: str, path: str) -> str:
    """Where ``path`` (relative to ``subdirectory``) is in the source tree: "" for its root, else a folder or
    file relative to it; what lies above the root is the root."""
    joined = posixpath.normpath(posixpath.join(subdirectory or ".", path))
    return "" if joined in (".", "..") or joined.startswith("../") else joined


def reached(tree: Path, project: Path, doc: Mapping[str, Any] | None, links: Iterable[Path]) -> list[str]:
    """The folders of the source ``tree`` (relative; "" for all of it) a build of its subfolder ``project``
    reads outside it: each path its ``pyproject.toml`` (``doc``) names (a file's folder:
    ``../rust/sglang-grpc/Cargo.toml`` is the crate; ``root = ".."``: the whole tree), and where its
    ``links`` (the symlinks under ``project``, as ``trees.walk_tree`` lists them) lead (``trees.tree_digest``
    has held them inside the source). Reads no store: a model of the project, as the diff reads it too."""
    root = os.path.realpath(tree)
    inside = os.path.relpath(os.path.realpath(project), root)
    named = [reach("" if inside == "." else inside, p) for p, _ in (outside(doc) if doc is not None else ())]
    if inside != ".":
        linked = [os.path.relpath(os.path.realpath(p), root) for p in links]
        named += [rel for rel in linked if not (rel + "/").startswith(inside + "/")]
    found = {"" if rel in ("", ".") else rel if (tree / rel).is_dir() else posixpath.dirname(rel) for rel in named}
    return [""] if "" in found else sorted(found)
