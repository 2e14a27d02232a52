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
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envlock.errors import FetchError, raise_all
from envlock.model.lockfile import Artifact
from envlock.progress import DownloadStoppedError, NullProgress, Progress, Stop, parallel
from envlock.store.store import STORE_MTIME, Store, store_file, stored, wrong_size_in_store
from envlock.store.urlhashes import hashed_before, last_hashed, note_upload, record_hashed, uploads_hashed

if TYPE_CHECKING:
    from envlock.model.lockfile import Lock
    from envlock.model.mirrors import MirrorOptions
    from envlock.net.http import HttpError
    from envlock.workspace import Workspace

CHUNK = 1 << 20
#: How many bytes an artifact whose lock records no size may have (PEP 751 makes ``size``
#: optional: a lock may leave it out). Far above any wheel an index serves
#: (PyTorch's CUDA nightlies are a few GB); the sha256 still decides what is stored, this
#: only stops a body or a file that never ends (a broken or hostile server, ``/dev/zero``)
#: from filling the store's disk. A lock that records the size is held to it instead.
UNSIZED_LIMIT = 16 << 30


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


def fetch(
    artifacts: Sequence[Artifact],
    store: Store,
    *,
    base_dir: Path,
    offline: bool = False,
    jobs: int = 4,
    retries: int = 5,
    backoff: float = 0.25,
    progress: Progress | None = None,
    locate: Locate | None = None,
    local_sources: Mapping[str, Sequence[Path]] | None = None,
    env: str = "ENV",
) -> FetchResult:
    """Bring every artifact into the store (verified) and return where each is.

    ``path`` artifacts are relative to ``base_dir`` (the lock's folder). ``offline``:
    nothing is downloaded (local files are still copied in). ``locate``: asked, only
    when something must be downloaded, where to download those artifacts from instead
    of their locked URLs (sha256 -> URL: a mirror, or the error why that artifact cannot
    come from there); the bytes are held to the lock's sha256 and size all the same. When
    any artifact fails, raises one ``FetchError``
    naming every failed artifact; a store file whose size is not the lock's fails too
    (it is not removed). ``local_sources``: sha256 -> the files to copy a ``path`` artifact
    from instead of its path under ``base_dir``, tried in order (the first with its sha256 wins).
    """
    progress = progress or NullProgress()
    unique = list({a.sha256: a for a in artifacts}.values())
    where = {a.sha256: store_file(store, a) for a in unique}
    have: dict[str, Path] = {}
    errors: list[FetchError] = []
    missing: list[Artifact] = []
    for a in unique:
        present, wrong = stored(a, where[a.sha256])
        if wrong is not None:
            errors.append(wrong)
        elif present:
            have[a.sha256] = where[a.sha256]
        else:
            missing.append(a)
    # Offline means no network: a local wheel (a build's, in the wheelhouse) is still copied in.
    remote = [a for a in missing if not _is_local(a)] if offline else []
    failed = len(errors) + len(remote)  # artifacts, for the summary below
    if remote:
        errors.append(FetchError(
            f"--offline: {len(remote)} locked artifact{'s' if len(remote) != 1 else ''} not in the store "
            f"{store.root / 'wheels'}",
            details=[f"{a.filename} (sha256 {a.sha256}) from {a.url}" for a in remote],
        ))
        missing = [a for a in missing if _is_local(a)]
    results: dict[str, Fetched] = {
        sha: Fetched(sha, path.name, path, "store") for sha, path in have.items()
    }
    elsewhere: dict[str, str] = {}
    if locate is not None and (by_url := [a for a in missing if a.path is None]):  # file: URLs too
        refused = set()
        for sha, where_from in locate(by_url).items():
            if isinstance(where_from, FetchError):  # its mirror cannot give it: not its locked URL either
                errors.append(where_from)
                refused.add(sha)
            else:
                elsewhere[sha] = where_from
        failed += len(refused)
        missing = [a for a in missing if a.sha256 not in refused]
    if missing:
        calls = [
            lambda stop, a=a: _fetch_one(a, store, base_dir=base_dir, retries=retries, backoff=backoff,
                                         progress=progress, stop=stop, url=elsewhere.get(a.sha256),
                                         sources=(local_sources or {}).get(a.sha256, ()), env=env)
            for a in missing
        ]
        for got in parallel(calls, jobs):
            if isinstance(got, FetchError):
                errors.append(got)
                failed += 1
            else:
                results[got.sha256] = got
    raise_all(FetchError, errors, f"{failed} artifacts failed to fetch; nothing unverified was stored")
    return FetchResult(tuple(results[a.sha256] for a in unique))


def _fetch_one(
    artifact: Artifact,
    store: Store,
    *,
    base_dir: Path,
    retries: int,
    backoff: float,
    progress: Progress,
    stop: Stop,
    url: str | None = None,
    sources: Sequence[Path] = (),
    env: str = "ENV",
) -> Fetched:
    """Fetch one artifact not in the store, resuming a partial download left by an earlier run.

    ``url``: where to download it from instead of its locked URL (a mirror); ``sources``: the
    files to copy a local artifact from instead of its path under ``base_dir``, tried in order.
    ``stop`` set: ``DownloadStoppedError`` at the next chunk, the partial file kept.
    """
    final = store_file(store, artifact)
    part = store.partial_dir / f"{artifact.sha256}.part"
    with _disk_errors(artifact.filename, part), _locked_partial(part, stop) as fh:
        # Another process may have finished this artifact while we waited for the lock.
        if final.is_file():
            if os.fstat(fh.fileno()).st_size == 0:
                part.unlink(missing_ok=True)  # reopened empty by us: not a partial to keep
            return Fetched(artifact.sha256, final.name, final, "store")
        try:
            if url is not None or not _is_local(artifact):  # a mirror's file: URL is read as a download
                assert artifact.url is not None
                got = _download(artifact, url or artifact.url, fh, retries=retries, backoff=backoff,
                                progress=progress, stop=stop)
            else:
                try:
                    got = _copy_first(artifact, sources or [_local_source(artifact, base_dir)], fh,
                                      progress=progress, stop=stop, env=env)
                except BaseException:
                    _restart(fh)  # a copy is never resumed (it starts over): its bytes are litter
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
    from envlock.net import http  # see the module's docstring

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
        part = _Partial(fh, filename, progress, resume=False)
        try:
            try:
                _stream(url, part, limit=UNSIZED_LIMIT, fresh=True, retries=retries, backoff=backoff, stop=stop)
            except http.HttpError as exc:
                raise FetchError(_failed(filename, url, exc, part.failures)) from None
            finally:
                part.end()
            if part.have > UNSIZED_LIMIT:  # no size to hold it to: a body that never ends
                raise FetchError(f"{filename}: {http.redact(url)} sent more than {UNSIZED_LIMIT} bytes, more "
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


@dataclass(frozen=True)
class _Got:
    source: str
    downloaded: int = 0
    resumed_from: int = 0


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


def _rehash(fh: IO[bytes]) -> tuple[Any, int]:
    """sha256 state and length of what a partial file already holds (to resume it)."""
    hasher = hashlib.sha256()
    fh.seek(0)
    have = 0
    while chunk := fh.read(CHUNK):
        hasher.update(chunk)
        have += len(chunk)
    return hasher, have


def _restart(fh: IO[bytes]) -> Any:
    """Empty a partial file; the sha256 state of its (no) bytes."""
    fh.seek(0)
    fh.truncate(0)
    return hashlib.sha256()


class _Partial:
    """A partial file being filled (downloaded or copied into), hashed as it grows, its progress shown."""

    def __init__(self, fh: IO[bytes], name: str, progress: Progress, *, resume: bool) -> None:
        self.fh, self.name, self.progress = fh, name, progress
        # Resumed: what an earlier run left is hashed again; else the file starts empty.
        self.hasher, self.have = _rehash(fh) if resume else (_restart(fh), 0)
        self.resumed_from = self.have  # the offset the last request continued from (0: from the start)
        self.received = 0  # bytes that came over HTTP this run
        self.failures = 0  # failed requests retried, all attempts together
        self.validator: str | None = None  # the upload the last response was (``http.validator``)
        self.begun = False

    def begin(self, total: int | None) -> None:
        """Show the transfer (``total`` bytes, None: unknown), counting what the file already holds."""
        self.begun = True
        self.progress.begin(self.name, total)
        self.progress.advance(self.name, self.have)

    def end(self) -> None:
        if self.begun:
            self.progress.end(self.name)

    def write(self, chunk: bytes) -> None:
        self.fh.write(chunk)
        self.hasher.update(chunk)
        self.have += len(chunk)
        self.progress.advance(self.name, len(chunk))

    def discard(self) -> None:
        """Empty the file (its bytes are not the artifact's); the progress shown stays."""
        self.hasher, self.have = _restart(self.fh), 0

    def restart(self) -> None:
        """Empty the file to fill it again from byte 0; the progress shown goes back with it."""
        if self.begun and self.have:
            self.progress.advance(self.name, -self.have)
        self.discard()


def _stream(url: str, part: _Partial, *, limit: int, fresh: bool, retries: int, backoff: float,
            stop: Stop) -> None:
    """Append the body at ``url`` to ``part`` until it ends, or until ``part`` holds more than ``limit`` bytes.

    Continues from ``part.have`` with an HTTP Range request (``fresh``: every attempt starts
    from byte 0 instead), starting over when the server ignores the Range. A retryable
    failure is retried, backing off, while ``part.failures`` is below ``retries``; the one after
    is raised (``http.HttpError``). ``stop`` set: ``DownloadStoppedError``, the bytes kept.
    """
    from envlock.net import http  # see the module's docstring

    while True:
        if fresh:
            part.restart()
        elif part.have > 0:
            part.resumed_from = part.have  # this request continues earlier bytes (Range)
        try:
            with http.open_stream(url, start=part.have, chunk_size=CHUNK, watcher=stop) as body:
                if body.start != part.have:  # the server ignored our Range: start over
                    part.restart()
                part.validator = body.validator
                if not part.begun:
                    part.begin(body.size)
                for chunk in body.chunks:
                    stop.check()
                    part.write(chunk)
                    part.received += len(chunk)
                    if part.have > limit:
                        return  # longer than allowed: the caller names it
            return
        except http.HttpError as exc:
            stop.check()  # a stopped run's socket was shut down: not a failure to retry
            if exc.status == 416 and part.have > 0:
                return  # nothing past our offset: the partial may already be whole
            if not (exc.retryable and part.failures < retries):
                raise
            part.failures += 1
            stop.wait(min(backoff * 2 ** (part.failures - 1), 10.0))


def _failed(filename: str, url: str, exc: HttpError, failures: int) -> str:
    """The message for a download that failed after ``failures`` retries."""
    from envlock.net import http  # see the module's docstring

    return (f"{filename}: download failed from {http.redact(url)}: {exc.reason}"
            + (f" (after {failures} retries)" if failures else ""))


def _download(
    artifact: Artifact, url: str, fh: IO[bytes], *, retries: int, backoff: float, progress: Progress,
    stop: Stop,
) -> _Got:
    """Download ``artifact`` from ``url`` into the partial file ``fh``, resuming what it holds; check
    its sha256 and size. A resumed download whose bytes are wrong is tried once more from byte 0."""
    from envlock.net import http  # see the module's docstring

    expected_size = artifact.size
    # Without a locked size a body is still not read forever (no Content-Length, or a huge one).
    limit = UNSIZED_LIMIT if expected_size is None else expected_size
    part = _Partial(fh, artifact.filename, progress, resume=True)
    if part.have > limit:
        part.discard()
        part.resumed_from = 0
    fresh_retry_used = False
    part.begin(expected_size)
    try:
        while True:
            if expected_size is None or part.have < expected_size:
                try:
                    _stream(url, part, limit=limit, fresh=False, retries=retries, backoff=backoff, stop=stop)
                except http.HttpError as exc:
                    gone = (("; the index no longer serves it (a nightly index keeps only its newest "
                            f"builds): its bytes are the lock's sha256, so copy wheels/{artifact.sha256}/ "
                            "from a store that has it (another machine's $ENVLOCK_HOME/v1/) into this one "
                            "and sync again, or sync with --index NAME=URL from a mirror that keeps it")
                            if exc.status in (404, 410) else "")
                    raise FetchError(_failed(artifact.filename, url, exc, part.failures) + gone) from None
            actual = part.hasher.hexdigest()
            if actual == artifact.sha256 and (expected_size is None or part.have == expected_size):
                return _Got("download", part.received, part.resumed_from)
            if expected_size is None and part.have > limit:  # no size to say which bytes: no fresh try either
                part.discard()
                raise FetchError(_too_long(artifact, f"for {http.redact(url)}"))
            if part.resumed_from > 0 and not fresh_retry_used:
                # A bad byte may sit in the resumed prefix: one clean download decides.
                fresh_retry_used = True
                part.restart()
                part.resumed_from = 0
                continue
            size = part.have
            part.discard()
            raise FetchError(_mismatch(artifact, f"for {http.redact(url)}", actual, size))
    finally:
        part.end()


def _is_local(artifact: Artifact) -> bool:
    """Whether ``artifact`` is copied from this machine's files (a ``path``, a ``file:`` URL), not downloaded."""
    return artifact.url is None or artifact.url.startswith("file:")


def _local_source(artifact: Artifact, base_dir: Path) -> Path:
    if artifact.url is not None:  # a file: URL (see _is_local)
        from envlock.net import http  # (ssl and http.client: only for this case)

        local = http.file_path(artifact.url)
        assert local is not None
        return Path(local)
    assert artifact.path is not None
    path = Path(artifact.path)
    return path if path.is_absolute() else base_dir / path


def _copy_first(artifact: Artifact, sources: Sequence[Path], fh: IO[bytes], *, progress: Progress,
                stop: Stop, env: str = "ENV") -> _Got:
    """``_copy_local`` from the first of ``sources`` that holds the locked bytes; else the error
    of the first that exists (its bytes are another build's), or of the first."""
    errors: list[tuple[bool, FetchError]] = []
    for source in sources:
        try:
            return _copy_local(artifact, source, fh, progress=progress, stop=stop, env=env)
        except FetchError as exc:
            errors.append((source.exists(), exc))
    raise next((exc for exists, exc in errors if exists), errors[0][1])


def _copy_local(artifact: Artifact, source: Path, fh: IO[bytes], *, progress: Progress,
                stop: Stop, env: str = "ENV") -> _Got:
    """Copy a local wheel (a built one in the wheelhouse) into the partial file, hashing as it goes.

    Reads at most the locked size and one byte more (``UNSIZED_LIMIT`` without one): a file
    that goes on (a symlink to ``/dev/zero`` in a pull request's wheelhouse) must not fill
    the store's disk. Only a regular file is read: a device or a FIFO is no wheel.
    """
    part = _Partial(fh, artifact.filename, progress, resume=False)
    try:
        # O_NONBLOCK: opening a FIFO no one writes to would wait forever; it is refused below.
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise FetchError(
            f"{artifact.filename}: local artifact {os.path.normpath(source)} cannot be read ({exc.strerror}); "
            f"expected the wheel recorded in the lock (`envlock build {env}` builds it for the current spec; "
            f"for a lock from another revision, check that revision out and `envlock sync {env} --frozen`)"
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        locked = f'path = "{artifact.path}"' if artifact.path is not None else f'url = "{artifact.url}"'
        raise FetchError(
            f"{artifact.filename}: local artifact {os.path.normpath(source)} (the lock's {locked}) is "
            f"{_file_kind(mode)}; expected a regular file, the wheel recorded in the lock; nothing was stored"
        )
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as src:
        limit = (UNSIZED_LIMIT if artifact.size is None else artifact.size) + 1
        part.begin(artifact.size)
        try:
            while part.have < limit and (chunk := src.read(min(CHUNK, limit - part.have))):
                stop.check()
                part.write(chunk)
        finally:
            part.end()
        size = part.have
        cut = size == limit and os.fstat(fd).st_size > size  # bytes left unread: the hash is a prefix's
    actual = part.hasher.hexdigest()
    if cut or actual != artifact.sha256 or artifact.size not in (None, size):
        part.discard()
        where = f"for local file {os.path.normpath(source)}"
        # The wheelhouse keeps one file per wheel name: the newest build, not every lock's.
        hint = ("; the wheelhouse holds another build of it (a lock from another revision?): check that "
                f"revision's envs/, locks/ and patches/ out and `envlock sync {env} --frozen` rebuilds it"
                if cut or actual != artifact.sha256 else "")
        if cut:  # the hash of a prefix says nothing: the length is what is wrong
            raise FetchError(_too_long(artifact, where) + hint)
        raise FetchError(_mismatch(artifact, where, actual, size) + hint)
    return _Got("local")


def _file_kind(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _too_long(artifact: Artifact, where: str) -> str:
    """The message for bytes that go on past the locked size (``UNSIZED_LIMIT`` without one): read no further."""
    if artifact.size is None:
        return (f"{artifact.filename}: size mismatch {where}: more than {UNSIZED_LIMIT} bytes, and the lock records "
                "no size for it (envlock reads no more without one; record the wheel's `size` in the lock); "
                "nothing was stored")
    return (f"{artifact.filename}: size mismatch {where}: longer than the {artifact.size} bytes the lock says "
            f"(reading stopped at {artifact.size + 1}); nothing was stored")


def _mismatch(artifact: Artifact, where: str, actual: str, size: int) -> str:
    """The message for bytes that are not the locked ones: ``actual`` sha256, ``size`` bytes.

    Bytes with the locked sha256 are the locked bytes: only the lock's size can be wrong then.
    """
    if actual == artifact.sha256:
        return (f"{artifact.filename}: size mismatch {where}: the bytes have the locked sha256 but are "
                f"{size} bytes, the lock says {artifact.size}; nothing was stored")
    return (f"{artifact.filename}: sha256 mismatch {where}: expected {artifact.sha256}, got {actual}"
            + (f" ({size} bytes, expected {artifact.size})" if artifact.size not in (None, size) else "")
            + "; nothing was stored")


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
        return fetch(list(artifacts), store, base_dir=base_dir, env=env, locate=locate)
