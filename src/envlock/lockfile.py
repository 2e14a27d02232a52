"""Read and write ``locks/pylock.NAME.toml``: PEP 751 plus envlock's ``[tool.envlock]``.

The writer is envlock's own so the bytes are a pure function of the data: same
spec + same index contents => byte-identical lock. The reader accepts what the
writer writes (and validates it with ``packaging.pylock``).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

from envlock.errors import LockError

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
    venv_digest: str | None = None
    # The interpreter the venv digest was taken with ("3.11.7"): a venv holds its interpreter's
    # version (pyvenv.cfg), so a digest is comparable only between equal interpreters.
    venv_python: str | None = None

    def package(self, name: str) -> LockedPackage | None:
        wanted = canonicalize_name(name)
        return next((p for p in self.packages if p.name == wanted), None)

    def install_digest(self) -> str:
        """Digest of what gets installed (python, platform, every wheel's sha256).

        Venvs are keyed by it in the store; it leaves out the venv digest so that
        recording the digest does not change the key.
        """
        parts = [f"python={self.python}", f"platform={self.platform or ''}"]
        parts += [
            f"{p.name}=={p.version} " + ",".join(w.sha256 for w in p.wheels) for p in self.packages
        ]
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def with_venv_digest(self, digest: str | None, python: str | None = None) -> Lock:
        return replace(self, venv_digest=digest, venv_python=python if digest else None)

    def venv_digest_for(self, python: str | None) -> str | None:
        """The recorded venv digest if it applies to a venv built with ``python`` (else None)."""
        if self.venv_python is not None and python is not None and python != self.venv_python:
            return None
        return self.venv_digest

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
        tool: dict[str, Any] = {
            "format": LOCK_FORMAT,
            "env": self.env,
            "python": self.python,
        }
        if self.platform:
            tool["platform"] = self.platform
        tool["spec-digest"] = self.spec_digest
        if self.venv_digest:
            tool["venv-digest"] = self.venv_digest
            if self.venv_python:
                tool["venv-python"] = self.venv_python
        out += ["", "[tool.envlock]"] + [f"{k} = {_v(v)}" for k, v in tool.items()]
        out += ["", "[tool.envlock.spec-keys]"]
        out += [f"{_s(k)} = {_s(v)}" for k, v in sorted(self.spec_keys.items())]
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
        return "\n".join(out) + "\n"

    @classmethod
    def from_toml(cls, text: str, origin: Path | str) -> Lock:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise LockError(f"{origin}: not valid TOML: {exc}") from None
        return cls.from_dict(doc, origin)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], origin: Path | str) -> Lock:
        _check_lock_version(doc.get("lock-version"), origin)
        try:
            return _lock_from_dict(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a table where a value belongs
            raise LockError(
                f"{origin}: not an envlock lock ({exc}); regenerate it with `envlock lock`"
            ) from None


def _check_lock_version(version: object, origin: Path | str) -> None:
    if version is None:
        return
    m = _LOCK_VERSION.fullmatch(version) if isinstance(version, str) else None
    if m is None or int(m.group(1)) != _LOCK_MAJOR:
        found = repr(version) if isinstance(version, str) else f"{version!r} (not a string)"
        raise LockError(f"{origin}: lock-version: found {found}; expected \"{_LOCK_MAJOR}.x\" "
                        f"(PEP 751 lock format {_LOCK_MAJOR}, the one this envlock reads)")


def _lock_from_dict(doc: Mapping[str, Any]) -> Lock:
    tool = doc["tool"]["envlock"]
    if tool.get("format") != LOCK_FORMAT:
        raise ValueError(f"tool.envlock.format is {tool.get('format')!r}, expected {LOCK_FORMAT}")
    packages = []
    for pkg in doc.get("packages", []):
        wheels = tuple(_artifact(pkg["name"], w) for w in pkg.get("wheels", []))
        if not wheels:
            raise ValueError(f"package {pkg['name']!r} has no wheel")
        packages.append(
            LockedPackage(
                name=canonicalize_name(pkg["name"]),
                version=str(pkg["version"]),
                wheels=wheels,
                index=pkg.get("index"),
            )
        )
    sources = {
        name: LockedSource(
            kind="git" if "git" in s else "path",
            location=str(s.get("git", s.get("path"))),
            commit=s.get("commit"),
            rev=s.get("rev"),
            tree_digest=s.get("tree-digest"),
            patches=tuple(LockedPatch(p["path"], p["sha256"]) for p in s.get("patches", [])),
        )
        for name, s in tool.get("sources", {}).items()
    }
    return Lock(
        env=str(tool["env"]),
        python=str(tool["python"]),
        platform=tool.get("platform"),
        spec_digest=str(tool["spec-digest"]),
        spec_keys=dict(tool.get("spec-keys", {})),
        packages=tuple(packages),
        requires_python=doc.get("requires-python"),
        nightlies={
            k: NightlyPin(date=v["date"], version=v["version"])
            for k, v in tool.get("nightlies", {}).items()
        },
        sources=sources,
        builds={
            k: LockedBuild(
                input_digest=v["input-digest"],
                wheel=v["wheel"],
                sha256=v["sha256"],
                requirements=tuple(v.get("build-requirements", ())),
            )
            for k, v in tool.get("builds", {}).items()
        },
        venv_digest=tool.get("venv-digest"),
        venv_python=tool.get("venv-python"),
    )


def _artifact(package: str, wheel: Mapping[str, Any]) -> Artifact:
    """One ``[[packages.wheels]]`` entry, refused when its hash or file name could steer a store path.

    Both name where the wheel is kept (``wheels/<sha256>/<file name>``), so a lock from
    a pull request or a hostile index page (``..%2F..%2Fx.whl``) must not reach outside it.
    """
    art = Artifact(sha256=str(wheel["hashes"]["sha256"]), url=wheel.get("url"), path=wheel.get("path"),
                   size=wheel.get("size"))
    if not _SHA256.fullmatch(art.sha256):
        raise ValueError(f"package {package!r}: wheel sha256 {art.sha256!r} is not 64 lowercase hex digits")
    if art.url is None and art.path is None:
        raise ValueError(f"package {package!r}: a wheel has neither url nor path")
    if art.size is not None and (not isinstance(art.size, int) or isinstance(art.size, bool) or art.size < 0):
        raise ValueError(f"package {package!r}: wheel size {art.size!r} is not a byte count")
    if problem := art.filename_problem():
        raise ValueError(f"package {package!r}: wheel {problem}")
    return art


def read_lock(path: Path) -> Lock:
    """Load a lock file; ``LockError`` (exit 2) when it is missing or malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"{path}: no lock file; create it with `envlock lock`") from None
    except UnicodeDecodeError as exc:
        raise LockError(f"{path}: not UTF-8 text (byte {exc.start}); not a lock file") from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock ({exc.strerror})") from None
    return Lock.from_toml(text, path)


def _s(value: str) -> str:
    # JSON string escapes are a subset of TOML basic-string escapes.
    import json

    return json.dumps(value, ensure_ascii=False)


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

