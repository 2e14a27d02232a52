"""What a local build resolves and runs with: its interpreter (probed once), its requirements
locked with hashes (``uv pip compile --generate-hashes``: the backend's ``[build-system].requires``,
a build's ``requires``, its toolchain), and for ``isolation = false`` the env's locked packages
it can import (the closure of its requirements within the env, from the store).

``envlock.build.builder`` digests these into a build's recipe; ``envlock.build.inputs`` follows
``requirement_edges`` to fetch only that closure.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envlock import runner
from envlock.errors import BuildError, BuildRequirementsError, InstallError
from envlock.model.lockfile import Lock
from envlock.model.spec import BuildSpec
from envlock.model.target import find_python, requires_dist
from envlock.model.tomlio import load_toml
from envlock.store.store import Store, store_file


@dataclass(frozen=True)
class BuildEnvPackage:
    """One locked package of the env, installed into an ``isolation = false`` build venv."""

    name: str
    version: str
    sha256: str
    wheel: Path

    @property
    def line(self) -> str:
        return f"{canonicalize_name(self.name)}=={self.version} sha256:{self.sha256}"



@functools.cache
def interpreter(python: str) -> dict[str, str]:
    """The build's interpreter for ``python``: ``target.find_python``'s, as install's (never an active
    or nearby venv's, so a build does not depend on where envlock runs), probed once."""
    try:
        exe = str(find_python(python))
    except InstallError as exc:
        raise BuildError(f"no interpreter for the build: {exc.message}", details=exc.details) from None
    probe = runner.run(
        [exe, "-c", "import platform, sysconfig; print(platform.python_version()); print(sysconfig.get_platform())"]
    )
    fields = probe.stdout.split()
    if not probe.ok or len(fields) != 2:
        raise BuildError(f"{exe}: cannot ask the build interpreter its version and platform "
                         f"(exit {probe.returncode})", details=probe.tail(5).splitlines())
    return {"executable": exe, "version": fields[0], "platform": fields[1]}



def requirement_edges(wheel: Path, extras: frozenset[str],
                      environment: Mapping[str, str]) -> list[tuple[str, frozenset[str]]]:
    """(name, extras) of each requirement of ``wheel`` (its Requires-Dist) that applies on the
    target ``environment`` with ``extras``; ``BuildError`` when the wheel cannot be read."""
    try:
        requirements = requires_dist(wheel)
    except ValueError as exc:  # no wheel, or a requirement line that does not parse
        raise BuildError(str(exc)) from None
    return [(str(canonicalize_name(req.name)), frozenset(req.extras)) for req in requirements
            if req.marker is None or any(req.marker.evaluate({**environment, "extra": e}) for e in (extras or {""}))]



def build_env_closure(
    packages: Sequence[BuildEnvPackage], roots: set[Any], environment: Mapping[str, str]
) -> tuple[BuildEnvPackage, ...]:
    """The packages reachable from ``roots`` through their wheels' requirements (markers for the target)."""
    by_name: dict[str, BuildEnvPackage] = {str(canonicalize_name(p.name)): p for p in packages}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(str(r), frozenset()) for r in roots]
    while todo:
        name, extras = todo.pop()
        if name not in by_name or (name, extras) in seen:
            continue
        seen.add((name, extras))
        todo += requirement_edges(by_name[name].wheel, extras, environment)
    reached = {name for name, _ in seen}
    return tuple(p for p in packages if canonicalize_name(p.name) in reached)



def build_roots(spec: BuildSpec, tree: Path) -> set[str]:
    """What an ``isolation = false`` build can import of the env, at its root: its ``requires`` and its
    project's ``[build-system].requires`` (by name; ``tree`` is the patched source)."""
    project = tree / spec.subdirectory if spec.subdirectory else tree
    system_requires = project_backend(project)[1] if project.is_dir() else []
    return {str(canonicalize_name(Requirement(r).name)) for r in (*spec.requires, *system_requires)}



def project_backend(project: Path) -> tuple[str, list[str]]:
    """(build-backend, [build-system].requires) of a project, with PEP 517's defaults."""
    path = project / "pyproject.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "setuptools.build_meta:__legacy__", ["setuptools>=40.8.0"]
    system = load_toml(text, path, BuildError).get("build-system", {})
    return (
        str(system.get("build-backend", "setuptools.build_meta:__legacy__")),
        [str(r) for r in system.get("requires", ["setuptools>=40.8.0"])],
    )



def lock_requirements(
    requirements: Sequence[str],
    *,
    python: str,
    index_url: str | None,
    what: str,
    constraints: Sequence[str] = (),
    scratch: Path,
) -> tuple[str, ...]:
    """Resolve ``requirements`` with hashes; return sorted, one line per package."""
    if not requirements:
        return ()
    scratch.mkdir(parents=True, exist_ok=True)
    req_in = scratch / "requirements.in"
    req_in.write_text("".join(f"{r}\n" for r in requirements))
    out = scratch / "requirements.txt"
    cons: Path | None = None
    if constraints:
        cons = scratch / "constraints.txt"
        cons.write_text("".join(f"{c}\n" for c in constraints))
    args = runner.compile_args(req_in, out, runner.CompileOptions(python=python, default_index=index_url,
                                                                  constraints=cons, hashes=True, annotate=False))
    # First without uv's retries: an index that refuses the connection (a machine without it: the
    # case `--offline` is for) is said at once, not after ~10 s of retries. Any other failure is
    # asked again with them (a transient 5xx).
    result = runner.uv(args, env={"UV_HTTP_RETRIES": "0"})
    if not result.ok and not _unreachable(result.tail(15)):
        result = runner.uv(args)
    if not result.ok:
        raise BuildRequirementsError(
            f"{what}: cannot resolve build requirements {', '.join(requirements)} "
            f"(uv pip compile exit {result.returncode})",
            details=result.tail(15).splitlines(),
        )
    text = out.read_text().replace("\\\n", " ")
    lines = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if line and not line.startswith("#"):
            name, _, rest = line.partition("==")
            lines.append(f"{canonicalize_name(name)}=={rest}")
    return tuple(sorted(lines))



def _unreachable(output: str) -> bool:
    """Whether uv's output says an index host could not be reached at all (no retry changes that)."""
    return any(sign in output for sign in ("Connection refused", "dns error", "No route to host"))



def env_packages_from_lock(lock: Lock, store: Store, *, exclude: Sequence[str] = ()) -> tuple[BuildEnvPackage, ...]:
    """The lock's packages as a build venv gets them: the fetched wheel of each, from the store.

    Leaves out ``exclude`` (the env's local builds). A package with several wheels uses the
    first one that was fetched into ``wheels/<sha256>/``.
    """
    skip = {canonicalize_name(n) for n in exclude}
    out = []
    missing = []
    for pkg in lock.packages:
        if pkg.name in skip:
            continue
        found = None
        for art in pkg.wheels:
            candidate = store_file(store, art)
            if candidate.is_file():
                found = BuildEnvPackage(pkg.name, pkg.version, art.sha256, candidate)
                break
        if found is None:
            missing.append(f"{pkg.name}=={pkg.version}")
        else:
            out.append(found)
    if missing:
        raise BuildError(
            "the build venv needs the env's wheels, but these are not fetched yet: "
            + ", ".join(missing)
            + "; run `envlock sync` (or its fetch step) first"
        )
    return tuple(out)
