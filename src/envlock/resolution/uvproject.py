"""What uv is handed and what it answers: the transient project (``pyproject.toml``: every spec index,
``[tool.uv.sources]`` pinning packages to theirs), its overrides, the ``uv pip compile`` arguments,
one run of it in a temp folder, and its answer read (a pylock's packages, or requirements' versions).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock import runner
from envlock.errors import ResolveError
from envlock.model.lockfile import Artifact
from envlock.model.spec import EnvSpec
from envlock.net.indexes import IndexFile
from envlock.resolution.resolveinputs import ResolveInputs
from envlock.resolution.uvahead import UvCall
from envlock.store.store import store_file

# An override to a marker that is never true removes a package from the resolution
# (uv's documented way to drop a dependency that an upstream package declares).
_NEVER = "sys_platform == 'never'"


def uv_overrides(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
                 local: Mapping[str, Path] | None = None) -> list[str]:
    """The override lines uv gets (``overrides.txt``, named on its command line).

    ``local``: pinned wheels uv reads from these files (store copies) instead of their URL.
    """
    local = local or {}
    overrides = [o for o in spec.resolution.overrides if str(canonicalize_name(Requirement(o).name)) not in pinned]
    overrides += [f"{name} @ {local[name].as_uri() if name in local else f.url}" for name, f in sorted(pinned.items())]
    # Provided by a local build after resolution: upstream pins on it (sglang's
    # sgl-kernel==0.3.21) must not pull it from an index.
    overrides += [f"{pkg.name}; {_NEVER}" for pkg in spec.packages.values()
                  if pkg.build and pkg.name not in inputs.build_sources]
    overrides += [f"{name}; {_NEVER}" for name in spec.resolution.exclude]
    return overrides


def compile_args(spec: EnvSpec, inputs: ResolveInputs, output: str = "pylock.toml") -> list[str]:
    """``uv pip compile`` of the transient project (in its folder, with ``overrides.txt`` beside it),
    written as ``output`` (``pylock.toml``, or ``requirements.txt`` for versions without hashes)."""
    # uv runs with UV_NO_CONFIG (no user config may leak in), which also drops the
    # project's [tool.uv] settings: the default index and the overrides go on the
    # command line. Index pins ([tool.uv.sources]) are project metadata and stay.
    # Wheels only: an index's sdist is never built to read its metadata (its setup.py would run here);
    # a local build's source tree is (it is built from a pinned source anyway).
    return runner.compile_args("pyproject.toml", output, runner.CompileOptions(
        output_format=output, python=spec.python, platform=spec.platform,
        default_index=inputs.index_urls[spec.default_index.name], overrides="overrides.txt",
        wheels_only=sorted(map(str, inputs.build_sources))))


def transient_project(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
                      direct: Mapping[str, Path] | None = None) -> str:
    """The pyproject.toml uv resolves (pure function of its inputs, so it can be tested and benchmarked).

    ``direct``: packages given as a direct dependency on that wheel file (see ``run_uv``).
    """
    deps: list[str] = []
    sources: dict[str, dict[str, str]] = {}
    for pkg in spec.packages.values():
        if direct and str(pkg.name) in direct:
            deps.append(f"{pkg.name} @ {direct[str(pkg.name)].as_uri()}")
            continue
        if pkg.build:
            if pkg.name in inputs.build_sources:
                deps.append(str(pkg.name))
                sources[str(pkg.name)] = {"path": str(inputs.build_sources[pkg.name])}
            continue
        if pkg.nightly:
            # The override (a URL on its own index) beats upstream == pins on the stable release.
            deps.append(f"{pkg.name}=={pinned[str(pkg.name)].version}")
        else:
            deps.append(f"{pkg.name}{pkg.specifier}")
        if pkg.index:
            sources[str(pkg.name)] = {"index": pkg.index}
    deps += inputs.extra_requirements
    # No [tool.uv] override-dependencies: UV_NO_CONFIG drops them (see compile_args); the
    # indexes and sources below are project metadata, which uv reads either way.
    lines = [
        "[project]",
        'name = "envlock-resolution"',
        'version = "0"',
        f"requires-python = {json.dumps('>=' + spec.python)}",
        f"dependencies = {json.dumps(deps)}",
    ]
    for name in sorted(spec.indexes, key=lambda n: (not spec.indexes[n].default, n)):
        idx = spec.indexes[name]
        # Its password reaches uv in its environment (``run_uv``), never in a file it reads.
        url = runner.without_password(inputs.index_urls[name])
        lines += ["", "[[tool.uv.index]]", f"name = {json.dumps(name)}", f"url = {json.dumps(url)}"]
        lines.append("default = true" if idx.default else "explicit = true")
    lines += ["", "[tool.uv.sources]"]
    lines += [
        f"{json.dumps(name)} = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in src.items())} }}"
        for name, src in sorted(sources.items())
    ]
    return "\n".join(lines) + "\n"


def requirements_versions(text: str) -> dict[NormalizedName, Version]:
    """``name==version`` lines of uv's requirements output (direct-URL lines and comments skipped)."""
    out = {}
    for line in text.splitlines():
        requirement = line.split("#", 1)[0].split(";", 1)[0].strip()
        name, sep, version = requirement.partition("==")
        if sep and " @ " not in requirement:
            try:
                out[canonicalize_name(name.strip())] = Version(version.strip())
            except InvalidVersion:
                continue  # not a version uv would write: the package is left to uv
    return out


def pylock_entries(text: str) -> list[Mapping[str, object]]:
    """The ``[[packages]]`` of uv's pylock output."""
    entries: list[Mapping[str, object]] = tomllib.loads(text).get("packages", [])
    return entries


_SDIST_HINT = ("envlock locks wheels only: it never builds an index's sdist to read its metadata (that would run the "
               "index's code); declare a [builds.NAME] to build one from a pinned source, or pin a version that has "
               "wheels")


def run_uv(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
            stored: Mapping[str, Artifact], output: str, direct: set[str] | None = None) -> str:
    """uv's resolution of the transient project, as the text of its ``output`` format.

    ``direct``: names of ``pinned`` handed to uv as direct dependencies on their store file
    (held to every requirement on them) rather than as overrides.
    """
    local = {name: store_file(inputs.store, art) for name, art in stored.items()}
    direct_files = {name: local[name] for name in direct or ()}
    overridden = {name: f for name, f in pinned.items() if name not in direct_files}
    pyproject = transient_project(spec, inputs, pinned, direct_files)
    overrides = "".join(f"{o}\n" for o in uv_overrides(spec, inputs, overridden, local))
    args = compile_args(spec, inputs, output)
    env = {**inputs.build_env, **runner.uv_index_credentials(inputs.index_urls)}
    call = None
    if inputs.ahead is not None and output == "pylock.toml":
        call = UvCall.recordable(args, pyproject, overrides, env, spec.python, spec.platform,
                                 inputs.index_urls[spec.default_index.name], list(inputs.index_urls.values()))
        if (text := inputs.ahead.take(call)) is not None:  # the very run, started ahead: its answer
            return text
    work = Path(tempfile.mkdtemp(prefix="envlock-resolve-"))
    try:
        (work / "pyproject.toml").write_text(pyproject)
        (work / "overrides.txt").write_text(overrides)
        result = runner.uv(args, cwd=work, env=env)
        if not result.ok:
            unreachable = "Failed to fetch" in result.stderr or "error sending request" in result.stderr
            sdists = [_SDIST_HINT] if "has no usable wheels" in result.stderr else []
            raise ResolveError(
                f"{spec.path}: uv could not read an index for env {spec.name!r} (no network, or a mirror is "
                f"needed: --index NAME=URL)" if unreachable else
                f"{spec.path}: uv found no resolution for env {spec.name!r}",
                details=[*result.tail().splitlines(), *sdists],
            )
        text = (work / output).read_text()
        if call is not None and inputs.ahead is not None:
            inputs.ahead.remember(call)  # what the next relock starts ahead
        return text
    finally:
        shutil.rmtree(work, ignore_errors=True)
