"""Pinned source trees: git commits fetched into a store-managed mirror, and content-hashed paths.

A git source is fetched into a bare mirror under the store (``git-mirrors/<url digest>``),
asking the server for just the pinned commit (``git fetch --depth 1 URL <sha>``) and falling
back to a full fetch when the server refuses unadvertised objects. The commit is then
checked out into an immutable store entry ``sources/git-<commit>`` (no ``.git``), after
verifying that the checked-out HEAD is exactly the 40-hex commit. A branch, tag or short
hash in the spec is resolved once (``git ls-remote``, or the fetched history for a short
hash); the lock records the full commit.

A FetchContent archive input (a tar URL) is downloaded, held to its sha256 (or hashed, once, at
lock time) and unpacked safely (``archives``) into ``sources/archive-<sha256>``, its bytes kept
beside the tree (for ``envlock cache push``).

A path source is copied into ``sources/path-<tree digest>`` so builds never write into the
workspace. ``--override-source NAME=PATH`` (Nix's ``--override-input``) takes a local tree
instead of the pin; the result says so in ``notice``.

Each tree is pinned by its content digest (``trees.tree_digest``), which refuses a path
source whose links lead out of it.

A path source's own path may be (or go through) a symlink, also to a folder outside the
workspace: the spec's check of it is lexical, and what the digest covers is the content it
names either way (another machine's tree with other bytes has another digest).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from envlock import runner
from envlock.errors import SourceError, UsageError, redact
from envlock.model.lockfile import LockedPatch, LockedSource
from envlock.model.spec import COMMIT_ID, SourceSpec
from envlock.store import archives
from envlock.store.home import file_sha256
from envlock.store.store import Store
from envlock.store.trees import PATH_SOURCE_EPOCH, copy_tree, tree_digest
from envlock.workspace import leaves

_SHORT_HEX = re.compile(r"[0-9a-f]{4,39}")
_COMMITTER = re.compile(rb"^committer .* (\d+) [+-]\d{4}\n", re.MULTILINE)
_TREE = re.compile(rb"\Atree ([0-9a-f]{40})\n")
#: The file of a ``git-<commit>`` entry that keeps the raw commit object its tree is checked against.
COMMIT_OBJECT = "commit"


@dataclass(frozen=True)
class PreparedSource:
    """A source tree ready to patch: where it is in the store and what it is pinned to."""

    name: str
    kind: str  # "git" or "path"
    location: str  # git URL, or workspace-relative path
    tree: Path  # unpatched tree in the store (read it, never write it)
    tree_digest: str
    commit: str | None = None  # full 40-hex commit (git sources, not overridden)
    commit_time: int | None = None  # committer time, unix seconds
    requested_rev: str | None = None  # the spec's rev, when it was not a full commit
    override: Path | None = None  # the local tree used instead of the pin

    @property
    def source_date_epoch(self) -> int:
        return self.commit_time if self.commit_time is not None else PATH_SOURCE_EPOCH

    @property
    def notice(self) -> str | None:
        """A loud line for the user when the pin was not used."""
        if self.override is None:
            return None
        pinned = f"commit {self.commit}" if self.commit else f"{self.kind} {self.location}"
        return (
            f"OVERRIDDEN: source {self.name!r} is built from the local tree {self.override} "
            f"({self.tree_digest}), not from its pin ({pinned}); what is built from it is not "
            "reproducible from the lock"
        )

    def locked(self, patches: Sequence[LockedPatch] = ()) -> LockedSource:
        """The lock's record of this source (its pin, never an override's tree)."""
        return LockedSource(
            kind=self.kind,
            location=redact(self.location) if self.kind == "git" else self.location,  # a lock keeps no token
            commit=self.commit if self.kind == "git" else None,
            rev=self.requested_rev if self.kind == "git" else None,
            tree_digest=self.tree_digest if self.kind == "path" else None,
            patches=tuple(patches),
        )


@dataclass(frozen=True)
class GitCheckout:
    """One commit of one repository, checked out into the store."""

    commit: str
    commit_time: int
    tree: Path
    tree_digest: str


# -- overrides ---------------------------------------------------------------


def parse_override(value: str) -> tuple[str, Path]:
    """``NAME=PATH`` from ``--override-source`` -> (name, absolute path of an existing directory)."""
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise UsageError(f"--override-source {value!r}: expected NAME=PATH")
    folder = Path.cwd() / Path(path).expanduser()
    if not folder.is_dir():
        raise UsageError(f"--override-source {value!r}: {folder} is not a directory")
    return name, folder.resolve()


# -- git ---------------------------------------------------------------------


def _git(args: Sequence[str | os.PathLike[str]], *, what: str, cwd: Path | None = None,
         network: bool = False) -> runner.Result:
    return runner.git_checked(args, what=what, error=SourceError, cwd=cwd, network=network)


def existing_mirror(store: Store, url: str) -> Path | None:
    """The store's bare mirror for ``url`` if there is one (nothing is created): for readers."""
    path = store.path("git-mirrors", _mirror_key(url))
    return path if (path / "HEAD").exists() else None


def _mirror_key(url: str) -> str:
    # Without its password: the lock records the URL so (closure.mirror_key), and a new token is one repository.
    return hashlib.sha256(redact(url).encode()).hexdigest()[:32]


def fetch_history(store: Store, url: str, *, fetch_from: str | None = None) -> Path:
    """The store's mirror of ``url`` with every branch and tag fetched (unshallowed): the history
    between two pins, for a report's commit range. ``fetch_from``: a mirror of ``url`` to ask instead."""
    mirror = mirror_path(store, url)
    with store.locked(f"git-mirror-{mirror.name}"):
        _fetch_all(mirror, fetch_from or url)
    return mirror


def mirror_path(store: Store, url: str) -> Path:
    """The store's bare mirror for ``url`` (created on first use)."""
    key = _mirror_key(url)
    path = store.path("git-mirrors", key)
    if not (path / "HEAD").exists():
        with store.new_entry("git-mirrors", key) as work:
            _git(["init", "-q", "--bare", work], what=url)
            (work / "envlock-url").write_text(redact(url) + "\n")  # for people: no token
    return path


def resolve_rev(url: str, rev: str, *, store: Store, fetch_from: str | None = None) -> str:
    """A branch, tag, full or short commit -> the full 40-hex commit it names now.

    Names are looked up with ``git ls-remote`` (a tag's peeled commit wins); a short hash
    needs history, so it is looked up in the store's mirror of ``url`` after a full fetch.
    ``fetch_from``: where to ask instead of ``url`` (a mirror of it; see ``fetch_commit``).
    """
    if COMMIT_ID.fullmatch(rev):
        return rev
    remote = fetch_from or url
    # "--": a URL from a spec, --source or the environment is never read as an option
    # (--upload-pack=CMD would run CMD).
    result = runner.git(["ls-remote", "--", remote, rev, f"refs/tags/{rev}^{{}}"], network=True)
    if not result.ok:
        raise SourceError(
            f"{url}: cannot list refs to resolve rev {rev!r} (git ls-remote exit {result.returncode})",
            details=result.tail(10).splitlines(),
        )
    refs = {}
    for line in result.stdout.splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    for ref in (f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}", f"refs/heads/{rev}", rev):
        if ref in refs:
            return refs[ref]
    if _SHORT_HEX.fullmatch(rev):
        mirror = mirror_path(store, url)
        with store.locked(f"git-mirror-{mirror.name}"):
            _fetch_all(mirror, remote)
        found = runner.git(["--git-dir", mirror, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"])
        if found.ok and COMMIT_ID.fullmatch(found.stdout.strip()):
            return found.stdout.strip()
        raise SourceError(
            f"{url}: rev {rev!r} names no commit (or an ambiguous one); expected a branch, a tag or a commit hash"
        )
    raise SourceError(f"{url}: rev {rev!r} names no branch or tag there; expected a branch, a tag or a commit hash")


def _has_commit(mirror: Path, commit: str) -> bool:
    return runner.git(["--git-dir", mirror, "cat-file", "-e", f"{commit}^{{commit}}"]).ok


def _fetch_all(mirror: Path, url: str) -> None:
    args: list[str | os.PathLike[str]] = ["--git-dir", mirror, "fetch", "-q", "--no-tags"]
    if (mirror / "shallow").exists():
        args.append("--unshallow")
    args += ["--", url, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
    _git(args, what=f"{url}: full fetch", network=True)


def fetch_commit(store: Store, url: str, commit: str, *, fetch_from: str | None = None) -> Path:
    """Make sure the store's mirror of ``url`` holds ``commit``; return the mirror.

    Asks for the one commit first (cheap on servers that allow it); a server that refuses
    an unadvertised object gets a full fetch instead. ``fetch_from`` is another place to
    fetch ``url``'s objects from (a local clone, an internal mirror): safe because the
    commit id is checked, and git ids name content.
    """
    if not COMMIT_ID.fullmatch(commit):
        raise SourceError(f"{url}: expected a full 40-hex commit, found {commit!r}")
    mirror = mirror_path(store, url)
    with store.locked(f"git-mirror-{mirror.name}"):
        _fetch_into(mirror, fetch_from or url, commit)
    return mirror


def _fetch_into(mirror: Path, url: str, commit: str) -> None:
    if not _has_commit(mirror, commit):
        shallow = runner.git(["--git-dir", mirror, "fetch", "-q", "--no-tags", "--depth", "1", "--", url, commit],
                             network=True)
        if not (shallow.ok and _has_commit(mirror, commit)):
            _fetch_all(mirror, url)
        if not _has_commit(mirror, commit):
            raise SourceError(
                f"{url}: commit {commit} not found (fetched the whole repository); expected a commit that exists there"
            )
    # A ref per pinned commit keeps it from gc and lets the checkout fetch a ref tip.
    _git(["--git-dir", mirror, "update-ref", f"refs/envlock/{commit}", commit], what=url)


def checkout(store: Store, url: str, commit: str, *, fetch_from: str | None = None) -> GitCheckout:
    """``commit`` of ``url`` as a tree in the store (``sources/git-<commit>``), fetched if needed."""
    entry = store.path("sources", f"git-{commit}")
    if not (entry / "tree").is_dir():
        mirror = fetch_commit(store, url, commit, fetch_from=fetch_from)
        with store.new_entry("sources", f"git-{commit}") as work:
            tree = work / "tree"
            _git(["init", "-q", tree], what=url)
            _git(
                ["fetch", "-q", "--no-tags", "--depth", "1", "--", str(mirror), f"refs/envlock/{commit}"],
                cwd=tree,
                what=url,
            )
            _git(
                ["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD"],
                cwd=tree,
                what=url,
            )
            head = _git(["rev-parse", "HEAD"], cwd=tree, what=url).stdout.strip()
            if head != commit:
                raise SourceError(f"{url}: checked out {head}, expected the pinned commit {commit}")
            when = _git(["show", "-s", "--format=%ct", "HEAD"], cwd=tree, what=url).stdout.strip()
            # The raw commit object: what an export carries so that an import can hold the tree to
            # the commit (``commit_checkout``), as a cache's source tar is held.
            raw = runner.git_bytes(["cat-file", "commit", "HEAD"], cwd=tree, what=url, error=SourceError)
            shutil.rmtree(tree / ".git")
            (work / COMMIT_OBJECT).write_bytes(raw)
            (work / "commit-time").write_text(when + "\n")
            # Not refused here for links out of the tree: they are upstream's, and a commit that
            # has one may still build; a build refuses those in what it reads (build.plan).
            (work / "tree-digest").write_text(tree_digest(tree, links_inside=False) + "\n")
            (work / "url").write_text(redact(url) + "\n")  # for people: no token
    return GitCheckout(
        commit=commit,
        commit_time=int((entry / "commit-time").read_text().strip()),
        tree=entry / "tree",
        tree_digest=(entry / "tree-digest").read_text().strip(),
    )


class NotThePinError(Exception):
    """Files that are not the tree their pin names (the message says why)."""


def commit_checkout(tree: Path, raw: bytes, commit: str, scratch: Path, *, what: str) -> tuple[Path, int]:
    """git's own checkout (under ``scratch``) of ``commit``'s tree, and its committer time, once the files
    under ``tree`` are shown to be that tree: ``raw`` is the commit object whose id is ``commit``, and the
    tree git makes of the files (``git add`` + ``write-tree`` in a scratch repository) is the one it
    names. ``NotThePinError`` saying why not.

    git's checkout, not the files as given: ``git add`` cleans what it reads (``ident``, ``text``,
    ``eol`` attributes), so other bytes can make the same tree; and no empty folder rides along."""
    found = hashlib.sha1(b"commit %d\0" % len(raw) + raw, usedforsecurity=False).hexdigest()
    if found != commit:
        raise NotThePinError(f"its commit object is {found}, not the lock's commit")
    header = raw.partition(b"\n\n")[0] + b"\n"  # the message may hold a line like a header's
    if not (tree_id := _TREE.match(header)) or not (when := _COMMITTER.search(header)):
        raise NotThePinError("its commit object names no tree or committer time")
    for dirpath, dirnames, filenames in os.walk(tree):
        if ".git" in (*dirnames, *filenames):
            rel = Path(dirpath, ".git").relative_to(tree).as_posix()
            raise NotThePinError(f"tree/{rel} is a .git folder or file, which no checkout holds")
    repo = scratch / "repo"
    _git(["init", "-q", repo], what=what)
    where: list[str | os.PathLike[str]] = ["--git-dir", repo / ".git", "--work-tree", tree]
    _git([*where, "add", "-A", "-f", "--", "."], what=what, cwd=tree)
    made = _git([*where, "write-tree"], what=what).stdout.strip()
    if made != tree_id.group(1).decode():
        raise NotThePinError(f"its files make git tree {made}, but commit {commit[:12]} names tree "
                             f"{tree_id.group(1).decode()}")
    checkout = scratch / "checkout"
    checkout.mkdir()
    _git(["--git-dir", repo / ".git", "--work-tree", checkout, "checkout-index", "-a", "-f"], what=what, cwd=checkout)
    return checkout, int(when.group(1))


def commit_object(store: Store, url: str, commit: str) -> bytes | None:
    """The raw commit object of ``commit``: the one its store entry keeps, else the one in the store's
    mirror of ``url`` (None: neither holds it)."""
    if not COMMIT_ID.fullmatch(commit):
        return None
    kept = store.path("sources", f"git-{commit}") / COMMIT_OBJECT
    raw: bytes | None = kept.read_bytes() if kept.is_file() and not kept.is_symlink() else None
    mirror = existing_mirror(store, url)
    if raw is None and mirror is not None:
        try:  # bytes: a message that is not UTF-8, or has CRLF line ends, would not come back as text
            raw = runner.git_bytes(["--git-dir", mirror, "cat-file", "commit", commit], what=url, error=SourceError)
        except SourceError:
            return None
    ok = raw is not None and hashlib.sha1(b"commit %d\0" % len(raw) + raw, usedforsecurity=False).hexdigest() == commit
    return raw if ok else None


def checked_entry_problem(entry: Path, key: str, scratch: Path, *, what: str) -> str | None:
    """Why the ``sources/<key>`` entry being assembled at ``entry`` (from a bundle) is not what its key
    pins, or None, its tree then made git's checkout (``git-<commit>``: ``commit_checkout``, from its
    ``commit`` object) or held to its archive's unpacked files (``archive-<sha256>``); its records
    written again from what was checked."""
    if key.startswith("git-"):
        commit = key.removeprefix("git-")
        if not (entry / COMMIT_OBJECT).is_file() or (entry / COMMIT_OBJECT).is_symlink():
            return "it holds no commit object to check its tree against (export it again with this envlock)"
        try:
            checkout, when = commit_checkout(entry / "tree", (entry / COMMIT_OBJECT).read_bytes(), commit, scratch,
                                             what=what)
        except NotThePinError as exc:
            return str(exc)
        shutil.rmtree(entry / "tree")
        os.rename(checkout, entry / "tree")
        (entry / "commit-time").write_text(f"{when}\n")
    elif key.startswith("archive-"):
        sha256 = key.removeprefix("archive-")
        archive = entry / ARCHIVE_BYTES
        if archive.is_symlink() or not archive.is_file():
            return "it holds no archive to check its tree against (fetched by an older envlock)"
        if (found := file_sha256(str(archive))) != sha256:
            return f"its {ARCHIVE_BYTES} has sha256 {found}, not {sha256}"
        try:
            archives.unpack(archive, scratch / "tree", what=what)
        except SourceError as exc:
            return exc.message
        shutil.rmtree(entry / "tree")
        os.rename(scratch / "tree", entry / "tree")  # what the archive unpacks to, not the files as given
    else:
        return None
    (entry / "tree-digest").write_text(tree_digest(entry / "tree", links_inside=False) + "\n")
    return None


def snapshot_path(store: Store, folder: Path, *, name: str | None = None,
                  links_inside: bool = True) -> tuple[Path, str]:
    """Copy a local tree into ``sources/path-<digest>``; return (tree, digest).

    ``SourceTreeError`` (named ``name``) if a symlink in it leads out of it, unless not
    ``links_inside`` (a git source's override: as for its commit, a link out is refused
    where a build reads it, see ``build.plan``).
    """
    if not folder.is_dir():
        raise SourceError(f"{folder}: source directory does not exist")
    digest = tree_digest(folder, name=name, links_inside=links_inside)
    key = digest.removeprefix("sha256:")
    entry = store.path("sources", f"path-{key}")
    if not (entry / "tree").is_dir():
        with store.new_entry("sources", f"path-{key}") as work:
            copy_tree(folder, work / "tree")
            found = tree_digest(work / "tree", links_inside=False)
            if found != digest:
                raise SourceError(f"{folder}: changed while it was copied ({digest} -> {found})")
    return entry / "tree", digest


# -- archives ----------------------------------------------------------------

#: Far above any source archive (cutlass's is ~100 MB): a body past it is no archive.
ARCHIVE_LIMIT = 8 << 30
#: The file of an archive entry that keeps the archive's own bytes (``sources/archive-<sha256>/archive``).
ARCHIVE_BYTES = "archive"


@dataclass(frozen=True)
class ArchiveCheckout:
    """A tar archive's bytes (by sha256) unpacked into the store."""

    sha256: str
    tree: Path
    tree_digest: str
    downloaded: int = 0  # bytes received this run (0: the store had it)


def _download(url: str, into: Path) -> tuple[str, int]:
    """``url``'s bytes into file ``into``; (their sha256, their size). ``SourceError`` when it cannot."""
    from envlock.net import http  # socket and ssl: only a download needs them

    hasher = hashlib.sha256()
    size = 0
    try:
        with http.open_stream(url) as body, into.open("wb") as fh:
            for chunk in body.chunks:
                size += len(chunk)
                if size > ARCHIVE_LIMIT:
                    raise SourceError(f"{redact(url)}: sent more than {ARCHIVE_LIMIT} bytes, more than any source "
                                      "archive; read no further, nothing was kept")
                hasher.update(chunk)
                fh.write(chunk)
    except http.HttpError as exc:
        raise SourceError(f"{exc.url}: cannot download the archive ({exc.reason})") from None
    return hasher.hexdigest(), size


def fetch_archive(store: Store, url: str, sha256: str | None = None, *,
                  fetch_from: str | None = None) -> ArchiveCheckout:
    """The tar archive at ``url`` unpacked into the store (``sources/archive-<sha256>``), held to
    ``sha256`` (None: whatever it holds, hashed now, for the lock to record). ``fetch_from``: where to
    download it instead (a mirror: the sha256 is checked either way)."""
    if sha256 is not None and (store.path("sources", f"archive-{sha256}") / "tree").is_dir():
        return _archive_entry(store, sha256)
    scratch = store.temp_dir("archive")
    try:
        part = scratch / "archive"
        actual, size = _download(fetch_from or url, part)
        if sha256 is not None and actual != sha256:
            got = f" (from {redact(fetch_from)})" if fetch_from else ""
            raise SourceError(f"{redact(url)}: the archive{got} has sha256 {actual}, expected {sha256}; refused, "
                              "nothing was unpacked (the bytes at that URL changed, or are not the pinned ones)")
        return replace(store_archive(store, url, part, actual, what=redact(url)), downloaded=size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def store_archive(store: Store, url: str, part: Path, sha256: str, *, what: str) -> ArchiveCheckout:
    """The archive file ``part`` (moved), whose bytes hash to ``sha256`` (the caller checked), unpacked into
    ``sources/archive-<sha256>`` (``archives.unpack``: ``SourceError`` naming ``what`` and the first
    member that could escape). Its bytes are kept beside the tree (``archive``): ``cache push``
    uploads them, and a cache's copy is held to the lock's sha256 as a download is."""
    entry = store.path("sources", f"archive-{sha256}")
    if not (entry / "tree").is_dir():
        with store.new_entry("sources", f"archive-{sha256}") as work:
            archives.unpack(part, work / "tree", what=what)
            # Links out are refused where a build reads it (build.plan), as for a git checkout.
            (work / "tree-digest").write_text(tree_digest(work / "tree", links_inside=False) + "\n")
            (work / "url").write_text(redact(url) + "\n")  # for people: no token
            os.replace(part, work / ARCHIVE_BYTES)  # same file system (the store's tmp/): a rename
    return _archive_entry(store, sha256)


def _archive_entry(store: Store, sha256: str) -> ArchiveCheckout:
    entry = store.path("sources", f"archive-{sha256}")
    return ArchiveCheckout(sha256, entry / "tree", (entry / "tree-digest").read_text().strip())


# -- the stage ---------------------------------------------------------------


def prepare(
    spec: SourceSpec,
    store: Store,
    workspace_root: Path,
    *,
    commit: str | None = None,
    override: Path | None = None,
    fetch_from: str | None = None,
) -> PreparedSource:
    """Fetch or snapshot one source into the store.

    ``commit``: the commit the lock already recorded for a non-hex ``rev`` (so a branch is
    resolved once, at lock time); without it a branch or tag is resolved now. ``override``:
    a local tree used instead of the pin (the result's ``notice`` says so). ``fetch_from``:
    a mirror of the git URL to fetch the pinned commit from (the lock still names the
    spec's URL: the commit id is verified either way).
    """
    if spec.git is not None:
        rev = spec.rev or "HEAD"
        pinned = commit or resolve_rev(spec.git, rev, store=store, fetch_from=fetch_from)
        requested = None if rev == pinned else rev
        if override is not None:
            # Like the commit it stands in for: a link out is refused where a build reads it.
            tree, digest = snapshot_path(store, override, name=f"--override-source {spec.name}={override}",
                                         links_inside=False)
            return PreparedSource(
                spec.name,
                "git",
                spec.git,
                tree,
                digest,
                commit=pinned,
                requested_rev=requested,
                override=override,
            )
        co = checkout(store, spec.git, pinned, fetch_from=fetch_from)
        return PreparedSource(
            spec.name,
            "git",
            spec.git,
            co.tree,
            co.tree_digest,
            commit=co.commit,
            commit_time=co.commit_time,
            requested_rev=requested,
        )
    assert spec.path is not None
    folder = override if override is not None else workspace_root / spec.path
    name = f"sources.{spec.name}.path: {spec.path}" if override is None else f"--override-source {spec.name}={override}"
    if override is None and (out := leaves(workspace_root, spec.path)) is not None:
        raise SourceError(f"{name}: a symbolic link takes it out of the workspace (to {out}); expected a folder "
                          "inside the workspace")
    tree, digest = snapshot_path(store, folder, name=name)
    return PreparedSource(spec.name, "path", spec.path, tree, digest, override=override)
