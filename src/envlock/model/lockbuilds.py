"""The entries of a lock file for what the env builds, each a frozen value with its TOML: a nightly
pin, a source and its patches, a build, a FetchContent pin, a package's GPU kernels. Read key by
key as ``model.locktables`` reads a package (``BadKeyError``) and written as envlock writes them.

Apart from ``model.locktables`` so that a lock without these tables (a switch to a lock of wheels)
does not define their classes (~0.5 ms each); ``model.lockfile`` names them too, loaded on first use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envlock.errors import found as _found
from envlock.model.locktables import (
    SHA256,
    BadKeyError,
    read_array,
    read_opt_str,
    read_str,
    read_strings,
    read_table,
    workspace_path,
)
from envlock.model.tomlio import toml_key, toml_string

_COMMIT = r"[0-9a-f]{40}"  # compiled at first use (re's cache): only a FetchContent pin holds one


@dataclass(frozen=True)
class NightlyPin:
    """A ``[tool.envlock.nightlies]`` entry: a package's nightly date and the exact version it resolved to."""

    date: str  # YYYY-MM-DD, as in the spec
    version: str  # the exact version it resolved to


@dataclass(frozen=True)
class LockedPatch:
    """A source's patch as the lock pins it: its workspace path and sha256."""

    path: str  # workspace-relative, as in the spec
    sha256: str


@dataclass(frozen=True)
class LockedSource:
    """A ``[tool.envlock.sources.NAME]`` table: a git URL at its full commit (and the rev it was resolved from),
    or a workspace path at its tree digest, and its patches."""

    kind: str  # "git" or "path"
    location: str  # git URL or workspace-relative path
    commit: str | None = None  # full 40-hex commit, git sources
    rev: str | None = None  # the spec's branch or tag that ``commit`` was resolved from, if not a hash
    tree_digest: str | None = None  # content digest, path sources
    patches: tuple[LockedPatch, ...] = ()

    def toml_lines(self, name: str) -> list[str]:
        """Its ``[tool.envlock.sources.NAME]`` table, a blank line first."""
        out = ["", f"[tool.envlock.sources.{toml_string(name)}]", f"{self.kind} = {toml_string(self.location)}"]
        out += [f"{key} = {toml_string(value)}" for key, value in
                (("commit", self.commit), ("rev", self.rev), ("tree-digest", self.tree_digest)) if value]
        out += ["patches = [", *(f"    {{ path = {toml_string(p.path)}, sha256 = {toml_string(p.sha256)} }},"
                                 for p in self.patches), "]"]
        return out


@dataclass(frozen=True)
class LockedBuild:
    """A ``[tool.envlock.builds.NAME]`` table: the build's input digest, the wheel it made and its sha256, and
    the build requirements and toolchain it was locked with."""

    input_digest: str
    wheel: str  # filename in the wheelhouse
    sha256: str
    # The build's own requirements as resolved and hash-pinned ("name==version --hash=sha256:..."):
    # for isolated builds these are not in [[packages]], so they are recorded here.
    requirements: tuple[str, ...] = ()
    # Its toolchain (``[builds.NAME] toolchain``), locked the same way: the compilers it ran.
    toolchain: tuple[str, ...] = ()

    def toml_lines(self, name: str) -> list[str]:
        """Its ``[tool.envlock.builds.NAME]`` table, a blank line first."""
        out = ["", f"[tool.envlock.builds.{toml_string(name)}]", f"input-digest = {toml_string(self.input_digest)}",
               f"wheel = {toml_string(self.wheel)}", f"sha256 = {toml_string(self.sha256)}"]
        for key, lines in (("build-requirements", self.requirements), ("toolchain", self.toolchain)):
            if lines:
                out += [f"{key} = [", *(f"    {toml_string(line)}," for line in lines), "]"]
        return out


@dataclass(frozen=True)
class LockedFetchContent:
    """A build's CMake FetchContent input as the lock pins it: a git repository's full commit (and
    the tag or branch it was resolved from), or an archive's URL and sha256."""

    git: str | None = None
    commit: str | None = None  # full 40-hex commit, git inputs
    rev: str | None = None  # the spec's tag or branch ``commit`` was resolved from, if not a hash
    url: str | None = None
    sha256: str | None = None  # the archive's bytes, url inputs

    def recipe(self, name: str) -> dict[str, str]:
        """What a build's input digest covers of it: where it is from, and the bytes it is pinned to."""
        if self.git is not None:
            return {"name": name, "git": self.git, "rev": self.commit or ""}
        return {"name": name, "url": self.url or "", "sha256": self.sha256 or ""}

    def to_toml(self) -> str:
        fields = ([("git", self.git), ("commit", self.commit), ("rev", self.rev)] if self.git is not None
                  else [("url", self.url), ("sha256", self.sha256)])
        return "{ " + ", ".join(f"{k} = {toml_string(v)}" for k, v in fields if v is not None) + " }"


@dataclass(frozen=True)
class LockedKernels:
    """What a package's binaries carry for GPUs (``[tool.envlock.kernels]``, written when the spec
    names ``[env] gpus``): the SASS and PTX arches (``sm_120a``, ``compute_120a``) and the CUDA
    majors they need (docs/gpus.md)."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    cuda: tuple[int, ...] = ()

    def to_toml(self) -> str:
        fields = [f"sass = [{', '.join(map(toml_string, self.sass))}]",
                  f"ptx = [{', '.join(map(toml_string, self.ptx))}]"]
        if self.cuda:
            fields.append(f"cuda = [{', '.join(str(m) for m in self.cuda)}]")
        return "{ " + ", ".join(fields) + " }"


def source_entry(src: Mapping[str, Any], key: str) -> LockedSource:
    """One ``[tool.envlock.sources.NAME]`` table at ``key``: a git URL or a workspace path, and its patches."""
    kind = "git" if "git" in src else "path"
    if kind not in src:
        raise BadKeyError(key, "found neither git nor path", "one of them")
    patches = []
    for i, value in enumerate(read_array(src.get("patches", []), f"{key}.patches")):
        patch = read_table(value, f"{key}.patches[{i}]")
        patches.append(LockedPatch(workspace_path(patch, "path", f"{key}.patches[{i}]"),
                                   read_str(patch, "sha256", f"{key}.patches[{i}]")))
    return LockedSource(
        kind=kind,
        location=read_str(src, kind, key) if kind == "git" else workspace_path(src, kind, key),
        commit=read_opt_str(src, "commit", key),
        rev=read_opt_str(src, "rev", key),
        tree_digest=read_opt_str(src, "tree-digest", key),
        patches=tuple(patches),
    )


def build_entry(build: Mapping[str, Any], key: str) -> LockedBuild:
    """One ``[tool.envlock.builds.NAME]`` table at ``key``."""
    return LockedBuild(
        input_digest=read_str(build, "input-digest", key),
        wheel=read_str(build, "wheel", key),
        sha256=read_str(build, "sha256", key),
        requirements=read_strings(build.get("build-requirements", []), f"{key}.build-requirements"),
        toolchain=read_strings(build.get("toolchain", []), f"{key}.toolchain"),
    )


_GIT_PIN_KEYS = ("git", "commit", "rev")
_ARCHIVE_PIN_KEYS = ("url", "sha256")


def fetchcontent_entries(table: Mapping[str, Any], key: str) -> dict[str, LockedFetchContent]:
    """One build's ``[tool.envlock.fetchcontent.BUILD]``: each input's pin, its keys exactly these."""
    out = {}
    for name, value in table.items():
        where = toml_key(key, name)
        pin = read_table(value, where)
        allowed = _GIT_PIN_KEYS if "git" in pin else _ARCHIVE_PIN_KEYS
        if "git" in pin and "url" in pin:
            raise BadKeyError(where, "found both git and url", "one of them")
        if "git" not in pin and "url" not in pin:
            raise BadKeyError(where, "found neither git nor url", "one of them")
        for extra in sorted(set(pin) - set(allowed)):
            raise BadKeyError(toml_key(where, extra), "found a key envlock does not write there",
                              f"only {', '.join(allowed)} ({'a git' if 'git' in pin else 'an archive'} input)")
        if "git" in pin:
            commit = read_str(pin, "commit", where)
            if not re.fullmatch(_COMMIT, commit):
                raise BadKeyError(toml_key(where, "commit"), f"found {commit!r}", "a full 40-hex commit")
            out[name] = LockedFetchContent(git=read_str(pin, "git", where), commit=commit,
                                           rev=read_opt_str(pin, "rev", where))
        else:
            sha256 = read_str(pin, "sha256", where)
            if not SHA256.fullmatch(sha256):
                raise BadKeyError(toml_key(where, "sha256"), f"found {sha256!r}", "64 lowercase hex digits")
            out[name] = LockedFetchContent(url=read_str(pin, "url", where), sha256=sha256)
    return out


def kernels_entry(value: object, key: str) -> LockedKernels:
    """One package's ``[tool.envlock.kernels]`` entry: sass and ptx arrays of names, cuda of majors."""
    table = read_table(value, key)
    for extra in sorted(set(table) - {"sass", "ptx", "cuda"}):
        raise BadKeyError(toml_key(key, extra), "found a key envlock does not write there", "only sass, ptx, cuda")
    cuda = read_array(table.get("cuda", []), f"{key}.cuda")
    for i, major in enumerate(cuda):
        if not isinstance(major, int) or isinstance(major, bool):
            raise BadKeyError(f"{key}.cuda[{i}]", f"found {_found(major)}", "a CUDA major version (13)")
    return LockedKernels(read_strings(table.get("sass", []), f"{key}.sass"),
                         read_strings(table.get("ptx", []), f"{key}.ptx"), tuple(cuda))
