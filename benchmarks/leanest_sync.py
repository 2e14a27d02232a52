"""The leanest warm sync a CPython program can do: the floor under envlock's own time, measured.

    python benchmarks/leanest_sync.py LOCK STORE OUT UV [--switch]

``benchmarks/sync.py`` runs it beside envlock's warm sync and the peer, alternately. It does what a
warm sync must do to give what envlock's gives, and nothing else: no argument parser, no model, no
error messages, no store locks, no stat snapshot for a later switch, no fast no-op stamp, nothing
checked that the job does not need. From the pylock ``LOCK`` and envlock's store ``STORE`` (every
locked wheel in it, its venv skeleton and its uv cache made by an earlier envlock sync):

1. the lock read (``tomllib``; its wheels kept by the lock's sha256, as envlock keeps a parsed lock, and
   read from there when the lock is the same bytes), each locked wheel's store file ``stat``ed (there,
   of the lock's size);
2. the skeleton linked into a new folder beside the store's venvs, and the very ``uv pip install``
   envlock runs (the store files, the store's uv cache; ``UV_CACHE_DIR`` from the environment);
3. uv's machine-specific records dropped from each dist (``uv_cache.json``, ``direct_url.json`` and
   their ``RECORD`` lines), as the digest needs;
4. the digest walk: an ``lstat`` of every entry through its folder's descriptor, a file's hash from an
   inode hash cache (``OUT/inodes.marshal``, racy-clean entries left out) or else read and hashed,
   every file sealed read-only, the digest over the sorted entries;
5. the files it read written back (``sync_file_range``), the cache saved, the manifest written, the
   folder ``fsync``ed and renamed into ``OUT/venvs/``;
6. a generation: a folder with the venv link and a record, synced, renamed, and ``current`` flipped;
7. the end: ``os._exit``, no interpreter teardown.

With ``--switch``, the leanest switch to the venv an earlier run built (``switch``): its stat snapshot
taken and held to the recorded one, and a generation.

It imports nothing of envlock, and only the standard library modules these steps need (not
``subprocess``: uv is started by ``os.posix_spawn``; ``tomllib`` only for a lock not read before). It writes
"uv <seconds>" to stderr (its uv install's wall time, as envlock's ``ENVLOCK_TIMINGS`` line says it).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import sys
import time


def main() -> int:
    lock_path, store, out, uv = sys.argv[1:5]
    with open(lock_path, "rb") as fh:
        lock = fh.read()
    key = hashlib.sha256(lock).hexdigest()  # stands in for the install digest
    if sys.argv[5:] == ["--switch"]:
        return switch(out, f"{out}/venvs/{key}")
    os.makedirs(f"{out}/venvs", exist_ok=True)
    try:  # the lock's wheels as the last run read them, if the lock is the same bytes (as envlock keeps them)
        with open(f"{out}/lock-{key}.marshal", "rb") as fh:
            wheels = marshal.loads(fh.read())
    except OSError:
        import tomllib

        wheels = [(w["hashes"]["sha256"], w["url"].rsplit("/", 1)[1], w["size"])
                  for w in (package["wheels"][0] for package in tomllib.loads(lock.decode())["packages"])]
        with open(f"{out}/lock-{key}.marshal", "wb") as fh:
            fh.write(marshal.dumps(wheels))
    files = []
    for sha256, filename, size in wheels:
        path = f"{store}/wheels/{sha256}/{filename}"
        if os.stat(path).st_size != size:
            return 1
        files.append(path)
    # One fixed folder to build in, as envlock's reused slot: uv keeps its probe of a venv's interpreter by
    # the venv's path, so a new path each run would probe it again (a run of the interpreter).
    work = f"{store}/tmp/leanest-slot"
    skeleton = f"{store}/skeletons/{os.listdir(f'{store}/skeletons')[0]}"
    _link_tree(skeleton, work)

    started = time.perf_counter()
    with open(f"{out}/uv.log", "wb") as log:  # uv's output kept, as envlock keeps it (in a log)
        uv_run = os.posix_spawn(uv, [uv, "pip", "install", "--python", f"{work}/bin/python", "--link-mode",
                                     "hardlink", "--no-index", "--offline", "--no-deps", "--no-build", *files],
                                os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                                                          (os.POSIX_SPAWN_DUP2, log.fileno(), 2)])
        status = os.waitstatus_to_exitcode(os.waitpid(uv_run, 0)[1])
    sys.stderr.write(f"uv {time.perf_counter() - started:.4f}\n")
    if status != 0:
        return 1
    _drop_install_records(work)

    final = f"{out}/venvs/{key}"
    needle = final.encode()
    cache_file = f"{out}/inodes.marshal"
    try:
        with open(cache_file, "rb") as fh:
            known = marshal.loads(fh.read())
    except OSError:
        known = {}
    horizon_file = f"{out}/.horizon"
    with open(horizon_file, "wb"):
        pass
    horizon = os.stat(horizon_file).st_mtime_ns
    entries: dict[str, str] = {}
    read: list[str] = []
    learnt: dict[int, tuple[int, int, int, str]] = {}
    stack = [("", work)]
    while stack:
        rel_dir, abs_dir = stack.pop()
        fd = os.open(abs_dir, os.O_RDONLY | os.O_DIRECTORY)
        prefix = f"{rel_dir}/" if rel_dir else ""
        for name in os.listdir(fd):
            if name == "__pycache__":
                continue
            rel = prefix + name
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            mode = st.st_mode
            if stat.S_ISREG(mode):
                if mode & 0o222:
                    os.chmod(name, mode & 0o7555, dir_fd=fd)
                exe = "x" if mode & 0o100 else "-"
                hit = known.get(st.st_ino)
                if hit is not None and hit[0] == st.st_dev and hit[1] == st.st_size and hit[2] == st.st_mtime_ns:
                    entries[rel] = f"f {exe} {hit[3]}"
                    continue
                path = f"{abs_dir}/{name}"
                file = os.open(name, os.O_RDONLY, dir_fd=fd)
                data = os.read(file, st.st_size + 1)
                os.close(file)
                if needle in data:
                    data = data.replace(needle, b"${VENV}")
                digest = hashlib.sha256(data).hexdigest()
                entries[rel] = f"f {exe} {digest}"
                read.append(path)
                if st.st_nlink > 1 and st.st_mtime_ns < horizon:
                    learnt[st.st_ino] = (st.st_dev, st.st_size, st.st_mtime_ns, digest)
            elif stat.S_ISDIR(mode):
                entries[rel] = "d"
                stack.append((rel, f"{abs_dir}/{name}"))
            elif stat.S_ISLNK(mode):
                entries[rel] = "l " + os.readlink(name, dir_fd=fd)
            else:
                entries[rel] = "o"
        os.close(fd)
    text = "".join(f"{name}\0{entry}\n" for name, entry in sorted(entries.items()))
    venv_digest = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()

    import ctypes  # here: the switch does not write back

    sync_file_range = ctypes.CDLL(None, use_errno=True).sync_file_range
    sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    for flags in (2, 1 | 2 | 4):  # every file's writeback started, then each waited for
        for path in read:
            fd = os.open(path, os.O_RDONLY)
            sync_file_range(fd, 0, 0, flags)
            os.close(fd)
    if learnt:
        known.update(learnt)
        with open(f"{cache_file}.tmp", "wb") as fh:
            fh.write(marshal.dumps(known))
        os.replace(f"{cache_file}.tmp", cache_file)
    with open(f"{work}/.envlock-manifest.json", "wb") as fh:
        fh.write(json.dumps({"digest": venv_digest, "entries": entries}, sort_keys=True,
                            separators=(",", ":")).encode())
    _fsync(f"{work}/.envlock-manifest.json")
    _fsync(work)
    os.rename(work, final)
    _fsync(f"{out}/venvs")

    _generation(out, final, venv_digest)
    return 0


def switch(out: str, venv: str) -> int:
    """The leanest switch to ``venv``, built by an earlier run: its stat snapshot taken (an ``lstat`` per
    entry, as envlock's ``digest.Snapshot``) and held to the one recorded (the first switch records it,
    with the venv digest from its manifest), then a generation made current."""
    rows: list[tuple[object, ...]] = []
    # The walk inlined, as main's is, not one generator both share: a floor pays no per-entry call it need not.
    stack = [("", venv)]
    while stack:
        rel_dir, abs_dir = stack.pop()
        fd = os.open(abs_dir, os.O_RDONLY | os.O_DIRECTORY)
        prefix = f"{rel_dir}/" if rel_dir else ""
        for name in os.listdir(fd):
            if name == "__pycache__" or (not rel_dir and name.startswith(".envlock")):
                continue
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            rel = prefix + name
            if stat.S_ISDIR(st.st_mode):
                rows.append((rel, "d"))
                stack.append((rel, f"{abs_dir}/{name}"))
            else:
                rows.append((rel, st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        os.close(fd)
    rows.sort()
    snapshot = hashlib.sha256(marshal.dumps(rows, 2)).hexdigest()
    record = f"{out}/snapshot-{os.path.basename(venv)}"
    try:
        with open(record, encoding="utf-8") as fh:
            venv_digest, recorded = fh.read().split()
    except OSError:
        with open(f"{venv}/.envlock-manifest.json", encoding="utf-8") as fh:
            venv_digest, recorded = json.load(fh)["digest"], snapshot
        with open(record, "w", encoding="utf-8") as fh:
            fh.write(f"{venv_digest} {snapshot}\n")
    if snapshot != recorded:
        return 1  # changed since: envlock walks it in full then
    _generation(out, venv, venv_digest)
    return 0


def _generation(out: str, venv: str, venv_digest: str) -> None:
    """A new generation of ``out``'s env pointing at ``venv``, synced, made current."""
    envs = f"{out}/envs"
    os.makedirs(envs, exist_ok=True)
    number = max((int(n) for n in os.listdir(envs) if n.isdigit()), default=0) + 1
    new = f"{envs}/.new-{number}"
    os.mkdir(new)
    os.symlink(os.path.relpath(venv, new), f"{new}/venv")
    record = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "venv_digest": venv_digest}
    with open(f"{new}/generation.json", "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    _fsync(f"{new}/generation.json")
    _fsync(new)
    os.rename(new, f"{envs}/{number}")
    os.symlink(str(number), f"{envs}/.current-new")
    os.replace(f"{envs}/.current-new", f"{envs}/current")
    _fsync(envs)


def _link_tree(source: str, dest: str) -> None:
    """``dest`` made as ``source``'s copy: folders made, symlinks copied, files hard-linked."""
    os.mkdir(dest)
    for folder, dirs, names in os.walk(source):
        here = dest + folder[len(source):]
        for name in dirs:
            if os.path.islink(f"{folder}/{name}"):
                os.symlink(os.readlink(f"{folder}/{name}"), f"{here}/{name}")
            else:
                os.mkdir(f"{here}/{name}")
        for name in names:
            if name.startswith(".envlock"):
                continue
            if os.path.islink(f"{folder}/{name}"):
                os.symlink(os.readlink(f"{folder}/{name}"), f"{here}/{name}")
            else:
                os.link(f"{folder}/{name}", f"{here}/{name}")


def _drop_install_records(venv: str) -> None:
    """``uv_cache.json`` and ``direct_url.json`` removed from each dist, and their ``RECORD`` lines."""
    lib = f"{venv}/lib"
    for python in os.listdir(lib):
        site = f"{lib}/{python}/site-packages"
        for dist in os.listdir(site):
            if not dist.endswith(".dist-info"):
                continue
            dropped = []
            for name in ("uv_cache.json", "direct_url.json"):
                try:
                    os.unlink(f"{site}/{dist}/{name}")
                except FileNotFoundError:
                    continue
                dropped.append(f"{dist}/{name},".encode())
            if dropped:
                fd = os.open(f"{site}/{dist}/RECORD", os.O_RDWR)
                lines = os.read(fd, 1 << 24).splitlines(keepends=True)
                kept = b"".join(line for line in lines if not line.startswith(tuple(dropped)))
                os.pwrite(fd, kept, 0)
                os.ftruncate(fd, len(kept))
                os.close(fd)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown, as envlock's console script ends when the exit has nothing left to do
