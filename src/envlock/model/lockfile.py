"""Read and write ``locks/pylock.NAME.toml``: PEP 751 plus envlock's ``[tool.envlock]``.

The writer is envlock's own so the bytes are a pure function of the data: same
spec + same index contents => byte-identical lock. The reader accepts what the
writer writes (tests validate that with ``packaging.pylock``) and refuses anything
else naming the key path, what it found and what it expected.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

from envlock.errors import LockError
from envlock.errors import found as _found
from envlock.model import overlaps
from envlock.model.overlaps import AllowedOverlap
from envlock.model.tomlio import load_toml

if TYPE_CHECKING:
    from packaging.utils import NormalizedName


def canonicalize_name(name: str) -> NormalizedName:
    """PEP 503 name normalization, as ``packaging.utils.canonicalize_name``.

    Kept here so that reading a lock (every ``sync``) does not import ``packaging``.
    """
    return cast("NormalizedName", re.sub(r"[-_.]+", "-", name).lower())

LOCK_FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")
# PEP 751's lock-version: MAJOR.MINOR. A reader must refuse a major version it does not
# support; a newer minor only adds keys, which this reader ignores.
_LOCK_VERSION = re.compile(r"(\d+)\.(\d+)")
_LOCK_MAJOR = 1


@dataclass(frozen=True)
class Artifact:
    """One wheel: a remote ``url`` or a ``path`` relative to the lock file, and its sha256."""

    sha256: str
    url: str | None = None
    path: str | None = None
    size: int | None = None

    @property
    def filename(self) -> str:
        where = self.url if self.url is not None else self.path
        assert where is not None
        if "?" in where or "#" in where:  # the common case skips urlsplit: every lock read checks names
            where = urlsplit(where).path
        name = where.rsplit("/", 1)[-1]
        return unquote(name) if "%" in name else name

    def filename_problem(self) -> str | None:
        """Why ``filename`` cannot be kept as ``wheels/<sha256>/<filename>``, or None when it can.

        Only a plain ``*.whl`` name stays inside its store entry: a lock from a pull
        request or a hostile index page may end a URL in ``..%2F..%2Fx.whl``.
        """
        name = self.filename
        if name.endswith(".whl") and not name.startswith(".") and not any(c in name for c in "/\\\0"):
            return None
        return f"{self.url or self.path!r} names the file {name!r}, expected a plain *.whl file name"


@dataclass(frozen=True)
class LockedPackage:
    name: NormalizedName
    version: str
    wheels: tuple[Artifact, ...]
    index: str | None = None  # the index base URL it was resolved from (PEP 751 ``index``)
    #: PEP 592: the reason its index gave ("" for none) when the locked release was yanked at lock
    #: time (an exact ``==`` pin takes a yanked release); None when it was not.
    #: ``[packages.tool.envlock] yanked`` in the file.
    yanked: str | None = None


@dataclass(frozen=True)
class NightlyPin:
    date: str  # YYYY-MM-DD, as in the spec
    version: str  # the exact version it resolved to


@dataclass(frozen=True)
class LockedPatch:
    path: str  # workspace-relative, as in the spec
    sha256: str


@dataclass(frozen=True)
class LockedSource:
    kind: str  # "git" or "path"
    location: str  # git URL or workspace-relative path
    commit: str | None = None  # full 40-hex commit, git sources
    rev: str | None = None  # the spec's branch or tag that ``commit`` was resolved from, if not a hash
    tree_digest: str | None = None  # content digest, path sources
    patches: tuple[LockedPatch, ...] = ()


@dataclass(frozen=True)
class LockedBuild:
    input_digest: str
    wheel: str  # filename in the wheelhouse
    sha256: str
    # The build's own requirements as resolved and hash-pinned ("name==version --hash=sha256:..."):
    # for isolated builds these are not in [[packages]], so they are recorded here.
    requirements: tuple[str, ...] = ()
    # Its toolchain (``[builds.NAME] toolchain``), locked the same way: the compilers it ran.
    toolchain: tuple[str, ...] = ()


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
        return "{ " + ", ".join(f"{k} = {_s(v)}" for k, v in fields if v is not None) + " }"


@dataclass(frozen=True)
class LockedKernels:
    """What a package's binaries carry for GPUs (``[tool.envlock.kernels]``, written when the spec
    names ``[env] gpus``): the SASS and PTX arches (``sm_120a``, ``compute_120a``) and the CUDA
    majors they need (docs/gpus.md)."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    cuda: tuple[int, ...] = ()

    def to_toml(self) -> str:
        fields = [f"sass = [{', '.join(_s(a) for a in self.sass)}]", f"ptx = [{', '.join(_s(a) for a in self.ptx)}]"]
        if self.cuda:
            fields.append(f"cuda = [{', '.join(str(m) for m in self.cuda)}]")
        return "{ " + ", ".join(fields) + " }"


@dataclass(frozen=True)
class Lock:
    """A whole lock file, as data."""

    env: str
    python: str
    platform: str | None
    spec_digest: str
    spec_keys: Mapping[str, str]  # spec key path -> digest, to say which key changed
    packages: tuple[LockedPackage, ...]
    requires_python: str | None = None
    nightlies: Mapping[str, NightlyPin] = field(default_factory=dict)
    sources: Mapping[str, LockedSource] = field(default_factory=dict)
    builds: Mapping[str, LockedBuild] = field(default_factory=dict)
    # Build name -> FetchContent input name -> its pin (``[tool.envlock.fetchcontent.BUILD]``).
    fetchcontent: Mapping[str, Mapping[str, LockedFetchContent]] = field(default_factory=dict)
    venv_digest: str | None = None
    # The interpreter the venv digest was taken with ("3.11.7"): a venv holds its interpreter's
    # version (pyvenv.cfg), so a digest is comparable only between equal interpreters.
    venv_python: str | None = None
    # The install digest of the packages the venv digest was taken for (recorded with it): a
    # lock whose packages were edited by hand since holds a digest that says nothing about its venv.
    venv_install: str | None = None
    # The upstream pins the spec's overrides beat at this lock, "REQUIRER: REQUIREMENT" (the guards'
    # ``GuardReport.overridden``): the next lock notes a pin beaten that is not here.
    overridden: tuple[str, ...] = ()
    # The spec's ``[resolution] allow-overlap`` entries this resolution used: paths two of its
    # distributions both install, with different bytes, accepted by name (``envlock.model.overlaps``).
    allowed_overlaps: tuple[AllowedOverlap, ...] = ()
    # With ``[env] gpus`` only: each kernel-bearing package's arches, and the oldest driver the
    # env's binaries run on (from the CUDA majors they need; docs/gpus.md).
    kernels: Mapping[str, LockedKernels] = field(default_factory=dict)
    min_driver: str | None = None
    # What each package (and each build of the spec) requires among the locked packages, from the
    # wheels' Requires-Dist (``guards.recorded_requires``): the graph ``lock --check`` holds every
    # package to, from the spec's roots. None: a lock written before envlock recorded it.
    requires: Mapping[str, tuple[str, ...]] | None = None

    @property
    def venv_digest_stale(self) -> bool:
        """The recorded venv digest was taken for other packages than this lock's (a hand edit since)."""
        return self.venv_digest is not None and self.venv_install != self.install_digest()

    def unbuilt(self) -> tuple[str, ...]:
        """The spec's ``[builds.*]`` this lock records no build of (``envlock lock`` before ``build``)."""
        declared = (key.removeprefix("builds.") for key in self.spec_keys if key.startswith("builds."))
        return tuple(sorted(name for name in declared if name not in self.builds))

    def package(self, name: str) -> LockedPackage | None:
        wanted = canonicalize_name(name)
        return next((p for p in self.packages if p.name == wanted), None)

    def install_digest(self) -> str:
        """Digest of what gets installed (python, platform, every wheel's sha256, whose bytes a path two
        distributions are allowed to share holds).

        Venvs are keyed by it in the store; it leaves out the venv digest so that
        recording the digest does not change the key.
        """
        parts = [f"python={self.python}", f"platform={self.platform or ''}"]
        parts += [
            f"{p.name}=={p.version} " + ",".join(w.sha256 for w in p.wheels) for p in self.packages
        ]
        # Which of two distributions' bytes a shared path holds is the venv's too (only when there is one:
        # every other lock's digest stays what it was).
        parts += [f"allowed-overlap={o.path} {o.packages[0]},{o.packages[1]}" for o in self.allowed_overlaps]
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def with_venv_digest(self, digest: str | None, python: str | None = None) -> Lock:
        """This lock with ``digest`` recorded as its venv's (taken with ``python``), for its packages now."""
        return replace(self, venv_digest=digest, venv_python=python if digest else None,
                       venv_install=self.install_digest() if digest else None)

    def venv_digest_for(self, python: str | None) -> str | None:
        """The recorded venv digest if it applies to a venv built with ``python`` (else None), and to
        this lock's packages."""
        if self.venv_python is not None and python is not None and python != self.venv_python:
            return None
        return None if self.venv_digest_stale else self.venv_digest

    # -- TOML ------------------------------------------------------------
    def to_toml(self) -> str:
        out = ['lock-version = "1.0"', f"created-by = {_s('envlock')}"]
        if self.requires_python:
            out.append(f"requires-python = {_s(self.requires_python)}")
        if not self.packages:
            out.append("packages = []")  # PEP 751: the key is required even when empty
        for pkg in self.packages:
            out += ["", "[[packages]]", f"name = {_s(pkg.name)}", f"version = {_s(pkg.version)}"]
            if pkg.index:
                out.append(f"index = {_s(pkg.index)}")
            out.append("wheels = [")
            for wheel in pkg.wheels:
                out.append(f"    {_wheel_table(wheel)},")
            out.append("]")
            if pkg.yanked is not None:  # PEP 751 packages.tool: this package's envlock data
                out += ["", "[packages.tool.envlock]", f"yanked = {_s(pkg.yanked)}"]
        tool: dict[str, Any] = {
            "format": LOCK_FORMAT,
            "env": self.env,
            "python": self.python,
        }
        if self.platform:
            tool["platform"] = self.platform
        tool["spec-digest"] = self.spec_digest
        if self.min_driver:
            tool["min-driver"] = self.min_driver
        if self.venv_digest:
            tool["venv-digest"] = self.venv_digest
            if self.venv_python:
                tool["venv-python"] = self.venv_python
            if self.venv_install:
                tool["venv-install-digest"] = self.venv_install
        out += ["", "[tool.envlock]"] + [f"{k} = {_v(v)}" for k, v in tool.items()]
        if self.overridden:
            out += ["overridden = ["] + [f"    {_s(o)}," for o in self.overridden] + ["]"]
        if self.allowed_overlaps:
            out += ["allowed-overlaps = ["] + [
                f"    {{ path = {_s(o.path)}, packages = [{_s(o.packages[0])}, {_s(o.packages[1])}], "
                f"reason = {_s(o.reason)} }}," for o in self.allowed_overlaps] + ["]"]
        out += ["", "[tool.envlock.spec-keys]"]
        out += [f"{_s(k)} = {_s(v)}" for k, v in sorted(self.spec_keys.items())]
        if self.requires is not None:
            out += ["", "[tool.envlock.requires]"]
            out += [f"{_s(k)} = [{', '.join(map(_s, v))}]" for k, v in sorted(self.requires.items()) if v]
        if self.nightlies:
            out += ["", "[tool.envlock.nightlies]"]
            for name, pin in sorted(self.nightlies.items()):
                out.append(f"{_s(name)} = {{ date = {_s(pin.date)}, version = {_s(pin.version)} }}")
        for name, src in sorted(self.sources.items()):
            out += ["", f"[tool.envlock.sources.{_s(name)}]", f"{src.kind} = {_s(src.location)}"]
            if src.commit:
                out.append(f"commit = {_s(src.commit)}")
            if src.rev:
                out.append(f"rev = {_s(src.rev)}")
            if src.tree_digest:
                out.append(f"tree-digest = {_s(src.tree_digest)}")
            out.append("patches = [")
            out += [f"    {{ path = {_s(p.path)}, sha256 = {_s(p.sha256)} }}," for p in src.patches]
            out.append("]")
        for name, build in sorted(self.builds.items()):
            out += [
                "",
                f"[tool.envlock.builds.{_s(name)}]",
                f"input-digest = {_s(build.input_digest)}",
                f"wheel = {_s(build.wheel)}",
                f"sha256 = {_s(build.sha256)}",
            ]
            if build.requirements:
                out.append("build-requirements = [")
                out += [f"    {_s(r)}," for r in build.requirements]
                out.append("]")
            if build.toolchain:
                out.append("toolchain = [")
                out += [f"    {_s(r)}," for r in build.toolchain]
                out.append("]")
        for name, inputs in sorted(self.fetchcontent.items()):
            if inputs:
                out += ["", f"[tool.envlock.fetchcontent.{_s(name)}]"]
                out += [f"{toml_key('', dep)} = {pin.to_toml()}" for dep, pin in sorted(inputs.items())]
        if self.kernels:
            out += ["", "[tool.envlock.kernels]"]
            out += [f"{toml_key('', name)} = {k.to_toml()}" for name, k in sorted(self.kernels.items())]
        return "\n".join(out) + "\n"

    @classmethod
    def from_toml(cls, text: str, origin: Path | str) -> Lock:
        """The lock ``text`` (read from ``origin``) holds; ``LockError`` when it is no TOML or no lock."""
        return cls.from_dict(load_toml(text, origin, LockError), origin)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], origin: Path | str) -> Lock:
        """The lock ``doc`` holds; ``LockError`` naming ``origin``, the key, what was found and expected."""
        _check_lock_version(doc, origin)
        try:
            return _lock_from_dict(doc)
        except _BadKeyError as exc:
            raise LockError(f"{origin}: {exc}") from None


def _check_lock_version(doc: Mapping[str, Any], origin: Path | str) -> None:
    version = doc.get("lock-version")
    if version is None:  # every PEP 751 lock has one: this is some other TOML file
        if isinstance(doc.get("env"), dict):
            env = Path(str(origin).partition("@")[0]).stem.removeprefix("pylock.") or "NAME"  # PATH@REV: path first
            raise LockError(f"{origin}: not a PEP 751 lock (no lock-version); it has an [env] table, so it looks "
                            f"like an env spec: its lock is locks/pylock.{env}.toml")
        raise LockError(f"{origin}: not a PEP 751 lock (no lock-version); expected a pylock.*.toml file "
                        "written by `envlock lock`")
    m = _LOCK_VERSION.fullmatch(version) if isinstance(version, str) else None
    if m is None or int(m.group(1)) != _LOCK_MAJOR:
        found = repr(version) if isinstance(version, str) else f"{_found(version)} (not a string)"
        raise LockError(f"{origin}: lock-version: found {found}; expected \"{_LOCK_MAJOR}.x\" "
                        f"(PEP 751 lock format {_LOCK_MAJOR}, the one this envlock reads)")


class _BadKeyError(Exception):
    """A key of the lock that holds what envlock cannot read: where, what was found, what was expected."""

    def __init__(self, key: str, found: str, expected: str, package: str | None = None) -> None:
        super().__init__(key, found, expected)
        self.key, self.found, self.expected, self.package = key, found, expected, package

    def __str__(self) -> str:
        # packages[97] alone is hard to find in a lock of 158: name the package too.
        where = f"{self.key} (package {self.package!r})" if self.package else self.key
        return f"{where}: {self.found}; expected {self.expected}"


def toml_key(path: str, name: str) -> str:
    """``path.name``, the name quoted as TOML does when it is not a bare key (``spec-keys."packages.torch"``)."""
    bare = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _s(name)
    return f"{path}.{bare}" if path else bare


def _table(value: object, key: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _BadKeyError(key, "missing" if value is None else f"found {_found(value)}", "a table")
    return value


def _array(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise _BadKeyError(key, "missing" if value is None else f"found {_found(value)}", "an array")
    return value


def _str(table: Mapping[str, Any], name: str, path: str) -> str:
    value = table.get(name)
    if not isinstance(value, str):
        raise _BadKeyError(toml_key(path, name), "missing" if value is None else f"found {_found(value)}", "a string")
    return value


def _opt_str(table: Mapping[str, Any], name: str, path: str) -> str | None:
    return None if table.get(name) is None else _str(table, name, path)


def _strings(value: object, key: str) -> tuple[str, ...]:
    for i, item in enumerate(_array(value, key)):
        if not isinstance(item, str):
            raise _BadKeyError(f"{key}[{i}]", f"found {_found(item)}", "a string")
    return tuple(cast("list[str]", value))


def _lock_from_dict(doc: Mapping[str, Any]) -> Lock:
    tables = doc.get("tool")
    if not isinstance(tables, dict) or tables.get("envlock") is None:
        raise _BadKeyError("tool.envlock", "missing (a PEP 751 lock, not written by envlock)",
                       "the [tool.envlock] table `envlock lock` writes")
    tool = _table(tables["envlock"], "tool.envlock")
    if tool.get("format") != LOCK_FORMAT or isinstance(tool.get("format"), bool):  # true == 1 in Python
        given = tool.get("format")
        raise _BadKeyError("tool.envlock.format", "missing" if given is None else f"found {_found(given)}",
                       f"{LOCK_FORMAT} (a lock from another envlock version: regenerate it with `envlock lock`)")
    packages = tuple(_package(pkg, f"packages[{i}]") for i, pkg in enumerate(_array(doc.get("packages", []),
                                                                                        "packages")))
    first: dict[str, int] = {}
    for i, locked in enumerate(packages):
        if (j := first.setdefault(locked.name, i)) != i:  # which of the two would install? neither, here
            raise _BadKeyError(f"packages[{i}].name", f"found {locked.name!r} again (also packages[{j}])",
                               "one entry per package")
    where = "tool.envlock.sources"
    sources = {name: _source(_table(s, toml_key(where, name)), toml_key(where, name))
               for name, s in _table(tool.get("sources", {}), where).items()}
    nightlies = {}
    for name, value in _table(tool.get("nightlies", {}), "tool.envlock.nightlies").items():
        key = toml_key("tool.envlock.nightlies", name)
        pin = _table(value, key)
        nightlies[name] = NightlyPin(date=_str(pin, "date", key), version=_str(pin, "version", key))
    where = "tool.envlock.builds"
    builds = {name: _build(_table(v, toml_key(where, name)), toml_key(where, name))
              for name, v in _table(tool.get("builds", {}), where).items()}
    where = "tool.envlock.fetchcontent"
    fetchcontent = {name: _fetchcontent_inputs(_table(v, toml_key(where, name)), toml_key(where, name))
                    for name, v in _table(tool.get("fetchcontent", {}), where).items()}
    where = "tool.envlock.spec-keys"
    spec_keys = _table(tool.get("spec-keys", {}), where)
    python = _str(tool, "python", "tool.envlock")
    if not PYTHON_VERSION.fullmatch(python):
        raise _BadKeyError("tool.envlock.python", f"found {python!r}", 'a Python version like "3.12"')
    venv_digest = _opt_str(tool, "venv-digest", "tool.envlock")
    if venv_digest is not None and tool.get("venv-install-digest") is None:
        raise _BadKeyError("tool.envlock.venv-install-digest", "missing",
                           "the install digest of the packages venv-digest was taken for, beside it")
    return Lock(
        env=_str(tool, "env", "tool.envlock"),
        python=python,
        platform=_opt_str(tool, "platform", "tool.envlock"),
        spec_digest=_str(tool, "spec-digest", "tool.envlock"),
        spec_keys={name: _str(spec_keys, name, where) for name in spec_keys},
        packages=packages,
        requires_python=_opt_str(doc, "requires-python", ""),
        nightlies=nightlies,
        sources=sources,
        builds=builds,
        fetchcontent=fetchcontent,
        venv_digest=venv_digest,
        venv_python=_opt_str(tool, "venv-python", "tool.envlock"),
        venv_install=_opt_str(tool, "venv-install-digest", "tool.envlock"),
        overridden=_strings(tool.get("overridden", []), "tool.envlock.overridden"),
        allowed_overlaps=_allowed_overlaps(tool.get("allowed-overlaps", []), "tool.envlock.allowed-overlaps"),
        kernels={name: _kernels(v, toml_key("tool.envlock.kernels", name))
                 for name, v in _table(tool.get("kernels", {}), "tool.envlock.kernels").items()},
        min_driver=_opt_str(tool, "min-driver", "tool.envlock"),
        requires=_requires(tool.get("requires"), "tool.envlock.requires"),
    )


def _allowed_overlaps(value: object, key: str) -> tuple[AllowedOverlap, ...]:
    """``[tool.envlock] allowed-overlaps``: the spec's allowances, as ``overlaps.parse`` reads them."""
    problems: list[tuple[str, str]] = []
    found = overlaps.parse(_array(value, key), key, lambda where, why: problems.append((where, why)))
    if problems:
        raise _BadKeyError(problems[0][0], problems[0][1], "what `envlock lock` writes there")
    return found


def _kernels(value: object, key: str) -> LockedKernels:
    """One package's ``[tool.envlock.kernels]`` entry: sass and ptx arrays of names, cuda of majors."""
    table = _table(value, key)
    for extra in sorted(set(table) - {"sass", "ptx", "cuda"}):
        raise _BadKeyError(toml_key(key, extra), "found a key envlock does not write there", "only sass, ptx, cuda")
    cuda = _array(table.get("cuda", []), f"{key}.cuda")
    for i, major in enumerate(cuda):
        if not isinstance(major, int) or isinstance(major, bool):
            raise _BadKeyError(f"{key}.cuda[{i}]", f"found {_found(major)}", "a CUDA major version (13)")
    return LockedKernels(_strings(table.get("sass", []), f"{key}.sass"), _strings(table.get("ptx", []), f"{key}.ptx"),
                         tuple(cuda))


def reach(roots: Iterable[str], requires: Mapping[str, Sequence[str]]) -> set[str]:
    """Every package reached from ``roots`` along ``requires`` (``Lock.requires``), the roots included."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += requires.get(name, ())
    return seen


def _requires(value: object, key: str) -> dict[str, tuple[str, ...]] | None:
    """``[tool.envlock.requires]``: package name -> the package names it requires (None: no table)."""
    if value is None:
        return None
    out = {}
    for name, names in _table(value, key).items():
        where = toml_key(key, name)
        for i, item in enumerate((name, *_strings(names, where))):
            if canonicalize_name(item) != item or not PACKAGE_NAME.fullmatch(item):
                raise _BadKeyError(where if i == 0 else f"{where}[{i - 1}]", f"found {item!r}",
                                   'a normalized package name (PEP 751), like "flashinfer-python"')
        out[name] = tuple(names)
    return out


#: A Python version as a spec's ``env.python`` and a lock's ``python`` give it: a sync hands it
#: to ``uv python find``, so a lock can name no program (``tools/python``) nor an option there.
PYTHON_VERSION = re.compile(r"3\.\d{1,3}(\.\d{1,3})?")

#: PEP 508's package name (the spec checks its names with it too).
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
#: PEP 440's version, as the PEP's appendix spells it (every form it normalizes). Not
#: packaging's Version: reading a lock (every sync) does not import packaging.
_VERSION = re.compile(
    r"v?([0-9]+!)?[0-9]+(\.[0-9]+)*"
    r"([-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?"
    r"(-[0-9]+|[-_.]?(post|rev|r)[-_.]?[0-9]*)?"
    r"([-_.]?dev[-_.]?[0-9]*)?"
    r"(\+[a-z0-9]+([-_.][a-z0-9]+)*)?",
    re.IGNORECASE,
)


def _package(value: object, key: str) -> LockedPackage:
    pkg = _table(value, key)
    name = _str(pkg, "name", key)
    if not PACKAGE_NAME.fullmatch(name) or canonicalize_name(name) != name:
        raise _BadKeyError(f"{key}.name", f"found {name!r}",
                           "a normalized package name (PEP 751), like \"flashinfer-python\"")
    try:
        version = _str(pkg, "version", key)
        if not _VERSION.fullmatch(version):
            raise _BadKeyError(f"{key}.version", f"found {version!r}", "a version (PEP 440), like \"2.9.1\"")
        wheels = _array(pkg.get("wheels"), f"{key}.wheels")
        if not wheels:
            raise _BadKeyError(f"{key}.wheels", "found an empty array", "a wheel (envlock installs wheels only)")
        return LockedPackage(
            name=cast("NormalizedName", name),  # normalized: checked above
            version=version,
            wheels=tuple(_artifact(w, f"{key}.wheels[{j}]") for j, w in enumerate(wheels)),
            index=_opt_str(pkg, "index", key),
            yanked=_package_tool(pkg, key),
        )
    except _BadKeyError as exc:
        exc.package = name
        raise


def _package_tool(pkg: Mapping[str, Any], key: str) -> str | None:
    """``[packages.tool.envlock]``: ``yanked``, the reason (a string) its release was yanked at lock
    time, and nothing else (another tool's table beside it is its own)."""
    tool = pkg.get("tool")
    if tool is None:
        return None
    ours = _table(tool, f"{key}.tool").get("envlock")
    if ours is None:
        return None
    where = f"{key}.tool.envlock"
    for extra in sorted(set(_table(ours, where)) - {"yanked"}):
        raise _BadKeyError(toml_key(where, extra), "found a key envlock does not write there", "only yanked")
    return _opt_str(ours, "yanked", where)


def _artifact(value: object, key: str) -> Artifact:
    """One ``[[packages.wheels]]`` entry, refused when its hash or file name could steer a store path.

    Both name where the wheel is kept (``wheels/<sha256>/<file name>``), so a lock from
    a pull request or a hostile index page (``..%2F..%2Fx.whl``) must not reach outside it.
    """
    wheel = _table(value, key)
    hashes = _table(wheel.get("hashes"), f"{key}.hashes")
    if "sha256" not in hashes:
        found = f"missing, found only {', '.join(sorted(hashes))}" if hashes else "missing"
        raise _BadKeyError(f"{key}.hashes.sha256", found, "the wheel's sha256 (envlock locks every wheel by sha256)")
    sha256 = _str(hashes, "sha256", f"{key}.hashes")
    if not _SHA256.fullmatch(sha256):
        raise _BadKeyError(f"{key}.hashes.sha256", f"found {sha256!r}", "64 lowercase hex digits")
    url, path = _opt_str(wheel, "url", key), _opt_str(wheel, "path", key)
    if url is None and path is None:
        raise _BadKeyError(key, "found neither url nor path", "one of them")
    size = wheel.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise _BadKeyError(f"{key}.size", f"found {_found(size)}", "a byte count")
    art = Artifact(sha256=sha256, url=url, path=path, size=size)
    where = f"{key}.url" if url is not None else f"{key}.path"
    try:
        problem = art.filename_problem()
    except ValueError:  # urlsplit: "https://[x?y" is no URL
        raise _BadKeyError(where, f"found {url!r}", "a URL") from None
    if problem:
        raise _BadKeyError(where, f"found {url or path!r}, which names the file {art.filename!r}",
                       "a plain *.whl file name")
    if path is not None and not is_lock_wheel_path(path):
        raise _BadKeyError(where, f"found {path!r}, which leaves the workspace",
                           "a path from the lock's folder (locks/) to a wheel inside the workspace, as "
                           "`envlock build` writes it (../wheelhouse/FILE.whl)")
    return art


def is_lock_wheel_path(value: str) -> bool:
    """Whether a lock's wheel ``path`` stays in the workspace: relative to the lock's folder, ``locks/``,
    it may climb out of that folder once (``../wheelhouse/…``), and nowhere after."""
    parts = PurePosixPath(value).parts
    return not PurePosixPath(value).is_absolute() and ".." not in parts[1 if parts[:1] == ("..",) else 0:]


def is_workspace_path(value: str) -> bool:
    """Whether ``value`` is a relative path that stays inside the workspace (no ``..``, not absolute)."""
    pure = PurePosixPath(value)
    return bool(value.strip()) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in value


def _workspace_path(table: Mapping[str, Any], name: str, key: str) -> str:
    # The lock names files the sync and `lock --check` read and hash: never outside the workspace.
    value = _str(table, name, key)
    if not is_workspace_path(value):
        raise _BadKeyError(toml_key(key, name), f"found {value!r}", "a relative path inside the workspace")
    return value


def _source(src: Mapping[str, Any], key: str) -> LockedSource:
    kind = "git" if "git" in src else "path"
    if kind not in src:
        raise _BadKeyError(key, "found neither git nor path", "one of them")
    patches = []
    for i, value in enumerate(_array(src.get("patches", []), f"{key}.patches")):
        patch = _table(value, f"{key}.patches[{i}]")
        patches.append(LockedPatch(_workspace_path(patch, "path", f"{key}.patches[{i}]"),
                                   _str(patch, "sha256", f"{key}.patches[{i}]")))
    return LockedSource(
        kind=kind,
        location=_str(src, kind, key) if kind == "git" else _workspace_path(src, kind, key),
        commit=_opt_str(src, "commit", key),
        rev=_opt_str(src, "rev", key),
        tree_digest=_opt_str(src, "tree-digest", key),
        patches=tuple(patches),
    )


def _build(build: Mapping[str, Any], key: str) -> LockedBuild:
    return LockedBuild(
        input_digest=_str(build, "input-digest", key),
        wheel=_str(build, "wheel", key),
        sha256=_str(build, "sha256", key),
        requirements=_strings(build.get("build-requirements", []), f"{key}.build-requirements"),
        toolchain=_strings(build.get("toolchain", []), f"{key}.toolchain"),
    )


_COMMIT = re.compile(r"[0-9a-f]{40}")
_GIT_PIN_KEYS = ("git", "commit", "rev")
_ARCHIVE_PIN_KEYS = ("url", "sha256")


def _fetchcontent_inputs(table: Mapping[str, Any], key: str) -> dict[str, LockedFetchContent]:
    """One build's ``[tool.envlock.fetchcontent.BUILD]``: each input's pin, its keys exactly these."""
    out = {}
    for name, value in table.items():
        where = toml_key(key, name)
        pin = _table(value, where)
        allowed = _GIT_PIN_KEYS if "git" in pin else _ARCHIVE_PIN_KEYS
        if "git" in pin and "url" in pin:
            raise _BadKeyError(where, "found both git and url", "one of them")
        if "git" not in pin and "url" not in pin:
            raise _BadKeyError(where, "found neither git nor url", "one of them")
        for extra in sorted(set(pin) - set(allowed)):
            raise _BadKeyError(toml_key(where, extra), "found a key envlock does not write there",
                               f"only {', '.join(allowed)} ({'a git' if 'git' in pin else 'an archive'} input)")
        if "git" in pin:
            commit = _str(pin, "commit", where)
            if not _COMMIT.fullmatch(commit):
                raise _BadKeyError(toml_key(where, "commit"), f"found {commit!r}", "a full 40-hex commit")
            out[name] = LockedFetchContent(git=_str(pin, "git", where), commit=commit, rev=_opt_str(pin, "rev", where))
        else:
            sha256 = _str(pin, "sha256", where)
            if not _SHA256.fullmatch(sha256):
                raise _BadKeyError(toml_key(where, "sha256"), f"found {sha256!r}", "64 lowercase hex digits")
            out[name] = LockedFetchContent(url=_str(pin, "url", where), sha256=sha256)
    return out


#: Far above any real lock (the 158-package qwen35-blackwell lock is ~100 kB): a bigger file is
#: no lock, and ``--lock /dev/zero`` must not read until memory runs out.
MAX_LOCK_BYTES = 64 << 20


def read_lock_bytes(path: Path) -> bytes:
    """A lock file's bytes: ``OSError`` as reading raises it, ``LockError`` past ``MAX_LOCK_BYTES``.
    Not only regular files: ``--lock <(git show REV:FILE)`` is a pipe."""
    with path.open("rb") as fh:
        data = fh.read(MAX_LOCK_BYTES + 1)
    if len(data) > MAX_LOCK_BYTES:
        raise LockError(f"{path}: larger than {MAX_LOCK_BYTES >> 20} MiB; not a lock file")
    return data


def read_lock(path: Path) -> Lock:
    """Load a lock file; ``LockError`` (exit 2) when it is missing or malformed."""
    try:
        text = read_lock_bytes(path).decode("utf-8")
    except FileNotFoundError:
        env = path.name.removeprefix("pylock.").removesuffix(".toml") if path.name.startswith("pylock.") else "ENV"
        raise LockError(f"{path}: no lock file; create it with `envlock lock {env}`") from None
    except UnicodeDecodeError as exc:
        raise LockError(f"{path}: not UTF-8 text (byte {exc.start}); not a lock file") from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock ({exc.strerror})") from None
    return Lock.from_toml(text, path)


@dataclass(frozen=True)
class LockFile:
    """A lock file as read once: its bytes (None if missing or unreadable) and their text (None if
    not UTF-8), for a read-modify-write that must not undo another envlock's (``store.replace_if_unchanged``).

    The text is the bytes decoded as they are (no newline translation), so it encodes back to
    exactly the bytes the compare-and-replace compares with.
    """

    path: Path
    data: bytes | None
    text: str | None

    @classmethod
    def read(cls, path: Path) -> LockFile:
        try:
            data = read_lock_bytes(path)
        except OSError:
            return cls(path, None, None)
        try:
            return cls(path, data, data.decode("utf-8"))
        except UnicodeDecodeError:
            return cls(path, data, None)

    @property
    def lock(self) -> Lock | None:
        """The lock it holds; None when there is none, or what is there does not read as one."""
        if self.text is None:
            return None
        try:
            return Lock.from_toml(self.text, self.path)
        except LockError:
            return None


def _s(value: str) -> str:
    """``value`` as a TOML basic string. JSON's escapes are a subset of TOML's, and JSON escapes
    every control character TOML requires escaped but DEL (U+007F, TOML 1.0 "Basic strings"),
    which a spec takes in a git URL: escaped here, or the lock would not read back."""
    import json

    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _v(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _s(str(value))


def _wheel_table(wheel: Artifact) -> str:
    fields: list[str] = []
    if wheel.url is not None:
        fields.append(f"url = {_s(wheel.url)}")
    if wheel.path is not None:
        fields.append(f"path = {_s(wheel.path)}")
    if wheel.size is not None:
        fields.append(f"size = {wheel.size}")
    fields.append(f"hashes = {{ sha256 = {_s(wheel.sha256)} }}")
    return "{ " + ", ".join(fields) + " }"

