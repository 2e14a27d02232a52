"""The bundle format: store entries and a lock carried outside a store, with a manifest.

A bundle is a folder or an uncompressed tar holding::

    envlock-bundle.json           the manifest (below)
    pylock.ENV.toml               the lock the bundle was made for
    store/<kind>/<key>/<path>     the files of each store entry it carries

The manifest (``format = "envlock-bundle"``, ``version = 1``) names the env, the lock (its
member name and sha256) and every entry by kind and key, with, for each, its files (path
relative to the entry, sha256, size, executable bit), its folders and its symlinks (path,
target). A bundle is input from anyone, so readers refuse anything else, by name: a manifest out of
format (``Bundle.from_dict``: an unknown key, a value of another type, an env that is no env name, a
path listed twice or running through a link or file of its entry, a link that leads out on paper), a
tar cut short or holding a member twice, a member the manifest does not list, a file whose bytes are
not its sha256, a name that is absolute or holds ``..``, and in a tar, any member that is not a
regular file or a folder (links, devices, FIFOs). Symlinks live only in the manifest, and are made
after every file of their entry, in real folders of it only (``bundleio.make_folders``); once an
entry is made, an lstat walk holds it to its manifest and follows each link on disk
(``bundleio.assembled_problem``).

This module is the format: the manifest's values, read and checked, and what an entry's kind and
key say of its files (``entry_problem``). ``envlock.store.bundleio`` reads and writes bundles.
``envlock export`` writes one, ``envlock import`` reads one; a binary cache serves the same
manifest and members over HTTP.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock.errors import StoreError, UsageError
from envlock.model.jsondoc import json_doc
from envlock.store.trees import tree_digest
from envlock.workspace import check_env_name

_HEX64 = re.compile(r"[0-9a-f]{64}")
FORMAT = "envlock-bundle"
VERSION = 1
MANIFEST = "envlock-bundle.json"


@dataclass(frozen=True)
class FileMember:
    """A file of a bundle entry, as the manifest lists it: its path in the entry, sha256, size and executable bit."""

    path: str  # relative to its entry, '/'-separated
    sha256: str
    size: int
    executable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class LinkMember:
    """A symlink of a bundle entry, as the manifest lists it: its path in the entry and its target."""

    path: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class BundleEntry:
    """One store entry: ``kind/key`` and what is in it."""

    kind: str
    key: str
    files: tuple[FileMember, ...]
    dirs: tuple[str, ...] = ()
    links: tuple[LinkMember, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def member(self, rel: str) -> str:
        """The bundle member name of the entry's file ``rel``."""
        return f"store/{self.kind}/{self.key}/{rel}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class Bundle:
    """The manifest of a bundle (``to_dict`` is its JSON)."""

    env: str
    lock: str  # member name of the lock
    lock_sha256: str
    label: str  # how the lock was named when exported (PATH, PATH@REV)
    entries: tuple[BundleEntry, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "env": self.env,
                "lock": {"path": self.lock, "sha256": self.lock_sha256, "label": self.label},
                "entries": [e.to_dict() for e in self.entries]}

    def members(self) -> dict[str, str]:
        """Every file member's name -> sha256 (the lock's too)."""
        out = {self.lock: self.lock_sha256}
        for e in self.entries:
            out.update({e.member(f.path): f.sha256 for f in e.files})
        return out

    @classmethod
    def from_dict(cls, doc: Any, origin: str) -> Bundle:
        """Read a manifest, refusing (``StoreError`` naming the key path, what was found and what was
        expected) anything that does not fit the format: a missing or unknown key, a value of another
        type, a size that is no whole number, an env that is no env name, a path that is absolute or
        holds ``..``, and an entry whose paths run through one of its links or files."""
        top = _table(doc, "", _TOP, origin)
        if top["format"] != FORMAT or top["version"] != VERSION:
            raise StoreError(f"{origin}: format {top['format']!r} version {top['version']!r}; "
                             f"expected {FORMAT!r} version {VERSION}")
        env = _text(top["env"], "env", origin)
        try:
            check_env_name(env)
        except UsageError:
            raise StoreError(f"{origin}: env: found {env!r}; expected an env name (letters, digits, '.', '_', "
                             "'-')") from None
        lock = _table(top["lock"], "lock", _LOCK, origin)
        entries = tuple(_entry(e, f"entries[{i}]", origin) for i, e in enumerate(_array(top["entries"], "entries",
                                                                                        origin)))
        seen: set[tuple[str, str]] = set()
        for i, e in enumerate(entries):
            if (e.kind, e.key) in seen:
                raise StoreError(f"{origin}: entries[{i}]: {e.kind}/{e.key} is listed twice")
            seen.add((e.kind, e.key))
        return cls(env, _name(_text(lock["path"], "lock.path", origin), "lock.path", origin),
                   _sha(lock["sha256"], "lock.sha256", origin), _text(lock.get("label", ""), "lock.label", origin),
                   entries)


#: Each object of a manifest: its keys, required ones first (``_table``).
_TOP = (("entries", "env", "format", "lock", "version"), ())
_LOCK = (("path", "sha256"), ("label",))
_ENTRY = (("files", "key", "kind"), ("dirs", "links"))
_FILE = (("path", "sha256", "size"), ("executable",))
_LINK = (("path", "target"), ())
#: What a bundle carries: enough to sync (wheels) and to rebuild (builds, sources) offline.
KINDS = ("builds", "sources", "wheels")
#: A ``sources`` entry's key, as ``sources`` and ``patchapply`` name them.
_SOURCE_KEY = re.compile(r"git-[0-9a-f]{40}|(path|archive|patched)-[0-9a-f]{64}")


def _json(value: object) -> str:
    """A JSON value as a message names what was found."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _where(key: str) -> str:
    return f"{key}: " if key else ""


def _table(value: object, key: str, keys: tuple[tuple[str, ...], tuple[str, ...]], origin: str) -> dict[str, Any]:
    """``value`` as an object of ``keys`` (required, optional): none missing, none other."""
    required, optional = keys
    if not isinstance(value, dict):
        raise StoreError(f"{origin}: {_where(key)}found {_json(value)}; expected an object")
    for name in value:
        if name not in (*required, *optional):
            raise StoreError(f"{origin}: {_where(key)}unknown key {name!r}; expected only "
                             f"{', '.join(sorted((*required, *optional)))}")
    for name in required:
        if name not in value:
            raise StoreError(f"{origin}: {_where(key)}key {name!r} missing; expected a manifest written by "
                             "`envlock export`")
    return value


def _array(value: object, key: str, origin: str) -> list[Any]:
    if not isinstance(value, list):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected an array")
    return value


def _text(value: object, key: str, origin: str) -> str:
    if not isinstance(value, str):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected a string")
    return value


def _sha(value: object, key: str, origin: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected 64 lowercase hex digits (a sha256)")
    return value


def _size(value: object, key: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected a whole number of bytes (0 or more)")
    return value


def _flag(value: object, key: str, origin: str) -> bool:
    if not isinstance(value, bool):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected true or false")
    return value


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a member name (absolute, ``..``, empty parts), or None."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return "an absolute or malformed path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "a path with '..', '.' or an empty part"
    return None


def _name(name: str, key: str, origin: str) -> str:
    if (problem := name_problem(name)) is not None:
        raise StoreError(f"{origin}: {key}: {name!r} is {problem}; expected a relative path inside the bundle")
    return name


def _entry(doc: Any, key: str, origin: str) -> BundleEntry:
    doc = _table(doc, key, _ENTRY, origin)
    kind, entry_key = _text(doc["kind"], f"{key}.kind", origin), _text(doc["key"], f"{key}.key", origin)
    if kind not in KINDS:
        raise StoreError(f"{origin}: {key}.kind: found {kind!r}; expected {', '.join(KINDS[:-1])} or {KINDS[-1]}")
    if kind != "sources":
        _sha(entry_key, f"{key}.key", origin)
    elif not _SOURCE_KEY.fullmatch(entry_key):
        raise StoreError(f"{origin}: {key}.key: found {entry_key!r}; expected git-<commit>, path-<digest>, "
                         "archive-<sha256> or patched-<digest>")
    files = []
    for i, f in enumerate(_array(doc["files"], f"{key}.files", origin)):
        where = f"{key}.files[{i}]"
        f = _table(f, where, _FILE, origin)
        files.append(FileMember(_name(_text(f["path"], f"{where}.path", origin), f"{where}.path", origin),
                                _sha(f["sha256"], f"{where}.sha256", origin), _size(f["size"], f"{where}.size", origin),
                                _flag(f.get("executable", False), f"{where}.executable", origin)))
    dirs = [_name(_text(d, f"{key}.dirs[{i}]", origin), f"{key}.dirs[{i}]", origin)
            for i, d in enumerate(_array(doc.get("dirs", []), f"{key}.dirs", origin))]
    links = []
    for i, ln in enumerate(_array(doc.get("links", []), f"{key}.links", origin)):
        where = f"{key}.links[{i}]"
        ln = _table(ln, where, _LINK, origin)
        links.append(LinkMember(_name(_text(ln["path"], f"{where}.path", origin), f"{where}.path", origin),
                                _text(ln["target"], f"{where}.target", origin)))
    entry = BundleEntry(kind, entry_key, tuple(files), tuple(dirs), tuple(links))
    if problem := _layout_problem(entry):
        raise StoreError(f"{origin}: {key}: {problem}")
    return entry


def _layout_problem(entry: BundleEntry) -> str | None:
    """Why ``entry``'s paths cannot be made as listed: a path listed twice, one that runs through a
    link or a file of the entry, a link whose target is absolute, empty or leads out on paper (None: none).
    What its links lead to on disk is checked once they are made (``assembled_problem``)."""
    what: dict[str, str] = {}
    for noun, paths in (("file", [f.path for f in entry.files]), ("folder", entry.dirs),
                        ("symlink", [ln.path for ln in entry.links])):
        for path in paths:
            if path in what:
                return f"{entry.kind}/{entry.key}/{path} is listed twice"
            what[path] = noun
    for path, noun in what.items():
        parts = path.split("/")
        for n in range(1, len(parts)):
            if (through := what.get("/".join(parts[:n]))) in ("file", "symlink"):
                made = "link" if noun == "symlink" else noun
                return (f"{noun} {entry.kind}/{entry.key}/{path} runs through the {through} {'/'.join(parts[:n])}; "
                        f"refused (a {made} is made only in real folders of its entry)")
    for link in entry.links:
        lands = posixpath.normpath(posixpath.join(posixpath.dirname(link.path), link.target))
        if not link.target or "\0" in link.target or link.target.startswith("/") or lands == ".." or \
                lands.startswith("../"):
            return (f"symlink {entry.kind}/{entry.key}/{link.path} -> {link.target} leads out of its entry; expected "
                    "links that stay inside it")
    return None


def manifest_bytes(bundle: Bundle) -> bytes:
    return (json.dumps(bundle.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def entry_problem(kind: str, key: str, folder: Path, files: Mapping[str, str]) -> str | None:
    """Why an entry just assembled is not what its kind and key say (``files``: rel -> sha256), or None.

    A wheel's key is its sha256; a build's record names its wheel's sha256; a source tree
    records its own digest. What is checked here is what a forged manifest could not keep
    consistent with the lock it came with.
    """
    if kind in ("wheels", "builds") and not _HEX64.fullmatch(key):
        return f"{kind}/{key}: expected a key of 64 hex digits (a sha256)"
    if kind == "wheels":
        if not files:
            return f"wheels/{key}: no wheel in it"
        wrong = [rel for rel, sha in files.items() if sha != key]
        return f"wheels/{key}: file {wrong[0]} has sha256 {files[wrong[0]]}" if wrong else None
    if kind == "builds":
        try:
            info = json.loads((folder / "wheel.json").read_text())
            wheel, sha = str(info["wheel"]), str(info["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            return f"builds/{key}: no readable wheel.json"
        return None if files.get(wheel) == sha else f"builds/{key}: wheel.json names {wheel} sha256 {sha}, not in it"
    if kind == "sources" and (not (folder / "tree").is_dir() or (folder / "tree").is_symlink()):
        return f"sources/{key}: no tree in it"
    if kind == "sources":
        if key.startswith("path-"):  # a snapshot is keyed by its digest
            recorded = "sha256:" + key.removeprefix("path-")
        else:
            try:
                recorded = (folder / "tree-digest").read_text(encoding="utf-8").strip()
            except (OSError, ValueError):
                return f"sources/{key}: no readable tree-digest record"
        found = tree_digest(folder / "tree", links_inside=False)
        return None if found == recorded else f"sources/{key}: tree digest {found}, its record says {recorded}"
    return None
