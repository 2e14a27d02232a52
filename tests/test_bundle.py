"""The bundle format (``envlock.store.bundle``): the manifest read back as written, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envlock.errors import StoreError
from envlock.store.bundle import Bundle, BundleEntry, FileMember, LinkMember, name_problem, open_bundle, open_writer

SHA = "a" * 64


def test_a_manifest_reads_back_as_written() -> None:
    entry = BundleEntry("sources", "git-" + "b" * 40, (FileMember("tree/x.py", SHA, 3, True),), ("tree",),
                        (LinkMember("tree/y", "x.py"),))
    bundle = Bundle("e", "pylock.e.toml", SHA, "locks/pylock.e.toml@HEAD", (entry,))
    assert Bundle.from_dict(json.loads(json.dumps(bundle.to_dict())), "m") == bundle
    assert bundle.members() == {"pylock.e.toml": SHA, f"store/sources/git-{'b' * 40}/tree/x.py": SHA}


@pytest.mark.parametrize(("name", "problem"), [
    ("store/wheels/x/y.whl", None),
    ("../x", "a path with '..', '.' or an empty part"),
    ("a/./b", "a path with '..', '.' or an empty part"),
    ("a//b", "a path with '..', '.' or an empty part"),
    ("/abs", "an absolute or malformed path"),
    ("a\\b", "an absolute or malformed path"),
    ("", "an absolute or malformed path"),
])
def test_member_names(name: str, problem: str | None) -> None:
    assert name_problem(name) == problem


def _doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {"format": "envlock-bundle", "version": 1, "env": "e",
                              "lock": {"path": "pylock.e.toml", "sha256": SHA, "label": "x"}, "entries": []}
    doc.update(changes)
    return doc


def _entry(files: tuple[str, ...] = (), dirs: tuple[str, ...] = (), links: tuple[tuple[str, str], ...] = ()
           ) -> dict[str, object]:
    return {"kind": "sources", "key": "path-" + SHA, "dirs": list(dirs),
            "files": [{"path": f, "sha256": SHA, "size": 1, "executable": False} for f in files],
            "links": [{"path": p, "target": t} for p, t in links]}


K = f"sources/path-{SHA}"


@pytest.mark.parametrize(("doc", "message"), [
    (_doc(version=2), "m: format 'envlock-bundle' version 2; expected 'envlock-bundle' version 1"),
    (_doc(lock={"path": "pylock.e.toml", "sha256": "XYZ"}),
     "m: lock.sha256: found 'XYZ'; expected 64 lowercase hex digits (a sha256)"),
    (_doc(entries=[{"kind": "wheels", "key": SHA, "files": [], "links": [{"path": "l", "target": "../../etc"}]}]),
     f"m: entries[0]: symlink wheels/{SHA}/l -> ../../etc leads out of its entry; expected links that stay inside it"),
    (_doc(entries=[{"kind": "wheels", "key": SHA, "files": [{"path": "f", "sha256": SHA, "size": "big"}]}]),
     "m: entries[0].files[0].size: found 'big'; expected a whole number of bytes (0 or more)"),
    (_doc(entries=[{"kind": "wheels", "key": SHA}]),
     "m: entries[0]: key 'files' missing; expected a manifest written by `envlock export`"),
    (_doc(entries=[{"kind": "wheels", "key": "..", "files": []}]),
     "m: entries[0].key: found '..'; expected 64 lowercase hex digits (a sha256)"),
    (_doc(entries=[{"kind": "sources", "key": "../x", "files": []}]),
     "m: entries[0].key: found '../x'; expected git-<commit>, path-<digest>, archive-<sha256> or patched-<digest>"),
    (_doc(entries=[_entry(), _entry()]), f"m: entries[1]: {K} is listed twice"),
    (_doc(entries="all"), "m: entries: found 'all'; expected an array"),
    (_doc(env=None), "m: env: found null; expected a string"),
    ([], "m: found an array; expected an object"),
    (_doc(entries=[_entry(files=("a", "a"))]), f"m: entries[0]: {K}/a is listed twice"),
    (_doc(entries=[_entry(files=("a",), links=(("a", "b"),))]), f"m: entries[0]: {K}/a is listed twice"),
    (_doc(entries=[_entry(files=("a", "a/b"))]),
     f"m: entries[0]: file {K}/a/b runs through the file a; refused (a file is made only in real folders of its "
     "entry)"),
    (_doc(entries=[_entry(dirs=("l/d",), links=(("l", "."),))]),
     f"m: entries[0]: folder {K}/l/d runs through the symlink l; refused (a folder is made only in real folders "
     "of its entry)"),
    (_doc(entries=[_entry(links=(("u", "."), ("u/ESC", "..")))]),
     f"m: entries[0]: symlink {K}/u/ESC runs through the symlink u; refused (a link is made only in real folders "
     "of its entry)"),
    (_doc(entries=[_entry(links=(("l", "/etc"),))]),
     f"m: entries[0]: symlink {K}/l -> /etc leads out of its entry; expected links that stay inside it"),
    (_doc(entries=[_entry(links=(("l", ""),))]),
     f"m: entries[0]: symlink {K}/l ->  leads out of its entry; expected links that stay inside it"),
], ids=["version", "lock-sha", "link-out", "size-text", "no-files", "key-dotdot", "source-key", "entry-twice",
        "entries-text", "env-null", "not-object", "file-twice", "file-and-link", "through-file", "dir-through-link",
        "link-through-link", "link-absolute", "link-empty"])
def test_a_manifest_out_of_format_is_refused(doc: dict[str, object], message: str) -> None:
    with pytest.raises(StoreError) as info:
        Bundle.from_dict(doc, "m")
    assert info.value.message == message


@pytest.mark.parametrize("name", ["out", "out.tar"])
def test_a_failed_write_leaves_nothing(tmp_path: Path, name: str) -> None:
    with pytest.raises(RuntimeError), open_writer(tmp_path / name) as writer:
        writer.add_bytes("a", b"x")
        raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_bundle_with_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link").symlink_to("/etc/passwd")
    with pytest.raises(StoreError) as info, open_bundle(tmp_path / "b"):
        pass
    assert info.value.message == (f"{tmp_path / 'b'}: member link is a symlink; refused (a bundle holds regular "
                                  "files and folders only)")


@pytest.mark.parametrize(("kind", "key", "files", "problem"), [
    ("wheels", "x", {"a.whl": SHA}, "wheels/x: expected a key of 64 hex digits (a sha256)"),
    ("wheels", SHA, {}, f"wheels/{SHA}: no wheel in it"),
    ("wheels", SHA, {"a.whl": "b" * 64}, f"wheels/{SHA}: file a.whl has sha256 {'b' * 64}"),
    ("wheels", SHA, {"a.whl": SHA}, None),
    ("builds", SHA, {}, f"builds/{SHA}: no readable wheel.json"),
])
def test_an_entry_is_held_to_its_key(tmp_path: Path, kind: str, key: str, files: dict[str, str],
                                     problem: str | None) -> None:
    from envlock.store.bundle import entry_problem

    assert entry_problem(kind, key, tmp_path, files) == problem
