"""Read and write ``locks/pylock.NAME.toml``: PEP 751 plus envlock's ``[tool.envlock]``.

The writer is envlock's own so the bytes are a pure function of the data: same
spec + same index contents => byte-identical lock. The reader accepts what the
writer writes (tests validate that with ``packaging.pylock``) and refuses anything
else naming the key path, what it found and what it expected (``BadKeyError``).

``Lock`` is the whole file; its entries (a package and its wheels, a source, a build, ...)
are defined with their own reading and writing in ``model.locktables`` and named here too:
a lock's values are imported from this module.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from envlock.errors import LockError
from envlock.errors import found as _found
from envlock.model.locktables import (
    PYTHON_VERSION,
    BadKeyError,
    allowed_overlaps_entry,
    package_entry,
    read_array,
    read_opt_str,
    read_str,
    read_strings,
    read_table,
    requires_table,
)

# The entries of a lock, named here too (``X as X``: an explicit re-export).
from envlock.model.locktables import Artifact as Artifact
from envlock.model.locktables import LockedPackage as LockedPackage
from envlock.model.locktables import canonicalize_name as canonicalize_name
from envlock.model.tomlio import load_toml, toml_key, toml_string, toml_value

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any, Protocol

    # Named here too, loaded on first use (``__getattr__``): the entries of what the env builds.
    from envlock.model.lockbuilds import LockedBuild as LockedBuild
    from envlock.model.lockbuilds import LockedFetchContent as LockedFetchContent
    from envlock.model.lockbuilds import LockedKernels as LockedKernels
    from envlock.model.lockbuilds import LockedPatch as LockedPatch
    from envlock.model.lockbuilds import LockedSource as LockedSource
    from envlock.model.lockbuilds import NightlyPin as NightlyPin
    from envlock.model.multilock import Multi
    from envlock.model.overlaps import AllowedOverlap

    class LockDocs(Protocol):
        """Where ``read_lock`` keeps a lock's TOML document (as JSON) by the sha256 of its bytes, to read
        the same bytes again without TOML (``store.lockdocs``)."""

        def get(self, sha256: str) -> bytes | None: ...

        def put(self, sha256: str, doc: bytes) -> None: ...

LOCK_FORMAT = 1
# PEP 751's lock-version: MAJOR.MINOR. A reader must refuse a major version it does not
# support; a newer minor only adds keys, which this reader ignores.
_LOCK_VERSION = re.compile(r"(\d+)\.(\d+)")
_LOCK_MAJOR = 1


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
    # wheels' Requires-Dist (``resolution.guards.recorded_requires``): the graph ``lock --check`` holds every
    # package to, from the spec's roots. None: a lock written before envlock recorded it.
    requires: Mapping[str, tuple[str, ...]] | None = None
    # Read out of a lock of several targets (``model.multilock``): this target's name and the others', so
    # that writing this lock writes the whole file. None: a one-target lock.
    multi: Multi | None = field(default=None, compare=False, repr=False)

    @property
    def target(self) -> str | None:
        """The target of a multi-target lock this lock is (None: a one-target lock)."""
        return self.multi.name if self.multi is not None else None

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
        """The file's text: this lock's, or with the other targets' of a multi-target file."""
        return self._text

    @functools.cached_property
    def _text(self) -> str:
        # Made once per lock (a frozen value): a sync compares it with the file more than once.
        text = self.target_toml()
        if self.multi is None:
            return text
        assert self.platform is not None
        return self.multi.render(self.platform, self.python, text)

    def target_toml(self) -> str:
        """This lock's text as a one-target lock (what ``model.multilock.merge`` merges)."""
        out = ['lock-version = "1.0"', f"created-by = {toml_string('envlock')}"]
        if self.requires_python:
            out.append(f"requires-python = {toml_string(self.requires_python)}")
        if not self.packages:
            out.append("packages = []")  # PEP 751: the key is required even when empty
        for pkg in self.packages:
            out += pkg.toml_lines()
        out += self._tool_lines()
        for name, src in sorted(self.sources.items()):
            out += src.toml_lines(name)
        for name, build in sorted(self.builds.items()):
            out += build.toml_lines(name)
        for name, inputs in sorted(self.fetchcontent.items()):
            if inputs:
                out += ["", f"[tool.envlock.fetchcontent.{toml_string(name)}]"]
                out += [f"{toml_key('', dep)} = {pin.to_toml()}" for dep, pin in sorted(inputs.items())]
        if self.kernels:
            out += ["", "[tool.envlock.kernels]"]
            out += [f"{toml_key('', name)} = {k.to_toml()}" for name, k in sorted(self.kernels.items())]
        return "\n".join(out) + "\n"

    def _tool_lines(self) -> list[str]:
        """``[tool.envlock]`` and its tables of the whole lock: spec keys, requires, nightly pins."""
        tool: dict[str, Any] = {"format": LOCK_FORMAT, "env": self.env, "python": self.python}
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
        out = ["", "[tool.envlock]"] + [f"{k} = {toml_value(v)}" for k, v in tool.items()]
        if self.overridden:
            out += ["overridden = ["] + [f"    {toml_string(o)}," for o in self.overridden] + ["]"]
        if self.allowed_overlaps:
            out += ["allowed-overlaps = ["] + [
                f"    {{ path = {toml_string(o.path)}, packages = [{toml_string(o.packages[0])}, "
                f"{toml_string(o.packages[1])}], reason = {toml_string(o.reason)} }}," for o in self.allowed_overlaps
            ] + ["]"]
        out += ["", "[tool.envlock.spec-keys]"]
        out += [f"{toml_string(k)} = {toml_string(v)}" for k, v in sorted(self.spec_keys.items())]
        if self.requires is not None:
            out += ["", "[tool.envlock.requires]"]
            out += [f"{toml_string(k)} = [{', '.join(map(toml_string, v))}]"
                    for k, v in sorted(self.requires.items()) if v]
        if self.nightlies:
            out += ["", "[tool.envlock.nightlies]"]
            for name, pin in sorted(self.nightlies.items()):
                out.append(f"{toml_string(name)} = {{ date = {toml_string(pin.date)}, "
                           f"version = {toml_string(pin.version)} }}")
        return out

    @classmethod
    def from_toml(cls, text: str, origin: Path | str, target: str | None = None, *, whole: bool = False) -> Lock:
        """The lock ``text`` (read from ``origin``) holds; ``LockError`` when it is no TOML or no lock.
        ``target``: of a lock of several targets, the one to read (None: this machine's; ``whole``: else the
        first, for a command on the whole file, ``targets.pick``)."""
        return cls.from_dict(load_toml(text, origin, LockError), origin, target, whole=whole)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], origin: Path | str, target: str | None = None, *,
                  whole: bool = False) -> Lock:
        """The lock ``doc`` holds; ``LockError`` naming ``origin``, the key, what was found and expected.
        A lock of several targets gives the one ``target`` names (None: the one this machine runs; ``whole``:
        else the first). A ``target`` (a user's ``--target``) named for a one-target lock is an error, it has
        none; with ``whole`` (a target the spec names, of a file the spec has moved past) the lock is read."""
        _check_lock_version(doc, origin)
        try:
            if is_multi(doc):
                from envlock.model.multilock import platforms  # only a lock of several targets
                from envlock.model.targets import pick  # packaging's parsers: only a lock of several targets

                return _targets_from_dict(doc)[pick(platforms(doc), target, str(origin), whole=whole)]
            lock = _lock_from_dict(doc)
            if target is not None and not whole:
                from envlock.model.targets import no_targets

                raise no_targets(str(origin), target, lock.platform)
            return lock
        except BadKeyError as exc:
            raise LockError(f"{origin}: {exc}") from None

    @classmethod
    def every_target(cls, text: str, origin: Path | str) -> Lock:
        """The lock ``text`` holds, with every target's packages, builds, sources and FetchContent pins
        (what a store's gc keeps alive: an aarch64 target's wheels too, on an x86_64 machine)."""
        doc = load_toml(text, origin, LockError)
        targets = cls.targets_of(doc, origin)
        if not targets:
            return cls.from_dict(doc, origin)
        locks = list(targets.values())
        packages = {(p.name, p.version, tuple(w.sha256 for w in p.wheels)): p for lock in locks for p in lock.packages}
        # A build of each target: its own inputs and wheel (named "NAME TARGET" here, to keep them all).
        return replace(locks[0], packages=tuple(packages.values()), multi=None,
                       builds={f"{n} {t}": b for t, lock in targets.items() for n, b in lock.builds.items()},
                       sources={f"{n} {t}": s for t, lock in targets.items() for n, s in lock.sources.items()},
                       fetchcontent={f"{n} {t}": f for t, lock in targets.items()
                                     for n, f in lock.fetchcontent.items()})

    @classmethod
    def targets_of(cls, doc: Mapping[str, Any], origin: Path | str) -> dict[str, Lock]:
        """Every target's lock of ``doc`` (name -> lock; {} for a one-target lock)."""
        _check_lock_version(doc, origin)
        if not is_multi(doc):
            return {}
        try:
            return _targets_from_dict(doc)
        except BadKeyError as exc:
            raise LockError(f"{origin}: {exc}") from None


def _targets_from_dict(doc: Mapping[str, Any]) -> dict[str, Lock]:
    """Each target's lock of the multi-target ``doc``, each carrying the others' (to write the file again)."""
    from envlock.model.multilock import Multi, TargetText, platforms, split  # only a lock of several targets

    locks = {}
    for other in sorted(platforms(doc)):
        try:
            locks[other] = _lock_from_dict(split(doc, other))
        except BadKeyError as exc:  # said at the key of the file, not of the target's part of it
            key = exc.key.replace("tool.envlock", f"tool.envlock.targets.{other}", 1)
            raise BadKeyError(key if key != exc.key else f"{exc.key} (target {other})", exc.found, exc.expected,
                              exc.package) from None
    texts = {n: TargetText(lock.platform or "", lock.python, lock.target_toml()) for n, lock in locks.items()}
    return {name: replace(lock, multi=Multi(name, lock.env, {n: t for n, t in texts.items() if n != name}))
            for name, lock in locks.items()}


def is_multi(doc: Mapping[str, Any]) -> bool:
    """Whether ``doc`` (a lock read) holds several targets (``model.multilock``)."""
    tool = doc.get("tool")
    envlock = tool.get("envlock") if isinstance(tool, dict) else None
    return isinstance(envlock, dict) and isinstance(envlock.get("targets"), dict)


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


def _lock_from_dict(doc: Mapping[str, Any]) -> Lock:
    tables = doc.get("tool")
    if not isinstance(tables, dict) or tables.get("envlock") is None:
        raise BadKeyError("tool.envlock", "missing (a PEP 751 lock, not written by envlock)",
                          "the [tool.envlock] table `envlock lock` writes")
    tool = read_table(tables["envlock"], "tool.envlock")
    if tool.get("format") != LOCK_FORMAT or isinstance(tool.get("format"), bool):  # true == 1 in Python
        given = tool.get("format")
        raise BadKeyError("tool.envlock.format", "missing" if given is None else f"found {_found(given)}",
                          f"{LOCK_FORMAT} (a lock from another envlock version: regenerate it with `envlock lock`)")
    packages = tuple(package_entry(pkg, f"packages[{i}]")
                     for i, pkg in enumerate(read_array(doc.get("packages", []), "packages")))
    first: dict[str, int] = {}
    for i, locked in enumerate(packages):
        if (j := first.setdefault(locked.name, i)) != i:  # which of the two would install? neither, here
            raise BadKeyError(f"packages[{i}].name", f"found {locked.name!r} again (also packages[{j}])",
                              "one entry per package")
    sources, nightlies, builds, fetchcontent = _built_tables(tool)
    where = "tool.envlock.spec-keys"
    spec_keys = read_table(tool.get("spec-keys", {}), where)
    python = read_str(tool, "python", "tool.envlock")
    if not PYTHON_VERSION.fullmatch(python):
        raise BadKeyError("tool.envlock.python", f"found {python!r}", 'a Python version like "3.12"')
    venv_digest = read_opt_str(tool, "venv-digest", "tool.envlock")
    if venv_digest is not None and tool.get("venv-install-digest") is None:
        raise BadKeyError("tool.envlock.venv-install-digest", "missing",
                          "the install digest of the packages venv-digest was taken for, beside it")
    return Lock(
        env=read_str(tool, "env", "tool.envlock"),
        python=python,
        platform=read_opt_str(tool, "platform", "tool.envlock"),
        spec_digest=read_str(tool, "spec-digest", "tool.envlock"),
        spec_keys={name: read_str(spec_keys, name, where) for name in spec_keys},
        packages=packages,
        requires_python=read_opt_str(doc, "requires-python", ""),
        nightlies=nightlies,
        sources=sources,
        builds=builds,
        fetchcontent=fetchcontent,
        venv_digest=venv_digest,
        venv_python=read_opt_str(tool, "venv-python", "tool.envlock"),
        venv_install=read_opt_str(tool, "venv-install-digest", "tool.envlock"),
        overridden=read_strings(tool.get("overridden", []), "tool.envlock.overridden"),
        allowed_overlaps=allowed_overlaps_entry(tool.get("allowed-overlaps", []), "tool.envlock.allowed-overlaps"),
        kernels=_kernels_table(tool),
        min_driver=read_opt_str(tool, "min-driver", "tool.envlock"),
        requires=requires_table(tool.get("requires"), "tool.envlock.requires"),
    )


def _built_tables(tool: Mapping[str, Any]) -> tuple[dict[str, LockedSource], dict[str, NightlyPin],
                                                     dict[str, LockedBuild], dict[str, dict[str, LockedFetchContent]]]:
    """``[tool.envlock]``'s sources, nightly pins, builds and FetchContent pins, read in this order. Their
    module (``model.lockbuilds``: six classes, ~3 ms) is imported only for a lock that has one of them."""
    if not {"sources", "nightlies", "builds", "fetchcontent"}.intersection(tool):
        return {}, {}, {}, {}
    from envlock.model.lockbuilds import NightlyPin, build_entry, fetchcontent_entries, source_entry

    where = "tool.envlock.sources"
    sources = {name: source_entry(read_table(s, toml_key(where, name)), toml_key(where, name))
               for name, s in read_table(tool.get("sources", {}), where).items()}
    nightlies = {}
    for name, value in read_table(tool.get("nightlies", {}), "tool.envlock.nightlies").items():
        key = toml_key("tool.envlock.nightlies", name)
        pin = read_table(value, key)
        nightlies[name] = NightlyPin(date=read_str(pin, "date", key), version=read_str(pin, "version", key))
    where = "tool.envlock.builds"
    builds = {name: build_entry(read_table(v, toml_key(where, name)), toml_key(where, name))
              for name, v in read_table(tool.get("builds", {}), where).items()}
    where = "tool.envlock.fetchcontent"
    fetchcontent = {name: fetchcontent_entries(read_table(v, toml_key(where, name)), toml_key(where, name))
                    for name, v in read_table(tool.get("fetchcontent", {}), where).items()}
    return sources, nightlies, builds, fetchcontent


def _kernels_table(tool: Mapping[str, Any]) -> dict[str, LockedKernels]:
    """``[tool.envlock.kernels]`` (``model.lockbuilds`` imported only for a lock that has it)."""
    if "kernels" not in tool:
        return {}
    from envlock.model.lockbuilds import kernels_entry

    return {name: kernels_entry(v, toml_key("tool.envlock.kernels", name))
            for name, v in read_table(tool["kernels"], "tool.envlock.kernels").items()}


#: The entries of ``model.lockbuilds`` this module names too, loaded when first asked (``__getattr__``).
_BUILT_ENTRIES = frozenset({"NightlyPin", "LockedPatch", "LockedSource", "LockedBuild", "LockedFetchContent",
                            "LockedKernels"})


def __getattr__(name: str) -> object:
    """``from envlock.model.lockfile import LockedBuild`` (and the other entries of what the env builds): a
    lock's values are imported from this module, these from ``model.lockbuilds`` when first asked (PEP 562)."""
    if name in _BUILT_ENTRIES:
        from envlock.model import lockbuilds

        return getattr(lockbuilds, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reach(roots: Iterable[str], requires: Mapping[str, Iterable[str]]) -> set[str]:
    """Every package reached from ``roots`` along ``requires`` (``Lock.requires``), the roots included."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += requires.get(name, ())
    return seen


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


def read_lock(path: Path, target: str | None = None, *, whole: bool = False, docs: LockDocs | None = None) -> Lock:
    """Load a lock file; ``LockError`` (exit 2) when it is missing or malformed. ``target``: of a lock
    of several targets, the one to read (None: the one this machine runs; ``whole``: else the first).
    ``docs``: where its document may be kept and found again (``_from_docs``)."""
    try:
        text = read_lock_bytes(path).decode("utf-8")
    except FileNotFoundError:
        env = path.name.removeprefix("pylock.").removesuffix(".toml") if path.name.startswith("pylock.") else "ENV"
        raise LockError(f"{path}: no lock file; create it with `envlock lock {env}`") from None
    except UnicodeDecodeError as exc:
        raise LockError(f"{path}: not UTF-8 text (byte {exc.start}); not a lock file") from None
    except OSError as exc:
        raise LockError(f"{path}: cannot read the lock ({exc.strerror})") from None
    if docs is not None and (target is None or whole):
        return _from_docs(text, path, docs, whole=whole)
    return Lock.from_toml(text, path, target, whole=whole)


def _from_docs(text: str, origin: Path, docs: LockDocs, *, whole: bool) -> Lock:
    """``Lock.from_toml(text, origin, whole=whole)``, the TOML read once per bytes: the document ``docs``
    kept for them is taken when the lock read from it (checked as every lock is) writes exactly ``text``
    back. Envlock's writer is deterministic and reads back what it writes, so that lock is the one the
    TOML holds; any other document (edited, torn, of other bytes) is ignored. A one-target lock that
    its writer wrote is kept so, after the TOML is read (a lock edited by hand, of several targets,
    or holding a TOML date is not)."""
    sha = hashlib.sha256(text.encode()).hexdigest()
    if (kept := docs.get(sha)) is not None:
        try:
            doc = json.loads(kept)
            if isinstance(doc, dict) and not is_multi(doc) and (lock := Lock.from_dict(doc, origin)).to_toml() == text:
                return lock
        except (ValueError, RecursionError, LockError):
            pass  # not a document of this lock: the TOML is read
    doc = load_toml(text, origin, LockError)
    lock = Lock.from_dict(doc, origin, whole=whole)
    if not is_multi(doc) and lock.to_toml() == text:
        with contextlib.suppress(TypeError, ValueError):  # a date (not JSON): never so written
            docs.put(sha, json.dumps(doc, ensure_ascii=False).encode())
    return lock


@dataclass(frozen=True)
class LockFile:
    """A lock file as read once: its bytes (None if missing or unreadable) and their text (None if
    not UTF-8), for a read-modify-write that must not undo another envlock's (``store.store.replace_if_unchanged``).

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
        return self.lock_of()

    def lock_of(self, target: str | None = None, *, whole: bool = False) -> Lock | None:
        """The lock it holds (``target``, ``whole``: as ``Lock.from_toml``); None when there is none, or
        what is there does not read as one, or has no such target."""
        if self.text is None:
            return None
        try:
            return Lock.from_toml(self.text, self.path, target, whole=whole)
        except LockError:
            return None
