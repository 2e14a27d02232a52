"""Where a command reads the spec's indexes and sources from: one ``Mirrors`` value.

A cluster with no route to download.pytorch.org or GitHub reads those from a mirror: an
index named by spec index (``--index NAME=URL`` over ``ENVLOCK_INDEX_<NAME>=URL``), a git
repository by source or FetchContent name (``--source NAME=URL`` over
``ENVLOCK_SOURCE_<NAME>=URL``). A mirror changes where bytes come from, never what they are:
the lock keeps the spec's URLs and every wheel's sha256 and every commit are checked. The
value is built once per command from the spec, the options and the environment, and
carries what follows from it: which URL each index is read at, which mirror each locked
package is downloaded from, the hint to give when a host cannot be reached, and the note
on ``ENVLOCK_INDEX_*`` variables that name no index.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from envlock.errors import (
    EnvlockError,
    FetchError,
    PackageIndexError,
    SourceError,
    SpecError,
    UsageError,
    raise_all,
    redact,
)
from envlock.urlcheck import git_url_problem, is_index_url, shown, unsafe_char
from envlock.workspace import Workspace, env_var_suffix

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # Read where a spec is read: packaging's requirement parser (~30 ms) is not for a `sync --lock`.
    from envlock.model.spec import EnvSpec

if TYPE_CHECKING:

    from envlock.model.lockfile import Artifact, Lock, LockedPackage
    from envlock.net.indexes import Listings

# envlock.net.http and envlock.net.indexes (socket, ssl, http.client) are imported where a URL is read:
# most syncs read none (docs/architecture.md, "Lazy imports").

INDEX_ENV_PREFIX = "ENVLOCK_INDEX_"
SOURCE_ENV_PREFIX = "ENVLOCK_SOURCE_"

#: How a host that cannot be reached reads: envlock's own downloads, then uv's resolver.
_UNREACHABLE = ("cannot connect", "dns error", "tcp connect error", "error sending request")


def env_var(prefix: str, name: str) -> str:
    """``PREFIX<NAME>``: the variable that names a mirror of index or source NAME
    (``workspace.env_var_suffix``)."""
    return prefix + env_var_suffix(name)


def _from_env(prefix: str, names: Iterable[str], environ: Mapping[str, str] | None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {name: environ[var] for name in names if environ.get(var := env_var(prefix, name))}


def index_vars_set() -> bool:
    """Whether any ``ENVLOCK_INDEX_*`` variable is set (whatever it names)."""
    return any(var.startswith(INDEX_ENV_PREFIX) for var in os.environ)


@dataclass(frozen=True)
class MirrorOptions:
    """The mirrors a command line names: ``--index NAME=URL`` and ``--source NAME=URL``."""

    indexes: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mirrors:
    """The mirrors a command reads: spec index name -> URL, source (or FetchContent) name -> URL.

    ``spec`` is the spec whose indexes are read, with credentials, hints and notes (None: no
    index is read through it: ``--offline``, or a ``sync --lock`` with no spec).
    """

    spec: EnvSpec | None = None
    indexes: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: EnvSpec, asked: MirrorOptions | None = None, *, read_indexes: bool = True) -> Mirrors:
        """The mirrors of ``spec``: the options given over the environment's variables, each
        checked (exit 2 naming the option or variable). ``read_indexes`` False: no index is read
        (``--offline``), so index mirrors are neither looked up nor checked, and none is said."""
        asked = asked or MirrorOptions()
        found_sources = source_mirrors(spec, asked.sources)
        if not read_indexes:
            return cls(None, {}, found_sources)
        return cls(spec, index_mirrors(spec, asked.indexes), found_sources)

    def credentials(self) -> contextlib.AbstractContextManager[None]:
        """A block in which every download sends the ``user:password@`` of the spec's indexes and
        of these mirrors to their origin (``net.auth.credentials``), imported only when one holds
        credentials: a sync downloads nothing most of the time."""
        urls = [url for url in (*(i.url for i in self.spec.indexes.values()), *self.indexes.values())
                if "@" in url] if self.spec is not None else []
        if not urls:
            return contextlib.nullcontext()
        from envlock.net import auth

        return auth.credentials(*urls)

    def index_hint(self, exc: EnvlockError) -> str:
        """For a failure to reach the host of spec indexes without a mirror: how to read them
        from one ("" else). The failure itself names only the URL it could not reach."""
        if self.spec is None:
            return ""
        said = str(exc)
        if not any(words in said for words in _UNREACHABLE):
            return ""
        names = [name for name, index in sorted(self.spec.indexes.items()) if name not in self.indexes
                 and (host := urlsplit(redact(index.url)).netloc) and f"//{host}/" in said]
        if not names:
            return ""
        how = ", ".join(f"--index {name}=URL or {env_var(INDEX_ENV_PREFIX, name)}=URL" for name in names)
        which = "its index" if len(names) == 1 else "those indexes"
        return f"no access to that host? read {which} from a mirror: {how}"

    def source_hint(self, name: str, git: str | None, *,
                    option: bool = True) -> contextlib.AbstractContextManager[None]:
        """Around fetching git repository ``name`` (at ``git``): a ``SourceError`` gets how to
        fetch it from a clone or mirror instead. ``option``: whether the command takes
        ``--source`` (else only the variable is named)."""
        return _source_hint(name, git, self.sources, option=option)

    def for_packages(self, lock: Lock) -> dict[str, str]:
        """Locked package -> the mirror to download its wheel from: that of the spec index whose
        URL the lock records for it; for a URL the spec does not name (a lock made through
        another mirror), that of the one index the spec lets the package come from."""
        spec = self.spec
        if spec is None or not self.indexes:
            return {}

        def url(name: str) -> str:
            return redact(spec.indexes[name].url).rstrip("/")

        out: dict[str, str] = {}
        for p in lock.packages:
            recorded = (p.index or "").rstrip("/")
            pinned = spec.index_of(p.name)
            # The pin wins where two spec indexes share the recorded URL.
            index = pinned if url(pinned) == recorded else next(
                (name for name in spec.indexes if url(name) == recorded), pinned)
            if index in self.indexes:
                out[p.name] = self.indexes[index]
        return out

    def stray_note(self, ws: Workspace) -> str:
        """The note on ``ENVLOCK_INDEX_*`` variables set that name no index of any env spec in
        the workspace (a typo: silently unused, the spec's own URL is read instead); "" else."""
        if self.spec is None:
            return ""
        stray = stray_index_vars(ws, self.spec)
        if not stray:
            return ""
        known = ", ".join(env_var(INDEX_ENV_PREFIX, name) for name in sorted(self.spec.indexes))
        return (f"{', '.join(stray)} set, but no env spec here has an index of that name, so it was not used "
                f"(this env's: {known})")


def index_mirrors(spec: EnvSpec, explicit: Mapping[str, str] | None = None) -> dict[str, str]:
    """The mirror URL of each spec index that has one: ``--index NAME=URL`` over ``ENVLOCK_INDEX_<NAME>``.

    Mirrors that are no URL are refused here (exit 2, each named with where it came
    from), not left to uv to report as a package missing from the registry; so is an
    ``--index NAME`` the spec has no index of, for ``lock`` and ``sync`` alike.
    """
    given = {name: (env_var(INDEX_ENV_PREFIX, name), url)
             for name, url in _from_env(INDEX_ENV_PREFIX, spec.indexes, None).items()}
    given.update({name: (f"--index {name}", url) for name, url in (explicit or {}).items()})
    bad = [f"{origin}={shown(url)!r}: expected an http(s):// or file:// URL"  # a password must not reach a log
           + (f" with no whitespace or control character ({where})" if (where := unsafe_char(shown(url))) else "")
           for _, (origin, url) in sorted(given.items()) if not is_index_url(url)]
    bad += [f"{origin}={url!r}: no such folder ({path}); expected an index on disk (a folder per project)"
            for _, (origin, url) in sorted(given.items())
            if is_index_url(url) and (path := missing_folder(url)) is not None]
    raise_all(UsageError, bad, f"{len(bad)} index mirrors are not URLs of an index")
    if unknown := sorted(set(given) - set(spec.indexes)):
        known = ", ".join(sorted(spec.indexes))
        raise UsageError(f"--index {unknown[0]}=...: {spec.path} has no [indexes.{unknown[0]}]; indexes: {known}")
    return {name: url for name, (_, url) in given.items()}


def missing_folder(url: str) -> str | None:
    """The path of a ``file://`` index URL that names no folder (else None): uv would report
    every package as missing from the registry."""
    from envlock.net.http import file_path

    path = file_path(url)
    return path if path is not None and not os.path.isdir(path) else None


def stray_index_vars(ws: Workspace, spec: EnvSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """``ENVLOCK_INDEX_*`` variables set that name no index of any env spec in the workspace."""
    from envlock.model.spec import read_spec

    environ = os.environ if environ is None else environ
    wanted = {env_var(INDEX_ENV_PREFIX, name) for name in spec.indexes}
    stray = sorted(v for v, url in environ.items() if v.startswith(INDEX_ENV_PREFIX) and url and v not in wanted)
    for other in ws.envs() if stray else ():  # another env's index is no typo
        try:
            wanted |= {env_var(INDEX_ENV_PREFIX, name) for name in read_spec(ws.root / "envs" / f"{other}.toml",
                                                                               name=other)[0].indexes}
        except (SpecError, OSError):
            continue
    return [v for v in stray if v not in wanted]


def source_mirrors(spec: EnvSpec, explicit: Mapping[str, str] | None = None,
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where to fetch each git repository from: ``--source NAME=URL`` over ``ENVLOCK_SOURCE_<NAME>=URL``.

    NAME is a ``[sources.NAME]`` or a build's ``fetchcontent.NAME`` (cutlass and the like,
    which an air-gapped cluster also needs from a mirror). The lock still names the spec's
    URL and the pinned commit is verified, so a mirror (a local clone, an internal git
    server) changes where bytes come from, not what they are.
    """
    names = {*spec.sources, *(dep.name for b in spec.builds.values() for dep in b.fetchcontent)}
    out = _from_env(SOURCE_ENV_PREFIX, names, environ)
    bad = [f"{env_var(SOURCE_ENV_PREFIX, name)}=...: {problem}" for name, url in sorted(out.items())
           if (problem := git_url_problem(url)) is not None]
    bad += [f"--source {name}=...: {problem}" for name, url in sorted((explicit or {}).items())
            if (problem := git_url_problem(url)) is not None]
    raise_all(UsageError, bad, f"{len(bad)} source mirrors are no repository git may read")
    for name, url in (explicit or {}).items():
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(f"--source {name}=...: {spec.path} has no [sources.{name}] nor a fetchcontent.{name}; "
                             f"known: {known}")
        if name in spec.sources and spec.sources[name].git is None:
            raise UsageError(f"--source {name}=...: [sources.{name}] is a path source; only git sources take a mirror")
        out[name] = url
    return out


@contextlib.contextmanager
def _source_hint(name: str, git: str | None, mirrors: Mapping[str, str], *, option: bool) -> Iterator[None]:
    try:
        yield
    except SourceError as exc:
        if git is None or name in mirrors:
            raise
        raise exc.with_details(f"no access to {git}? fetch the pinned commit from a clone or mirror: "
                               f"{source_mirror_how(name, option=option)}") from None


def source_mirror_how(name: str, *, option: bool = True) -> str:
    """How to name a mirror of git repository ``name`` (a source or a FetchContent input)."""
    var = env_var(SOURCE_ENV_PREFIX, name)
    return f"--source {name}=URL-OR-PATH or {var}=URL-OR-PATH" if option else f"{var}=URL-OR-PATH"


def package_locator(packages: Sequence[LockedPackage],
                    mirrors: Mapping[str, str]) -> Callable[[Sequence[Artifact]], dict[str, str | FetchError]]:
    """A ``FetchOptions.locate`` (``install.fetch``) that takes wheels from mirrors: ``mirrors`` maps a locked package's
    name to the mirror (an index URL) its wheel is downloaded from instead of the lock's URL
    (``Mirrors.for_packages``).

    The wheel is the file of the same name that the mirror lists for the package (a
    PEP 503/691 page, as ``lock --index`` reads one); the lock's sha256 says whether it
    is the locked file, so a mirror changes where bytes come from, not what they are. A
    file the mirror does not list (or lists with another sha256) is that artifact's
    ``FetchError``: never the locked URL instead (a mirror is given where that one is
    not reachable).
    """
    by_sha = {p.wheels[0].sha256: (p.name, mirrors[p.name].rstrip("/")) for p in packages
              if p.wheels and p.name in mirrors and p.wheels[0].path is None}

    def locate(artifacts: Sequence[Artifact]) -> dict[str, str | FetchError]:
        mirrored = [(a, *by_sha[a.sha256]) for a in artifacts if a.sha256 in by_sha]
        if not mirrored:
            return {}
        from envlock.net.indexes import Listings

        found: dict[str, str | FetchError] = {}
        with Listings() as listings:
            for _, name, mirror in mirrored:
                listings.prefetch(mirror, name)
            for a, name, mirror in mirrored:
                found[a.sha256] = _mirrored_url(listings, a, name, mirror)
        return found

    return locate


def _mirrored_url(listings: Listings, a: Artifact, name: str, mirror: str) -> str | FetchError:
    """Where mirror ``mirror`` has the locked wheel ``a`` of package ``name``, or why not."""
    from envlock.net import auth, http

    shown = http.redact(mirror)
    try:
        files = {f.filename: f for f in listings.files(mirror, name)}
    except PackageIndexError as exc:
        return FetchError(f"{a.filename}: {exc.message}")
    # An http(s) mirror's page must not send envlock to read this machine's files: ``listings`` refuses
    # such a page (``net.indexes.link_problem``), as it does every index's.
    listed = files.get(a.filename)
    if listed is None:
        return FetchError(f"{a.filename}: mirror {shown} lists no such file for {name} "
                          f"(expected the locked wheel, sha256 {a.sha256})")
    if listed.sha256 not in (None, a.sha256):
        return FetchError(f"{a.filename}: mirror {shown} lists it with sha256 "
                          f"{listed.sha256}, the lock says {a.sha256}: not the locked file")
    return auth.with_credentials_of(listed.url, mirror)
