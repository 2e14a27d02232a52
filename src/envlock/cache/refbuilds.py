"""A ``sync --lock PATH[@REV]``'s local builds, from the binary caches.

Such a sync neither locks nor builds: the lock's built wheels must be where its ``path``
says (the workspace's wheelhouse), and a lock from an earlier revision names a build the
wheelhouse no longer holds (it holds the current one, often under the same file name).
So before the fetch, each build the store and the local files lack is asked of the caches by
the lock's recorded input digest, with the checks of a workspace sync (``Caches.build_into_store``:
a trusted signature, the lock's input digest and wheel sha256); the build's wheel in the store
is then one more file ``fetch`` may copy the locked wheel from, held to the lock's sha256 as it
is copied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from envlock.cache.caches import Caches
from envlock.model.lockfile import Artifact, Lock
from envlock.store.store import Store, store_file, stored


def builds_from_caches(caches: Caches, store: Store, lock: Lock, base_dir: Path,
                       local: Mapping[str, Sequence[Path]]) -> dict[str, list[Path]]:
    """``local`` (sha256 -> the files to copy a ``path`` wheel from, in order) with each of ``lock``'s
    builds that neither the store nor those files hold added from the first cache with a trusted
    record of it (its wheel in the store's ``builds/`` entry, tried last)."""
    out = {sha: list(paths) for sha, paths in local.items()}
    for name, recorded in sorted(lock.builds.items()):
        package = lock.package(name)
        art = package.wheels[0] if package is not None and package.wheels else None
        if art is None or art.path is None or art.sha256 != recorded.sha256 or stored(art, store_file(store, art))[0]:
            continue
        candidates = out.get(art.sha256) or [Path(art.path) if Path(art.path).is_absolute() else base_dir / art.path]
        if any(_holds(path, art) for path in candidates):
            continue  # the wheelhouse has it: copied from there, no cache asked
        if not caches.build_into_store(store, name, recorded.input_digest, recorded.sha256):
            continue  # fetch names the missing file, as without a cache
        entry = store.path("builds", recorded.input_digest.removeprefix("sha256:"))
        out[art.sha256] = [*candidates, entry / _entry_wheel(entry)]
    return out


def _holds(path: Path, art: Artifact) -> bool:
    """Whether ``path`` is a file with ``art``'s bytes (its size first: a stat, no read for another build's)."""
    from envlock.store.home import file_sha256

    try:
        if not path.is_file() or (art.size is not None and path.stat().st_size != art.size):
            return False
        return file_sha256(str(path)) == art.sha256
    except OSError:
        return False


def _entry_wheel(entry: Path) -> str:
    import json

    return str(json.loads((entry / "wheel.json").read_text())["wheel"])
