"""One artifact's bytes into its partial file (``tmp/partial/<sha256>.part``, which
``envlock.install.fetch`` holds locked and renames into the store once whole): downloaded, resuming
what the file holds with an HTTP Range request and retrying with backoff, or copied from a local
file (a build's wheel); hashed as they come, held to the lock's sha256 and size, and never read
past that size (``UNSIZED_LIMIT`` without one). The messages for bytes that are not the locked ones.

``envlock.net.http`` is imported inside the functions that go to the network, as in ``fetch``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envlock.errors import FetchError
from envlock.model.lockfile import Artifact
from envlock.progress import Progress, Stop
from envlock.urlcheck import is_file_url

if TYPE_CHECKING:
    from envlock.net.http import HttpError

CHUNK = 1 << 20


#: How many bytes an artifact whose lock records no size may have (PEP 751 makes ``size``
#: optional: a lock may leave it out). Far above any wheel an index serves
#: (PyTorch's CUDA nightlies are a few GB); the sha256 still decides what is stored, this
#: only stops a body or a file that never ends (a broken or hostile server, ``/dev/zero``)
#: from filling the store's disk. A lock that records the size is held to it instead.
UNSIZED_LIMIT = 16 << 30



@dataclass(frozen=True)
class Got:
    """How an artifact's bytes came into its partial file: ``"download"`` (bytes received this run, the offset
    the last request resumed from) or ``"local"`` (copied from a file on this machine)."""

    source: str
    downloaded: int = 0
    resumed_from: int = 0



def _rehash(fh: IO[bytes]) -> tuple[Any, int]:
    """sha256 state and length of what a partial file already holds (to resume it)."""
    hasher = hashlib.sha256()
    fh.seek(0)
    have = 0
    while chunk := fh.read(CHUNK):
        hasher.update(chunk)
        have += len(chunk)
    return hasher, have



def empty(fh: IO[bytes]) -> Any:
    """Empty a partial file; the sha256 state of its (no) bytes."""
    fh.seek(0)
    fh.truncate(0)
    return hashlib.sha256()



class Partial:
    """A partial file being filled (downloaded or copied into), hashed as it grows, its progress shown."""

    def __init__(self, fh: IO[bytes], name: str, progress: Progress, *, resume: bool) -> None:
        self.fh, self.name, self.progress = fh, name, progress
        # Resumed: what an earlier run left is hashed again; else the file starts empty.
        self.hasher, self.have = _rehash(fh) if resume else (empty(fh), 0)
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
        self.hasher, self.have = empty(self.fh), 0

    def restart(self) -> None:
        """Empty the file to fill it again from byte 0; the progress shown goes back with it."""
        if self.begun and self.have:
            self.progress.advance(self.name, -self.have)
        self.discard()



def stream(url: str, part: Partial, *, limit: int, fresh: bool, retries: int, backoff: float,
            stop: Stop) -> None:
    """Append the body at ``url`` to ``part`` until it ends, or until ``part`` holds more than ``limit`` bytes.

    Continues from ``part.have`` with an HTTP Range request (``fresh``: every attempt starts
    from byte 0 instead), starting over when the server ignores the Range. A retryable
    failure is retried, backing off, while ``part.failures`` is below ``retries``; the one after
    is raised (``http.HttpError``). ``stop`` set: ``DownloadStoppedError``, the bytes kept.
    """
    from envlock.net import http  # see envlock.install.fetch's docstring

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



def download_failed(filename: str, url: str, exc: HttpError, failures: int) -> str:
    """The message for a download that failed after ``failures`` retries."""
    from envlock.net import http  # see envlock.install.fetch's docstring

    return (f"{filename}: download failed from {http.redact(url)}: {exc.reason}"
            + (f" (after {failures} retries)" if failures else ""))



def download(
    artifact: Artifact, url: str, fh: IO[bytes], *, retries: int, backoff: float, progress: Progress,
    stop: Stop,
) -> Got:
    """Download ``artifact`` from ``url`` into the partial file ``fh``, resuming what it holds; check
    its sha256 and size. A resumed download whose bytes are wrong is tried once more from byte 0."""
    from envlock.net import http  # see envlock.install.fetch's docstring

    expected_size = artifact.size
    # Without a locked size a body is still not read forever (no Content-Length, or a huge one).
    limit = UNSIZED_LIMIT if expected_size is None else expected_size
    part = Partial(fh, artifact.filename, progress, resume=True)
    if part.have > limit:
        part.discard()
        part.resumed_from = 0
    fresh_retry_used = False
    part.begin(expected_size)
    try:
        while True:
            if expected_size is None or part.have < expected_size:
                try:
                    stream(url, part, limit=limit, fresh=False, retries=retries, backoff=backoff, stop=stop)
                except http.HttpError as exc:
                    gone = (("; the index no longer serves it (a nightly index keeps only its newest "
                            f"builds): its bytes are the lock's sha256, so copy wheels/{artifact.sha256}/ "
                            "from a store that has it (another machine's $ENVLOCK_HOME/v1/) into this one "
                            "and sync again, or sync with --index NAME=URL from a mirror that keeps it")
                            if exc.status in (404, 410) else "")
                    raise FetchError(download_failed(artifact.filename, url, exc, part.failures) + gone) from None
            actual = part.hasher.hexdigest()
            if actual == artifact.sha256 and (expected_size is None or part.have == expected_size):
                return Got("download", part.received, part.resumed_from)
            if expected_size is None and part.have > limit:  # no size to say which bytes: no fresh try either
                part.discard()
                raise FetchError(too_long(artifact, f"for {http.redact(url)}"))
            if part.resumed_from > 0 and not fresh_retry_used:
                # A bad byte may sit in the resumed prefix: one clean download decides.
                fresh_retry_used = True
                part.restart()
                part.resumed_from = 0
                continue
            size = part.have
            part.discard()
            raise FetchError(mismatch(artifact, f"for {http.redact(url)}", actual, size))
    finally:
        part.end()



def is_local(artifact: Artifact) -> bool:
    """Whether ``artifact`` is copied from this machine's files (a ``path``, a ``file:`` URL), not downloaded."""
    return artifact.url is None or is_file_url(artifact.url)



def local_source(artifact: Artifact, base_dir: Path) -> Path:
    if artifact.url is not None:  # a file: URL (see is_local)
        from envlock.net import http  # (ssl and http.client: only for this case)

        local = http.file_path(artifact.url)
        assert local is not None
        return Path(local)
    assert artifact.path is not None
    path = Path(artifact.path)
    return path if path.is_absolute() else base_dir / path



def copy_first(artifact: Artifact, sources: Sequence[Path], fh: IO[bytes], *, progress: Progress,
                stop: Stop, env: str = "ENV") -> Got:
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
                stop: Stop, env: str = "ENV") -> Got:
    """Copy a local wheel (a built one in the wheelhouse) into the partial file, hashing as it goes.

    Reads at most the locked size and one byte more (``UNSIZED_LIMIT`` without one): a file
    that goes on (a symlink to ``/dev/zero`` in a pull request's wheelhouse) must not fill
    the store's disk. Only a regular file is read: a device or a FIFO is no wheel.
    """
    part = Partial(fh, artifact.filename, progress, resume=False)
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
            raise FetchError(too_long(artifact, where) + hint)
        raise FetchError(mismatch(artifact, where, actual, size) + hint)
    return Got("local")



def _file_kind(mode: int) -> str:
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")



def too_long(artifact: Artifact, where: str) -> str:
    """The message for bytes that go on past the locked size (``UNSIZED_LIMIT`` without one): read no further."""
    if artifact.size is None:
        return (f"{artifact.filename}: size mismatch {where}: more than {UNSIZED_LIMIT} bytes, and the lock records "
                "no size for it (envlock reads no more without one; record the wheel's `size` in the lock); "
                "nothing was stored")
    return (f"{artifact.filename}: size mismatch {where}: longer than the {artifact.size} bytes the lock says "
            f"(reading stopped at {artifact.size + 1}); nothing was stored")



def mismatch(artifact: Artifact, where: str, actual: str, size: int) -> str:
    """The message for bytes that are not the locked ones: ``actual`` sha256, ``size`` bytes.

    Bytes with the locked sha256 are the locked bytes: only the lock's size can be wrong then.
    """
    if actual == artifact.sha256:
        return (f"{artifact.filename}: size mismatch {where}: the bytes have the locked sha256 but are "
                f"{size} bytes, the lock says {artifact.size}; nothing was stored")
    return (f"{artifact.filename}: sha256 mismatch {where}: expected {artifact.sha256}, got {actual}"
            + (f" ({size} bytes, expected {artifact.size})" if artifact.size not in (None, size) else "")
            + "; nothing was stored")
