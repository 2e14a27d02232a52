"""Fetch locked artifacts into the store: streaming sha256 + size checks, retries, resume.

Every artifact is written to ``tmp/partial/<sha256>.part`` (named by its hash, so a
retry or the next run resumes it with an HTTP Range request), verified while it
streams, and only then renamed into ``wheels/<sha256>/<filename>``. Memory stays at
one chunk per download whatever the wheel size. ``fetch`` never prints: progress
goes to a ``Progress`` the caller passes (``envlock.ui`` draws it on a terminal).

``envlock.net.http`` is imported inside the functions that go to the network, never at the
top: it loads socket, ssl and http.client (tens of ms), which a warm sync (every locked
wheel already in the store) does not need.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from envlock.errors import FetchError, raise_all
from envlock.model.lockfile import Artifact
from envlock.progress import DownloadStoppedError, NullProgress, Progress, Stop, parallel
from envlock.store.store import STORE_MTIME, Store, store_file, stored, wrong_size_in_store

if TYPE_CHECKING:
    from envlock.model.lockfile import Lock
    from envlock.model.mirrors import MirrorOptions
    from envlock.workspace import Workspace


@dataclass(frozen=True)
class Fetched:
    """One artifact in the store; ``source`` says how it got there this run."""

    sha256: str
    filename: str
    path: Path
    source: str  # "store" (already there), "download", "local" (copied from a path)
    downloaded: int = 0  # bytes received over HTTP this run
    resumed_from: int = 0  # offset a download resumed from (0: started fresh)


@dataclass(frozen=True)
class FetchResult:
    """What one ``fetch`` brought into the store: a ``Fetched`` per artifact, in the order asked."""

    artifacts: tuple[Fetched, ...]

    @property
    def downloaded(self) -> int:
        return sum(a.downloaded for a in self.artifacts)

    def paths(self) -> dict[str, Path]:
        """sha256 -> store file."""
        return {a.sha256: a.path for a in self.artifacts}


#: Where to download artifacts from instead of their locked URL: sha256 -> URL, or why not.
Locate = Callable[[Sequence[Artifact]], Mapping[str, "str | FetchError"]]


@dataclass(frozen=True)
class FetchOptions:
    """How ``fetch`` brings artifacts in (what they are, the store and the lock's folder aside)."""

    offline: bool = False  # nothing is downloaded (local files are still copied in)
    jobs: int = 4  # artifacts fetched at once
    retries: int = 5  # failed requests retried per artifact, after ``backoff`` s, doubled each time (10 s at most)
    backoff: float = 0.25
    # Asked, only when something must be downloaded, where to download those artifacts from instead
    # of their locked URLs (sha256 -> URL: a mirror, or the error why that artifact cannot come
    # from there); the bytes are held to the lock's sha256 and size all the same.
    locate: Locate | None = None
    # sha256 -> the files to copy a ``path`` artifact from instead of its path under the lock's
    # folder, tried in order (the first with its sha256 wins).
    local_sources: Mapping[str, Sequence[Path]] = field(default_factory=dict)
    env: str = "ENV"  # the env whose lock this is, as the messages name it


def fetch(artifacts: Sequence[Artifact], store: Store, *, base_dir: Path, options: FetchOptions = FetchOptions(),
          progress: Progress | None = None) -> FetchResult:
    """Bring every artifact into the store (verified) and return where each is.

    ``path`` artifacts are relative to ``base_dir`` (the lock's folder). When any artifact
    fails, raises one ``FetchError`` naming every failed artifact; a store file whose size is
    not the lock's fails too (it is not removed).
    """
    progress = progress or NullProgress()
    unique = list({a.sha256: a for a in artifacts}.values())
    results, missing, errors = _in_store(unique, store)
    failed = len(errors)  # artifacts, for the summary below
    if missing:
        # The copy and download machinery only for what the store lacks (imported here, before the threads).
        from envlock.install import partial

        # Offline means no network: a local wheel (a build's, in the wheelhouse) is still copied in.
        if options.offline and (remote := [a for a in missing if not partial.is_local(a)]):
            errors.append(FetchError(
                f"--offline: {len(remote)} locked artifact{'s' if len(remote) != 1 else ''} not in the store "
                f"{store.root / 'wheels'}",
                details=[f"{a.filename} (sha256 {a.sha256}) from {a.url}" for a in remote],
            ))
            failed += len(remote)
            missing = [a for a in missing if partial.is_local(a)]
    elsewhere: dict[str, str] = {}
    if options.locate is not None and (by_url := [a for a in missing if a.path is None]):  # file: URLs too
        elsewhere, refused = _located(options.locate, by_url)
        errors += refused.values()
        failed += len(refused)
        missing = [a for a in missing if a.sha256 not in refused]
    calls = [
        lambda stop, a=a: _fetch_one(a, store, _origin(a, base_dir, options, elsewhere.get(a.sha256)), options,
                                     progress, stop)
        for a in missing
    ]
    for got in parallel(calls, options.jobs) if calls else ():
        if isinstance(got, FetchError):
            errors.append(got)
            failed += 1
        else:
            results[got.sha256] = got
    raise_all(FetchError, errors, f"{failed} artifacts failed to fetch; nothing unverified was stored")
    return FetchResult(tuple(results[a.sha256] for a in unique))


def _in_store(artifacts: Sequence[Artifact], store: Store) -> tuple[dict[str, Fetched], list[Artifact],
                                                                     list[FetchError]]:
    """What the store holds of ``artifacts`` (by sha256), what it lacks, and the errors of the
    store files whose size is not the lock's."""
    have: dict[str, Fetched] = {}
    missing: list[Artifact] = []
    errors: list[FetchError] = []
    for a in artifacts:
        path = store_file(store, a)
        present, wrong = stored(a, path)
        if wrong is not None:
            errors.append(wrong)
        elif present:
            have[a.sha256] = Fetched(a.sha256, path.name, path, "store")
        else:
            missing.append(a)
    return have, missing, errors


def _located(locate: Locate, artifacts: Sequence[Artifact]) -> tuple[dict[str, str], dict[str, FetchError]]:
    """Where ``locate`` sends each of ``artifacts`` (sha256 -> URL), and why it cannot send the others."""
    elsewhere: dict[str, str] = {}
    refused: dict[str, FetchError] = {}
    for sha, where_from in locate(artifacts).items():
        if isinstance(where_from, FetchError):  # its mirror cannot give it: not its locked URL either
            refused[sha] = where_from
        else:
            elsewhere[sha] = where_from
    return elsewhere, refused


@dataclass(frozen=True)
class _Origin:
    """Where one missing artifact's bytes come from: ``url`` (its locked URL, or its mirror's,
    whose ``file:`` URL is read as a download too), else the local ``files``, tried in order."""

    url: str | None
    files: tuple[Path, ...] = ()


def _origin(artifact: Artifact, base_dir: Path, options: FetchOptions, mirror_url: str | None) -> _Origin:
    from envlock.install import partial  # as in fetch

    if mirror_url is not None or not partial.is_local(artifact):
        assert artifact.url is not None
        return _Origin(mirror_url or artifact.url)
    files = tuple(options.local_sources.get(artifact.sha256, ()))
    return _Origin(None, files or (partial.local_source(artifact, base_dir),))


def _fetch_one(artifact: Artifact, store: Store, origin: _Origin, options: FetchOptions, progress: Progress,
               stop: Stop) -> Fetched:
    """Fetch one artifact not in the store from ``origin``, resuming a partial download left by an
    earlier run. ``stop`` set: ``DownloadStoppedError`` at the next chunk, the partial file kept."""
    from envlock.install import partial  # as in fetch

    final = store_file(store, artifact)
    part = store.partial_dir / f"{artifact.sha256}.part"
    with _disk_errors(artifact.filename, part), _locked_partial(part, stop) as fh:
        # Another process may have finished this artifact while we waited for the lock.
        if final.is_file():
            if os.fstat(fh.fileno()).st_size == 0:
                part.unlink(missing_ok=True)  # reopened empty by us: not a partial to keep
            return Fetched(artifact.sha256, final.name, final, "store")
        try:
            if origin.url is not None:
                got = partial.download(artifact, origin.url, fh, retries=options.retries, backoff=options.backoff,
                               progress=progress, stop=stop)
            else:
                try:
                    got = partial.copy_first(artifact, origin.files, fh, progress=progress, stop=stop, env=options.env)
                except BaseException:
                    partial.empty(fh)  # a copy is never resumed (it starts over): its bytes are litter
                    raise
        except BaseException:
            # A failed hash check (or a stopped copy) empties the partial: drop it. A network
            # failure or a stopped download keeps its bytes so the next run resumes from there.
            if os.fstat(fh.fileno()).st_size == 0:
                with contextlib.suppress(FileNotFoundError):
                    part.unlink()
            raise
        fh.flush()
        os.fsync(fh.fileno())
        _commit(store, part, artifact)
        return Fetched(artifact.sha256, final.name, final, got.source, got.downloaded, got.resumed_from)


@contextlib.contextmanager
def _disk_errors(filename: str, writing: Path) -> Iterator[None]:
    """A full disk or an unwritable store is a ``FetchError`` naming the artifact and the file
    (the one the error names, else ``writing``: a full disk's write names none)."""
    try:
        yield
    except OSError as exc:
        raise FetchError(f"{filename}: {exc.strerror or exc} ({exc.filename or writing}); "
                         "nothing was stored") from None


def fetch_unhashed(url: str, store: Store, *, retries: int = 5, backoff: float = 0.25,
                   progress: Progress | None = None, stop: Stop | None = None) -> Fetched:
    """Download ``url``, whose index publishes no hash, into the store under the sha256 its bytes have.

    For the resolver (PyTorch nightlies, GBs each): the lock records the hash computed
    here and the bytes stay in the store, so the sync that follows does not download
    them a second time. With no hash to check a resumed prefix against, every attempt
    starts from the first byte: a prefix from an earlier upload would be hashed as if
    it were this one. The store records what the URL held (``urlrecords``).
    """
    from envlock.install import partial  # as in fetch
    from envlock.net import http  # see the module's docstring
    from envlock.store.urlhashes import hashed_before, record_hashed  # only a lock hashes an unlisted URL

    progress = progress or NullProgress()
    stop = stop or Stop()
    probe = Artifact(sha256="", url=url)
    if problem := probe.filename_problem():
        raise FetchError(problem)
    filename = probe.filename
    # Named by the URL (no content hash is known yet): one writer per URL at a time.
    part_path = store.partial_dir / f"url-{hashlib.sha256(url.encode()).hexdigest()}.part"
    before = hashed_before(url, store)  # what the caller chose not to trust, if anything
    with _disk_errors(filename, part_path), _locked_partial(part_path, stop) as fh:
        done = hashed_before(url, store)
        if done is not None and done != before:  # another lock hashed it while we waited for its file
            part_path.unlink(missing_ok=True)
            return Fetched(done.sha256, filename, store_file(store, done), "store")
        part = partial.Partial(fh, filename, progress, resume=False)
        try:
            try:
                partial.stream(url, part, limit=partial.UNSIZED_LIMIT, fresh=True, retries=retries, backoff=backoff,
                               stop=stop)
            except http.HttpError as exc:
                raise FetchError(partial.download_failed(filename, url, exc, part.failures)) from None
            finally:
                part.end()
            if part.have > partial.UNSIZED_LIMIT:  # no size to hold it to: a body that never ends
                raise FetchError(f"{filename}: {http.redact(url)} sent more than {partial.UNSIZED_LIMIT} bytes, more "
                                 "than any wheel an index serves; read no further, nothing was stored")
        except (FetchError, DownloadStoppedError):
            part_path.unlink(missing_ok=True)  # no hash to resume against: worth nothing
            raise
        artifact = Artifact(sha256=part.hasher.hexdigest(), url=url, size=part.have)
        fh.flush()
        os.fsync(fh.fileno())
        _commit(store, part_path, artifact)
        record_hashed(url, store, artifact, part.validator)
    return Fetched(artifact.sha256, filename, store_file(store, artifact), "download", part.have)


def hash_unlisted(url: str, store: Store, *, known: Artifact | None, progress: Progress | None = None,
                  stop: Stop | None = None) -> tuple[Artifact, int]:
    """The artifact (sha256 and size) at ``url``, whose index publishes no hash, and the bytes downloaded.

    Bytes the store already holds for the URL are not downloaded again: ``known``, the
    earlier lock's artifact for it (the store is content-addressed: the bytes are what that hash
    names), or what the store recorded when it last downloaded the URL (a lock that
    failed after hashing). One small request checks the URL still holds them: a file
    of that size, answering with an ETag (else Last-Modified) the store saw when it
    hashed those bytes. So a nightly uploaded again under its URL, even at the same
    size, is hashed again. Otherwise the wheel is downloaded into the store, where the
    sync that follows finds it.
    """
    from envlock.store.urlhashes import hashed_before, last_hashed, note_upload, uploads_hashed  # as above

    record = hashed_before(url, store)  # the bytes the store last hashed from this URL, if it holds them
    latest = last_hashed(url, store)  # their sha256, also when it no longer does
    remote: tuple[int | None, str | None] | None = None
    knowns = list(dict.fromkeys(a for a in (known, record) if a is not None))
    for candidate in knowns:
        if not (held := store_file(store, candidate)).is_file():
            continue  # bytes the store no longer holds
        size = held.stat().st_size
        if candidate.size is not None and size != candidate.size:
            raise wrong_size_in_store(candidate, held, size, then="lock again")
        remote_size, upload = remote = remote or _remote_file(url, stop)
        if remote_size not in (None, size):
            continue
        seen = uploads_hashed(url, store, candidate.sha256)
        if upload is not None and seen:
            if upload in seen:
                return Artifact(sha256=candidate.sha256, url=url, size=size), 0
            continue  # another upload than the one hashed as these bytes
        if latest is not None and latest != candidate.sha256:
            continue  # since these bytes, the store saw the URL hold others: the size cannot tell
        return Artifact(sha256=candidate.sha256, url=url, size=size), 0  # no validator to go by: the size
    got = fetch_unhashed(url, store, progress=progress, stop=stop)
    if remote is not None and remote[1] is not None and any(k.sha256 == got.sha256 for k in knowns):
        # The same bytes again: the probe's answer was theirs too (another host's ETag).
        note_upload(url, store, got.sha256, remote[1])
    return Artifact(sha256=got.sha256, url=url, size=got.path.stat().st_size), got.downloaded


def _remote_file(url: str, stop: Stop | None) -> tuple[int | None, str | None]:
    """The size and ``http.validator`` of the file at ``url`` now; None each when the server does
    not say or cannot be asked (the bytes in the store are then what the URL held when they
    were hashed: a nightly the index dropped)."""
    from envlock.net import http  # see the module's docstring

    try:
        return http.remote_file(url, watcher=stop)
    except http.HttpError:
        return None, None


@contextlib.contextmanager
def _locked_partial(part: Path, stop: Stop) -> Iterator[IO[bytes]]:
    """Open ``part`` for appending under an exclusive flock (one writer per artifact).

    Waiting for another process's download of it polls ``stop``: Ctrl-C must not wait it out.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fh = open(part, "a+b")  # noqa: SIM115 - closed below, or kept open by the caller's with
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                try:
                    stop.wait(0.1)
                except DownloadStoppedError:
                    fh.close()
                    raise
        # The holder before us may have renamed or removed the file: lock the current one.
        try:
            same = os.stat(part).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        fh.close()
    try:
        yield fh
    finally:
        fh.close()


def _commit(store: Store, part: Path, artifact: Artifact) -> None:
    """Make a verified partial file ``wheels/<sha256>/<filename>``; the partial is gone after.

    The entry appears in one rename. It may already exist, made by another writer or
    holding these bytes under another file name (``PyYAML-6.0-…`` from an index,
    ``pyyaml-6.0-…`` from a wheelhouse): this name is then added as a hard link, which
    is complete the moment it appears, so every locked name finds its file.
    """
    os.chmod(part, 0o444)  # store entries are immutable
    os.utime(part, (STORE_MTIME, STORE_MTIME))
    entry = store.path("wheels", artifact.sha256)
    if not entry.is_dir():
        with store.new_entry("wheels", artifact.sha256) as work:
            os.link(part, work / artifact.filename)
    with contextlib.suppress(FileExistsError):
        os.link(part, entry / artifact.filename)
    part.unlink()
    # Adding a name changed the folder's mtime.
    os.utime(entry, (STORE_MTIME, STORE_MTIME))


def fetch_mirrored(ws: Workspace, env: str, lock: Lock, artifacts: Sequence[Artifact], store: Store, *,
                   base_dir: Path, asked: MirrorOptions | None = None) -> FetchResult:
    """``fetch.fetch`` of ``artifacts`` (wheels of ``lock``) as a sync downloads them: each from the
    mirror ``asked`` (``--index``) or ``ENVLOCK_INDEX_<NAME>`` names for its spec index (``env``'s
    spec, when it reads), with the spec's credentials; else from the lock's URLs (export, cache push)."""
    from envlock.errors import EnvlockError
    from envlock.model.mirrors import Mirrors, package_locator
    from envlock.model.spec import load_env_spec

    try:
        spec = load_env_spec(ws, env, check_paths=False)
    except EnvlockError:
        if asked is not None and asked.indexes:  # a mirror named by spec index, with no spec to name it
            raise
        spec = None
    mirrors = Mirrors.of(spec, asked) if spec is not None else Mirrors()
    found = mirrors.for_packages(lock)
    locate = package_locator(lock.packages, found) if found else None
    with mirrors.credentials():
        return fetch(list(artifacts), store, base_dir=base_dir, options=FetchOptions(env=env, locate=locate))
